"""Loading hostile playbooks costs no more than loading the shipped one (issue #19).

    uv run python bench/playbook_load.py [--reps 5]

Times `playbook.loads` on the shipped playbook (the baseline, measured in this run) and on the red-team
inputs of tests/test_playbook_bounds.py, each the best of --reps runs, and prints each as a ratio of
the baseline. Before the bounds, a billion-laughs file ran `plan` past 90 s and a 50 MB file 96 s.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provisioner import playbook  # noqa: E402
from provisioner.playbook import PlaybookError  # noqa: E402
from tests.test_playbook_bounds import RED_TEAM  # noqa: E402


def best_of(text: str | bytes, reps: int) -> tuple[float, str]:
    best, outcome = float("inf"), ""
    for _ in range(reps):
        start = time.perf_counter()
        try:
            playbook.loads(text, "pb.yaml")
            outcome = "loaded"
        except PlaybookError as exc:
            outcome = exc.problems[0].split(": ", 1)[1][:60]
        best = min(best, time.perf_counter() - start)
    return best, outcome


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    baseline, _ = best_of((ROOT / "playbooks" / "blackwell-8gpu-lxc.yaml").read_text(), args.reps * 4)
    print(f"{'input':45} {'ms':>8} {'x shipped':>10}  outcome")
    print(f"{'shipped playbook (baseline)':45} {baseline * 1e3:8.2f} {1.0:10.2f}  loaded")
    for name, text, _, _ in RED_TEAM:
        seconds, outcome = best_of(text, args.reps)
        print(f"{name:45} {seconds * 1e3:8.2f} {seconds / baseline:10.2f}  {outcome}")
    print(f"max RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB "
          "(includes building the 50 MB input)")


if __name__ == "__main__":
    main()
