"""SIGINT/SIGTERM during a run: cancel it, but still finish the recap and `run.finished`.

`cancel_on_signals()` installs loop handlers that remember the signal and cancel the running
task; the runner catches the cancellation, records the step in progress as interrupted and the
rest as skipped, and returns its result, so the CLI prints the recap, closes the run log with a
`run.finished` event and exits 128 + signal number (130 for Ctrl-C, 143 for SIGTERM).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator, Sequence
from typing import Any

_received: list[int] = []
_open_blocks = 0  # `cancel_on_signals` blocks now open


def received() -> int | None:
    """The signal that interrupted the last run (None when there was none); still answers after the block,
    for the CLI's exit code."""
    return _received[-1] if _received else None


def interrupting() -> int | None:
    """The signal that interrupted the run in progress: only while a `cancel_on_signals` block is open, so a
    cancellation outside one (the wizard's "stop safely", a caller's timeout) is never mistaken for a signal
    an earlier run of this process received."""
    return received() if _open_blocks else None


def exit_code() -> int | None:
    sig = received()
    return 128 + sig if sig is not None else None


def name() -> str:
    sig = received()
    return signal.Signals(sig).name if sig is not None else ""


@contextlib.contextmanager
def cancel_on_signals(task: asyncio.Task[Any] | None = None, *, tasks: Sequence[asyncio.Task[Any]] = (),
                      signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """While the block runs, SIGINT/SIGTERM cancel `task` (default: the current task) once — or, when
    `tasks` are given, those (a fleet: each host's run records its own interruption and the gathering
    task collects the results). A second signal falls back to the default action."""
    loop = asyncio.get_running_loop()
    target = task or asyncio.current_task()
    installed: list[int] = []
    _received.clear()  # a signal of an earlier run in this process is not this run's

    def handle(sig: int) -> None:
        _received.append(sig)
        with contextlib.suppress(Exception):
            loop.remove_signal_handler(sig)
        why = f"interrupted by {signal.Signals(sig).name}"
        if tasks:
            for other in tasks:
                other.cancel(why)
        elif target is not None:
            target.cancel(why)

    for sig in signals:
        try:
            loop.add_signal_handler(sig, handle, sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals here
            continue
        installed.append(sig)
    global _open_blocks
    _open_blocks += 1
    try:
        yield
    finally:
        _open_blocks -= 1
        for sig in installed:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
