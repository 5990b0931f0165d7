"""Steps are data plus behaviour: a pydantic parameter model and check → apply → verify.

- `check(ctx) -> Plan` gathers facts and says what would change ("no change" = idempotent);
- `apply(ctx)` is an async generator of events (commands stream their own output events);
- `verify(ctx)` proves the result and raises `StepFailed` if it does not hold.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar, Generic, TypeVar, cast

from pydantic import BaseModel, ConfigDict

from provisioner import step_registry
from provisioner.events import Event, ParamOffer
from provisioner.payloads import JsonObject
from provisioner.steps.context import StepContext
from provisioner.transport.base import CommandResult


class Params(BaseModel):
    """Base of every step's parameter model: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


P = TypeVar("P", bound=Params)
T_Parsed = TypeVar("T_Parsed")


class Plan(BaseModel):
    """What a step would do. No `changes` means nothing to do (idempotent re-run)."""

    changes: list[str] = []
    notes: list[str] = []
    #: the commands the apply will run for these changes, as data (shown by `plan --json`, redacted)
    commands: list[str] = []
    after_earlier_changes: bool = False

    @property
    def has_changes(self) -> bool:
        return bool(self.changes) or self.after_earlier_changes

    @classmethod
    def no_change(cls, *notes: str) -> Plan:
        return cls(notes=list(notes))


class StepFailed(Exception):
    """A step cannot proceed or did not verify. `fix` is the advice shown with it."""

    def __init__(self, message: str, *, fix: str = "", result: CommandResult | None = None,
                 evidence: list[str] | None = None, exit_code: int = 1,
                 findings: list[dict[str, object]] | None = None, offer: ParamOffer | None = None) -> None:
        self.message = message
        self.offer = offer  # an edit of the step's parameters that settles it, for the user to confirm
        self.findings = findings or []  # diagnosis findings (`Finding.to_dict()`) the step itself established
        self.fix = fix
        self.result = result
        self.evidence = evidence or (result.tail(20) if result else [])
        self.exit_code = exit_code
        super().__init__(message + (f"\nfix: {fix}" if fix else ""))


def parse_output(result: CommandResult, parse: Callable[[str], T_Parsed], *, what: str = "") -> T_Parsed:
    """`parse(result.output)`; output the parser does not recognise (a `ParseError`/`ValueError`) is a
    finding that names the command and shows its output, never an internal error."""
    try:
        return parse(result.output)
    except ValueError as exc:
        raise StepFailed(f"unexpected output from `{result.command}`{f' ({what})' if what else ''}: {exc}",
                         result=result, evidence=[f"$ {result.command}", *result.tail(20)],
                         fix="the command printed something this tool cannot read (a wrapper, a locale, a mount "
                             "error, another version); run it on the host to see, fix what it prints, and replay"
                         ) from None


class DependsOnEarlier(Exception):
    """Raised by `check` in plan mode when the step's facts only exist after earlier changes.
    `commands`: what the apply will run all the same, where the step can already tell."""

    def __init__(self, message: str, *, commands: list[str] | None = None) -> None:
        super().__init__(message)
        self.commands = list(commands or [])


class StepKind(abc.ABC, Generic[P]):
    """Base of every step kind. Subclasses set `kind`, `title`, `Params` and implement the three phases."""

    kind: ClassVar[str]
    title: ClassVar[str]
    Params: ClassVar[type[Params]]
    # Facts (by name) this step changes; invalidated after apply.
    invalidates: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: P) -> None:
        self.params: P = params

    @abc.abstractmethod
    async def check(self, ctx: StepContext) -> Plan:
        """Gather facts; return what would change."""

    @abc.abstractmethod
    def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        """Make the change; yield progress/message events."""

    async def verify(self, ctx: StepContext) -> None:
        """Prove the result; raise StepFailed when it does not hold."""

    def resolved(self, ctx: StepContext) -> JsonObject:
        """Facts to store in the playbook's `resolved` section after a successful run."""
        return {}


#: every registered step kind by name: the registry's one dict (`provisioner.step_registry.KINDS`), seen here
#: with the engine's type (only `register` below adds to it, and it takes only StepKind subclasses)
STEP_KINDS = cast("dict[str, type[StepKind[Any]]]", step_registry.KINDS)


def register(cls: type[StepKind[Any]]) -> type[StepKind[Any]]:
    if cls.kind in STEP_KINDS:
        raise ValueError(f"step kind {cls.kind} registered twice")
    STEP_KINDS[cls.kind] = cls
    return cls


def load_step_kinds() -> dict[str, type[StepKind[Any]]]:
    """Import every step module so that they register."""
    step_registry.load_step_modules()
    return STEP_KINDS
