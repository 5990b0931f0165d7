"""The Proxmox operations the lxc steps need, over our `PveClient` (HTTPS or pvesh over SSH).

The client is synchronous (proxmoxer); calls run in a thread so the event loop keeps streaming.
Errors of the client become `StepFailed` with PVE's message and a fix.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from provisioner.exitcodes import ExitCode
from provisioner.proxmox import errors as pve_errors
from provisioner.steps.base import StepFailed
from provisioner.steps.context import StepContext

T = TypeVar("T")


async def call(ctx: StepContext, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return await asyncio.to_thread(fn, *args, **kwargs)
    except pve_errors.ProxmoxError as exc:
        raise as_step_failed(what, exc) from None


def as_step_failed(what: str, exc: pve_errors.ProxmoxError) -> StepFailed:
    """The StepFailed (message, fix, exit code) for an error of the Proxmox client."""
    if isinstance(exc, pve_errors.AuthFailed):
        return StepFailed(f"{what}: Proxmox API authentication failed ({exc})",
                          fix="check the API user and the password/token reference in the playbook", exit_code=ExitCode.UNREACHABLE)
    if isinstance(exc, pve_errors.PermissionDenied):
        return StepFailed(f"{what}: {exc.message}",
                          fix="use root@pam with a password ticket (API tokens cannot set devN) or a root SSH shell")
    if isinstance(exc, pve_errors.InvalidRequest):
        return StepFailed(f"{what}: Proxmox rejected the request: {exc}", exit_code=ExitCode.USAGE)
    if isinstance(exc, pve_errors.TaskFailed):
        tail = [line for line in exc.log if line.strip() and not line.startswith("TASK ")][-6:]
        return StepFailed(f"{what}: Proxmox task failed: {exc.exitstatus}" +
                          ("\ntask log:\n  " + "\n  ".join(tail) if tail else ""), evidence=list(exc.log)[-20:],
                          fix="read the task log above; fix the cause and replay (the step resumes)")
    if isinstance(exc, pve_errors.TaskTimeout):
        return StepFailed(f"{what}: Proxmox task did not finish in time ({exc})",
                          fix="check the task in the Proxmox UI (Datacenter → Tasks); replay once it has finished")
    if isinstance(exc, pve_errors.TlsRejected):
        return StepFailed(f"{what}: refusing the Proxmox API: {exc}",
                          fix="set target.api.ca_file to the node's CA (/etc/pve/pve-root-ca.pem) or pin "
                              "target.api.fingerprint (`pvenode cert info` on the node)", exit_code=ExitCode.UNREACHABLE)
    if isinstance(exc, pve_errors.HostKeyRejected):
        return StepFailed(f"{what}: {exc}", exit_code=ExitCode.UNREACHABLE)
    return StepFailed(f"{what}: {exc}", exit_code=4 if isinstance(exc, pve_errors.Unreachable) else 1)


def node_name(ctx: StepContext) -> str:
    return ctx.playbook.target.node
