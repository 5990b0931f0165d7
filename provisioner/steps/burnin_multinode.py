"""`burnin.multinode`: this node's share of a burn-in across the nodes of a fleet run.

In `provisioner replay PLAYBOOK --inventory hosts.yaml --parallel N` every host runs this step at
about the same time: each starts one torchrun agent in its container with `--nnodes NODES
--rdzv-backend c10d --rdzv-endpoint ENDPOINT`, the agents meet at the rendezvous (the first to
arrive waits up to `join_timeout_s` for the others) and run `python -m provisioner.burnin` as
NODES x GPUs ranks, with the fabric phase (per-node and per-pair results). Rank 0 writes the verdict;
the other nodes' local rank 0 prints the same verdict, so every host's step knows it. The
Slurm script `playbooks/fleet/slurm-burnin.sbatch` starts the same entry.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

from pydantic import Field, field_validator

from provisioner import quoting, validate
from provisioner.events import Event
from provisioner.payloads import JsonObject, MultinodeReport
from provisioner.steps.base import DependsOnEarlier, Plan, StepFailed, StepKind, register
from provisioner.steps.burnin_common import (
    REMOTE_DIR,
    TOOL,
    BurninCommonParams,
    last_report,
    runtime_problem,
    ship_package,
    venv_runtime,
)
from provisioner.steps.context import StepContext
from provisioner.steps.lxc_common import ensure_inventory

LAST_RESULT = f"{REMOTE_DIR}/last-multinode-result.json"
_ENDPOINT_RE = re.compile(r"^(?P<host>[A-Za-z0-9.:\[\]-]+):(?P<port>\d{1,5})$")
_SIZE = r"[0-9]+(B|K|KiB|M|MiB|G|GiB)?"


class MultinodeParams(BurninCommonParams):
    nodes: int = Field(ge=2, le=4096, description="Nodes (torchrun agents) that must join the rendezvous")
    rdzv_endpoint: str = Field(description="host:port of the c10d rendezvous, reachable from every container "
                                           "(the first node's container address)")
    rdzv_id: str = Field("gpu-burnin", pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="Job id shared by the nodes")
    nproc_per_node: int | None = Field(None, ge=1, le=64, description="Ranks per node (default: its GPUs)")
    sizes: str = Field("8B:1GiB", pattern=rf"^{_SIZE}:{_SIZE}$")
    phases: str = Field("preflight,gemm,collectives,fabric,soak", pattern=r"^[a-z,]+$")
    duration_s: int = Field(60, ge=0, le=86400, description="Soak time of the large all_reduce")
    timeout_s: int = Field(300, ge=5, le=3600, description="Per-collective timeout that turns a hang into a verdict")
    join_timeout_s: int = Field(900, ge=10, le=86400, description="How long the first node waits for the others")
    socket_ifname: str | None = Field(None, pattern=r"^[A-Za-z0-9_.:-]{1,15}$",
                                      description="NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME (default: the tools' own choice)")
    thresholds: dict[str, float] = Field({}, description="Overrides, e.g. {fabric_slow_fraction: 0.7}")
    always_run: bool = Field(False, description="Run even when a passing multi-node result exists on this node")

    @field_validator("rdzv_endpoint")
    @classmethod
    def _endpoint(cls, v: str) -> str:
        m = _ENDPOINT_RE.match(v)
        if not m or not 0 < int(m.group("port")) < 65536:
            raise ValueError("rdzv_endpoint must be HOST:PORT")
        validate.host_address(m.group("host").strip("[]"))
        return v

    @field_validator("thresholds")
    @classmethod
    def _thresholds(cls, v: dict[str, float]) -> dict[str, float]:
        for key in v:
            if not re.fullmatch(r"[a-z_]{1,64}", key):
                raise ValueError(f"threshold name {key!r}: lower-case letters and _ only")
        return v


def torchrun_argv(p: MultinodeParams, python: str, nproc: int, backend: str) -> list[str]:
    extra = p.burnin_extra_args(nproc)
    argv = [python, "-m", "torch.distributed.run", f"--nnodes={p.nodes}", f"--nproc-per-node={nproc}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={p.rdzv_endpoint}", f"--rdzv-id={p.rdzv_id}",
            f"--rdzv-conf=join_timeout={p.join_timeout_s}", "--max-restarts=0",
            "-m", "provisioner.burnin", "--backend", backend, "--sizes", p.sizes, "--duration", str(p.duration_s),
            "--phases", p.phases, "--timeout", str(p.timeout_s), *extra, "--out", f"{REMOTE_DIR}/multinode", "--json"]
    for key, value in sorted(p.thresholds.items()):
        argv += ["--threshold", f"{key}={value}"]
    return argv


@register
class BurninMultinode(StepKind[MultinodeParams]):
    """NCCL across nodes through torchrun's c10d rendezvous; per-node and per-pair results; one verdict."""

    kind = "burnin.multinode"
    title = "Burn-in across nodes: torchrun c10d rendezvous, NCCL collectives, per-node and per-pair results"
    Params = MultinodeParams

    async def check(self, ctx: StepContext) -> Plan:
        if await venv_runtime(ctx, self.params) is None:
            if ctx.mode == "plan":
                raise DependsOnEarlier(f"the venv {self.params.venv} does not exist yet")
            raise StepFailed(f"no venv at {self.params.venv} in CT {ctx.vmid}", fix="run venv.build first")
        if not self.params.always_run:
            ct = ctx.container()
            last = await ct.run(["sh", "-c", f"cat {quoting.join([LAST_RESULT])} 2>/dev/null | tail -c 400000; true"],
                                timeout=60, quiet=True)
            doc = last_report(last.lines, MultinodeReport, TOOL)
            if doc is not None and doc.overall == "pass" and doc.world_size >= self.params.nodes:
                ctx.state.burnin_multinode = doc
                return Plan.no_change(f"a passing {self.params.nodes}-node burn-in result exists "
                                      f"(always_run: true to run again)")
        return Plan(changes=[f"join a {self.params.nodes}-node burn-in at {self.params.rdzv_endpoint} "
                             f"(id {self.params.rdzv_id}; {self.params.phases})"])

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        await ensure_inventory(ctx)
        nproc = self.params.nproc_per_node or len(ctx.state.gpus)
        if nproc < 1:
            raise StepFailed("no GPUs visible in the container", fix="run gpu.detect; check the passthrough")
        ct = ctx.container()
        await ship_package(ctx)
        py, runtime = self.params.venv_python, await venv_runtime(ctx, self.params)
        problem = runtime_problem(runtime)
        if problem is not None or runtime is None:
            raise StepFailed(f"the venv's Python {py} {problem}: the burn-in cannot run in this venv "
                             f"(CT {ctx.vmid})", fix="rebuild the venv (venv.build, recreate: true) with a full "
                                                     "torch build")
        backend: str = self.params.backend
        if backend == "auto":
            backend = runtime.backend
            if backend == "gloo":
                yield ctx.warning("torch in the container reports no CUDA GPU or no NCCL: the collectives run "
                                  "with gloo on the CPU (this proves the plumbing, not the fabric's bandwidth)")
        argv = torchrun_argv(self.params, py, nproc, backend)
        env = [f"PYTHONPATH={REMOTE_DIR}", "OMP_NUM_THREADS=1"]
        if self.params.socket_ifname:
            env += [f"NCCL_SOCKET_IFNAME={self.params.socket_ifname}", f"GLOO_SOCKET_IFNAME={self.params.socket_ifname}"]
        yield ctx.info(f"joining the rendezvous at {self.params.rdzv_endpoint}: {self.params.nodes} nodes x "
                       f"{nproc} ranks ({backend})")
        script = f"cd {REMOTE_DIR} && exec env {quoting.join(env)} {quoting.join(argv)}"
        budget = self.params.join_timeout_s + self.params.duration_s + 60 * 30
        result = await ct.run(["sh", "-c", script], timeout=budget)
        doc = last_report(result.lines, MultinodeReport, TOOL)
        if doc is None:
            raise StepFailed("the multi-node burn-in produced no result on this node", result=result,
                             fix="check that every node runs this step at the same time and can reach "
                                 f"{self.params.rdzv_endpoint}")
        ctx.state.burnin_multinode = doc
        await ct.write_file(LAST_RESULT, json.dumps(doc.dump()).encode())
        nodes = ", ".join(f"{n.node}: {n.status}" for n in doc.fabric_nodes)
        yield ctx.info(f"multi-node burn-in verdict: {doc.overall} (world size {doc.world_size}"
                       + (f"; nodes {nodes}" if nodes else "") + ")")

    async def verify(self, ctx: StepContext) -> None:
        doc = ctx.state.burnin_multinode
        if doc is None or doc.overall != "pass":
            reasons = list(doc.verdict.reasons) if doc is not None else []
            raise StepFailed("multi-node burn-in failed: " + ("; ".join(reasons[:5]) or "no verdict"),
                             evidence=reasons[:20], fix="read phases.fabric (nodes, pairs) in the burn-in report")
        if doc.world_size < self.params.nodes:
            raise StepFailed(f"the burn-in ran {doc.world_size} ranks, fewer than {self.params.nodes} nodes")

    def resolved(self, ctx: StepContext) -> JsonObject:
        doc = ctx.state.burnin_multinode
        if doc is None:
            return {}
        return {"burnin_multinode": {"verdict": doc.overall, "world_size": doc.world_size,
                                     "nodes": [n.node for n in doc.fabric_nodes]}}
