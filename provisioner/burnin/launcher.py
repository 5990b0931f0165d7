"""Local launcher: start `world_size` worker processes the way torchrun would, wait, collect rank 0's result.

Each worker is `python -m provisioner.burnin --worker` with RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT. A hung rank cannot hang the
launcher: every rank has a watchdog, and once any rank has exited with an error the others get
`timeout + grace` seconds before they are killed. Rank 0 writes the result to a file; if it
never does, the launcher writes a failed result that says why.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from provisioner.burnin.config import BurninConfig
from provisioner.burnin.report import failure_result, write_outputs

PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])  # the folder that holds `provisioner/`
RANK0_DONE_GRACE = 10.0


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


def _kill(procs: list[subprocess.Popen[bytes]]) -> None:
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


def wait_world(procs: list[subprocess.Popen[bytes]], grace: float, deadline: float | None = None) -> list[int]:
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
            return [int(p.returncode) for p in procs]
        time.sleep(0.05)


def _tail(path: Path, lines: int = 8) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def run_world(cfg: BurninConfig, log_dir: Path, *, extra_env: dict[str, str] | None = None,
              deadline_s: float | None = None, rank0_stderr: IO[str] | None = None) -> dict[str, Any]:
    """One world of workers; returns rank 0's result document (or a synthesized failure)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    config_file = log_dir / "config.json"
    result_file = log_dir / "result.json"
    result_file.unlink(missing_ok=True)
    config_file.write_text(replace(cfg, json=False, out=None).to_json(), encoding="utf-8")
    args = ["--worker", "--config-file", str(config_file), "--result-file", str(result_file)]
    started = time.monotonic()
    procs = spawn_world("provisioner.burnin", args, cfg.world_size, log_dir, extra_env, rank0_stderr)
    deadline = started + deadline_s if deadline_s else None
    codes = wait_world(procs, grace=cfg.timeout + 15.0, deadline=deadline)
    ranks = [{"rank": k, "returncode": c} for k, c in enumerate(codes)]
    doc: dict[str, Any] | None = None
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
              ) -> dict[str, Any]:
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


def attach_p2p_ab(doc: dict[str, Any], ab: dict[str, Any]) -> None:
    """Add the NCCL_P2P_DISABLE=1 rerun; a pass there after a failure with P2P points at the P2P path."""
    phase = dict(ab.get("phases", {}).get("collectives", {"status": "fail", "reasons": ab.get("verdict", {})
                                                           .get("reasons", [])}))
    phase["env"] = {"NCCL_P2P_DISABLE": "1"}
    main = doc.get("phases", {}).get("collectives", {})
    if main.get("status") == "fail" and phase.get("status") != "fail":
        phase["finding"] = ("collectives fail with P2P but pass with NCCL_P2P_DISABLE=1: the P2P path is "
                            "broken (ACS, IOMMU or BIOS; see docs/burnin.md)")
        doc.setdefault("verdict", {}).setdefault("reasons", []).append(phase["finding"])
    doc.setdefault("phases", {})["collectives_p2p_off"] = phase
