"""What the demo and a `--quiet` run print (issue 22 item 5): one line per step plus what failed, the recap,
and where the run log is kept; the run log outlives the demo's lab; `-v` streams every command's output."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from provisioner.events import CommandStarted, Message, OutputLine, PlanReady, RunFinished, StepFinished, StepStarted
from provisioner.render.console import ConsoleRenderer
from tests.support.require import require

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


@pytest.mark.timeout(1200)  # the whole demo (two replays, a real torch, gloo): 150 s alone, more under load
def test_demo_prints_under_60_lines_and_its_run_logs_outlive_it(tmp_path: Path) -> None:
    require(os.geteuid() == 0, "the lab needs root (mount namespaces, device nodes)")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), PROVISIONER_STATE_DIR=str(tmp_path / "state"), COLUMNS="200")
    env.pop("PROVISIONER_LAB_ROOT", None)
    r = subprocess.run([sys.executable, "-m", "provisioner", "demo"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=850, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    lines = out.splitlines()
    assert len(lines) < 60, f"{len(lines)} lines:\n{out}"
    assert len([ln for ln in lines if re.match(r"^\s*\d+\. .+: (ok|changed) ", ln)]) == 22, out  # 11 steps x 2
    logs = re.findall(r"run log: (\S+\.jsonl)", out)
    assert len(logs) == 2 and all(Path(p).is_file() for p in logs), out
    assert all(Path(p).is_relative_to(tmp_path / "state") for p in logs)
    assert list(tmp.iterdir()) == [], "the demo left files in its temporary directory"
