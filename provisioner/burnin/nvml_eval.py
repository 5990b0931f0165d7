"""NVML preflight and monitoring verdicts over recorded field values. Pure.

The reader (`nvml_reader`) turns pynvml calls into plain dicts; these functions judge the dicts,
so every rule is tested on recorded values without a GPU. A field NVML does not support on a
board is `None` and is not judged.

Preflight record::

    {"error": None, "driver_version": "595.71.05",
     "gpus": [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-…", "pci_bus_id": "00000000:18:00.0",
               "ecc_mode": 1, "ecc": {"sbe_volatile": 0, "dbe_volatile": 0, "sbe_aggregate": 0, "dbe_aggregate": 0},
               "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
               "retired_pages_pending": None,
               "pcie": {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16, "replay_counter": 0},
               "nvlink_active": [True, …] or None, "temperature_c": 31, "slowdown_temp_c": 87,
               "power_w": 76.2, "power_limit_w": 700.0, "clocks_event_reasons": 1}],
     "p2p_read": [[0, 0], [0, 0]] or None,   # NVML_P2P_STATUS_* per pair
     "shm": {"total_bytes": …, "free_bytes": …} or None, "env": {"NCCL_…": "…"}}

Monitor sample: ``{"t": 3.0, "phase": "gemm", "gpus": [{"index": 0, "temperature_c": …, "power_w": …,
"power_limit_w": …, "clocks_event_reasons": …, "pcie_gen": …, "pcie_width": …, "pcie_replay": …,
"ecc_sbe_volatile": …, "ecc_dbe_volatile": …}]}``; event: ``{"t": 5.2, "gpu": 3, "kind": "xid", "xid": 79}``.
"""

from __future__ import annotations

from typing import Any, Literal

from provisioner.burnin import xid as xid_table
from provisioner.burnin.config import format_size
from provisioner.burnin.shapes import (
    EccCounts,
    GpuMonitorSummary,
    NvmlEvent,
    NvmlGpu,
    NvmlGpuSample,
    NvmlRecord,
    NvmlSample,
    PcieLink,
    ShmInfo,
)
from provisioner.burnin.verdict import PhaseResult

# nvmlClocksEventReason* bits (pynvml.py L2190-2200)
CLOCK_REASONS = {
    0x1: "GpuIdle",
    0x2: "ApplicationsClocksSetting",
    0x4: "SwPowerCap",
    0x8: "HwSlowdown",
    0x10: "SyncBoost",
    0x20: "SwThermalSlowdown",
    0x40: "HwThermalSlowdown",
    0x80: "HwPowerBrakeSlowdown",
    0x100: "DisplayClockSetting",
}
FAIL_CLOCK_BITS = 0x8 | 0x40 | 0x80
WARN_CLOCK_BITS = 0x4 | 0x20

# Every XID fails the run; the table (provisioner/burnin/xid.py, from NVIDIA's Xid catalogue) names it
# and says what to do.
CRITICAL_XIDS = {n: xid_table.meaning(n) for n in sorted(xid_table.HARDWARE_XIDS)}

P2P_STATUS = {
    0: "OK",
    1: "CHIPSET_NOT_SUPPORTED",
    2: "GPU_NOT_SUPPORTED",
    3: "IOH_TOPOLOGY_NOT_SUPPORTED",
    4: "DISABLED_BY_REGKEY",
    5: "NOT_SUPPORTED",
    6: "UNKNOWN",
}

# NCCL variables that only record where the logs go; anything else NCCL_* changes behaviour and the
# NCCL docs warn debugging ones "should not be used in production nor retained in scripts".
HARMLESS_NCCL_VARS = frozenset(
    {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_TOPO_DUMP_FILE", "NCCL_SOCKET_IFNAME"}
)
LOADED_PHASES = frozenset({"gemm", "collectives", "soak"})
#: the per-sample NVML fields a GPU's verdict reads over the run
SampleKey = Literal["ecc_dbe_volatile", "ecc_sbe_volatile", "clocks_event_reasons", "temperature_c", "power_w",
                    "power_limit_w", "pcie_replay", "pcie_gen", "pcie_width"]
DeltaKey = Literal["ecc_dbe_volatile_delta", "ecc_sbe_volatile_delta"]


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in CLOCK_REASONS.items() if mask & bit]


def describe_xid(xid: int) -> str:
    return xid_table.meaning(xid)


def _with_xid_info(ev: NvmlEvent) -> NvmlEvent:
    """An XID event plus the catalogue's mnemonic, meaning, likely cause and action (a copy)."""
    if ev.get("kind") != "xid":
        return ev
    entry = xid_table.lookup(int(ev["xid"]))
    if entry is None:
        return {**ev, "meaning": xid_table.meaning(int(ev["xid"]))}
    return {**ev, "mnemonic": entry.mnemonic, "meaning": entry.meaning, "cause": entry.cause, "action": entry.action}


def _gpu_label(gpu: NvmlGpu) -> str:
    bus = gpu.get("pci_bus_id")
    return f"GPU {gpu.get('index')}" + (f" [{bus}]" if bus else "")


def evaluate_preflight(
    record: NvmlRecord,
    *,
    expected_gpus: int | None,
    shm_warn_bytes: int = 1 << 30,
    shm_fail_bytes: int = 64 << 20,
) -> PhaseResult:
    res = PhaseResult("preflight")
    res.data["record"] = record
    gpus: list[NvmlGpu] = record.get("gpus") or []
    if record.get("error"):
        if expected_gpus:
            res.fail(f"expected {expected_gpus} GPU(s) but NVML is unavailable: {record['error']}")
        else:
            res.note(f"NVML unavailable ({record['error']}): GPU checks skipped")
    else:
        res.data["driver_version"] = record.get("driver_version")
        if expected_gpus is not None and len(gpus) != expected_gpus:
            res.fail(f"NVML sees {len(gpus)} GPU(s), expected {expected_gpus}")
        for gpu in gpus:
            _check_gpu(res, gpu)
        _check_nvlink(res, gpus)
        _check_p2p(res, record.get("p2p_read"))
    _check_shm(res, record.get("shm"), shm_warn_bytes, shm_fail_bytes)
    _check_env(res, record.get("env") or {})
    return res


def _check_gpu(res: PhaseResult, gpu: NvmlGpu) -> None:
    who = _gpu_label(gpu)
    if gpu.get("ecc_mode") == 0:
        res.warn(f"{who}: ECC is disabled")
    ecc: EccCounts = gpu.get("ecc") or {}
    dbe: tuple[tuple[Literal["dbe_volatile", "dbe_aggregate"], str], ...] = (
        ("dbe_volatile", "since driver load"), ("dbe_aggregate", "lifetime"))
    for key, label in dbe:
        count = ecc.get(key) or 0
        if count > 0:
            res.fail(f"{who}: {count} uncorrectable (double-bit) ECC error(s) {label}")
    rows = gpu.get("remapped_rows")
    if rows:
        if rows.get("failure"):
            res.fail(f"{who}: a row remapping failed (RMA policy applies)")
        if rows.get("pending"):
            res.fail(f"{who}: row remapping pending: reset the GPU to apply it")
        if (rows.get("uncorrectable") or 0) > 0:
            res.warn(f"{who}: {rows['uncorrectable']} row(s) remapped after uncorrectable errors")
    if gpu.get("retired_pages_pending"):
        res.fail(f"{who}: page retirement pending: reset the GPU to apply it")
    pcie: PcieLink = gpu.get("pcie") or {}
    wc, wm, gc, gm = (pcie.get("width_current"), pcie.get("width_max"), pcie.get("gen_current"), pcie.get("gen_max"))
    if wc is not None and wm is not None and wc < wm:
        res.fail(f"{who}: PCIe link x{wc}, capable of x{wm} (degraded width)")
    if gc is not None and gm is not None and gc < gm:
        res.note(f"{who}: PCIe Gen{gc} at idle (max Gen{gm}); links downclock when idle, re-checked under load")


def _check_nvlink(res: PhaseResult, gpus: list[NvmlGpu]) -> None:
    counts = {
        int(g["index"]): sum(1 for up in links if up)
        for g in gpus
        if (links := g.get("nvlink_active")) is not None
    }
    if not counts:
        return
    best = max(counts.values())
    for index, n in sorted(counts.items()):
        if n < best:
            res.fail(f"GPU {index}: {n} NVLink(s) active, other GPUs have {best}")


def _check_p2p(res: PhaseResult, matrix: list[list[int | None]] | None) -> None:
    if not matrix:
        return
    bad = []
    for i, row in enumerate(matrix):
        for j, status in enumerate(row):
            if i < j and status not in (None, 0):
                bad.append(f"{i}<->{j} {P2P_STATUS.get(int(status), str(status))}")
    if bad:
        res.warn(
            "P2P read not available between " + ", ".join(bad[:8]) + (" …" if len(bad) > 8 else "")
            + ": NCCL falls back to host memory (check ACS/IOMMU)"
        )


def _check_shm(res: PhaseResult, shm: ShmInfo | None, warn_bytes: int, fail_bytes: int) -> None:
    if not shm or shm.get("total_bytes") is None:
        return
    total = int(shm["total_bytes"])
    if total <= fail_bytes:
        res.fail(f"/dev/shm is {format_size(total)}: NCCL fails to extend its segments (use >= 1 GiB)")
    elif total < warn_bytes:
        res.warn(f"/dev/shm is {format_size(total)}, below {format_size(warn_bytes)}")


def _check_env(res: PhaseResult, env: dict[str, str]) -> None:
    tuned = sorted(k for k in env if k.startswith("NCCL_") and k not in HARMLESS_NCCL_VARS)
    res.data["nccl_env"] = dict(sorted(env.items()))
    if tuned:
        res.warn("NCCL variables set that change its behaviour: " + ", ".join(f"{k}={env[k]}" for k in tuned))


def bus_key(bus: str | None) -> tuple[int, int, int] | None:
    """NVML '00000000:18:00.0' and torch '0000:18:00' -> (domain, bus, device)."""
    if not bus:
        return None
    parts = bus.split(".")[0].split(":")
    if len(parts) != 3:
        return None
    try:
        return int(parts[0], 16), int(parts[1], 16), int(parts[2], 16)
    except ValueError:
        return None


def evaluate_monitor(
    baseline: NvmlRecord,
    samples: list[NvmlSample],
    events: list[NvmlEvent],
    used_buses: list[str] | None = None,
) -> PhaseResult:
    """XID events, ECC deltas, clock-event reasons, temperature and power vs limits, PCIe under load.

    `used_buses` (PCI bus ids of the GPUs the ranks drive) limits the under-load PCIe check to them:
    a GPU the run does not use idles at Gen1 and is not degraded."""
    res = PhaseResult("monitor")
    if baseline.get("error"):
        res.skip(f"NVML unavailable ({baseline['error']})")
        return res
    res.data["samples"] = len(samples)
    for ev in events:
        if ev.get("kind") == "xid":
            xid = int(ev["xid"])
            res.fail(f"GPU {ev.get('gpu')}: XID {xid} ({describe_xid(xid)})")
            res.note(f"XID {xid}: {xid_table.advice(xid)}")
        elif ev.get("kind") == "dbe":
            res.fail(f"GPU {ev.get('gpu')}: double-bit ECC error event")
    res.data["events"] = [_with_xid_info(ev) for ev in events]
    per_gpu: dict[int, list[NvmlGpuSample]] = {}
    loaded: dict[int, list[NvmlGpuSample]] = {}
    for s in samples:
        for g in s.get("gpus", []):
            per_gpu.setdefault(int(g["index"]), []).append(g)
            if s.get("phase") in LOADED_PHASES:
                loaded.setdefault(int(g["index"]), []).append(g)
    base = {int(g["index"]): g for g in baseline.get("gpus") or []}
    used = {bus_key(b) for b in used_buses or []} - {None}
    summary = []
    for index, gs in sorted(per_gpu.items()):
        in_use = not used or bus_key(base.get(index, {}).get("pci_bus_id")) in used
        summary.append(_judge_gpu(res, index, gs, loaded.get(index, []) if in_use else [], base.get(index, {})))
    res.data["gpus"] = summary
    if samples and not loaded:
        res.note("no sample under load: PCIe link speed not re-checked")
    return res


def _values(gs: list[NvmlGpuSample], key: SampleKey) -> list[Any]:
    return [g[key] for g in gs if g.get(key) is not None]


def _judge_gpu(
    res: PhaseResult,
    index: int,
    gs: list[NvmlGpuSample],
    loaded: list[NvmlGpuSample],
    base: NvmlGpu,
) -> GpuMonitorSummary:
    who = f"GPU {index}"
    out: GpuMonitorSummary = {"index": index}
    ecc_keys: tuple[tuple[SampleKey, DeltaKey, str], ...] = (
        ("ecc_dbe_volatile", "ecc_dbe_volatile_delta", "uncorrectable"),
        ("ecc_sbe_volatile", "ecc_sbe_volatile_delta", "correctable"),
    )
    for key, delta_key, label in ecc_keys:
        vals = _values(gs, key)
        if vals:
            delta = max(vals) - min(vals)
            out[delta_key] = delta
            if delta > 0 and label == "uncorrectable":
                res.fail(f"{who}: {delta} new uncorrectable ECC error(s) during the run")
            elif delta > 0:
                res.warn(f"{who}: {delta} new correctable ECC error(s) during the run")
    mask = 0
    for v in _values(gs, "clocks_event_reasons"):
        mask |= int(v)
    out["clocks_event_reasons"] = reason_names(mask)
    if mask & FAIL_CLOCK_BITS:
        res.fail(f"{who}: hardware clock slowdown: {', '.join(reason_names(mask & FAIL_CLOCK_BITS))}")
    if mask & WARN_CLOCK_BITS:
        res.warn(f"{who}: clocks limited by {', '.join(reason_names(mask & WARN_CLOCK_BITS))}")
    temps = _values(gs, "temperature_c")
    slowdown = base.get("slowdown_temp_c")
    if temps:
        out["temperature_max_c"] = max(temps)
        if slowdown is not None and max(temps) >= slowdown:
            res.fail(f"{who}: reached {max(temps)} C, at or above its slowdown threshold {slowdown} C")
    powers = _values(gs, "power_w")
    limits = _values(gs, "power_limit_w")
    if powers:
        out["power_max_w"] = max(powers)
        if limits and max(powers) > 1.05 * min(limits):
            res.warn(f"{who}: drew {max(powers):.0f} W, above its enforced limit {min(limits):.0f} W")
    replays = _values(gs, "pcie_replay")
    if replays:
        out["pcie_replay_delta"] = max(replays) - min(replays)
        if out["pcie_replay_delta"] > 0:
            res.warn(f"{who}: {out['pcie_replay_delta']} PCIe replay(s) during the run")
    pcie = base.get("pcie") or {}
    gen_max, width_max = pcie.get("gen_max"), pcie.get("width_max")
    gens, widths = _values(loaded, "pcie_gen"), _values(loaded, "pcie_width")
    if gens and widths and gen_max is not None and width_max is not None:
        best_gen, best_width = max(gens), max(widths)
        out["pcie_under_load"] = f"Gen{best_gen} x{best_width}"
        if best_gen < gen_max or best_width < width_max:
            res.fail(
                f"{who}: PCIe link under load Gen{best_gen} x{best_width}, capable of Gen{gen_max} x{width_max}"
            )
    return out
