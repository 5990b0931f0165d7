"""The real hosts the lab can play (issue #14): each profile is data, with the public source of its facts.

`PROFILES[name]` is a `HostProfile`; `lab_host(settings)` turns the lab's settings (profile plus
day-two state: which modules are loaded, which nodes exist, persistence mode, the host module
version) into the `provisioner.lab.render.LabHost` every stand-in renders from, and
`host_devices(settings)` lists the character devices the node has now (path -> (major, minor)), and
`HostProfile.network` is the node's ``/etc/network/interfaces`` as ``GET /nodes/{node}/network`` reads it.

Facts whose source is a real output or a vendor page carry the page in ``sources``; values the
lab has to choose (bus ids, serials, UUIDs) are marked LAB in the docs (``docs/lab-hosts.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from provisioner.lab import render
from provisioner.lab.settings import DEFAULT_TEMPLATES, LabSettings

DEFAULT_PROFILE = "rtxpro6000-8x"
NVIDIA_MAJOR = render.NVIDIA_MAJOR
NVSWITCH_CTL_MINOR = 255


@dataclass(frozen=True)
class GpuModel:
    """One GPU model as ``nvidia-smi -q`` names it."""

    name: str
    compute_cap: str
    memory_mib: int
    architecture: str
    brand: str
    device_id: str  # nvidia-smi -q "Device Id" (PCI device << 16 | vendor)
    sub_system_id: str
    power_limit_w: float
    power_min_w: float
    bar1_mib: int
    vbios: str
    max_clock_mhz: int
    max_mem_clock_mhz: int
    board_part_number: str = "N/A"


@dataclass(frozen=True)
class NetIface:
    """One interface of the node's ``/etc/network/interfaces`` as pve-common's ``PVE::INotify``
    ``read_etc_network_interfaces`` reads it (the fields ``GET /nodes/{node}/network`` answers)."""

    iface: str
    type: Literal["bridge", "eth", "bond", "vlan", "OVSBridge"]
    method: Literal["manual", "static", "dhcp"] = "manual"
    bridge_ports: str | None = None
    cidr: str | None = None  # LAB: documentation addresses (RFC 5737), never a real network
    gateway: str | None = None
    active: bool = True
    autostart: bool = False
    exists: bool = False  # a physical NIC the kernel has (eth only)
    comments: str | None = None


#: what the PVE installer writes: the first NIC enslaved to vmbr0, which holds the node's address
#: (https://pve.proxmox.com/wiki/Network_Configuration#_default_configuration_using_a_bridge); the NIC
#: name and the addresses are LAB
INSTALLER_NETWORK: tuple[NetIface, ...] = (
    NetIface("eno1", "eth", exists=True),
    NetIface("vmbr0", "bridge", "static", bridge_ports="eno1", cidr="192.0.2.10/24", gateway="192.0.2.1",
             autostart=True),
)


@dataclass(frozen=True)
class HostProfile:
    name: str
    summary: str
    gpu: GpuModel
    bus_ids: tuple[str, ...]
    #: device minor of each GPU in nvidia-smi index (PCI bus) order; () = minor == index
    minors: tuple[int, ...] = ()
    numa: tuple[int, ...] = ()
    driver_version: str = "595.71.05"
    #: where NVIDIA publishes the .run: XFree86/Linux-x86_64 (with .sha256sum), tesla/ (none), Linux-aarch64
    #: "none": not published at all (a vGPU manager's host driver comes only from NVIDIA's licensing portal)
    driver_layout: Literal["XFree86/Linux-x86_64", "tesla", "XFree86/Linux-aarch64", "none"] = "XFree86/Linux-x86_64"
    flavour: Literal["open", "proprietary"] = "open"
    arch: Literal["x86_64", "aarch64"] = "x86_64"
    cuda_version: str = "13.2"
    pve: Literal["8.1", "8.4", "9"] = "8.4"
    #: nvidia-modeset loaded at boot (nvidia-drm is loaded on a host with a display stack; not on HGX)
    modeset: bool = True
    #: /dev/nvidia-caps/nvidia-cap{1,2} (MIG capability nodes, nvidia-modprobe -f)
    caps: bool = False
    #: NVSwitch count (HGX): /dev/nvidia-nvswitch0..N-1 and nvidia-nvswitchctl, fabric manager needed
    nvswitches: int = 0
    p2p: str = "OK"
    gpus_fail_init: bool = False
    cpu_affinity: tuple[str, ...] = ("0-47,96-143", "48-95,144-191")
    #: extra container templates already downloaded to `local` (pveam download local <template>)
    extra_templates: tuple[str, ...] = ()
    #: NVIDIA's vGPU manager is the host driver: /sys/module/nvidia_vgpu_vfio, `nvidia-smi vgpu` lists the GPUs
    vgpu_manager: bool = False
    #: the node's network interfaces (``GET /nodes/{node}/network``): its bridges are what ``netN`` may name
    network: tuple[NetIface, ...] = INSTALLER_NETWORK
    sources: tuple[str, ...] = field(default_factory=tuple)

    @property
    def gpu_count(self) -> int:
        return len(self.bus_ids)

    def minor_of(self, index: int) -> int:
        return self.minors[index] if self.minors else index

    @property
    def needs_fabric_manager(self) -> bool:
        return self.nvswitches > 0


RTX_PRO_6000 = GpuModel(
    name="NVIDIA RTX PRO 6000 Blackwell Server Edition", compute_cap="12.0", memory_mib=97887,
    architecture="Blackwell", brand="NVIDIA RTX", device_id="0x2BB510DE", sub_system_id="0x204E10DE",
    power_limit_w=600.0, power_min_w=300.0, bar1_mib=131072, vbios="98.02.6A.00.07", max_clock_mhz=2430,
    max_mem_clock_mhz=14001, board_part_number="900-2G153-0000-000",
)
H200_SXM = GpuModel(
    name="NVIDIA H200", compute_cap="9.0", memory_mib=143771, architecture="Hopper", brand="NVIDIA",
    device_id="0x233510DE", sub_system_id="0x18BE10DE", power_limit_w=700.0, power_min_w=200.0, bar1_mib=262144,
    vbios="96.00.A5.00.01", max_clock_mhz=1980, max_mem_clock_mhz=3201, board_part_number="692-2G520-0280-000",
)
GH200 = GpuModel(
    name="NVIDIA GH200 480GB", compute_cap="9.0", memory_mib=97871, architecture="Hopper", brand="NVIDIA",
    device_id="0x234210DE", sub_system_id="0x16EB10DE", power_limit_w=900.0, power_min_w=100.0, bar1_mib=131072,
    vbios="96.00.74.00.1C", max_clock_mhz=1980, max_mem_clock_mhz=2619,
)
L40S = GpuModel(
    name="NVIDIA L40S", compute_cap="8.9", memory_mib=46068, architecture="Ada Lovelace", brand="NVIDIA",
    device_id="0x26B910DE", sub_system_id="0x185110DE", power_limit_w=350.0, power_min_w=100.0, bar1_mib=65536,
    vbios="95.02.66.00.02", max_clock_mhz=2520, max_mem_clock_mhz=9001,
)

REFERENCE_BUSES = tuple(f"00000000:{b}:00.0" for b in render.REFERENCE_BUS_IDS)
HGX_BUSES = tuple(f"00000000:{b}:00.0" for b in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"))

PROFILES: dict[str, HostProfile] = {
    p.name: p
    for p in (
        HostProfile(
            name="rtxpro6000-8x",
            summary="8 x RTX PRO 6000 Blackwell Server Edition (CC 12.0), open module 595.71.05, PVE 8.4",
            gpu=RTX_PRO_6000, bus_ids=REFERENCE_BUSES, numa=(0, 0, 0, 0, 1, 1, 1, 1),
            sources=(
                "tests/fixtures/outputs/ (recorded nvidia-smi outputs of the reference host)",
                "https://www.nvidia.com/en-us/data-center/rtx-pro-6000-blackwell-server-edition/",
            ),
        ),
        HostProfile(
            name="h200-hgx-8x",
            summary="HGX H200: 8 x H200 SXM (CC 9.0), 4 NVSwitch, headless, data-center driver 580.95.05 (tesla/)",
            gpu=H200_SXM, bus_ids=HGX_BUSES, numa=(0, 0, 0, 0, 1, 1, 1, 1), driver_version="580.95.05",
            driver_layout="tesla", cuda_version="13.0", modeset=False, caps=True, nvswitches=4, p2p="OK",
            sources=(
                "https://www.nvidia.com/en-us/data-center/h200/ (141 GB HBM3e, 700 W SXM, NVLink via NVSwitch)",
                "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/ (NVSwitch systems need "
                "nvidia-fabricmanager; CUDA fails with 802 'system not yet initialized' without it)",
                "https://us.download.nvidia.com/tesla/580.95.05/NVIDIA-Linux-x86_64-580.95.05.run (tesla/ layout, "
                "no .sha256sum published)",
                "https://github.com/wilicc/gpu-burn/issues/92 (H100 HBM3: 'system not yet initialized')",
            ),
        ),
        HostProfile(
            name="gh200-aarch64",
            summary="1 x GH200 480GB (Grace Hopper, CC 9.0) on an aarch64 node, driver from Linux-aarch64",
            gpu=GH200, bus_ids=("00000009:01:00.0",), numa=(0,), driver_version="580.95.05",
            driver_layout="XFree86/Linux-aarch64", arch="aarch64", cuda_version="13.0", modeset=False, caps=True,
            cpu_affinity=("0-71",),
            sources=(
                "https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/",
                "https://download.nvidia.com/XFree86/Linux-aarch64/ (aarch64 .run layout)",
                "https://download.pytorch.org/whl/cu128/torch/ (manylinux_2_28_aarch64 wheels)",
            ),
        ),
        HostProfile(
            name="minors-shuffled",
            summary="4 x L40S whose device minors (2, 0, 3, 1) differ from their nvidia-smi index (PCI) order",
            gpu=L40S, bus_ids=tuple(f"00000000:{b}:00.0" for b in ("01", "41", "81", "C1")), minors=(2, 0, 3, 1),
            numa=(0, 0, 1, 1), driver_version="580.95.05", cuda_version="13.0", p2p="CNS",
            sources=(
                "https://download.nvidia.com/XFree86/Linux-x86_64/580.95.05/README/procinterface.html "
                "(Device Minor in /proc/driver/nvidia/gpus/<bus>/information)",
                "https://docs.nvidia.com/deploy/nvidia-smi/index.html (nvidia-smi enumerates in PCI bus order; "
                "'Minor Number' is the /dev/nvidiaN of the device)",
            ),
        ),
        HostProfile(
            name="pve9",
            summary="PVE 9.1 (Debian 13 trixie, LXC 6, cgroup v2 only) with 4 x RTX PRO 6000 Blackwell",
            gpu=RTX_PRO_6000, bus_ids=REFERENCE_BUSES[:4], numa=(0, 0, 1, 1), pve="9",
            extra_templates=("local:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst",),
            sources=(
                "https://pve.proxmox.com/wiki/Roadmap#Proxmox_VE_9.0 (Debian 13, kernel 6.14, LXC 6.0, "
                "no cgroup v1)",
                "../shared/reference/pve-schema/pve-9.x_2026-04-30.subset.json",
            ),
        ),
        HostProfile(
            name="blackwell-proprietary",
            summary="8 x RTX PRO 6000 Blackwell with the proprietary kernel module: GPUs never initialise",
            gpu=RTX_PRO_6000, bus_ids=REFERENCE_BUSES, numa=(0, 0, 0, 0, 1, 1, 1, 1), flavour="proprietary",
            gpus_fail_init=True,
            sources=(
                "https://download.nvidia.com/XFree86/Linux-x86_64/580.95.05/README/kernel_open.html (Blackwell "
                "and later are supported only by the open kernel modules)",
                "https://github.com/Start9Labs/start-technologies/pull/3693 (proprietary module on Blackwell: "
                "'RmInitAdapter failed! (0x62:0x1a:2631)', nvidia-smi reports no devices)",
            ),
        ),
        HostProfile(
            name="vgpu",
            summary="vGPU host: NVIDIA vGPU manager 570.148.06 (vGPU 18.2, nvidia_vgpu_vfio) on 8 x L40S; no public "
                    ".run for it, its guest driver is 570.148.08",
            gpu=L40S, bus_ids=REFERENCE_BUSES, numa=(0, 0, 0, 0, 1, 1, 1, 1), driver_version="570.148.06",
            driver_layout="none", flavour="proprietary", cuda_version="N/A", vgpu_manager=True,
            sources=(
                "https://docs.nvidia.com/vgpu/18.0/grid-vgpu-user-guide/index.html (Virtual GPU Manager for Linux "
                "KVM: kernel module nvidia_vgpu_vfio in `lsmod | grep vfio`; `nvidia-smi vgpu` on the host)",
                "https://github.com/nvidiavgpuarchive/index/issues/1 (vGPU 18.2 package NVIDIA-GRID-Linux-KVM-"
                "570.148.06-570.148.08-573.07: host 570.148.06, guest 570.148.08; the guest driver in an LXC "
                "container: 'NVRM: API mismatch')",
                "https://github.com/akb486/vgpu (README: a vGPU host's nvidia-smi 'CUDA Version: N/A' and its "
                "`nvidia-smi vgpu` table)",
            ),
        ),
    )
}

#: lab kernels per PVE version (the kernel each release ships by default)
#: what /version answers per lab PVE version (version, release, repoid)
VERSIONS: dict[str, tuple[str, str, str]] = {
    "8.1": ("8.1.4", "8.1", "ec5affc9e41f1d79"),
    "8.4": ("8.4.1", "8.4", "2a5fa54a8503f96d"),
    "9": ("9.1.1", "9.1", "42db4a6cf33dac83"),
}
PVE_KERNELS = {"8.1": "6.5.13-5-pve", "8.4": "6.8.12-10-pve", "9": "6.14.11-4-pve"}
#: (lxc-pve, pve-container, Debian codename, gcc banner) per PVE version
PVE_USERLAND = {
    "8.1": ("5.0.2-4", "5.0.8", "bookworm", "gcc version 12.2.0 (Debian 12.2.0-14) "),
    "8.4": ("6.0.0-1", "5.2.6", "bookworm", "gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) "),
    "9": ("6.0.5-1", "6.0.18", "trixie", "gcc version 14.2.0 (Debian 14.2.0-19) "),
}


def get_profile(name: str) -> HostProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown host profile {name!r}; known: {', '.join(PROFILES)}") from None


def profile_settings(name: str) -> dict[str, object]:
    """LabSettings fields a fresh lab of profile `name` starts with."""
    p = get_profile(name)
    out: dict[str, object] = {"profile": p.name, "pve_version": p.pve, "driver_version": p.driver_version,
                              "gpu_count": p.gpu_count, "gpu_name": p.gpu.name}
    if p.extra_templates:
        out["templates"] = [*DEFAULT_TEMPLATES, *p.extra_templates]
    return out


def profile_gpus(p: HostProfile, settings: LabSettings | None = None) -> tuple[render.LabGpu, ...]:
    g = p.gpu
    count = settings.gpu_count if settings is not None else p.gpu_count
    name = settings.gpu_name if settings is not None else g.name
    uuid_host = "lab" if p.name == DEFAULT_PROFILE else p.name
    gpus = []
    for i in range(count):
        bus = p.bus_ids[i] if i < len(p.bus_ids) else f"00000000:{0x10 + i:02X}:00.0"
        numa = p.numa[i] if i < len(p.numa) else 0
        gpus.append(render.LabGpu(
            index=i, name=name, uuid=render.lab_gpu_uuid(i, uuid_host), bus_id=bus, compute_cap=g.compute_cap,
            memory_mib=g.memory_mib, numa_node=numa, serial=f"LAB17950250{i:02d}", architecture=g.architecture,
            vbios=g.vbios, temperature_c=29 + (i * 3) % 7, power_draw_w=round(33.1 + 0.37 * i, 2),
            power_limit_w=g.power_limit_w, power_min_w=g.power_min_w, bar1_mib=g.bar1_mib,
            max_clock_mhz=g.max_clock_mhz, max_mem_clock_mhz=g.max_mem_clock_mhz,
            minor=p.minor_of(i) if i < len(p.minors) else None, brand=g.brand, device_id=g.device_id,
            sub_system_id=g.sub_system_id, board_part_number=g.board_part_number,
        ))
    return tuple(gpus)


def lab_host(settings: LabSettings) -> render.LabHost:
    """The render model of the lab host described by lab.json (profile + day-two state)."""
    p = get_profile(settings.profile)
    pve, _, repoid = VERSIONS.get(settings.pve_version, VERSIONS["8.4"])
    lxc_pve, pve_container, codename, gcc = PVE_USERLAND.get(settings.pve_version, PVE_USERLAND["8.4"])
    fabric_state, fabric_status = "N/A", "N/A"
    if p.needs_fabric_manager:
        fabric_state, fabric_status = ("Completed", "Success") if settings.fabricmanager_active \
            else ("Not Started", "N/A")
    return render.LabHost(
        gpus=profile_gpus(p, settings), driver_version=settings.driver_version, flavour=p.flavour,
        cuda_version=p.cuda_version, p2p=p.p2p, pve_version=pve, pve_repoid=repoid,
        kernel=PVE_KERNELS.get(settings.pve_version, PVE_KERNELS["8.4"]), uvm_major=settings.uvm_major,
        persistence=settings.persistence, cpu_affinity=p.cpu_affinity, gcc_version=gcc, arch=p.arch,
        modeset_loaded=modeset_loaded(settings), uvm_loaded=settings.host_uvm_nodes, fabric_state=fabric_state,
        fabric_status=fabric_status, gpus_fail_init=p.gpus_fail_init, lxc_pve=lxc_pve, pve_container=pve_container,
        debian_codename=codename,
    )


def modeset_loaded(settings: LabSettings) -> bool:
    p = get_profile(settings.profile)
    return p.modeset if settings.modeset_loaded is None else settings.modeset_loaded


def possible_nodes(settings: LabSettings) -> dict[str, tuple[int, int]]:
    """Every non-UVM NVIDIA node the lab host can have with its modules loaded: path -> (major, minor)."""
    p = get_profile(settings.profile)
    host = render.LabHost(gpus=())
    devs: dict[str, tuple[int, int]] = {}
    for i in range(settings.gpu_count):
        minor = p.minor_of(i) if i < len(p.minors) else i
        devs[f"/dev/nvidia{minor}"] = (NVIDIA_MAJOR, minor)
    devs["/dev/nvidiactl"] = (NVIDIA_MAJOR, render.NVIDIACTL_MINOR)
    if modeset_loaded(settings):
        devs["/dev/nvidia-modeset"] = (NVIDIA_MAJOR, render.MODESET_MINOR)
    if p.caps:
        devs["/dev/nvidia-caps/nvidia-cap1"] = (host.caps_major, 1)
        devs["/dev/nvidia-caps/nvidia-cap2"] = (host.caps_major, 2)
    if p.nvswitches:
        devs["/dev/nvidia-nvswitchctl"] = (host.nvswitch_major, NVSWITCH_CTL_MINOR)
        for n in range(p.nvswitches):
            devs[f"/dev/nvidia-nvswitch{n}"] = (host.nvswitch_major, n)
    return devs


def host_devices(settings: LabSettings) -> dict[str, tuple[int, int]]:
    """Character devices on the lab node now: path -> (major, minor).

    No NVIDIA kernel module creates its device files: nvidia-modprobe does, run by the driver's
    libraries (NVML, CUDA) or by hand (NVIDIA README, "How and when are the NVIDIA device files
    created?"; NVIDIA/nvidia-modprobe ``main``: ``-c=N`` -> ``/dev/nvidiaN`` (255 = nvidiactl),
    ``-m`` -> nvidia-modeset, ``-u -c=0`` -> ``/dev/nvidia-uvm`` and ``-uvm-tools``, ``-s -c=N`` ->
    NVSwitch nodes, ``-f`` -> capability nodes). `settings.host_created_nodes` is what was created
    since boot (None: all of them, a host already in use); the UVM nodes follow ``host_uvm_nodes``.
    """
    created = settings.host_created_nodes
    devs = {path: mm for path, mm in possible_nodes(settings).items() if created is None or path in created}
    if settings.host_uvm_nodes:
        devs["/dev/nvidia-uvm"] = (settings.uvm_major, 0)
        devs["/dev/nvidia-uvm-tools"] = (settings.uvm_major, 1)
    return devs


def create_nodes(settings: LabSettings, paths: list[str]) -> list[str] | None:
    """`host_created_nodes` after creating `paths` (ignoring paths the host cannot have)."""
    if settings.host_created_nodes is None:
        return None
    possible = possible_nodes(settings)
    return sorted({*settings.host_created_nodes, *(p for p in paths if p in possible)})
