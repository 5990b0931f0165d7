"""`gpu.detect`: every GPU as the container sees it, with compute capability and the P2P matrix."""

from __future__ import annotations

from collections.abc import AsyncIterator

from provisioner.events import Event
from provisioner.facts import smi_topo
from provisioner.payloads import JsonObject
from provisioner.steps.base import DependsOnEarlier, Params, Plan, StepFailed, StepKind, parse_output, register
from provisioner.steps.context import StepContext
from provisioner.steps.gpu_common import verify_smi
from provisioner.steps.lxc_common import ensure_inventory
from provisioner.steps.state import GpuDetection


class DetectParams(Params):
    topology: bool = True


@register
class GpuDetect(StepKind[DetectParams]):
    """Read-only: index, name, UUID, PCI bus id, compute capability, memory; P2P matrix for the burn-in."""

    kind = "gpu.detect"
    title = "Detect GPUs inside the container"
    Params = DetectParams

    async def check(self, ctx: StepContext) -> Plan:
        inv = await ensure_inventory(ctx)
        try:
            gpus = await verify_smi(ctx, inv.driver_version)
        except StepFailed:
            if ctx.mode == "plan":
                raise DependsOnEarlier("the container's driver userspace is not in place yet") from None
            raise
        detected = GpuDetection(gpus=gpus)
        if self.params.topology:
            ct = ctx.container().for_facts()  # parsed output: no login-shell noise
            topo = await ct.run(["nvidia-smi", "topo", "-m"], timeout=60, quiet=True)
            p2p = await ct.run(["nvidia-smi", "topo", "-p2p", "r"], timeout=60, quiet=True)
            detected = detected.model_copy(update={
                "topology": parse_output(topo, smi_topo.parse_topo_matrix) if topo.ok else None,
                "p2p_read": parse_output(p2p, smi_topo.parse_topo_p2p) if p2p.ok else None})
        ctx.state.detection = detected
        ccs = sorted({str(g.compute_cap) for g in gpus})
        return Plan.no_change(f"{len(gpus)} GPU(s) visible in CT {ctx.vmid}, compute capability {', '.join(ccs)}")

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        return
        yield  # pragma: no cover

    def resolved(self, ctx: StepContext) -> JsonObject:
        det = ctx.state.detection
        keys = {"index", "name", "uuid", "pci_bus_id", "compute_cap", "memory_mib"}
        return {"container_gpus": [g.model_dump(include=keys) for g in det.gpus]} if det else {"container_gpus": []}
