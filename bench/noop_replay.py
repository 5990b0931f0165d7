"""Benchmark: a no-op replay of the shipped playbook on the lab against the floor of its own commands.

    uv run python bench/noop_replay.py [--reps 3] [--work DIR] [--keep]

Starts a lab (`provisioner.lab.lab.Lab(root).up()`), provisions it once with the shipped playbook
(the demo's copy: the burn-in sized as the lab runs it, see `provisioner.cli.demo.demo_playbook`),
then replays the same playbook `--reps` times as a user does (`provisioner replay --lab --quiet`,
a subprocess with its own imports) — every replay must report 0 changes. For each replay it
prints the wall time and the floor measured in the same run: the summed ``duration_s`` of the
``command.ended`` events of that replay's run log, i.e. the remote commands the replay itself ran.
A no-op replay runs only probes, which run with ``quiet=True`` and log no command event, so the
replay subprocess is ``bench/fleet.py``'s `replay_with_quiet_timings` (the same CLI with
`Transport.run` wrapped to log quiet commands too). Then the ratio wall / floor, and the load average beside each replay. Independent probes run
concurrently (`FactCache.gather`), so the floor — a sum of the commands' own durations — can exceed
the time they took together. Goal: ratio <= 1.5; bar: wall <= 3 s on the lab. Needs user namespaces.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provisioner.cli.demo import PLAYBOOK, demo_playbook  # noqa: E402
from provisioner.lab.lab import Lab  # noqa: E402


def _loadavg() -> str:
    """The 1-minute load average now (the benchmark's figures depend on it: say it with them)."""
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def _newest_log(state: Path, before: set[Path]) -> Path:
    logs = set((state / "runs").glob("*.jsonl")) - before
    if len(logs) != 1:
        raise SystemExit(f"expected one new run log, found {len(logs)}")
    return logs.pop()


def _replay(book: Path, env: dict[str, str], state: Path) -> tuple[float, float, dict[str, int], int]:
    before = set((state / "runs").glob("*.jsonl"))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--as-provisioner", "replay", str(book),
                           "--lab", "--quiet", "--json"],
                          env=env, capture_output=True, text=True, check=False, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"replay exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    log = _newest_log(state, before)
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    floor = sum(e["duration_s"] for e in events if e.get("kind") == "command.ended")
    n_cmds = sum(1 for e in events if e.get("kind") == "command.ended")
    recap = json.loads(proc.stdout.strip().splitlines()[-1])
    return wall, floor, recap, n_cmds


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--as-provisioner"]:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from fleet import replay_with_quiet_timings

        replay_with_quiet_timings(argv[1:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="keep PYTHONDONTWRITEBYTECODE from the environment (every replay compiles its modules again)")
    args = ap.parse_args(argv)
    work = (args.work or Path(tempfile.mkdtemp(prefix="bench-noop-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    state = work / "state"
    env = dict(os.environ, PROVISIONER_LAB_ROOT=str(work / "lab"), PROVISIONER_STATE_DIR=str(state))
    os.environ.update(PROVISIONER_LAB_ROOT=env["PROVISIONER_LAB_ROOT"], PROVISIONER_STATE_DIR=str(state))
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and not args.no_bytecode_cache:
        # A default Python writes __pycache__ on the first import and reads it after. An environment with
        # PYTHONDONTWRITEBYTECODE=1 (some CI images) makes every process compile its ~370 modules again
        # (~0.9 s per replay at load 2): the replays here run as a default Python does; --no-bytecode-cache
        # measures the other way. The provisioning replay writes the caches.
        env.pop("PYTHONDONTWRITEBYTECODE")
        print("PYTHONDONTWRITEBYTECODE is set here: the replays run without it, as a default Python does "
              "(--no-bytecode-cache keeps it)")
    book = demo_playbook(PLAYBOOK, work / PLAYBOOK.name)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the lab on SIGTERM too
    print(f"load average {_loadavg()} at the start, {os.cpu_count()} CPUs")
    lab = Lab(work / "lab")
    lab.up()
    try:
        (state / "runs").mkdir(parents=True, exist_ok=True)
        wall0, _, recap0, _ = _replay(book, env, state)
        print(f"provisioning replay: {wall0:.1f} s  recap {recap0}")
        rows = []
        for i in range(args.reps):
            wall, floor, recap, n = _replay(book, env, state)
            changed = recap.get("changed", recap)
            rows.append((wall, floor))
            print(f"no-op replay {i + 1}: wall {wall:.2f} s, floor {floor:.2f} s over {n} commands, "
                  f"ratio {wall / floor if floor else float('inf'):.2f}x, load {_loadavg()}  (changed: {changed})")
        walls = [w for w, _ in rows]
        floors = [f for _, f in rows]
        med_w, med_f = statistics.median(walls), statistics.median(floors)
        ratio = med_w / med_f if med_f else float("inf")
        print(f"median: wall {med_w:.2f} s, floor {med_f:.2f} s, ratio {ratio:.2f}x "
              f"(goal <= 1.5x: {'met' if ratio <= 1.5 else 'not met'}; bar wall <= 3 s: "
              f"{'met' if med_w <= 3 else 'not met'})")
    finally:
        lab.down()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
