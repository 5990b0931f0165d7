"""A lab tree built once per key under a file lock: the wheel index and the package index's side packages."""

from __future__ import annotations

import fcntl
from collections.abc import Callable
from pathlib import Path


def build_once(root: Path, lock: Path, build: Callable[[Path], None]) -> Path:
    """`root`, built by `build(root)` unless its `.complete` marker says it was. Several labs may start at once
    (fleets, parallel tests): one builds under `lock`, the others wait for it and find it complete."""
    done = root / ".complete"
    if done.exists():
        return root
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not done.exists():
            build(root)
            done.write_text("ok\n")
    return root
