"""Never lose work in the wizard (issues #28 item 2, #36 items 1-2), driven with Pilot against the lab.

ctrl+q while the burn-in runs asks first; "Stop safely" interrupts the step (the run log says
`interrupted`, the run is `interrupted`), the wizard exits 130 and names the command that resumes; the
recording on disk keeps the completed steps and the interrupted one, marked pending; a wizard opened on
that recording resumes at the burn-in with every earlier step recorded as "no change", plans it and runs
it. Waits are for states, with deadlines; no timing is asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.widgets import Button, Input

from provisioner.lab.state import LabState
from provisioner.playbook import load
from provisioner.session import point_at_lab
from screens.app import ProvisionerApp
from screens.dialogs import QuitDialog
from screens.help import HelpScreen
from screens.wizard_session import PAGES, WizardSession
from tests.support.lab import golden_lab_env, lab_session, run_page  # noqa: F401  (fixture)
from tests.support.tui import PLAYBOOK, wait_for, wait_idle

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


async def test_quit_during_the_burnin_stops_safely_and_the_recording_resumes(golden_lab_env: Path,
                                                                             tmp_path: Path) -> None:
    # a node provisioned up to its burn-in: the run's golden node (this test's copy) without its passing result,
    # so that every step before the burn-in is done and the burn-in is planned (the whole wizard on a new node,
    # each step applied: tests/test_tui_lab.py and tests/test_tui_tmux.py)
    lab_env = golden_lab_env
    result = LabState.load(lab_env).ct_root(200) / "opt" / "gpu-provisioner" / "burnin" / "last-result.json"
    assert result.is_file(), result
    result.unlink()
    session = lab_session(lab_env, tmp_path)
    app = ProvisionerApp(session, lab=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        # F1 opens the help, escape closes it.
        await pilot.press("f1")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), 10, "the help screen")
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, HelpScreen), 10, "the help to close")
        for page_def in PAGES[:-2]:
            assert app.screen.name == page_def.name
            await run_page(app, pilot)
            await pilot.press("ctrl+n")
            await pilot.pause()
        assert app.screen.name == "burnin"
        applied = {i for i, r in enumerate(session.runs) if r.status in ("ok", "changed")}
        assert len(applied) == len(session.runs) - 1
        # The recording was saved as the steps completed: nothing asked for it.
        recorded_path = Path(session.record_to)
        assert recorded_path.exists()
        assert len([s for s in load(recorded_path).steps if not s.pending]) == len(applied)

        page = app.screen
        index = page.indices[0]  # type: ignore[attr-defined]
        # A burn-in long enough to be caught running: a 600 s soak (the collectives alone, on the lab's small sizes,
        # can end before the stop is clicked; CI stop 44 saw that: the step finished "changed").
        page.query_one(f"#s{index}--duration_s", Input).value = "600"
        page.query_one(f"#s{index}--phases", Input).value = "preflight,soak"
        await pilot.pause()
        await pilot.press("ctrl+r")
        await wait_idle(app, pilot, 300)
        assert session.runs[index].planned and session.runs[index].changes
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: session.runs[index].status == "running" and app.busy, 120,
                       "the burn-in to run")
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: isinstance(app.screen, QuitDialog), 20, "the quit prompt")
        assert app.is_running  # asked, did not quit
        assert "burnin.run" in str(app.screen.query_one("#quit-text").render())
        await pilot.click("#quit-stop")
        await wait_for(pilot, lambda: app._exit and not app.busy,
                       300, "the stop to complete")
    assert session.runs[index].status == "interrupted"
    assert app.return_code == 130  # as after ctrl+c: a step was stopped
    assert app.resume_command == f"provisioner tui {recorded_path} --lab"
    events = [json.loads(line) for line in session.log_path.read_text().splitlines()]
    finished = [e for e in events if e["kind"] == "step.finished" and e.get("step") == "burnin.run"]
    assert finished and finished[-1]["status"] == "interrupted"
    assert events[-1]["kind"] == "run.finished" and events[-1]["status"] == "interrupted"
    # The recording keeps the interrupted step, marked pending, with the values it ran with.
    recorded = load(recorded_path)
    assert [s.kind for s in recorded.steps] == [r.spec.kind for r in session.runs]
    assert [s.kind for s in recorded.steps if s.pending] == ["burnin.run"]
    assert recorded.steps[-1].params["duration_s"] == 600

    # Open the recording as `provisioner tui <recording> --lab` does: the wizard resumes at the burn-in (earlier
    # steps "no change"), plans it and runs it on confirmation.
    (tmp_path / "again").mkdir()
    resumed = WizardSession(point_at_lab(recorded, lab_env), playbook_path=str(recorded_path), lab=True,
                            runs_dir=tmp_path / "again", record_to=str(tmp_path / "recorded-again.yaml"))
    app2 = ProvisionerApp(resumed, lab=True, resume=True)
    async with app2.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await wait_for(pilot, lambda: app2.screen.name == "burnin" and not app2.busy
                       # its forms mounted: leaving while a Select is mounted stops the app mid-mount
                       and getattr(app2.screen, "body_ready", False), 600, "the resume to reach the burn-in")
        earlier = resumed.runs[:-1]
        assert all(r.status == "ok" for r in earlier), [(r.spec.kind, r.status, r.message) for r in earlier]
        assert all(r.message == "no change" for r in earlier if r.spec.kind != "burnin.run")
        last = resumed.runs[-1]
        assert last.status == "planned" and last.changes  # shown for confirmation, not applied
        assert resumed.recap()["pending"] == 1
        # a short burn-in this time: the edit plans again, the confirmation runs it
        page = app2.screen
        page.query_one(f"#s{last.index}--duration_s", Input).value = "2"
        await pilot.pause()
        page.flush_forms()  # type: ignore[attr-defined]
        await pilot.press("ctrl+r")
        await wait_idle(app2, pilot, 300)
        assert last.planned and last.changes, last.message
        await pilot.press("ctrl+r")
        await wait_idle(app2, pilot, 600)
        assert last.status in ("ok", "changed"), (last.message, list(last.tail))
        assert resumed.recap()["pending"] == 0 and resumed.recap()["interrupted"] == 0
    assert app2.exit_code() == 0 and app2.resume_command is None  # nothing interrupted is left
    events = [json.loads(line) for line in resumed.log_path.read_text().splitlines()]
    assert not any(e["kind"] == "command.started" and "pct create" in e.get("command", "") for e in events)
    assert any(e["kind"] == "step.finished" and e.get("step") == "burnin.run" and e.get("mode") == "apply"
               and e["status"] in ("ok", "changed") for e in events)


async def test_quit_with_nothing_running_and_nothing_unsaved_leaves_at_once(tmp_path: Path) -> None:
    session = WizardSession(load(PLAYBOOK), playbook_path=str(PLAYBOOK), runs_dir=tmp_path,
                            record_to=str(tmp_path / "rec.yaml"))
    app = ProvisionerApp(session)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: app._exit, 10, "the wizard to exit")
    assert app.return_code == 0


async def test_quit_with_an_edited_step_asks_and_save_writes_the_recording(tmp_path: Path) -> None:
    session = WizardSession(load(PLAYBOOK), playbook_path=str(PLAYBOOK), runs_dir=tmp_path,
                            record_to=str(tmp_path / "rec.yaml"))
    session.runs[2].status = "edited"  # a finished page changed after it ran, not applied again
    app = ProvisionerApp(session)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: isinstance(app.screen, QuitDialog), 10, "the quit prompt")
        labels = [str(b.label) for b in app.screen.query(Button)]
        assert labels == ["Stay", "Discard", "Save and quit"]
        assert "edited, not applied again" in str(app.screen.query_one("#quit-text").render())
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, QuitDialog), 10, "the prompt to close")
        assert app.is_running
