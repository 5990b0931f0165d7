"""Local launcher: start `world_size` worker processes the way torchrun would, wait, collect rank 0's result.

Each worker is `python -m provisioner.burnin --worker` with RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT. A hung rank cannot hang the
launcher: every rank has a watchdog, and once any rank has exited with an error the others get
`timeout + grace` seconds before they are killed. Rank 0 writes the result to a file; if it
never does, the launcher writes a failed result that says why.

Ranks start from a preloaded process (`spawn_ranks`): a multiprocessing forkserver that has imported
torch and the worker once forks every rank, instead of each rank paying torch's import (seconds each,
and all of them at once on a loaded host). Why that is safe for CUDA and NCCL:

- The forkserver is a fresh interpreter (fork+exec of `sys.executable`), not a fork of this launcher,
  so whatever the launcher did (`torch.cuda.is_available()` to pick the backend initialises the CUDA
  driver) is not inherited by it.
- Importing torch does not initialise CUDA: torch initialises it lazily, on the first CUDA call
  (torch/cuda/__init__.py `_lazy_init`). The forkserver makes none, so every rank forks from a
  process with no CUDA context and initialises CUDA (and NCCL, at `init_process_group`) itself,
  exactly as a torchrun rank does. torch's own fork guard (`torch.cuda._is_in_bad_fork`, set by its
  at-fork handler only when the parent had initialised CUDA) is checked in each rank: a rank that
  finds it set stops with a clear error instead of failing deep inside CUDA.
- Each rank gets its own environment (RANK, WORLD_SIZE, LOCAL_RANK, ..., MASTER_ADDR/PORT, and
  NCCL_* from `extra_env`) before any of that runs: NCCL and gloo read them at process-group
  initialisation, not at import. OMP's thread count is read by libgomp when torch loads, so the rank
  applies OMP_NUM_THREADS with `torch.set_num_threads` (what torchrun's default of 1 means).

Where no forkserver can start (a platform without it), `spawn_world` starts `python -m` per rank.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from provisioner.burnin import rank
from provisioner.burnin.config import BurninConfig
from provisioner.burnin.report import failure_result, write_outputs
from provisioner.burnin.shapes import PhaseDoc, RankExit, ResultDoc
from provisioner.burnin.spawn import (
    PACKAGE_PARENT,
    RankHandle,
    child_env,
    free_port,
    spawn_world,
    wait_world,
)

#: imported once by the forkserver the ranks fork from (the worker imports torch and torch.distributed)
PRELOAD = ["torch", "torch.distributed", "provisioner.burnin.worker"]
#: the line each forked rank writes first to its log (tests and people read where it came from)
FORKED_MARK = "[launch] rank {rank} forked from preloaded process {ppid} (torch preloaded: {pre})"


class _InheritFd:
    """A file descriptor the forkserver hands to the child (multiprocessing passes it with SCM_RIGHTS)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        from multiprocessing import reduction

        return (_detach_fd, (reduction.DupFd(self.fd),))


def _detach_fd(dup: Any) -> int:
    fd: int = dup.detach()
    return fd


def _rank_main(env: dict[str, str], log_path: str, stderr_fd: Any, args: list[str]) -> None:
    """A rank, in a child of the forkserver: its environment, its log on fds 1 and 2, then the worker
    (`python -m provisioner.burnin ARGS`). `stderr_fd` arrives here as a plain fd (see `_InheritFd`)."""
    preloaded = "torch" in sys.modules
    os.environ.clear()
    os.environ.update(env)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(stderr_fd if stderr_fd is not None else log, 2)
    for fd in {log, null, stderr_fd} - {None, 0, 1, 2}:
        os.close(fd)
    # as a `python` that Popen started: stdout to a file block-buffered, stderr line-buffered
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.write(1, (FORKED_MARK.format(rank=env.get("RANK"), ppid=os.getppid(), pre=preloaded) + "\n").encode())
    import torch

    if torch.cuda._is_in_bad_fork():  # the forkserver must never have initialised CUDA (module docstring)
        print("[launch] CUDA was initialised in the process this rank forked from; this rank cannot use CUDA",
              file=sys.stderr, flush=True)
        os._exit(1)
    threads = env.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))
    sys.argv = [str(Path(__file__).with_name("__main__.py")), *args]
    try:
        code = rank.main(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class ForkedRank:
    """A rank forked by the forkserver, with the `subprocess.Popen` methods the launcher uses."""

    def __init__(self, proc: Any) -> None:
        self.proc = proc

    @property
    def returncode(self) -> int | None:
        code: int | None = self.proc.exitcode
        return code

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.proc.exitcode is None and self.proc.pid:
            try:
                os.kill(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float | None = None) -> int:
        self.proc.join(timeout)
        code = self.proc.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(f"rank pid {self.proc.pid}", timeout or 0.0)
        return int(code)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _forkserver() -> Any:
    """The forkserver context with torch preloaded, or None where this platform has none."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return None
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


@contextlib.contextmanager
def _bare_main() -> Iterator[None]:
    """Hide the caller's `__main__` while the forkserver and the ranks start. multiprocessing makes the
    forkserver (with a preload list) and every child it starts import the parent's `__main__` script
    (CPython Lib/multiprocessing/forkserver.py `ensure_running`, popen_forkserver.py `_launch` ->
    spawn.py `get_preparation_data`: init_main_from_path). The ranks need nothing of it (their
    target lives in this module); importing it costs each rank the caller's imports (the
    `provisioner` CLI's, under the controller) and would run a script that has no
    `if __name__ == "__main__"` guard again in every rank."""
    real_main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = real_main


def spawn_ranks(
    args: list[str],
    world: int,
    log_dir: Path,
    extra_env: dict[str, str] | None = None,
    rank0_stderr: IO[str] | None = None,
) -> list[RankHandle]:
    """`python -m provisioner.burnin ARGS` per rank like `spawn_world`, but every rank forks from one forkserver that has imported torch (module
    docstring); same environment per rank, same logs. Falls back to `spawn_world` without a forkserver."""
    saved_path = sys.path[:]
    if PACKAGE_PARENT not in sys.path:  # the forkserver imports the worker with this process's sys.path
        sys.path.insert(0, PACKAGE_PARENT)
    ctx = _forkserver()
    if ctx is None:
        sys.path[:] = saved_path
        return list(spawn_world("provisioner.burnin", args, world, log_dir, extra_env, rank0_stderr))
    port = free_port()
    procs: list[RankHandle] = []
    try:
        with _bare_main():
            for rank in range(world):
                stderr_fd = None
                if rank == 0 and rank0_stderr is not None:
                    rank0_stderr.flush()
                    stderr_fd = _InheritFd(rank0_stderr.fileno())
                proc = ctx.Process(target=_rank_main, name=f"burnin-rank{rank}", args=(
                    child_env(rank, world, port, extra_env), str(log_dir / f"rank{rank}.log"), stderr_fd, args))
                proc.start()
                procs.append(ForkedRank(proc))
    finally:
        sys.path[:] = saved_path
    return procs


def _tail(path: Path, lines: int = 8) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def run_world(cfg: BurninConfig, log_dir: Path, *, extra_env: dict[str, str] | None = None,
              deadline_s: float | None = None, rank0_stderr: IO[str] | None = None,
              start: str = "forkserver") -> ResultDoc:
    """One world of workers; returns rank 0's result document (or a synthesized failure). `start`:
    "forkserver" (ranks fork from a preloaded process) or "exec" (`python -m` per rank, the baseline
    of bench/burnin_launch.py)."""
    if start not in ("forkserver", "exec"):
        raise ValueError(f"start must be forkserver or exec, not {start!r}")
    log_dir.mkdir(parents=True, exist_ok=True)
    config_file = log_dir / "config.json"
    result_file = log_dir / "result.json"
    result_file.unlink(missing_ok=True)
    config_file.write_text(replace(cfg, json=False, out=None).to_json(), encoding="utf-8")
    args = rank.worker_args(config_file, result_file)
    started = time.monotonic()
    procs: Sequence[RankHandle] = (
        spawn_ranks(args, cfg.world_size, log_dir, extra_env, rank0_stderr) if start == "forkserver"
        else spawn_world("provisioner.burnin", args, cfg.world_size, log_dir, extra_env, rank0_stderr))
    deadline = started + deadline_s if deadline_s else None
    codes = wait_world(procs, grace=cfg.timeout + 15.0, deadline=deadline)
    ranks: list[RankExit] = [{"rank": k, "returncode": c} for k, c in enumerate(codes)]
    doc: ResultDoc | None = None
    if result_file.exists():
        try:
            doc = json.loads(result_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            doc = None
    if doc is None:
        reasons = [f"rank 0 wrote no result (exit codes {codes})"]
        if deadline is not None and time.monotonic() > deadline:
            reasons.append(f"launcher deadline of {deadline_s:g}s passed: all ranks killed")
        for k, c in enumerate(codes):
            if c != 0:
                reasons += [f"rank {k} log: {line}" for line in _tail(log_dir / f"rank{k}.log")]
        doc = failure_result(cfg, reasons)
    crashed = [f"rank {k} exited with status {c} (crashed or killed)" for k, c in enumerate(codes) if c not in (0, 1)]
    if crashed and doc.get("status") == "fail":
        doc.setdefault("verdict", {}).setdefault("reasons", []).extend(crashed)
    doc["launcher"] = {"ranks": ranks, "log_dir": str(log_dir), "elapsed_s": round(time.monotonic() - started, 3)}
    return doc


def run_local(cfg: BurninConfig, *, deadline_s: float | None = None, rank0_stderr: IO[str] | None = None,
              ) -> ResultDoc:
    """The `provisioner burnin` path: run the world (and the P2P-off rerun if asked), write --out."""
    base = Path(cfg.out) / "ranks" if cfg.out else Path(tempfile.mkdtemp(prefix="burnin-"))
    doc = run_world(cfg, base / "main", deadline_s=deadline_s, rank0_stderr=rank0_stderr)
    if cfg.p2p_ab and cfg.backend == "nccl":
        ab_cfg = replace(cfg, phases=("collectives",), collectives=("all_reduce",), p2p_ab=False)
        ab = run_world(ab_cfg, base / "p2p_off", extra_env={"NCCL_P2P_DISABLE": "1"}, deadline_s=deadline_s,
                       rank0_stderr=rank0_stderr)
        attach_p2p_ab(doc, ab)
    if cfg.out:
        write_outputs(doc, Path(cfg.out))
    elif doc.get("status") == "pass":  # temporary logs are kept only when they explain a failure
        shutil.rmtree(base, ignore_errors=True)
        doc["launcher"]["log_dir"] = None
    return doc


def attach_p2p_ab(doc: ResultDoc, ab: ResultDoc) -> None:
    """Add the NCCL_P2P_DISABLE=1 rerun; a pass there after a failure with P2P points at the P2P path."""
    fallback: PhaseDoc = {"status": "fail", "reasons": ab.get("verdict", {}).get("reasons", [])}
    phase = PhaseDoc(**ab.get("phases", {}).get("collectives", fallback))  # a copy
    phase["env"] = {"NCCL_P2P_DISABLE": "1"}
    main = doc.get("phases", {}).get("collectives", {})
    if main.get("status") == "fail" and phase.get("status") != "fail":
        finding = ("collectives fail with P2P but pass with NCCL_P2P_DISABLE=1: the P2P path is "
                   "broken (ACS, IOMMU or BIOS; see docs/burnin.md)")
        phase["finding"] = finding
        doc.setdefault("verdict", {}).setdefault("reasons", []).append(finding)
    doc.setdefault("phases", {})["collectives_p2p_off"] = phase
