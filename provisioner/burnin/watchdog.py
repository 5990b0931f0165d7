"""A watchdog thread that turns a hung collective into a verdict.

The main thread arms it around every blocking step (`with dog.guard("all_reduce 1KiB", 30): ...`).
If a step outlives its deadline the thread calls `on_timeout(region, seconds)` once; in the
worker that callback records the verdict and ends the process with `os._exit`, because a rank
stuck inside NCCL or gloo cannot be unblocked from Python.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Watchdog:
    def __init__(self, on_timeout: Callable[[str, float], None], poll: float = 0.05) -> None:
        self._on_timeout = on_timeout
        self._poll = poll
        self._lock = threading.Lock()
        self._region: str | None = None
        self._limit = 0.0
        self._deadline: float | None = None
        self._stop = threading.Event()
        self.fired: str | None = None
        self._thread = threading.Thread(target=self._run, name="burnin-watchdog", daemon=True)
        self._thread.start()

    @property
    def region(self) -> str | None:
        with self._lock:
            return self._region

    @contextmanager
    def guard(self, region: str, seconds: float) -> Iterator[None]:
        with self._lock:
            outer = (self._region, self._limit, self._deadline)
            self._region, self._limit = region, seconds
            self._deadline = time.monotonic() + seconds
        try:
            yield
        finally:
            with self._lock:
                self._region, self._limit, self._deadline = outer

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)

    def _run(self) -> None:
        while not self._stop.wait(self._poll):
            with self._lock:
                expired = self._deadline is not None and time.monotonic() > self._deadline
                region, limit = self._region, self._limit
                if expired:
                    self._deadline = None
            if expired and region is not None:
                self.fired = region
                self._on_timeout(region, limit)
                return
