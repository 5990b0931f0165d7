"""What a Python's torch can do in the container: CUDA visible, NCCL/gloo built in (one probe, one parser).

The burn-in picks its backend from this, as it would on any host: NCCL when torch sees GPUs and was
built with NCCL, gloo on the CPU otherwise (a CPU-only torch reports `is_nccl_available() == False`,
https://pytorch.org/docs/stable/distributed.html#torch.distributed.is_nccl_available).
"""

from __future__ import annotations

import json

from provisioner.facts.base import Fact
from provisioner.facts.models import ParseError, TorchRuntime

MARKER = "@@gpu-provisioner-torch@@"

PROBE = f"""
import json
out = {{"imported": False, "distributed": False, "cuda_available": False, "nccl": False, "gloo": False}}
try:
    import torch
    out["imported"] = True
    out["version"] = str(torch.__version__)
    out["cuda_available"] = bool(torch.cuda.is_available())
    import torch.distributed as dist
    out["distributed"] = bool(dist.is_available())
    out["nccl"] = bool(out["distributed"] and dist.is_nccl_available())
    out["gloo"] = bool(out["distributed"] and dist.is_gloo_available())
except Exception as exc:
    out["error"] = type(exc).__name__ + ": " + str(exc)
print({MARKER!r} + json.dumps(out))
"""


def parse_torch_runtime(text: str) -> TorchRuntime:
    """The marked JSON line of `PROBE`; any other output (warnings, profile noise) is ignored."""
    for line in reversed(text.splitlines()):
        if line.startswith(MARKER):
            try:
                return TorchRuntime.model_validate(json.loads(line[len(MARKER):]))
            except (json.JSONDecodeError, ValueError) as exc:
                raise ParseError(f"torch probe: bad JSON after the marker: {exc}") from None
    raise ParseError("torch probe: no marked line in the output (the interpreter did not run the probe)")


def torch_runtime(python: str) -> Fact[TorchRuntime]:
    """The probe for interpreter `python` (an absolute path, validated by the step's parameters)."""
    return Fact(f"torch_runtime:{python}", [python, "-c", PROBE], parse_torch_runtime, timeout=180.0)
