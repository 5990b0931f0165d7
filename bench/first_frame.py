"""Benchmark: time from launch to the wizard's first frame, against a minimal Textual app.

Both are started the same way, in the same run: `uv run --frozen …` inside a fresh tmux session
(100×30), and `tmux capture-pane` is polled until the first page shows (the wizard: the
breadcrumb "1/9 Connect"; the baseline: its one line of text). The wizard is also timed until its
page is ready (the Connect form drawn: "ssh port"), i.e. after the playbook and the engine have
loaded behind the first frame. Runs alternate between the two so that load on the machine hits
both alike. Prints each run, the medians and the ratios against the baseline (goal ≤ 1.5 for the
first frame).

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


def first_frame(command: str, ready: str, *, then: str | None = None, width: int = 100, height: int = 30,
                limit: float = 60.0) -> tuple[float, float]:
    """Seconds from starting `command` in a new tmux session until the pane shows `ready`, and
    until it also shows `then` (the same figure when `then` is None)."""
    name = f"ff-{time.monotonic_ns()}"
    server = ["tmux", "-L", name]
    started = time.perf_counter()
    subprocess.run([*server, "new-session", "-d", "-s", name, "-x", str(width), "-y", str(height), command],
                   check=True, cwd=ROOT)
    first: float | None = None
    try:
        while True:
            pane = subprocess.run([*server, "capture-pane", "-p", "-t", name], capture_output=True, text=True,
                                  check=False).stdout
            now = time.perf_counter() - started
            if first is None and ready in pane:
                first = now
            if first is not None and (then is None or then in pane):
                return first, now
            if now > limit:
                raise RuntimeError(f"no {ready!r}/{then!r} within {limit}s for {command!r}; screen:\n{pane}")
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
        first_frame(wizard_cmd, "1/9 Connect", then="ssh port")
        wizard: list[float] = []
        ready: list[float] = []
        baseline: list[float] = []
        for run in range(args.runs):
            baseline.append(first_frame(baseline_cmd, "MINIMAL-APP-READY")[0])
            frame, page = first_frame(wizard_cmd, "1/9 Connect", then="ssh port")
            wizard.append(frame)
            ready.append(page)
            if not args.json:
                print(f"run {run + 1}: minimal Textual app {baseline[-1]:.2f} s   provisioner tui: first frame "
                      f"{frame:.2f} s, page ready {page:.2f} s")
    result: dict[str, object] = {
        "runs": args.runs, "bytecode_cache": not args.no_bytecode_cache,
        "baseline_median_s": statistics.median(baseline), "wizard_median_s": statistics.median(wizard),
        "ready_median_s": statistics.median(ready), "baseline_s": baseline, "wizard_s": wizard, "ready_s": ready,
        "ratio": statistics.median(wizard) / statistics.median(baseline),
        "ready_ratio": statistics.median(ready) / statistics.median(baseline)}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"bytecode cache: {'off' if args.no_bytecode_cache else 'on'}")
        print(f"median: minimal Textual app {statistics.median(baseline):.2f} s; provisioner tui first frame "
              f"{statistics.median(wizard):.2f} s (ratio {result['ratio']:.2f}, goal ≤ 1.5), page ready "
              f"{statistics.median(ready):.2f} s (ratio {result['ready_ratio']:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
