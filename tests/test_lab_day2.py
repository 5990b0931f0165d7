"""`lab reboot` and `lab upgrade-driver` (issue #15): what a host reboot and a host driver upgrade do to
the node and its containers, run with real bash in the lab's namespaces. Messages quoted from
pve-container (PVE::LXC::vm_start -> update_lxc_config -> Tools::get_device_mode_and_rdev) and
pve-manager (PVE::API2::Nodes startall: "Starting CT $vmid", "Starting CT $vmid failed: $status")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.lab.commands import write_node_bin
from provisioner.lab.commands.installer import build_run, run_name
from provisioner.lab.day2 import reboot, start_order, upgrade_driver
from provisioner.lab.lab import Lab
from provisioner.lab.sandbox import node_argv, node_env, record_host_ns
from provisioner.lab.state import LabState
from provisioner.proxmox.lxc_conf import LxcConfig
from tests.support.require import require

pytestmark = pytest.mark.timeout(300)

BOOT_UNIT = """[Unit]
Description=LAB test: NVIDIA device nodes before guests start
Before=pve-guests.service

[Service]
Type=oneshot
ExecStart=/usr/bin/nvidia-modprobe -u -c=0
ExecStart=/usr/bin/nvidia-smi -pm 1
RemainAfterExit=yes

[Install]
WantedBy=multi-user.target
"""


#: pve-container src/PVE/LXC/Tools.pm get_device_mode_and_rdev: die "Device $path does not exist\n"
MISSING_AFTER_BOOT = {f"Device {p} does not exist" for p in (
    *(f"/dev/nvidia{i}" for i in range(8)), "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")}


def make_lab(root: Path, profile: str = "rtxpro6000-8x") -> LabState:
    require(os.geteuid() == 0, "the lab sandboxes need root (mount namespaces, mknod)")
    require(shutil.which("unshare") is not None, "util-linux unshare is not installed")
    state = Lab(root, [], profile=profile).create_state()
    write_node_bin(state.root)
    record_host_ns(state.root)
    return state


def node(state: LabState, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(node_argv(state, ["bash", "-c", script]), env=node_env(state), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=180, check=False)


def ct(state: LabState, vmid: int, script: str) -> subprocess.CompletedProcess[str]:
    from provisioner import quoting

    return node(state, quoting.join(quoting.pct_exec(vmid, quoting.bash_lc(script))))


def add_ct(state: LabState, vmid: int, *, gpus: int = 0, onboot: bool = True, order: int | None = None,
           running: bool = True) -> None:
    opts: dict[str, str | int] = {"arch": "amd64", "hostname": f"ct{vmid}", "ostype": "ubuntu", "memory": 8192,
                                  "rootfs": f"local-lvm:vm-{vmid}-disk-0,size=8G"}
    if onboot:
        opts["onboot"] = 1
    if order is not None:
        opts["startup"] = f"order={order}"
    for i in range(gpus):
        opts[f"dev{i}"] = f"/dev/nvidia{i},mode=0666"
    if gpus:
        opts[f"dev{gpus}"] = "/dev/nvidiactl,mode=0666"
        opts[f"dev{gpus + 1}"] = "/dev/nvidia-uvm,mode=0666"
        opts[f"dev{gpus + 2}"] = "/dev/nvidia-uvm-tools,mode=0666"
    state.write_conf(vmid, LxcConfig.from_options(opts))
    state.set_status(vmid, "running" if running else "stopped")


def test_start_order_follows_pve_guests(tmp_path: Path) -> None:
    """get_start_stop_list: onboot only; order= ascending, unset = LONG_MAX (last); then vmid."""
    state = LabState.create(tmp_path / "lab")
    add_ct(state, 300)
    add_ct(state, 200, order=2)
    add_ct(state, 250, order=1)
    add_ct(state, 100, onboot=False)
    add_ct(state, 210)
    assert start_order(state) == [250, 200, 210, 300]


def test_reboot_without_boot_unit_devn_container_fails_with_pve_containers_message(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab")
    add_ct(state, 200, gpus=8)
    add_ct(state, 150, order=1)  # no GPU: starts, and first
    add_ct(state, 160, onboot=False)
    before = node(state, "ls /dev/nvidia-uvm /dev/nvidia0 && grep -c nvidia-uvm /proc/devices")
    assert before.returncode == 0
    report = reboot(state)
    # foreach_passthrough_device walks `keys %$conf` (Perl hash order): any missing devN may be the one named
    missing = MISSING_AFTER_BOOT
    assert report.started == [150]
    assert len(report.failed) == 1 and report.failed[0][0] == 200 and report.failed[0][1] in missing
    assert report.log == ["Starting CT 150", "Starting CT 200", f"Starting CT 200 failed: {report.failed[0][1]}"]
    assert [state.get_status(v).status for v in (150, 160, 200)] == ["running", "stopped", "stopped"]
    # the node after boot: nvidia.ko loaded, nvidia-uvm not, no device node until something creates one
    r = node(state, "cat /sys/module/nvidia/version; ls /dev/nvidia* 2>&1; grep -c nvidia-uvm /proc/devices; "
                    "nvidia-smi -q | grep -m1 'Persistence Mode'; ls /dev/nvidia0 /dev/nvidiactl; "
                    "ls /dev/nvidia-uvm 2>&1")
    lines = r.stdout.splitlines()
    assert lines[0] == "595.71.05"
    assert lines[1] == "ls: cannot access '/dev/nvidia*': No such file or directory"
    assert lines[2] == "0"
    assert lines[3].endswith(": Disabled")  # persistence mode resets with the driver load
    assert lines[4:6] == ["/dev/nvidia0", "/dev/nvidiactl"]  # nvidia-smi (NVML) ran nvidia-modprobe
    assert lines[6] == "ls: cannot access '/dev/nvidia-uvm': No such file or directory"
    # the start error as pct prints it
    r = node(state, "pct start 200; echo rc=$?")
    assert r.stdout.splitlines()[-1] == "rc=255"
    assert r.stdout.splitlines()[-2] in {"Device /dev/nvidia-uvm does not exist",
                                         "Device /dev/nvidia-uvm-tools does not exist"}


def test_reboot_with_boot_unit_starts_the_gpu_container(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab")
    add_ct(state, 200, gpus=8)
    unit = state.root / "etc" / "systemd" / "system" / "lab-nvidia-nodes.service"
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text(BOOT_UNIT)
    r = node(state, "systemctl enable lab-nvidia-nodes.service; echo rc=$?; systemctl is-enabled lab-nvidia-nodes")
    assert r.stdout.endswith("rc=0\nenabled\n"), r.stdout
    report = reboot(state)
    assert report.units_before_guests == [("lab-nvidia-nodes.service", 0)]
    assert report.started == [200] and report.failed == []
    assert state.settings().persistence is True
    r = ct(state, 200, "ls /dev/nvidia-uvm /dev/nvidia7")
    assert r.stdout == "/dev/nvidia-uvm\n/dev/nvidia7\n", r.stdout
    assert state.settings().boots == 1


def test_upgrade_driver_containers_keep_their_userspace(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab")
    add_ct(state, 200, gpus=8)
    (state.ct_root(200) / "tmp").mkdir(exist_ok=True)
    (state.ct_root(200) / "tmp" / run_name("595.71.05")).write_bytes(build_run("595.71.05"))
    r = ct(state, 200, f"apt-get install -y kmod pkg-config >/dev/null && sh /tmp/{run_name('595.71.05')} "
                       "--silent --no-kernel-modules && nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "595.71.05", r.stdout
    assert upgrade_driver(state, "595.82.01") == ("595.71.05", "595.82.01")
    r = node(state, "cat /sys/module/nvidia/version; head -1 /proc/driver/nvidia/version; "
                    "nvidia-smi --query-gpu=driver_version --format=csv,noheader | sort -u")
    assert r.stdout.splitlines()[0] == "595.82.01"
    assert "Open Kernel Module for x86_64  595.82.01  Release Build" in r.stdout.splitlines()[1]
    assert r.stdout.splitlines()[2] == "595.82.01"
    r = ct(state, 200, "nvidia-smi; echo rc=$?")
    assert r.stdout == ("Failed to initialize NVML: Driver/library version mismatch\n"
                        "NVML library version: 595.71\nrc=18\n")
    # a patch-level change is a mismatch too (570.148.06 vs 570.148.08 in the issue)
    upgrade_driver(state, "595.71.07")
    assert ct(state, 200, "nvidia-smi -L").returncode == 18
    with pytest.raises(ValueError, match="not an NVIDIA driver version"):
        upgrade_driver(state, "595.82.01; reboot")


def test_cli_reboot_and_upgrade_driver_need_a_running_lab(tmp_path: Path) -> None:
    env = dict(os.environ, PROVISIONER_STATE_DIR=str(tmp_path / "state"))
    LabState.create(tmp_path / "lab")
    for args in (["reboot"], ["upgrade-driver", "595.82.01"]):
        r = subprocess.run([sys.executable, "-m", "provisioner", "lab", *args, "--root", str(tmp_path / "lab")],
                           env=env, capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 1 and "LAB: not running" in r.stderr


#: the oneshot unit an admin posted in games-on-whales/wolf PR #361 (2026-02-18), verbatim
WOLF_361_UNIT = """[Unit]
Description=Run nvidia-smi once at boot to initialize GPU
After=systemd-modules-load.service
Before=pve-guests.service

[Service]
Type=oneshot
ExecStart=/usr/bin/nvidia-smi

[Install]
WantedBy=multi-user.target
"""


def test_reboot_with_a_public_nvidia_smi_unit_creates_gpu_nodes_but_not_uvm(tmp_path: Path) -> None:
    """nvidia-smi at boot creates nvidiactl and the GPU nodes (NVML runs nvidia-modprobe) but never the UVM
    nodes, so a devN container that passes /dev/nvidia-uvm still fails, one without it starts (the same
    thread: "I need to execute `nvidia-modprobe -u -m -s -l -c 0` after `nvidia-smi`")."""
    state = make_lab(tmp_path / "lab")
    add_ct(state, 200, gpus=8)  # passes nvidia-uvm too
    opts = {"arch": "amd64", "hostname": "nouvm", "ostype": "ubuntu", "memory": 4096, "onboot": 1,
            "rootfs": "local-lvm:vm-201-disk-0,size=8G", "dev0": "/dev/nvidia0,mode=0666",
            "dev1": "/dev/nvidiactl,mode=0666"}
    state.write_conf(201, LxcConfig.from_options(opts))
    state.set_status(201, "running")
    unit = state.root / "etc" / "systemd" / "system" / "nvidia-smi-boot.service"
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text(WOLF_361_UNIT)
    assert node(state, "systemctl enable nvidia-smi-boot.service 2>/dev/null; echo rc=$?").stdout == "rc=0\n"
    report = reboot(state)
    assert report.units_before_guests == [("nvidia-smi-boot.service", 0)]
    assert report.started == [201]
    assert report.failed in ([(200, "Device /dev/nvidia-uvm does not exist")],
                             [(200, "Device /dev/nvidia-uvm-tools does not exist")])
    assert state.settings().persistence is False  # nvidia-smi alone does not enable persistence mode


@pytest.mark.sshd
def test_cli_upgrade_driver_and_reboot_on_a_running_lab(tmp_path: Path) -> None:
    """`provisioner lab up --profile minors-shuffled`, `lab upgrade-driver`, `lab reboot`, and the node as the
    real OpenSSH client sees it afterwards."""
    require(os.geteuid() == 0, "the lab sandboxes need root (mount namespaces, mknod)")
    require(shutil.which("ssh") is not None, "the OpenSSH client is not installed")
    import json

    root = tmp_path / "lab"
    env = dict(os.environ, PROVISIONER_STATE_DIR=str(tmp_path / "state"))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "provisioner", "lab", *args, "--root", str(root)], env=env,
                              capture_output=True, text=True, timeout=200, check=False)

    up = cli("up", "--profile", "minors-shuffled", "--json")
    assert up.returncode == 0, up.stderr
    ssh = json.loads(up.stdout)["ssh"]
    argv = ["ssh", "-p", str(ssh["port"]), "-i", ssh["key_file"], "-o", f"UserKnownHostsFile={ssh['known_hosts']}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", f"{ssh['user']}@{ssh['host']}"]
    try:
        r = cli("upgrade-driver", "580.95.07")
        assert (r.returncode, r.stdout) == (0, "LAB: host kernel module 580.95.05 -> 580.95.07\n"), r.stderr  # the answer
        assert cli("upgrade-driver", "latest").returncode == 2
        r = cli("reboot")
        assert r.returncode == 0 and r.stdout.startswith("LAB: node rebooted (boot 1)\n"), r.stdout + r.stderr
        r = subprocess.run([*argv, "cat /sys/module/nvidia/version; ls /dev/nvidia* 2>&1; "
                                   "nvidia-smi --query-gpu=index,driver_version --format=csv,noheader; ls /dev"
                                   "/nvidia[0-9]*"], capture_output=True, text=True, timeout=120, check=False)
        assert r.stdout.splitlines() == [
            "580.95.07", "ls: cannot access '/dev/nvidia*': No such file or directory",
            "0, 580.95.07", "1, 580.95.07", "2, 580.95.07", "3, 580.95.07",
            "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"], r.stdout + r.stderr
    finally:
        cli("down")
