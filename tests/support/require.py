"""Skip-or-fail for tests that need a system component (a skip is a failure under CI=true)."""

from __future__ import annotations

import os

import pytest


def require(condition: bool, reason: str) -> None:
    """Skip the test with `reason` when `condition` is false; under CI=true fail instead."""
    if condition:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"required system component missing under CI=true: {reason}")
    pytest.skip(reason)


def gloo_available() -> bool:
    """torch with torch.distributed and its gloo backend is importable here (torch supplied as the lab's is,
    `tests.support.torch_env`)."""
    from tests.support.torch_env import ensure_torch

    ensure_torch()
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return bool(dist.is_available() and dist.is_gloo_available())


def require_gloo() -> None:
    require(gloo_available(), "torch with gloo is not installed")


def require_torch() -> None:
    """torch importable here, installed through the lab's supply when it is not (`tests.support.torch_env`)."""
    from tests.support.torch_env import ensure_torch

    why = ensure_torch()
    require(why is None, f"torch is not installed: {why}")
