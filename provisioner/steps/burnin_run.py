"""`burnin.run`: ship the self-contained burn-in into the container venv and run it on every GPU."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from pydantic import Field, ValidationError

from provisioner import quoting
from provisioner.burnin.config import ConfigError, parse_sizes
from provisioner.events import Event, Metric
from provisioner.facts import catalog
from provisioner.facts.base import FactUnavailable
from provisioner.facts.models import TorchRuntime
from provisioner.payloads import BurninReport, CollectiveRow, JsonObject
from provisioner.steps.base import DependsOnEarlier, Plan, StepFailed, StepKind, register
from provisioner.steps.burnin_common import (
    REMOTE_DIR,
    BurninCommonParams,
    last_report,
    runtime_problem,
    ship_package,
    venv_runtime,
)
from provisioner.steps.context import StepContext
from provisioner.steps.lxc_common import ensure_inventory

#: the burn-in's `--json` stdout (its result document as one line)
RESULT_LINE = f"{REMOTE_DIR}/result.jsonl"
DRIVER_STAMP = f"{REMOTE_DIR}/last-result.driver"  # the userspace driver the last result ran under


async def _userspace(ctx: StepContext) -> list[str]:
    try:
        libs = await ctx.fact(ctx.container(), catalog.USERSPACE_LIBS)
    except FactUnavailable:
        return []
    return list(libs.versions)


async def _userspace_changed(ctx: StepContext) -> str:
    """Why the last passing result no longer proves this container (day two: the userspace driver was
    replaced since, e.g. after a host driver upgrade); '' when it still does or nothing was recorded."""
    stamp = await ctx.container().run(["sh", "-c", f"cat {DRIVER_STAMP} 2>/dev/null; true"], timeout=60, quiet=True)
    then = stamp.output.split()
    now = await _userspace(ctx)
    if then and now and then != now:
        return f"the last pass ran under userspace {', '.join(then)}, the container now has {', '.join(now)}"
    return ""


class BurninParams(BurninCommonParams):
    sizes: str = Field("8B:256MiB", pattern=r"^[0-9]+(B|K|KiB|M|MiB|G|GiB)?:[0-9]+(B|K|KiB|M|MiB|G|GiB)?$")
    duration_s: int = Field(60, ge=0, le=86400, description="Soak time of the large all_reduce")
    phases: str = Field("preflight,gemm,collectives,soak,nvshmem", pattern=r"^[a-z,]+$")
    timeout_s: int = Field(120, ge=5, le=3600, description="Per-collective timeout that turns a hang into a verdict")
    thresholds: dict[str, float] = Field({}, description="Overrides, e.g. {all_reduce_busbw_gbps: 30}")
    always_run: bool = Field(False, description="Run even when a passing result for this venv exists")


@register
class BurninRun(StepKind[BurninParams]):
    """GEMM stress, NCCL collectives with nccl-tests' formulas, NVSHMEM probe, NVML health: one verdict."""

    kind = "burnin.run"
    title = "Burn-in: GEMM, NCCL collectives, NVSHMEM, NVML health"
    Params = BurninParams

    async def check(self, ctx: StepContext) -> Plan:
        ct = ctx.container()
        result = await ct.run(["sh", "-c", f"test -x {quoting.join([self.params.venv + '/bin/python'])} && echo ok; "
                                           f"cat {REMOTE_DIR}/last-result.json 2>/dev/null | tail -c 200000; true"],
                              timeout=60, quiet=True)
        if not result.ok or not result.lines or result.lines[0] != "ok":
            if ctx.mode == "plan":
                raise DependsOnEarlier(f"the venv {self.params.venv} does not exist yet")
            raise StepFailed(f"no venv at {self.params.venv} in CT {ctx.vmid}", fix="run venv.build first")
        last = "\n".join(result.lines[1:])
        if last and not self.params.always_run:
            try:
                doc = BurninReport.model_validate_json(last)
                if doc.overall == "pass":
                    stale = await _userspace_changed(ctx)
                    if stale:
                        return Plan(changes=[f"run the burn-in again: {stale}"])
                    ctx.state.burnin = doc
                    return Plan.no_change("a passing burn-in result exists (always_run: true to run again)")
            except ValidationError:
                pass
        return Plan(changes=[f"run the burn-in ({self.params.phases}; sizes {self.params.sizes}; "
                             f"soak {self.params.duration_s}s"
                             + (f"; GEMM {self.params.gemm_seconds:g}s per GPU" if self.params.gemm_seconds is not None
                                else "")
                             + ("" if self.params.nvml_gpu_count_check else "; no NVML GPU-count check") + ")"])

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        await ensure_inventory(ctx)
        gpus = len(ctx.state.gpus)
        ct = ctx.container()
        await ship_package(ctx)
        py, runtime = await self._interpreter(ctx)
        async for event in self._interpreter_notes(ctx, py):
            yield event
        backend: str = self.params.backend
        if backend == "auto":
            backend = runtime.backend
            if backend == "gloo":
                yield ctx.warning("torch in the container reports no CUDA GPU or no NCCL: the collectives run "
                                  "with gloo on the CPU (this proves the plumbing, not the GPUs' bandwidth)")
        sizes, duration = self.params.sizes, self.params.duration_s
        extra = self.params.burnin_extra_args(gpus)
        ranks = gpus
        if backend == "gloo" and gpus < 2:
            ranks = 2  # gloo cannot send to itself: two CPU ranks prove the plumbing of a one-GPU host
            yield ctx.info(f"{gpus} GPU: the gloo collectives run with 2 CPU ranks (gloo needs a world size >= 2)")
        # the burn-in's own single-node launcher (provisioner/burnin/launcher.py), not torchrun: it sets
        # the same per-rank environment torchrun does, but forks the ranks from one process that has
        # imported torch once instead of paying torch's import in each of them (seconds per rank)
        argv = [py, "-m", "provisioner.burnin", "--world-size", str(ranks), "--backend", backend, "--sizes", sizes,
                "--duration", str(duration), "--phases", self.params.phases,
                "--timeout", str(self.params.timeout_s), *extra,
                "--out", f"{REMOTE_DIR}/out", "--json"]
        for key, value in sorted(self.params.thresholds.items()):
            argv += ["--threshold", f"{key}={value}"]
        # the result document (one JSON line, ~30 KB) goes to a file, not to the screen: the step
        # prints a summary of it below
        live = LiveProgress.of(self.params)
        script = (f"cd {REMOTE_DIR} && PYTHONPATH={REMOTE_DIR} {quoting.join(argv)} > {RESULT_LINE}")
        result = await ct.run(["sh", "-c", script], timeout=duration + 60 * 30,
                              on_line=lambda line: _metric_from_line(ctx, line, live))
        full = await ct.run(["sh", "-c", f"cat {RESULT_LINE}"], timeout=60, quiet=True)
        doc = last_report(full.lines, BurninReport)
        if doc is None:
            raise StepFailed("the burn-in produced no result", result=result)
        ctx.state.burnin = doc
        await ct.write_file(f"{REMOTE_DIR}/last-result.json", json.dumps(doc.dump()).encode())
        await ct.write_file(DRIVER_STAMP, (" ".join(await _userspace(ctx)) + "\n").encode())
        yield ctx.info(f"burn-in verdict: {doc.overall}")
        for line in summary_lines(doc):
            yield ctx.info(line)

    async def _interpreter(self, ctx: StepContext) -> tuple[str, TorchRuntime]:
        """The venv's own Python and what its torch reports; the step fails when that torch cannot run
        the burn-in (the burn-in proves the venv venv.build built, with no other interpreter)."""
        py = self.params.venv_python
        runtime = await venv_runtime(ctx, self.params)
        problem = runtime_problem(runtime)
        if problem is not None or runtime is None:
            raise StepFailed(f"the venv's Python {py} {problem}: the burn-in cannot run in this venv",
                             fix="rebuild the venv (venv.build, recreate: true) with a full torch build")
        return py, runtime

    async def _interpreter_notes(self, ctx: StepContext, py: str) -> AsyncIterator[Event]:
        yield ctx.info(f"burn-in with {py}: sizes {self.params.sizes}, soak {self.params.duration_s}s"
                       + ("" if self.params.nvml_gpu_count_check else ", no NVML GPU-count check"))

    async def verify(self, ctx: StepContext) -> None:
        doc = ctx.state.burnin
        if doc is None or doc.overall != "pass":
            reasons = list(doc.verdict.reasons) if doc is not None else []
            said = "; ".join(reasons[:5]) or (doc.verdict.model_dump_json()[:400] if doc is not None else "no report")
            raise StepFailed("burn-in failed: " + said, evidence=reasons[:20],
                             fix="read the burn-in report (nccl-tests table and verdict) beside the run log")

    def resolved(self, ctx: StepContext) -> JsonObject:
        doc = ctx.state.burnin
        return {"burnin": {"verdict": doc.overall, "summary": doc.summary}} if doc is not None else {}


def summary_lines(doc: BurninReport) -> list[str]:
    """What a person reads of a result document: verdict, world, backend, sizes, soak, and the busbw
    at the largest size of each collective (the document itself is in the container)."""
    cfg = doc.config
    raw_sizes = cfg.get("sizes")
    sizes = raw_sizes if isinstance(raw_sizes, list) else []
    soak = cfg.get("duration", cfg.get("duration_s"))
    lines = [f"burn-in: {doc.overall}; world size {doc.world_size or '?'}, backend {doc.backend or '?'}"
             + (f", sizes {sizes[0]}..{sizes[-1]} ({len(sizes)})" if sizes else "")
             + (f", soak {soak}s" if soak is not None else "")]
    largest: dict[str, CollectiveRow] = {}
    for row in doc.rows:
        best = largest.get(row.collective)
        # the largest size; of its two rows the out-of-place one (nccl-tests' first columns)
        if best is None or (row.size, not row.inplace) > (best.size, not best.inplace):
            largest[row.collective] = row
    if largest:
        lines.append("busbw at the largest size: " + ", ".join(
            f"{name} {_size(row.size)} {row.busbw:.3g} GB/s" for name, row in largest.items()))
    if doc.summary:
        lines.append(f"summary: {doc.summary[:300]}")
    return lines


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"


@dataclass
class LiveProgress:
    """What the live lines are measured against: the phases asked for, the sizes per collective, the soak."""

    phases: list[str]
    sizes: int
    soak_s: int
    rows: int = 0

    @classmethod
    def of(cls, params: Any) -> LiveProgress:
        try:
            sizes = len(parse_sizes(params.sizes))
        except ConfigError:
            sizes = 0
        return cls([p for p in params.phases.split(",") if p], sizes, int(params.duration_s))


#: Progress tasks the burn-in emits (the wizard's Burn-in page reads them): the phase (completed = phases
#: before it, total = phases asked for), the sizes done in the current collective, the soak's seconds
PHASE_TASK, SIZES_TASK, SOAK_TASK = "burn-in phase: ", "burn-in sizes: ", "burn-in soak"


def _metric_from_line(ctx: StepContext, line: str, live: LiveProgress | None = None) -> None:
    """nccl-tests style rows become live busbw metrics for the TUI's chart; with `live`, the burn-in's
    `[burnin] phase NAME` lines (worker.py `_set_phase`) and the rows become Progress events."""
    parts = line.split()
    if len(parts) >= 9 and parts[0].isdigit() and parts[1].isdigit():
        try:
            ctx.bus.emit(Metric(host=ctx.host, name="busbw", value=float(parts[7]),
                                labels={"size": parts[0], "collective": ctx.state.burnin_collective}))
        except ValueError:
            return
        if live is not None and live.sizes:
            live.rows += 1
            ctx.bus.emit(ctx.progress(SIZES_TASK + (ctx.state.burnin_collective or "collective"),
                                      min(live.rows, live.sizes), live.sizes, "sizes"))
    elif line.startswith("# Collective test starting:") or line.startswith("# collective:"):
        ctx.state.burnin_collective = line.split(":", 1)[1].strip()
        if live is not None:
            live.rows = 0
    elif live is not None and line.startswith("[burnin] phase "):
        name = line.removeprefix("[burnin] phase ").strip()
        done = live.phases.index(name) if name in live.phases else len(live.phases)
        ctx.bus.emit(ctx.progress(PHASE_TASK + name, done, max(len(live.phases), 1), "phases"))
        if name == "soak" and live.soak_s > 0:
            ctx.bus.emit(ctx.progress(SOAK_TASK, 0, live.soak_s, "s"))
