"""A playbook edited and run one step at a time (the wizard's engine, free of any UI).

Every page of the wizard edits the parameters of playbook steps, asks for their plan
(`plan(index)`) and applies them on confirmation (`apply(index)`). The run is assembled like any
other (`assembly.open_run`: run id, run log, bus, recorder); the steps run through the runner's
`HostRun`, so the `run.finished` recap holds the true counts: the last applied status of every
step, and the steps never applied as skipped. A tracker sink keeps what the error panel needs
(failing command, output tail, diagnosis). The recorded playbook holds the steps that succeeded, in
playbook order, with their parameters as run and the resolved facts, then every step that did not complete
(interrupted, failed, edited, planned or never run) with its parameters as edited, marked `pending: true`:
opening the recording resumes there and plans them again. The Summary's counts come from the run's events
(every apply), not from each step's last state.
"""

from __future__ import annotations

import asyncio
import collections
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from provisioner import node_lock
from provisioner.assembly import Run, open_run
from provisioner.drift import DriftReport
from provisioner.drift import gather as gather_drift
from provisioner.events import (
    CommandEnded,
    CommandStarted,
    Event,
    Message,
    OutputLine,
    ParamOffer,
    PlanReady,
    StepFinished,
    StepStarted,
    StepStatus,
)
from provisioner.node_lock import NodeLock
from provisioner.node_resources import NodeResources, api_error_finding
from provisioner.node_resources import gather as gather_resources
from provisioner.paths import state_dir
from provisioner.playbook import Playbook, StepSpec, Target, dump
from provisioner.runlog import Recorder
from provisioner.runner import HostResult, HostRun, Mode, build_context, diagnose_lines
from provisioner.session import host_label, node_transport, pve_factory
from provisioner.steps.base import Params, StepFailed, load_step_kinds
from provisioner.steps.context import ChecksumConfirmation, StepContext
from provisioner.steps.state import RunState
from provisioner.transport.base import Transport, TransportError
from provisioner.words import Words

RunStatus = Literal["pending", "planning", "planned", "running", "ok", "changed", "failed", "skipped", "interrupted",
                    "edited", "outdated"]
TAIL_LINES = 30


@dataclass
class StepRun:
    """What the UI knows about one step of the playbook."""

    index: int
    spec: StepSpec
    status: RunStatus = "pending"
    changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    message: str = ""
    diagnosis: list[dict[str, object]] = field(default_factory=list)
    offer: ParamOffer | None = None  # failed: an edit of its parameters that settles it, for the user to confirm
    failing_command: str = ""
    last_command: str = ""
    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    plan_stale: bool = True
    #: what this session last applied for the step ("ok"/"changed") and with which parameters: an edit
    #: that puts the values back restores it, and the Summary counts it
    applied_status: RunStatus | None = None
    applied_params: dict[str, object] | None = None

    @property
    def done(self) -> bool:
        return self.status in ("ok", "changed", "skipped")

    @property
    def planned(self) -> bool:
        return self.status == "planned" and not self.plan_stale


def params_model(kind: str) -> type[Params] | None:
    cls = load_step_kinds().get(kind)
    return None if cls is None else cls.Params


def changed_params(model: type[BaseModel], values: Mapping[str, object], keep: set[str]) -> dict[str, object]:
    """The parameters worth writing: those that differ from the model's default, plus `keep`."""
    validated = model.model_validate(values)
    dumped = validated.model_dump(mode="json")
    out: dict[str, object] = {}
    for name, info in model.model_fields.items():
        value = dumped[name]
        default = None if info.is_required() else info.get_default(call_default_factory=True)
        default_json = json.loads(json.dumps(default, default=str)) if default is not None else None
        if name in keep or info.is_required() or value != default_json:
            out[name] = value
    return out


class StepSession:
    """One step-by-step run against one target."""

    def __init__(self, playbook: Playbook, *, playbook_path: str = "", runs_dir: Path | None = None,
                 record_to: str | None = None, node_lock_dir: str | None = None) -> None:
        self.base = playbook
        self.playbook_path = playbook_path
        self.target: Target = playbook.target
        self.runs: list[StepRun] = [StepRun(i, spec) for i, spec in enumerate(playbook.steps)]
        self.trust_new_host = False
        self.confirmed_fingerprint: str | None = None  # the host key fingerprint the user confirmed
        self.node: Transport | None = None
        self.ctx: StepContext | None = None
        self.state = RunState()
        self.aborted = False
        self._current: int | None = None
        self._node_lock: NodeLock | None = None
        self._stale_locks: list[NodeLock] = []
        self.node_lock_dir = node_lock_dir
        self._host_run: HostRun | None = None
        self._result = HostResult(host=self.host)
        self.run: Run = open_run(playbook_path or "<tui>", "apply", [self.host], sinks=[self._track],
                                 runs_dir=runs_dir)
        self.recorder: Recorder = self.run.record(self.host, playbook, lambda index: self.runs[index].spec)
        self.record_to = record_to or str(state_dir() / "recorded" / f"recorded-{self.run.run_id}.yaml")
        self._autosave_failed = False
        self.words = Words()  # the wizard's session says "wizard" (fixes name its fields)
        #: every step.finished of this session that counts (applies, skips, failures), in order: the Summary
        self.finished: list[StepFinished] = []
        #: the recording as last saved; at the start, the playbook as opened (nothing to lose yet)
        self._saved_text = self._meaning(self.recorded_playbook())
        self.saved_to: Path | None = None
        self.saved_pending: list[str] = []  # the steps the last saved recording marks pending
        #: what the node offers the fields (storages, bridges, templates, cores, memory), read after the inventory
        self.resources: NodeResources | None = None

    # --- what the pages read and edit ------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def bus(self) -> Any:
        return self.run.bus

    @property
    def host(self) -> str:
        return host_label(self.target)

    @property
    def log_path(self) -> Path:
        return self.run.log_path

    @property
    def succeeded(self) -> dict[int, StepSpec]:
        return dict(self.recorder.steps)

    @property
    def resolved(self) -> dict[str, object]:
        return self.recorder.resolved

    def indices(self, kinds: tuple[str, ...]) -> list[int]:
        return [r.index for r in self.runs if r.spec.kind in kinds]

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
            if self._node_lock is not None:  # it lived on the old connection: released before the next one
                self._stale_locks.append(self._node_lock)
                self._node_lock = None
            self.node = None
            self.ctx = None
            self.state = RunState()
        for run in self.runs:
            run.plan_stale = True

    def set_params(self, index: int, values: Mapping[str, object]) -> None:
        """Store validated parameters for step `index` (raises pydantic.ValidationError)."""
        run = self.runs[index]
        model = params_model(run.spec.kind)
        before = run.spec.params
        values = {**run.spec.params, **values}  # a field the form does not show keeps the playbook's value
        params = changed_params(model, values, set(run.spec.params)) if model is not None else dict(values)
        if params != run.spec.params:
            run.spec = run.spec.model_copy(update={"params": params})
            run.plan_stale = True
            if run.status == "planned":
                run.status = "pending"
            self._settle()
        # an edit of onboot (not a form's first read of its default) is mirrored into the boot unit step
        if run.spec.kind == "lxc.create" and "onboot" in values and params.get("onboot") != before.get("onboot"):
            self._mirror_onboot(bool(params.get("onboot", values["onboot"])))

    def _settle(self) -> None:
        """Values put back: an edited step whose parameters are again those it was applied with is done
        again, and so are the outdated steps after it (while no other edited step stands before them)."""
        reopened = False
        for run in self.runs:
            if run.status in ("edited", "planned", "pending") and run.applied_status is not None \
                    and run.spec.params == run.applied_params and not reopened and \
                    (run.status == "edited" or run.plan_stale):
                run.status, run.plan_stale = run.applied_status, True
                run.changes, run.notes = [], []
            elif run.status == "outdated" and not reopened:
                run.status = run.applied_status or "pending"
            if run.status in ("edited", "pending", "planned", "failed", "interrupted") and \
                    run.applied_status is not None:
                reopened = True

    def _mirror_onboot(self, onboot: bool) -> None:
        """`onboot` is one fact: the boot unit step that also sets it follows the Container page's value
        (where the playbook gives it one), so a second page can never silently win."""
        for other in self.runs:
            if other.spec.kind == "lxc.boot_persistence" and other.spec.params.get("onboot") is not None \
                    and other.spec.params["onboot"] != onboot:
                other.spec = other.spec.model_copy(update={"params": {**other.spec.params, "onboot": onboot}})
                other.plan_stale = True

    def reopen(self, index: int) -> None:
        """Step `index` was edited after it finished: it, and the finished steps after it (which may
        depend on it), are planned and applied again. What they applied stays recorded until then."""
        for run in self.runs[index:]:
            if run.index == index or run.status in ("ok", "changed"):
                run.status = "edited" if run.index == index else "outdated"
                run.plan_stale = True

    # --- running ---------------------------------------------------------------------------------

    async def probe_host_key(self) -> tuple[str, str]:
        """(fingerprint, "known" | "unknown" | "changed" | "revoked") of the node's SSH host key."""
        from provisioner.transport.ssh import SshTarget, probe_host_key

        t = self.target
        return await probe_host_key(SshTarget(host=t.host, port=t.ssh.port, user=t.ssh.user,
                                              key_file=t.ssh.key_file, known_hosts=t.ssh.known_hosts))

    def host_run(self) -> HostRun:
        if self.ctx is None or self.node is None or self._host_run is None:
            self.node = node_transport(self.target, self.bus, trust_new_host=self.trust_new_host,
                                       confirmed_fingerprint=self.confirmed_fingerprint)
            self.ctx = build_context(self.playbook(), self.bus, self.node, mode="apply", host=self.host,
                                     pve_factory=pve_factory(self.target), state=self.state)
            self.ctx.resolved = self.ctx.resolved.merged(self.recorder.resolved)
            self.ctx.words = self.words
            self._host_run = HostRun(self.ctx)
            self._host_run.result = self._result  # one count over reconnects
        else:
            self.ctx.playbook = self.playbook()
        return self._host_run

    def context(self) -> StepContext:
        return self.host_run().ctx

    async def plan(self, index: int) -> RunStatus:
        """Ask the step what it would change; the run's `changes`/`notes` are filled from PlanReady."""
        run = self.runs[index]
        run.status = "planning"
        run.changes, run.notes = [], []  # a failed plan leaves no earlier plan on screen
        status = await self._guarded(index, "plan")
        run.plan_stale = False
        run.status = "failed" if status in ("failed", "interrupted") else "planned"
        if run.status == "failed":
            self._name_the_field(run)
        return run.status

    async def apply(self, index: int) -> RunStatus:
        """Apply step `index` (check → apply → verify); the recorder keeps it when it succeeds."""
        run = self.runs[index]
        planned = run.planned and not run.plan_stale
        confirmed = list(run.changes) if planned else None  # what the page showed and the user confirmed
        shown = " ".join([*run.changes, *run.notes]) if planned else ""
        run.status = "running"
        run.failing_command = ""
        run.tail.clear()
        if run.spec.kind != "node.connect" and not await self._lock_node(index):
            run.status = "failed"
            return "failed"
        ctx = self.context()
        own_dialog = ctx.confirm_checksum is not None  # a front end's own dialog decides; else the plan did

        async def shown_in_confirmed_plan(request: ChecksumConfirmation) -> bool:
            """The operator confirmed the plan that showed this sha256 (driver.userspace's unpublished checksum)."""
            return request.sha256 in shown

        if not own_dialog:
            ctx.confirm_checksum = shown_in_confirmed_plan
        try:
            status = await self._guarded(index, "apply", confirmed=confirmed)
        finally:
            if not own_dialog:
                ctx.confirm_checksum = None
        run.status = status
        for later in self.runs[index + 1:]:
            later.plan_stale = True
        if status in ("ok", "changed"):
            run.applied_status, run.applied_params = status, dict(run.spec.params)
            self.autosave()
            if run.spec.kind == "node.inventory":
                await self.read_resources()
        elif status == "failed":
            self._name_the_field(run)
        return status

    async def read_resources(self) -> NodeResources | None:
        """Read what the node offers the fields (`provisioner.node_resources`); None without an API."""
        ctx = self.context()
        if ctx.pve_factory is None:
            return None
        try:
            pve = await asyncio.to_thread(ctx.pve)
        except Exception as exc:  # a login that fails here fails the step that needs it, with its own words
            self.bus.emit(Message(host=self.host, level="warning",
                                  text=f"cannot read the node's storages and limits: {type(exc).__name__}"))
            return None
        self.resources = await gather_resources(pve, self.target.node)
        return self.resources

    def _name_the_field(self, run: StepRun) -> None:
        """An API error that names a value of the node (a storage, a bridge, a template): the finding that
        names the field holding it and what to set, first in the error panel."""
        finding = api_error_finding(run.spec.kind, run.message, run.spec.params, self.words, self.resources)
        if finding is not None and finding not in run.diagnosis:
            run.diagnosis = [finding, *run.diagnosis]

    async def replan_outdated(self) -> int | None:
        """After an edited step applied, the outdated steps that follow it are planned again, in order:
        one whose plan shows no change is applied at once (a no-op that records it as it now runs); the
        walk stops at the first one with changes to confirm (its plan waits on its page) or a failure,
        whose index it returns. None: nothing was outdated any more."""
        for run in self.runs:
            if run.status != "outdated":
                if run.status in ("edited", "failed", "interrupted", "planned"):
                    return None  # an earlier step still waits: the later ones keep waiting
                continue
            if not await self._apply_if_unchanged(run):
                return run.index
        return None

    async def _apply_if_unchanged(self, run: StepRun) -> bool:
        """Plan `run` and, when its plan shows no change, apply it at once (a no-op that records it as it now
        runs). False: the walk stops here (changes to confirm, or a failure)."""
        status = await self.plan(run.index)
        if status != "planned" or run.changes:
            return False
        return await self.apply(run.index) in ("ok", "changed")

    def autosave(self) -> Path | None:
        """Save the recording after every applied step, so that quitting (or a crash) loses no work; a
        failed write is reported once on the bus and never fails the step."""
        if not self.recorder.steps:
            return None
        try:
            out = self.save(self.record_to)
        except OSError as exc:
            if not self._autosave_failed:
                self._autosave_failed = True
                self.bus.emit(Message(host=self.host, level="warning",
                                      text=f"cannot save the recording to {self.record_to}: {exc.strerror or exc}"))
            return None
        return out

    def unsaved_work(self) -> list[str]:
        """What quitting now would lose, one line each (empty: nothing): a plan shown for confirmation, a step
        running, and whatever the recording on disk does not hold yet (applied steps, edited parameters, a
        confirmation such as trusted sha256s merged into a field)."""
        out: list[str] = []
        for run in self.runs:
            name = run.spec.name or run.spec.kind
            if run.status in ("running", "planning"):
                out.append(f"{name} is running")
            elif run.planned and run.changes:
                out.append(f"{name}: a plan of {len(run.changes)} change(s) waits for Apply")
            elif run.status in ("edited", "outdated"):
                out.append(f"{name}: {'edited' if run.status == 'edited' else 'outdated by an edit'}, "
                           "not applied again")
        if self._meaning(self.recorded_playbook()) != self._saved_text:
            out.append("the recording on disk does not hold the latest applied steps or edits")
        return out

    @staticmethod
    def _meaning(playbook: Playbook) -> str:
        """The recording as a comparable text, each step's parameters as its model reads them (a form that
        writes `net` as a mapping where the playbook had PVE's string is no edit)."""
        steps = []
        for spec in playbook.steps:
            model = params_model(spec.kind)
            params: object = spec.params
            if model is not None:
                try:
                    params = model.model_validate(spec.params).model_dump(mode="json")
                except ValueError:
                    pass
            steps.append({"kind": spec.kind, "name": spec.name, "pending": spec.pending, "params": params})
        return json.dumps({"target": playbook.target.model_dump(mode="json"), "steps": steps,
                           "resolved": playbook.resolved}, sort_keys=True, default=str)

    @property
    def unsaved(self) -> bool:
        return bool(self.unsaved_work())

    @property
    def pending_steps(self) -> list[str]:
        """The steps the recording marks pending (to plan again when it is opened)."""
        return [s.kind for s in self.recorded_playbook().steps if s.pending]

    async def resume(self) -> int | None:
        """Walk the playbook from the start on the host as it stands: every step whose plan shows no
        change is applied (a no-op that records it and its resolved facts); the walk stops at the first
        step with changes to confirm or a failure, whose index it returns (None: everything is done).
        Nothing is changed without a plan the user confirms: an apply whose plan differs from the
        (empty) plan seen here is refused by the runner."""
        for run in self.runs:
            if run.done:
                continue
            if not await self._apply_if_unchanged(run):
                return run.index
        return None

    async def _lock_node(self, index: int) -> bool:
        """Take the node-side lock (`provisioner.node_lock`) before the first change, held until the
        wizard closes: a replay or another wizard cannot provision the same container meanwhile."""
        if self._node_lock is not None and self._node_lock.held:
            return True
        while self._stale_locks:
            await self._stale_locks.pop().release()
        host_run = self.host_run()
        self._node_lock = NodeLock(host_run.ctx.node, self.target.container, self.host,
                                   self.node_lock_dir or node_lock.LOCK_DIR)
        try:
            await self._node_lock.acquire()
        except (StepFailed, TransportError) as exc:
            text = exc.message if isinstance(exc, StepFailed) else str(exc)
            self._node_lock = None
            self.bus.emit(StepFinished(host=self.host, index=index, step=self.runs[index].spec.kind, status="failed",
                                       message=text, mode="apply"))
            return False
        return True

    async def _guarded(self, index: int, mode: Mode, *, confirmed: list[str] | None = None) -> StepStatus:
        """`HostRun.step`, with an unexpected exception turned into a failed step (the wizard stays usable)."""
        run = self.runs[index]
        self._current = index
        try:
            return await self.host_run().step(index, run.spec, mode, confirmed=confirmed)
        except asyncio.CancelledError:
            # "stop safely" in the wizard (or quitting while it ran): the step in progress is interrupted,
            # as SIGINT interrupts a replay; the run log says so and a replay or resume continues from here
            status: StepStatus = "interrupted" if mode == "apply" else "skipped"
            if mode == "apply":
                self._result.by_index[index] = "interrupted"
                self._result.error = "interrupted: stopped in the wizard"
            run.status = status
            self.bus.emit(StepFinished(host=self.host, index=index, step=run.spec.kind, status=status, mode=mode,
                                       message="stopped in the wizard; resume with `provisioner tui PLAYBOOK` "
                                               "or `provisioner replay PLAYBOOK`"))
            raise
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"
            if mode == "apply":
                self._result.by_index[index] = "failed"
            self.bus.emit(StepFinished(host=self.host, index=index, step=run.spec.kind, status="failed",
                                       message=message, diagnosis=diagnose_lines([message, *run.tail]), mode=mode))
            return "failed"
        finally:
            self._current = None

    async def drift(self) -> DriftReport:
        """The day-two drift of the playbook's container on this host (`provisioner.drift.gather`, fresh
        facts): what the Summary page shows, the same findings `plan --check` and `diagnose --host` name."""
        from provisioner.facts.base import FactCache

        ctx = self.context()
        return await gather_drift(ctx.node, ctx.vmid, host=self.host, facts=FactCache())

    def skip(self, index: int) -> None:
        run = self.runs[index]
        run.status = "skipped"
        self._result.by_index[index] = "skipped"
        self.bus.emit(StepFinished(host=self.host, index=index, step=run.spec.kind, status="skipped",
                                   message="skipped in the wizard", mode="apply"))

    def recorded_playbook(self) -> Playbook:
        """What ran, then what is left: the succeeded steps in order (as they ran, with the resolved facts),
        and every step that did not complete, with its parameters as now edited (a confirmation merged into
        a field included), marked `pending`; skipped steps are left out."""
        steps: dict[int, StepSpec] = {}
        for run in self.runs:
            if run.status in ("ok", "changed") and run.index in self.recorder.steps:
                steps[run.index] = self.recorder.steps[run.index]
            elif run.status != "skipped":
                steps[run.index] = run.spec.model_copy(update={"pending": True})
        view = Recorder(self.recorder.base)
        view.steps, view.resolved = steps, self.recorder.resolved
        return view.playbook(self.target)

    def save(self, path: str | Path) -> Path:
        out = Path(path).expanduser()
        out.parent.mkdir(parents=True, exist_ok=True)
        playbook = self.recorded_playbook()
        dump(playbook, out)
        self._saved_text, self.saved_to = self._meaning(playbook), out
        self.saved_pending = [s.name or s.kind for s in playbook.steps if s.pending]
        return out

    def recap(self) -> dict[str, int]:
        """Counted from the run's events: every apply (ok / changed / failed / interrupted: two applied
        updates of one step count twice), every failed plan and every skip; then the steps an edit reopened
        (`outdated`, to plan again) and those that never completed (`pending`)."""
        counts = {"ok": 0, "changed": 0, "failed": 0, "interrupted": 0, "skipped": 0, "outdated": 0, "pending": 0}
        for event in self.finished:
            counts[event.status] += 1
        for run in self.runs:
            if run.status in ("edited", "outdated"):
                counts["outdated"] += 1
            elif run.status in ("pending", "planning", "planned", "running"):
                counts["pending"] += 1
        return counts

    def result(self) -> HostResult:
        """The host's counts as `run.finished` reports them: steps never applied count as skipped."""
        for run in self.runs:
            self._result.by_index.setdefault(run.index, "skipped")
        return self._result

    async def close(self) -> None:
        self.run.finish([self.result()])
        for lock in [*self._stale_locks, *([self._node_lock] if self._node_lock is not None else [])]:
            await lock.release()
        self._stale_locks, self._node_lock = [], None
        if self.node is not None:
            await self.node.close()

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
            if event.mode == "apply" or event.status == "failed":
                self.finished.append(event)
            run.message = event.message
            run.diagnosis = list(event.diagnosis)
            run.offer = event.offer
