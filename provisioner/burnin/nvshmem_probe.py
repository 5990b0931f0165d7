"""NVSHMEM check through torch symmetric memory, in its own processes with a timeout.

NVSHMEM may `exit` the process when peers are not P2P-reachable ("Peer GPU 0 is not accessible,
exiting ...", "building transport map failed"), so the probe never runs inside a burn-in rank:
rank 0 starts `python -m provisioner.burnin.nvshmem_probe --world-size N --result-file F`, which
starts N probe ranks; the whole session is killed when the timeout passes. "No P2P" is reported
as a finding (warn), not as a broken GPU.

Probe steps per rank (each recorded, none assumed to exist on every torch):
set_backend("NVSHMEM") -> symm_mem.empty + rendezvous -> read every peer's buffer through the
handle -> one_shot_all_reduce (sum) -> nvshmem all-to-all if the op exists.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from provisioner.burnin.shapes import ProbeDoc, ProbeStep
from provisioner.burnin.spawn import child_env, spawn_world, wait_world
from provisioner.burnin.verdict import PhaseResult

MIN_TORCH = (2, 9)
NO_P2P_PATTERNS = (
    re.compile(r"Peer GPU \d+ is not accessible"),
    re.compile(r"building transport map failed"),
)
NO_BACKEND_PATTERN = re.compile(r"does not find allocation backend NVSHMEM")


def torch_version_tuple(version: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def precheck(torch_version: str, cuda_available: bool, nvshmem_available: bool | None, backend: str) -> str | None:
    """Why the probe cannot run here, or None when it can. Pure."""
    if backend != "nccl":
        return f"NVSHMEM needs CUDA GPUs (backend {backend})"
    if torch_version_tuple(torch_version) < MIN_TORCH:
        return f"torch {torch_version} < 2.9: no NVSHMEM in the PyPI wheels"
    if not cuda_available:
        return "no CUDA device visible to torch"
    if not nvshmem_available:
        return "torch.distributed._symmetric_memory.is_nvshmem_available() is False (NVSHMEM absent)"
    return None


def classify(returncode: int | None, timed_out: bool, timeout: float, doc: ProbeDoc | None,
             stderr: str) -> PhaseResult:
    """Turn the probe's outcome into a phase verdict. Pure."""
    res = PhaseResult("nvshmem")
    tail = [line for line in stderr.splitlines() if line.strip()][-6:]
    if any(p.search(stderr) for p in NO_P2P_PATTERNS):
        res.warn("no P2P between the GPUs: NVSHMEM could not build its transport map "
                 "(a platform finding - ACS/IOMMU/consumer GPU - not a GPU fault)")
        res.data["finding"] = "no_p2p"
        res.data["stderr_tail"] = tail
        return res
    if NO_BACKEND_PATTERN.search(stderr):
        res.skip("this torch build has no NVSHMEM allocation backend")
        return res
    if timed_out:
        res.fail(f"NVSHMEM probe did not finish within {timeout:g}s (killed)")
        res.data["stderr_tail"] = tail
        return res
    if doc is None:
        res.fail(f"NVSHMEM probe exited with status {returncode} and no result")
        res.data["stderr_tail"] = tail
        return res
    res.data["steps"] = doc.get("steps", [])
    for rank_steps in doc.get("steps", []):
        for step in rank_steps.get("steps", []):
            if step.get("ok") is False:
                res.fail(f"rank {rank_steps.get('rank')}: {step['step']} failed: {step.get('detail', '')}")
            elif step.get("ok") is None:
                res.note(f"rank {rank_steps.get('rank')}: {step['step']} not available: {step.get('detail', '')}")
    if returncode not in (0, None) and res.status != "fail":
        res.fail(f"NVSHMEM probe exited with status {returncode}")
    return res


def run_probe(world_size: int, timeout: float, log_dir: Path) -> PhaseResult:
    """Start the probe world in a new session; kill the session on timeout."""
    log_dir.mkdir(parents=True, exist_ok=True)
    result_file = log_dir / "nvshmem.json"
    stderr_file = log_dir / "nvshmem.log"
    env = child_env(0, 1, 0)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        env.pop(key, None)
    cmd = [sys.executable, "-m", "provisioner.burnin.nvshmem_probe", "--world-size", str(world_size),
           "--result-file", str(result_file)]
    timed_out = False
    with open(stderr_file, "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                stdin=subprocess.DEVNULL)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_session(proc)
    doc = None
    if result_file.exists():
        try:
            doc = json.loads(result_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            doc = None
    return classify(proc.returncode, timed_out, timeout, doc, stderr_file.read_text(errors="replace"))


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=3)
            return
        except subprocess.TimeoutExpired:
            continue


# -- inside the probe processes (need CUDA) -----------------------------------------------------------
def _step(steps: list[ProbeStep], name: str, fn: Any) -> Any:
    try:
        value = fn()
    except Exception as exc:
        steps.append({"step": name, "ok": False, "detail": f"{type(exc).__name__}: {exc}"[:500]})
        return None
    steps.append({"step": name, "ok": True, "detail": "" if value is None or value is True else str(value)})
    return value


def probe_rank(result_file: str) -> int:
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    torch.empty(1, device=device)  # torch's own test: initialise the context first or it may hang
    steps: list[ProbeStep] = []
    if hasattr(symm_mem, "set_backend"):
        _step(steps, "set_backend NVSHMEM", lambda: symm_mem.set_backend("NVSHMEM"))
    else:
        os.environ["TORCH_SYMMMEM"] = "NVSHMEM"
    dist.init_process_group("nccl")
    world_group: Any = dist.group.WORLD  # Optional in torch's stubs (Any where torch is not installed)
    group_name = world_group.group_name
    numel = 4096

    def alloc() -> Any:
        t = symm_mem.empty(numel, dtype=torch.float32, device=device).fill_(rank + 1)
        hdl = symm_mem.rendezvous(t, group_name)
        dist.barrier(device_ids=[local])
        return t, hdl

    got = _step(steps, "symm_mem.empty + rendezvous", alloc)
    if got is not None:
        t, hdl = got

        def peers() -> bool:
            bad = []
            for p in range(world):
                buf = hdl.get_buffer(p, (numel,), torch.float32)
                if not torch.equal(buf, torch.full_like(buf, p + 1)):
                    bad.append(p)
            if bad:
                raise RuntimeError(f"wrong data read from peer(s) {bad}")
            return True

        _step(steps, "read peers' symmetric buffers", peers)
        op = getattr(torch.ops.symm_mem, "one_shot_all_reduce", None)
        if op is None:
            steps.append({"step": "one_shot_all_reduce", "ok": None, "detail": "op not in this torch"})
        else:
            def one_shot() -> bool:
                out = op(t, "sum", group_name)
                torch.cuda.synchronize(device)
                want = world * (world + 1) / 2
                if not torch.equal(out, torch.full_like(out, want)):
                    raise RuntimeError(f"one_shot_all_reduce gave {out[:4].tolist()}, expected {want}")
                return True

            _step(steps, "one_shot_all_reduce", one_shot)
        a2a = getattr(torch.ops.symm_mem, "nvshmem_all_to_all", None)
        if a2a is not None:
            def all_to_all() -> bool:
                chunk = numel // world
                inp = symm_mem.empty(numel, dtype=torch.float32, device=device).fill_(rank)
                out = symm_mem.empty(numel, dtype=torch.float32, device=device).fill_(-1)
                symm_mem.rendezvous(inp, group_name)  # as torch's test_nvshmem.py does
                symm_mem.rendezvous(out, group_name)
                a2a(inp, out, group_name)
                torch.cuda.synchronize(device)
                want = torch.arange(world, device=device, dtype=torch.float32).repeat_interleave(chunk)
                if not torch.equal(out[: chunk * world], want):
                    raise RuntimeError("nvshmem_all_to_all returned wrong data")
                return True

            _step(steps, "nvshmem_all_to_all", all_to_all)
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, {"rank": rank, "steps": steps})
    if rank == 0:
        Path(result_file).write_text(json.dumps({"steps": gathered}), encoding="utf-8")
    dist.destroy_process_group()
    return 0 if all(s["ok"] is not False for s in steps) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m provisioner.burnin.nvshmem_probe")
    ap.add_argument("--world-size", type=int, default=1)
    ap.add_argument("--result-file", required=True)
    ap.add_argument("--rank-worker", action="store_true")
    a = ap.parse_args(argv)
    if a.rank_worker:
        return probe_rank(a.result_file)
    log_dir = Path(tempfile.mkdtemp(prefix="burnin-nvshmem-"))
    procs = spawn_world("provisioner.burnin.nvshmem_probe", ["--rank-worker", "--result-file", a.result_file],
                        a.world_size, log_dir)
    codes = wait_world(procs, grace=30.0)
    for k in range(a.world_size):  # the parent classifies on this text
        sys.stderr.write((log_dir / f"rank{k}.log").read_text(errors="replace"))
    return max((abs(c) for c in codes), default=0)


if __name__ == "__main__":
    sys.exit(main())
