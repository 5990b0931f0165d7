"""The fabric phase's plan and verdict: which pairs of ranks to measure, and which node, rank or
link is slow or corrupts data. Pure (stdlib only).

Pairs: inside every node, every pair of its ranks (a round-robin tournament, the nodes' rounds run
at the same time); across nodes, every pair of nodes (a tournament over nodes) with local rank k
of one node paired with local rank k of the other (rail-aligned, as multi-rail fabrics are wired).
Every pair exchanges the same buffer both ways at once (nccl-tests' sendrecv: busbw = algbw).

Verdict (relative, so it holds for any fabric): a pair is compared with the pairs of its kind
(intra-node or inter-node) that do not share its ranks. A *rank* is slow when every pair it is in
reaches less than `fabric_slow_fraction` of that reference; a *node* is slow when all its ranks
are; a *link* (a pair of nodes) is slow when its pairs are slow and no slow rank explains it.
A rank *corrupts* what it sends when its data arrives wrong at every partner; wrong data on
some pairs only names those pairs. Absolute speed is judged by the collectives phase (nccl-tests
formulas for the global world size and the per-GPU-model thresholds).

Before the verdict, every round with a pair judged slow is measured again, whole (the same pairs at
once, so the same contention), up to `RECHECKS` times; the last time, each pair still judged slow is
measured alone (the other ranks wait), so a pair slowed only by the pairs running beside it (ranks of
two nodes sharing a loaded host's CPUs, a switch uplink two pairs share) is not named. Each pair keeps
its best time. A stall that passes (a loaded host, another job's burst) no longer names a pair; a slow
rank or link stays slow.

A pair measured alone is judged against its reference pair (`alone_plan`: the first pair of its kind
sharing none of its ranks, one not itself judged slow where there is one) measured alone right after
it — the two in turn, `ALONE_SAMPLES` times, each keeping its best — not against the other pairs' times
from minutes before: a load on the whole machine in that
window (another job, a noisy neighbour of a shared host) slows both and names nothing, while a slow
rank or link slows only the pair. Suite runs 88 and 90 of session 27: a pair measured alone while the
other xdist worker's burn-in loaded both cores ran at a tenth of the other pairs' earlier times. What it
cannot tell: a load that slows only the reference's measurement makes a slow pair look like its reference
(the verdict then names nothing) in every sample; the notes give both figures.
"""

from __future__ import annotations

import statistics

from provisioner.burnin.bandwidth import bus_factor
from provisioner.burnin.config import format_size
from provisioner.burnin.shapes import (
    FabricAlone,
    FabricAloneRaw,
    FabricNode,
    FabricNodeVerdict,
    FabricPair,
    FabricRaw,
    GlobalAllReduce,
)
from provisioner.burnin.verdict import PhaseResult

INTRA, INTER = "intra", "inter"
# gloo on shared CPUs is noisy (2-4x between identical pairs under load): only gross outliers count there
DEFAULT_SLOW_FRACTION = {"nccl": 0.5, "gloo": 0.1}
#: how many times the rounds with a slow-looking pair are measured again before the verdict
RECHECKS = 2
#: in the last recheck, how many times in turn each still-slow pair and its reference are measured alone (each keeps
#: its best): a load that starts or ends inside the window then leaves both a sample in the same regime (suite run 93
#: of session 28: the pair ran at 0.104 GB/s, its reference right after it at 1.23, as a load ended between them)
ALONE_SAMPLES = 3


def round_robin(items: list[int]) -> list[list[tuple[int, int]]]:
    """Every pair of `items` exactly once, in rounds of disjoint pairs (the circle method)."""
    xs: list[int | None] = list(items)
    if len(xs) < 2:
        return []
    if len(xs) % 2:
        xs.append(None)
    n = len(xs)
    rounds: list[list[tuple[int, int]]] = []
    for _ in range(n - 1):
        pairs = []
        for i in range(n // 2):
            a, b = xs[i], xs[n - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(sorted(pairs))
        xs = [xs[0], xs[-1], *xs[1:-1]]
    return rounds


def schedule(nodes: list[list[int]]) -> list[list[tuple[int, int, str]]]:
    """Rounds of disjoint (rank, rank, kind) pairs for ranks grouped by node (see the module doc)."""
    rounds: list[list[tuple[int, int, str]]] = []
    per_node = [round_robin(sorted(ranks)) for ranks in nodes]
    for k in range(max((len(r) for r in per_node), default=0)):
        merged = [(a, b, INTRA) for r in per_node if k < len(r) for a, b in r[k]]
        if merged:
            rounds.append(merged)
    for node_round in round_robin(list(range(len(nodes)))):
        merged = []
        for x, y in node_round:
            rx, ry = sorted(nodes[x]), sorted(nodes[y])
            merged += [(min(a, b), max(a, b), INTER) for a, b in zip(rx, ry, strict=False)]
        if merged:
            rounds.append(merged)
    return rounds


def _slow_pairs(raw: FabricRaw, backend: str, slow_fraction: float | None) -> set[tuple[int, int]]:
    """The pairs the verdict would call slow."""
    return {(int(p["ranks"][0]), int(p["ranks"][1])) for p in evaluate_fabric(raw, backend=backend,
            slow_fraction=slow_fraction).data.get("pairs", []) if p.get("slow")}


Pair = tuple[int, int]


def alone_plan(raw: FabricRaw, *, backend: str,
               slow_fraction: float | None = None) -> list[tuple[Pair, Pair | None]]:
    """The pairs the verdict would call slow, in the order `schedule` measures them, each with its reference
    to measure alone right after it: the first pair of its kind sharing none of its ranks — on another link (or
    node) and not called slow where there is one, else not called slow, else any — or None when no pair qualifies."""
    slow = _slow_pairs(raw, backend, slow_fraction)
    node_of = {r: i for i, n in enumerate(raw["nodes"]) for r in n["ranks"]}
    order = [(a, b, kind) for rnd in schedule([n["ranks"] for n in raw["nodes"]]) for a, b, kind in rnd]
    plan: list[tuple[Pair, Pair | None]] = []
    for a, b, kind in order:
        if (a, b) not in slow:
            continue
        others = [(c, d) for c, d, k in order if k == kind and not {a, b} & {c, d}]
        # not on the suspect's own link (inter) or node (intra) where another pair exists: a slow link's other pair
        # that escaped the verdict (a crowded rank elsewhere holding its kind's median down) would excuse the link
        elsewhere = [p for p in others if {node_of[p[0]], node_of[p[1]]} != {node_of[a], node_of[b]}]
        tiers = ([p for p in elsewhere if p not in slow], [p for p in others if p not in slow], others)
        plan.append(((a, b), next((t[0] for t in tiers if t), None)))
    return plan


def suspect_rounds(raw: FabricRaw, *, backend: str, slow_fraction: float | None = None) -> list[int]:
    """The rounds of `schedule` that hold a pair the verdict would call slow, in order."""
    slow = _slow_pairs(raw, backend, slow_fraction)
    rounds = schedule([n["ranks"] for n in raw["nodes"]])
    return [k for k, rnd in enumerate(rounds) if any((a, b) in slow for a, b, _ in rnd)]


def merge_recheck(raw: FabricRaw, seconds: dict[tuple[int, int], float]) -> None:
    """Fold a second measurement into `raw`: each pair measured again keeps its best time."""
    for p in raw["pairs"]:
        again = seconds.get((p["ranks"][0], p["ranks"][1]))
        if again is not None and again > 0:
            p["seconds"] = min(float(p["seconds"]), again) if p["seconds"] > 0 else again
            p["rechecked"] = p.get("rechecked", 0) + 1


def merge_alone(raw: FabricRaw, measured: list[tuple[Pair, float, Pair | None, float]]) -> None:
    """Fold the last recheck (`alone_plan`'s pairs, each measured alone, then its reference alone): each pair
    keeps its best time, as in `merge_recheck`, and its time alone beside its reference's, which the verdict
    compares. A time of zero is nothing measured."""
    merge_recheck(raw, {pair: seconds for pair, seconds, _, _ in measured})
    by_ranks = {(p["ranks"][0], p["ranks"][1]): p for p in raw["pairs"]}
    for pair, seconds, ref, ref_seconds in measured:
        p = by_ranks.get(pair)
        if p is None or seconds <= 0:
            continue
        alone: FabricAloneRaw = {"seconds": seconds, "reference": None, "reference_seconds": None}
        if ref is not None and ref_seconds > 0:
            alone["reference"], alone["reference_seconds"] = [ref[0], ref[1]], ref_seconds
        p["alone"] = alone


def _beside(p: FabricPair) -> FabricAlone | None:
    """`p`'s measurement alone where its reference was measured alone beside it (what the verdict then judges by)."""
    alone = p.get("alone")
    return alone if alone is not None and alone["reference_busbw"] else None


def _ratio(p: FabricPair, ref: float | None) -> float | None:
    """How fast `p` is against its reference: alone against its reference alone beside it in time where the
    last recheck measured both, else its best time against `ref` (None: nothing to compare with)."""
    alone = _beside(p)
    if alone is not None and alone["reference_busbw"]:
        return alone["busbw"] / alone["reference_busbw"]
    return p["busbw"] / ref if ref else None


def _judged_busbw(p: FabricPair) -> float:
    """The bandwidth the verdict judged `p` by: alone, where its reference was measured alone beside it."""
    alone = _beside(p)
    return alone["busbw"] if alone is not None else p["busbw"]


def _judged_reference(p: FabricPair) -> float:
    """The reference bandwidth the verdict compared `p` with (a slow pair always has one)."""
    alone = _beside(p)
    return (alone["reference_busbw"] if alone is not None else p["reference_busbw"]) or 0.0


def _ref(pairs: list[FabricPair], kind: str, exclude: set[int]) -> float | None:
    values = [p["busbw"] for p in pairs if p["kind"] == kind and not exclude & set(p["ranks"])]
    return statistics.median(values) if values else None


def evaluate_fabric(raw: FabricRaw, *, backend: str, slow_fraction: float | None = None) -> PhaseResult:
    """raw: {"size", "nodes": [{"label", "host", "addr", "ranks"}], "pairs": [{"ranks", "kind", "seconds",
    "wrong": {rank: n}}], "node_all_reduce": [{"node", "seconds"}], "global_all_reduce": {"seconds"}}."""
    res = PhaseResult("fabric")
    frac = slow_fraction if slow_fraction is not None else DEFAULT_SLOW_FRACTION.get(backend, 0.5)
    size = int(raw["size"])
    nodes: list[FabricNode] = raw["nodes"]
    node_of = {r: i for i, n in enumerate(nodes) for r in n["ranks"]}
    world = sum(len(n["ranks"]) for n in nodes)

    def where(rank: int) -> str:
        n = nodes[node_of[rank]]
        return f"rank {rank} on {n['label']}" + (f" ({n['addr']})" if n.get("addr") else "")

    pairs: list[FabricPair] = []
    for measured in raw["pairs"]:
        a, b = measured["ranks"]
        seconds = float(measured["seconds"])
        gbps = size / seconds / 1e9 if seconds > 0 else 0.0
        pairs.append({"ranks": [a, b], "nodes": [nodes[node_of[a]]["label"], nodes[node_of[b]]["label"]],
                      "kind": measured["kind"], "size": size, "time_us": seconds * 1e6, "algbw": gbps, "busbw": gbps,
                      "wrong": {int(k): int(v) for k, v in (measured.get("wrong") or {}).items()},
                      "rechecked": int(measured.get("rechecked", 0))})
        alone_raw = measured.get("alone")
        if alone_raw is not None and float(alone_raw["seconds"]) > 0:
            ref_s = alone_raw.get("reference_seconds")
            pairs[-1]["alone"] = {"busbw": size / float(alone_raw["seconds"]) / 1e9,
                                  "reference_ranks": alone_raw.get("reference"),
                                  "reference_busbw": size / float(ref_s) / 1e9 if ref_s else None}
    # -- data integrity: who sent what arrived wrong ---------------------------------------------
    bad_from: dict[int, list[int]] = {}  # sender -> receivers that saw wrong data
    partners: dict[int, set[int]] = {}
    for p in pairs:
        a, b = p["ranks"]
        partners.setdefault(a, set()).add(b)
        partners.setdefault(b, set()).add(a)
        for receiver, n in p["wrong"].items():
            if n:
                bad_from.setdefault(a if receiver == b else b, []).append(receiver)
    corrupt_ranks = []
    for sender, receivers in sorted(bad_from.items()):
        if set(receivers) >= partners.get(sender, set()) and len(partners[sender]) >= 1:
            corrupt_ranks.append(sender)
            res.fail(f"{where(sender)} corrupts the data it sends: wrong elements at every partner "
                     f"(ranks {', '.join(map(str, sorted(receivers)))})")
        else:
            for r in sorted(receivers):
                res.fail(f"data from {where(sender)} arrived wrong at {where(r)}")
    # -- speed: slow ranks, nodes, links ---------------------------------------------------------
    slow_pairs: list[FabricPair] = []
    for p in pairs:
        ref = _ref(pairs, p["kind"], set(p["ranks"]))
        p["reference_busbw"] = ref
        ratio = _ratio(p, ref)
        p["slow"] = ratio is not None and ratio < frac
        if p["slow"]:
            slow_pairs.append(p)
    slow_ranks = []
    for r in sorted(partners):
        mine = [p for p in pairs if r in p["ranks"]]
        ratios = [q for p in mine if (q := _ratio(p, _ref(pairs, p["kind"], {r}))) is not None]
        if len(mine) < 2 or not ratios:
            continue
        if all(q < frac for q in ratios):
            slow_ranks.append(r)
            worst = max(ratios)
            seen = ", ".join(f"{_judged_busbw(p):.3g} GB/s with rank {_other(p, r)}" for p in mine)
            res.fail(f"{where(r)} is slow: every pair with it is below {frac:g}x the other pairs of its kind "
                     f"(at best {worst:.2f}x; {seen})")
    slow_nodes = [i for i, n in enumerate(nodes) if len(n["ranks"]) > 0 and all(r in slow_ranks for r in n["ranks"])]
    for i in slow_nodes:
        res.fail(f"node {nodes[i]['label']} is slow: all its ranks are ({', '.join(map(str, nodes[i]['ranks']))})")
    links: dict[tuple[int, int], list[FabricPair]] = {}
    for p in pairs:
        if p["kind"] == INTER:
            x, y = sorted((node_of[p["ranks"][0]], node_of[p["ranks"][1]]))
            links.setdefault((x, y), []).append(p)
    slow_links = []
    for (x, y), ps in sorted(links.items()):
        unexplained = [p for p in ps if p["slow"] and not set(p["ranks"]) & set(slow_ranks)]
        if unexplained and len(unexplained) == len(ps):
            slow_links.append([nodes[x]["label"], nodes[y]["label"]])
            res.fail(f"link {nodes[x]['label']} <-> {nodes[y]['label']} is slow: "
                     f"{statistics.mean(_judged_busbw(p) for p in ps):.3g} GB/s vs "
                     f"{statistics.median(_judged_reference(p) for p in ps):.3g} GB/s "
                     "on the other links")  # every pair here is slow, so each has a reference
    for p in slow_pairs:
        if not set(p["ranks"]) & set(slow_ranks) and p["kind"] == INTRA:
            alone = _beside(p)
            against = (f"{alone['reference_busbw']:.3g} GB/s for pair {'-'.join(map(str, alone['reference_ranks']))} "
                       "measured alone right after it" if alone is not None and alone["reference_ranks"]
                       else f"{p['reference_busbw']:.3g} GB/s for the other pairs")
            res.warn(f"pair {p['ranks'][0]}-{p['ranks'][1]} inside {p['nodes'][0]} is slow: "
                     f"{_judged_busbw(p):.3g} GB/s vs {against}")
    again = [p for p in pairs if p["rechecked"]]
    if again:
        kept = sum(1 for p in again if p["slow"])
        res.note(f"{len(again)} pair(s) measured again because their round first looked slow (best time kept); "
                 f"{kept} still slow")
    for p in pairs:
        alone = _beside(p)
        if alone is not None and alone["reference_ranks"]:
            c, d = alone["reference_ranks"]
            res.note(f"pair {p['ranks'][0]}-{p['ranks'][1]} measured alone: {alone['busbw']:.3g} GB/s, pair {c}-{d} "
                     f"alone right after it: {alone['reference_busbw']:.3g} GB/s "
                     f"({'slow' if p['slow'] else 'not slow'} beside each other in time)")
    judged = {kind: sum(1 for p in pairs if p["kind"] == kind and p["reference_busbw"] is not None)
              for kind in (INTRA, INTER)}
    if not pairs:
        res.skip("one rank: no pairs to measure")
    elif not any(judged.values()):
        res.note("speed not compared: no pair has another pair of its kind to compare with")
    # -- per node --------------------------------------------------------------------------------
    node_ar = {int(d["node"]): float(d["seconds"]) for d in raw.get("node_all_reduce", [])}
    per_node: list[FabricNodeVerdict] = []
    for i, node in enumerate(nodes):
        k = len(node["ranks"])
        node_s = node_ar.get(i)
        alg = size / node_s / 1e9 if node_s else None
        inter = [p["busbw"] for p in pairs if p["kind"] == INTER and node_of[p["ranks"][0]] != node_of[p["ranks"][1]]
                 and i in (node_of[p["ranks"][0]], node_of[p["ranks"][1]])]
        intra = [p["busbw"] for p in pairs if p["kind"] == INTRA and node_of[p["ranks"][0]] == i]
        status = "fail" if (i in slow_nodes or set(node["ranks"]) & set(corrupt_ranks + slow_ranks)) else "pass"
        per_node.append({
            "node": node["label"], "host": node.get("host"), "addr": node.get("addr"), "ranks": list(node["ranks"]),
            "status": status, "slow_ranks": [r for r in node["ranks"] if r in slow_ranks],
            "corrupt_ranks": [r for r in node["ranks"] if r in corrupt_ranks],
            "all_reduce": None if alg is None else {"ranks": k, "size": size, "time_us": node_s * 1e6 if node_s else None,
                                                    "algbw": alg, "busbw": alg * bus_factor("all_reduce", k)},
            "intra_pair_busbw_min": min(intra) if intra else None,
            "inter_pair_busbw_min": min(inter) if inter else None,
        })
    g: GlobalAllReduce | dict[str, float] = raw.get("global_all_reduce") or {}
    g_alg = size / float(g["seconds"]) / 1e9 if g.get("seconds") else None
    res.data.update({
        "size": size, "size_text": format_size(size), "slow_fraction": frac,
        "global": {"world_size": world, "nodes": len(nodes), "ranks_per_node": [len(n["ranks"]) for n in nodes],
                   "bus_factor": {c: bus_factor(c, world) for c in ("all_reduce", "all_gather", "reduce_scatter",
                                                                     "alltoall", "broadcast", "sendrecv")},
                   "all_reduce": None if g_alg is None else {"algbw": g_alg,
                                                             "busbw": g_alg * bus_factor("all_reduce", world)}},
        "nodes": per_node, "pairs": pairs,
        "slow_ranks": slow_ranks, "slow_nodes": [nodes[i]["label"] for i in slow_nodes], "slow_links": slow_links,
        "corrupt_ranks": corrupt_ranks,
    })
    return res


def _other(p: FabricPair, r: int) -> int:
    a, b = p["ranks"]
    return int(b if a == r else a)
