"""One lab wheel index per test session.

A lab daemon builds its PEP 503 index of stand-in wheels under ``cache_dir()/lab`` when it starts
(`provisioner.lab.lab.LabServices.start` -> `provisioner.lab.wheels.build_index`): 32 wheels of 12 MiB
padding each, the slow part of `lab up`. The index is keyed by builder version and the real torch it
wraps, so every lab of a session would build byte-identical files. `with_shared_wheels(cache)` makes
``cache/lab`` a link to one directory of the session (`build_index` takes a file lock there, so labs
starting at once build it once); the rest of ``cache`` (driver downloads) stays the test's own, so a
download in one test is never served from another's cache.
"""

from __future__ import annotations

from pathlib import Path

_shared: Path | None = None


def bind(shared: Path) -> None:
    """Called once per session by conftest: the run's one wheel index directory."""
    global _shared
    _shared = shared


def with_shared_wheels(cache: Path) -> Path:
    """`cache`, its ``lab`` subdirectory linked to the run's shared wheel index; returns `cache`."""
    if _shared is None:
        return cache
    cache.mkdir(parents=True, exist_ok=True)
    link = cache / "lab"
    if not link.exists():
        link.symlink_to(_shared, target_is_directory=True)
    return cache
