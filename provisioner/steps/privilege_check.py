"""Privileges known before any change: which PVE privileges each step of a playbook needs (the rule table
`provisioner.proxmox.privileges`) against the caller's effective permissions (``GET /access/permissions``).

`plan` lists, per step, each missing privilege with the path it is needed on; `replay` stops before the
first change when one is missing (exit 4). root@pam (a password ticket or `pvesh` over a root shell)
passes every check and is not asked; an API token is never root@pam (devN stays the root shell's).
"""

from __future__ import annotations

from typing import Any

from provisioner.playbook import StepSpec
from provisioner.proxmox import privileges
from provisioner.proxmox.privileges import Need
from provisioner.steps.context import StepContext
from provisioner.steps.pve_ops import call

#: the step kinds that call the Proxmox API with the playbook's identity
API_STEPS = ("lxc.create", "lxc.start")


def _vmid(ctx: StepContext, params: dict[str, Any]) -> int | None:
    vmid = params.get("vmid")
    if vmid is not None:
        return int(vmid)
    return ctx.playbook.target.container


def step_needs(ctx: StepContext, spec: StepSpec) -> list[Need]:
    """What `spec` asks of the API (none for the steps that work over the root shell)."""
    from provisioner.steps.lxc_create import CreateParams

    if spec.kind not in API_STEPS:
        return []
    vmid = _vmid(ctx, dict(spec.params))
    where = f"/vms/{vmid}" if vmid is not None else "/vms"
    if spec.kind == "lxc.start":
        return [Need(("VM.Audit",), where, "read the container's status"),
                Need(("VM.PowerMgmt",), where, "start the container")]
    params = CreateParams.model_validate(spec.params)
    api = params.api_params(vmid if vmid is not None else 0)
    needs = [n if vmid is not None else Need(n.privileges, n.path.replace("/vms/0", "/vms"), n.why)
             for n in privileges.create_needs(api)]
    needs.append(Need(("VM.Audit",), where, "see an existing container (list, config)"))
    storage = params.template.partition(":")[0]
    if params.download_template:
        needs += privileges.template_download_needs(storage)
    return needs


async def missing_by_step(ctx: StepContext, steps: list[StepSpec]) -> dict[int, list[Need]]:
    """index -> the needs of that step the caller lacks ({} when nothing is missing or nobody is asked)."""
    wanted = {i: step_needs(ctx, spec) for i, spec in enumerate(steps)}
    wanted = {i: n for i, n in wanted.items() if n}
    api = ctx.playbook.target.api
    if not wanted or ctx.pve_factory is None or api is None:
        return {}  # no API: the steps say so themselves
    if api.user == privileges.ROOT_PAM and not api.token_name:
        return {}  # root@pam with a password ticket passes every check (no login just to ask)
    client = ctx.pve()
    user = str(getattr(client, "user", ""))
    if getattr(client, "is_root_pam", False):
        return {}
    perms = await call(ctx, "read the API user's permissions", client.permissions)
    out: dict[int, list[Need]] = {}
    for index, needs in wanted.items():
        lacking = privileges.missing(needs, perms, user=user)
        if lacking:
            out[index] = lacking
    return out


def describe(steps: list[StepSpec], missing: dict[int, list[Need]], user: str) -> str:
    lines = [f"the Proxmox API user {user} lacks privileges this playbook needs:"]
    for index, needs in sorted(missing.items()):
        spec = steps[index]
        lines.append(f"  step {index + 1} {spec.name or spec.kind}: " + "; ".join(n.text() for n in needs))
    return "\n".join(lines)
