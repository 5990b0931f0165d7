"""The fabric phase (multi-node burn-in): per-node all_reduce and per-pair exchanges, timed and checked.

Runs on every rank after the collectives. Ranks are grouped into nodes by torchrun's GROUP_RANK
(the agent's node rank); every node's ranks run an all_reduce in their own process group (all
nodes at once), then the pairs of `fabric_eval.schedule` exchange a buffer both ways, round by
round (the other ranks wait at the barrier). Each side times `iters` exchanges three times and
keeps the best; then one exchange on fresh data is compared bit-exactly with the partner's
pattern. The rounds whose pairs look slow are timed again, whole, up to `fabric_eval.RECHECKS`
times (`fabric_eval.suspect_rounds`), the last time each still-slow pair alone, each followed by
its reference pair alone (`fabric_eval.alone_plan`), `fabric_eval.ALONE_SAMPLES` times in turn, each keeping
its best, before the verdict.

Faults (BURNIN_FAULT, tests only): `slow:rank=N[:ms=M]` sleeps M ms (default 20) before each
exchange of that rank, `stall:rank=N[:ms=M]` the same in the first measurement only,
`crowded:rank=N[:ms=M]` the same while other pairs of its round run beside it (not alone), and
`burst:rank=N[:ms=M]` the same in the last recheck only (a load on the whole machine while the still-slow
pairs and their references are measured alone: plant it on every rank), `blip:rank=N[:ms=M]` the same in the
last recheck's first sample only (a load that passes while a pair is measured alone), and `corrupt:rank=N`
damages what that rank sends in the checked exchange.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from provisioner.burnin import patterns
from provisioner.burnin.collectives import Runtime
from provisioner.burnin.fabric_eval import (
    ALONE_SAMPLES,
    RECHECKS,
    Pair,
    alone_plan,
    merge_alone,
    merge_recheck,
    schedule,
    suspect_rounds,
)
from provisioner.burnin.faults import ENV as FAULT_ENV
from provisioner.burnin.faults import find
from provisioner.burnin.shapes import (
    FabricNode,
    FabricRankDoc,
    FabricRaw,
    FabricRawPair,
    FabricRecord,
    NodeAllReduce,
    RankDevice,
)

PHASE = "fabric"
REPS = 3
MAX_FABRIC_BYTES = 256 << 20


def local_address(master_addr: str | None, master_port: str | None) -> str | None:
    """The address this host uses towards the rendezvous host (a UDP connect sends nothing)."""
    if not master_addr:
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((master_addr, int(master_port or 29500)))
            addr: str = s.getsockname()[0]
            return addr
    except OSError:
        return None


def group_nodes(devices: list[RankDevice]) -> list[FabricNode]:
    """[{label, host, addr, ranks}] ordered by node rank; labels are host names when they tell nodes apart."""
    by_node: dict[int, list[RankDevice]] = {}
    for d in devices:
        by_node.setdefault(int(d.get("node_rank", 0)), []).append(d)
    hosts = {k: {str(d.get("host")) for d in ds} for k, ds in by_node.items()}
    distinct = all(len(h) == 1 for h in hosts.values()) and len({next(iter(h)) for h in hosts.values()}) == len(hosts)
    nodes: list[FabricNode] = []
    for k in sorted(by_node):
        ds = sorted(by_node[k], key=lambda d: int(d["rank"]))
        host = str(ds[0].get("host"))
        nodes.append({"label": host if distinct else f"node{k}", "host": host, "addr": ds[0].get("addr"),
                      "node_rank": k, "ranks": [int(d["rank"]) for d in ds]})
    return nodes


def _exchange(send: torch.Tensor, recv: torch.Tensor, peer: int) -> None:
    ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()


def _best_time(rt: Runtime, step: Callable[[], None]) -> float:
    """Seconds per `step`: the best of REPS timings of `iters` steps, after warm-up."""
    for _ in range(max(1, rt.cfg.warmup_iters)):
        step()
    rt.sync()
    best = float("inf")
    for _ in range(REPS):
        t0 = time.perf_counter()
        for _ in range(rt.cfg.iters):
            step()
        rt.sync()
        best = min(best, (time.perf_counter() - t0) / rt.cfg.iters)
    return best


def _time_all_reduce(buf: torch.Tensor, rt: Runtime, group: Any) -> float:
    return _best_time(rt, lambda: dist.all_reduce(buf, group=group))


def _time_pair(rt: Runtime, send: torch.Tensor, recv: torch.Tensor, peer: int, delay: float) -> float:
    """Seconds per exchange with `peer`, each exchange after `delay` (a planted fault's sleep)."""
    def step() -> None:
        time.sleep(delay)
        _exchange(send, recv, peer)

    return _best_time(rt, step)


def _fault_delay(rt: Runtime, kind: str) -> float:
    """Seconds a planted `slow` or `stall` fault (faults.py) adds before each exchange of this rank."""
    fault = find(rt.faults, kind, rt.rank, PHASE)
    if fault is None:
        return 0.0
    return (fault.ms if fault.ms is not None else 20.0) / 1000.0


def _best_sample(slower: dict[tuple[int, int, int], float], pair: Pair, at: list[int]) -> float:
    """A pair's best time over its samples (batches `at`) in the alone window; 0.0: nothing measured."""
    times = [t for i in at if (t := slower.get((i, *pair), 0.0)) > 0]
    return min(times) if times else 0.0


def run_fabric(rt: Runtime, *, slow_fraction: float | None = None) -> FabricRaw:
    """Measure; returns the raw document for `fabric_eval.evaluate_fabric` (identical on every rank)."""
    cfg, me, dev = rt.cfg, rt.rank, rt.device
    nodes = group_nodes(rt.devices)
    size = min(max(cfg.sizes), MAX_FABRIC_BYTES)
    count = max(1, size // 4)
    size = count * 4
    delay = _fault_delay(rt, "slow")
    first_delay = delay + _fault_delay(rt, "stall")  # a stall that passes: the first measurement only
    crowd = _fault_delay(rt, "crowded")  # contention: only while other pairs of the round run beside this one
    burst = _fault_delay(rt, "burst")  # a load on the whole machine: only in the last recheck, alone
    blip = _fault_delay(rt, "blip")  # a load that passes: the alone window's first sample only
    rt.log(f"fabric: {len(nodes)} node(s), {rt.world} ranks, {size} bytes per exchange")

    # per-node all_reduce (every node at once, each in its own group), then the global one
    groups = [dist.new_group(n["ranks"]) for n in nodes]  # every rank creates every group, same order
    mine = next(i for i, n in enumerate(nodes) if me in n["ranks"])
    buf = torch.ones(count, dtype=torch.float32, device=dev)
    rt.barrier()
    with rt.dog.guard("fabric all_reduce per node", cfg.timeout + rt.guard_slack):
        node_seconds = _time_all_reduce(buf, rt, groups[mine]) if len(nodes[mine]["ranks"]) > 1 else 0.0
    rt.barrier()
    with rt.dog.guard("fabric all_reduce global", cfg.timeout + rt.guard_slack):
        global_seconds = _time_all_reduce(buf, rt, None)
    del buf

    send = torch.empty(count, dtype=torch.float32, device=dev)
    recv = torch.empty(count, dtype=torch.float32, device=dev)
    my_base = patterns.base(me, dev)
    rounds = schedule([n["ranks"] for n in nodes])
    records: list[FabricRecord] = []
    for k, rnd in enumerate(rounds):
        rt.barrier()
        pair = next(((a, b, kind) for a, b, kind in rnd if me in (a, b)), None)
        if pair is None:
            continue
        a, b, kind = pair
        peer = b if me == a else a
        with rt.dog.guard(f"fabric pair {a}-{b} (round {k})", cfg.timeout + rt.guard_slack):
            patterns.fill(send, my_base)
            best = _time_pair(rt, send, recv, peer, first_delay + (crowd if len(rnd) > 1 else 0.0))
            # checked exchange on fresh data
            patterns.fill(send, my_base)
            recv.zero_()
            if find(rt.faults, "corrupt", me, PHASE):
                send.view(-1)[0] += 1
            _exchange(send, recv, peer)
            rt.sync()
            wrong = int(patterns.mismatches(recv, patterns.base(peer, dev)).item())
        records.append({"round": k, "ranks": [a, b], "kind": kind, "rank": me, "seconds": best, "wrong": wrong,
                        "node_seconds": node_seconds})
    rt.barrier()
    with rt.dog.guard("fabric gather", cfg.timeout + rt.guard_slack):
        gathered: list[FabricRankDoc | None] = [None] * rt.world  # each rank's `doc`, unpickled
        doc: FabricRankDoc = {"rank": me, "node": mine, "node_seconds": node_seconds, "records": records,
                              "fault": os.environ.get(FAULT_ENV) or None}
        dist.all_gather_object(gathered, doc)
    raw = assemble(nodes, size, global_seconds, [g for g in gathered if isinstance(g, dict)])
    for attempt in range(RECHECKS):
        # every rank holds the same raw document, so every rank picks the same rounds and pairs
        alone = attempt == RECHECKS - 1  # the last time, each still-slow pair with no other pair beside it
        batches: list[tuple[str, list[Pair]]] = []
        sample: list[int] = []  # the alone window's sample each batch belongs to (0 for a whole-round recheck)
        plan: list[tuple[Pair, list[int], Pair | None, list[int]]] = []  # (pair, its batches, reference, its batches)
        if alone:
            for (a, b), ref in alone_plan(raw, backend=cfg.backend, slow_fraction=slow_fraction):
                mine_at: list[int] = []
                ref_at: list[int] = []
                for n in range(ALONE_SAMPLES):  # the pair, then its reference right after it, in turn
                    mine_at.append(len(batches))
                    batches.append((f"pair {a}-{b} alone ({n + 1} of {ALONE_SAMPLES})", [(a, b)]))
                    sample.append(n)
                    if ref is not None:
                        ref_at.append(len(batches))
                        batches.append((f"pair {ref[0]}-{ref[1]} alone, the reference of {a}-{b}", [ref]))
                        sample.append(n)
                plan.append(((a, b), mine_at, ref, ref_at))
            what = (f"pairs {', '.join(f'{a}-{b}' for (a, b), _, _, _ in plan)} look slow, measuring each alone "
                    f"beside a reference pair, {ALONE_SAMPLES} times in turn")
        else:
            ks = suspect_rounds(raw, backend=cfg.backend, slow_fraction=slow_fraction)
            batches = [(f"round {k}", [(a, b) for a, b, _ in rounds[k]]) for k in ks]
            sample = [0] * len(batches)
            what = f"rounds {ks} look slow, measuring them again"
        if not batches:
            break
        rt.log(f"fabric: {what} ({attempt + 1} of {RECHECKS})")
        timed: dict[tuple[int, int, int], float] = {}  # (batch, rank, rank) -> seconds
        for i, (label, batch) in enumerate(batches):
            rt.barrier()
            mate = next(((a, b) for a, b in batch if me in (a, b)), None)
            if mate is None:
                continue
            a, b = mate
            load = (crowd if len(batch) > 1 else 0.0) + (burst if alone else 0.0) + (
                blip if alone and sample[i] == 0 else 0.0)
            with rt.dog.guard(f"fabric pair {a}-{b} ({label}, again)", cfg.timeout + rt.guard_slack):
                patterns.fill(send, my_base)
                timed[(i, a, b)] = _time_pair(rt, send, recv, b if me == a else a, delay + load)
        rt.barrier()
        with rt.dog.guard("fabric gather (again)", cfg.timeout + rt.guard_slack):
            sides: list[dict[tuple[int, int, int], float] | None] = [None] * rt.world
            dist.all_gather_object(sides, timed)
        slower: dict[tuple[int, int, int], float] = {}  # a pair's time is its slower side's, as in assemble
        for side in sides:
            for key, seconds in (side or {}).items():
                slower[key] = max(slower.get(key, 0.0), float(seconds))
        if alone:
            merge_alone(raw, [(pair, _best_sample(slower, pair, mine_at), ref,
                               _best_sample(slower, ref, ref_at) if ref is not None else 0.0)
                              for pair, mine_at, ref, ref_at in plan])
        else:
            merge_recheck(raw, {(a, b): seconds for (_, a, b), seconds in slower.items()})
    return raw


def assemble(nodes: list[FabricNode], size: int, global_seconds: float,
             per_rank: list[FabricRankDoc]) -> FabricRaw:
    """Both sides' records of each pair -> one pair (the slower side's time, each side's wrong count)."""
    pairs: dict[tuple[int, int], FabricRawPair] = {}
    for doc in per_rank:
        for rec in doc["records"]:
            key = (rec["ranks"][0], rec["ranks"][1])
            p = pairs.setdefault(key, {"ranks": list(key), "kind": rec["kind"], "seconds": 0.0, "wrong": {}})
            p["seconds"] = max(p["seconds"], float(rec["seconds"]))
            p["wrong"][str(rec["rank"])] = int(rec["wrong"])
    node_ar: list[NodeAllReduce] = []
    for i in range(len(nodes)):
        times = [float(d["node_seconds"]) for d in per_rank if d["node"] == i and d["node_seconds"] > 0]
        if times:
            node_ar.append({"node": i, "seconds": max(times)})
    return {"size": size,
            "nodes": [{"label": n["label"], "host": n["host"], "addr": n["addr"], "ranks": n["ranks"]} for n in nodes],
            "pairs": [pairs[k] for k in sorted(pairs)], "node_all_reduce": node_ar,
            "global_all_reduce": {"seconds": global_seconds},
            "faults": {int(d["rank"]): d["fault"] for d in per_rank if d.get("fault")}}
