"""What the lxc.* steps share: the container id, its config file on the node, the run's node inventory."""

from __future__ import annotations

from provisioner.exitcodes import ExitCode
from provisioner.facts import evidence
from provisioner.proxmox.lxc_conf import LxcConfig
from provisioner.steps.base import DependsOnEarlier, StepFailed
from provisioner.steps.context import StepContext
from provisioner.steps.host_inventory import gather_inventory
from provisioner.steps.ownership import OWNER_TAG
from provisioner.steps.state import HostInventory

__all__ = ["BACKUP_DIR", "OWNER_TAG", "conf_path", "ensure_inventory", "read_conf", "read_conf_text",
           "target_vmid"]


BACKUP_DIR = "/etc/gpu-provisioner/backups"  # node config files are copied here before an edit


def target_vmid(ctx: StepContext, vmid: int | None) -> int:
    if vmid is not None:
        if ctx.playbook.target.container not in (None, vmid):
            raise StepFailed(f"step vmid {vmid} differs from the playbook's target container "
                             f"{ctx.playbook.target.container}", exit_code=ExitCode.USAGE)
        return vmid
    return ctx.vmid


def conf_path(vmid: int) -> str:
    return f"/etc/pve/lxc/{vmid}.conf"


async def read_conf_text(ctx: StepContext, vmid: int) -> str:
    """The container's config file as the node has it now, read through the fact `bundle` and `diagnose --host`
    read (`facts.evidence.LXC_CONFIG_FILE`), afresh: the lxc.* steps edit the file, a kept read would be stale."""
    fact = evidence.bind(evidence.LXC_CONFIG_FILE, vmid, None)
    ctx.facts.invalidate(ctx.node.name, fact.name)
    result = await ctx.facts.result(ctx.node, fact)
    if not result.ok:
        raise DependsOnEarlier(f"CT {vmid} config does not exist yet") if ctx.mode == "plan" else \
            StepFailed(f"cannot read {conf_path(vmid)}: {' '.join(result.tail(2))}")
    return result.output


async def read_conf(ctx: StepContext, vmid: int) -> LxcConfig:
    """`read_conf_text`, parsed."""
    return LxcConfig.parse(await read_conf_text(ctx, vmid))


async def ensure_inventory(ctx: StepContext) -> HostInventory:
    """The run's node inventory, gathered now when `node.inventory` did not run before."""
    if ctx.state.inventory is None:
        ctx.state.inventory = await gather_inventory(ctx)
    return ctx.state.inventory
