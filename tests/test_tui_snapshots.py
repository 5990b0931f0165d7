"""SVG snapshots of every page at 80×24 and 100×30, plus a running step and the error panel
(update with `pytest tests/test_tui_snapshots.py --snapshot-update`).

The page data comes from the same pipelines the steps use: the lab's reference host rendered as
`nvidia-smi --query-gpu` CSV and parsed by the engine's parser, the real resolver's answer for
8 × CC 12.0 with driver 595.71.05 and Python 3.12, busbw rows of a real nccl-tests log
(tests/fixtures/logs/clean-nccl-tests-all-reduce.log) and the package lines of a real uv install
(tests/fixtures/logs/clean-uv-torch-install.log). Besides the SVG comparison, each test checks
that what matters is on screen without scrolling: the breadcrumb, the action bar and the footer.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input, Log

from provisioner.events import CommandStarted, OutputLine
from screens.app import ProvisionerApp
from screens.fit import fit_urls
from screens.step_page import STATUS_MARK, STATUS_WORDS, StepPage
from screens.wizard_session import PAGES
from tests.support.tui import (  # noqa: F401  (fixtures among them)
    LOGS,
    PLAYBOOK,
    freeze,
    make_app,
    page_data,
    reference_inventory,
    screen_text,
    show,
    torch_choice,
)

pytestmark = pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="snapshots are generated on Python 3.11")
SIZES = [(80, 24), (100, 30)]


@pytest.fixture(autouse=True)
def _steady(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(Input, "_toggle_cursor", lambda self: None)  # no cursor blink in snapshots
    monkeypatch.setenv("PROVISIONER_STATE_DIR", "/nonexistent/state")  # fixed paths on screen














def assert_fits(app: ProvisionerApp, name: str, size: tuple[int, int]) -> None:
    lines = screen_text(app).splitlines()
    title = next(p.title for p in PAGES if p.name == name)
    assert len(lines) == size[1]
    assert title in lines[0] and re.match(r"^ *\d/9 ", lines[0]), lines[0]
    assert "◀ Back" in lines[-2] and "Next ▶" in lines[-2], lines[-2]
    assert "^r Run" in lines[-1] and "^q Quit" in lines[-1], lines[-1]
    assert_status_words(app)


_TITLE = re.compile(r"^ ([" + "".join(sorted(set(STATUS_MARK.values()))) + r"]) (\S+)(.*?)\s*(?:[▁▂▃▄▅▆▇█]\s*)?$")


def assert_status_words(app: ProvisionerApp) -> None:
    """Every step title on screen shows its whole status word, and its title whole or cut at a word ("…")."""
    page = app.screen
    assert isinstance(page, StepPage)
    words = {STATUS_WORDS.get(status, status).split(":")[0] for status in STATUS_MARK}
    titles = [m for line in screen_text(app).splitlines() if (m := _TITLE.match(line))]
    for index in page.indices:
        run = app.session.runs[index]
        shown = [m for m in titles if m.group(1) == STATUS_MARK[run.status]]
        want = STATUS_WORDS.get(run.status, run.status).split(":")[0]
        title = page.query_one(f"#title-{index}")
        visible = app.screen._compositor.visible_widgets.get(title)
        if visible is not None and visible[0].height:  # on screen (not scrolled away)
            assert any(m.group(2).rstrip(":") == want for m in shown), (want, [m.group(0) for m in titles])
    for m in titles:
        assert m.group(2).rstrip(":") in words, m.group(0)
        rest = m.group(3)
        if rest.endswith("…"):
            assert rest[-2] == " ", m.group(0)  # cut after a whole word


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", [p.name for p in PAGES])
def test_page(snap_compare: Any, tmp_path: Path, name: str, size: tuple[int, int]) -> None:
    app = make_app(tmp_path, name)

    async def run_before(pilot: Pilot[Any]) -> None:
        await show(pilot, name)
        assert_fits(app, name, size)
        text = screen_text(app)
        if name == "burnin":
            assert "verdict: PASS" in text  # the answer is above the charts, never below the fold
        if name == "inventory" and size == (80, 24):
            assert "0000:17:00.0" in text and "0000:e1:00.0" in text  # PCI ids are not cut

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_running_step_shows_its_live_output(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    app = make_app(tmp_path, "venv")

    async def run_before(pilot: Pilot[Any]) -> None:
        await show(pilot, "venv")
        page = app.screen
        assert isinstance(page, StepPage)
        index = page.indices[0]
        app.session.runs[index].status = "running"
        app.busy = True
        app.active_page = page
        page.log_line("── apply: venv.build")
        app.session.bus.emit(CommandStarted(target="ct 200", command="uv pip install --require-hashes -r lock",
                                            cmd_id=7))
        for line in (LOGS / "clean-uv-torch-install.log").read_text().splitlines()[:40]:
            app.session.bus.emit(OutputLine(cmd_id=7, line=line))
        app.flush_events()
        page.refresh_controls()
        await pilot.pause()
        assert_fits(app, "venv", size)
        text = screen_text(app)
        assert "running…" in text
        assert "$ uv pip install" in text or "+ " in text  # the live output is on screen

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_error_panel_fits(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> None:
    app = make_app(tmp_path, "container")

    async def run_before(pilot: Pilot[Any]) -> None:
        await show(pilot, "container")
        page = app.screen
        assert isinstance(page, StepPage)
        run = app.session.runs[page.indices[0]]
        run.status = "failed"
        run.message = "create CT 200: TASK ERROR: unable to create CT 200 - insufficient free space on local-lvm"
        run.failing_command = "POST /nodes/pve/lxc (vmid=200)"
        run.tail.extend(["  Logical volume \"vm-200-disk-0\" created.", "  Insufficient free space: 51200 extents "
                         "needed, but only 1024 available", "TASK ERROR: unable to create CT 200"])
        run.diagnosis = [{"category": "storage_full", "root_cause": "the storage for the rootfs is full",
                          "fix": "free space on local-lvm or choose another rootfs_storage"}]
        page.show_error(run.index)
        page.refresh_controls()
        await pilot.pause()
        assert_fits(app, "container", size)
        text = screen_text(app)
        for word in ("Retry", "Skip", "Abort", "insufficient free space"):
            assert word in text, word

    assert snap_compare(app, terminal_size=size, run_before=run_before)


# --- every page with a plan shown and with an error shown (issue 28) ---------------------------------------

#: plans as the steps word them (the format strings of each step's `check`), for one step of each page
PLANS: dict[str, tuple[list[str], list[str]]] = {
    "connect": ([], ["Proxmox VE 8.4.1 on pve (kernel 6.8.12-9-pve); API as root@pam with a ticket"]),
    "inventory": ([], ["8 × NVIDIA RTX PRO 6000 Blackwell Server Edition, driver 595.71.05 (open kernel module)"]),
    "container": (["update CT 200 in place: cores 64 → 32",
                   "update CT 200 in place: rootfs 200G → 300G (grow the disk)"], []),
    "passthrough": (["add devN entries for /dev/nvidia0, /dev/nvidia1, /dev/nvidia2, /dev/nvidia3, /dev/nvidia4, "
                     "/dev/nvidia5, /dev/nvidia6, /dev/nvidia7, /dev/nvidiactl, /dev/nvidia-uvm, "
                     "/dev/nvidia-uvm-tools (mode 0666)"], ["mode dev: PVE 8.4 passes devN entries"]),
    "driver": (["install NVIDIA userspace 595.71.05 (.run --no-kernel-modules) from https://download.nvidia.com/"
                "XFree86/Linux-x86_64/595.71.05/NVIDIA-Linux-x86_64-595.71.05.run",
                "apt-get install --no-install-recommends kmod pkg-config (the installer's prerequisites)"], []),
    "pytorch": ([], ["torch 2.11.0 + torchvision 0.26.0 from https://download.pytorch.org/whl/cu128 (cu128)",
                     "because: CC 12.0 ×8: runs the build's sm_120 SASS",
                     "kept the recorded choice torch 2.11.0 (cu128) from the playbook's resolved section"]),
    "venv": (["create /opt/torch-venv with uv 0.9.5: torch==2.11.0 torchvision==0.26.0 nvidia-ml-py from "
              "https://download.pytorch.org/whl/cu128"], []),
    "burnin": (["run the burn-in (preflight,gemm,collectives,soak,nvshmem; sizes 8B:1GiB; soak 300 s)"], []),
}

#: failures as the engine words them (plain connection errors, a refused in-place update, …)
ERRORS: dict[str, str] = {
    "connect": "cannot connect: connection refused: nothing listens on 192.0.2.10 port 22",
    "inventory": "expected 8 GPUs, the node has 7 (nvidia-smi lists 0-6)",
    "container": "CT 200 on pve is ours, but these changes cannot be made in place; it is left untouched:\n"
                 "  rootfs 200G → 100G: PVE cannot shrink a container disk (\"unable to shrink disk size\")\n"
                 "fix: keep CT 200's values, or choose another container id for a new container (field "
                 "'container id' on the Container page)",
    "passthrough": "GPU device nodes missing on the host: /dev/nvidia7",
    "driver": "installing kmod/pkg-config in the container failed",
    "pytorch": "no PyTorch build fits this host (driver_too_old): driver 535.54.03 < 570 required by Blackwell",
    "venv": "the container ran out of disk space while installing the torch packages (No space left on device)",
    "burnin": "burn-in failed: collectives: all_reduce busbw 12.1 GB/s below the floor 40.0 GB/s",
}


async def show_plan(pilot: Pilot[Any], name: str) -> StepPage:
    await show(pilot, name)
    app = pilot.app
    assert isinstance(app, ProvisionerApp)
    page = app.screen
    assert isinstance(page, StepPage)
    changes, notes = PLANS[name]
    run = app.session.runs[page.indices[0]]
    run.status, run.plan_stale, run.changes, run.notes = "planned", False, list(changes), list(notes)
    page.refresh_view()
    page.refresh_controls()
    await pilot.pause()
    return page


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", [p.name for p in PAGES if p.kinds])
def test_page_with_a_plan(snap_compare: Any, tmp_path: Path, name: str, size: tuple[int, int]) -> None:
    app = make_app(tmp_path, name)

    async def run_before(pilot: Pilot[Any]) -> None:
        page = await show_plan(pilot, name)
        assert_fits(app, name, size)
        text = screen_text(app)
        changes, _notes = PLANS[name]
        plan = str(page.query_one("#plan").render())
        if changes:
            assert "will change:" in text and f"Apply ({len(changes)})" in text
            assert "Apply (ctrl+r) makes these" in text  # the confirmation line is never scrolled away
            for change in changes:  # whole words, wrapped with a hanging indent, never cut; a URL too wide
                # for the pane shortened in the middle (never folded), the full text in the plan's tooltip
                fitted = fit_urls(change, size[0] - 10)
                assert " ".join(fitted.split()) in " ".join(plan.split()), change
                if fitted != change:
                    assert change in str(page.query_one("#plan").tooltip)
            if name == "driver":  # the installer's URL never folds across lines: whole, or cut in the middle
                urls = [w for line in text.splitlines() for w in re.findall(r"https://download\.nvidia\.com/XFree86/\S+", line)]
                assert urls and all(w.rstrip(";").endswith("595.71.05.run") for w in urls), urls
                full = changes[0].split()[-1]
                versions = page.query_one("#versions")
                if "…" in str(versions.render()):  # shortened on the page: whole in its tooltip
                    assert full in str(versions.tooltip)
                assert size[0] >= 100 or "…" in str(versions.render())  # 80 columns: the URL never folds
        else:
            assert "no change needed" in text
        body = page.query_one("#body")
        assert body.region.height >= 5 and body.region.y == 1  # the form keeps rows under the breadcrumb
        if name == "pytorch":
            assert plan.count("because:") == 0  # the page shows its reasons once, not again in the plan

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", [p.name for p in PAGES if p.kinds])
def test_page_with_an_error(snap_compare: Any, tmp_path: Path, name: str, size: tuple[int, int]) -> None:
    app = make_app(tmp_path, name)

    async def run_before(pilot: Pilot[Any]) -> None:
        await show(pilot, name)
        page = app.screen
        assert isinstance(page, StepPage)
        run = app.session.runs[page.indices[0]]
        run.status, run.message = "failed", ERRORS[name]
        page.show_error(run.index)
        page.refresh_controls()
        await pilot.pause()
        assert_fits(app, name, size)
        text = screen_text(app)
        for word in ("Retry", "Skip", "Abort"):
            assert word in text, word
        first = ERRORS[name].splitlines()[0]
        assert " ".join(first.split()[:6]) in " ".join(text.split()), first  # the failure is on screen

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_burnin_shows_phase_progress_and_eta(snap_compare: Any, tmp_path: Path, size: tuple[int, int],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The running burn-in: its phase (from the burn-in's `[burnin] phase …` lines), the sizes done in the
    collective and the ETA the soak still to come gives (the page's clock is frozen for the snapshot)."""
    import screens.pages.burnin as burnin_page
    from provisioner.steps.burnin_run import LiveProgress, _metric_from_line

    monkeypatch.setattr(burnin_page.BurninPage, "now", lambda self: 1000.0)  # the page's clock, frozen
    app = make_app(tmp_path, "burnin")

    async def run_before(pilot: Pilot[Any]) -> None:
        await show(pilot, "burnin")
        page = app.screen
        assert isinstance(page, StepPage)
        app.session.state.burnin = None
        run = app.session.runs[page.indices[0]]
        run.status = "running"
        app.busy = True
        app.active_page = page
        ctx = app.session.context()
        live = LiveProgress(phases=["preflight", "gemm", "collectives", "soak"], sizes=18, soak_s=300)
        lines = ["[burnin] phase preflight", "[burnin] phase gemm", "[burnin] phase collectives",
                 *(LOGS / "clean-nccl-tests-all-reduce.log").read_text().splitlines()[:30]]
        for line in lines:
            _metric_from_line(ctx, line, live)
        app.flush_events()
        page.refresh_view()
        page.refresh_controls()
        await pilot.pause()
        assert_fits(app, "burnin", size)
        text = screen_text(app)
        assert "verdict: running…" in text and "not run yet" not in text
        assert "phase 3/4: collectives" in text
        assert re.search(r"all_reduce\w* \d+/18 sizes", text), text
        assert "ETA ≥ 1:00" in text  # the default 60 s soak still to come

    assert snap_compare(app, terminal_size=size, run_before=run_before)


PROVEN_RUN = Path(__file__).parent / "fixtures" / "runs" / "20261203T131151-82a539.jsonl"


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_summary_offers_the_export(snap_compare: Any, tmp_path: Path, size: tuple[int, int],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The export's plan on the Summary page: the format chosen, every file it will write, Write export ready.
    The proof is a recorded run log of the wizard (tests/fixtures/runs: the events a run of the reference
    playbook writes, with a passing burn-in)."""
    from textual.widgets import Button, Select

    from screens.pages.summary import SummaryPage

    app = make_app(tmp_path, "summary")

    async def run_before(pilot: Pilot[Any]) -> None:
        await show(pilot, "summary")
        page = app.screen
        assert isinstance(page, SummaryPage)
        monkeypatch.setattr(page, "export_source", lambda: PROVEN_RUN)
        page.query_one("#export-format", Select).value = "flox"
        await pilot.pause()
        assert page.plan_export().ok
        await pilot.pause()
        page.query_one("#body").scroll_end(animate=False)  # the offer is at the end of the page
        await pilot.pause()
        assert_fits(app, "summary", size)
        text = screen_text(app)
        for word in ("Write export", "pylock.toml", "runtime.json", "host.json", "manifest.toml"):
            assert word in text, word
        assert not page.query_one("#export-write", Button).disabled

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", [p.name for p in PAGES if p.kinds])
def test_page_running(snap_compare: Any, tmp_path: Path, name: str, size: tuple[int, int]) -> None:
    """Every page while its first step applies: the status word on the title, the live output below, a command
    wider than the output box wrapped at words with a hanging indent (never cut without a mark)."""
    app = make_app(tmp_path, name)
    command = ("uv pip install --require-hashes -r /opt/torch-venv/requirements.lock --python "
               "/opt/torch-venv/bin/python --index-url https://download.pytorch.org/whl/cu128")

    async def run_before(pilot: Pilot[Any]) -> None:
        await show(pilot, name)
        page = app.screen
        assert isinstance(page, StepPage)
        run = app.session.runs[page.indices[0]]
        run.status = "running"
        app.busy = True
        app.active_page = page
        page.log_line(f"── apply: {run.spec.kind}")
        app.session.bus.emit(CommandStarted(target="ct 200", command=command, cmd_id=3))
        app.flush_events()
        page.refresh_controls()
        await pilot.pause()
        assert_fits(app, name, size)
        text = screen_text(app)
        assert "running…" in text
        logged = [str(line) for line in page.query_one("#log", Log).lines]
        assert " ".join(" ".join(logged).split()).endswith(" ".join(("$ " + command).split())), logged
        assert all(len(line) <= size[0] - 2 for line in logged), logged

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_gpu_checklist_reads_without_colour(snap_compare: Any, tmp_path: Path, size: tuple[int, int],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """NO_COLOR: checked and unchecked GPUs differ in their glyph ([x] / [ ]), not only in colour."""
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app(tmp_path, "passthrough")

    async def run_before(pilot: Pilot[Any]) -> None:
        await show(pilot, "passthrough")
        page = app.screen
        assert isinstance(page, StepPage)
        index = next(i for i in page.indices if app.session.runs[i].spec.kind == "lxc.gpu_passthrough")
        page.query_one(f"#s{index}--gpus", Input).value = "0-2,5"
        await pilot.pause()
        page.flush_forms()
        await pilot.pause()
        page.query_one("#gpu-list").scroll_visible(animate=False)
        await pilot.pause()
        text = screen_text(app)
        checked = re.findall(r"\[x\] (\d) ", text)
        unchecked = re.findall(r"\[ \] (\d) ", text)
        assert checked and unchecked, text
        assert set(checked) <= {"0", "1", "2", "5"} and set(unchecked) <= {"3", "4", "6", "7"}, text

    assert snap_compare(app, terminal_size=size, run_before=run_before)
