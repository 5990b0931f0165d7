"""Result models of the pure fact parsers, and the errors they raise.

Every parser in ``provisioner.facts.{nvidia,system,proxmox}`` takes the text a command printed
and returns one of these frozen pydantic models, or raises :class:`ParseError` (a ``ValueError``)
with a message that names what was expected. When ``nvidia-smi`` itself failed (driver/library
mismatch, no driver loaded, ...) its parsers raise :class:`NvidiaSmiFailed`, a ``ParseError``
that carries the classified :class:`SmiFailure`.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Literal

from packaging.version import Version
from pydantic import BaseModel, ConfigDict


class ParseError(ValueError):
    """The text is not the output the parser expects."""


class SmiFailureKind(StrEnum):
    """Why ``nvidia-smi`` printed an error instead of data."""

    DRIVER_LIBRARY_MISMATCH = "driver_library_mismatch"
    NO_DRIVER = "no_driver"
    NO_DEVICES = "no_devices"
    NVML_UNKNOWN_ERROR = "nvml_unknown_error"
    INSUFFICIENT_PERMISSIONS = "insufficient_permissions"
    NVML_NOT_FOUND = "nvml_not_found"
    COMMAND_NOT_FOUND = "command_not_found"
    INVALID_FIELD = "invalid_field"
    OTHER_NVML_ERROR = "other_nvml_error"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SmiFailure(_Model):
    """A classified ``nvidia-smi`` failure: the kind, the decisive line, extra details."""

    kind: SmiFailureKind
    message: str
    nvml_library_version: str | None = None
    invalid_field: str | None = None


class NvidiaSmiFailed(ParseError):
    """``nvidia-smi`` reported an error instead of data; ``failure`` says which."""

    def __init__(self, failure: SmiFailure) -> None:
        super().__init__(f"nvidia-smi failed ({failure.kind.value}): {failure.message}")
        self.failure = failure


class SmiStatus(_Model):
    """Status of an ``nvidia-smi`` run: ok, or the classified failure."""

    ok: bool
    failure: SmiFailure | None = None


# --- nvidia-smi --query-gpu ------------------------------------------------------------------


class Gpu(_Model):
    """One row of ``nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,compute_cap,...``."""

    index: int
    name: str
    uuid: str
    pci_bus_id: str
    compute_cap: str | None
    driver_version: str
    memory_mib: int | None


# --- nvidia-smi -q ----------------------------------------------------------------------------


class SmiQGpu(_Model):
    """The facts taken from one ``GPU 00000000:17:00.0`` block of ``nvidia-smi -q``."""

    bus_id: str
    product_name: str
    uuid: str
    product_architecture: str | None = None
    serial_number: str | None = None
    minor_number: int | None = None
    vbios_version: str | None = None
    persistence_mode: bool | None = None
    compute_cap: str | None = None
    memory_total_mib: int | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    ecc_enabled: bool | None = None
    ecc_pending: bool | None = None
    temperature_c: int | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None


class SmiQuery(_Model):
    """``nvidia-smi -q``: header facts and one entry per GPU block."""

    timestamp: str | None
    driver_version: str
    cuda_version: str | None
    attached_gpus: int
    gpus: tuple[SmiQGpu, ...]
    #: R610+: ``KMD Version`` (kernel-mode driver) and ``CUDA UMD Version`` (user-mode driver's CUDA);
    #: ``driver_version``/``cuda_version`` take them first. None on older drivers.
    kmd_version: str | None = None
    cuda_umd_version: str | None = None
    #: fields whose value carried a ``[Deprecated; ...]`` note (R610: ``Driver Version``, ``CUDA Version``)
    deprecated_fields: tuple[str, ...] = ()


# --- default nvidia-smi table -----------------------------------------------------------------


class SmiTableGpu(_Model):
    """One GPU of the default ``nvidia-smi`` table (the name may be truncated with ``...``)."""

    index: int
    name: str
    persistence_mode: bool | None
    bus_id: str
    display_active: bool | None
    volatile_uncorr_ecc: str
    fan_percent: int | None
    temperature_c: int | None
    perf_state: str
    power_usage_w: int | None
    power_cap_w: int | None
    memory_used_mib: int | None
    memory_total_mib: int | None
    gpu_util_percent: int | None
    compute_mode: str
    mig_mode: str


class SmiTable(_Model):
    """The default ``nvidia-smi`` table."""

    smi_version: str
    driver_version: str
    cuda_version: str | None
    gpus: tuple[SmiTableGpu, ...]
    processes: tuple[str, ...] = ()


# --- nvidia-smi topo --------------------------------------------------------------------------


class TopoMatrix(_Model):
    """``nvidia-smi topo -m``: link type between every pair of devices (GPUs and NICs)."""

    devices: tuple[str, ...]
    links: dict[str, dict[str, str]]
    cpu_affinity: dict[str, str]
    numa_affinity: dict[str, str | None]
    gpu_numa_id: dict[str, str | None]
    nic_names: dict[str, str]
    legend: dict[str, str]

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if d.startswith("GPU"))

    def link(self, a: str, b: str) -> str:
        """Link type between two devices, e.g. ``link("GPU0", "GPU1") == "NODE"``."""
        try:
            return self.links[a][b]
        except KeyError as exc:
            raise KeyError(f"no topology entry for {a} -> {b}") from exc


class P2PMatrix(_Model):
    """``nvidia-smi topo -p2p r|w|n|a|p``: P2P status code between every GPU pair."""

    gpus: tuple[str, ...]
    status: dict[str, dict[str, str]]
    legend: dict[str, str]

    def all_ok(self) -> bool:
        """True when every pair of distinct GPUs reports ``OK``."""
        return all(self.status[a][b] == "OK" for a in self.gpus for b in self.gpus if a != b)

    def not_ok_pairs(self) -> list[tuple[str, str, str]]:
        return [
            (a, b, self.status[a][b])
            for a in self.gpus
            for b in self.gpus
            if a != b and self.status[a][b] != "OK"
        ]


# --- kernel module / device nodes -------------------------------------------------------------

ModuleFlavour = Literal["open", "proprietary"]


class DriverVersionInfo(_Model):
    """``/proc/driver/nvidia/version``: kernel module version and flavour."""

    version: str
    flavour: ModuleFlavour
    arch: str
    build_info: str
    gcc_version: str | None


class ProcDevices(_Model):
    """``/proc/devices``: device name -> major, for character and block devices."""

    char: dict[str, int]
    block: dict[str, int]

    def char_major(self, name: str) -> int | None:
        return self.char.get(name)

    @property
    def nvidia_major(self) -> int | None:
        """The nvidia frontend major (195), registered as ``nvidia-frontend`` or ``nvidia``."""
        return self.char.get("nvidia-frontend", self.char.get("nvidia"))

    @property
    def uvm_major(self) -> int | None:
        return self.char.get("nvidia-uvm")

    @property
    def caps_major(self) -> int | None:
        return self.char.get("nvidia-caps")


DevType = Literal["c", "b"]


class DevNode(_Model):
    """One device node: path, type (``c``/``b``), major, minor, permission bits, owner."""

    path: str
    type: DevType
    major: int
    minor: int
    mode: int
    owner: str | None = None
    group: str | None = None

    @property
    def mode_octal(self) -> str:
        return f"{self.mode:04o}"


class DevNodes(_Model):
    """Device nodes listed by ``ls -l`` (or ``stat``); paths ``ls`` could not access."""

    nodes: tuple[DevNode, ...]
    missing: tuple[str, ...] = ()

    def by_path(self) -> dict[str, DevNode]:
        return {n.path: n for n in self.nodes}


class GpuProcInfo(_Model):
    """``/proc/driver/nvidia/gpus/<bus>/information`` of one GPU: ``Device Minor`` is the N of /dev/nvidiaN."""

    bus_id: str  # normalised as nvidia-smi prints it: 00000000:17:00.0
    minor: int
    uuid: str | None = None
    model: str | None = None


class PciDevice(_Model):
    """One line of ``lspci -nn``: slot, class id, vendor:device ids."""

    slot: str
    class_id: str
    vendor_id: str
    device_id: str
    description: str


class NvSwitchFacts(_Model):
    """Signs of NVSwitch on the node: its PCI bridges, /dev/nvidia-nvswitchN, /proc/driver/nvidia-nvswitch."""

    pci: tuple[str, ...] = ()
    dev_nodes: tuple[str, ...] = ()
    proc_devices: tuple[str, ...] = ()

    @property
    def present(self) -> bool:
        return bool(self.pci or self.dev_nodes or self.proc_devices)

    @property
    def evidence(self) -> list[str]:
        return [*(f"NVSwitch PCI device {p}" for p in self.pci), *self.dev_nodes,
                *(f"/proc/driver/nvidia-nvswitch/devices/{d}" for d in self.proc_devices)]


class UnitState(_Model):
    """``systemctl is-active UNIT``: the state word it printed (active, inactive, failed, unknown, ...)."""

    unit: str
    state: str

    @property
    def active(self) -> bool:
        return self.state == "active"


# --- Proxmox / system -------------------------------------------------------------------------


class PveVersion(_Model):
    """``pveversion`` or ``pveversion -v``."""

    manager_version: str
    repoid: str | None
    running_kernel: str
    packages: dict[str, str] = {}

    @property
    def release(self) -> tuple[int, int]:
        """(major, minor) of pve-manager, e.g. (8, 4)."""
        m = re.match(r"^(\d+)\.(\d+)", self.manager_version)
        if m is None:  # pragma: no cover - the parser only accepts versions that match
            raise ValueError(f"bad pve-manager version {self.manager_version!r}")
        return int(m.group(1)), int(m.group(2))


class CgroupInfo(_Model):
    """``stat -fc %T /sys/fs/cgroup``: ``cgroup2fs`` -> v2, ``tmpfs`` -> v1 (or hybrid)."""

    fs_type: str
    version: Literal[1, 2]


class OsRelease(_Model):
    """``/etc/os-release``."""

    id: str
    version_id: str | None
    pretty_name: str | None
    name: str | None
    version_codename: str | None
    id_like: tuple[str, ...] = ()
    fields: dict[str, str] = {}


class Libc(_Model):
    """``ldd --version``: C library family and version (glibc ``2.36``; musl ``1.2.5``)."""

    family: Literal["glibc", "musl"]
    version: str
    vendor: str | None = None
    package_version: str | None = None

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return Version(self.version).release


class DfEntry(_Model):
    """One filesystem line of ``df -B1`` / ``df -k`` (sizes converted to bytes)."""

    filesystem: str
    size_bytes: int
    used_bytes: int
    available_bytes: int
    mountpoint: str


class RawText(_Model):
    """Evidence read for its text (a kernel log, the installer log tail, `nvidia-smi -q`)."""

    text: str


class UserspaceLibs(_Model):
    """The NVIDIA userspace driver libraries installed in a container (``ls -1`` of their files)."""

    files: tuple[str, ...]
    versions: tuple[str, ...]  # of libnvidia-ml.so.<version>: what must equal the host kernel module


InstallerOutcome = Literal["succeeded", "failed", "incomplete"]


class InstallerLog(_Model):
    """The decisive facts of ``/var/log/nvidia-installer.log``."""

    installer_version: str | None
    command_line: tuple[str, ...]
    outcome: InstallerOutcome
    driver_version: str | None
    errors: tuple[str, ...]
    failed_steps: tuple[str, ...]
    warnings: tuple[str, ...]
    kernel_module_load_error: str | None
    decisive_lines: tuple[str, ...]


class InstallerRecord(_Model):
    """What the last ``.run`` install left in a container: installers still in /root (the step copies
    one there and removes it after a finished run) and its log (None where there is none)."""

    leftover_installers: tuple[str, ...]
    log: InstallerLog | None

    @property
    def unfinished(self) -> str | None:
        """Why the last install did not finish, or None where nothing says so."""
        why = []
        if self.log is not None and self.log.outcome != "succeeded":
            why.append(f"the installer log ends {self.log.outcome} (no 'is now complete' line)")
        if self.leftover_installers:
            why.append(f"{', '.join(self.leftover_installers)} is still in /root")
        return "; ".join(why) or None


class PipFreeze(_Model):
    """``pip freeze`` / ``uv pip freeze``: canonical name -> version (and direct URLs)."""

    versions: dict[str, str]
    urls: dict[str, str] = {}
    editable: tuple[str, ...] = ()


class TorchRuntime(_Model):
    """What one interpreter's torch reports (`facts.torch_runtime`)."""

    imported: bool
    version: str | None = None
    cuda_available: bool = False
    distributed: bool = False
    nccl: bool = False
    gloo: bool = False
    error: str | None = None

    @property
    def backend(self) -> Literal["nccl", "gloo"]:
        """The collective backend a burn-in uses with this torch: NCCL on GPUs, else gloo on the CPU."""
        return "nccl" if self.cuda_available and self.nccl else "gloo"
