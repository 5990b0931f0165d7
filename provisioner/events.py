"""One typed event stream: everything a run does is an event; every face renders events.

Sinks (the Rich console, the JSON Lines run log, the recorder, the TUI) subscribe to a `Bus`.
Remote text travels in `OutputLine.line` as data; renderers must never interpret it as markup.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BaseModel, Field, TypeAdapter

from provisioner.redaction import REDACTOR

StepStatus = Literal["ok", "changed", "failed", "skipped", "interrupted"]


class _Event(BaseModel):
    ts: float = Field(default_factory=time.time)
    host: str = ""


class RunStarted(_Event):
    kind: Literal["run.started"] = "run.started"
    run_id: str
    playbook: str
    mode: Literal["plan", "apply"]
    hosts: list[str]


class RunFinished(_Event):
    kind: Literal["run.finished"] = "run.finished"
    run_id: str
    #: "interrupted" when a step was stopped (SIGINT/SIGTERM, or "stop safely" in the wizard)
    status: Literal["ok", "failed", "interrupted"]
    recap: dict[str, dict[str, int]]


class StepStarted(_Event):
    kind: Literal["step.started"] = "step.started"
    index: int
    step: str
    title: str


class PlanReady(_Event):
    kind: Literal["step.plan"] = "step.plan"
    index: int
    step: str
    changes: list[str]
    notes: list[str] = []
    commands: list[str] = []


class ParamOffer(BaseModel):
    """An edit of the failed step's own parameter that settles its failure once the user has checked it: the
    entries `add` merged into the mapping parameter `param`. The wizard shows `confirm` and asks (`action` is
    its button); a replay never applies it (its fix text says what to write in the playbook)."""

    param: str
    add: dict[str, str]
    confirm: list[str]
    action: str


class StepFinished(_Event):
    kind: Literal["step.finished"] = "step.finished"
    index: int
    step: str
    status: StepStatus
    message: str = ""
    duration_s: float = 0.0
    diagnosis: list[dict[str, object]] = []  # `Finding.to_dict()` of provisioner.diagnose
    mode: Literal["plan", "apply"] = "apply"
    resolved: dict[str, object] = {}  # apply mode, ok/changed: the facts the step adds to the playbook's `resolved`
    offer: ParamOffer | None = None  # failed: an edit of its parameters the user may confirm


class CommandStarted(_Event):
    kind: Literal["command.started"] = "command.started"
    target: str
    command: str
    cmd_id: int


class CommandEnded(_Event):
    kind: Literal["command.ended"] = "command.ended"
    target: str
    command: str
    cmd_id: int
    exit_status: int | None
    duration_s: float
    timed_out: bool = False


class OutputLine(_Event):
    kind: Literal["output"] = "output"
    cmd_id: int
    line: str


class Progress(_Event):
    kind: Literal["progress"] = "progress"
    task: str
    completed: float
    total: float | None = None
    unit: str = ""


class Metric(_Event):
    """A measured value for live displays (burn-in busbw per size, per-GPU temperature, ...)."""

    kind: Literal["metric"] = "metric"
    name: str
    value: float
    labels: dict[str, str] = {}


class Message(_Event):
    kind: Literal["message"] = "message"
    level: Literal["info", "warning", "error"]
    text: str


Event = Annotated[
    RunStarted | RunFinished | StepStarted | PlanReady | StepFinished | CommandStarted | CommandEnded
    | OutputLine | Progress | Metric | Message,
    Field(discriminator="kind"),
]
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)

Sink = Callable[[Event], None]


def redact_event(event: Event) -> Event:
    """The event with every string in every field (nested lists and dicts too) redacted."""
    data = event.model_dump()
    clean = REDACTOR.obj(data)
    return EVENT_ADAPTER.validate_python(clean) if clean != data else event


class Bus:
    """Fan-out of events to sinks; secrets are redacted once, before any sink sees them."""

    def __init__(self, *sinks: Sink) -> None:
        self._sinks: list[Sink] = list(sinks)

    def subscribe(self, sink: Sink) -> None:
        self._sinks.append(sink)

    def emit(self, event: Event) -> None:
        event = redact_event(event)
        for sink in list(self._sinks):
            sink(event)
