"""Helpers shared by the wizard's tests (no tests here)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PLAYBOOK = ROOT / "playbooks" / "blackwell-8gpu-lxc.yaml"


async def wait_idle(app: Any, pilot: Any, timeout: float = 60.0) -> None:
    """Wait until the engine worker is done and the UI has processed its messages."""
    deadline = time.monotonic() + timeout
    await pilot.pause()
    while app.busy:
        if time.monotonic() > deadline:
            raise AssertionError(f"the engine is still busy after {timeout}s")
        await asyncio.sleep(0.02)
    await pilot.pause()


async def wait_for(pilot: Any, predicate: Any, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.02)


def screen_text(app: Any) -> str:
    """What the terminal shows, as plain text (one line per row)."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(segment.text for segment in strip) for strip in strips)


def burst(app: Any, keys: list[str]) -> None:
    """Post `keys` to the app at once, as the terminal driver does for a burst of input bytes
    (fast typing, a paste, a loaded machine): no pause and no wait between two keys."""
    from textual import events
    from textual.keys import _character_to_key

    for key in keys:
        char = key if len(key) == 1 else None
        name = _character_to_key(key) if char is not None and not key.isalnum() else key
        if key == "space":
            name, char = "space", " "
        event = events.Key(name, char)
        event.set_sender(app)
        app._driver.send_message(event)
