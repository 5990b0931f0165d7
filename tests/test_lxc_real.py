"""Real LXC tier: our raw-mode passthrough lines in a real container under PVE's device policy.

The inventory is the lab's reference host (8 x RTX PRO 6000 Blackwell) rendered as nvidia-smi and
/proc/devices output and parsed with the engine's own parsers; the cgroup version is this host's,
read with the engine's CGROUP fact parser. `wanted_devices`/`raw_lines_for` (provisioner/steps/lxc_passthrough.py)
produce the lines, `LxcConfig` writes them into a /etc/pve/lxc/200.conf and reads them back, and
the raw lines are turned into a plain LXC config the way pve-container does (``key = value``,
after the included default policy). A busybox container then proves, against fake GPU nodes made
with mknod (no driver behind them):

* every node exists inside with the host's major:minor;
* open(O_RDWR) fails with ENXIO (the cgroup let it through, no driver answered), not EPERM;
* without our ``c 195:* rwm`` line the same open fails with EPERM (the cgroup denied it), while
  the uvm nodes, still allowed, keep failing with ENXIO.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from provisioner.facts import device_nodes, smi_csv, system
from provisioner.lab import render
from provisioner.proxmox.lxc_conf import LxcConfig
from provisioner.steps.gpu_common import PassthroughParams, wanted_devices
from provisioner.steps.lxc_passthrough import raw_lines_for
from provisioner.steps.state import HostInventory
from tests.support import lxc
from tests.support.require import require

pytestmark = pytest.mark.timeout(120)

NV_MAJOR = 195  # NV_MAJOR_DEVICE_NUMBER (nvidia-modprobe-utils.h)
CTL_MINOR = 255  # NV_CTL_DEVICE_NUM
MODESET_MINOR = 254  # NV_MODESET_MINOR_DEVICE_NUM


def reference_inventory(uvm_major: int, cgroup_version: int) -> HostInventory:
    """What `gather_inventory` returns for the reference host, built with the engine's parsers."""
    host = render.reference_host().model_copy(update={"uvm_major": uvm_major})
    gpus = smi_csv.parse_gpu_query_csv(render.render_query_csv(host))
    devices = device_nodes.parse_proc_devices(render.render_proc_devices(host))
    return HostInventory(gpus=gpus, driver_version=host.driver_version, module_flavour="open",
                         uvm_major=devices.uvm_major, caps_major=devices.caps_major,
                         nvidia_major=devices.nvidia_major or NV_MAJOR,
                         device_nodes=[n for n, *_ in render.lab_dev_nodes(host)], pve_version=host.pve_version,
                         pve_release=(8, 4), kernel="6.8.12-9-pve", cgroup_version=cgroup_version)


def expected_nodes(uvm_major: int) -> list[lxc.FakeNode]:
    """The 8-GPU node set from nvidia-modprobe's numbering (not from the code under test)."""
    return [
        *(lxc.FakeNode(f"/dev/nvidia{i}", NV_MAJOR, i) for i in range(8)),
        lxc.FakeNode("/dev/nvidiactl", NV_MAJOR, CTL_MINOR),
        lxc.FakeNode("/dev/nvidia-uvm", uvm_major, 0),
        lxc.FakeNode("/dev/nvidia-uvm-tools", uvm_major, 1),
        lxc.FakeNode("/dev/nvidia-modeset", NV_MAJOR, MODESET_MINOR),
    ]


def pve_conf_with(lines: list[tuple[str, str]]) -> LxcConfig:
    """A CT 200 config as PVE writes it, plus the passthrough lines."""
    return LxcConfig.from_options(
        {"arch": "amd64", "cores": 64, "hostname": "gpu-ct", "memory": 491520, "ostype": "ubuntu",
         "rootfs": "local-lvm:vm-200-disk-0,size=64G", "swap": 0, "unprivileged": 0},
        raw=lines)


# --- rendering (no root needed) --------------------------------------------------------------

@pytest.mark.parametrize("version", [1, 2])
def test_raw_lines_for_reference_host_render_with_the_node_cgroup_key(version: int) -> None:
    uvm = 511
    inv = reference_inventory(uvm, version)
    devices = wanted_devices(inv, PassthroughParams(mode="raw"))
    assert devices == [n.path for n in expected_nodes(uvm)]
    key = {1: "lxc.cgroup.devices.allow", 2: "lxc.cgroup2.devices.allow"}[version]
    other = {1: "lxc.cgroup2.", 2: "lxc.cgroup.devices"}[version]
    text = pve_conf_with(raw_lines_for(devices, inv)).render()
    expected_raw = [f"{key}: c 195:* rwm", f"{key}: c {uvm}:* rwm"] + [
        f"lxc.mount.entry: {n.path} {n.path[1:]} none bind,optional,create=file" for n in expected_nodes(uvm)]
    assert text.splitlines()[-len(expected_raw):] == expected_raw
    assert other not in text
    assert text.startswith("arch: amd64\ncores: 64\n")


# --- the real container -----------------------------------------------------------------------

@dataclass
class Rig:
    dev: lxc.PrivateDev
    workdir: Path
    rootfs: Path
    nodes: list[lxc.FakeNode]
    inventory: HostInventory
    policy: list[tuple[str, str]]


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    lxc.require_lxc_tools()
    version = system.parse_cgroup_fs(lxc.host_cgroup_fs_type()).version
    if version == 1:
        require(Path("/sys/fs/cgroup/devices/devices.list").exists(),
                    "cgroup v1 host without a mounted devices controller")
    uvm_major = lxc.free_char_major(Path("/proc/devices").read_text())
    workdir = tmp_path_factory.mktemp("lxc-real")
    rootfs = workdir / "rootfs"
    lxc.make_busybox_rootfs(rootfs)
    nodes = expected_nodes(uvm_major)
    dev = lxc.PrivateDev(nodes)
    try:
        yield Rig(dev, workdir, rootfs, nodes, reference_inventory(uvm_major, version),
                  lxc.default_device_policy(version))
    finally:
        dev.close()


@pytest.fixture
def container(rig: Rig) -> Iterator[lxc.BusyboxContainer]:
    ct = lxc.BusyboxContainer(rig.dev, rig.workdir, rig.rootfs)
    try:
        yield ct
    finally:
        ct.stop()


def lxc_lines_from_pve(conf: LxcConfig) -> list[tuple[str, str]]:
    """pve-container copies the CT config's raw ``lxc.*`` lines verbatim into the LXC config."""
    return conf.raw_lines()


def our_conf(rig: Rig) -> tuple[LxcConfig, str]:
    devices = wanted_devices(rig.inventory, PassthroughParams(mode="raw"))
    lines = raw_lines_for(devices, rig.inventory)
    conf = LxcConfig.parse(pve_conf_with(lines).render())  # as read back from /etc/pve/lxc/200.conf
    return conf, lines[0][0]


def test_passed_nodes_exist_and_reach_the_missing_driver(rig: Rig, container: lxc.BusyboxContainer) -> None:
    conf, key = our_conf(rig)
    container.start([*rig.policy, *lxc_lines_from_pve(conf)])
    probes = container.probe([n.path for n in rig.nodes] + ["/dev/null"])
    for node in rig.nodes:
        p = probes.get(node.path)
        assert p is not None, f"{node.path}: no probe output\n{container.log_tail()}"
        assert (p.kind, p.major, p.minor) == ("character special file", node.major, node.minor), p
        assert p.errno == errno.ENXIO, f"{node.path}: open gave {p.errno_name} ({p.message}), want ENXIO"
    assert probes["/dev/null"].errno is None, probes["/dev/null"]  # the probe can open what is allowed
    listing = container.devices_list()
    if key == "lxc.cgroup.devices.allow":  # v1: the kernel's own view of the container's policy
        assert listing == [rule for _, rule in rig.policy[1:]] + ["c 195:* rwm",
                                                                  f"c {rig.inventory.uvm_major}:* rwm"]


def test_without_our_allow_line_the_cgroup_denies(rig: Rig, container: lxc.BusyboxContainer) -> None:
    conf, key = our_conf(rig)
    assert conf.remove_raw(key, "c 195:* rwm") == 1
    container.start([*rig.policy, *lxc_lines_from_pve(conf)])
    probes = container.probe([n.path for n in rig.nodes])
    for node in rig.nodes:
        p = probes[node.path]
        assert (p.kind, p.major, p.minor) == ("character special file", node.major, node.minor), p
        want = errno.EPERM if node.major == NV_MAJOR else errno.ENXIO
        assert p.errno == want, f"{node.path}: open gave {p.errno_name} ({p.message}), want {errno.errorcode[want]}"


def test_the_other_cgroup_versions_key_grants_nothing(rig: Rig, container: lxc.BusyboxContainer) -> None:
    """Why the inventory's cgroup_version must drive the key: the other key does not open the devices."""
    other = 2 if rig.inventory.cgroup_version == 1 else 1
    devices = wanted_devices(rig.inventory, PassthroughParams(mode="raw"))
    lines = raw_lines_for(devices, rig.inventory.model_copy(update={"cgroup_version": other}))
    assert lines[0][0].startswith(lxc.cgroup_key(other) + ".")
    try:
        container.start([*rig.policy, *lines])
    except AssertionError as exc:  # LXC may refuse a controller this host lacks: also "not granted"
        assert "lxc-start failed" in str(exc)
        return
    probes = container.probe([n.path for n in rig.nodes])
    assert {probes[n.path].errno for n in rig.nodes} == {errno.EPERM}, probes
