"""The wizard's engine glue, free of Textual: one playbook being edited and run step by step.

Every page of the wizard edits the parameters of playbook steps, asks the engine for their plan
(`runner.run_step(..., "plan")`) and applies them on confirmation (`runner.run_step(..., "apply")`).
Events go to the JSON Lines run log, to a tracker that keeps what the error panel needs (failing
command, output tail, diagnosis), and to whatever sink the UI subscribes. The recorded playbook
holds exactly the steps that succeeded, in playbook order, with their parameters as run and the
resolved facts; secrets stay references because the playbook model refuses literals.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from provisioner.events import (
    Bus,
    CommandEnded,
    CommandStarted,
    Event,
    OutputLine,
    PlanReady,
    StepFinished,
    StepStarted,
    StepStatus,
)
from provisioner.paths import state_dir
from provisioner.playbook import Playbook, StepSpec, Target, dump
from provisioner.runlog import JsonlRunLog
from provisioner.runner import (
    HostResult,
    Mode,
    build_context,
    diagnose_lines,
    finish_event,
    make_step,
    new_run_id,
    run_step,
    start_event,
)
from provisioner.session import host_label, node_transport, pve_factory
from provisioner.steps.base import Params, StepKind, load_step_kinds
from provisioner.steps.context import StepContext
from provisioner.transport.base import Transport

RunStatus = Literal["pending", "planning", "planned", "running", "ok", "changed", "failed", "skipped", "interrupted",
                    "edited", "outdated"]
TAIL_LINES = 30


@dataclass(frozen=True)
class PageDef:
    """One wizard page: a name (also the screen name), a title and the step kinds it drives."""

    name: str
    title: str
    kinds: tuple[str, ...]


PAGES: tuple[PageDef, ...] = (
    PageDef("connect", "Connect", ("node.connect",)),
    PageDef("inventory", "Inventory", ("node.inventory",)),
    PageDef("container", "Container", ("lxc.create",)),
    PageDef("passthrough", "Passthrough", ("lxc.gpu_passthrough", "lxc.start")),
    PageDef("driver", "Driver", ("driver.userspace", "gpu.detect")),
    PageDef("pytorch", "PyTorch", ("torch.resolve",)),
    PageDef("venv", "Venv", ("venv.build",)),
    PageDef("burnin", "Burn-in", ("burnin.run",)),
    PageDef("summary", "Summary", ()),
)


@dataclass
class StepRun:
    """What the UI knows about one step of the playbook."""

    index: int
    spec: StepSpec
    status: RunStatus = "pending"
    changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    message: str = ""
    diagnosis: list[dict[str, Any]] = field(default_factory=list)
    failing_command: str = ""
    last_command: str = ""
    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    plan_stale: bool = True

    @property
    def done(self) -> bool:
        return self.status in ("ok", "changed", "skipped")

    @property
    def planned(self) -> bool:
        return self.status == "planned" and not self.plan_stale


def params_model(kind: str) -> type[Params] | None:
    cls = load_step_kinds().get(kind)
    return None if cls is None else cls.Params


def changed_params(model: type[BaseModel], values: dict[str, Any], keep: set[str]) -> dict[str, Any]:
    """The parameters worth writing: those that differ from the model's default, plus `keep`."""
    validated = model.model_validate(values)
    dumped = validated.model_dump(mode="json")
    out: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        value = dumped[name]
        default = None if info.is_required() else info.get_default(call_default_factory=True)
        default_json = json.loads(json.dumps(default, default=str)) if default is not None else None
        if name in keep or info.is_required() or value != default_json:
            out[name] = value
    return out


class WizardSession:
    """One wizard run against one target."""

    def __init__(self, playbook: Playbook, *, playbook_path: str = "", lab: bool = False,
                 runs_dir: Path | None = None, record_to: str | None = None,
                 shared: dict[str, Any] | None = None) -> None:
        self.base = playbook
        self.seed = dict(shared or {})  # e.g. the lab's endpoints (session.lab_shared())
        self.playbook_path = playbook_path
        self.lab = lab
        self.target: Target = playbook.target
        self.runs: list[StepRun] = [StepRun(i, spec) for i, spec in enumerate(playbook.steps)]
        self.run_id = new_run_id()
        self.runlog = JsonlRunLog(self.run_id, runs_dir)
        self.record_to = record_to or str(state_dir() / "recorded" / f"recorded-{self.run_id}.yaml")
        self.bus = Bus(self.runlog, self._track)
        self.trust_new_host = False
        self.node: Transport | None = None
        self.ctx: StepContext | None = None
        self.resolved: dict[str, Any] = dict(playbook.resolved)
        self.succeeded: dict[int, StepSpec] = {}
        self.aborted = False
        self._current: int | None = None
        self._host_result = HostResult(host=self.host)
        self.bus.emit(start_event(self.run_id, playbook_path or "<tui>", "apply", [self.host]))

    # --- what the pages read and edit ------------------------------------------------------------

    @property
    def host(self) -> str:
        return host_label(self.target)

    @property
    def log_path(self) -> Path:
        return self.runlog.path

    def indices(self, kinds: tuple[str, ...]) -> list[int]:
        return [r.index for r in self.runs if r.spec.kind in kinds]

    def shared(self) -> dict[str, Any]:
        return self.ctx.shared if self.ctx is not None else {}

    def playbook(self) -> Playbook:
        """The playbook as currently edited (target and every step)."""
        return self.base.model_copy(update={"target": self.target, "steps": [r.spec for r in self.runs]})

    def set_target(self, target: Target) -> None:
        if target == self.target:
            return
        reconnect = target.model_dump(exclude={"container", "node"}) != \
            self.target.model_dump(exclude={"container", "node"})
        self.target = target
        if reconnect:  # new address or credentials: a new connection and fresh facts
            self.node = None
            self.ctx = None
        for run in self.runs:
            run.plan_stale = True

    def set_params(self, index: int, values: dict[str, Any]) -> None:
        """Store validated parameters for step `index` (raises pydantic.ValidationError)."""
        run = self.runs[index]
        model = params_model(run.spec.kind)
        params = changed_params(model, values, set(run.spec.params)) if model is not None else dict(values)
        if params != run.spec.params:
            run.spec = run.spec.model_copy(update={"params": params})
            run.plan_stale = True
            if run.status == "planned":
                run.status = "pending"

    def reopen(self, index: int) -> None:
        """Step `index` was edited after it finished: it, and the finished steps after it (which may
        depend on it), are planned and applied again. What they applied stays recorded until then."""
        for run in self.runs[index:]:
            if run.index == index or run.status in ("ok", "changed"):
                run.status = "edited" if run.index == index else "outdated"
                run.plan_stale = True

    # --- running ---------------------------------------------------------------------------------

    async def probe_host_key(self) -> tuple[str, str]:
        """(fingerprint, "known" | "unknown" | "changed") of the node's SSH host key."""
        from provisioner.transport.ssh import SshTarget, probe_host_key

        t = self.target
        return await probe_host_key(SshTarget(host=t.host, port=t.ssh.port, user=t.ssh.user,
                                              key_file=t.ssh.key_file, known_hosts=t.ssh.known_hosts))

    def context(self) -> StepContext:
        if self.ctx is None or self.node is None:
            self.node = node_transport(self.target, self.bus, trust_new_host=self.trust_new_host)
            self.ctx = build_context(self.playbook(), self.bus, self.node, mode="apply", host=self.host,
                                     pve_factory=pve_factory(self.target), lab=self.lab)
            self.ctx.resolved.update(self.resolved)
            self.ctx.shared.update(self.seed)
        else:
            self.ctx.playbook = self.playbook()
        return self.ctx

    async def plan(self, index: int) -> RunStatus:
        """Ask the step what it would change; the run's `changes`/`notes` are filled from PlanReady."""
        run = self.runs[index]
        ctx = self.context()
        step = make_step(run.spec)
        run.status = "planning"
        self._current = index
        status = await self._guarded(ctx, index, step, "plan", HostResult(self.host))
        run.plan_stale = False
        run.status = "failed" if status in ("failed", "interrupted") else "planned"
        return run.status

    async def apply(self, index: int) -> RunStatus:
        """Apply step `index` (check → apply → verify); record it when it succeeds."""
        run = self.runs[index]
        ctx = self.context()
        step = make_step(run.spec)
        run.status = "running"
        run.failing_command = ""
        run.tail.clear()
        self._current = index
        status = await self._guarded(ctx, index, step, "apply", self._host_result)
        run.status = status
        if status in ("ok", "changed"):
            self.succeeded[index] = run.spec
            self.resolved.update(step.resolved(ctx))
        for later in self.runs[index + 1:]:
            later.plan_stale = True
        return status

    async def _guarded(self, ctx: StepContext, index: int, step: StepKind[Any], mode: Mode,
                       result: HostResult) -> StepStatus:
        """`run_step`, with an unexpected exception turned into a failed step (the wizard stays usable)."""
        run = self.runs[index]
        self._current = index
        try:
            return await run_step(ctx, index, run.spec.name or run.spec.kind, step, mode, result)
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"
            self.bus.emit(StepFinished(host=self.host, index=index, step=run.spec.kind, status="failed",
                                       message=message, diagnosis=diagnose_lines([message, *run.tail])))
            return "failed"
        finally:
            self._current = None

    def skip(self, index: int) -> None:
        run = self.runs[index]
        run.status = "skipped"
        self.succeeded.pop(index, None)
        self.bus.emit(StepFinished(host=self.host, index=index, step=run.spec.kind, status="skipped",
                                   message="skipped in the wizard"))

    def recorded_playbook(self) -> Playbook:
        """Exactly what ran: the succeeded steps in order, with the resolved facts."""
        steps = [self.succeeded[i] for i in sorted(self.succeeded)]
        resolved = json.loads(json.dumps(self.resolved, default=str))
        return self.base.model_copy(update={"target": self.target, "steps": steps, "resolved": resolved})

    def save(self, path: str | Path) -> Path:
        out = Path(path).expanduser()
        out.parent.mkdir(parents=True, exist_ok=True)
        dump(self.recorded_playbook(), out)
        return out

    def recap(self) -> dict[str, int]:
        counts = {"ok": 0, "changed": 0, "failed": 0, "skipped": 0, "pending": 0}
        for run in self.runs:
            key = run.status if run.status in counts else ("failed" if run.status == "interrupted" else "pending")
            counts[key] += 1
        return counts

    async def close(self) -> None:
        self.bus.emit(finish_event(self.run_id, [self._host_result]))
        if self.node is not None:
            await self.node.close()
        self.runlog.close()

    def subscribe(self, sink: Callable[[Event], None]) -> None:
        self.bus.subscribe(sink)

    # --- the tracker sink --------------------------------------------------------------------------

    def _track(self, event: Event) -> None:
        index = self._current
        if isinstance(event, StepStarted | PlanReady | StepFinished):
            index = event.index
        if index is None or not 0 <= index < len(self.runs):
            return
        run = self.runs[index]
        if isinstance(event, PlanReady):
            run.changes = list(event.changes)
            run.notes = list(event.notes)
        elif isinstance(event, CommandStarted):
            run.last_command = event.command
        elif isinstance(event, OutputLine):
            run.tail.append(event.line)
        elif isinstance(event, CommandEnded):
            if event.exit_status != 0:
                run.failing_command = event.command
        elif isinstance(event, StepFinished):
            run.message = event.message
            run.diagnosis = list(event.diagnosis)
