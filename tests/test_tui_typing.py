"""Typing never loses or reorders a key: bursts of 200 keys with no pause into each kind of field.

The keys are posted all at once (as the terminal driver does for a burst of input), then the test
waits, with a deadline, for the app to be idle and reads the field back. A plain Textual `Input`
given the same burst applies its Backspaces late (they are bindings, run after the key bubbles up
through every ancestor's queue) and deletes the new characters: the control at the end shows the
test can fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Input, Static, Switch

from provisioner.playbook import load
from screens.app import ProvisionerApp
from screens.wizard_session import WizardSession
from tests.support.tui import (
    PLAYBOOK,
    burst,
    type_into,
    wait_for,
)

HOST = ".".join(["a" * 49, "b" * 49, "c" * 49, "d" * 50])  # 200 characters, a valid DNS name
assert len(HOST) == 200


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ProvisionerApp:
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    session = WizardSession(load(PLAYBOOK), playbook_path=str(PLAYBOOK), runs_dir=tmp_path,
                            record_to=str(tmp_path / "recorded.yaml"))
    return ProvisionerApp(session)




async def test_200_keys_without_pauses_into_every_kind_of_field(app: ProvisionerApp) -> None:
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        # host (text): the case, Backspaces first, then the address
        await type_into(app, pilot, "#target--host", ["backspace"] * 30 + list("127.0.0.1"), "127.0.0.1")
        await type_into(app, pilot, "#target--host", ["backspace"] * 30 + list(HOST), HOST)
        app.screen.flush_forms()  # type: ignore[attr-defined]
        assert app.session.target.host == HOST

        app.goto("container")
        await pilot.pause()
        # int
        digits = "1234567890" * 20
        await type_into(app, pilot, "#s2--cores", ["backspace"] * 30 + list(digits), digits)
        await type_into(app, pilot, "#s2--cores", ["backspace"] * 200 + list("32"), "32")
        # size
        size = "1" * 199 + "G"
        await type_into(app, pilot, "#s2--memory", ["backspace"] * 30 + list(size), size)
        await type_into(app, pilot, "#s2--memory", ["backspace"] * 200 + list("256G"), "256G")
        # the session holds the values as stored (memory in MiB)
        app.screen.flush_forms()  # type: ignore[attr-defined]
        spec = app.session.runs[2].spec
        assert spec.params["cores"] == 32 and spec.params["memory"] == 256 * 1024

        app.goto("passthrough")
        await pilot.pause()
        index = app.session.indices(("lxc.gpu_passthrough",))[0]
        # list
        gpus = ",".join(str(i % 64) for i in range(80))[:199].rstrip(",")
        gpus += "," + "7" * (200 - len(gpus) - 1)
        assert len(gpus) == 200
        await type_into(app, pilot, f"#s{index}--gpus", ["backspace"] * 30 + list(gpus), gpus)
        await type_into(app, pilot, f"#s{index}--gpus", ["backspace"] * 200 + list("0,1"), "0,1")
        app.screen.flush_forms()  # type: ignore[attr-defined]
        assert app.session.runs[index].spec.params["gpus"] == [0, 1]
        # bool: 201 presses of space toggle it once, and the text says so
        switch = app.screen.query_one(f"#s{index}--modeset", Switch)
        before = switch.value
        switch.focus()
        await pilot.pause()
        burst(app, ["space"] * 201)
        await wait_for(pilot, lambda: switch.value is not before, timeout=60, what="the switch to toggle")
        for _ in range(3):
            await pilot.pause()
        assert switch.value is not before
        state = app.screen.query_one(f"#s{index}--modeset--state", Static)
        assert str(state.render()) == ("on" if switch.value else "off")


class PlainInputApp(App[None]):
    def compose(self) -> ComposeResult:
        yield Input("", id="plain")


async def test_control_a_plain_textual_input_reorders_the_same_burst() -> None:
    app = PlainInputApp()
    async with app.run_test(size=(80, 24)) as pilot:
        field = app.query_one("#plain", Input)
        field.value = "pve1.example.internal"
        field.focus()
        await pilot.pause()
        burst(app, ["backspace"] * 30 + list("127.0.0.1"))
        for _ in range(20):
            await pilot.pause()
        assert field.value != "127.0.0.1"  # Backspaces applied after the characters
