"""Render the outputs of the lab node's commands from a small model of the host.

The lab's fake ``nvidia-smi``, ``pveversion``, ``/proc`` files and ``ls -l /dev/nvidia*`` print
what these functions return. Each rendering follows the layout of real recorded outputs (see
``tests/fixtures/outputs/``) and parses back through :mod:`provisioner.facts` to the model it
was rendered from (the tests prove both). Where a field is free text (serial numbers, the
module's build host) the lab writes ``LAB`` so a lab output can never pass for a real one.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
MODESET_MINOR = 254
_UUID_NAMESPACE = uuidlib.UUID("6c0a5e2e-1f00-4e6b-9d5c-1ab0000000a0")
DEFAULT_TIMESTAMP = "Tue Jun 16 16:58:33 2026"


class LabGpu(BaseModel):
    """One simulated GPU."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int
    name: str
    uuid: str
    bus_id: str
    compute_cap: str
    memory_mib: int
    numa_node: int = 0
    serial: str = ""
    architecture: str = "Blackwell"
    vbios: str = "98.02.6A.00.07"
    part_number: str = "2BB5-895-A1"
    temperature_c: int = 31
    power_draw_w: float = 34.52
    power_limit_w: float = 600.0
    power_min_w: float = 300.0
    memory_used_mib: int = 0
    memory_reserved_mib: int = 542
    bar1_mib: int = 131072
    pcie_gen_max: int = 5
    pcie_gen_current: int = 1
    pcie_width_max: int = 16
    pcie_width_current: int = 16
    max_clock_mhz: int = 2430
    max_mem_clock_mhz: int = 14001
    #: device minor (``/dev/nvidia<minor>``, ``Device Minor:``); None = the index, as on most hosts
    minor: int | None = None
    brand: str = "NVIDIA RTX"
    device_id: str = "0x2BB510DE"
    sub_system_id: str = "0x204E10DE"
    board_part_number: str = "900-2G153-0000-000"

    @property
    def dev_minor(self) -> int:
        return self.index if self.minor is None else self.minor


class LabHost(BaseModel):
    """The simulated Proxmox node: GPUs, driver, CUDA, P2P status, PVE version and kernel."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpus: tuple[LabGpu, ...]
    driver_version: str = "595.71.05"
    flavour: Literal["open", "proprietary"] = "open"
    cuda_version: str = "13.2"
    p2p: str = Field(default="OK", description="topo -p2p status between distinct GPUs (OK, CNS, ...)")
    pve_version: str = "8.4.1"
    pve_repoid: str = "2a5fa54a8503f96d"
    kernel: str = "6.8.12-10-pve"
    uvm_major: int = 511
    caps_major: int = 236
    nvswitch_major: int = 234
    nvlink_major: int = 235
    persistence: bool = True
    ecc: bool = True
    cpu_affinity: tuple[str, ...] = ("0-47,96-143", "48-95,144-191")
    gcc_version: str = "gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) "
    module_build_date: str = "Thu Apr 30 01:12:44 UTC 2026"
    arch: Literal["x86_64", "aarch64"] = "x86_64"
    #: nvidia-modeset.ko loaded (a headless compute node never loads it)
    modeset_loaded: bool = True
    #: nvidia-uvm.ko loaded (lazily, by nvidia-modprobe -u or a CUDA client)
    uvm_loaded: bool = True
    #: ``nvidia-smi -q`` Fabric State / Status (HGX with NVSwitch: Completed/Success once fabric manager ran)
    fabric_state: str = "N/A"
    fabric_status: str = "N/A"
    #: the GPUs were probed but never initialise (RmInitAdapter failed): Blackwell on the proprietary module
    gpus_fail_init: bool = False
    lxc_pve: str = "6.0.0-1"
    pve_container: str = "5.2.6"
    debian_codename: str = "bookworm"


def lab_gpu_uuid(index: int, host: str = "lab") -> str:
    """A stable, realistic-looking GPU UUID for a lab GPU."""
    return f"GPU-{uuidlib.uuid5(_UUID_NAMESPACE, f'{host}-gpu-{index}')}"


REFERENCE_BUS_IDS = ("17", "3D", "63", "7A", "8B", "A3", "C4", "E1")
REFERENCE_GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def reference_host() -> LabHost:
    """8 x RTX PRO 6000 Blackwell Server Edition (CC 12.0, 97887 MiB) on two NUMA nodes,
    open kernel module 595.71.05, CUDA 13.2, P2P OK, PVE 8.4.1 on kernel 6.8.12-10-pve."""
    gpus = tuple(
        LabGpu(
            index=i,
            name=REFERENCE_GPU_NAME,
            uuid=lab_gpu_uuid(i),
            bus_id=f"00000000:{bus}:00.0",
            compute_cap="12.0",
            memory_mib=97887,
            numa_node=0 if i < 4 else 1,
            serial=f"LAB17950250{i:02d}",
            temperature_c=29 + (i * 3) % 7,
            power_draw_w=round(33.1 + 0.37 * i, 2),
        )
        for i, bus in enumerate(REFERENCE_BUS_IDS)
    )
    return LabHost(gpus=gpus)


def _bool(v: bool) -> str:
    return "Enabled" if v else "Disabled"


def _lines(lines: Iterable[str]) -> str:
    return "\n".join(lines) + "\n"


# --- nvidia-smi --query-gpu ------------------------------------------------------------------


def render_query_csv(host: LabHost, *, units: bool = True, header: bool = False) -> str:
    """``nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,compute_cap,driver_version,memory.total
    --format=csv,noheader`` (``units=False`` adds ``,nounits``; ``header=True`` drops ``noheader``)."""
    out: list[str] = []
    if header:
        mem = "memory.total [MiB]"
        out.append(f"index, name, uuid, pci.bus_id, compute_cap, driver_version, {mem}")
    for g in host.gpus:
        mem_v = f"{g.memory_mib} MiB" if units else str(g.memory_mib)
        out.append(f"{g.index}, {g.name}, {g.uuid}, {g.bus_id}, {g.compute_cap}, {host.driver_version}, {mem_v}")
    return _lines(out)


# --- nvidia-smi -q ----------------------------------------------------------------------------

_Q_KEY_WIDTH = 42


def _kv(level: int, key: str, value: object | None = None) -> str:
    indent = "    " * level
    if value is None:
        return f"{indent}{key}"
    return f"{(indent + key).ljust(_Q_KEY_WIDTH)}: {value}"


def _smi_q_gpu(host: LabHost, g: LabGpu) -> list[str]:
    bus_hex = g.bus_id.split(":")[1]
    ecc_value = "0" if host.ecc else "N/A"
    free = g.memory_mib - g.memory_reserved_mib - g.memory_used_mib
    rows: list[tuple[int, str, object | None]] = [
        (0, f"GPU {g.bus_id}", None),
        (1, "Product Name", g.name),
        (1, "Product Brand", g.brand),
        (1, "Product Architecture", g.architecture),
        (1, "Display Mode", "Disabled"),
        (1, "Display Active", "Disabled"),
        (1, "Persistence Mode", _bool(host.persistence)),
        (1, "Addressing Mode", "HMM"),
        (1, "MIG Mode", None),
        (2, "Current", "Disabled"),
        (2, "Pending", "Disabled"),
        (1, "Accounting Mode", "Disabled"),
        (1, "Accounting Mode Buffer Size", 4000),
        (1, "Driver Model", None),
        (2, "Current", "N/A"),
        (2, "Pending", "N/A"),
        (1, "Serial Number", g.serial or "N/A"),
        (1, "GPU UUID", g.uuid),
        (1, "Minor Number", g.dev_minor),
        (1, "VBIOS Version", g.vbios),
        (1, "MultiGPU Board", "No"),
        (1, "Board ID", f"0x{int(bus_hex, 16) << 8:x}"),
        (1, "Board Part Number", g.board_part_number),
        (1, "GPU Part Number", g.part_number),
        (1, "FRU Part Number", "N/A"),
        (1, "Platform Info", None),
        (2, "Chassis Serial Number", ""),
        (2, "Slot Number", g.index),
        (2, "Tray Index", 0),
        (2, "Host ID", 1),
        (2, "Peer Type", "Direct Connected"),
        (2, "Module Id", 1),
        (2, "GPU Fabric GUID", "0x0"),
        (1, "Inforom Version", None),
        (2, "Image Version", "G153.0200.00.03"),
        (2, "OEM Object", "2.1"),
        (2, "ECC Object", "7.16" if host.ecc else "N/A"),
        (2, "Power Management Object", "N/A"),
        (1, "GPU Operation Mode", None),
        (2, "Current", "N/A"),
        (2, "Pending", "N/A"),
        (1, "GPU C2C Mode", "Disabled"),
        (1, "GPU Virtualization Mode", None),
        (2, "Virtualization Mode", "None"),
        (2, "Host VGPU Mode", "N/A"),
        (2, "vGPU Heterogeneous Mode", "N/A"),
        (1, "GPU Recovery Action", "None"),
        (1, "GSP Firmware Version", host.driver_version),
        (1, "PCI", None),
        (2, "Bus", f"0x{bus_hex}"),
        (2, "Device", "0x00"),
        (2, "Domain", f"0x{int(g.bus_id.split(':')[0], 16):04x}"),
        (2, "Base Classcode", "0x3"),
        (2, "Sub Classcode", "0x2"),
        (2, "Device Id", g.device_id),
        (2, "Bus Id", g.bus_id),
        (2, "Sub System Id", g.sub_system_id),
        (2, "GPU Link Info", None),
        (3, "PCIe Generation", None),
        (4, "Max", g.pcie_gen_max),
        (4, "Current", g.pcie_gen_current),
        (4, "Device Current", g.pcie_gen_current),
        (4, "Device Max", g.pcie_gen_max),
        (4, "Host Max", g.pcie_gen_max),
        (3, "Link Width", None),
        (4, "Max", f"{g.pcie_width_max}x"),
        (4, "Current", f"{g.pcie_width_current}x"),
        (2, "Bridge Chip", None),
        (3, "Type", "N/A"),
        (3, "Firmware", "N/A"),
        (2, "Replays Since Reset", 0),
        (2, "Replay Number Rollovers", 0),
        (2, "Tx Throughput", "0 KB/s"),
        (2, "Rx Throughput", "0 KB/s"),
        (2, "Atomic Caps Outbound", "N/A"),
        (2, "Atomic Caps Inbound", "N/A"),
        (1, "Fan Speed", "N/A"),
        (1, "Performance State", "P8"),
        (1, "Clocks Event Reasons", None),
        (2, "Idle", "Active"),
        (2, "Applications Clocks Setting", "Not Active"),
        (2, "SW Power Cap", "Not Active"),
        (2, "HW Slowdown", "Not Active"),
        (3, "HW Thermal Slowdown", "Not Active"),
        (3, "HW Power Brake Slowdown", "Not Active"),
        (2, "Sync Boost", "Not Active"),
        (2, "SW Thermal Slowdown", "Not Active"),
        (2, "Display Clock Setting", "Not Active"),
        (1, "Sparse Operation Mode", "N/A"),
        (1, "FB Memory Usage", None),
        (2, "Total", f"{g.memory_mib} MiB"),
        (2, "Reserved", f"{g.memory_reserved_mib} MiB"),
        (2, "Used", f"{g.memory_used_mib} MiB"),
        (2, "Free", f"{free} MiB"),
        (1, "BAR1 Memory Usage", None),
        (2, "Total", f"{g.bar1_mib} MiB"),
        (2, "Used", "1 MiB"),
        (2, "Free", f"{g.bar1_mib - 1} MiB"),
        (1, "Compute Mode", "Default"),
        (1, "Utilization", None),
        (2, "GPU", "0 %"),
        (2, "Memory", "0 %"),
        (2, "Encoder", "0 %"),
        (2, "Decoder", "0 %"),
        (2, "JPEG", "0 %"),
        (2, "OFA", "0 %"),
        (1, "ECC Mode", None),
        (2, "Current", _bool(host.ecc)),
        (2, "Pending", _bool(host.ecc)),
        (1, "ECC Errors", None),
        (2, "Volatile", None),
        (3, "SRAM Correctable", ecc_value),
        (3, "SRAM Uncorrectable Parity", ecc_value),
        (3, "SRAM Uncorrectable SEC-DED", ecc_value),
        (3, "DRAM Correctable", ecc_value),
        (3, "DRAM Uncorrectable", ecc_value),
        (2, "Aggregate", None),
        (3, "SRAM Correctable", ecc_value),
        (3, "SRAM Uncorrectable Parity", ecc_value),
        (3, "SRAM Uncorrectable SEC-DED", ecc_value),
        (3, "DRAM Correctable", ecc_value),
        (3, "DRAM Uncorrectable", ecc_value),
        (1, "Retired Pages", None),
        (2, "Single Bit ECC", "N/A"),
        (2, "Double Bit ECC", "N/A"),
        (2, "Pending Page Blacklist", "N/A"),
        (1, "Remapped Rows", None),
        (2, "Correctable Error", 0),
        (2, "Uncorrectable Error", 0),
        (2, "Pending", "No"),
        (2, "Remapping Failure Occurred", "No"),
        (1, "Temperature", None),
        (2, "GPU Current Temp", f"{g.temperature_c} C"),
        (2, "GPU T.Limit Temp", f"{87 - g.temperature_c} C"),
        (2, "GPU Shutdown T.Limit Temp", "-5 C"),
        (2, "GPU Slowdown T.Limit Temp", "-2 C"),
        (2, "GPU Max Operating T.Limit Temp", "0 C"),
        (2, "GPU Target Temperature", "N/A"),
        (2, "Memory Current Temp", "N/A"),
        (2, "Memory Max Operating T.Limit Temp", "N/A"),
        (1, "GPU Power Readings", None),
        (2, "Average Power Draw", f"{g.power_draw_w:.2f} W"),
        (2, "Instantaneous Power Draw", f"{g.power_draw_w:.2f} W"),
        (2, "Current Power Limit", f"{g.power_limit_w:.2f} W"),
        (2, "Requested Power Limit", f"{g.power_limit_w:.2f} W"),
        (2, "Default Power Limit", f"{g.power_limit_w:.2f} W"),
        (2, "Min Power Limit", f"{g.power_min_w:.2f} W"),
        (2, "Max Power Limit", f"{g.power_limit_w:.2f} W"),
        (1, "Clocks", None),
        (2, "Graphics", "180 MHz"),
        (2, "SM", "180 MHz"),
        (2, "Memory", "405 MHz"),
        (2, "Video", "600 MHz"),
        (1, "Max Clocks", None),
        (2, "Graphics", f"{g.max_clock_mhz} MHz"),
        (2, "SM", f"{g.max_clock_mhz} MHz"),
        (2, "Memory", f"{g.max_mem_clock_mhz} MHz"),
        (2, "Video", "3090 MHz"),
        (1, "Fabric", None),
        (2, "State", host.fabric_state),
        (2, "Status", host.fabric_status),
        (1, "Processes", "None"),
        (1, "Capabilities", None),
        (2, "EGM", "disabled"),
    ]
    return [_kv(level, key, value) for level, key, value in rows]


def kmd_era(driver_version: str) -> bool:
    """R610 on: "Driver Version"/"CUDA Version" deprecated for "KMD Version"/"CUDA UMD Version" in ``nvidia-smi
    -q`` (header of Jaded-Encoding-Thaumaturgy/vs-jetpack#295) and in the table's title (sgl-project/sglang#27487)."""
    return int(driver_version.split(".")[0]) >= 610


_DEPRECATED = "[Deprecated; will be removed in CUDA 14.0. Use {} instead]"


def _smi_q_versions(host: LabHost) -> list[str]:
    if not kmd_era(host.driver_version):
        return [_kv(0, "Driver Version", host.driver_version), _kv(0, "CUDA Version", host.cuda_version)]
    return [
        _kv(0, "Driver Version", f"{host.driver_version} {_DEPRECATED.format('KMD Version')}"),
        _kv(0, "CUDA Version", f"{host.cuda_version} {_DEPRECATED.format('CUDA UMD Version')}"),
        _kv(0, "KMD Version", host.driver_version),
        _kv(0, "CUDA UMD Version", host.cuda_version),
    ]


def render_smi_q(host: LabHost, *, timestamp: str = DEFAULT_TIMESTAMP) -> str:
    """``nvidia-smi -q`` in the R570+ layout (header, then one block per GPU)."""
    out = [
        "",
        "==============NVSMI LOG==============",
        "",
        _kv(0, "Timestamp", timestamp),
        *_smi_q_versions(host),
        "",
        _kv(0, "Attached GPUs", len(host.gpus)),
    ]
    for n, g in enumerate(host.gpus):
        if n:
            out.append("")
        out.extend(_smi_q_gpu(host, g))
    return _lines(out)


# --- default nvidia-smi table (R580+ layout) ---------------------------------------------------

_TABLE_RULE = "+-----------------------------------------+------------------------+----------------------+"
_TABLE_TOP = "+" + "-" * 89 + "+"
_TABLE_HEAD = (
    "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
    "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
    "|                                         |                        |               MIG M. |",
    "|=========================================+========================+======================|",
)
_PROCESS_BOX = (
    _TABLE_TOP,
    "| Processes:                                                                              |",
    "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
    "|        ID   ID                                                               Usage      |",
    "|" + "=" * 89 + "|",
    "|  No running processes found                                                             |",
    _TABLE_TOP,
)


def smi_display_name(name: str) -> str:
    """The GPU name as the table shows it: longer than 27 characters -> 24 + ``...``."""
    return name if len(name) <= 27 else name[:24] + "..."


def render_smi_table(host: LabHost, *, timestamp: str = DEFAULT_TIMESTAMP) -> str:
    """The default ``nvidia-smi`` table (box drawing, three lines per GPU, process box)."""
    title = (
        f"| NVIDIA-SMI {host.driver_version:<23}Driver Version: {host.driver_version:<15}"
        f"CUDA Version: {host.cuda_version:<9}|"
    )
    if kmd_era(host.driver_version):
        title = (f"| NVIDIA-SMI {host.driver_version:<23}KMD Version: {host.driver_version:<14}"
                 f"CUDA UMD Version: {host.cuda_version:<9}|")
    out = [f"{timestamp}       ", _TABLE_TOP, title, _TABLE_RULE, *_TABLE_HEAD]
    pm = "On" if host.persistence else "Off"
    ecc = "0" if host.ecc else "Off"
    mig = "Disabled" if host.ecc else "N/A"
    for g in host.gpus:
        out.append(f"|{g.index:>4}  {smi_display_name(g.name):<31}{pm:<3} |{g.bus_id:>19} {'Off':<3} |{ecc:>21} |")
        out.append(
            f"|{'N/A':>4}{f'{g.temperature_c}C':>6}{'P8':>6}{f'{round(g.power_draw_w)}W':>16} / "
            f"{f'{round(g.power_limit_w)}W':>5} |{f'{g.memory_used_mib}MiB':>11} / {f'{g.memory_mib}MiB':>9} |"
            f"{'0%':>8}{'Default':>13} |"
        )
        out.append(f"|{'':41}|{'':24}|{mig:>21} |")
        out.append(_TABLE_RULE)
    out.append(" " * 89)  # the (space-filled) line real nvidia-smi prints between the boxes
    out.extend(_PROCESS_BOX)
    return _lines(out)


# --- nvidia-smi topo -m / topo -p2p r -----------------------------------------------------------

TOPO_LEGEND = (
    "  X    = Self",
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "  PIX  = Connection traversing at most a single PCIe bridge",
    "  NV#  = Connection traversing a bonded set of # NVLinks",
)
P2P_LEGEND = (
    "  X    = Self",
    "  OK   = Status Ok",
    "  CNS  = Chipset not supported",
    "  GNS  = GPU not supported",
    "  TNS  = Topology not supported",
    "  NS   = Not supported",
    "  DR   = Disabled by regkey",
    "  U    = Unknown",
)


def topo_link(a: LabGpu, b: LabGpu) -> str:
    """Link type the lab reports: X (self), NODE (same NUMA node), SYS (across sockets)."""
    if a.index == b.index:
        return "X"
    return "NODE" if a.numa_node == b.numa_node else "SYS"


def render_topo_m(host: LabHost, *, ansi: bool = False) -> str:
    """``nvidia-smi topo -m`` (tab-separated; ``ansi=True`` underlines the header as a tty shows)."""
    names = [f"GPU{g.index}" for g in host.gpus]
    header = "\t".join([*names, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])
    out = [f"\t\x1b[4m{header}\x1b[0m" if ansi else f"\t{header}"]
    for g in host.gpus:
        links = [f" {topo_link(g, o)} " if o.index == g.index else topo_link(g, o) for o in host.gpus]
        cpus = host.cpu_affinity[g.numa_node % len(host.cpu_affinity)]
        label = f"\x1b[4m{names[g.index]}\x1b[0m" if ansi else f"GPU{g.index}"
        out.append("\t".join([label, *links, cpus, str(g.numa_node), "", "N/A"]))
    out += ["", "Legend:", "", *TOPO_LEGEND]
    return _lines(out)


def render_topo_p2p(host: LabHost) -> str:
    """``nvidia-smi topo -p2p r``: ``host.p2p`` between distinct GPUs, ``X`` on the diagonal."""
    names = [f"GPU{g.index}" for g in host.gpus]
    out = [" \t" + "".join(f"{n}\t" for n in names)]
    for g in host.gpus:
        cells = ["X" if o.index == g.index else host.p2p for o in host.gpus]
        out.append(f" GPU{g.index}\t" + "".join(f"{c}\t" for c in cells))
    out += ["", "Legend:", "", *P2P_LEGEND]
    return _lines(out)


# --- kernel module, /proc, /dev ------------------------------------------------------------------


def render_sys_module_version(host: LabHost) -> str:
    """``/sys/module/nvidia/version``."""
    return f"{host.driver_version}\n"


def render_proc_driver_version(host: LabHost) -> str:
    """``/proc/driver/nvidia/version`` with the open or proprietary banner."""
    if host.flavour == "open":
        banner = (
            f"NVRM version: NVIDIA UNIX Open Kernel Module for {host.arch}  {host.driver_version}  "
            f"Release Build  (lab-builder@LAB-SIM)  {host.module_build_date}"
        )
    else:
        arch = "Kernel Module for aarch64" if host.arch == "aarch64" else "x86_64 Kernel Module"
        banner = f"NVRM version: NVIDIA UNIX {arch}  {host.driver_version}  {host.module_build_date}"
    return f"{banner}\nGCC version:  {host.gcc_version}\n"


def render_proc_devices(host: LabHost) -> str:
    """``/proc/devices`` of a PVE 8 host with the NVIDIA modules (R560+ names) loaded."""
    char: list[tuple[int, str]] = [
        (1, "mem"),
        (4, "/dev/vc/0"),
        (4, "tty"),
        (4, "ttyS"),
        (5, "/dev/tty"),
        (5, "/dev/console"),
        (5, "/dev/ptmx"),
        (5, "ttyprintk"),
        (7, "vcs"),
        (10, "misc"),
        (13, "input"),
        (21, "sg"),
        (29, "fb"),
        (89, "i2c"),
        (108, "ppp"),
        (128, "ptm"),
        (136, "pts"),
        (180, "usb"),
        (189, "usb_device"),
        (NVIDIA_MAJOR, "nvidia"),
        *([(NVIDIA_MAJOR, "nvidia-modeset")] if host.modeset_loaded else []),
        (NVIDIA_MAJOR, "nvidiactl"),
        (202, "cpu/msr"),
        (203, "cpu/cpuid"),
        (226, "drm"),
        (host.nvswitch_major, "nvidia-nvswitch"),
        (host.nvlink_major, "nvidia-nvlink"),
        (host.caps_major, "nvidia-caps"),
        (237, "nvme-generic"),
        (238, "nvme"),
        (239, "hidraw"),
        (240, "ttyDBC"),
        (241, "bsg"),
        (242, "watchdog"),
        (243, "ptp"),
        (244, "pps"),
        (245, "rtc"),
        (246, "dma_heap"),
        (247, "dax"),
        (248, "dimmctl"),
        (249, "ndctl"),
        (250, "tpm"),
        (251, "ipmidev"),
        (252, "aux"),
        (253, "cec"),
        (254, "gpiochip"),
        *([(host.uvm_major, "nvidia-uvm")] if host.uvm_loaded else []),
    ]
    block = [(7, "loop"), (8, "sd"), (9, "md"), (65, "sd"), (253, "device-mapper"), (254, "mdp"), (259, "blkext")]
    char.sort(key=lambda item: item[0])
    out = ["Character devices:", *(f"{major:>3} {name}" for major, name in char), "", "Block devices:"]
    out += [f"{major:>3} {name}" for major, name in block]
    return _lines(out)


def lab_dev_nodes(host: LabHost) -> list[tuple[str, int, int, int]]:
    """(path, major, minor, mode) of every NVIDIA node the lab host has."""
    nodes = [(f"/dev/nvidia{g.dev_minor}", NVIDIA_MAJOR, g.dev_minor, 0o666) for g in host.gpus]
    nodes += [
        ("/dev/nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR, 0o666),
        ("/dev/nvidia-modeset", NVIDIA_MAJOR, MODESET_MINOR, 0o666),
        ("/dev/nvidia-uvm", host.uvm_major, 0, 0o666),
        ("/dev/nvidia-uvm-tools", host.uvm_major, 1, 0o666),
        ("/dev/nvidia-caps/nvidia-cap1", host.caps_major, 1, 0o400),
        ("/dev/nvidia-caps/nvidia-cap2", host.caps_major, 2, 0o444),
    ]
    return nodes


def _perm_string(mode: int) -> str:
    chars = "rwxrwxrwx"
    return "".join(c if mode & (1 << (8 - i)) else "-" for i, c in enumerate(chars))


def _ls_section(entries: list[tuple[str, int, int, int]], owner: str, group: str, date: str) -> list[str]:
    """One ``ls -l`` listing; like ``ls``, columns are right-aligned to the widest entry."""
    w_major = max(len(str(e[1])) for e in entries)
    w_minor = max(len(str(e[2])) for e in entries)
    return [
        f"c{_perm_string(mode)} 1 {owner} {group} {major:>{w_major}}, {minor:>{w_minor}} {date} {name}"
        for name, major, minor, mode in entries
    ]


def render_ls_dev(host: LabHost, *, owner: str = "root", group: str = "root", date: str = "Jun 16 09:12") -> str:
    """``ls -l /dev/nvidia*``: the top-level nodes, then the ``/dev/nvidia-caps:`` listing
    (``ls`` sorts names in the C locale and lists a matched directory after the files)."""
    nodes = lab_dev_nodes(host)
    top = sorted((n for n in nodes if n[0].count("/") == 2), key=lambda n: n[0])
    caps = sorted(
        ((p.rsplit("/", 1)[1], ma, mi, mo) for p, ma, mi, mo in nodes if p.startswith("/dev/nvidia-caps/")),
        key=lambda n: n[0],
    )
    out = _ls_section(top, owner, group, date)
    if caps:
        out += ["", "/dev/nvidia-caps:", "total 0", *_ls_section(caps, owner, group, date)]
    return _lines(out)


# --- Proxmox ----------------------------------------------------------------------------------


def render_pveversion(host: LabHost, *, verbose: bool = False) -> str:
    """``pveversion`` or, with ``verbose``, the first lines of ``pveversion -v``."""
    if not verbose:
        return f"pve-manager/{host.pve_version}/{host.pve_repoid} (running kernel: {host.kernel})\n"
    major_minor = ".".join(host.pve_version.split(".")[:2])
    kernel_series = ".".join(host.kernel.split(".")[:2])
    kernel_pkg = host.kernel.removesuffix("-pve")
    out = [
        f"proxmox-ve: {major_minor}.0 (running kernel: {host.kernel})",
        f"pve-manager: {host.pve_version} (running version: {host.pve_version}/{host.pve_repoid})",
        f"proxmox-kernel-helper: {'9.0.4' if major_minor.startswith('9') else '8.1.1'}",
        f"proxmox-kernel-{host.kernel}-signed: {kernel_pkg}",
        f"proxmox-kernel-{kernel_series}: {kernel_pkg}",
        "ceph-fuse: 17.2.8-pve2",
        "corosync: 3.1.9-pve1",
        "criu: 3.17.1-2+deb12u1",
        "glusterfs-client: 10.3-5",
        "ifupdown2: 3.2.0-1+pmx11",
        "ksm-control-daemon: 1.5-1",
        "libjs-extjs: 7.0.0-5",
        "libknet1: 1.30-pve2",
        "libproxmox-acme-perl: 1.6.0",
        "libpve-access-control: 8.2.2",
        "libpve-common-perl: 8.3.1",
        "libpve-guest-common-perl: 5.2.2",
        "libpve-storage-perl: 8.3.6",
        f"lxc-pve: {host.lxc_pve}",
        "lxcfs: 6.0.0-pve2",
        "proxmox-backup-client: 3.4.1-1",
        "pve-cluster: 8.1.0",
        f"pve-container: {host.pve_container}",
        "pve-firmware: 3.15-3",
        "pve-ha-manager: 4.0.7",
        "qemu-server: 8.3.12",
        "zfsutils-linux: 2.2.7-pve2",
    ]
    return _lines(out)


def render_gpu_information(host: LabHost, g: LabGpu) -> str:
    """``/proc/driver/nvidia/gpus/<bus>/information`` of one GPU (``Device Minor`` is the node's minor)."""
    bus = proc_bus_dir(g)
    return (f"Model: \t\t {g.name}\nIRQ:   \t\t {200 + g.index}\nGPU UUID: \t {g.uuid}\n"
            f"Video BIOS: \t {g.vbios.lower()}\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
            f"DMA Mask: \t 0xfffffffffffff\nBus Location: \t {bus}\nDevice Minor: \t {g.dev_minor}\n"
            f"GPU Firmware: \t {host.driver_version}\nGPU Excluded:\t No\n")


#: LAB-only file under the node's /proc/driver/nvidia: the fabric state the kernel driver holds (no real
#: /proc file shows it; the lab's stand-in CUDA (torch) reads it to fail as CUDA does, with error 802)
LAB_FABRIC_FILE = "LAB-fabric-state"


def render_lab_fabric_state(host: LabHost) -> str:
    return f"{host.fabric_state}\n"


def proc_bus_dir(g: LabGpu) -> str:
    """The ``/proc/driver/nvidia/gpus/`` directory name of a GPU (``0000:17:00.0``)."""
    domain, rest = g.bus_id.split(":", 1)
    return f"{int(domain, 16):04x}:{rest}".lower()


# --- nvidia-smi failures -------------------------------------------------------------------------


def render_mismatch_error(library_version: str = "570.124") -> str:
    """What ``nvidia-smi`` prints when userspace and the kernel module differ (exit 18)."""
    return f"Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {library_version}\n"


def render_no_driver_error() -> str:
    """What ``nvidia-smi`` prints when no NVIDIA kernel module is loaded (exit 9)."""
    return (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n\n"
    )
