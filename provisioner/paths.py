"""Where the tool keeps its state: run logs, caches, the lab (override with PROVISIONER_STATE_DIR)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import platformdirs


def state_dir() -> Path:
    base = os.environ.get("PROVISIONER_STATE_DIR")
    path = Path(base) if base else Path(platformdirs.user_state_dir("gpu-provisioner"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def runs_dir() -> Path:
    path = state_dir() / "runs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The download cache; `environ` (default: this process's) names it with PROVISIONER_CACHE_DIR."""
    base = (os.environ if environ is None else environ).get("PROVISIONER_CACHE_DIR")
    path = Path(base) if base else Path(platformdirs.user_cache_dir("gpu-provisioner"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def lab_dir() -> Path:
    base = os.environ.get("PROVISIONER_LAB_ROOT")
    return Path(base) if base else state_dir() / "lab"
