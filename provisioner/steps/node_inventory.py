"""`node.inventory`: the node's GPUs, driver module, device majors and nodes, PVE and cgroup version (read-only)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from pydantic import Field

from provisioner.events import Event
from provisioner.facts import catalog
from provisioner.facts.base import FactUnavailable
from provisioner.facts.models import UnitState
from provisioner.payloads import JsonObject
from provisioner.steps.base import Params, Plan, StepFailed, StepKind, register
from provisioner.steps.context import StepContext
from provisioner.steps.host_inventory import gather_inventory
from provisioner.steps.host_preflight import fabric_manager_failure, vgpu_failure
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
        await preflight(ctx, inv)
        names = sorted({g.name for g in gpus})
        notes = [f"{len(gpus)} GPU(s): {', '.join(names)}; compute capability "
                 f"{', '.join(sorted({str(g.compute_cap) for g in gpus}))}",
                 f"host driver {inv.driver_version} ({inv.module_flavour} kernel module)",
                 f"cgroup v{inv.cgroup_version}, PVE {inv.pve_version}"]
        if inv.nvswitch:
            notes.append(f"NVSwitch system ({len(inv.nvswitch)} signs); nvidia-fabricmanager {inv.fabricmanager}")
        shuffled = {g.index: inv.minor_of(g) for g in gpus if inv.minor_of(g) != g.index}
        if shuffled:
            notes.append("device minors differ from nvidia-smi indices: " + ", ".join(
                f"GPU {i} = /dev/nvidia{m}" for i, m in sorted(shuffled.items())))
        notes += [f"warning: {w}" for w in inv.warnings]
        return Plan.no_change(*notes)

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        return
        yield  # pragma: no cover

    def resolved(self, ctx: StepContext) -> JsonObject:
        inv = ctx.state.inventory
        if inv is None:
            return {}
        return {"host_driver": inv.driver_version, "gpus": [
            g.model_dump(include={"index", "name", "uuid", "pci_bus_id", "compute_cap"}) for g in inv.gpus]}


async def preflight(ctx: StepContext, inv: HostInventory) -> None:
    """Host checks before any container change (the open-module check ran while gathering the inventory)."""
    nvswitch = await ctx.fact(ctx.node, catalog.NVSWITCH)
    fabric = await ctx.fact(ctx.node, catalog.FABRIC_STATES)
    unit: UnitState | None = None
    if inv.nvswitch:
        unit = await ctx.fact(ctx.node, catalog.FABRICMANAGER)
    failure = fabric_manager_failure(ctx.host, nvswitch, fabric, unit)
    if failure is not None:
        raise failure
    public_driver = any(s.kind == "driver.userspace" and not s.params.get("driver_run") for s in ctx.playbook.steps)
    if public_driver and inv.driver_version:
        try:
            vgpu = await ctx.fact(ctx.node, catalog.VGPU)
        except FactUnavailable:
            return
        failure = vgpu_failure(vgpu, inv.driver_version, public_driver=public_driver)
        if failure is not None:
            raise failure
