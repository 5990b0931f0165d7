"""Plan → apply → verify → recap over one host (fleets run several of these concurrently)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from provisioner import interrupts
from provisioner.events import Bus, Message, PlanReady, RunFinished, RunStarted, StepFinished, StepStarted, StepStatus
from provisioner.facts.base import FactUnavailable
from provisioner.node_lock import LOCK_DIR, NodeLock
from provisioner.paths import state_dir
from provisioner.playbook import Playbook, StepSpec
from provisioner.proxmox.errors import ProxmoxError
from provisioner.runlog import Recorder
from provisioner.secrets import SecretError
from provisioner.steps.base import DependsOnEarlier, StepFailed, StepKind, load_step_kinds
from provisioner.steps.context import StepContext
from provisioner.steps.pve_ops import as_step_failed
from provisioner.transport.base import CommandFailed, Transport, TransportError

Mode = Literal["plan", "apply"]


@dataclass
class HostResult:
    host: str
    counts: dict[str, int] = field(default_factory=lambda: {"ok": 0, "changed": 0, "failed": 0, "skipped": 0})
    statuses: list[StepStatus] = field(default_factory=list)
    error: str = ""
    exit_code: int = 0
    recorder: Recorder | None = None

    @property
    def failed(self) -> bool:
        return self.counts["failed"] > 0

    @property
    def pending_changes(self) -> bool:
        return self.counts["changed"] > 0


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


def diagnose_lines(lines: list[str]) -> list[dict[str, Any]]:
    """Findings of the diagnoser for a failing step's evidence (empty when unavailable)."""
    try:
        from provisioner.diagnose import diagnose
    except ImportError:
        return []
    try:
        findings = diagnose("\n".join(lines))
    except Exception:
        return []
    return [dict(f.to_dict()) for f in findings[:3]]


@contextlib.contextmanager
def container_lock(host: str, vmid: int | None) -> Iterator[None]:
    """Two runs may not provision the same container at once (lock per host and vmid)."""
    if vmid is None:
        yield
        return
    lock_dir = state_dir() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in ".-_" else "_" for c in host)
    with open(lock_dir / f"{safe}-{vmid}.lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StepFailed(f"another run is provisioning container {vmid} on {host}",
                             fix="wait for it to finish (or remove a stale lock after checking no run is active)",
                             exit_code=1) from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


async def run_host(
    playbook: Playbook,
    bus: Bus,
    node: Transport,
    *,
    mode: Mode,
    host: str,
    pve_factory: Callable[[], Any] | None = None,
    lab: bool = False,
    recorder: Recorder | None = None,
    shared: dict[str, Any] | None = None,
) -> HostResult:
    """Run every step of `playbook` against one host; failures stop this host only."""
    result = HostResult(host=host, recorder=recorder)
    ctx = build_context(playbook, bus, node, mode=mode, host=host, pve_factory=pve_factory, lab=lab)
    ctx.shared.update(shared or {})
    failed = False
    # plan changes nothing: it takes no lock, so a plan during a replay works.
    local_lock = container_lock(host, playbook.target.container) if mode == "apply" else contextlib.nullcontext()
    lock = NodeLock(node, playbook.target.container, host, str(ctx.shared.get("lab_node_lock_dir") or LOCK_DIR)) \
        if mode == "apply" else None
    index = -1
    try:
        with local_lock:
            for index, spec in enumerate(playbook.steps):
                if failed:
                    result.counts["skipped"] += 1
                    result.statuses.append("skipped")
                    bus.emit(StepFinished(host=host, index=index, step=spec.kind, status="skipped",
                                          message="skipped after an earlier failure"))
                    continue
                if lock is not None and not lock.held and spec.kind != "node.connect":
                    await lock.acquire()  # on the node itself: other controllers and state dirs see it
                step = make_step(spec)
                if recorder is not None:
                    recorder.step_started(index, spec)
                status = await run_step(ctx, index, spec.name or spec.kind, step, mode, result)
                result.counts[status if status != "interrupted" else "failed"] += 1
                result.statuses.append(status)
                if status in ("failed", "interrupted"):
                    failed = True
                elif recorder is not None and mode == "apply":
                    recorder.step_resolved(step.resolved(ctx))
    except StepFailed as exc:  # a lock
        result.counts["failed"] += 1
        result.error = exc.message
        result.exit_code = max(result.exit_code, exc.exit_code)
        bus.emit(Message(host=host, level="error", text=str(exc)))
    except TransportError as exc:  # taking the node lock
        result.counts["failed"] += 1
        result.error = str(exc)
        result.exit_code = max(result.exit_code, 4)
        bus.emit(Message(host=host, level="error", text=str(exc)))
    except asyncio.CancelledError:
        if interrupts.received() is None:
            raise
        _record_interrupt(playbook, bus, host, result, index)
    finally:
        if lock is not None:
            await lock.release()
        await node.close()
    return result


def _record_interrupt(playbook: Playbook, bus: Bus, host: str, result: HostResult, index: int) -> None:
    """SIGINT/SIGTERM: the step in progress is interrupted, the rest skipped; the recap still comes."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
    why = f"interrupted by {interrupts.name()}"
    done = len(result.statuses)
    for i, spec in enumerate(playbook.steps):
        if i < done:
            continue
        status: StepStatus = "interrupted" if i == max(index, 0) else "skipped"
        result.statuses.append(status)
        result.counts["failed" if status == "interrupted" else "skipped"] += 1
        bus.emit(StepFinished(host=host, index=i, step=spec.kind, status=status,
                              message=why + ("; replay the playbook to resume" if status == "interrupted"
                                             else "")))
    result.error = why
    result.exit_code = max(result.exit_code, interrupts.exit_code() or 1)


def make_step(spec: StepSpec) -> StepKind[Any]:
    """Instantiate the step kind named by `spec` with its validated parameters."""
    cls = load_step_kinds()[spec.kind]
    return cls(cls.Params.model_validate(spec.params))


def build_context(playbook: Playbook, bus: Bus, node: Transport, *, mode: Mode, host: str,
                  pve_factory: Callable[[], Any] | None = None, lab: bool = False) -> StepContext:
    """The context the runner (or the TUI, one step at a time) passes to steps."""
    ctx = StepContext(playbook=playbook, host=host, bus=bus, node=node, mode=mode, pve_factory=pve_factory, lab=lab)
    ctx.resolved.update(playbook.resolved)
    return ctx


async def run_step(ctx: StepContext, index: int, label: str, step: StepKind[Any], mode: Mode,
                   result: HostResult) -> StepStatus:
    """check → (plan mode: stop) → apply → verify for one step, emitting events; returns the status."""
    bus, host = ctx.bus, ctx.host
    bus.emit(StepStarted(host=host, index=index, step=step.kind, title=f"{step.title} ({label})"
                         if label != step.kind else step.title))
    start = time.monotonic()

    def finish(status: StepStatus, message: str = "", diagnosis: list[dict[str, Any]] | None = None) -> StepStatus:
        bus.emit(StepFinished(host=host, index=index, step=step.kind, status=status, message=message,
                              duration_s=time.monotonic() - start, diagnosis=diagnosis or []))
        return status

    phase = "check"
    try:
        try:
            plan = await step.check(ctx)
        except DependsOnEarlier as exc:
            if mode == "apply":
                raise StepFailed(f"{step.kind}: {exc}") from None
            bus.emit(PlanReady(host=host, index=index, step=step.kind,
                               changes=[f"will be decided after earlier steps apply ({exc})"]))
            return finish("changed", "depends on earlier changes")
        bus.emit(PlanReady(host=host, index=index, step=step.kind, changes=plan.changes, notes=plan.notes))
        if mode == "plan":
            return finish("changed" if plan.has_changes else "ok", "; ".join(plan.changes) or "no change")
        if not plan.has_changes:
            return finish("ok", "no change")
        phase = "apply"
        async for event in step.apply(ctx):
            bus.emit(event)
        if step.invalidates:
            ctx.facts.invalidate(None, *step.invalidates)
        phase = "verify"
        await step.verify(ctx)
        return finish("changed", "; ".join(plan.changes))
    except StepFailed as exc:
        result.exit_code = max(result.exit_code, exc.exit_code)
        text = exc.message + (f"\nfix: {exc.fix}" if exc.fix else "")
        return finish("failed", text, diagnose_lines([exc.message, *exc.evidence]))
    except CommandFailed as exc:
        return finish("failed", str(exc), diagnose_lines(exc.result.lines))
    except FactUnavailable as exc:
        lines = exc.result.lines if exc.result else []
        return finish("failed", str(exc), diagnose_lines(lines))
    except ProxmoxError as exc:  # e.g. TLS refused while logging in (ctx.pve()): exit 4, not "internal error"
        failure = as_step_failed(step.kind, exc)
        result.exit_code = max(result.exit_code, failure.exit_code)
        return finish("failed", failure.message + (f"\nfix: {failure.fix}" if failure.fix else ""))
    except SecretError as exc:
        result.exit_code = max(result.exit_code, 2)
        return finish("failed", f"{step.kind}: {exc}")
    except TransportError as exc:
        result.exit_code = max(result.exit_code, 4)
        status: StepStatus = "interrupted" if phase == "apply" else "failed"
        msg = f"{exc}" + ("\nthe step was interrupted while applying; replay the playbook to resume"
                          if phase == "apply" else "")
        return finish(status, msg)
    except Exception as exc:  # a bug in one step must not lose the host's recap or the run log
        return finish("failed", f"internal error in {step.kind} ({phase}): {type(exc).__name__}: {exc}\n"
                                "this is a bug of gpu-provisioner; the run log has the steps before it")


def recap_json(results: list[HostResult]) -> dict[str, Any]:
    hosts = {r.host: dict(r.counts) for r in results}
    status = "failed" if any(r.failed for r in results) else "ok"
    return {"hosts": hosts, "status": status}


def start_event(run_id: str, playbook_path: str, mode: Mode, hosts: list[str]) -> RunStarted:
    return RunStarted(run_id=run_id, playbook=playbook_path, mode=mode, hosts=hosts)


def finish_event(run_id: str, results: list[HostResult]) -> RunFinished:
    recap = recap_json(results)
    return RunFinished(run_id=run_id, status=recap["status"], recap=recap["hosts"])
