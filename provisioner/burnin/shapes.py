"""The JSON shapes the burn-in reads and writes, as `TypedDict`s (stdlib only: this package runs in the
container with torch and the standard library, never pydantic).

A TypedDict is a plain dict at run time (the JSON stays byte for byte what it was) and states the shape to
mypy. The engine side reads the same document into `provisioner.payloads.BurninReport` (pydantic), which
keeps every key it does not name.

Keys a producer does not always write are `total=False`; keys every producer writes are required.
"""

from __future__ import annotations

from typing import Literal, TypedDict

# -- threshold table (thresholds.json, --thresholds FILE, --threshold KEY=VALUE) -----------------------


class ThresholdDefaults(TypedDict, total=False):
    min_fraction: float
    min_size_bytes: int
    gemm_slow_fraction: float
    soak_min_fraction: float
    shm_warn_bytes: int
    shm_fail_bytes: int
    fabric_slow_fraction: float


class ThresholdModel(TypedDict, total=False):
    """One per-GPU-model reference; the first whose `pattern` matches the GPU name wins."""

    pattern: str
    world_size: int | None
    all_reduce_busbw_gbps: float | None
    source: str


class ThresholdTable(TypedDict, total=False):
    schema_version: int
    about: str
    defaults: ThresholdDefaults
    models: list[ThresholdModel]


# -- what a rank measures ----------------------------------------------------------------------------


class CollectiveRow(TypedDict):
    """One nccl-tests row: one collective, one size, one placement."""

    collective: str
    size: int
    count: int
    type: str
    redop: str
    root: int
    inplace: bool
    time_us: float
    algbw: float
    busbw: float
    wrong: int | None


class RankDevice(TypedDict, total=False):
    """The device one rank runs on (gathered from every rank after init_process_group)."""

    rank: int
    pid: int
    host: str
    node_rank: int
    addr: str | None
    device_index: int
    bus: str
    name: str


class GemmResult(TypedDict, total=False):
    """One rank's GEMM stress result (gemm.run_gemm)."""

    rank: int
    device: str
    name: str
    size: int
    iterations: int
    gflops: float
    mismatches: int
    reference_mismatches: int
    seconds: float
    error: str | None


class PeerTimeout(TypedDict, total=False):
    """What a rank that timed out leaves in the c10d store for rank 0."""

    region: str
    limit: float


class Environment(TypedDict, total=False):
    """The software a run ran on (rank 0's view)."""

    torch: str
    cuda: str | None
    python: str
    host: str
    executable: str
    prefix: str
    nccl: str | None
    driver: str | None


# -- NVML ------------------------------------------------------------------------------------------


class ShmInfo(TypedDict):
    total_bytes: int
    free_bytes: int


class EccCounts(TypedDict, total=False):
    sbe_volatile: int | None
    dbe_volatile: int | None
    sbe_aggregate: int | None
    dbe_aggregate: int | None


class RemappedRows(TypedDict):
    correctable: int
    uncorrectable: int
    pending: bool
    failure: bool


class PcieLink(TypedDict, total=False):
    gen_current: int | None
    gen_max: int | None
    width_current: int | None
    width_max: int | None
    replay_counter: int | None


class NvmlGpu(TypedDict, total=False):
    """One GPU as NVML reports it at preflight (None where the board refuses the field)."""

    index: int
    name: str
    uuid: str
    pci_bus_id: str | None
    ecc_mode: int | None
    ecc: EccCounts
    remapped_rows: RemappedRows | None
    retired_pages_pending: int | None
    pcie: PcieLink
    nvlink_active: list[bool] | None
    temperature_c: int | None
    slowdown_temp_c: int | None
    power_w: float | None
    power_limit_w: float | None
    clocks_event_reasons: int | None


class NvmlRecord(TypedDict, total=False):
    """The preflight record (nvml_reader.NvmlReader.record): `error` set when NVML is unavailable."""

    error: str | None
    gpus: list[NvmlGpu]
    shm: ShmInfo | None
    env: dict[str, str]
    driver_version: str
    cuda_driver_version: int | None
    p2p_read: list[list[int | None]] | None


class NvmlGpuSample(TypedDict, total=False):
    """One GPU in one monitoring sample."""

    index: int
    temperature_c: int | None
    power_w: float | None
    power_limit_w: float | None
    clocks_event_reasons: int | None
    sm_clock_mhz: int | None
    pcie_gen: int | None
    pcie_width: int | None
    pcie_replay: int | None
    ecc_sbe_volatile: int | None
    ecc_dbe_volatile: int | None


class NvmlSample(TypedDict):
    t: float
    phase: str
    gpus: list[NvmlGpuSample]


class NvmlEvent(TypedDict, total=False):
    """An NVML event (XID or double-bit ECC); XIDs get the catalogue's words in the report."""

    t: float
    gpu: int | None
    kind: Literal["xid", "dbe"]
    xid: int
    mnemonic: str
    meaning: str
    cause: str
    action: str


class GpuMonitorSummary(TypedDict, total=False):
    """The monitor phase's verdict data for one GPU."""

    index: int
    ecc_dbe_volatile_delta: int
    ecc_sbe_volatile_delta: int
    clocks_event_reasons: list[str]
    temperature_max_c: int
    power_max_w: float
    pcie_replay_delta: int
    pcie_under_load: str


# -- fabric ------------------------------------------------------------------------------------------


class FabricNode(TypedDict, total=False):
    """A node of the world: its label, host, address towards the rendezvous host, and its ranks."""

    label: str
    host: str
    addr: str | None
    node_rank: int
    ranks: list[int]


class FabricRecord(TypedDict):
    """One rank's side of one pair exchange."""

    round: int
    ranks: list[int]
    kind: str
    rank: int
    seconds: float
    wrong: int
    node_seconds: float


class FabricRankDoc(TypedDict):
    """What every rank contributes to the gather."""

    rank: int
    node: int
    node_seconds: float
    records: list[FabricRecord]
    fault: str | None


class FabricRawPair(TypedDict, total=False):
    """A pair as measured: the slower side's time, each side's wrong count (by rank, as a JSON key), and how
    often its round was measured again because it first looked slow (`fabric.run_fabric`)."""

    ranks: list[int]
    kind: str
    seconds: float
    wrong: dict[str, int]
    rechecked: int
    alone: FabricAloneRaw


class FabricAloneRaw(TypedDict):
    """The last recheck of a pair still slow (`fabric.run_fabric`): its time measured alone, and the time of its
    reference pair (same kind, no shared rank) measured alone right after it, in the same window; None: no such pair."""

    seconds: float
    reference: list[int] | None
    reference_seconds: float | None


class FabricAlone(TypedDict):
    """A pair's measurement alone beside its reference's (`FabricAloneRaw`), as bandwidths."""

    busbw: float
    reference_ranks: list[int] | None
    reference_busbw: float | None


class NodeAllReduce(TypedDict):
    node: int
    seconds: float


class GlobalAllReduce(TypedDict):
    seconds: float


class FabricRaw(TypedDict, total=False):
    """The fabric measurement (fabric.run_fabric), identical on every rank; evaluate_fabric judges it."""

    size: int
    nodes: list[FabricNode]
    pairs: list[FabricRawPair]
    node_all_reduce: list[NodeAllReduce]
    global_all_reduce: GlobalAllReduce
    faults: dict[int, str | None]


class FabricPair(TypedDict, total=False):
    """A judged pair in the fabric phase's data."""

    ranks: list[int]
    nodes: list[str]
    kind: str
    size: int
    time_us: float
    algbw: float
    busbw: float
    wrong: dict[int, int]
    reference_busbw: float | None
    slow: bool
    rechecked: int
    alone: FabricAlone


# -- nvshmem probe -----------------------------------------------------------------------------------


class ProbeStep(TypedDict):
    step: str
    ok: bool | None
    detail: str


class ProbeRankSteps(TypedDict, total=False):
    rank: int
    steps: list[ProbeStep]


class ProbeDoc(TypedDict, total=False):
    steps: list[ProbeRankSteps]


# -- the result document -----------------------------------------------------------------------------


class BandwidthCheck(TypedDict, total=False):
    """The collectives phase's all_reduce busbw judgement against the per-model reference."""

    applied: bool
    why: str | None
    measured_gbps: float
    reference_gbps: float | None
    required_gbps: float
    model_pattern: str | None
    source: str


class AllReduceTime(TypedDict, total=False):
    ranks: int
    size: int
    time_us: float | None
    algbw: float
    busbw: float


class FabricNodeVerdict(TypedDict, total=False):
    """One node in the fabric phase's data: its status, its slow or corrupting ranks, its own all_reduce."""

    node: str
    host: str | None
    addr: str | None
    ranks: list[int]
    status: str
    slow_ranks: list[int]
    corrupt_ranks: list[int]
    all_reduce: AllReduceTime | None
    intra_pair_busbw_min: float | None
    inter_pair_busbw_min: float | None


class FabricGlobal(TypedDict, total=False):
    world_size: int
    nodes: int
    ranks_per_node: list[int]
    bus_factor: dict[str, float]
    all_reduce: AllReduceTime | None


#: every key a phase adds beside status/reasons/notes (each phase writes its own subset); the functional
#: form because the fabric phase's `global` is a Python keyword
PhaseData = TypedDict("PhaseData", {
    # preflight
    "record": NvmlRecord,
    "driver_version": str | None,
    "nccl_env": dict[str, str],
    # monitor
    "samples": int,
    "events": list[NvmlEvent],
    "gpus": list[GpuMonitorSummary],
    # collectives
    "rows": list[CollectiveRow],
    "out_of_bounds": int,
    "avg_bus_bandwidth": float,
    "bandwidth_check": BandwidthCheck,
    # gemm
    "ranks": list[GemmResult],
    "mean_gflops": float,
    # soak (and fabric's size)
    "size": int,
    "seconds": float,
    "busbw_min": float,
    "busbw_p1": float,
    "busbw_mean": float,
    "busbw_samples": list[float],
    # nvshmem
    "finding": str,
    "stderr_tail": list[str],
    "steps": list[ProbeRankSteps],
    # fabric
    "size_text": str,
    "slow_fraction": float,
    "global": FabricGlobal,
    "nodes": list[FabricNodeVerdict],
    "pairs": list[FabricPair],
    "slow_ranks": list[int],
    "slow_nodes": list[str],
    "slow_links": list[list[str]],
    "corrupt_ranks": list[int],
    # the P2P-off rerun (launcher.attach_p2p_ab)
    "env": dict[str, str],
}, total=False)


class PhaseDoc(PhaseData, total=False):
    """One phase in the result document."""

    status: str
    reasons: list[str]
    notes: list[str]


class Verdict(TypedDict, total=False):
    status: str
    overall: str
    phases: dict[str, str]
    failed_phases: list[str]
    warned_phases: list[str]
    reasons: list[str]


class RankExit(TypedDict):
    rank: int
    returncode: int | None


class LauncherInfo(TypedDict):
    ranks: list[RankExit]
    log_dir: str | None
    elapsed_s: float


class BurninConfigDoc(TypedDict, total=False):
    """BurninConfig.public_dict(): the settings echoed in the result (sizes as human strings)."""

    backend: str
    world_size: int
    sizes: list[str]
    phases: list[str]
    collectives: list[str]
    iters: int
    warmup_iters: int
    duration: float
    timeout: float
    gemm_seconds: float
    gemm_size: int
    nvshmem_timeout: float
    expected_gpus: int | None
    thresholds_file: str | None
    monitor_interval: float
    p2p_ab: bool
    json: bool
    out: str | None


class ResultDoc(TypedDict, total=False):
    """The burn-in's result document (`--json`: one line, the last of stdout; burnin.json)."""

    tool: str
    schema_version: int
    status: str
    exit_code: int
    summary: str
    backend: str
    world_size: int
    environment: Environment
    devices: list[RankDevice]
    config: BurninConfigDoc
    fault_injection: str | None
    elapsed_s: float
    phases: dict[str, PhaseDoc]
    verdict: Verdict
    launcher: LauncherInfo
