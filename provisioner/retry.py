"""Retrying with exponential backoff: the one schedule and loop the engine's retries share.

`Backoff` says how many tries in all and how long to wait between them; `call` (blocking) and `acall`
(async) run a callable under it, retrying only the exceptions named in `retry_on` and re-raising the last
one when the tries are spent. Nothing here sleeps after the last try.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

OnRetry = Callable[[int, BaseException, float], None]
"""Called before each wait: (the 1-based number of the try that failed, its exception, the wait in s)."""


@dataclass(frozen=True)
class Backoff:
    """`attempts` tries in all; after the n-th failed try wait `min(first * factor**(n-1), cap)` seconds."""

    attempts: int
    first: float
    factor: float = 2.0
    cap: float = math.inf

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"a backoff needs at least one attempt, not {self.attempts}")
        if self.first < 0 or self.factor < 1 or self.cap < 0:
            raise ValueError(f"invalid backoff {self}")

    def delay(self, failed: int) -> float:
        """The wait after the `failed`-th failed try (1-based)."""
        return min(self.first * self.factor ** (failed - 1), self.cap)

    def delays(self) -> list[float]:
        """Every wait of a run that fails each try but the last: `attempts - 1` of them."""
        return [self.delay(n) for n in range(1, self.attempts)]


def _wait_before_retry(attempt: int, exc: BaseException, backoff: Backoff, on_retry: OnRetry | None) -> float | None:
    """After failed try `attempt`: the wait before the next one (`on_retry` told), or None: no try is left."""
    if attempt >= backoff.attempts:
        return None
    wait = backoff.delay(attempt)
    if on_retry is not None:
        on_retry(attempt, exc, wait)
    return wait


def call(fn: Callable[[], T], backoff: Backoff, *, retry_on: tuple[type[BaseException], ...],
         on_retry: OnRetry | None = None, sleep: Callable[[float], None] = time.sleep) -> T:
    """`fn()`, tried up to `backoff.attempts` times while it raises one of `retry_on`."""
    for attempt in range(1, backoff.attempts + 1):
        try:
            return fn()
        except retry_on as exc:
            wait = _wait_before_retry(attempt, exc, backoff, on_retry)
            if wait is None:
                raise
            sleep(wait)
    raise AssertionError("unreachable")


async def acall(fn: Callable[[], Awaitable[T]], backoff: Backoff, *, retry_on: tuple[type[BaseException], ...],
                on_retry: OnRetry | None = None,
                sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> T:
    """`await fn()`, tried up to `backoff.attempts` times while it raises one of `retry_on`."""
    for attempt in range(1, backoff.attempts + 1):
        try:
            return await fn()
        except retry_on as exc:
            wait = _wait_before_retry(attempt, exc, backoff, on_retry)
            if wait is None:
                raise
            await sleep(wait)
    raise AssertionError("unreachable")
