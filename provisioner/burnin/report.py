"""The result document, the nccl-tests-style table and the human summary. Pure (plus file writes).

`--json` prints the document as ONE line, the last line of stdout. Collective rows are objects
with keys collective, size, count, type, redop, root, inplace, time_us, algbw, busbw, wrong.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from provisioner.burnin.config import DEFAULT_PHASES, PHASES, BurninConfig
from provisioner.burnin.shapes import BurninConfigDoc, CollectiveRow, Environment, RankDevice, ResultDoc
from provisioner.burnin.verdict import FAIL, PASS, PhaseResult, overall

SCHEMA_VERSION = 1
RESULT_FILE = "burnin.json"
REPORT_FILE = "burnin.txt"


def build_result(
    cfg: BurninConfig,
    phases: dict[str, PhaseResult],
    *,
    environment: Environment,
    devices: list[RankDevice],
    started: float,
    fault_spec: str | None,
    extra_reasons: list[str] | None = None,
) -> ResultDoc:
    filled = dict(phases)
    for name in PHASES:
        if name in DEFAULT_PHASES or name in cfg.phases:  # fabric shows only where it was asked for
            filled.setdefault(name, PhaseResult(name, "skip", ["not requested"]))
    ordered = {name: filled[name] for name in (*PHASES, "monitor") if name in filled}
    ordered.update({name: p for name, p in filled.items() if name not in ordered})
    verdict = overall(ordered)
    if extra_reasons:
        fresh = [r for r in extra_reasons if not any(r in known for known in verdict["reasons"])]
        verdict["reasons"] = fresh + verdict["reasons"]
        verdict["status"] = FAIL
    verdict["overall"] = verdict["status"]  # alias read by the burnin.run step
    verdict["phases"] = {name: p.status for name, p in ordered.items()}
    return {
        "tool": "provisioner.burnin",
        "schema_version": SCHEMA_VERSION,
        "status": verdict["status"],
        "exit_code": 0 if verdict["status"] == PASS else 1,
        "summary": one_line_summary(verdict["status"], ordered),
        "backend": cfg.backend,
        "world_size": cfg.world_size,
        "environment": environment,
        "devices": devices,
        "config": cfg.public_dict(),
        "fault_injection": fault_spec,
        "elapsed_s": round(time.monotonic() - started, 3),
        "phases": {name: p.to_dict() for name, p in ordered.items()},
        "verdict": verdict,
    }


def failure_result(cfg: BurninConfig, reasons: list[str]) -> ResultDoc:
    """A result for a run that produced none (rank 0 crashed or was killed)."""
    return {
        "tool": "provisioner.burnin",
        "schema_version": SCHEMA_VERSION,
        "status": FAIL,
        "exit_code": 1,
        "backend": cfg.backend,
        "world_size": cfg.world_size,
        "environment": {},
        "devices": [],
        "config": cfg.public_dict(),
        "fault_injection": None,
        "phases": {},
        "summary": f"fail: {reasons[0] if reasons else 'no result'}",
        "verdict": {"status": FAIL, "overall": FAIL, "phases": {}, "failed_phases": [], "warned_phases": [],
                    "reasons": reasons},
    }


def one_line_summary(status: str, phases: dict[str, PhaseResult]) -> str:
    """e.g. `pass: gemm 51000 Gflop/s mean; all_reduce busbw 472.5 GB/s (reference 475)`."""
    bits: list[str] = []
    gemm = phases.get("gemm")
    if gemm is not None and gemm.data.get("mean_gflops"):
        bits.append(f"gemm {gemm.data['mean_gflops']:.0f} Gflop/s mean")
    coll = phases.get("collectives")
    if coll is not None and coll.data.get("rows"):
        check = coll.data.get("bandwidth_check", {})
        if check.get("applied"):
            bits.append(f"all_reduce busbw {check['measured_gbps']:.1f} GB/s (reference {check['reference_gbps']:g})")
        else:
            bits.append(f"{len(coll.data['rows'])} collective rows, avg busbw {coll.data['avg_bus_bandwidth']:.3g} GB/s")
    failed = [name for name, p in phases.items() if p.status == FAIL]
    if failed:
        bits.append("failed: " + ", ".join(failed))
    return f"{status}: " + "; ".join(bits) if bits else status


def json_line(doc: ResultDoc) -> str:
    return json.dumps(doc, separators=(",", ":"), default=str)


def float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr (src/util.cu): 2, 1 or 0 decimals by magnitude, else exponent."""
    power = 0
    val = 1
    while value >= val:
        power += 1
        val *= 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    if width >= 7:
        return f"{value:{width}.1e}"
    return f"{value:{width}.0e}"


def _half(row: CollectiveRow | None) -> str:
    if row is None:
        return "  " + " " * 7 + "  " + " " * 6 + "  " + " " * 6 + "  " + " " * 6
    body = f"  {float_str(row['time_us'], 7):>7s}  {float_str(row['algbw'], 6):>6s}  {float_str(row['busbw'], 6):>6s}"
    if row["wrong"] is None:
        return body + "    N/A"
    return body + f"  {float(row['wrong']):6g}"


def table_header(name: str, sizes: list[int], cfg: BurninConfigDoc, devices: list[RankDevice]) -> list[str]:
    """The preamble and column header nccl-tests prints before a collective's rows."""
    lines = [
        f"# Collective test starting: {name}",
        f"# nThread 1 nGpus 1 minBytes {min(sizes, default=0)} maxBytes {max(sizes, default=0)} step: 2(factor) "
        f"warmup iters: {cfg.get('warmup_iters', 0)} iters: {cfg.get('iters', 0)} agg iters: 1 "
        f"validation: 1 graph: 0 unalign: 0",
        "#",
        "# Using devices",
    ]
    for d in devices:
        lines.append(
            f"#  Rank {d['rank']:2d} Group  0 Pid {d['pid']:6d} on {d['host']:>10s} "
            f"device {d['device_index']:2d} [{d['bus']}] {d['name']}"
        )
    lines.append("#")
    lines.append(f"# {'':>10s}  {'':>12s}  {'':>8s}  {'':>6s}  {'':>6s}           out-of-place"
                 "                       in-place          ")
    lines.append(
        f"# {'size':>10s}  {'count':>12s}  {'type':>8s}  {'redop':>6s}  {'root':>6s}  {'time':>7s}  "
        f"{'algbw':>6s}  {'busbw':>6s}  {'#wrong':>6s}  {'time':>7s}  {'algbw':>6s}  {'busbw':>6s}  "
        f"{'#wrong':>6s} "
    )
    lines.append(
        f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>8s}  {'':>6s}  {'':>6s}  {'(us)':>7s}  "
        f"{'(GB/s)':>6s}  {'(GB/s)':>6s}  {'':>6s}  {'(us)':>7s}  {'(GB/s)':>6s}  {'(GB/s)':>6s}  {'':>6s} "
    )
    return lines


def table_row(oop: CollectiveRow | None, ip: CollectiveRow | None) -> str:
    """One size: out-of-place then in-place, as `%12li  %12li  %8s  %6s  %6s` + two bodies."""
    first = oop or ip
    if first is None:
        raise ValueError("a table row needs at least one placement")
    return (
        f"{int(first['size']):12d}  {int(first['count']):12d}  {first['type']:>8s}  {first['redop']:>6s}  "
        f"{int(first['root']):6d}" + _half(oop) + _half(ip)
    )


def table_footer(name: str, rows: list[CollectiveRow]) -> list[str]:
    wrong_sizes = len({int(r["size"]) for r in rows if r.get("wrong")})  # sizes with any wrong element
    avg = sum(float(r["busbw"]) for r in rows) / len(rows) if rows else 0.0
    return [
        f"# {'Out of bounds values':<20s} : {wrong_sizes} {'FAILED' if wrong_sizes else 'OK'}",
        f"# {'Avg bus bandwidth':<20s} : {avg:g} ",
        "#",
        f"# Collective test concluded: {name}",
    ]


def format_table(doc: ResultDoc) -> str:
    """One nccl-tests block per collective (src/util.cu format strings)."""
    rows: list[CollectiveRow] = doc.get("phases", {}).get("collectives", {}).get("rows", [])
    lines: list[str] = []
    for name in dict.fromkeys(r["collective"] for r in rows):
        mine = [r for r in rows if r["collective"] == name]
        sizes = sorted({int(r["size"]) for r in mine})
        lines += table_header(name, sizes, doc.get("config", {}), doc.get("devices", []))
        for size in sizes:
            at = [r for r in mine if int(r["size"]) == size]
            lines.append(table_row(next((r for r in at if not r["inplace"]), None),
                                   next((r for r in at if r["inplace"]), None)))
        lines += table_footer(name, mine)
        lines.append("")
    return "\n".join(lines)


def format_summary(doc: ResultDoc) -> str:
    verdict = doc.get("verdict", {})
    lines = [
        f"burn-in {str(doc.get('status', 'fail')).upper()}: backend {doc.get('backend')}, "
        f"world size {doc.get('world_size')}, {doc.get('elapsed_s', '?')} s",
    ]
    if doc.get("fault_injection"):
        lines.append(f"  FAULT INJECTION ACTIVE: {doc['fault_injection']} (test run, not a real result)")
    for name, phase in doc.get("phases", {}).items():
        lines.append(f"  {name:<20s} {str(phase.get('status', '?')).upper()}")
        for reason in phase.get("reasons", []):
            lines.append(f"      - {reason}")
        for note in phase.get("notes", []):
            lines.append(f"      (note) {note}")
        if name == "collectives" and phase.get("rows"):
            lines.append(f"      avg bus bandwidth {phase.get('avg_bus_bandwidth', 0.0):.3f} GB/s over "
                         f"{len(phase['rows'])} rows, out of bounds {phase.get('out_of_bounds', 0)}")
        if name == "gemm" and phase.get("ranks"):
            for r in phase["ranks"]:
                lines.append(f"      rank {r['rank']} {r.get('name', '')}: {float(r.get('gflops', 0.0)):.1f} Gflop/s, "
                             f"{r.get('iterations', 0)} GEMMs, {r.get('mismatches', 0)} mismatches")
        if name == "soak" and phase.get("samples"):
            lines.append(f"      busbw min {phase['busbw_min']:.3f} / p1 {phase['busbw_p1']:.3f} / mean "
                         f"{phase['busbw_mean']:.3f} GB/s over {phase['samples']} samples")
    for reason in verdict.get("reasons", []):
        if not any(reason.endswith(r) for p in doc.get("phases", {}).values() for r in p.get("reasons", [])):
            lines.append(f"  ! {reason}")
    return "\n".join(lines) + "\n"


def write_outputs(doc: ResultDoc, out_dir: Path) -> None:
    """burnin.json (the document) and burnin.txt (table + summary) in out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / RESULT_FILE).write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    (out_dir / REPORT_FILE).write_text(format_table(doc) + "\n" + format_summary(doc), encoding="utf-8")
