"""NVML preflight and monitoring verdicts on recorded field values (reference/burnin.md §4.2).

The node is the lab's: 8 x RTX PRO 6000 Blackwell Server Edition, host driver 595.71.05, PCIe Gen5
x16, no NVLink (NVML answers NOT_SUPPORTED -> None), 600 W boards (DCGM diag-skus PG153 SKU 210).
"""

from __future__ import annotations

import copy
from typing import Any

from provisioner.burnin.nvml_eval import evaluate_monitor, evaluate_preflight, reason_names
from provisioner.burnin.nvml_reader import NvmlReader, nccl_env

NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
BUSES = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
         "00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"]


def gpu(index: int) -> dict[str, Any]:
    return {
        "index": index, "name": NAME, "uuid": f"GPU-5f2c1a3e-7d4b-4c1e-9a0f-3b8e2d6c4a{index:02d}",
        "pci_bus_id": BUSES[index], "ecc_mode": 1,
        "ecc": {"sbe_volatile": 0, "dbe_volatile": 0, "sbe_aggregate": 0, "dbe_aggregate": 0},
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
        "retired_pages_pending": None,
        "pcie": {"gen_current": 1, "gen_max": 5, "width_current": 16, "width_max": 16, "replay_counter": 0},
        "nvlink_active": None, "temperature_c": 34, "slowdown_temp_c": 90, "power_w": 31.2,
        "power_limit_w": 600.0, "clocks_event_reasons": 0x1,
    }


def healthy_record() -> dict[str, Any]:
    return {
        "error": None, "driver_version": "595.71.05", "cuda_driver_version": 13020,
        "gpus": [gpu(i) for i in range(8)],
        "p2p_read": [[None if i == j else 0 for j in range(8)] for i in range(8)],
        "shm": {"total_bytes": 32 << 30, "free_bytes": 32 << 30},
        "env": {"NCCL_DEBUG": "WARN"},
    }


def sample(t: float, phase: str, **override: Any) -> dict[str, Any]:
    gpus = []
    for i in range(8):
        g = {"index": i, "temperature_c": 61, "power_w": 540.0, "power_limit_w": 600.0,
             "clocks_event_reasons": 0, "sm_clock_mhz": 2430, "pcie_gen": 5, "pcie_width": 16,
             "pcie_replay": 0, "ecc_sbe_volatile": 0, "ecc_dbe_volatile": 0}
        g.update(override.get(str(i), {}))
        gpus.append(g)
    return {"t": t, "phase": phase, "gpus": gpus}


def test_healthy_node_passes_preflight_and_notes_idle_gen1() -> None:
    res = evaluate_preflight(healthy_record(), expected_gpus=8)
    assert res.status == "pass", res.reasons
    assert any("Gen1 at idle" in n for n in res.notes)  # links downclock at idle: not a failure
    assert res.data["driver_version"] == "595.71.05"


def test_missing_gpu_fails_against_expected_count() -> None:
    rec = healthy_record()
    rec["gpus"] = rec["gpus"][:7]
    res = evaluate_preflight(rec, expected_gpus=8)
    assert res.status == "fail"
    assert "NVML sees 7 GPU(s), expected 8" in res.reasons


def test_nvml_absent_skips_gpu_checks_unless_gpus_are_expected() -> None:
    rec = {"error": "NVMLError_LibraryNotFound: NVML Shared Library Not Found", "gpus": [],
           "shm": {"total_bytes": 2 << 30}, "env": {}}
    assert evaluate_preflight(rec, expected_gpus=None).status == "pass"
    res = evaluate_preflight(rec, expected_gpus=8)
    assert res.status == "fail" and "NVML is unavailable" in res.reasons[0]


def test_degraded_pcie_width_fails_at_preflight() -> None:
    rec = healthy_record()
    rec["gpus"][3]["pcie"].update(gen_current=3, width_current=8)
    res = evaluate_preflight(rec, expected_gpus=8)
    assert res.status == "fail"
    assert "GPU 3 [00000000:5D:00.0]: PCIe link x8, capable of x16 (degraded width)" in res.reasons


def test_row_remap_pending_failure_and_dbe_fail() -> None:
    rec = healthy_record()
    rec["gpus"][1]["remapped_rows"].update(uncorrectable=2, pending=True)
    rec["gpus"][2]["remapped_rows"]["failure"] = True
    rec["gpus"][5]["ecc"]["dbe_volatile"] = 1
    res = evaluate_preflight(rec, expected_gpus=8)
    text = "\n".join(res.reasons)
    assert res.status == "fail"
    assert "GPU 1 [00000000:2A:00.0]: row remapping pending" in text
    assert "GPU 2 [00000000:3A:00.0]: a row remapping failed" in text
    assert "GPU 5 [00000000:AB:00.0]: 1 uncorrectable (double-bit) ECC error(s) since driver load" in text


def test_small_shm_and_nccl_tuning_vars() -> None:
    rec = healthy_record()
    rec["shm"] = {"total_bytes": 64 << 20, "free_bytes": 64 << 20}  # Docker's default 64 MB
    rec["env"] = {"NCCL_DEBUG": "INFO", "NCCL_P2P_DISABLE": "1", "NCCL_MIN_NCHANNELS": "8"}
    res = evaluate_preflight(rec, expected_gpus=8)
    assert res.status == "fail"
    assert any(r.startswith("/dev/shm is 64MiB") for r in res.reasons)
    assert any("NCCL_MIN_NCHANNELS=8, NCCL_P2P_DISABLE=1" in r for r in res.reasons)
    rec["shm"] = {"total_bytes": 512 << 20}
    rec["env"] = {}
    assert evaluate_preflight(rec, expected_gpus=8).status == "warn"


def test_p2p_not_supported_is_a_warning() -> None:
    rec = healthy_record()
    rec["p2p_read"][0][4] = rec["p2p_read"][4][0] = 1  # NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED
    res = evaluate_preflight(rec, expected_gpus=8)
    assert res.status == "warn"
    assert "0<->4 CHIPSET_NOT_SUPPORTED" in res.reasons[0]


def test_inactive_nvlink_fails() -> None:
    rec = healthy_record()
    for g in rec["gpus"]:
        g["nvlink_active"] = [True] * 18  # H100/H200 SXM: 18 links
    rec["gpus"][6]["nvlink_active"][4] = False
    res = evaluate_preflight(rec, expected_gpus=8)
    assert res.reasons == ["GPU 6: 17 NVLink(s) active, other GPUs have 18"]


def test_monitor_xid_79_fails() -> None:
    samples = [sample(float(t), "collectives") for t in range(5)]
    events = [{"t": 3.4, "gpu": 5, "kind": "xid", "xid": 79}]
    res = evaluate_monitor(healthy_record(), samples, events)
    assert res.status == "fail"
    assert "GPU 5: XID 79 (GPU has fallen off the bus)" in res.reasons


def test_monitor_degraded_link_under_load_gen3_x8() -> None:
    rec = healthy_record()  # max Gen5 x16
    samples = [sample(0.0, "idle", **{"2": {"pcie_gen": 1}})]
    samples += [sample(float(t), "gemm", **{"2": {"pcie_gen": 3, "pcie_width": 8}}) for t in range(1, 6)]
    res = evaluate_monitor(rec, samples, [])
    assert res.status == "fail"
    assert res.reasons == ["GPU 2: PCIe link under load Gen3 x8, capable of Gen5 x16"]
    gpu2 = next(g for g in res.data["gpus"] if g["index"] == 2)
    assert gpu2["pcie_under_load"] == "Gen3 x8"


def test_pcie_under_load_is_judged_only_for_gpus_the_ranks_use() -> None:
    # a 4-rank run on the 8-GPU node: GPUs 4-7 idle at Gen1 while 0-3 work
    idle = {str(i): {"pcie_gen": 1} for i in range(4, 8)}
    samples = [sample(float(t), "collectives", **idle) for t in range(3)]
    torch_buses = ["0000:18:00", "0000:2a:00", "0000:3a:00", "0000:5d:00"]  # torch's pci ids of ranks 0-3
    assert evaluate_monitor(healthy_record(), samples, [], torch_buses).status == "pass"
    res = evaluate_monitor(healthy_record(), samples, [])
    assert "GPU 4: PCIe link under load Gen1 x16, capable of Gen5 x16" in res.reasons


def test_monitor_idle_gen1_alone_is_not_a_failure() -> None:
    samples = [sample(0.0, "idle", **{str(i): {"pcie_gen": 1} for i in range(8)}), sample(1.0, "soak")]
    res = evaluate_monitor(healthy_record(), samples, [])
    assert res.status == "pass", res.reasons


def test_monitor_throttle_ecc_temperature_and_replays() -> None:
    samples = [sample(0.0, "gemm")]
    samples.append(sample(1.0, "gemm", **{
        "0": {"clocks_event_reasons": 0x40 | 0x4},  # HwThermalSlowdown + SwPowerCap
        "1": {"ecc_dbe_volatile": 1},
        "2": {"temperature_c": 92},
        "3": {"pcie_replay": 12, "ecc_sbe_volatile": 3},
    }))
    res = evaluate_monitor(healthy_record(), samples, [])
    text = "\n".join(res.reasons)
    assert res.status == "fail"
    assert "GPU 0: hardware clock slowdown: HwThermalSlowdown" in text
    assert "GPU 0: clocks limited by SwPowerCap" in text
    assert "GPU 1: 1 new uncorrectable ECC error(s) during the run" in text
    assert "GPU 2: reached 92 C, at or above its slowdown threshold 90 C" in text
    assert "GPU 3: 12 PCIe replay(s) during the run" in text
    assert "GPU 3: 3 new correctable ECC error(s) during the run" in text


def test_clock_reason_bits() -> None:
    assert reason_names(0x1 | 0x80) == ["GpuIdle", "HwPowerBrakeSlowdown"]


def test_reader_without_a_driver_records_the_error() -> None:
    reader = NvmlReader()
    if reader.nvml is not None and reader.open():
        reader.close()  # a machine with a driver: nothing to assert about its absence
        return
    rec = reader.record({"NCCL_DEBUG": "INFO", "PATH": "/usr/bin"})
    assert rec["error"] and rec["gpus"] == []
    assert rec["env"] == {"NCCL_DEBUG": "INFO"}
    assert evaluate_monitor(rec, [], []).status == "skip"


class FakeNvml:
    """Answers like pynvml on one healthy and one degraded board (types as in pynvml.py)."""

    NVML_NVLINK_MAX_LINKS = 36
    NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1
    NVML_TEMPERATURE_GPU, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 0, 1
    NVML_CLOCK_SM = 1
    NVML_P2P_CAPS_INDEX_READ = (0,)  # pynvml 13.x really defines it as a 1-tuple

    class NVMLError_NotSupported(Exception):
        pass

    class Pci:
        def __init__(self, bus: str) -> None:
            self.busId = bus.encode()

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: return 2
    def nvmlDeviceGetHandleByIndex(self, i: int) -> int: return i
    def nvmlSystemGetDriverVersion(self) -> str: return "595.71.05"
    def nvmlSystemGetCudaDriverVersion(self) -> int: return 13020
    def nvmlDeviceGetName(self, h: int) -> str: return NAME
    def nvmlDeviceGetUUID(self, h: int) -> str: return f"GPU-{h}"
    def nvmlDeviceGetPciInfo_v3(self, h: int) -> Any: return self.Pci(BUSES[h])
    def nvmlDeviceGetEccMode(self, h: int) -> list[int]: return [1, 1]
    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]: return (0, 0, h, 0)
    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        raise self.NVMLError_NotSupported()  # Ampere and later use row remapping
    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int: return 0
    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int: return 5 if h == 0 else 3
    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int: return 5
    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int: return 16 if h == 0 else 8
    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int: return 16
    def nvmlDeviceGetPcieReplayCounter(self, h: int) -> int: return 0
    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        raise self.NVMLError_NotSupported()
    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int: return 40
    def nvmlDeviceGetTemperatureThreshold(self, h: int, kind: int) -> int: return 90
    def nvmlDeviceGetPowerUsage(self, h: int) -> int: return 61234  # mW
    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int: return 600000
    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int: return 0x1
    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int: return 2430
    def nvmlDeviceGetP2PStatus(self, a: int, b: int, idx: int) -> int:
        assert idx == 0
        return 0


def test_reader_turns_pynvml_answers_into_the_judged_record() -> None:
    reader = NvmlReader(FakeNvml())
    assert reader.open()
    rec = reader.record({})
    assert rec["driver_version"] == "595.71.05"
    g0, g1 = rec["gpus"]
    assert g0["pci_bus_id"] == "00000000:18:00.0" and g0["power_limit_w"] == 600.0
    assert g0["nvlink_active"] is None and g0["retired_pages_pending"] is None
    assert g1["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": True, "failure": False}
    assert rec["p2p_read"] == [[None, 0], [0, None]]
    res = evaluate_preflight(rec, expected_gpus=2)
    assert res.status == "fail"
    assert any("row remapping pending" in r for r in res.reasons)
    assert any("PCIe link x8, capable of x16" in r for r in res.reasons)
    s = reader.sample("gemm", 1.0)
    assert s["gpus"][1]["pcie_gen"] == 3 and s["gpus"][0]["power_w"] == 61.234
    mon = evaluate_monitor(rec, [s], [])
    assert "GPU 1: PCIe link under load Gen3 x8, capable of Gen5 x16" in mon.reasons


def test_nccl_env_keeps_only_nccl_and_nvshmem_vars() -> None:
    env = {"NCCL_IB_DISABLE": "1", "NVSHMEM_DEBUG": "WARN", "HOME": "/root", "PVE_PASSWORD": "x"}
    assert nccl_env(env) == {"NCCL_IB_DISABLE": "1", "NVSHMEM_DEBUG": "WARN"}


def test_evaluations_do_not_mutate_the_record() -> None:
    rec = healthy_record()
    before = copy.deepcopy(rec)
    evaluate_preflight(rec, expected_gpus=8)
    evaluate_monitor(rec, [sample(0.0, "gemm")], [])
    assert rec == before
