"""Burn-in rank start: ranks forked from a torch-preloaded forkserver vs one `python -m` per rank.

    uv run python bench/burnin_launch.py [--world 8] [--reps 3] [--json out.json]

Each trial is a fresh Python process (as `python -m provisioner.burnin` is in the container) that
runs one gloo world of the real worker (preflight + collectives 1KiB:4KiB, no soak) with
`run_world(start=...)`, so the forkserver's own torch import is paid in every forkserver trial. The
two modes alternate; the script prints each trial's wall time, the medians and the ratio
exec/forkserver measured in this run, and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRIAL = """
import sys, tempfile
from pathlib import Path
from provisioner.burnin.config import make_config
from provisioner.burnin.launcher import run_world
cfg = make_config(backend="gloo", world_size=int(sys.argv[1]), sizes="1KiB:4KiB", phases="preflight,collectives")
doc = run_world(cfg, Path(tempfile.mkdtemp(prefix="bench-burnin-")), start=sys.argv[2])
sys.exit(0 if doc["status"] == "pass" else 1)
"""


def trial(world: int, start: str) -> float:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", TRIAL, str(world), start], cwd=ROOT, check=True)
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    load_before = os.getloadavg()
    times: dict[str, list[float]] = {"exec": [], "forkserver": []}
    for rep in range(a.reps):
        for start in ("exec", "forkserver") if rep % 2 == 0 else ("forkserver", "exec"):
            t = trial(a.world, start)
            times[start].append(t)
            print(f"rep {rep} {start:10s} {t:7.2f} s", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {"world": a.world, "reps": a.reps, "times_s": times, "median_s": med,
           "ratio_exec_over_forkserver": med["exec"] / med["forkserver"],
           "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "cpus": os.cpu_count()}
    print(f"median exec {med['exec']:.2f} s, forkserver {med['forkserver']:.2f} s: "
          f"forkserver is {out['ratio_exec_over_forkserver']:.2f}x faster (world {a.world}, "
          f"load {load_before[0]:.1f} -> {out['loadavg_after'][0]:.1f}, {out['cpus']} CPUs)")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
