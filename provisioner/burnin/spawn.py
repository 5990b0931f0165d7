"""Starting and waiting for a world of rank processes, torchrun's way: the environment of each rank, one
`python -m` per rank, and a wait that kills the rest once one rank has failed (or rank 0 is done).

Below the launcher and the NVSHMEM probe, which both start worlds; it imports nothing of the burn-in.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Protocol

PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])  # the folder that holds `provisioner/`
RANK0_DONE_GRACE = 10.0


class RankHandle(Protocol):
    """What the launcher needs of a rank process: `subprocess.Popen` or a forked `ForkedRank`."""

    @property
    def returncode(self) -> int | None: ...
    def poll(self) -> int | None: ...
    def send_signal(self, sig: int) -> None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def kill(self) -> None: ...


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def child_env(rank: int, world: int, port: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
        GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
        TORCHELASTIC_RUN_ID="provisioner-burnin",
    )
    env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun does: no oversubscription
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_PARENT, os.environ.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


def spawn_world(
    module: str,
    args: list[str],
    world: int,
    log_dir: Path,
    extra_env: dict[str, str] | None = None,
    rank0_stderr: IO[str] | None = None,
) -> list[subprocess.Popen[bytes]]:
    """Start `python -m module args` once per rank; stdout+stderr of rank k go to log_dir/rank<k>.log
    (rank 0's stderr to `rank0_stderr` when given, so progress shows live)."""
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    for rank in range(world):
        log = open(log_dir / f"rank{rank}.log", "wb")  # closed below: the child keeps its copy
        stderr: Any = rank0_stderr if (rank == 0 and rank0_stderr is not None) else log
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", module, *args],
                env=child_env(rank, world, port, extra_env),
                stdout=log, stderr=stderr, stdin=subprocess.DEVNULL,
            )
        )
        log.close()
    return procs


def _kill(procs: Sequence[RankHandle]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    end = time.monotonic() + 3
    for p in procs:
        try:
            p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def wait_world(procs: Sequence[RankHandle], grace: float, deadline: float | None = None) -> list[int]:
    """Wait for every rank. After the first failure the rest get `grace` seconds (time for their
    watchdogs to report), once rank 0 has exited at most RANK0_DONE_GRACE; past `deadline`
    (monotonic) everything is killed. Returns exit codes (negative = killed by that signal)."""
    kill_at: float | None = None
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            return [int(c) for c in codes if c is not None]
        now = time.monotonic()
        if codes[0] is not None:  # rank 0 has written (or failed to write) the result: nothing to wait for
            kill_at = min(kill_at, now + RANK0_DONE_GRACE) if kill_at is not None else now + RANK0_DONE_GRACE
        elif kill_at is None and any(c not in (None, 0) for c in codes):
            kill_at = now + grace
        if (kill_at is not None and now > kill_at) or (deadline is not None and now > deadline):
            _kill(procs)
            return [p.wait() for p in procs]  # every rank has exited or been killed by now
        time.sleep(0.05)
