"""`node.inventory`: the node's GPUs, driver module, device majors and nodes, PVE and cgroup version (read-only)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from pydantic import Field

from provisioner.events import Event
from provisioner.facts import catalog
from provisioner.facts.base import FactUnavailable
from provisioner.steps.base import Params, Plan, StepFailed, StepKind, register
from provisioner.steps.context import StepContext
from provisioner.steps.state import HostInventory


class InventoryParams(Params):
    expected_gpus: int | None = Field(None, ge=1, le=64, description="Fail unless exactly this many GPUs are found.")


@register
class NodeInventory(StepKind[InventoryParams]):
    """GPUs, host driver module, device majors and nodes, PVE version, cgroup version. Read-only."""

    kind = "node.inventory"
    title = "Inventory the node's GPUs and driver"
    Params = InventoryParams

    async def check(self, ctx: StepContext) -> Plan:
        inv = await gather_inventory(ctx)
        ctx.state.inventory = inv
        gpus = inv.gpus
        if self.params.expected_gpus is not None and len(gpus) != self.params.expected_gpus:
            raise StepFailed(f"found {len(gpus)} GPUs on {ctx.host}, the playbook expects {self.params.expected_gpus}",
                             fix="check `nvidia-smi -L` on the node (a GPU fallen off the bus shows in dmesg as Xid 79)")
        names = sorted({g.name for g in gpus})
        notes = [f"{len(gpus)} GPU(s): {', '.join(names)}; compute capability "
                 f"{', '.join(sorted({str(g.compute_cap) for g in gpus}))}",
                 f"host driver {inv.driver_version} ({inv.module_flavour} kernel module)",
                 f"cgroup v{inv.cgroup_version}, PVE {inv.pve_version}"]
        notes += [f"warning: {w}" for w in inv.warnings]
        return Plan.no_change(*notes)

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        return
        yield  # pragma: no cover

    def resolved(self, ctx: StepContext) -> dict[str, Any]:
        inv = ctx.state.inventory
        if inv is None:
            return {}
        return {"host_driver": inv.driver_version, "gpus": [
            g.model_dump(include={"index", "name", "uuid", "pci_bus_id", "compute_cap"}) for g in inv.gpus]}


async def gather_inventory(ctx: StepContext) -> HostInventory:
    """Node facts the later steps need (also what the TUI's inventory page shows)."""
    node = ctx.node
    warnings: list[str] = []
    module_version = await ctx.fact(node, catalog.MODULE_VERSION)
    proc_version = await ctx.fact(node, catalog.PROC_DRIVER_VERSION)
    no_module = StepFailed(
        f"no NVIDIA kernel module is loaded on {ctx.host} (/sys/module/nvidia/version and "
        "/proc/driver/nvidia/version are absent)",
        fix="install the NVIDIA driver on the Proxmox host (kernel module, open flavour for Blackwell) and "
            "load it (`modprobe nvidia`); check `dmesg | grep -i nvrm` for why it did not load")
    try:
        gpus = await ctx.fact(node, catalog.GPUS)
    except FactUnavailable as exc:
        if module_version is None and proc_version is None:
            raise no_module from None
        raise StepFailed(f"nvidia-smi on the node failed: {exc.reason}",
                         fix="fix the host driver first: nvidia-smi must list the GPUs on the node",
                         result=exc.result) from None
    # Host version: /sys/module/nvidia/version, else /proc/driver/nvidia/version, else nvidia-smi.
    driver = module_version or (proc_version.version if proc_version else "") or \
        (gpus[0].driver_version if gpus else "")
    if not driver:
        raise no_module
    flavour = proc_version.flavour if proc_version else "unknown"
    devices = await ctx.fact(node, catalog.PROC_DEVICES)
    nodes = await ctx.fact(node, catalog.DEV_NODES)
    present = {n.path for n in nodes.nodes}
    if devices.uvm_major is None:
        warnings.append("nvidia-uvm is not loaded on the host (no 'nvidia-uvm' in /proc/devices); CUDA needs it")
    if "/dev/nvidia-uvm" not in present:
        warnings.append("/dev/nvidia-uvm does not exist on the host yet (nvidia-modprobe -u -c=0 creates it)")
    missing = [f"/dev/nvidia{g.index}" for g in gpus if f"/dev/nvidia{g.index}" not in present]
    if missing:
        warnings.append(f"device nodes missing on the host: {', '.join(missing)}")
    for g in gpus:
        if g.driver_version != driver:
            warnings.append(f"GPU {g.index} reports driver {g.driver_version} but the module is {driver}")
            break
    pve = await ctx.fact(node, catalog.PVEVERSION)
    cgroup = await ctx.fact(node, catalog.CGROUP)
    return HostInventory(gpus=list(gpus), driver_version=driver, module_flavour=str(flavour),
                         uvm_major=devices.uvm_major, caps_major=devices.caps_major,
                         nvidia_major=devices.nvidia_major or 195, device_nodes=sorted(present),
                         pve_version=pve.manager_version, pve_release=tuple(pve.release),
                         kernel=pve.running_kernel, cgroup_version=cgroup.version, warnings=warnings)
