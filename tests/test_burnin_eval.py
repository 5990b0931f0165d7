"""Verdict rules: GEMM, collectives thresholds, soak, NVSHMEM outcome, faults, watchdog."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from provisioner.burnin.bandwidth import bus_factor
from provisioner.burnin.config import ConfigError, make_config, parse_threshold_pairs
from provisioner.burnin.evaluation import evaluate_collectives, evaluate_gemm, evaluate_soak, percentile
from provisioner.burnin.faults import Fault, find, parse_faults
from provisioner.burnin.nvshmem_probe import classify, precheck
from provisioner.burnin.thresholds import load, load_default, lookup, merge
from provisioner.burnin.verdict import PhaseResult, overall
from provisioner.burnin.watchdog import Watchdog

H200 = "NVIDIA H200"
RTX = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def gemm_result(rank: int, gflops: float, **kw: Any) -> dict[str, Any]:
    r = {"rank": rank, "device": f"cuda:{rank}", "name": H200, "iterations": 120, "gflops": gflops,
         "mismatches": 0, "reference_mismatches": 0, "error": None}
    r.update(kw)
    return r


def test_gemm_healthy_node_passes() -> None:
    res = evaluate_gemm([gemm_result(i, 51000 + 100 * i) for i in range(8)], world_size=8,
                        thresholds_on=True, slow_fraction=0.9)
    assert res.status == "pass" and res.data["mean_gflops"] == pytest.approx(51350)


def test_gemm_mismatch_dead_gpu_slow_gpu_missing_rank() -> None:
    results = [gemm_result(i, 51000.0) for i in range(6)]
    results[1]["mismatches"] = 3
    results[2].update(iterations=0, gflops=0.0)  # gpu-burn#123: "0 (0 Gflop/s)" then "OK"
    results[3]["gflops"] = 30000.0
    results[4]["reference_mismatches"] = 2
    res = evaluate_gemm(results, world_size=7, thresholds_on=True, slow_fraction=0.9)
    text = "\n".join(res.reasons)
    assert res.status == "fail"
    assert "rank 1 (cuda:1): 3 element(s) differ between repeated GEMMs" in text
    assert "rank 2 (cuda:2): never computed (0 Gflop/s)" in text
    assert "rank 3: 30000 Gflop/s is below 0.9 x node mean" in text
    assert "rank 4 (cuda:4): 2 element(s) differ from the float64 reference" in text
    assert "rank 6: no GEMM result" in text


def test_gemm_speed_check_is_off_without_thresholds() -> None:
    res = evaluate_gemm([gemm_result(0, 20.0), gemm_result(1, 5.0)], world_size=2, thresholds_on=False,
                        slow_fraction=0.9)
    assert res.status == "pass"


def rows(collective: str, n: int, busbws: dict[int, float]) -> list[dict[str, Any]]:
    out = []
    for size, bus in busbws.items():
        for inplace in (False, True):
            a = bus / bus_factor(collective, n)
            out.append({"collective": collective, "size": size, "count": size // 4, "type": "float",
                        "redop": "sum", "root": -1, "inplace": inplace, "time_us": size / a / 1e3,
                        "algbw": a, "busbw": bus, "wrong": 0})
    return out


ALL = ("all_reduce",)


def test_h200_reference_applies_to_large_all_reduce_only() -> None:
    table = load_default()
    ok = rows("all_reduce", 8, {32 << 20: 180.0, 1 << 30: 465.0, 8 << 30: 480.0})
    res = evaluate_collectives(ok, world_size=8, backend="nccl", gpu_names=[H200] * 8, table=table,
                               expected_collectives=ALL)
    assert res.status == "pass", res.reasons
    check = res.data["bandwidth_check"]
    assert check["reference_gbps"] == 475 and check["measured_gbps"] == pytest.approx(472.5)
    slow = rows("all_reduce", 8, {1 << 30: 300.0, 8 << 30: 320.0})
    res = evaluate_collectives(slow, world_size=8, backend="nccl", gpu_names=[H200] * 8, table=table,
                               expected_collectives=ALL)
    assert res.status == "fail"
    assert "all_reduce busbw 310.0 GB/s" in res.reasons[0] and "475" in res.reasons[0]


def test_pcie_blackwell_reference_is_37() -> None:
    table = load_default()
    assert lookup(table, [RTX] * 8, 8).busbw_gbps == 37
    res = evaluate_collectives(rows("all_reduce", 8, {2 << 30: 30.0}), world_size=8, backend="nccl",
                               gpu_names=[RTX] * 8, table=table, expected_collectives=ALL)
    assert res.status == "fail"  # 30 < 0.9 x 37 = 33.3


def test_no_verdict_without_a_matching_reference_or_for_gloo() -> None:
    table = load_default()
    assert lookup(table, ["NVIDIA H200 NVL"] * 8, 8).busbw_gbps is None
    assert lookup(table, [H200] * 4, 4).reason == "reference for NVIDIA H200 is for 8 GPUs, this run has 4"
    assert "mixed GPU models" in str(lookup(table, [H200, RTX], 2).reason)
    slow = rows("all_reduce", 4, {1 << 30: 1.0})
    for backend, names in (("gloo", []), ("nccl", [H200] * 4)):
        res = evaluate_collectives(slow, world_size=4, backend=backend, gpu_names=names, table=table,
                                   expected_collectives=ALL)
        assert res.status == "pass" and res.data["bandwidth_check"]["applied"] is False


def test_sweep_below_1gib_is_not_judged() -> None:
    res = evaluate_collectives(rows("all_reduce", 8, {32 << 20: 22.2}), world_size=8, backend="nccl",
                               gpu_names=[RTX] * 8, table=load_default(), expected_collectives=ALL)
    assert res.status == "pass"
    assert res.notes == ["bandwidth not judged: sweep has no all_reduce size >= 1GiB"]


def test_wrong_elements_errors_and_missing_collectives_fail() -> None:
    r = rows("all_reduce", 2, {1024: 0.01})
    r[1]["wrong"] = 1
    res = evaluate_collectives(r, world_size=2, backend="gloo", gpu_names=[], table=load_default(),
                               expected_collectives=("all_reduce", "sendrecv"))
    assert res.status == "fail"
    assert res.reasons == ["all_reduce 1KiB in-place: 1 wrong element(s)", "no result for sendrecv"]
    assert res.data["out_of_bounds"] == 1


def test_threshold_override_file(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"defaults": {"min_fraction": 0.5},
                             "models": [{"pattern": "H200", "world_size": 8, "all_reduce_busbw_gbps": 400}]}))
    table = load(str(f))
    assert table["defaults"]["min_fraction"] == 0.5 and lookup(table, [H200] * 8, 8).busbw_gbps == 400
    with pytest.raises(ValueError):
        merge(load_default(), {"model": []})


def test_soak_statistics_and_dip() -> None:
    samples = [470.0, 472.0, 468.0, 471.0, 300.0]
    res = evaluate_soak(samples, wrong=0, seconds=60.0, size=4 << 30, thresholds_on=True, min_fraction=0.8)
    assert res.status == "fail" and res.data["busbw_min"] == 300.0
    assert res.data["busbw_mean"] == pytest.approx(436.2)
    assert percentile(samples, 1) == 300.0 and percentile(samples, 50) == 470.0
    res = evaluate_soak(samples[:4], wrong=2, seconds=60.0, size=4 << 30, thresholds_on=True, min_fraction=0.8)
    assert res.reasons == ["2 wrong element(s) during the soak"]


NO_P2P_STDERR = """\
/dvs/p4/build/sw/rel/gpgpu/toolkit/r12.0/main_nvshmem/src/host/topo/topo.cpp:469: [GPU 1] Peer GPU 0 is not accessible, exiting ...
/dvs/p4/build/sw/rel/gpgpu/toolkit/r12.0/main_nvshmem/src/host/init/init.cu:998: non-zero status: 3 building transport map failed
"""


def test_nvshmem_no_p2p_is_a_finding_not_a_crash() -> None:
    res = classify(255, False, 180.0, None, NO_P2P_STDERR)
    assert res.status == "warn" and res.data["finding"] == "no_p2p"


def test_nvshmem_outcomes() -> None:
    absent = "RuntimeError: SymmetricMemory does not find allocation backend NVSHMEM"
    assert classify(1, False, 180, None, absent).status == "skip"
    hung = classify(None, True, 180, None, "")
    assert hung.status == "fail" and hung.reasons == ["NVSHMEM probe did not finish within 180s (killed)"]
    doc = {"steps": [{"rank": 0, "steps": [{"step": "symm_mem.empty + rendezvous", "ok": True},
                                            {"step": "one_shot_all_reduce", "ok": False, "detail": "wrong"}]},
                     {"rank": 1, "steps": [{"step": "nvshmem_all_to_all", "ok": None, "detail": "op missing"}]}]}
    res = classify(1, False, 180, doc, "")
    assert res.status == "fail" and res.reasons == ["rank 0: one_shot_all_reduce failed: wrong"]
    assert classify(0, False, 180, {"steps": [{"rank": 0, "steps": [{"step": "x", "ok": True}]}]}, "").status == "pass"


def test_nvshmem_precheck_reasons() -> None:
    assert precheck("2.8.0+cu128", True, True, "nccl") == "torch 2.8.0+cu128 < 2.9: no NVSHMEM in the PyPI wheels"
    assert precheck("2.13.0+cpu", False, None, "nccl") == "no CUDA device visible to torch"
    assert "NVSHMEM absent" in str(precheck("2.11.0+cu130", True, False, "nccl"))
    assert precheck("2.11.0+cu130", True, True, "nccl") is None
    assert precheck("2.13.0+cpu", False, None, "gloo") == "NVSHMEM needs CUDA GPUs (backend gloo)"


def test_fault_spec_parsing() -> None:
    faults = parse_faults("hang:rank=1:collective=all_reduce; corrupt:rank=0")
    assert faults == (Fault("hang", 1, "all_reduce"), Fault("corrupt", 0, None))
    assert find(faults, "hang", 1, "all_reduce") and not find(faults, "hang", 1, "broadcast")
    assert find(faults, "corrupt", 0, "sendrecv")
    for bad in ("explode:rank=1", "hang:collective=x", "hang:rank=one", "hang:rank=1:when=now"):
        with pytest.raises(ValueError):
            parse_faults(bad)


def test_watchdog_fires_once_for_an_expired_step_only() -> None:
    fired: list[tuple[str, float]] = []
    done = threading.Event()

    def on_timeout(region: str, limit: float) -> None:
        fired.append((region, limit))
        done.set()

    dog = Watchdog(on_timeout, poll=0.01)
    with dog.guard("fast step", 5.0):
        time.sleep(0.05)
    with dog.guard("all_reduce 1KiB out-of-place", 0.1):
        assert done.wait(2.0)
    assert fired == [("all_reduce 1KiB out-of-place", 0.1)]
    dog.stop()


def test_overall_verdict() -> None:
    phases = {"preflight": PhaseResult("preflight", "warn", ["/dev/shm is 512MiB"]),
              "collectives": PhaseResult("collectives", "pass")}
    assert overall(phases)["status"] == "pass"
    phases["gemm"] = PhaseResult("gemm", "fail", ["rank 2: never computed (0 Gflop/s)"])
    v = overall(phases)
    assert v["status"] == "fail" and v["failed_phases"] == ["gemm"]
    assert v["reasons"] == ["gemm: rank 2: never computed (0 Gflop/s)"]


def test_threshold_pairs_from_the_command_line() -> None:
    cfg = make_config(backend="nccl", world_size=4, thresholds=["all_reduce_busbw_gbps=30", "min_fraction=0.85"])
    assert cfg.thresholds_override is not None
    table = load(None, cfg.thresholds_override)
    assert table["defaults"]["min_fraction"] == 0.85
    for names in ([RTX] * 4, []):  # any model, any world size, even when NVML gave no names
        ref = lookup(table, names, 4)
        assert ref.busbw_gbps == 30
    r = rows("all_reduce", 4, {2 << 30: 26.0})
    assert evaluate_collectives(r, world_size=4, backend="nccl", gpu_names=[RTX] * 4, table=table,
                                expected_collectives=ALL).status == "pass"  # 26 >= 0.85 x 30
    r = rows("all_reduce", 4, {2 << 30: 25.0})
    assert evaluate_collectives(r, world_size=4, backend="nccl", gpu_names=[RTX] * 4, table=table,
                                expected_collectives=ALL).status == "fail"
    assert parse_threshold_pairs(["shm_warn_bytes=536870912"]) == {"defaults": {"shm_warn_bytes": 536870912},
                                                                   "models": []}
    for bad in (["busbw=3"], ["min_fraction"], ["min_fraction=fast"], ["min_fraction=-1"]):
        with pytest.raises(ConfigError):
            parse_threshold_pairs(bad)


def test_click_options_map_onto_the_package_entry() -> None:
    from provisioner.cli.burnin import to_argv

    argv = to_argv({"backend": "gloo", "world_size": 4, "sizes": "1KiB:1MiB", "threshold": ("min_fraction=0.8",),
                    "json_out": True, "p2p_ab": False, "out": None, "duration": 2.5})
    assert argv == ["--backend", "gloo", "--world-size", "4", "--sizes", "1KiB:1MiB", "--duration", "2.5",
                    "--threshold", "min_fraction=0.8", "--json"]
