"""`lxc.start`: start the container and check the passed device nodes inside it."""

from __future__ import annotations

from collections.abc import AsyncIterator

from pydantic import Field

from provisioner.events import Event
from provisioner.steps.base import DependsOnEarlier, Params, Plan, StepFailed, StepKind, register
from provisioner.steps.context import StepContext
from provisioner.steps.gpu_common import verify_devices_in_container, verify_gpus_by_uuid
from provisioner.steps.pve_ops import call, node_name
from provisioner.steps.task_wait import wait_task


class StartParams(Params):
    timeout_s: int = Field(120, ge=5, le=3600)


@register
class LxcStart(StepKind[StartParams]):
    """Start the container and prove every passed device node is present inside."""

    kind = "lxc.start"
    title = "Start the container"
    Params = StartParams

    async def _status(self, ctx: StepContext) -> str:
        cts = await call(ctx, "list containers", ctx.pve().list_cts, node_name(ctx))
        if not any(int(ct.get("vmid", -1)) == ctx.vmid for ct in cts):
            if ctx.mode == "plan":
                raise DependsOnEarlier(f"CT {ctx.vmid} does not exist yet")
            raise StepFailed(f"CT {ctx.vmid} does not exist on {node_name(ctx)}", fix="run lxc.create first")
        status = await call(ctx, "container status", ctx.pve().ct_status, ctx.vmid, node_name(ctx))
        return str(status.get("status", "unknown"))

    async def check(self, ctx: StepContext) -> Plan:
        status = await self._status(ctx)
        if status == "running":
            return Plan.no_change(f"CT {ctx.vmid} is running")
        return Plan(changes=[f"start CT {ctx.vmid} (now {status})"])

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        client = ctx.pve()
        upid = await call(ctx, f"start CT {ctx.vmid}", client.start_ct, ctx.vmid, node_name(ctx))
        await wait_task(ctx, f"start CT {ctx.vmid}", upid, self.params.timeout_s)
        yield ctx.info(f"CT {ctx.vmid} started")

    async def verify(self, ctx: StepContext) -> None:
        if await self._status(ctx) != "running":
            raise StepFailed(f"CT {ctx.vmid} is not running after start")
        await verify_devices_in_container(ctx)
        await verify_gpus_by_uuid(ctx)
