"""Dict-in/dict-out face of the resolver for callers that speak JSON (the `torch.resolve` step).

resolve_dict(ccs=["12.0"] * 8, driver="595.71.05", python="3.12", torch="==2.11.0")
-> {"variant": "cu128", "index_url": ..., "torch": "2.11.0", "torchvision": "0.26.0", "reasons": [...],
    "rejected": [{"variant", "torch", "reason"}], "verified": True, "others": [...], ...}
or {"error": {"code", "message", "fix"}, ...}  (code "invalid_input" for arguments that do not parse)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from provisioner.resolver.data import WheelData
from provisioner.resolver.models import ResolveRequest
from provisioner.resolver.solver import resolve


def resolve_dict(
    *,
    ccs: Sequence[str],
    driver: str,
    python: str,
    arch: str = "x86_64",
    glibc: str | None = None,
    torch: str | None = None,
    prefer: str = "lowest-cuda",
    data: WheelData | None = None,
) -> dict[str, Any]:
    """The `provisioner resolve --json` object for these host facts."""
    try:
        request = ResolveRequest.model_validate(
            {
                "cc": list(ccs),
                "driver": driver,
                "python": python,
                "arch": arch,
                "glibc": glibc,
                "torch": torch,
                "prefer": prefer,
            }
        )
    except ValidationError as exc:
        message = "; ".join(str(e.get("msg", "invalid")).removeprefix("Value error, ") for e in exc.errors())
        return {"error": {"code": "invalid_input", "message": message, "fix": "correct the host facts passed in"}}
    return resolve(request, data).contract()
