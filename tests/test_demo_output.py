"""What a `--quiet` run prints (issue 22 item 5): one line per step plus what failed, the recap, and where the
run log is kept; `-v` streams every command's output. The demo's own output is checked in test_demo_bare."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from provisioner.events import CommandStarted, Message, OutputLine, PlanReady, RunFinished, StepFinished, StepStarted
from provisioner.render.console import ConsoleRenderer

ROOT = Path(__file__).resolve().parents[1]


def _render(verbose: bool) -> str:
    out = io.StringIO()
    r = ConsoleRenderer(Console(file=out, width=200, highlight=False), verbose=verbose)
    r(StepStarted(host="h", index=0, step="venv.build", title="Build the venv"))
    r(PlanReady(host="h", index=0, step="venv.build", changes=["create /opt/v"]))
    r(CommandStarted(host="h", target="ct200", command="uv pip install torch", cmd_id=1))
    r(OutputLine(host="h", cmd_id=1, line="Installed 3 packages"))
    r(Message(host="h", level="info", text="lock recorded"))
    r(StepFinished(host="h", index=0, step="venv.build", status="changed", message="create /opt/v", duration_s=1.5))
    r(StepStarted(host="h", index=1, step="burnin.run", title="Burn-in"))
    r(Message(host="h", level="info", text="burn-in verdict: fail"))
    r(StepFinished(host="h", index=1, step="burnin.run", status="failed", message="all_reduce wrong\nfix: look",
                   diagnosis=[{"category": "nccl", "root_cause": "bad link", "fix": "reseat"}]))
    r(RunFinished(run_id="r", recap={"h": {"ok": 0, "changed": 1, "failed": 1, "skipped": 0}}, status="failed"))
    return out.getvalue()


def test_quiet_prints_one_line_per_step_what_failed_and_the_recap() -> None:
    text = _render(verbose=False)
    assert " 1. Build the venv: changed (1.5s)  create /opt/v" in text
    assert " 2. Burn-in: failed  all_reduce wrong" in text and "fix: look" in text and "reseat" in text
    assert "burn-in verdict: fail" in text and "Recap" in text
    for streamed in ("$ uv pip install", "Installed 3 packages", "will change:", "lock recorded", "▶"):
        assert streamed not in text, streamed


def test_verbose_streams_commands_and_their_output() -> None:
    text = _render(verbose=True)
    assert "$ uv pip install torch" in text and "Installed 3 packages" in text and "will change: create /opt/v" in text


# The demo's own output (under 60 lines, one per step, its run logs outliving its lab) is checked on the
# suite's one bare-machine demo run: tests/test_demo_bare.py.
