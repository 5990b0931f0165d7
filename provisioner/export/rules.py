"""The resolver's rules applied to an import's target host: one source of the rules (`provisioner.resolver`).

`provisioner resolve` refuses a build on a host whose driver is below the build's floor (its CUDA
minor-version floor, the compressed-fatbin floor 550.54.14), below a GPU generation's floor (Blackwell needs
R570) or above a generation's last branch, or whose GPUs the build has no kernels for. `import` asks the same
solver about the exported build (its torch release and CUDA variant) on the target host's GPUs and driver,
before any change, and refuses with the solver's own reasons.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from provisioner.export.models import HostNeeds, RuntimeProof, floor_problem
from provisioner.resolver.data import load_data
from provisioner.resolver.models import ResolveRequest
from provisioner.resolver.solver import Host, candidates, evaluate

#: failures that speak of this host (the pin and Python are the export's own: it was proven with them)
HOST_KINDS = ("driver_new", "driver_old", "platform", "glibc", "gpu")


def import_problems(runtime: RuntimeProof, host: HostNeeds, ccs: Sequence[str], driver: str) -> list[str]:
    """Why the exported build cannot run on a host with GPUs of capability `ccs` and `driver` (empty: it
    can): the export's own floor (host.json), then every failure the resolver finds for that build there."""
    problems: list[str] = []
    floor = floor_problem(driver, host)
    if floor:
        problems.append(floor)
    if not ccs:
        return problems
    patch = runtime.torch.split("+")[0]
    try:
        request = ResolveRequest.model_validate({"cc": list(ccs), "driver": driver, "arch": host.machine,
                                                 "python": ".".join(runtime.python.split(".")[:2]),
                                                 "torch": f"=={patch}"})
    except ValidationError as exc:
        return [*problems, "the host's facts do not parse for the resolver: "
                + "; ".join(str(e.get("msg", "invalid")) for e in exc.errors())]
    data = load_data()
    target = Host.of(request, data)
    release = ".".join(patch.split(".")[:2])
    for cand in candidates(data, target):
        if cand.release.version != release or cand.variant.variant != runtime.variant:
            continue
        for failure in evaluate(cand, target, data).failures:
            if failure.kind in HOST_KINDS and failure.message not in problems:
                problems.append(f"torch {runtime.torch} ({runtime.variant}) {failure.message}")
    return problems
