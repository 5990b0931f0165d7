"""The lab's node and container sandboxes, its `pct`, driver installer and apt stand-ins (real namespaces, real bash)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.lab.commands.installer import build_run, corrupt, run_name, sha256sum_line
from provisioner.lab.state import LabState
from tests.support.lab import ct, gpu_ct, lab_state, node

pytestmark = pytest.mark.timeout(600)  # a deadline, not a speed check: five lab views under a loaded 2-core CI


def make_lab(root: Path, *scenarios: str) -> LabState:
    return lab_state(root, *scenarios)


def _nodes(text: str) -> dict[str, tuple[int, int, str]]:
    """Parse `stat -c '%n %t %T %a'` lines (major/minor in hex) -> path: (major, minor, octal mode)."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0].startswith("/dev/"):
            out[parts[0]] = (int(parts[1], 16), int(parts[2], 16), parts[3])
    return out


STAT_NVIDIA = "stat -c '%n %t %T %a' /dev/nvidia* 2>/dev/null; true"


def test_node_view_devices_driver_files_and_pve_config(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab")
    gpu_ct(state, running=False)
    r = node(state, f"{STAT_NVIDIA}; echo ---; cat /sys/module/nvidia/version; head -1 /proc/driver/nvidia/version; "
                    "awk '$2==\"nvidia-uvm\"{print $1}' /proc/devices; stat -fc %T /sys/fs/cgroup; "
                    "cat /etc/pve/lxc/200.conf; echo ---; pveversion; command -v pct nvidia-smi")
    assert r.returncode == 0, r.stdout
    nodes = _nodes(r.stdout)
    for i in range(8):
        assert nodes[f"/dev/nvidia{i}"] == (195, i, "666")
    assert nodes["/dev/nvidiactl"][:2] == (195, 255)
    assert nodes["/dev/nvidia-modeset"][:2] == (195, 254)
    assert nodes["/dev/nvidia-uvm"][:2] == (511, 0)
    assert nodes["/dev/nvidia-uvm-tools"][:2] == (511, 1)
    after = r.stdout.split("---\n", 1)[1].splitlines()
    assert after[0] == "595.71.05"
    assert after[1].startswith("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  595.71.05")
    assert after[2] == "511"
    assert after[3] == "cgroup2fs"
    conf_text = r.stdout.split("cgroup2fs\n", 1)[1].split("---\n", 1)[0]
    assert conf_text == state.conf_path(200).read_text()
    assert "pve-manager/8.4.1/" in r.stdout
    assert f"{state.root}/bin/pct" in r.stdout
    # nothing leaked into the machine's own view
    assert not Path("/etc/pve/lxc/200.conf").exists()
    assert not Path("/dev/nvidia0").exists() or Path("/dev/nvidia0").is_char_device()


def test_no_uvm_until_nvidia_modprobe(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab", "no-uvm")
    r = node(state, f"{STAT_NVIDIA}; grep -c nvidia-uvm /proc/devices; true")
    assert "/dev/nvidia-uvm" not in _nodes(r.stdout)
    assert r.stdout.strip().endswith("0")
    r = node(state, "nvidia-modprobe -u -c=0 && stat -c '%n %t %T %a' /dev/nvidia-uvm /dev/nvidia-uvm-tools")
    assert r.returncode == 0, r.stdout
    assert _nodes(r.stdout) == {"/dev/nvidia-uvm": (511, 0, "666"), "/dev/nvidia-uvm-tools": (511, 1, "666")}
    r = node(state, "stat -c '%n %t %T' /dev/nvidia-uvm; grep nvidia-uvm /proc/devices")
    assert r.returncode == 0 and "511 nvidia-uvm" in r.stdout
    assert state.settings().host_uvm_nodes


def test_container_sees_only_passed_devices(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab")
    gpu_ct(state, 200)
    raw = [
        ("lxc.cgroup2.devices.allow", "c 195:* rwm"),
        ("lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file"),
        ("lxc.mount.entry", "/dev/nvidiactl dev/nvidiactl none bind,optional,create=file"),
        # bound without a cgroup rule for the uvm major: present but unusable (mode 000)
        ("lxc.mount.entry", "/dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file"),
    ]
    gpu_ct(state, 201, raw=raw, devn=False)
    gpu_ct(state, 202, devn=False)
    r200 = ct(state, 200, f"{STAT_NVIDIA}; head -1 /etc/os-release; ls /etc/pve 2>&1; echo HOME=$HOME")
    assert r200.returncode == 0, r200.stdout
    nodes = _nodes(r200.stdout)
    assert {f"/dev/nvidia{i}" for i in range(8)} <= set(nodes)
    assert nodes["/dev/nvidia3"] == (195, 3, "666")
    assert nodes["/dev/nvidia-uvm"] == (511, 0, "666")
    assert "/dev/nvidia-modeset" not in nodes
    assert 'PRETTY_NAME="Ubuntu 24.04' in r200.stdout
    assert "No such file or directory" in r200.stdout  # /etc/pve is the node's, not the container's
    r201 = ct(state, 201, STAT_NVIDIA)
    assert _nodes(r201.stdout) == {"/dev/nvidia0": (195, 0, "666"), "/dev/nvidiactl": (195, 255, "666"),
                                   "/dev/nvidia-uvm": (511, 0, "0")}
    r202 = ct(state, 202, "ls /dev | tr '\\n' ' '")
    assert r202.returncode == 0
    assert "nvidia" not in r202.stdout and "null" in r202.stdout


def test_pct_errors_push_set_and_listing(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab")
    gpu_ct(state, 200, running=False)
    r = node(state, "pct exec 200 -- true")
    assert r.returncode == 255
    assert r.stdout == "container '200' not running!\n"
    r = node(state, "pct exec 999 -- true")
    assert r.returncode == 255 and "Configuration file 'nodes/pve/lxc/999.conf' does not exist" in r.stdout
    r = node(state, "pct push 200 /etc/hostname /root/x")
    assert r.returncode == 255 and "can only push files to a running CT" in r.stdout
    state.set_status(200, "running")
    from provisioner.lab.sandbox import make_node_fs

    # the node sees only its own root: the file to push lives in the node's /tmp
    (make_node_fs(state.root) / "tmp" / "payload.sh").write_text("#!/bin/sh\necho pushed\n")
    src = "/tmp/payload.sh"
    r = node(state, f"pct push 200 {src} /root/payload.sh --perms 0755 && pct exec 200 -- /root/payload.sh; "
                    "echo rc=$?; pct status 200; pct list")
    assert r.returncode == 0, r.stdout
    assert "pushed\nrc=0\nstatus: running\n" in r.stdout
    assert r.stdout.splitlines()[3].split() == ["VMID", "Status", "Lock", "Name"]
    assert r.stdout.splitlines()[4].split() == ["200", "running", "ct200"]
    assert (state.ct_root(200) / "root/payload.sh").stat().st_mode & 0o777 == 0o755
    r = node(state, "pct exec 200 -- bash -c 'exit 7'")
    assert r.returncode == 7
    r = node(state, "pct set 200 --dev11 /dev/nvidia-modeset,mode=0666 && pct config 200 | grep ^dev11")
    assert r.returncode == 0, r.stdout
    assert r.stdout.strip() == "dev11: /dev/nvidia-modeset,mode=0666"
    # a running CT: PVE 8 cannot hot-plug a device, the new devN waits in [pve:pending] until the restart
    # (pve-container's vmconfig_hotplug_pending); `pct config` shows pending values by default (--current not)
    assert state.read_conf(200).pending().get("dev11") == "/dev/nvidia-modeset,mode=0666"


def test_container_shm_small_and_disk_full(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab", "shm-small", "disk-full")
    gpu_ct(state, 200)
    try:
        r = ct(state, 200, "df -k /dev/shm | tail -1; head -c 10485760 /dev/zero > /opt/big; echo rc=$?")
        assert r.returncode == 0, r.stdout
        assert r.stdout.split()[1] == "65536"  # 64M
        assert "No space left on device" in r.stdout and "rc=1" in r.stdout
    finally:
        from provisioner.lab.sandbox import release_mounts

        release_mounts(state.root)


def test_driver_installer_in_container(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab", "installer-killed")
    gpu_ct(state, 200)
    run = build_run("595.71.05")
    (state.ct_root(200) / "tmp").mkdir(exist_ok=True)
    (state.ct_root(200) / "tmp" / run_name("595.71.05")).write_bytes(run)
    inst = f"sh /tmp/{run_name('595.71.05')}"
    r = ct(state, 200, f"command -v nvidia-smi; {inst} --silent --no-kernel-modules")
    assert r.returncode == 1
    assert "ERROR: Unable to find the module utility `modprobe`" in r.stdout
    r = ct(state, 200, f"apt-get install -y kmod pkg-config >/dev/null && {inst} --silent -z --no-x-check")
    assert r.returncode == 1
    assert "ERROR: Unable to find the kernel source tree for the currently running kernel." in r.stdout
    assert "ERROR: Installation has failed." in r.stdout
    log = (state.ct_root(200) / "var/log/nvidia-installer.log").read_text()
    assert "installer version: 595.71.05" in log and "kernel source tree" in log
    # scenario installer-killed: the first real install dies midway, leaving nvidia-smi without its library
    r = ct(state, 200, f"{inst} --silent --no-kernel-modules")
    assert r.returncode == 137
    r = ct(state, 200, "nvidia-smi")
    assert r.returncode == 12 and "couldn't find libnvidia-ml.so" in r.stdout
    r = ct(state, 200, f"{inst} --silent --no-kernel-modules --log-file-name=/var/log/nv2.log && "
                       "nvidia-smi --query-gpu=index,driver_version --format=csv,noheader")
    assert r.returncode == 0, r.stdout + r.stdout
    assert r.stdout.splitlines()[-8:] == [f"{i}, 595.71.05" for i in range(8)]
    assert "is now complete" in (state.ct_root(200) / "var/log/nv2.log").read_text()
    r = ct(state, 200, f"{inst} --silent --uninstall; command -v nvidia-smi; echo rc=$?")
    assert "rc=1" in r.stdout


def test_driver_mismatch_and_corrupt_download(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab", "driver-mismatch")
    gpu_ct(state, 200)
    r = ct(state, 200, "nvidia-smi")
    assert r.returncode == 18
    assert r.stdout == "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n"
    good = build_run("595.71.05")
    bad = corrupt(good)
    assert len(bad) == len(good)
    published = sha256sum_line(good, "595.71.05")
    (state.ct_root(200) / "tmp" / run_name("595.71.05")).write_bytes(bad)
    (state.ct_root(200) / "tmp" / (run_name("595.71.05") + ".sha256sum")).write_text(published)
    r = ct(state, 200, f"cd /tmp && sha256sum -c {run_name('595.71.05')}.sha256sum; echo rc=$?; "
                       f"sh {run_name('595.71.05')} --silent --no-kernel-modules; echo rc=$?")
    assert f"{run_name('595.71.05')}: FAILED" in r.stdout and "rc=1" in r.stdout
    assert "Error in MD5 checksums" in r.stdout and r.stdout.strip().endswith("rc=2")


def test_apt_lock_scenario(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab", "apt-lock")
    gpu_ct(state, 200)
    for _ in range(2):
        r = ct(state, 200, "apt-get install -y kmod")
        assert r.returncode == 100
        assert "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 1234 (apt-get)" in r.stdout
        assert ("E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), "
                "is another process using it?") in r.stdout
    r = ct(state, 200, "apt-get install -y kmod && lsmod | head -1 && apt-get install -y kmod")
    assert r.returncode == 0
    assert "Setting up kmod (31+20240202-2ubuntu7) ..." in r.stdout
    assert "kmod is already the newest version (31+20240202-2ubuntu7)." in r.stdout
    r = ct(state, 200, "apt-get install -y not-a-package")
    assert r.returncode == 100 and "E: Unable to locate package not-a-package" in r.stdout


def test_container_root_is_one_file_system_and_its_mount_points_are_never_followed(tmp_path: Path) -> None:
    """A real LXC rootfs is one file system (pve-container mounts the volume at rootfs/, LXC pivots into it):
    link(2) between /root and /opt works there, so uv hardlinks from its cache into a venv. In the lab the
    container's root mount is its rootfs directory, the same. The rootfs is the container's to write: a link it
    plants where its view mounts something (here /run -> the node's /etc) fails the command, never followed."""
    state = make_lab(tmp_path / "lab")
    gpu_ct(state)
    r = ct(state, 200, "mkdir -p /root/.cache/uv/x /opt/venv && echo data > /root/.cache/uv/x/f && "
                       "ln /root/.cache/uv/x/f /opt/venv/f && stat -c %h /opt/venv/f && "
                       "df --output=target /root /opt /tmp | tail -n +2 | sort -u")
    assert r.returncode == 0, r.stdout
    links, *targets = r.stdout.split()
    assert links == "2", r.stdout  # one inode, two names: no EXDEV across /root and /opt
    assert targets == ["/"], r.stdout  # /root, /opt and /tmp lie in the root mount
    rootfs = state.ct_root(200)
    assert (rootfs / "opt/venv/f").stat().st_ino == (rootfs / "root/.cache/uv/x/f").stat().st_ino

    run = rootfs / "run"
    run.rmdir()
    run.symlink_to("/etc")
    r = ct(state, 200, "echo reached")
    assert r.returncode != 0 and "reached" not in r.stdout, r.stdout
    assert run.is_symlink() and not (Path("/etc") / ".lab").exists()
