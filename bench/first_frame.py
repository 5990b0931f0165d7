"""Benchmark: time from launch to the wizard's first frame, against a minimal Textual app.

Both are started the same way, in the same run: `uv run --frozen …` inside a fresh tmux session
(100×30), and `tmux capture-pane` is polled until the first page shows (the wizard: the
breadcrumb "1/9 Connect"; the baseline: its one line of text). Runs alternate between the two so
that load on the machine hits both alike. Prints each run, the medians and the ratio
wizard/baseline (goal ≤ 1.5).

    uv run python bench/first_frame.py [--runs 5] [--json]

Needs tmux and uv. Nothing connects anywhere: `provisioner tui` shows its first page before any
step runs.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MINIMAL_APP = '''
from textual.app import App, ComposeResult
from textual.widgets import Footer, Static


class Minimal(App[None]):
    def compose(self) -> ComposeResult:
        yield Static("MINIMAL-APP-READY")
        yield Footer()


Minimal().run()
'''


def first_frame(command: str, ready: str, *, width: int = 100, height: int = 30, limit: float = 60.0) -> float:
    """Seconds from starting `command` in a new tmux session until the pane shows `ready`."""
    name = f"ff-{time.monotonic_ns()}"
    server = ["tmux", "-L", name]
    started = time.perf_counter()
    subprocess.run([*server, "new-session", "-d", "-s", name, "-x", str(width), "-y", str(height), command],
                   check=True, cwd=ROOT)
    try:
        while True:
            pane = subprocess.run([*server, "capture-pane", "-p", "-t", name], capture_output=True, text=True,
                                  check=False).stdout
            if ready in pane:
                return time.perf_counter() - started
            if time.perf_counter() - started > limit:
                raise RuntimeError(f"no first frame within {limit}s for {command!r}; screen:\n{pane}")
            time.sleep(0.01)
    finally:
        subprocess.run([*server, "kill-server"], check=False, capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="keep PYTHONDONTWRITEBYTECODE from the environment (every start compiles from source)")
    args = parser.parse_args()
    if shutil.which("tmux") is None or shutil.which("uv") is None:
        print("first_frame: needs tmux and uv on PATH", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ff-") as tmp:
        minimal = Path(tmp) / "minimal_app.py"
        minimal.write_text(MINIMAL_APP)
        state = Path(tmp) / "state"
        # As on a default Python install, bytecode is cached (the warm-up runs fill the cache); with
        # PYTHONDONTWRITEBYTECODE every start compiles every module from source, which measures
        # source size rather than start-up work.
        unset = "" if args.no_bytecode_cache else "-u PYTHONDONTWRITEBYTECODE "
        env = f"env {unset}PROVISIONER_STATE_DIR={shlex.quote(str(state))} LANG=C.UTF-8 LC_ALL=C.UTF-8 "
        wizard_cmd = env + "uv run --frozen provisioner tui"
        baseline_cmd = env + f"uv run --frozen python {shlex.quote(str(minimal))}"
        first_frame(baseline_cmd, "MINIMAL-APP-READY")  # warm-up: uv's environment check, file caches
        first_frame(wizard_cmd, "1/9 Connect")
        wizard: list[float] = []
        baseline: list[float] = []
        for run in range(args.runs):
            baseline.append(first_frame(baseline_cmd, "MINIMAL-APP-READY"))
            wizard.append(first_frame(wizard_cmd, "1/9 Connect"))
            if not args.json:
                print(f"run {run + 1}: minimal Textual app {baseline[-1]:.2f} s   provisioner tui {wizard[-1]:.2f} s")
    result = {"runs": args.runs, "bytecode_cache": not args.no_bytecode_cache,
              "baseline_median_s": statistics.median(baseline),
              "wizard_median_s": statistics.median(wizard), "baseline_s": baseline, "wizard_s": wizard}
    result["ratio"] = result["wizard_median_s"] / result["baseline_median_s"]
    if args.json:
        print(json.dumps(result))
    else:
        print(f"bytecode cache: {'off' if args.no_bytecode_cache else 'on'}")
        print(f"median: minimal Textual app {result['baseline_median_s']:.2f} s, provisioner tui "
              f"{result['wizard_median_s']:.2f} s, ratio {result['ratio']:.2f} (goal ≤ 1.5)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
