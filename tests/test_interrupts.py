"""SIGINT/SIGTERM cancel the run's task (or a fleet's host tasks) and are remembered for the recap
(real signals sent to this process)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from provisioner import interrupts


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
async def test_signal_cancels_the_run_and_is_remembered(sig: int, code: int) -> None:
    started = asyncio.Event()

    async def run() -> str:
        with interrupts.cancel_on_signals():
            started.set()
            try:
                await asyncio.Event().wait()  # a step that would wait for ever
            except asyncio.CancelledError:
                asyncio.current_task().uncancel()  # type: ignore[union-attr]
                return "recap"
        return "not interrupted"

    task = asyncio.create_task(run())
    await started.wait()
    os.kill(os.getpid(), sig)
    assert await asyncio.wait_for(task, 30) == "recap"
    assert interrupts.received() == sig and interrupts.exit_code() == code
    assert interrupts.name() == signal.Signals(sig).name


async def test_tasks_mode_cancels_only_the_given_tasks() -> None:
    async def host() -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return "interrupted"
        return "done"

    async def bystander() -> str:
        await asyncio.sleep(0)
        return "untouched"

    hosts = [asyncio.create_task(host()) for _ in range(3)]
    other = asyncio.create_task(bystander())
    with interrupts.cancel_on_signals(tasks=hosts):
        await asyncio.sleep(0)
        os.kill(os.getpid(), signal.SIGINT)
        results = await asyncio.wait_for(asyncio.gather(*hosts), 30)
    assert results == ["interrupted"] * 3
    assert await other == "untouched"
