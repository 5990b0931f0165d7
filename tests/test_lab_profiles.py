"""The lab's host profiles (issue #14): each node answers nvidia-smi, /proc, /dev and pveversion
consistently with its profile, run with real bash in the node's namespace (as the SSH endpoint
runs them) and, for one profile, over the lab's real SSH endpoint; pct set/start errors are
pve-container's (quoted from src/PVE/LXC/Tools.pm, src/PVE/LXC.pm)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from provisioner.lab.profiles import PROFILES, get_profile
from provisioner.lab.state import LabState
from provisioner.proxmox.lxc_conf import LxcConfig
from tests.support.lab import ct, lab_down, lab_up, need_namespaces, node
from tests.support.lab import profile_lab as make_lab
from tests.support.require import require

pytestmark = pytest.mark.timeout(240)

#: pve-container src/PVE/LXC/Tools.pm get_device_mode_and_rdev: die "Device $path does not exist\n"
PVE_DEVICE_MISSING = "Device {path} does not exist"


def _sections(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split("@@@ ")[1:]:
        name, _, body = part.partition("\n")
        out[name.strip()] = body
    return out


FACTS = ("nvidia-smi; echo rc=$?", "nvidia-smi -L; echo rc=$?", "nvidia-smi -q", "ls -l /dev/nvidia* 2>&1",
         "cat /proc/driver/nvidia/gpus/*/information", "cat /proc/devices", "pveversion -v",
         "cat /proc/driver/nvidia/version")


def facts(state: LabState) -> dict[str, str]:
    script = "".join(f"echo '@@@ {cmd}'; {cmd}\n" for cmd in FACTS)
    r = node(state, script)
    return _sections(r.stdout)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profile_node_answers_consistently(tmp_path: Path, name: str) -> None:
    p = get_profile(name)
    state = make_lab(tmp_path / "lab", name)
    f = facts(state)
    q = f["nvidia-smi -q"]
    info = f["cat /proc/driver/nvidia/gpus/*/information"]
    ls = f["ls -l /dev/nvidia* 2>&1"]
    devices = f["cat /proc/devices"]
    # the module banner: flavour and architecture
    banner = f["cat /proc/driver/nvidia/version"]
    assert p.driver_version in banner
    assert ("Open Kernel Module for " + p.arch) in banner if p.flavour == "open" else "Open" not in banner
    # every GPU's /proc information names the profile's model and its device minor
    minors = [int(m) for m in re.findall(r"Device Minor: \t (\d+)", info)]
    assert sorted(minors) == sorted(p.minor_of(i) if p.minors else i for i in range(p.gpu_count))
    assert info.count(f"Model: \t\t {p.gpu.name}\n") == p.gpu_count
    # the device nodes: /dev/nvidia<minor>, modeset only where loaded, caps/nvswitch where the board has them
    for i in range(p.gpu_count):
        minor = p.minor_of(i) if p.minors else i
        assert re.search(rf"^crw-rw-rw- 1 root root 195, +{minor} .* /dev/nvidia{minor}$", ls, re.M), ls
    assert ("/dev/nvidia-modeset" in ls) is p.modeset
    assert ("nvidia-modeset" in devices) is p.modeset
    assert ("/dev/nvidia-caps:" in ls) is p.caps
    assert ("/dev/nvidia-nvswitch0" in ls) is (p.nvswitches > 0)
    assert "nvidia-uvm" in devices and "/dev/nvidia-uvm" in ls
    # pveversion -v: the profile's PVE release
    pv = f["pveversion -v"]
    assert pv.startswith(f"proxmox-ve: {'9.1' if p.pve == '9' else p.pve}.0 (running kernel: ")
    if p.pve == "9":
        assert "pve-container: 6.0.18" in pv and "lxc-pve: 6.0.5-1" in pv and "6.14.11-4-pve" in pv
    if p.gpus_fail_init:
        # Blackwell on the proprietary module: the GPUs are probed (/proc lists them) but never initialise
        assert f["nvidia-smi; echo rc=$?"] == "No devices were found\nrc=6\n"
        assert f["nvidia-smi -L; echo rc=$?"] == "No devices were found\nrc=6\n"
        return
    # nvidia-smi -L in index (PCI bus) order, with the profile's name; -q: Minor Number = device minor
    lines = f["nvidia-smi -L; echo rc=$?"].splitlines()
    assert lines[-1] == "rc=0" and len(lines) == p.gpu_count + 1
    assert all(line.startswith(f"GPU {i}: {p.gpu.name} (UUID: GPU-") for i, line in enumerate(lines[:-1]))
    assert re.findall(r"^    Minor Number +: (\d+)$", q, re.M) == [str(p.minor_of(i) if p.minors else i)
                                                                   for i in range(p.gpu_count)]
    assert q.count(f"    Product Name                          : {p.gpu.name}\n") == p.gpu_count
    assert f"Attached GPUs                             : {p.gpu_count}\n" in q
    assert re.search(r"^Driver Version +: " + re.escape(p.driver_version) + "$", q, re.M)
    fabric = re.findall(r"^    Fabric\n        State +: (.*)\n        Status +: (.*)$", q, re.M)
    assert fabric == [("Completed", "Success") if p.nvswitches else ("N/A", "N/A")] * p.gpu_count
    table = f["nvidia-smi; echo rc=$?"]
    assert f"Driver Version: {p.driver_version}" in table and table.endswith("rc=0\n")


def test_minors_shuffled_index_is_not_the_minor(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab", "minors-shuffled")
    r = node(state, "nvidia-smi --query-gpu=index,pci.bus_id,uuid --format=csv,noheader; "
                    "grep -H 'Device Minor' /proc/driver/nvidia/gpus/*/information")
    rows = [line.split(", ") for line in r.stdout.splitlines() if line[:1].isdigit()]
    by_bus = {m.group(1): int(m.group(2)) for m in re.finditer(r"gpus/([0-9a-f:.]+)/information:Device Minor:\s+(\d+)",
                                                               r.stdout)}
    assert [int(i) for i, _, _ in rows] == [0, 1, 2, 3]
    minors = [by_bus[bus.lower().replace("00000000:", "0000:")] for _, bus, _ in rows]
    assert minors == [2, 0, 3, 1]  # index order (PCI bus order) != minor order


def test_fabricmanager_down_shows_in_fabric_state_and_systemctl(tmp_path: Path) -> None:
    state = make_lab(tmp_path / "lab", "h200-hgx-8x", "fabricmanager-down")
    r = node(state, "systemctl is-active nvidia-fabricmanager; echo rc=$?; nvidia-smi -q | grep -A2 '^    Fabric$' "
                    "| head -3; nvidia-smi --query-gpu=fabric.state --format=csv,noheader | sort -u")
    assert r.stdout.startswith("inactive\nrc=3\n    Fabric\n        State")
    assert "State                             : Not Started" in r.stdout
    assert r.stdout.endswith("Not Started\n")
    r = node(state, "systemctl start nvidia-fabricmanager && systemctl is-active nvidia-fabricmanager && "
                    "nvidia-smi --query-gpu=fabric.state,fabric.status --format=csv,noheader | sort -u")
    assert r.stdout == "active\nCompleted, Success\n"
    # a host without NVSwitch has no fabric manager unit at all
    other = make_lab(tmp_path / "lab2", "rtxpro6000-8x")
    r = node(other, "systemctl status nvidia-fabricmanager; echo rc=$?")
    assert r.stdout == "Unit nvidia-fabricmanager.service could not be found.\nrc=4\n"


def _ct(state: LabState, vmid: int = 200) -> None:
    opts: dict[str, str | int] = {"arch": "amd64", "hostname": f"ct{vmid}", "ostype": "ubuntu", "memory": 4096,
                                  "rootfs": f"local-lvm:vm-{vmid}-disk-0,size=8G"}
    state.write_conf(vmid, LxcConfig.from_options(opts))
    state.set_status(vmid, "stopped")


def test_pct_set_devn_missing_node_is_refused_with_pve_containers_message(tmp_path: Path) -> None:
    """pve-container Config.pm update_pct_config: `elsif ($opt =~ m/^dev(\\d+)$/)` validates the path with
    PVE::LXC::Tools::get_device_mode_and_rdev -> die "Device $path does not exist\\n" (pct: exit 255)."""
    state = make_lab(tmp_path / "lab", "h200-hgx-8x")
    _ct(state)
    r = node(state, "pct set 200 --dev0 /dev/nvidia-modeset,mode=0666; echo rc=$?")
    assert r.stdout == PVE_DEVICE_MISSING.format(path="/dev/nvidia-modeset") + "\nrc=255\n"
    assert "dev0" not in state.read_conf(200).options()  # not written (fixed upstream in 556ddd3, 2024-04)
    r = node(state, "pct set 200 --dev0 /dev/nvidia3,mode=0666 --dev1 /dev/nvidia-caps/nvidia-cap1; echo rc=$?")
    assert r.stdout == "rc=0\n"
    assert state.read_conf(200).options()["dev1"] == "/dev/nvidia-caps/nvidia-cap1"


def test_pct_start_missing_devn_node_fails_raw_optional_bind_starts(tmp_path: Path) -> None:
    """PVE::LXC::vm_start -> update_lxc_config stats every devN path before lxc-start: the start task dies
    with "Device /dev/nvidia-uvm does not exist"; a raw `lxc.mount.entry ... bind,optional,create=file`
    of a missing node is LXC's and starts without it."""
    state = make_lab(tmp_path / "lab", "rtxpro6000-8x")
    _ct(state)
    node(state, "pct set 200 --dev0 /dev/nvidia-uvm,mode=0666")
    assert state.read_conf(200).options()["dev0"] == "/dev/nvidia-uvm,mode=0666"
    state.update_settings(host_uvm_nodes=False)  # as after a reboot
    r = node(state, "pct start 200; echo rc=$?")
    assert r.stdout.splitlines()[-2:] == ["Device /dev/nvidia-uvm does not exist", "rc=255"]
    assert state.get_status(200).status == "stopped"
    raw = [("lxc.cgroup2.devices.allow", "c 511:* rwm"),
           ("lxc.mount.entry", "/dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file")]
    opts = {k: v for k, v in state.read_conf(200).options().items() if k != "dev0"}
    state.write_conf(200, LxcConfig.from_options(opts, raw=raw))
    r = node(state, "pct start 200; echo rc=$?; pct exec 200 -- sh -c 'ls /dev/nvidia-uvm; echo x=$?'")
    assert r.stdout.startswith("rc=0\n") and "x=2" in r.stdout, r.stdout
    assert state.get_status(200).status == "running"


@pytest.mark.sshd
def test_lab_up_profile_over_real_ssh(tmp_path: Path) -> None:
    """`provisioner lab up --profile h200-hgx-8x`, then the real OpenSSH client runs the facts on the node."""
    need_namespaces(root=True)
    require(shutil.which("ssh") is not None, "the OpenSSH client is not installed")
    root = tmp_path / "lab"
    env = dict(os.environ, PROVISIONER_STATE_DIR=str(tmp_path / "state"))
    up = lab_up(env, root, profile="h200-hgx-8x", json_out=True, timeout=200)
    assert up.returncode == 0, up.stderr
    conn = json.loads(up.stdout)
    try:
        ssh = conn["ssh"]
        argv = ["ssh", "-p", str(ssh["port"]), "-i", ssh["key_file"], "-o", f"UserKnownHostsFile={ssh['known_hosts']}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", f"{ssh['user']}@{ssh['host']}",
                "nvidia-smi -L; ls /dev/nvidia-modeset; cat /proc/driver/nvidia/version; pveversion"]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        assert r.stdout.count(": NVIDIA H200 (UUID: GPU-") == 8
        assert "No such file or directory" in r.stderr  # headless: no nvidia-modeset
        assert "NVIDIA UNIX Open Kernel Module for x86_64  580.95.05" in r.stdout
        assert r.stdout.rstrip().endswith("(running kernel: 6.8.12-10-pve)")
    finally:
        lab_down(env, root)


@pytest.mark.parametrize(("profile", "published", "absent"), [
    ("h200-hgx-8x", ["/tesla/580.95.05/NVIDIA-Linux-x86_64-580.95.05.run"],
     ["/tesla/580.95.05/NVIDIA-Linux-x86_64-580.95.05.run.sha256sum",
      "/XFree86/Linux-x86_64/580.95.05/NVIDIA-Linux-x86_64-580.95.05.run"]),
    ("gh200-aarch64", ["/XFree86/Linux-aarch64/580.95.05/NVIDIA-Linux-aarch64-580.95.05.run",
                       "/XFree86/Linux-aarch64/580.95.05/NVIDIA-Linux-aarch64-580.95.05.run.sha256sum"],
     ["/tesla/580.95.05/NVIDIA-Linux-x86_64-580.95.05.run"]),
    ("rtxpro6000-8x", ["/XFree86/Linux-x86_64/595.71.05/NVIDIA-Linux-x86_64-595.71.05.run.sha256sum"],
     ["/tesla/595.71.05/NVIDIA-Linux-x86_64-595.71.05.run"]),
])
def test_driver_mirror_layouts(tmp_path: Path, profile: str, published: list[str], absent: list[str]) -> None:
    """NVIDIA's layouts: tesla/<v>/ has no .sha256sum; Linux-aarch64 has its own directory and name."""
    import urllib.error
    import urllib.request

    from provisioner.lab.driver_files import DriverFileServer

    state = LabState.create(tmp_path / "lab", profile=profile)
    server = DriverFileServer(state)
    server.start()
    try:
        for path in published:
            with urllib.request.urlopen(server.base_url + path, timeout=60) as r:
                body = r.read()
            if path.endswith(".sha256sum"):
                assert body.decode().endswith("  " + path.rsplit("/", 1)[1].removesuffix(".sha256sum") + "\n")
        for path in absent:
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(server.base_url + path, timeout=60)
            assert err.value.code == 404
    finally:
        server.stop()


def _gpu_ct_with_torch(state: LabState, vmid: int = 200) -> None:
    """A running CT that passes all 8 HGX GPUs (devN) and holds the lab's torch layer (over a module with
    torch's `version` and `cuda` submodules: the CUDA view is the layer's, not PyTorch's) and userspace link."""
    from provisioner.lab.wheels import _TORCH_LAB, _fill

    opts: dict[str, str | int] = {"arch": "amd64", "hostname": "h200", "ostype": "ubuntu", "memory": 8192,
                                  "rootfs": f"local-lvm:vm-{vmid}-disk-0,size=8G"}
    paths = [f"/dev/nvidia{i}" for i in range(8)] + ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    opts.update({f"dev{i}": f"{p},mode=0666" for i, p in enumerate(paths)})
    state.write_conf(vmid, LxcConfig.from_options(opts))
    state.set_status(vmid, "running")
    site = state.ct_root(vmid) / "opt" / "labtorch" / "torch"
    (site / "cuda").mkdir(parents=True)
    (site / "__init__.py").write_text("from torch import cuda, version\nfrom torch import _lab_layer\n"
                                      "_lab_layer.patch(__import__('sys').modules[__name__])\n")
    (site / "_lab_layer.py").write_text(_fill(_TORCH_LAB, "2.11.0+cu130", "13.0", ("sm_90",), "2.13.0+cpu"))
    (site / "version.py").write_text("__version__ = '2.13.0+cpu'\ncuda = None\n")
    (site / "cuda" / "__init__.py").write_text("def is_available():\n    return False\n")
    lib = state.ct_root(vmid) / "usr" / "lib" / "x86_64-linux-gnu"
    lib.mkdir(parents=True, exist_ok=True)
    (lib / "libnvidia-ml.so.580.95.05").write_text("LAB\n")
    os.symlink("libnvidia-ml.so.580.95.05", lib / "libnvidia-ml.so.1")


TORCH_PROBE = ("PYTHONPATH=/opt/labtorch python3 -W always -c "
               "'import torch; print(torch.cuda.is_available(), torch.cuda.device_count())'")


def test_fabricmanager_down_cuda_reports_802_in_the_container(tmp_path: Path) -> None:
    """Without nvidia-fabricmanager on an NVSwitch host CUDA fails with 802 'system not yet initialized'
    (NVIDIA Fabric Manager user guide; wilicc/gpu-burn#92; pytorch/pytorch#35710), nvidia-smi still lists the
    GPUs; once the unit is started the same container gets its 8 GPUs."""
    state = make_lab(tmp_path / "lab", "h200-hgx-8x", "fabricmanager-down")
    _gpu_ct_with_torch(state)
    r = ct(state, 200, TORCH_PROBE)
    assert "Error 802: system not yet initialized" in r.stdout, r.stdout
    assert r.stdout.splitlines()[-1] == "False 0"
    assert node(state, "nvidia-smi -L | wc -l").stdout == "8\n"  # NVML itself still answers
    assert node(state, "systemctl start nvidia-fabricmanager; echo rc=$?").stdout == "rc=0\n"
    r = ct(state, 200, TORCH_PROBE)
    assert r.stdout.splitlines()[-1] == "True 8" and "802" not in r.stdout, r.stdout


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profile_renders_parse_back_through_the_engines_parsers(tmp_path: Path, name: str) -> None:
    """What each profile's node prints reads back, through provisioner.facts, as the profile it was made from."""
    from provisioner.facts.device_nodes import parse_proc_devices
    from provisioner.facts.driver_module import parse_proc_driver_version
    from provisioner.facts.proxmox import parse_pveversion
    from provisioner.facts.smi_q import parse_smi_q
    from provisioner.lab import render
    from provisioner.lab.profiles import lab_host

    p = get_profile(name)
    host = lab_host(LabState.create(tmp_path / "lab", profile=name).settings())
    q = parse_smi_q(render.render_smi_q(host))
    assert [g.minor_number for g in q.gpus] == [p.minor_of(i) if p.minors else i for i in range(p.gpu_count)]
    assert {g.product_name for g in q.gpus} == {p.gpu.name} and q.driver_version == p.driver_version
    drv = parse_proc_driver_version(render.render_proc_driver_version(host))
    assert (drv.version, drv.flavour, drv.arch) == (p.driver_version, p.flavour, p.arch)
    devices = parse_proc_devices(render.render_proc_devices(host))
    assert (devices.char_major("nvidia-modeset") is not None) is p.modeset
    assert devices.char_major("nvidia-uvm") == host.uvm_major
    v = parse_pveversion(render.render_pveversion(host, verbose=True))
    assert v.packages["pve-container"] == host.pve_container


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_each_profile_has_a_valid_playbook(name: str) -> None:
    from provisioner import playbook
    from provisioner.cli.demo import PLAYBOOK, PROFILE_PLAYBOOKS

    path = PROFILE_PLAYBOOKS.get(name, PLAYBOOK)
    pb = playbook.load(path)
    kinds = [s.kind for s in pb.steps]
    assert kinds[:3] == ["node.connect", "node.inventory", "lxc.create"] and kinds[-1] == "burnin.run"
    inventory = next(s for s in pb.steps if s.kind == "node.inventory")
    assert inventory.params["expected_gpus"] == get_profile(name).gpu_count
    passthrough = next(s for s in pb.steps if s.kind == "lxc.gpu_passthrough")
    assert passthrough.params["gpus"] == ([1, 3] if name == "minors-shuffled" else "all")


def test_minors_shuffled_container_sees_the_gpus_of_the_minors_it_was_given(tmp_path: Path) -> None:
    """The node's /dev/nvidiaN is the GPU whose Device Minor is N: a container given /dev/nvidia0 and
    /dev/nvidia1 sees the GPUs at nvidia-smi index 1 and 3 of the node (by UUID), not 0 and 1."""
    from provisioner.lab.commands.installer import build_run, run_name

    state = make_lab(tmp_path / "lab", "minors-shuffled")
    node_rows = node(state, "nvidia-smi --query-gpu=index,uuid --format=csv,noheader").stdout.splitlines()
    uuid_of_index = {int(i): u for i, u in (row.split(", ") for row in node_rows)}
    opts: dict[str, str | int] = {"arch": "amd64", "hostname": "l40s", "ostype": "ubuntu", "memory": 8192,
                                  "rootfs": "local-lvm:vm-200-disk-0,size=8G", "dev0": "/dev/nvidia0,mode=0666",
                                  "dev1": "/dev/nvidia1,mode=0666", "dev2": "/dev/nvidiactl,mode=0666",
                                  "dev3": "/dev/nvidia-uvm,mode=0666"}
    state.write_conf(200, LxcConfig.from_options(opts))
    state.set_status(200, "running")
    version = get_profile("minors-shuffled").driver_version
    (state.ct_root(200) / "tmp").mkdir(exist_ok=True)
    (state.ct_root(200) / "tmp" / run_name(version)).write_bytes(build_run(version))
    r = ct(state, 200, f"apt-get install -y kmod pkg-config >/dev/null && sh /tmp/{run_name(version)} "
                             "--silent --no-kernel-modules && nvidia-smi -L")
    assert r.returncode == 0, r.stdout
    listed = re.findall(r"^GPU (\d): NVIDIA L40S \(UUID: (GPU-[0-9a-f-]+)\)$", r.stdout, re.M)
    assert listed == [("0", uuid_of_index[1]), ("1", uuid_of_index[3])]
