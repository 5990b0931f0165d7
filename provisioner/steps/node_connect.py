"""`node.connect`: log in to the node and check that it is a Proxmox VE host (read-only)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from pydantic import Field

from provisioner.events import Event
from provisioner.exitcodes import ExitCode
from provisioner.facts import catalog
from provisioner.facts.base import FactUnavailable
from provisioner.steps.base import Params, Plan, StepFailed, StepKind, register
from provisioner.steps.context import StepContext
from provisioner.transport.base import TransportError


class ConnectParams(Params):
    require_pve: bool = Field(True, description="Fail unless the node runs Proxmox VE (pveversion).")


@register
class NodeConnect(StepKind[ConnectParams]):
    """Open the connection (host key checked) and identify the node. Read-only."""

    kind = "node.connect"
    title = "Connect to the Proxmox node"
    Params = ConnectParams

    async def check(self, ctx: StepContext) -> Plan:
        try:
            who = await ctx.node.run(["id", "-un"], timeout=30, quiet=True)
        except TransportError as exc:
            raise StepFailed(str(exc), fix="check the address, SSH key and known_hosts entry", exit_code=ExitCode.UNREACHABLE) from None
        notes = [f"logged in as {who.output.strip() or '?'} on {ctx.host}"]
        if self.params.require_pve:
            try:
                pve = await ctx.fact(ctx.node, catalog.PVEVERSION)
            except FactUnavailable as exc:
                raise StepFailed(f"{ctx.host} does not look like a Proxmox VE node: {exc.reason}",
                                 fix="point the playbook at a Proxmox VE host (pveversion must work)") from None
            notes.append(f"Proxmox VE {pve.manager_version}, kernel {pve.running_kernel}")
            ctx.state.pve_release = tuple(pve.release)
        return Plan.no_change(*notes)

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        return
        yield  # pragma: no cover
