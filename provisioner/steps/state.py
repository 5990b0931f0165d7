"""The typed state of one run on one host: what steps learn and hand to later steps (and pages read).

Steps write it (`node.inventory` the inventory, `lxc.create` the vmid, `gpu.detect` the
container's GPUs, `torch.resolve` the choice, `venv.build` the lock and runtime, `burnin.run` the
report); nothing else is passed between steps. Pages under `screens/pages/` read these typed
fields directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict

from provisioner.facts.models import Gpu, P2PMatrix, TopoMatrix
from provisioner.payloads import (
    BurninReport,
    DriverSourceRecord,
    MultinodeReport,
    TemplateRecord,
    VenvLock,
    VenvRuntime,
)
from provisioner.resolver.models import Resolution


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class HostInventory(_Model):
    """The node as `node.inventory` found it (every field from a fact of `facts.catalog`)."""

    gpus: list[Gpu]
    driver_version: str
    module_flavour: str
    uvm_major: int | None
    caps_major: int | None
    nvidia_major: int = 195
    device_nodes: list[str]
    #: nvidia-modeset.ko is loaded (`/proc/devices` lists it): /dev/nvidia-modeset can be created with
    #: `nvidia-modprobe -m` even while it does not exist (after a reboot nothing has created it yet)
    modeset_loaded: bool = False
    pve_version: str
    pve_release: tuple[int, ...]
    kernel: str
    cgroup_version: int
    warnings: list[str] = []
    #: nvidia-smi PCI bus id -> device minor (the N of /dev/nvidiaN; /proc/driver/nvidia/gpus/<bus>/information)
    gpu_minors: dict[str, int] = {}
    #: NVSwitch evidence (PCI bridges, /dev/nvidia-nvswitchN); empty on a host without NVSwitch
    nvswitch: list[str] = []
    fabricmanager: str | None = None  # `systemctl is-active nvidia-fabricmanager` on NVSwitch systems

    def minor_of(self, gpu: Gpu) -> int:
        """The device minor of `gpu`: from /proc/driver/nvidia/gpus, else (no such file) its index."""
        return self.gpu_minors.get(gpu.pci_bus_id.upper(), gpu.index)


class GpuDetection(_Model):
    """The GPUs as the container sees them (`gpu.detect`)."""

    gpus: list[Gpu]
    topology: TopoMatrix | None = None
    p2p_read: P2PMatrix | None = None


class TorchChoice(_Model):
    """`torch.resolve`'s outcome: the resolver's typed resolution, the Python and the request it answers."""

    resolution: Resolution
    python: str
    request: dict[str, object]  # the torch.resolve parameters (ResolveParams.model_dump())

    def recorded(self) -> dict[str, object]:
        """What the playbook's `resolved.torch` keeps (a replay compares `request`)."""
        r = self.resolution
        return {"variant": r.variant, "index_url": r.index_url, "torch": r.torch, "torchvision": r.torchvision,
                "cuda": r.cuda, "python": self.python, "verified": r.verified, "request": self.request}


@dataclass(frozen=True)
class HalfCreated:
    """Our container that PVE has not finished creating."""

    vmid: int
    upid: str | None
    task: Literal["running", "ok", "failed", "unknown"]
    exitstatus: str = ""

    def describe(self) -> str:
        if self.task == "running":
            return f"our create task {self.upid} is still running"
        if self.task == "ok":
            return f"our create task {self.upid} has finished"
        if self.task == "failed":
            return f"our create task {self.upid} ended with {self.exitstatus!r} and left the container unfinished"
        return "our create request left no task that PVE still knows"


@dataclass
class RunState:
    vmid: int | None = None
    pve_release: tuple[int, ...] | None = None
    inventory: HostInventory | None = None
    ct_created: bool | None = None
    passthrough_devices: list[str] | None = None
    selected_gpus: list[str] | None = None  # UUIDs of the GPUs lxc.gpu_passthrough passes (by device minor)
    host_driver: str | None = None
    driver_source: DriverSourceRecord | None = None  # where driver.userspace found the host's .run (layout, url)
    driver_unverified_sha: dict[str, str] | None = None  # url -> sha256 of a download with no published checksum
    detection: GpuDetection | None = None
    torch: TorchChoice | None = None
    venv_lock: VenvLock | None = None
    venv_freeze: list[str] = field(default_factory=list)
    venv_runtime: VenvRuntime | None = None
    template: TemplateRecord | None = None  # lxc.create: the template's name and aplinfo sha512
    burnin: BurninReport | None = None  # the burn-in's report, parsed from the rank's JSON line
    burnin_collective: str = ""
    burnin_multinode: MultinodeReport | None = None  # this node's view of the multi-node burn-in report
    create_resume: HalfCreated | None = None  # lxc.create: our half-created CT, found by check for apply

    @property
    def gpus(self) -> list[Gpu]:
        """The GPUs the container sees when detected, else the node's."""
        if self.detection is not None:
            return list(self.detection.gpus)
        return list(self.inventory.gpus) if self.inventory is not None else []
