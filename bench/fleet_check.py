"""Benchmark: `provisioner plan --check` on 1 host vs 16 hosts (`--inventory --parallel N`).

    uv run python bench/fleet_check.py [--hosts 16] [--reps 3] [--json out.json] [--work DIR] [--keep]

What an operator's daily drift check of a fleet costs the controller. Starts --hosts lab nodes
(bench/fleet.py's `Labs`: one daemon per node), then alternates, --reps times each, a 1-host and an
N-host `provisioner plan LIGHT --inventory hosts.yaml --check --json --quiet --parallel N` as a
user runs it (a subprocess, its own state dir). The light playbook is the shipped one up to GPU
detection (no venv, no burn-in) on fresh nodes: the check connects over SSH, reads the node's
inventory (a few commands), asks the Proxmox API about the container, and plans the rest as
"after earlier changes": the nodes' own work is small, so what is measured is the controller.

Printed, all from the same run:
- controller CPU seconds (the `provisioner` process and its children: user + system from
  `os.times()`), total and per host, for 1 and N hosts;
- the lab daemons' CPU seconds during the run (the nodes' side, for scale);
- wall time (median over reps) and the ratio N-host / 1-host: 1.0 would be perfectly parallel,
  N would be sequential; and the nodes' CPU seconds divided by the machine's CPUs, the floor of the
  N-host wall time when the lab nodes share the controller's CPUs (on a real fleet they do not).
Needs root (the lab's mount namespaces).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet import Labs, cpu_s, machine, write_light_playbook  # bench/fleet.py

from provisioner.lab.lab import inventory_entry

REPO = Path(__file__).resolve().parents[1]


def check_run(work: Path, playbook: Path, labs: Labs, n: int, rep: int) -> dict[str, Any]:
    tag = f"{n}-{rep}"
    inventory = work / f"hosts-{n}.yaml"
    inventory.write_text(yaml.safe_dump({"hosts": [inventory_entry(labs.roots[i], f"node{i:02d}")
                                                   for i in range(n)]}))
    state = work / f"state-{tag}"
    shutil.rmtree(state, ignore_errors=True)
    env = dict(os.environ, PROVISIONER_STATE_DIR=str(state), PROVISIONER_CACHE_DIR=str(work / "cache"),
               NO_COLOR="1", COLUMNS="200")
    env.pop("PROVISIONER_LAB_ROOT", None)
    daemons = [labs.pid(i) for i in range(n)]
    cpu0 = sum(cpu_s(p) for p in daemons)
    before = os.times()
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "provisioner", "plan", str(playbook), "--inventory", str(inventory),
                           "--parallel", str(n), "--check", "--json", "--quiet"],
                          capture_output=True, text=True, env=env, cwd=REPO, check=False, timeout=1800)
    wall = time.monotonic() - t0
    after = os.times()
    recap = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}
    hosts = recap.get("hosts", {})
    if proc.returncode != 10 or len(hosts) != n or any(c.get("failed") for c in hosts.values()):
        raise RuntimeError(f"plan --check on {n} host(s) exited {proc.returncode} (expected 10, changes pending):\n"
                           f"{proc.stdout[-1000:]}\n{proc.stderr[-3000:]}")
    controller = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"hosts": n, "rep": rep, "wall_s": wall, "controller_cpu_s": controller,
            "controller_cpu_s_per_host": controller / n, "nodes_cpu_s": sum(cpu_s(p) for p in daemons) - cpu0}


def summarize(runs: list[dict[str, Any]], n: int) -> dict[str, Any]:
    def med(hosts: int, key: str) -> float:
        return statistics.median(r[key] for r in runs if r["hosts"] == hosts)

    out: dict[str, Any] = {}
    for hosts in (1, n):
        out[str(hosts)] = {k: round(med(hosts, k), 3) for k in
                           ("wall_s", "controller_cpu_s", "controller_cpu_s_per_host", "nodes_cpu_s")}
    out["wall_ratio"] = round(med(n, "wall_s") / med(1, "wall_s"), 2)
    out["cpu_per_host_ratio"] = round(med(n, "controller_cpu_s_per_host") / med(1, "controller_cpu_s_per_host"), 2)
    # what each host beyond the first adds (the 1-host run is mostly the process start: imports)
    out["marginal_cpu_s_per_host"] = round((med(n, "controller_cpu_s") - med(1, "controller_cpu_s")) / (n - 1), 3)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--work", default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("bench/fleet_check.py needs root (the lab's node sandboxes)", file=sys.stderr)
        return 2
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="bench-fleet-check-"))
    work.mkdir(parents=True, exist_ok=True)
    info = machine()
    labs = Labs(work, a.hosts)
    try:
        start = labs.start()
        playbook = write_light_playbook(work / "light.yaml")
        runs = []
        for rep in range(a.reps):
            for n in (1, a.hosts):  # interleaved: a load change on the machine hits both sizes
                r = check_run(work, playbook, labs, n, rep)
                runs.append(r)
                print(f"rep {rep} hosts {n:2d}: wall {r['wall_s']:.2f}s controller CPU {r['controller_cpu_s']:.2f}s "
                      f"({r['controller_cpu_s_per_host']:.3f}s/host), nodes CPU {r['nodes_cpu_s']:.2f}s", flush=True)
        summary = summarize(runs, a.hosts)
    finally:
        labs.stop()
        if not a.keep and not a.work:
            shutil.rmtree(work, ignore_errors=True)
    one, many = summary["1"], summary[str(a.hosts)]
    print(f"\nmachine: {info['cpus_usable']} CPUs, load {' '.join(info['loadavg'])}, {info['mem_total_gib']} GiB; "
          f"{a.hosts} labs started in {start['first_cold_s']}s + {start['rest_parallel_s']}s, "
          f"{start['daemon_rss_mib_mean']} MiB RSS each")
    print("| hosts | wall s (median) | controller CPU s | CPU s per host | nodes' CPU s |")
    print("|---:|---:|---:|---:|---:|")
    for hosts, row in ((1, one), (a.hosts, many)):
        print(f"| {hosts} | {row['wall_s']:.2f} | {row['controller_cpu_s']:.2f} | "
              f"{row['controller_cpu_s_per_host']:.3f} | {row['nodes_cpu_s']:.2f} |")
    print(f"wall-time ratio {a.hosts} hosts / 1 host: {summary['wall_ratio']}x "
          f"(1.0 = perfectly parallel, {a.hosts} = sequential); "
          f"controller CPU per host at {a.hosts} vs 1: {summary['cpu_per_host_ratio']}x; each host beyond the "
          f"first adds {summary['marginal_cpu_s_per_host']:.3f} controller CPU-s; the nodes' own CPU-s at "
          f"{a.hosts} hosts / {info['cpus_usable']} CPUs = {many['nodes_cpu_s'] / info['cpus_usable']:.1f}s "
          f"is the wall-time floor on this machine")
    if a.json:
        Path(a.json).write_text(json.dumps({"machine": info, "start": start, "runs": runs, "summary": summary},
                                           indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
