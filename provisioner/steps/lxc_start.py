"""`lxc.start`: start the container and check the passed device nodes inside it."""

from __future__ import annotations

from collections.abc import AsyncIterator

from pydantic import Field

from provisioner.events import Event
from provisioner.node_resources import node_bridges
from provisioner.proxmox.lxc_conf import parse_property_string
from provisioner.steps.base import DependsOnEarlier, Params, Plan, StepFailed, StepKind, register
from provisioner.steps.context import StepContext
from provisioner.steps.gpu_common import verify_devices_in_container, verify_gpus_by_uuid
from provisioner.steps.pve_ops import call, node_name
from provisioner.steps.task_wait import wait_task
from provisioner.validate import BRIDGE_RE

#: what lxc-start logs when a netN's host side cannot be made (pve-container's network hook died: for a Linux
#: bridge, "bridge '<name>' does not exist"; tteck/Proxmox#181 holds a real task log of it)
NETWORK_FAILED = ("Failed to create the network", "Failed to create network device")


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
        try:
            await wait_task(ctx, f"start CT {ctx.vmid}", upid, self.params.timeout_s)
        except StepFailed as exc:
            if any(words in line for line in [exc.message, *exc.evidence] for words in NETWORK_FAILED):
                await self._name_a_missing_bridge(ctx, exc)
            raise
        yield ctx.info(f"CT {ctx.vmid} started")

    async def _name_a_missing_bridge(self, ctx: StepContext, failed: StepFailed) -> None:
        """The start failed making the network: a netN that names a bridge the node lacks is the cause to name
        (the config and the node's bridge list are read; the task log does not hold the hook's words)."""
        node = node_name(ctx)
        config = await call(ctx, f"read CT {ctx.vmid}'s config", ctx.pve().ct_config, ctx.vmid, node)
        have = await node_bridges(ctx.pve(), node)
        if have is None or not isinstance(config, dict):
            return
        for key in sorted((k for k in config if isinstance(k, str) and k[3:].isdigit() and k.startswith("net")),
                          key=lambda k: int(k[3:])):
            bridge = parse_property_string(str(config[key])[:1000], "name").get("bridge", "")
            if BRIDGE_RE.match(bridge) and bridge not in have:
                cause = (f"CT {ctx.vmid} cannot start: its {key} names bridge {bridge!r}, which {node} does not "
                         f"have (bridges: {', '.join(have) or 'none'})")
                fix = (f"set the bridge of {key} to one the node has (lxc.create's net field, e.g. "
                       f"bridge={have[0] if have else 'vmbr0'}) and replay")
                said = [line for line in failed.evidence if any(words in line for words in NETWORK_FAILED)]
                # the step's own finding (the category of the log's generic guess, which it outranks: "a hook
                # or mount in its config fails" is not what to fix here)
                finding: dict[str, object] = {"category": "proxmox_lxc", "root_cause": cause, "fix": fix,
                                              "evidence": [*said[:2], f"{key}: bridge={bridge}"]}
                raise StepFailed(cause, fix=fix, evidence=failed.evidence, findings=[finding]) from failed

    async def verify(self, ctx: StepContext) -> None:
        if await self._status(ctx) != "running":
            raise StepFailed(f"CT {ctx.vmid} is not running after start")
        await verify_devices_in_container(ctx)
        await verify_gpus_by_uuid(ctx)
