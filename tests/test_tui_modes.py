"""Pilot tests that need no target: diagnose mode, themes, palette, navigation, streaming, 80×24."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, Log, TextArea

from provisioner.events import Metric, OutputLine
from provisioner.playbook import load
from provisioner.transport.local import LocalTransport
from screens.app import ProvisionerApp
from screens.diagnose import DiagnoseScreen
from screens.pages.burnin import BurninPage
from screens.step_page import LOG_MAX_LINES
from screens.widgets.busbw_chart import BusbwChart
from screens.wizard_session import PAGES, WizardSession
from tests.support.shared import shared_path
from tests.support.tui import PLAYBOOK, screen_text, wait_for, wait_idle

CORPUS = shared_path("corpus/failures-public.jsonl")
LOCAL_CORPUS = Path(__file__).parent / "fixtures" / "logs" / "failures-public.jsonl"
NCCL_LOG = Path(__file__).parent / "fixtures" / "logs" / "clean-nccl-tests-all-reduce.log"


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ProvisionerApp:
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    session = WizardSession(load(PLAYBOOK), playbook_path=str(PLAYBOOK), runs_dir=tmp_path)
    return ProvisionerApp(session)


def corpus_case(category: str) -> dict[str, Any]:
    path = LOCAL_CORPUS if LOCAL_CORPUS.exists() else CORPUS
    for line in path.read_text().splitlines():
        case: dict[str, Any] = json.loads(line)
        if case["category"] == category:
            return case
    raise AssertionError(f"no {category} case in {path}")


async def test_diagnose_mode_is_reachable_from_any_page_and_finds_the_cause(app: ProvisionerApp) -> None:
    case = corpus_case("arch_unsupported")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+n", "ctrl+n")
        assert app.screen.name == "container"
        await pilot.press("f5")
        assert isinstance(app.screen, DiagnoseScreen)
        app.screen.query_one(TextArea).text = case["log"]
        await pilot.press("ctrl+r")
        await pilot.pause()
        findings = app.screen.findings  # type: ignore[attr-defined]
        assert findings and findings[0]["category"] == "arch_unsupported"
        assert "arch_unsupported" in screen_text(app)
        await pilot.press("escape")
        assert app.screen.name == "container"  # back where we were


async def test_theme_toggle_and_palette_entries(app: ProvisionerApp) -> None:
    async with app.run_test(size=(80, 24)) as pilot:
        assert app.theme == "textual-dark"
        await pilot.press("f6")
        assert app.theme == "textual-light"
        await pilot.press("f6")
        assert app.theme == "textual-dark"
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {"Run step", "Next page", "Previous page", "Diagnose a log", "Save playbook", "Open run log",
                "Toggle light/dark"} <= titles
        assert {f"Go to {p.title}" for p in PAGES} <= titles
        goto_venv = next(c for c in app.get_system_commands(app.screen) if c.title == "Go to Venv")
        goto_venv.callback()
        await pilot.pause()
        assert app.screen.name == "venv"


async def test_footer_shows_the_key_bindings_at_80x24(app: ProvisionerApp) -> None:
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "^r Run" in (screen_text(app).splitlines() or [""])[-1], 30, "the footer's key bindings")
        text = screen_text(app)
        last = text.splitlines()[-1]
        for key in ("^r Run", "^b Back", "^n Next", "f5 Diagnose", "f6 Theme"):
            assert key in last
        assert "1/9" in text.splitlines()[0] and "Connect" in text.splitlines()[0]
        for page in PAGES[1:]:
            await pilot.press("ctrl+n")
            # the breadcrumb always shows the current page (waited for: a loaded machine renders the switch late)
            await wait_for(pilot, lambda title=page.title: title in (screen_text(app).splitlines() or [""])[0], 30,
                           f"the breadcrumb naming {page.title}")


async def test_values_survive_back_and_forward_navigation(app: ProvisionerApp) -> None:
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+n", "ctrl+n")
        await wait_for(pilot, lambda: app.screen.name == "container" and bool(app.screen.query("#s2--cores")),
                       10, "the container page's form")
        cores = app.screen.query_one("#s2--cores", Input)
        cores.value = "32"
        hostname = app.screen.query_one("#s2--hostname", Input)
        hostname.value = "bad_name!"
        await pilot.pause()
        assert "✗" in screen_text(app) or app.screen.form_valid[2] is False  # type: ignore[attr-defined]
        assert app.screen.query_one("#run").disabled  # invalid form: nothing runs
        hostname.value = "torch-ct"
        await pilot.pause()
        assert not app.screen.query_one("#run").disabled
        await pilot.press("ctrl+b", "ctrl+b")
        assert app.screen.name == "connect"
        await pilot.press("ctrl+n", "ctrl+n")
        assert app.screen.name == "container"
        assert app.screen.query_one("#s2--cores", Input).value == "32"
        assert app.screen.query_one("#s2--hostname", Input).value == "torch-ct"
        spec = app.session.runs[2].spec
        assert spec.params["cores"] == 32 and spec.params["hostname"] == "torch-ct"
        assert spec.params["memory"] == 491520  # untouched reference value kept


async def test_streamed_output_is_plain_text_and_bounded(app: ProvisionerApp) -> None:
    lines = LOG_MAX_LINES + 1500
    script = ("import sys\nfor i in range(" + str(lines) + "): "
              "sys.stdout.write(f'line {i} [bold red]not markup[/] \\x1b[31m\\n')")
    async with app.run_test(size=(80, 24)) as pilot:
        page = app.screen
        transport = LocalTransport(app.session.bus, "local")

        async def stream() -> None:
            await transport.run([sys.executable, "-c", script], timeout=60)

        app.start_engine(page, stream())
        await wait_idle(app, pilot)
        log = page.query_one("#log", Log)
        assert log.line_count <= LOG_MAX_LINES
        assert any(f"line {lines - 1} [bold red]not markup[/]" in line for line in log.lines[-3:])
        page.query_one("#log").scroll_visible(animate=False)
        await pilot.pause()
        shown = screen_text(app)
        assert "not markup[/]" in shown  # markup shown literally, not interpreted
        assert "\x1b" not in shown  # control codes are neutralised by the plain Log


async def test_burnin_page_charts_busbw_from_nccl_tests_rows(app: ProvisionerApp) -> None:
    from provisioner.steps.burnin_run import _metric_from_line

    async with app.run_test(size=(120, 40)) as pilot:
        app.goto("burnin")
        await pilot.pause()
        page = app.screen
        assert isinstance(page, BurninPage)
        ctx = app.session.context()
        app.active_page = page
        for line in NCCL_LOG.read_text().splitlines():
            _metric_from_line(ctx, line)
        for gpu in range(8):
            app.session.bus.emit(Metric(name="gpu_temp", value=60 + gpu, labels={"gpu": str(gpu)}))
            app.session.bus.emit(Metric(name="gpu_power", value=400.5, labels={"gpu": str(gpu)}))
        app.session.bus.emit(OutputLine(cmd_id=1, line="done"))
        await pilot.pause()
        chart = page.query_one(BusbwChart)
        rows = [line for line in NCCL_LOG.read_text().splitlines()
                if len(line.split()) >= 9 and line.split()[0].isdigit() and line.split()[1].isdigit()]
        assert len(chart.points) == len({int(r.split()[0]) for r in rows}) > 0
        biggest = max(rows, key=lambda r: int(r.split()[0]))
        assert chart.points[max(chart.points)] == pytest.approx(float(biggest.split()[7]))
        text = screen_text(app)
        assert "busbw (GB/s)" in text
        assert page.gpu_values["7"] == {"gpu_temp": 67.0, "gpu_power": 400.5}


def test_the_loading_frame_knows_the_pages_by_the_same_titles() -> None:
    from screens.pages import PAGE_MODULES, PAGE_TITLES

    assert PAGE_TITLES == {p.name: p.title for p in PAGES}
    assert set(PAGE_MODULES) == set(PAGE_TITLES)


async def test_a_session_factory_paints_first_then_opens_the_page(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    from screens.loading import LoadingScreen

    calls: list[str] = []

    def factory() -> WizardSession:
        calls.append(type(app.screen).__name__)  # what was on screen while the engine loaded
        return WizardSession(load(PLAYBOOK), playbook_path=str(PLAYBOOK), runs_dir=tmp_path)

    app = ProvisionerApp(factory, start_page="container")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.screen.name == "container", what="the container page")
        await pilot.pause()
        assert calls == [LoadingScreen.__name__]
        await wait_for(pilot, lambda: "3/9" in (screen_text(app).splitlines() or [""])[0], what="the page drawn")
        await pilot.press("ctrl+q")
    assert app.return_code == 0


async def test_a_failing_session_factory_ends_the_app_with_its_message(tmp_path: Path) -> None:
    def factory() -> WizardSession:
        raise ValueError("the playbook is broken")

    app = ProvisionerApp(factory)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: not app.is_running or app._exit_renderables != [], what="the app to exit")
    assert app.return_code == 2


async def test_a_later_page_does_not_run_while_an_earlier_plan_waits_for_confirmation(
        app: ProvisionerApp) -> None:
    """The wizard side of the tmux race (issue #12): a Container plan shown but not applied must not
    let the Passthrough step run, whatever keys arrive."""
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        create = app.session.runs[app.session.indices(("lxc.create",))[0]]
        create.status, create.changes, create.plan_stale = "planned", ["create CT 200"], False
        app.goto("passthrough")
        await pilot.pause()
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert not app.busy
        passthrough = app.session.runs[app.session.indices(("lxc.gpu_passthrough",))[0]]
        assert passthrough.status == "pending"
        assert any("waits for confirmation" in str(n.message) for n in app._notifications)
