"""Verdicts for the GEMM, collectives and soak phases, over plain measured data. Pure."""

from __future__ import annotations

import math

from provisioner.burnin.config import format_size
from provisioner.burnin.shapes import BandwidthCheck, CollectiveRow, GemmResult, ThresholdTable
from provisioner.burnin.thresholds import lookup
from provisioner.burnin.verdict import PhaseResult

MAX_LISTED = 8


def _row_label(row: CollectiveRow) -> str:
    place = "in-place" if row["inplace"] else "out-of-place"
    return f"{row['collective']} {format_size(int(row['size']))} {place}"


def avg_busbw(rows: list[CollectiveRow]) -> float:
    """nccl-tests' 'Avg bus bandwidth': the mean busbw over every row (both placements)."""
    values = [float(r["busbw"]) for r in rows]
    return sum(values) / len(values) if values else 0.0


def evaluate_collectives(
    rows: list[CollectiveRow],
    *,
    world_size: int,
    backend: str,
    gpu_names: list[str],
    table: ThresholdTable,
    expected_collectives: tuple[str, ...],
    errors: list[str] | None = None,
) -> PhaseResult:
    """Fail on any wrong element, any error or timeout, a missing collective, or low all_reduce busbw."""
    res = PhaseResult("collectives")
    for err in errors or []:
        res.fail(err)
    wrong_rows = [r for r in rows if r.get("wrong")]
    for r in wrong_rows[:MAX_LISTED]:
        res.fail(f"{_row_label(r)}: {r['wrong']} wrong element(s)")
    if len(wrong_rows) > MAX_LISTED:
        res.fail(f"... and {len(wrong_rows) - MAX_LISTED} more rows with wrong elements")
    seen = {r["collective"] for r in rows}
    missing = [c for c in expected_collectives if c not in seen]
    if missing and not errors:
        res.fail(f"no result for {', '.join(missing)}")
    res.data["rows"] = rows
    res.data["out_of_bounds"] = len({(r["collective"], int(r["size"])) for r in wrong_rows})  # sizes, as nccl-tests
    res.data["avg_bus_bandwidth"] = avg_busbw(rows)
    res.data["bandwidth_check"] = _bandwidth_check(res, rows, world_size, backend, gpu_names, table)
    return res


def _bandwidth_check(
    res: PhaseResult,
    rows: list[CollectiveRow],
    world_size: int,
    backend: str,
    gpu_names: list[str],
    table: ThresholdTable,
) -> BandwidthCheck:
    if backend != "nccl":
        res.note(f"bandwidth thresholds off for {backend} (it checks logic, not speed)")
        return {"applied": False, "why": f"backend {backend}"}
    ref = lookup(table, gpu_names, world_size)
    if ref.busbw_gbps is None:
        res.note(f"bandwidth not judged: {ref.reason}")
        return {"applied": False, "why": ref.reason}
    defaults = table["defaults"]
    min_size = int(defaults["min_size_bytes"])
    fraction = float(defaults["min_fraction"])
    large = [float(r["busbw"]) for r in rows if r["collective"] == "all_reduce" and int(r["size"]) >= min_size]
    if not large:
        why = f"sweep has no all_reduce size >= {format_size(min_size)}"
        res.note(f"bandwidth not judged: {why}")
        return {"applied": False, "why": why, "reference_gbps": ref.busbw_gbps}
    measured = sum(large) / len(large)
    required = fraction * ref.busbw_gbps
    check: BandwidthCheck = {
        "applied": True,
        "measured_gbps": measured,
        "reference_gbps": ref.busbw_gbps,
        "required_gbps": required,
        "model_pattern": ref.pattern,
        "source": ref.source,
    }
    if measured < required:
        res.fail(
            f"all_reduce busbw {measured:.1f} GB/s (mean over sizes >= {format_size(min_size)}) is below "
            f"{fraction:g} x {ref.busbw_gbps:g} GB/s reference for {gpu_names[0]}"
        )
    return check


def evaluate_gemm(
    results: list[GemmResult],
    *,
    world_size: int,
    thresholds_on: bool,
    slow_fraction: float,
) -> PhaseResult:
    """gpu-burn rules plus DCGM's variation check: any mismatch, a GPU that never computed, or one far
    below the node mean fails (gpu-burn#12 and #123: never trust an exit code or an 'OK' alone)."""
    res = PhaseResult("gemm")
    by_rank = {int(r["rank"]): r for r in results}
    for rank in range(world_size):
        r = by_rank.get(rank)
        if r is None:
            res.fail(f"rank {rank}: no GEMM result (the GPU never reported)")
            continue
        who = f"rank {rank} ({r.get('device', '?')})"
        if r.get("error"):
            res.fail(f"{who}: {r['error']}")
        elif int(r.get("iterations", 0)) <= 0 or float(r.get("gflops", 0.0)) <= 0.0:
            res.fail(f"{who}: never computed (0 Gflop/s)")
        if int(r.get("mismatches", 0)) > 0:
            res.fail(f"{who}: {r['mismatches']} element(s) differ between repeated GEMMs of the same inputs")
        if int(r.get("reference_mismatches", 0)) > 0:
            res.fail(f"{who}: {r['reference_mismatches']} element(s) differ from the float64 reference")
    speeds = [float(r.get("gflops", 0.0)) for r in results if float(r.get("gflops", 0.0)) > 0]
    mean = sum(speeds) / len(speeds) if speeds else 0.0
    res.data["ranks"] = sorted(results, key=lambda r: int(r["rank"]))
    res.data["mean_gflops"] = mean
    if thresholds_on and len(speeds) >= 2:
        for r in results:
            g = float(r.get("gflops", 0.0))
            if 0 < g < slow_fraction * mean:
                res.fail(f"rank {r['rank']}: {g:.0f} Gflop/s is below {slow_fraction:g} x node mean {mean:.0f}")
    elif not thresholds_on:
        res.note("speed comparison between GPUs off (thresholds off for this backend)")
    return res


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (pct in 0..100)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(pct / 100 * len(ordered)) - 1))
    return ordered[k]


def evaluate_soak(
    samples: list[float],
    *,
    wrong: int,
    seconds: float,
    size: int,
    thresholds_on: bool,
    min_fraction: float,
    error: str | None = None,
) -> PhaseResult:
    """Repeated large all_reduce: fail on wrong data, an error, or (thresholds on) any sample below
    `min_fraction` x the mean busbw."""
    res = PhaseResult("soak")
    if error:
        res.fail(error)
    if wrong:
        res.fail(f"{wrong} wrong element(s) during the soak")
    if not samples and not error:
        res.fail("no soak sample completed")
    mean = sum(samples) / len(samples) if samples else 0.0
    low = min(samples) if samples else 0.0
    res.data.update(
        {
            "size": size,
            "seconds": seconds,
            "samples": len(samples),
            "busbw_min": low,
            "busbw_p1": percentile(samples, 1),
            "busbw_mean": mean,
            "busbw_samples": samples,
        }
    )
    if thresholds_on and samples and low < min_fraction * mean:
        res.fail(f"busbw dipped to {low:.1f} GB/s, below {min_fraction:g} x mean {mean:.1f} GB/s")
    elif not thresholds_on:
        res.note("busbw stability check off (thresholds off for this backend)")
    return res
