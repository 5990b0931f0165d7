"""Deleting what a passed test wrote, off the critical path.

A lab on disk is tens of thousands of files (a container's venv with a real torch, its uv cache): removing
one costs seconds to minutes of a test's teardown. A passed test's directory is instead renamed into the
run's trash (one rename(2) on the same file system) and removed by a background `rm -rf` at a low CPU
and I/O priority (`_rm_argv`); the run waits for the trash to empty at its end (`drain`). A failed test's directories
stay where they are, to be read.
"""

from __future__ import annotations

import itertools
import os
import queue
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from provisioner.environ import copy_environ

#: per test, whether each phase (setup, call, teardown) passed (recorded by tests/conftest.py)
PHASES = pytest.StashKey[dict[str, bool]]()

_queue: queue.Queue[Path | None] = queue.Queue()
_worker: threading.Thread | None = None
_lock = threading.Lock()
_counter = itertools.count()


def passed(node: pytest.Item) -> bool:
    """Whether the test's setup and call passed (its teardown has not run yet)."""
    phases = node.stash.get(PHASES, {})
    return phases.get("setup", False) and phases.get("call", False)


def trash_dir(factory: pytest.TempPathFactory) -> Path:
    """The run's (the worker's) trash: on the file system of everything the tests write."""
    return factory.getbasetemp() / ".trash"


def _rm_argv(path: Path) -> list[str]:
    # below the tests, not starved by them: at nice 19 with the idle I/O class an `rm` gets ~1.5% of a core on a
    # machine the suite keeps busy; nice 10 (a tenth of a nice-0 task's CPU share) and best-effort I/O at its
    # lowest level. (The run's peak disk did not fall with it: 11.8 GiB in stop 40's runs 13 and 14.)
    argv = ["rm", "-rf", "--one-file-system", "--", str(path)]
    if shutil.which("ionice"):
        argv = ["ionice", "-c", "2", "-n", "7", *argv]
    if shutil.which("nice"):
        argv = ["nice", "-n", "10", *argv]
    return argv


def _drain_forever() -> None:
    while True:
        path = _queue.get()
        try:
            if path is None:
                return
            try:
                # env given: the child gets an environment block built from this snapshot. Without it the
                # vfork'd child execs with the C `environ`, which a test's setenv in the main thread may be
                # reallocating at that moment (stop 39's run: `OSError: [Errno 14] Bad address: 'nice'`);
                # copied as `copy_environ` does (a key the main thread removes meanwhile is left out, where
                # `dict(os.environ)` raises KeyError: stop 40's failure)
                subprocess.run(_rm_argv(path), check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=copy_environ())
            except OSError:
                pass  # removed below
            if path.exists():  # a file rm could not remove (a busy mount): leave it to the session's clean-up
                shutil.rmtree(path, ignore_errors=True)
        finally:
            _queue.task_done()


def discard(path: Path, trash: Path) -> None:
    """Move `path` into `trash` (same file system) and queue its removal; a link is just unlinked."""
    global _worker
    if path.is_symlink() or not path.exists():
        path.unlink(missing_ok=True)
        return
    trash.mkdir(parents=True, exist_ok=True)
    target = trash / f"{next(_counter):06d}-{os.getpid()}-{path.name}"
    try:
        path.rename(target)
    except OSError:  # another file system or a busy mount point: remove it in place, in the background
        target = path
    with _lock:
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_drain_forever, name="test-trash", daemon=True)
            _worker.start()
    _queue.put(target)


def drain() -> None:
    """Wait until everything discarded so far is removed (the end of the run)."""
    if _worker is not None and _worker.is_alive():
        _queue.join()
