"""The suite's trash (`tests/support/scratch.py`): what a passed test wrote is removed in the background, and the
thread that removes it survives a failed spawn. Stop 39's run lost the thread to `OSError: [Errno 14] Bad address:
'nice'` — the vfork'd `rm` exec'd with the C `environ` while a test's setenv in the main thread reallocated it —
the directory it was removing stayed on disk, and a directory queued before the thread was restarted was never
removed: `drain()` at the end of the run then waits forever (the first test hangs on the old code)."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.support import scratch


def _tree(root: Path, name: str) -> Path:
    path = root / name
    (path / "a" / "b").mkdir(parents=True)
    for i in range(20):
        (path / "a" / "b" / f"f{i}").write_text("x" * 100)
    return path


def test_a_failed_spawn_still_removes_the_directory_and_the_thread_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_run = subprocess.run
    failed: list[str] = []
    trash = tmp_path / "trash"

    def run(argv: Any, *args: Any, **kwargs: Any) -> Any:
        # the first removal of this test's trash fails to spawn (the worker's trash may still hold earlier tests'
        # directories: those are removed for real)
        if not failed and str(argv[-1]).startswith(str(trash)):
            failed.append(str(argv[-1]))
            raise OSError(14, "Bad address", "nice")  # what the run's thread died of
        return real_run(argv, *args, **kwargs)

    scratch.drain()  # what earlier tests of this worker discarded
    monkeypatch.setattr(subprocess, "run", run)  # the module scratch calls it through
    first, second = _tree(tmp_path, "first"), _tree(tmp_path, "second")
    scratch.discard(first, trash)
    scratch.discard(second, trash)
    scratch.drain()
    assert failed and failed[0].startswith(str(trash))  # the spawn of the first removal did fail
    assert list(trash.iterdir()) == [] and not first.exists() and not second.exists()
    assert scratch._worker is not None and scratch._worker.is_alive()


def test_removals_while_the_main_thread_changes_the_environment(tmp_path: Path) -> None:
    """The real `rm` children, spawned while this thread sets and unsets variables as fast as it can."""
    trash = tmp_path / "trash"
    errors: list[BaseException] = []
    previous = threading.excepthook

    def hook(args: Any) -> None:
        errors.append(args.exc_value or RuntimeError(str(args.exc_type)))

    threading.excepthook = hook
    try:
        for i in range(40):
            scratch.discard(_tree(tmp_path, f"t{i}"), trash)
        done = threading.Event()

        def wait() -> None:
            scratch.drain()
            done.set()

        waiter = threading.Thread(target=wait)
        waiter.start()
        n = 0
        while not done.is_set():
            os.environ[f"SCRATCH_TEST_{n % 64}"] = "x" * (n % 512)
            os.environ.pop(f"SCRATCH_TEST_{(n + 32) % 64}", None)
            n += 1
        waiter.join()
    finally:
        threading.excepthook = previous
        for k in [k for k in os.environ if k.startswith("SCRATCH_TEST_")]:
            del os.environ[k]
    assert errors == []
    assert list(trash.iterdir()) == []
