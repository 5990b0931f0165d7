"""Facts: a read-only probe = a command plus a pure parser of its output, cached per run.

Facts run through `Transport.for_facts()` (in a container: no login shell, so no profile noise
reaches the parser).

Independent facts are read concurrently with `FactCache.gather` (one SSH channel each over the one
connection); concurrent reads of the same fact wait for each other, so a probe never runs twice.

A step that changes what a fact describes invalidates it (e.g. `driver.userspace` invalidates the
container's `nvidia-smi` facts), so the next read probes again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from provisioner import retry
from provisioner.transport.base import CommandResult, Transport, TransportError

T = TypeVar("T")


class FactUnavailable(Exception):
    """The probe ran but could not produce the fact (e.g. command missing, non-zero exit)."""

    def __init__(self, fact: str, result: CommandResult | None, reason: str) -> None:
        self.fact = fact
        self.result = result
        self.reason = reason
        super().__init__(f"fact {fact}: {reason}")


@dataclass(frozen=True)
class Fact(Generic[T]):
    """`argv` is run on the target; `parse` turns (exit status, output) into T."""

    name: str
    argv: Sequence[str]
    parse: Callable[[str], T]
    ok_statuses: tuple[int, ...] = (0,)
    timeout: float = 60.0
    idempotent: bool = True
    login: bool = False  # run through a login shell (the environment a profile sets), not `for_facts()`


class Gathered:
    """What `FactCache.gather` read: each fact's value, or the exception its read raised."""

    def __init__(self, outcomes: dict[str, Any]) -> None:
        self._outcomes = outcomes

    def value(self, fact: Fact[T]) -> T:
        """The fact's value; raises what reading it raised (as `FactCache.get` would have)."""
        outcome = self._outcomes[fact.name]
        if isinstance(outcome, Exception):
            raise outcome
        value: T = outcome
        return value


class FactCache:
    """Per-run cache keyed by (target name, fact name): the parsed values and the raw results."""

    def __init__(self) -> None:
        self._values: dict[tuple[str, str], Any] = {}
        self._results: dict[tuple[str, str], CommandResult] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    async def gather(self, transport: Transport, *facts: Fact[Any]) -> Gathered:
        """Read independent facts concurrently; `Gathered.value(fact)` gives each value or raises its
        error, so a caller checks them in the order it always did. Cancellation is not swallowed."""
        results = await asyncio.gather(*(self.get(transport, fact) for fact in facts), return_exceptions=True)
        for outcome in results:
            if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
                raise outcome  # CancelledError, KeyboardInterrupt
        return Gathered({fact.name: outcome for fact, outcome in zip(facts, results, strict=True)})

    async def result(self, transport: Transport, fact: Fact[Any], *, retries: int = 2,
                     on_line: Callable[[str], None] | None = None) -> CommandResult:
        """The fact's raw command result (what a bundle stores beside the parsed value).

        A result whose exit status is one of the fact's `ok_statuses` is kept for the run; any other
        is returned but not kept, so the next read probes again. May raise `TransportError`."""
        key = (transport.name, fact.name)
        if key in self._results:
            kept = self._results[key]
            if on_line is not None:
                for line in kept.output.splitlines():
                    on_line(line)
            return kept
        result = await _run_with_retry(transport, fact, retries, on_line)
        if result.exit_status in fact.ok_statuses:
            self._results[key] = result
        return result

    async def get(self, transport: Transport, fact: Fact[T], *, retries: int = 2) -> T:
        key = (transport.name, fact.name)
        if key in self._values:
            value: T = self._values[key]
            return value
        # a concurrent read of the same fact (`gather`) waits for the first one and finds its value
        async with self._locks.setdefault(key, asyncio.Lock()):
            if key in self._values:
                value = self._values[key]
                return value
            return await self._probe(transport, fact, key, retries)

    async def _probe(self, transport: Transport, fact: Fact[T], key: tuple[str, str], retries: int) -> T:
        result = await self.result(transport, fact, retries=retries)
        if result.exit_status not in fact.ok_statuses:
            tail = " | ".join(result.tail(3))
            raise FactUnavailable(fact.name, result, f"`{result.command}` exited {result.exit_status}: {tail}")
        try:
            value = fact.parse(result.output)
        except ValueError as exc:
            raise FactUnavailable(fact.name, result, f"cannot parse output: {exc}") from None
        self._values[key] = value
        return value

    def invalidate(self, transport_name: str | None = None, *names: str) -> None:
        for key in list(self._values):
            if (transport_name is None or key[0] == transport_name) and (not names or key[1] in names):
                del self._values[key]
        for key in list(self._results):
            if (transport_name is None or key[0] == transport_name) and (not names or key[1] in names):
                del self._results[key]


async def _run_with_retry(transport: Transport, fact: Fact[Any], retries: int,
                          on_line: Callable[[str], None] | None = None) -> CommandResult:
    """Idempotent probes are retried with backoff (0.5 s, doubling) when the connection drops."""
    def once() -> Awaitable[CommandResult]:
        target = transport if fact.login else transport.for_facts()
        return target.run(fact.argv, timeout=fact.timeout, on_line=on_line, quiet=True)

    return await retry.acall(once, retry.Backoff(attempts=retries + 1 if fact.idempotent else 1, first=0.5),
                             retry_on=(TransportError,))
