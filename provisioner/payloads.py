"""The typed payloads that cross a step boundary or reach a face (a page, the export, a run's `resolved`).

A step produces one of these from what it read (a JSON document in the container, a probe's answer), keeps
it in `RunState`, and every later reader (another step, `screens/pages/`, `provisioner/export/`) reads the
model, never a dict. Each model keeps keys it does not name (`extra="allow"`): a newer burn-in or runtime file
read by an older engine round-trips unchanged, and `dump()` writes back exactly the keys that were read or set.

Layering: this module imports only pydantic; steps, the export, the runner and the faces import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

#: a JSON object whose keys this engine does not interpret (kept as read)
JsonObject = dict[str, object]


def object_at(record: Mapping[str, object], key: str) -> Mapping[str, object]:
    """The JSON object at `key` of `record` ({} when absent or not an object)."""
    value = record.get(key)
    return value if isinstance(value, dict) else {}


class Payload(BaseModel):
    model_config = ConfigDict(extra="allow")

    def dump(self) -> JsonObject:
        """The JSON document again: the keys that were read or set, unknown ones included."""
        return self.model_dump(mode="json", exclude_unset=True)


# --- driver.userspace ------------------------------------------------------------------------------------
class DriverSourceRecord(Payload):
    """Where `driver.userspace` found the host's installer (the first published candidate it probed)."""

    layout: Literal["XFree86", "tesla"]  # NVIDIA's two download trees (consumer/XFree86, datacenter/tesla)
    version: str
    arch: str
    url: str
    checksum_url: str | None = None


# --- venv.build / export.install ------------------------------------------------------------------------
class VenvLockGroup(Payload):
    """One `uv pip compile --generate-hashes` lock: the torch group (PyTorch index) or the extras (PyPI)."""

    requirements: list[str] = []
    index_url: str | None = None
    torch_index_url: str | None = None  # the PyTorch index the torch family is pinned to (uv's explicit index)
    python: str | None = None
    text: str = ""


class VenvLock(Payload):
    """`resolved.venv_lock`: the hashed lock of each group, by group name."""

    groups: dict[str, VenvLockGroup] = {}


class RuntimeGpu(Payload):
    """A GPU the venv's torch was proven on (venv.build's verify; export.install's without the name)."""

    index: int
    name: str = ""
    compute_cap: str | None = None


class VenvRuntime(Payload):
    """The venv's `runtime.json`: what was asked for, what was installed, and (once verified) what torch reports."""

    built_by: str | None = None
    request: JsonObject = {}
    verified: bool = False
    torch: str | None = None
    cuda: str | None = None
    index_url: str | None = None
    python: str | None = None
    driver: str | None = None
    arch_list: list[str] = []
    packages: list[str] = []
    gpus: list[RuntimeGpu] = []
    export_sha256: str | None = None
    #: `resolved.toolchain`: uv {version, source} and Python {version, provided_by} the venv was built with
    toolchain: JsonObject = {}

    def recorded(self) -> JsonObject:
        """What venv.build keeps in the playbook's `resolved.runtime`."""
        return {"torch": self.torch, "cuda": self.cuda, "index_url": self.index_url, "python": self.python,
                "driver": self.driver}


# --- burnin.run / burnin.multinode ----------------------------------------------------------------------
class CollectiveRow(Payload):
    """One nccl-tests row (provisioner/burnin/report.py): one collective, one size, one placement."""

    collective: str
    size: int
    count: int = 0
    type: str = ""
    redop: str = ""
    root: int = -1
    inplace: bool = False
    time_us: float = 0.0
    algbw: float = 0.0
    busbw: float = 0.0
    wrong: float | None = None


class GemmRank(Payload):
    """One rank's (one GPU's) GEMM stress result."""

    rank: int
    device: str = ""
    name: str = ""
    gflops: float | None = None
    mismatches: int = 0
    error: str | None = None


class BurninDevice(Payload):
    """The device one rank ran on (the "# Using devices" lines of the nccl-tests table)."""

    rank: int
    host: str = ""
    device_index: int = -1
    bus: str = ""
    name: str = ""


class FabricNode(Payload):
    """One node of a multi-node burn-in (provisioner/burnin/fabric_eval.py)."""

    node: str | None = None
    status: str | None = None


class PhaseReport(Payload):
    """A phase's status, its reasons (why it failed or warned) and notes; the phase's own data as extra keys."""

    status: str = "skip"
    reasons: list[str] = []
    notes: list[str] = []


class GemmPhase(PhaseReport):
    ranks: list[GemmRank] = []
    mean_gflops: float | None = None


class CollectivesPhase(PhaseReport):
    rows: list[CollectiveRow] = []
    avg_bus_bandwidth: float = 0.0


class FabricPhase(PhaseReport):
    nodes: list[FabricNode] = []


class BurninPhases(Payload):
    """The phases the report names; others (a newer worker's) stay as extra keys."""

    preflight: PhaseReport | None = None
    gemm: GemmPhase | None = None
    collectives: CollectivesPhase | None = None
    soak: PhaseReport | None = None
    nvshmem: PhaseReport | None = None
    monitor: PhaseReport | None = None
    fabric: FabricPhase | None = None


class BurninVerdict(Payload):
    """`verdict`: pass/fail, each phase's status, and the reasons of the failed phases."""

    status: str = "unknown"
    overall: str = "unknown"
    phases: dict[str, str] = {}
    failed_phases: list[str] = []
    warned_phases: list[str] = []
    reasons: list[str] = []


class BurninReport(Payload):
    """The burn-in's result document (`python -m provisioner.burnin --json`, its last stdout line)."""

    tool: str = "provisioner.burnin"
    schema_version: int = 1
    status: str = "unknown"
    summary: str = ""
    backend: str = ""
    world_size: int = 0
    environment: JsonObject = {}
    devices: list[BurninDevice] = []
    config: JsonObject = {}
    phases: BurninPhases = BurninPhases()
    verdict: BurninVerdict = BurninVerdict()

    @model_validator(mode="before")
    @classmethod
    def _legacy_verdict(cls, data: Any) -> Any:
        """An older `last-result.json` says `"verdict": "pass"` or `"passed": true` instead of the object."""
        if not isinstance(data, dict):
            return data
        verdict = data.get("verdict")
        if verdict is None and data.get("passed") is not None:
            verdict = "pass" if data.get("passed") is True else "fail"
        if isinstance(verdict, str):
            data = {**data, "verdict": {"status": verdict, "overall": verdict}}
        return data

    @property
    def overall(self) -> str:
        """pass/fail (the verdict's `overall`, else the document's `status`)."""
        if self.verdict.overall != "unknown":
            return self.verdict.overall
        return self.status

    @property
    def rows(self) -> list[CollectiveRow]:
        return list(self.phases.collectives.rows) if self.phases.collectives is not None else []

    @property
    def fabric_nodes(self) -> list[FabricNode]:
        return list(self.phases.fabric.nodes) if self.phases.fabric is not None else []


class MultinodeReport(BurninReport):
    """This node's copy of a multi-node burn-in's report (the same document; `phases.fabric` is filled)."""


# --- lxc.create ------------------------------------------------------------------------------------------
class TemplateRecord(Payload):
    """`resolved.template`: the template's file name and the sha512 PVE's appliance index (aplinfo) lists
    for it (None for a template the index does not list)."""

    name: str
    sha512: str | None = None


# --- the playbook's `resolved` section, as a step reads it -----------------------------------------------
class Resolved(Payload):
    """What earlier runs recorded (the playbook's `resolved`) plus what this run's steps add: the sections a
    step reads back have types; the others (`host_driver`, `gpus`, `imported`, ...) stay as recorded."""

    vmid: int | None = None  # lxc.create: the id it took from /cluster/nextid
    driver: JsonObject | None = None  # driver.userspace: installer file name, url, sha256 (and where it was known)
    torch: JsonObject | None = None  # torch.resolve: TorchChoice.recorded() (variant, index_url, versions, request)
    venv_lock: VenvLock | None = None  # venv.build: the hashed locks a replay installs again
    runtime: JsonObject | None = None  # venv.build: VenvRuntime.recorded()
    burnin: JsonObject | None = None  # burnin.run: {verdict, summary}
    burnin_multinode: JsonObject | None = None  # burnin.multinode: {verdict, world_size, nodes}
    toolchain: JsonObject | None = None  # venv.build: uv {version, source}, Python {version, provided_by}
    template: TemplateRecord | None = None  # lxc.create: the template's file name and its aplinfo sha512

    @classmethod
    def from_recorded(cls, recorded: Mapping[str, object]) -> Resolved:
        """The model of a recorded section; a section that does not parse (edited by hand) is left out, as
        if it had not been recorded: the step that writes it resolves it afresh."""
        data = dict(recorded)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            bad = {err["loc"][0] for err in exc.errors() if err["loc"]}
            return cls.model_validate({k: v for k, v in data.items() if k not in bad})

    def merged(self, more: Mapping[str, object]) -> Resolved:
        """This record with the sections of `more` replacing its own."""
        return Resolved.from_recorded({**self.dump(), **more})
