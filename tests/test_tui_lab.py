"""The whole wizard against the embedded lab, driven with Pilot.

Every page is run with the keyboard (ctrl+r plans, ctrl+r again applies a shown plan), its
specialised view is checked, values survive back/forward navigation, a failing step shows the
error panel and recovers with Retry, and the saved playbook replays headless with no changes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import Button, DataTable, Input, Select, Static, Switch

from provisioner import secrets
from provisioner.playbook import load
from screens.app import ProvisionerApp
from screens.step_page import StepPage
from screens.widgets.busbw_chart import BusbwChart
from screens.widgets.error_panel import ErrorPanel
from screens.wizard_session import PAGES
from tests.support.lab import _lab_available, lab_env, lab_session, run_page  # noqa: F401  (fixtures among them)
from tests.support.tui import PLAYBOOK, ROOT, screen_text, wait_idle

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
LIGHT_BURNIN = {"sizes": "8B:1MiB", "duration_s": "0", "phases": "preflight,gemm,collectives"}










async def test_full_wizard_against_the_lab(lab_env: Path, tmp_path: Path) -> None:
    session = lab_session(lab_env, tmp_path)
    app = ProvisionerApp(session, lab=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        shown: dict[str, list[list[str]]] = {}
        for page_def in PAGES[:-1]:
            page = app.screen
            assert page.name == page_def.name
            if page_def.name == "container":
                # Edit, go back and forth: the value is kept, then it is what runs.
                page.query_one("#s2--cores", Input).value = "32"
                await pilot.pause()
                await pilot.press("ctrl+b", "ctrl+b", "ctrl+n", "ctrl+n")
                assert app.screen is page
                assert page.query_one("#s2--cores", Input).value == "32"
            if page_def.name == "burnin":
                # A short burn-in for the CPU lab, entered in the generic form.
                index = page.indices[0]
                for name, value in LIGHT_BURNIN.items():
                    page.query_one(f"#s{index}--{name}", Input).value = value
                await pilot.pause()
            shown[page_def.name] = await run_page(app, pilot)
            await pilot.pause()
            check_page(app, page_def.name)
            if page_def.name == "pytorch":
                # Override the variant on the finished page: the step is planned and applied again.
                index = page.indices[0]
                page.query_one("#override", Select).value = "cu128"
                await pilot.pause()
                page.flush_forms()  # type: ignore[attr-defined]
                assert app.session.runs[index].status == "edited"
                await run_page(app, pilot)
                assert app.session.runs[index].status == "ok"
                assert app.session.succeeded[index].params["variant"] == "cu128"
            await pilot.press("ctrl+n")
        assert app.screen.name == "summary"
        assert any("create CT 200" in change for plan in shown["container"] for change in plan)
        assert shown["connect"] == [] and shown["inventory"] == []  # read-only steps: nothing to confirm

        text = screen_text(app)
        assert "failed=0" in text and "pending=0" in text
        await pilot.press("ctrl+s")
        await pilot.pause()
        saved = Path(session.record_to)
        assert saved.exists()
        run_log = session.log_path
    # The run log holds the events of every step.
    kinds = [json.loads(line)["kind"] for line in run_log.read_text().splitlines()]
    assert kinds.count("step.finished") >= 10 and "output" in kinds

    recorded = load(saved)
    assert [s.kind for s in recorded.steps] == [s.kind for s in load(PLAYBOOK).steps]
    create = next(s for s in recorded.steps if s.kind == "lxc.create")
    assert create.params["cores"] == 32
    burnin = next(s for s in recorded.steps if s.kind == "burnin.run")
    assert burnin.params["sizes"] == "8B:1MiB" and burnin.params["duration_s"] == 0
    assert recorded.resolved["torch"]["variant"] == "cu128"
    assert next(s for s in recorded.steps if s.kind == "torch.resolve").params["variant"] == "cu128"
    # Secrets stay references.
    assert recorded.target.api is not None and recorded.target.api.password is not None
    assert secrets.is_ref(recorded.target.api.password)
    # the recording keeps the playbook's own reference (the lab's endpoint and password file are the lab's
    # site profile, never recorded) and no secret value: the lab's password is nowhere in it
    assert session.target.api is not None and session.target.api.password is not None
    assert secrets.resolve(session.target.api.password) not in saved.read_text()

    replay = subprocess.run(
        [sys.executable, "-c", "from provisioner.cli import main; main()", "replay", str(saved), "--lab", "--json"],
        capture_output=True, text=True, cwd=ROOT, timeout=600, env=dict(os.environ))
    assert replay.returncode == 0, replay.stderr[-3000:]
    recap = json.loads(replay.stdout.strip().splitlines()[-1])
    assert recap["status"] == "ok"
    assert all(h["changed"] == 0 and h["failed"] == 0 for h in recap["hosts"].values()), recap


def check_page(app: ProvisionerApp, name: str) -> None:
    """Each specialised page shows what its step found."""
    page = app.screen
    state = app.session.state
    text = screen_text(app)
    if name == "connect":
        assert any("Proxmox VE" in n for n in app.session.runs[0].notes)
    elif name == "inventory":
        assert page.query_one("#gpus", DataTable).row_count == 8
        assert "595.71.05" in str(page.query_one("#facts", Static).render())
        assert "RTX PRO 6000" in text
    elif name == "container":
        assert "created by this run" in str(page.query_one("#existing", Static).render())
    elif name == "passthrough":
        devices = str(page.query_one("#devices", Static).render())
        assert "/dev/nvidia0" in devices and "/dev/nvidia-uvm" in devices
    elif name == "driver":
        assert "✓ match" in str(page.query_one("#versions", Static).render())
        assert state.detection is not None and state.detection.gpus
    elif name == "pytorch":
        assert "cu128" in str(page.query_one("#choice", Static).render())
        assert page.query_one("#rejected", DataTable).row_count == len(state.torch.resolution.rejected) > 0  # type: ignore[union-attr]
    elif name == "venv":
        assert "torch==2.11.0" in str(page.query_one("#packages", Static).render())
    elif name == "burnin":
        assert page.query_one(BusbwChart).points
        assert "PASS" in str(page.query_one("#verdict", Static).render())


@pytest.mark.parametrize("lab_env", [["task-fails"]], indirect=True)
async def test_a_failing_step_shows_the_error_panel_and_retry_recovers(lab_env: Path, tmp_path: Path) -> None:
    from provisioner.lab.state import LabState

    session = lab_session(lab_env, tmp_path)
    app = ProvisionerApp(session, start_page="container", lab=True)
    async with app.run_test(size=(80, 24)) as pilot:
        page = app.screen
        assert isinstance(page, StepPage)
        await pilot.press("ctrl+r")  # plan
        await wait_idle(app, pilot)
        index = page.indices[0]
        run = session.runs[index]
        assert run.status == "planned" and run.changes
        await pilot.press("ctrl+r")  # confirm: apply
        await wait_idle(app, pilot)
        assert run.status == "failed"
        panel = page.query_one(ErrorPanel)
        assert panel.shown
        panel_text = str(panel.query_one("#error-text", Static).render())
        assert "Create the LXC container failed" in panel_text
        assert "insufficient free space" in panel_text
        print("diagnosis:", run.diagnosis)
        for finding in run.diagnosis:
            assert finding["category"] in panel_text
        assert str(page.query_one("#run", Button).label) == "Retry"
        # nothing that failed is recorded as done: every step is left to do (marked pending)
        assert all(s.pending for s in session.recorded_playbook().steps)

        LabState.load(lab_env).update_settings(scenarios=[])  # the operator frees space
        # ... and asks for a smaller container before retrying: the edit is planned again.
        page.query_one(f"#s{index}--cores", Input).value = "32"
        await pilot.pause()
        panel.query_one("#retry", Button).press()  # the panel's Retry (ctrl+r on the page does the same)
        await wait_idle(app, pilot)
        # Retry planned again and stopped: the plan is on screen and nothing was applied.
        assert run.status == "planned" and run.changes, run.status
        assert not panel.shown
        plan_text = str(page.query_one("#plan", Static).render())
        assert "will change:" in plan_text and "32 cores" in plan_text
        assert str(page.query_one("#run", Button).label) == f"Apply ({len(run.changes)})"
        assert "32 cores" in screen_text(app)  # visible at 80x24 without scrolling
        assert all(s.pending for s in session.recorded_playbook().steps)
        assert not (lab_env / "etc" / "pve" / "lxc" / "200.conf").exists()  # the host is untouched
        await pilot.press("ctrl+r")  # the confirmation
        await wait_idle(app, pilot)
        assert run.status == "changed", run.message
        recorded = [s for s in session.recorded_playbook().steps if not s.pending]
        assert [s.kind for s in recorded] == ["lxc.create"] and recorded[0].params["cores"] == 32


async def test_an_edited_finished_step_is_planned_again_and_recorded(lab_env: Path, tmp_path: Path) -> None:
    session = lab_session(lab_env, tmp_path)
    app = ProvisionerApp(session, lab=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await run_page(app, pilot)  # connect
        await pilot.press("ctrl+n")
        await pilot.pause()
        page = app.screen
        assert isinstance(page, StepPage) and page.name == "inventory"
        await run_page(app, pilot)
        index = page.indices[0]
        run = session.runs[index]
        assert run.status == "ok" and session.recorded_playbook().steps[index].params["expected_gpus"] == 8
        connect = session.runs[0]
        assert connect.status == "ok"
        assert page.query_one("#run", Button).disabled  # Done ✓

        # Edit the finished step: it is marked, Run is offered again; the recording keeps the edit, marked
        # pending (to plan again when it is opened), until it runs.
        field = page.query_one(f"#s{index}--expected_gpus", Input)
        field.value = ""  # no longer insist on 8 GPUs
        await pilot.pause()
        page.flush_forms()
        await pilot.pause()
        assert run.status == "edited"
        button = page.query_one("#run", Button)
        assert not button.disabled and str(button.label) == "Plan"
        assert "edited" in screen_text(app)
        edited = session.recorded_playbook().steps[index]
        assert edited.pending and edited.params.get("expected_gpus") is None
        await pilot.press("ctrl+r")
        await wait_idle(app, pilot)
        assert run.status == "ok", run.message
        done = session.recorded_playbook().steps[index]
        assert done.params["expected_gpus"] is None and not done.pending

        # An edit to an earlier finished step reopens the later ones too (they may depend on it).
        app.goto("connect")
        await pilot.pause()
        app.screen.query_one("#s0--require_pve", Switch).value = False
        await pilot.pause()
        app.screen.flush_forms()  # type: ignore[attr-defined]
        assert connect.status == "edited" and run.status == "outdated"
        await run_page(app, pilot)
        assert connect.status == "ok" and session.recorded_playbook().steps[0].params == {"require_pve": False}
        app.goto("inventory")
        await pilot.pause()
        await run_page(app, pilot)
        assert run.status == "ok"
        session.save(session.record_to)
    recorded = load(Path(session.record_to))
    assert recorded.steps[0].params == {"require_pve": False}
    assert recorded.steps[1].params["expected_gpus"] is None
