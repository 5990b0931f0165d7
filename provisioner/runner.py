"""Plan → apply → verify → recap over one host (fleets run several of these concurrently)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict, runtime_checkable

from provisioner import interrupts, node_lock, secrets
from provisioner.events import (
    Bus,
    Message,
    ParamOffer,
    PlanReady,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
    StepStatus,
)
from provisioner.exitcodes import ExitCode
from provisioner.facts.base import FactUnavailable
from provisioner.facts.models import ParseError
from provisioner.node_lock import NodeLock
from provisioner.node_resources import api_error_finding
from provisioner.payloads import Resolved
from provisioner.playbook import Playbook, StepSpec
from provisioner.proxmox.errors import ProxmoxError
from provisioner.redaction import REDACTOR
from provisioner.secrets import SecretError
from provisioner.steps import privilege_check
from provisioner.steps.base import DependsOnEarlier, StepFailed, StepKind, load_step_kinds
from provisioner.steps.context import StepContext
from provisioner.steps.pve_ops import as_step_failed
from provisioner.steps.state import RunState
from provisioner.transport.base import CommandFailed, CopyFailed, Transport, TransportError

Mode = Literal["plan", "apply"]


@runtime_checkable
class Warmable(Protocol):
    """A `pve_factory` that can load its code ahead of its first use (`session.PveFactory`)."""

    def warm(self) -> None: ...


@dataclass
class HostResult:
    """One host's outcome: the last status of every step (by index), and failures outside any step."""

    host: str
    by_index: dict[int, StepStatus] = field(default_factory=dict)
    error: str = ""
    exit_code: int = ExitCode.OK
    failures_outside_steps: int = 0  # the node lock, a host that could not even be reached

    @property
    def statuses(self) -> list[StepStatus]:
        return [self.by_index[i] for i in sorted(self.by_index)]

    @property
    def counts(self) -> dict[str, int]:
        """Steps by status; `interrupted` (a step stopped by SIGINT/SIGTERM or "stop safely") is its own
        count, added to the contract's ok/changed/failed/skipped (a run with one did not succeed)."""
        counts = {"ok": 0, "changed": 0, "failed": 0, "skipped": 0, "interrupted": 0}
        for status in self.by_index.values():
            counts[status] += 1
        counts["failed"] += self.failures_outside_steps
        return counts

    @property
    def failed(self) -> bool:
        return unfinished(self.counts)

    @property
    def pending_changes(self) -> bool:
        return self.counts["changed"] > 0

    def fail(self, error: str, exit_code: int) -> HostResult:
        """Record a failure outside any step (returns self)."""
        self.failures_outside_steps += 1
        self.error = error
        self.exit_code = max(self.exit_code, exit_code)
        return self


def unfinished(counts: Mapping[str, int]) -> bool:
    """Whether a host's recap counts (`HostResult.counts`, a fleet report's) say its run did not succeed:
    a step failed or was interrupted."""
    return counts.get("failed", 0) + counts.get("interrupted", 0) > 0


def exit_code(results: list[HostResult], *, check: bool = False) -> int:
    """The process exit code of a run: the most specific code of its failed hosts (1 when none is
    more specific), else 10 for `plan --check` with pending changes, else 0."""
    failed = [r for r in results if r.failed]
    if failed:
        return max(r.exit_code or ExitCode.FAILED for r in failed)
    if check and any(r.pending_changes for r in results):
        return ExitCode.CHANGES_PENDING
    return ExitCode.OK


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


def diagnose_lines(lines: list[str]) -> list[dict[str, object]]:
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


class HostRun:
    """One host's steps run one at a time, counted into one `HostResult`: `run_host` drives it
    over the whole playbook, the wizard one step per confirmation."""

    def __init__(self, ctx: StepContext) -> None:
        self.ctx = ctx
        self.result = HostResult(host=ctx.host)

    async def step(self, index: int, spec: StepSpec, mode: Mode, *, confirmed: list[str] | None = None) -> StepStatus:
        """check (→ apply → verify in apply mode) step `index`; apply mode counts its status.
        `confirmed`: the changes the user confirmed; apply stops if the host now needs other ones."""
        step = make_step(spec)
        status = await run_step(self.ctx, index, spec.name or spec.kind, step, mode, self.result,
                                confirmed=confirmed)
        if mode == "apply":
            self.result.by_index[index] = status
        return status

    def skip(self, index: int, spec: StepSpec, message: str) -> None:
        self.result.by_index[index] = "skipped"
        self.ctx.bus.emit(StepFinished(host=self.ctx.host, index=index, step=spec.kind, status="skipped",
                                       message=message, mode="plan" if self.ctx.mode == "plan" else "apply"))


async def run_host(
    playbook: Playbook,
    bus: Bus,
    node: Transport,
    *,
    mode: Mode,
    host: str,
    pve_factory: Callable[[], Any] | None = None,
    state: RunState | None = None,
) -> HostResult:
    """Run every step of `playbook` against one host; failures stop this host only."""
    ctx = build_context(playbook, bus, node, mode=mode, host=host, pve_factory=pve_factory, state=state)
    run = HostRun(ctx)
    failed: str = ""  # the step that failed (its name, number and outcome): later steps are skipped, naming it
    # plan changes nothing: it takes no lock, so a plan during a replay works. The one lock is the
    # node's (`provisioner.node_lock`: why not one in the controller's state dir too, it says).
    lock = NodeLock(node, playbook.target.container, host, node_lock.LOCK_DIR) \
        if mode == "apply" else None
    index = -1
    if mode == "plan":
        for text in secret_sources(playbook):
            bus.emit(Message(host=host, level="info", text=text))
    load_step_kinds()  # what the first step would import; then the API client loads while commands run
    if isinstance(pve_factory, Warmable):
        pve_factory.warm()
    denied = await _privileges(ctx, playbook)
    try:
        if denied and mode == "apply":  # privileges known before any change: stop before the first one
            text = privilege_check.describe(playbook.steps, denied, str(getattr(ctx.pve(), "user", "")))
            bus.emit(Message(host=host, level="error", text=text))
            for index, spec in enumerate(playbook.steps):
                run.skip(index, spec, "not run: the API user lacks privileges (see above)")
            run.result.fail(text, ExitCode.PERMISSION_DENIED)
            return run.result
        for index, spec in enumerate(playbook.steps):
            if failed:
                run.skip(index, spec, f"skipped: {failed}")
                continue
            if index in denied and mode == "plan":
                run.result.by_index[index] = "failed"
                run.result.exit_code = max(run.result.exit_code, ExitCode.PERMISSION_DENIED)
                bus.emit(StepFinished(host=host, index=index, step=spec.kind, status="failed", mode="plan",
                                      message="missing privileges: " + "; ".join(n.text() for n in denied[index])))
                continue
            if lock is not None and not lock.held and spec.kind != "node.connect":
                await lock.acquire()  # on the node itself: other controllers and state dirs see it
            status = await run.step(index, spec, mode)
            if mode == "plan":
                run.result.by_index[index] = status
            if status in ("failed", "interrupted"):
                failed = f"step {index + 1} ({spec.name or spec.kind}) {status}"
    except StepFailed as exc:  # a lock
        bus.emit(Message(host=host, level="error", text=str(exc)))
        _record_refusal(playbook, bus, host, run.result, index, exc.message, exc.exit_code)
    except TransportError as exc:  # taking the node lock
        bus.emit(Message(host=host, level="error", text=str(exc)))
        _record_refusal(playbook, bus, host, run.result, index, str(exc), ExitCode.UNREACHABLE)
    except asyncio.CancelledError:
        if interrupts.interrupting() is None:
            raise
        _record_interrupt(playbook, bus, host, run.result, index)
    finally:
        if lock is not None:
            await lock.release()
        await node.close()
    return run.result


def secret_sources(playbook: Playbook) -> list[str]:
    """Where each secret of the target comes from (never its value): what a plan shows before anything
    is read, e.g. `secret target.api.password is read from file /home/op/.config/gpu-provisioner/pve-password`."""
    api = playbook.target.api
    if api is None:
        return []
    return [f"secret target.api.{name} is read from {secrets.source(ref)}"
            for name, ref in (("password", api.password), ("token_value", api.token_value)) if ref]


def _record_refusal(playbook: Playbook, bus: Bus, host: str, result: HostResult, index: int, error: str,
                    code: int) -> None:
    """The node lock refused the run before step `index`: that step fails (it could not start), every later
    one is skipped, so the recap counts every step of the playbook (not only those before the lock)."""
    for i, spec in enumerate(playbook.steps):
        if i in result.by_index or i < index:
            continue
        status: StepStatus = "failed" if i == index else "skipped"
        result.by_index[i] = status
        message = f"not run: {error}" if status == "failed" else "skipped: the node lock refused the run"
        bus.emit(StepFinished(host=host, index=i, step=spec.kind, status=status, mode="apply", message=message))
    if index < 0 or index >= len(playbook.steps):  # no step to carry the failure
        result.failures_outside_steps += 1
    result.error = error
    result.exit_code = max(result.exit_code, code)


async def _privileges(ctx: StepContext, playbook: Playbook) -> dict[int, list[Any]]:
    """Per step, the PVE privileges the API user lacks (`provisioner.steps.privilege_check`); a node whose
    permissions cannot be read is left to the steps (they report what PVE answers)."""
    try:
        return await privilege_check.missing_by_step(ctx, playbook.steps)
    except (StepFailed, ProxmoxError, RuntimeError) as exc:
        text = exc.message if isinstance(exc, StepFailed) else str(exc)
        ctx.bus.emit(Message(host=ctx.host, level="warning", text=f"privileges not checked up front: {text}"))
        return {}


def _record_interrupt(playbook: Playbook, bus: Bus, host: str, result: HostResult, index: int) -> None:
    """SIGINT/SIGTERM: the step in progress is interrupted, the rest skipped; the recap still comes."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
    why = f"interrupted by {interrupts.name()}"
    for i, spec in enumerate(playbook.steps):
        if i in result.by_index:
            continue
        status: StepStatus = "interrupted" if i == max(index, 0) else "skipped"
        result.by_index[i] = status
        bus.emit(StepFinished(host=host, index=i, step=spec.kind, status=status, mode="apply",
                              message=why + ("; replay the playbook to resume" if status == "interrupted"
                                             else "")))
    result.error = why
    result.exit_code = max(result.exit_code, interrupts.exit_code() or 1)


def make_step(spec: StepSpec) -> StepKind[Any]:
    """Instantiate the step kind named by `spec` with its validated parameters."""
    cls = load_step_kinds()[spec.kind]
    return cls(cls.Params.model_validate(spec.params))


def build_context(playbook: Playbook, bus: Bus, node: Transport, *, mode: Mode, host: str,
                  pve_factory: Callable[[], Any] | None = None, state: RunState | None = None) -> StepContext:
    """The context the runner (or the TUI, one step at a time) passes to steps."""
    ctx = StepContext(playbook=playbook, host=host, bus=bus, node=node, mode=mode, pve_factory=pve_factory,
                      state=state if state is not None else RunState())
    ctx.resolved = Resolved.from_recorded(playbook.resolved)
    return ctx


async def run_step(ctx: StepContext, index: int, label: str, step: StepKind[Any], mode: Mode,
                   result: HostResult, *, confirmed: list[str] | None = None) -> StepStatus:
    """check → (plan mode: stop) → apply → verify for one step, emitting events; returns the status.

    `confirmed` (the wizard): the changes the user saw and confirmed. Apply checks the host again
    first; when it now needs other changes (someone changed the host in between), nothing is applied
    and the step fails with the new plan on screen, to be confirmed again."""
    bus, host = ctx.bus, ctx.host
    bus.emit(StepStarted(host=host, index=index, step=step.kind, title=f"{step.title} ({label})"
                         if label != step.kind else step.title))
    start = time.monotonic()

    def finish(status: StepStatus, message: str = "", diagnosis: list[dict[str, object]] | None = None,
               offer: ParamOffer | None = None) -> StepStatus:
        resolved: dict[str, object] = {}
        if mode == "apply" and status in ("ok", "changed"):
            try:
                resolved = step.resolved(ctx)
            except Exception as exc:  # a bug in one step's `resolved` must not lose the run log
                status, message = "failed", f"internal error in {step.kind} (resolved): {type(exc).__name__}: {exc}"
        bus.emit(StepFinished(host=host, index=index, step=step.kind, status=status, message=message,
                              duration_s=time.monotonic() - start, diagnosis=diagnosis or [], mode=mode,
                              resolved=resolved, offer=offer))
        return status

    phase = "check"
    try:
        try:
            plan = await step.check(ctx)
        except DependsOnEarlier as exc:
            if mode == "apply":
                raise StepFailed(f"{step.kind}: {exc}") from None
            bus.emit(PlanReady(host=host, index=index, step=step.kind,
                               changes=[f"will be decided after earlier steps apply ({exc})"], commands=exc.commands))
            return finish("changed", "depends on earlier changes")
        bus.emit(PlanReady(host=host, index=index, step=step.kind, changes=plan.changes, notes=plan.notes,
                           commands=plan.commands))
        if mode == "plan":
            return finish("changed" if plan.has_changes else "ok", "; ".join(plan.changes) or "no change")
        if not plan.has_changes:
            return finish("ok", "no change")
        if confirmed is not None and [REDACTOR.text(c) for c in plan.changes] != [REDACTOR.text(c) for c in confirmed]:
            return finish("failed", "not applied: the host changed since the plan was confirmed; review the new "
                                    "plan and confirm it again\nnow: " + "; ".join(plan.changes))
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
        own = {f.get("category") for f in exc.findings}  # the step's own finding outranks the log's guess
        guessed = [f for f in diagnose_lines([exc.message, *exc.evidence]) if f.get("category") not in own]
        # an API error naming a value of the node (a storage, bridge or template it lacks): the field that holds it
        named = api_error_finding(step.kind, exc.message, step.params.model_dump(), ctx.words)
        return finish("failed", text, [*([named] if named else []), *exc.findings, *guessed][:3], exc.offer)
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
        result.exit_code = max(result.exit_code, ExitCode.USAGE)
        return finish("failed", f"{step.kind}: {exc}")
    except CopyFailed as exc:  # the node answered and refused the file: failed, not interrupted
        return finish("failed", str(exc))
    except TransportError as exc:
        result.exit_code = max(result.exit_code, ExitCode.UNREACHABLE)
        status: StepStatus = "interrupted" if phase == "apply" else "failed"
        msg = f"{exc}" + ("\nthe step was interrupted while applying; replay the playbook to resume"
                          if phase == "apply" else "")
        return finish(status, msg)
    except ParseError as exc:  # a probe's output no parser recognises: a finding about the host, not our bug
        return finish("failed", f"{step.kind} ({phase}): unexpected output from a probe: {exc}\nfix: run the "
                                "command on the host to see what it prints (the run log has its output), fix that, "
                                "and replay")
    except Exception as exc:  # a bug in one step must not lose the host's recap or the run log
        return finish("failed", f"internal error in {step.kind} ({phase}): {type(exc).__name__}: {exc}\n"
                                "this is a bug of gpu-provisioner; the run log has the steps before it")


class Recap(TypedDict, total=False):
    """The run's recap (`--json`'s last line): each host's counts by status (ok, changed, failed, skipped,
    interrupted), the overall status ("failed" when a step failed or was interrupted), and (`plan --json`)
    each host's planned changes."""

    hosts: dict[str, dict[str, int]]
    status: str
    plan: dict[str, list[PlannedStep]]


class PlannedStep(TypedDict):
    index: int
    step: str
    changes: list[str]
    commands: list[str]
    notes: list[str]


def recap_json(results: list[HostResult]) -> Recap:
    hosts = {r.host: dict(r.counts) for r in results}
    status = "failed" if any(r.failed for r in results) else "ok"
    return {"hosts": hosts, "status": status}


def start_event(run_id: str, playbook_path: str, mode: Mode, hosts: list[str]) -> RunStarted:
    return RunStarted(run_id=run_id, playbook=playbook_path, mode=mode, hosts=hosts)


def finish_event(run_id: str, results: list[HostResult]) -> RunFinished:
    recap = recap_json(results)
    # a run stopped on purpose (SIGINT/SIGTERM, "stop safely" in the wizard), not a step cut by a dropped link
    interrupted = any(r.error.startswith("interrupted") for r in results)
    return RunFinished(run_id=run_id, status="interrupted" if interrupted else recap["status"], recap=recap["hosts"])
