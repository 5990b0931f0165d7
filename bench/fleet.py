"""Benchmark: one playbook replayed on a fleet of 1, 8 and 32 lab nodes (`--inventory --parallel N`).

    uv run python bench/fleet.py [--nodes 1,8,32] [--reps 1] [--json out.json] [--work DIR] [--keep]

Starts max(--nodes) labs (`provisioner.lab.lab.Lab(root).up()`, one daemon per node: PVE API,
node SSH, driver mirror, wheel index) and measures what that costs: the first lab alone (it builds
the lab's wheel index in a cold cache), then the others all at once; resident memory per daemon.
Then, for each N, replays a light playbook (the shipped one up to GPU detection: node.connect,
node.inventory, lxc.create, lxc.gpu_passthrough, lxc.start, driver.userspace, gpu.detect; no venv,
no burn-in) on N fresh nodes with `provisioner replay --inventory hosts-N.yaml --parallel N`, as a
user runs it (a subprocess; own state dir; cold download cache), and prints:

- wall time per N, the ratio against N=1, and the speed-up against N sequential single-node runs;
- CPU seconds used (the replay process + the N lab daemons and their sandboxes) and the machine
  utilization, since on a small machine the lab nodes compete with the controller for the CPUs;
- per-step orchestration overhead from the run log (JSONL): a step's `step.finished.duration_s`
  minus the sum of the `command.ended.duration_s` of the commands run inside it (commands are
  attributed to the step of the same host that is open at the time), mean / median in ms per step
  kind. Two figures: against the commands the shipped run log records ("logged"), and against all
  commands ("all"): probes run with ``quiet=True`` emit no command events, so the replay runs in
  this script's process (``--as-provisioner``) with `Transport.run` wrapped to log their run time
  too (as ``command.ended`` with a ``[quiet] `` prefix). What is not a remote command remains
  overhead: Proxmox API calls and task polling (1 s period), SFTP transfers, HTTP downloads, local
  hashing, event handling, waiting for the event loop or a worker thread.

Between N values the used labs are restarted (a restart wipes the lab: no container yet), so every
N provisions from the same starting state. Needs root (the lab's mount namespaces).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from provisioner.lab.lab import inventory_entry

REPO = Path(__file__).resolve().parents[1]
SHIPPED_PLAYBOOK = REPO / "playbooks" / "blackwell-8gpu-lxc.yaml"
LIGHT_KINDS = ("node.connect", "node.inventory", "lxc.create", "lxc.gpu_passthrough", "lxc.start",
               "driver.userspace", "gpu.detect")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def write_light_playbook(dest: Path) -> Path:
    doc = yaml.safe_load(SHIPPED_PLAYBOOK.read_text())
    doc["steps"] = [s for s in doc["steps"] if s["kind"] in LIGHT_KINDS]
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


# -- machine ---------------------------------------------------------------------------------------

def machine() -> dict[str, Any]:
    mem = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return {"cpus": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)),
            "mem_total_gib": round(int(mem["MemTotal"].split()[0]) / 2**20, 1),
            "mem_available_gib": round(int(mem["MemAvailable"].split()[0]) / 2**20, 1),
            "loadavg": Path("/proc/loadavg").read_text().split()[:3], "python": sys.version.split()[0]}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    """utime + stime + reaped children's (the daemon's sandboxes and commands), in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / CLK_TCK


# -- labs ------------------------------------------------------------------------------------------

class Labs:
    def __init__(self, work: Path, count: int) -> None:
        from provisioner.lab.lab import Lab

        self.work = work
        self.roots = [work / f"lab-{i:02d}" for i in range(count)]
        self.labs = [Lab(root) for root in self.roots]
        self.lab_cache = work / "lab-cache"  # the labs' wheel index (built once, shared)

    def _env(self) -> contextlib.AbstractContextManager[Any]:
        from unittest import mock

        return mock.patch.dict(os.environ, {"PROVISIONER_CACHE_DIR": str(self.lab_cache)})

    def start(self) -> dict[str, Any]:
        """First lab alone (cold wheel index), then the rest in parallel; timings and memory."""
        with self._env():
            t0 = time.monotonic()
            self.labs[0].up()
            first_s = time.monotonic() - t0
            t1 = time.monotonic()
            with ThreadPoolExecutor(max_workers=max(1, len(self.labs) - 1)) as pool:
                list(pool.map(lambda lab: lab.up(), self.labs[1:]))
            rest_s = time.monotonic() - t1
        rss = [rss_mib(self.pid(i)) for i in range(len(self.labs))]
        return {"labs": len(self.labs), "first_cold_s": round(first_s, 2),
                "rest_parallel": len(self.labs) - 1, "rest_parallel_s": round(rest_s, 2),
                "daemon_rss_mib_mean": round(statistics.mean(rss), 1), "daemon_rss_mib_max": round(max(rss), 1),
                "daemons_rss_mib_total": round(sum(rss), 1)}

    def pid(self, i: int) -> int:
        pid = self.labs[i].running_pid()
        if pid is None:
            raise RuntimeError(f"lab {self.roots[i]} is not running")
        return pid

    def restart(self, indexes: list[int]) -> float:
        """Wipe and restart these labs (fresh nodes: no container); returns seconds."""
        t0 = time.monotonic()

        def one(i: int) -> None:
            self.labs[i].down()
            self.labs[i].up()

        with self._env(), ThreadPoolExecutor(max_workers=max(1, len(indexes))) as pool:
            list(pool.map(one, indexes))
        return time.monotonic() - t0

    def stop(self) -> None:
        for lab in self.labs:
            with contextlib.suppress(Exception):
                lab.down()


# -- one fleet replay -------------------------------------------------------------------------------

QUIET_PREFIX = "[quiet] "


def replay_with_quiet_timings(args: list[str]) -> None:
    """`provisioner ARGS` in this process, with the run time of *quiet* commands in the run log too.

    Probes (facts, checks, pct push) run with ``quiet=True`` and emit no command events, so the
    shipped run log would count them as orchestration overhead. This wraps `Transport.run` to emit a
    `command.ended` (command prefixed ``[quiet] ``) for them; nothing else changes."""
    from provisioner import quoting
    from provisioner.cli import main as cli_main
    from provisioner.events import CommandEnded
    from provisioner.transport.base import Transport

    original = Transport.run

    async def run(self: Transport, argv: Any, *, quiet: bool = False, **kw: Any) -> Any:
        if not quiet or self.bus is None:
            return await original(self, argv, quiet=quiet, **kw)
        start = time.monotonic()
        status: int | None = None
        try:
            result = await original(self, argv, quiet=True, **kw)
            status = result.exit_status
            return result
        finally:
            self.bus.emit(CommandEnded(host=self.host_label, target=self.name, cmd_id=-1, exit_status=status,
                                       command=QUIET_PREFIX + quoting.join(argv), duration_s=time.monotonic() - start))

    Transport.run = run  # type: ignore[method-assign]
    cli_main(args=args, prog_name="provisioner")

def replay(work: Path, playbook: Path, labs: Labs, n: int, tag: str) -> dict[str, Any]:
    inventory = work / f"hosts-{tag}.yaml"
    inventory.write_text(yaml.safe_dump({"hosts": [inventory_entry(labs.roots[i], f"node{i:02d}")
                                                   for i in range(n)]}))
    state, cache = work / f"state-{tag}", work / f"cache-{tag}"
    for d in (state, cache):
        shutil.rmtree(d, ignore_errors=True)
    env = dict(os.environ, PROVISIONER_STATE_DIR=str(state), PROVISIONER_CACHE_DIR=str(cache), NO_COLOR="1",
               COLUMNS="200")
    env.pop("PROVISIONER_LAB_ROOT", None)
    daemons = [labs.pid(i) for i in range(n)]
    cpu0 = sum(cpu_s(p) for p in daemons)
    before = os.times()
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--as-provisioner", "replay",
                           str(playbook), "--inventory", str(inventory), "--parallel", str(n), "--json", "--quiet"],
                          capture_output=True, text=True, env=env, cwd=REPO, check=False, timeout=3600)
    wall = time.monotonic() - t0
    after = os.times()
    cpu_daemons = sum(cpu_s(p) for p in daemons) - cpu0
    cpu_replay = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    recap = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}
    m = re.search(r"run log: (\S+\.jsonl)", proc.stderr)
    events = [json.loads(line) for line in Path(m.group(1)).read_text().splitlines()] if m else []
    failed = sorted(h for h, c in recap.get("hosts", {}).items() if c.get("failed"))
    return {"n": n, "rc": proc.returncode, "wall_s": wall, "failed_hosts": failed,
            "cpu_replay_s": cpu_replay, "cpu_labs_s": cpu_daemons, "overhead": step_overheads(events),
            "stderr_tail": proc.stderr[-2000:] if proc.returncode else ""}


def step_overheads(events: list[dict[str, Any]]) -> dict[str, list[dict[str, float]]]:
    """Per step kind: for each (host, step), its duration, the summed command time, the overhead."""
    open_step: dict[str, int] = {}
    logged: dict[tuple[str, int], list[float]] = defaultdict(list)
    quiet: dict[tuple[str, int], list[float]] = defaultdict(list)
    out: dict[str, list[dict[str, float]]] = defaultdict(list)
    for e in events:
        kind, host = e["kind"], e.get("host", "")
        if kind == "step.started":
            open_step[host] = e["index"]
        elif kind == "command.ended" and host in open_step:
            key = (host, open_step[host])
            (quiet if e["command"].startswith(QUIET_PREFIX) else logged)[key].append(e["duration_s"])
        elif kind == "step.finished" and e["status"] in ("ok", "changed"):
            key = (host, e["index"])
            dur, cmd, qcmd = e["duration_s"], sum(logged[key]), sum(quiet[key])
            out[e["step"]].append({"step_s": dur, "commands": len(logged[key]), "quiet_commands": len(quiet[key]),
                                   "overhead_s": dur - cmd, "overhead_all_s": dur - cmd - qcmd})
            open_step.pop(host, None)
    return dict(out)


# -- report -----------------------------------------------------------------------------------------

def summarize(runs: dict[int, list[dict[str, Any]]], ncpu: int) -> dict[str, Any]:
    rows: dict[int, dict[str, Any]] = {}
    for n, reps in runs.items():
        walls = [r["wall_s"] for r in reps]
        cpu = statistics.median(r["cpu_replay_s"] + r["cpu_labs_s"] for r in reps)
        wall = statistics.median(walls)
        rows[n] = {"wall_s": wall, "wall_min_s": min(walls), "cpu_s": cpu,
                   "cpu_replay_s": statistics.median(r["cpu_replay_s"] for r in reps),
                   "utilization": cpu / (wall * ncpu), "failed": sorted({h for r in reps for h in r["failed_hosts"]})}
    base = rows[min(rows)]["wall_s"] if rows else 1.0
    for n, row in rows.items():
        row["ratio_vs_1"] = row["wall_s"] / base
        row["speedup_vs_sequential"] = n * base / row["wall_s"]
    kinds: dict[str, dict[int, dict[str, float]]] = defaultdict(dict)
    for n, reps in runs.items():
        merged: dict[str, list[dict[str, float]]] = defaultdict(list)
        for r in reps:
            for kind, items in r["overhead"].items():
                merged[kind].extend(items)
        for kind, items in merged.items():
            ov = [i["overhead_s"] * 1000 for i in items]
            ova = [i["overhead_all_s"] * 1000 for i in items]
            kinds[kind][n] = {"mean_ms": statistics.mean(ov), "median_ms": statistics.median(ov),
                              "all_mean_ms": statistics.mean(ova), "all_median_ms": statistics.median(ova),
                              "step_median_ms": statistics.median(i["step_s"] * 1000 for i in items),
                              "commands_per_step": statistics.mean(i["commands"] for i in items),
                              "quiet_per_step": statistics.mean(i["quiet_commands"] for i in items),
                              "samples": len(items)}
    return {"fleet": rows, "overhead_ms": dict(kinds)}


def print_report(info: dict[str, Any], start: dict[str, Any], summary: dict[str, Any]) -> None:
    print(f"\nmachine: {info['cpus']} CPUs ({info['cpus_usable']} usable), {info['mem_total_gib']} GiB RAM, "
          f"load {' '.join(info['loadavg'])}, Python {info['python']}")
    print(f"labs: {start['labs']} daemons; first (cold wheel index) {start['first_cold_s']:.1f} s, then "
          f"{start['rest_parallel']} in parallel {start['rest_parallel_s']:.1f} s; RSS per daemon "
          f"{start['daemon_rss_mib_mean']:.0f} MiB (max {start['daemon_rss_mib_max']:.0f}), total "
          f"{start['daemons_rss_mib_total'] / 1024:.2f} GiB")
    print("\n| nodes | --parallel | wall s | vs 1 node | speed-up vs sequential | CPU s (replay) | CPU use | failed |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for n, r in sorted(summary["fleet"].items()):
        print(f"| {n} | {n} | {r['wall_s']:.1f} | {r['ratio_vs_1']:.2f}x | {r['speedup_vs_sequential']:.1f}x | "
              f"{r['cpu_s']:.0f} ({r['cpu_replay_s']:.0f}) | {r['utilization'] * 100:.0f}% | "
              f"{', '.join(r['failed']) or '-'} |")
    ns = sorted(summary["fleet"])
    print("\nper-step orchestration overhead, ms, mean / median over the hosts: step duration minus its logged")
    print("commands' run time (the run log as shipped) and minus all commands' (quiet probes too)")
    print("| step | cmds + quiet/step | " + " | ".join(
        f"N={n}: step median | overhead logged | overhead all" for n in ns) + " |")
    print("|---|---:|" + "---:|---:|---:|" * len(ns))
    for kind in LIGHT_KINDS:
        per = summary["overhead_ms"].get(kind, {})
        if not per:
            continue
        first = per[min(per)]
        cells = " | ".join(f"{per[n]['step_median_ms']:.0f} | {per[n]['mean_ms']:.0f} / {per[n]['median_ms']:.0f} | "
                           f"{per[n]['all_mean_ms']:.0f} / {per[n]['all_median_ms']:.0f}"
                           if n in per else "- | - | -" for n in ns)
        print(f"| {kind} | {first['commands_per_step']:.0f} + {first['quiet_per_step']:.0f} | {cells} |")


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--as-provisioner"]:
        replay_with_quiet_timings(args_in[1:])
        return 0
    ap = argparse.ArgumentParser(prog="bench/fleet.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="1,8,32", help="comma list of fleet sizes (default 1,8,32)")
    ap.add_argument("--reps", type=int, default=1, help="replays per fleet size (fresh nodes each time)")
    ap.add_argument("--json", dest="json_out", default=None, help="write every figure to this file")
    ap.add_argument("--work", default=None, help="working directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the working directory (and its run logs)")
    args = ap.parse_args(argv)
    sizes = sorted({int(x) for x in args.nodes.split(",") if x.strip()})
    if os.geteuid() != 0:
        print("bench/fleet.py: the lab needs root (mount namespaces)", file=sys.stderr)
        return 3
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    work.mkdir(parents=True, exist_ok=True)
    info = machine()
    playbook = write_light_playbook(work / "light.yaml")
    labs = Labs(work, max(sizes))
    runs: dict[int, list[dict[str, Any]]] = defaultdict(list)
    try:
        print(f"starting {max(sizes)} lab nodes in {work} ...", flush=True)
        start = labs.start()
        print(json.dumps(start), flush=True)
        dirty: set[int] = set()
        for n in sizes:
            for rep in range(args.reps):
                reset = sorted(i for i in dirty if i < n)
                if reset:
                    print(f"  restarting {len(reset)} used labs: {labs.restart(reset):.1f} s", flush=True)
                    dirty -= set(reset)
                r = replay(work, playbook, labs, n, f"{n}-{rep}")
                dirty |= set(range(n))
                runs[n].append(r)
                print(f"  N={n} rep {rep + 1}: {r['wall_s']:.1f} s, exit {r['rc']}, failed hosts: "
                      f"{r['failed_hosts'] or 'none'}", flush=True)
                if r["rc"] != 0:
                    print(r["stderr_tail"], file=sys.stderr)
    finally:
        labs.stop()
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)
    summary = summarize(runs, info["cpus_usable"])
    print_report(info, start, summary)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"machine": info, "labs": start, **summary,
                                                   "runs": {n: [{k: v for k, v in r.items() if k != "overhead"}
                                                                for r in reps] for n, reps in runs.items()}},
                                                  indent=2, default=str))
    return 0 if all(not r["failed_hosts"] and r["rc"] == 0 for reps in runs.values() for r in reps) else 1


if __name__ == "__main__":
    raise SystemExit(main())
