"""Independent lab scripts of one test file, played concurrently by one module fixture.

A lab test mostly waits: on SSH round trips, Proxmox task polls, uv, a subprocess's imports. Scripts
that each own their lab root (and cache) share nothing, so a module fixture plays the ones the
selected tests need in a thread pool, and each test then waits for its own script: `result()`
re-raises what the script raised (its assertion with the rewritten message, a skip from `require`),
so every test still fails, or skips, for its own reason and only its own.

Under pytest-xdist the workers already fill the cores: a pool gets what the cores leave per worker
(`threads_for`), one thread on two cores with two workers, since a lab script keeps about one core busy
(the demo: 77 CPU-seconds in 69 s) and a third stream on two cores only stretches every burn-in towards
its timeout.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")


def play_selected(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                  scripts: Mapping[str, Callable[[Path], T]], workers: int,
                  shared: Mapping[str, str] | None = None) -> Iterator[dict[str, Future[T]]]:
    """Start the scripts (keyed by the name of the test that checks each, parameters included) of this file's selected tests,
    `workers` at a time, each given a fresh directory; yield their futures; wait for all at teardown.
    `shared`: test name -> the script whose outcome that test checks too (one lab serves both; the script
    runs once when either test is selected, and both names get its future)."""
    shared = shared or {}
    selected = {item.name for item in request.session.items
                if item.path == request.path}
    needed = selected | {shared[name] for name in selected if name in shared}
    wanted = [name for name in scripts if name in needed]
    with ThreadPoolExecutor(max_workers=threads_for(workers), thread_name_prefix="labscript") as pool:
        futures = {name: pool.submit(scripts[name], tmp_path_factory.mktemp(name.removeprefix("test_")[:40]))
                   for name in wanted}
        futures.update({name: futures[script] for name, script in shared.items() if script in futures})
        yield futures


def threads_for(wanted: int, environ: Mapping[str, str] = os.environ, cores: int | None = None) -> int:
    """`wanted` threads, at most the cores per pytest-xdist worker (`PYTEST_XDIST_WORKER_COUNT`), at least one."""
    cores = cores if cores is not None else len(os.sched_getaffinity(0))
    xdist_workers = int(environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or "1")
    return max(1, min(wanted, cores // max(1, xdist_workers)))
