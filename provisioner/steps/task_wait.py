"""Waiting for a Proxmox task without blocking the event loop: bounded by the step's own timeout,
with a progress event while it runs (instead of a silent fixed wait)."""

from __future__ import annotations

import asyncio
import time

from provisioner.proxmox import errors as pve_errors
from provisioner.proxmox.tasks import TaskResult, WaitPolicy, exitstatus_is_ok, exitstatus_warnings
from provisioner.steps.context import StepContext
from provisioner.steps.pve_ops import as_step_failed, call, node_name


async def wait_task(ctx: StepContext, what: str, upid: str, timeout_s: float,
                    policy: WaitPolicy | None = None) -> TaskResult:
    """Poll `upid` until it stops. OK/WARNINGS → TaskResult; an error exit → StepFailed with the task
    log; still running after `timeout_s` → StepFailed saying so (the task keeps running on the node)."""
    policy = policy or WaitPolicy(timeout_s=timeout_s)
    client, node = ctx.pve(), node_name(ctx)
    start = time.monotonic()
    last_progress = start
    intervals = policy.intervals()
    while True:
        status = await call(ctx, what, client.task_status, node, upid)
        state = str(status.get("status", "unknown"))
        if state == "stopped":
            exitstatus = str(status.get("exitstatus") or "unexpected status")
            log = await call(ctx, what, client.task_log, node, upid)
            if exitstatus_is_ok(exitstatus):
                return TaskResult(upid, exitstatus, exitstatus_warnings(exitstatus), log)
            raise as_step_failed(what, pve_errors.TaskFailed(upid, exitstatus, log[-50:]))
        now = time.monotonic()
        elapsed = now - start
        if elapsed >= policy.timeout_s:
            raise as_step_failed(what, pve_errors.TaskTimeout(upid, policy.timeout_s, state))
        if now - last_progress >= policy.progress_every_s:
            last_progress = now
            ctx.bus.emit(ctx.progress(f"{what}: Proxmox task {state}", round(elapsed, 1), policy.timeout_s, "s"))
        await asyncio.sleep(min(next(intervals), policy.timeout_s - elapsed))
