"""`torch.resolve`: choose the torch version and CUDA variant for every GPU, the driver, Python, arch and glibc."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

from pydantic import Field, ValidationError

from provisioner.events import Event
from provisioner.exitcodes import ExitCode
from provisioner.facts import catalog
from provisioner.facts.base import FactUnavailable
from provisioner.facts.models import Gpu
from provisioner.payloads import JsonObject
from provisioner.resolver import Resolution, ResolveError, ResolveRequest, resolve
from provisioner.resolver.build_data import PYTORCH_INDEX
from provisioner.steps.base import Params, Plan, StepFailed, StepKind, register
from provisioner.steps.context import StepContext
from provisioner.steps.lxc_common import ensure_inventory
from provisioner.steps.state import TorchChoice


class ResolveParams(Params):
    torch: str | None = Field("==2.11.0", description="PEP 440 specifier for torch (None: newest that works)")
    python: str = Field("3.12", pattern=r"^3\.[0-9]{1,2}$")
    prefer: str = Field("lowest-cuda", pattern=r"^(lowest-cuda|newest-cuda)$")
    variant: str | None = Field(None, pattern=r"^(cu[0-9]{3}|cpu)$", description="Override the resolver's choice")


def _gpus_for_resolve(ctx: StepContext) -> list[Gpu]:
    return ctx.state.gpus


def _capabilities(gpus: list[Gpu]) -> list[str]:
    missing = [str(g.index) for g in gpus if not g.compute_cap]
    if missing:
        raise StepFailed(f"nvidia-smi reports no compute capability for GPU {', '.join(missing)}",
                         fix="the resolver needs every GPU's compute capability: upgrade the driver "
                             "(compute_cap is queryable from R510) or check the GPU with nvidia-smi -q")
    if not gpus:
        raise StepFailed("no GPU to resolve a PyTorch build for", fix="run gpu.detect; pass the GPUs to the container")
    return [str(g.compute_cap) for g in gpus]


async def _platform(ctx: StepContext) -> tuple[str, str | None, list[str]]:
    """CPU arch and glibc as the container sees them (arch falls back to the node: LXC shares its kernel)."""
    notes: list[str] = []
    ct = ctx.container()
    try:
        arch = await ctx.fact(ct, catalog.ARCH)
    except FactUnavailable:
        arch = await ctx.fact(ctx.node, catalog.ARCH)
    arch = {"arm64": "aarch64", "amd64": "x86_64"}.get(arch, arch)
    if arch not in ("x86_64", "aarch64"):
        raise StepFailed(f"PyTorch publishes CUDA wheels for x86_64 and aarch64 only; this machine is {arch}",
                         exit_code=ExitCode.NO_SOLUTION)
    glibc: str | None = None
    try:
        libc = await ctx.fact(ct, catalog.LIBC)
    except FactUnavailable:
        notes.append("glibc of the container unknown yet (container not running): assumed modern")
    else:
        if libc.family != "glibc":
            raise StepFailed(f"the container's C library is {libc.family} {libc.version}; PyTorch wheels need glibc",
                             fix="use a glibc-based template (Debian, Ubuntu, Rocky) for the container", exit_code=ExitCode.NO_SOLUTION)
        glibc = ".".join(libc.version.split(".")[:2])
    return arch, glibc, notes


def _rejected_notes(outcome: Resolution | ResolveError, limit: int = 8) -> list[str]:
    """Rejections that explain the choice first (same torch version), then the rest; counts what is left."""
    chosen = outcome.torch if isinstance(outcome, Resolution) else None
    rejected = sorted(outcome.rejected, key=lambda r: (r.torch != chosen, r.reason.startswith("does not match")))
    notes = [f"rejected {r.variant} {r.torch or ''}: {r.reason}".replace("  ", " ") for r in rejected[:limit]]
    if len(rejected) > limit:
        notes.append(f"… and {len(rejected) - limit} more rejected candidates (provisioner resolve --json lists all)")
    return notes


@register
class TorchResolve(StepKind[ResolveParams]):
    """Choose torch version and CUDA variant from every GPU's capability, the driver, Python, arch and glibc."""

    kind = "torch.resolve"
    title = "Pick the PyTorch wheel"
    Params = ResolveParams

    def _request(self) -> dict[str, object]:
        return self.params.model_dump()

    def _resolve(self, base: Mapping[str, object], torch: str | None) -> Resolution | ResolveError:
        try:
            request = ResolveRequest.model_validate({**base, "torch": torch})
        except ValidationError as exc:
            message = "; ".join(str(e.get("msg", "invalid")).removeprefix("Value error, ") for e in exc.errors())
            raise StepFailed(f"no PyTorch build fits this host (invalid_input): {message}",
                             fix="correct the host facts or the step's parameters", exit_code=ExitCode.USAGE) from None
        return resolve(request)

    async def check(self, ctx: StepContext) -> Plan:
        inv = await ensure_inventory(ctx)
        ccs = _capabilities(_gpus_for_resolve(ctx))
        arch, glibc, notes = await _platform(ctx)
        base = {"cc": ccs, "driver": inv.driver_version, "python": self.params.python, "arch": arch,
                "glibc": glibc, "prefer": self.params.prefer}
        outcome: Resolution | ResolveError | None = None
        recorded = ctx.resolved.torch or {}
        if recorded.get("request") == self._request() and recorded.get("torch") and recorded.get("variant"):
            # Replay: keep the recorded choice while it still fits this host.
            again = self._resolve(base, f"=={recorded['torch']}")
            if isinstance(again, Resolution) and again.variant == recorded["variant"]:
                outcome = again
                notes.append(f"kept the recorded choice torch {recorded['torch']} ({recorded['variant']}) "
                             "from the playbook's resolved section")
            else:
                why = again.message if isinstance(again, ResolveError) else f"resolver now picks {again.variant}"
                notes.append(f"the recorded choice torch {recorded['torch']} ({recorded['variant']}) "
                             f"no longer fits: {why}; resolving afresh")
        if outcome is None:
            outcome = self._resolve(base, self.params.torch)
        if isinstance(outcome, ResolveError):
            raise StepFailed(f"no PyTorch build fits this host ({outcome.code}): {outcome.message}",
                             fix=outcome.fix, evidence=list(outcome.reasons) + _rejected_notes(outcome), exit_code=ExitCode.NO_SOLUTION)
        if self.params.variant and self.params.variant != outcome.variant:
            outcome = outcome.model_copy(update={
                "reasons": [f"variant overridden by the playbook: {self.params.variant} "
                            f"(resolver chose {outcome.variant})", *outcome.reasons],
                "variant": self.params.variant, "index_url": PYTORCH_INDEX + self.params.variant})
        ctx.state.torch = TorchChoice(resolution=outcome, python=self.params.python, request=self._request())
        head = f"torch {outcome.torch}" + (f" + torchvision {outcome.torchvision}" if outcome.torchvision
                                           else "") + f" from {outcome.index_url} ({outcome.variant})"
        lines = [head, *[f"because: {r}" for r in outcome.reasons]]
        lines += [f"warning: {w}" for w in outcome.warnings]
        if not outcome.verified:
            lines.append("warning: this choice rests on unverified wheel data (see the resolver's data file)")
        lines += notes + _rejected_notes(outcome)
        lines += [f"{o.tool} would pick {o.variant} torch {o.torch}: {o.note}" for o in outcome.others]
        return Plan.no_change(*lines)

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        return
        yield  # pragma: no cover

    def resolved(self, ctx: StepContext) -> JsonObject:
        return {"torch": ctx.state.torch.recorded()} if ctx.state.torch is not None else {}
