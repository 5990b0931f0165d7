"""`python -m provisioner.burnin`: under torchrun it is one rank; alone it is the local launcher.

    torchrun --standalone --nproc-per-node=8 -m provisioner.burnin --json --out /root/burnin
    python -m provisioner.burnin --backend gloo --world-size 4 --sizes 1KiB:1MiB --json

Exit codes follow provisioner.exitcodes (this package may not import it): 0 pass, 1 failed,
2 invalid settings, 3 unsupported here (no torch, nccl without CUDA).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from provisioner.burnin import rank
from provisioner.burnin.config import ConfigError, make_config
from provisioner.burnin.shapes import ResultDoc

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNSUPPORTED = 0, 1, 2, 3


class Unsupported(Exception):
    """The run cannot happen on this machine (exit 3)."""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m provisioner.burnin", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                    help="nccl on GPUs, gloo on CPU (tests); auto picks nccl when CUDA is visible")
    ap.add_argument("--world-size", type=int, default=None,
                    help="ranks to start (default: visible GPUs for nccl, 2 for gloo; torchrun's WORLD_SIZE wins)")
    ap.add_argument("--sizes", default=None, help="MIN:MAX doubling, e.g. 8B:8GiB (nccl default) or 1KiB:1MiB (gloo)")
    ap.add_argument("--phases", default=None,
                    help="comma list of preflight,gemm,collectives,fabric,soak,nvshmem (fabric: per-node and "
                         "per-pair results; on by default when torchrun runs more than one node)")
    ap.add_argument("--collectives", default=None,
                    help="comma list of all_reduce,all_gather,reduce_scatter,alltoall,broadcast,sendrecv")
    ap.add_argument("--iters", type=int, default=None, help="timed calls per row (20 nccl, 5 gloo)")
    ap.add_argument("--warmup-iters", type=int, default=None, help="untimed calls per row (2 nccl, 1 gloo)")
    ap.add_argument("--duration", type=float, default=None, help="soak seconds (60 nccl, 1 gloo; 0 skips)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds one row (warm-up + timed batch + check) may take before it is a hang")
    ap.add_argument("--gemm-seconds", type=float, default=None, help="GEMM stress seconds per GPU (30 nccl)")
    ap.add_argument("--gemm-size", type=int, default=None, help="GEMM matrix side (8192 nccl, 128 gloo)")
    ap.add_argument("--nvshmem-timeout", type=float, default=None, help="seconds for the NVSHMEM probe (180)")
    ap.add_argument("--expected-gpus", type=int, default=None, help="fail the preflight unless NVML sees this many")
    ap.add_argument("--thresholds", default=None, help="JSON file merged over the built-in threshold table")
    ap.add_argument("--threshold", action="append", default=None, metavar="KEY=VALUE",
                    help="override one threshold, e.g. all_reduce_busbw_gbps=30 or min_fraction=0.85 (repeatable)")
    ap.add_argument("--monitor-interval", type=float, default=None, help="NVML sampling period in seconds (1)")
    ap.add_argument("--p2p-ab", action="store_true",
                    help="rerun all_reduce with NCCL_P2P_DISABLE=1 (local launcher, nccl only)")
    ap.add_argument("--json", action="store_true", help="print the result as one JSON line (the last line)")
    ap.add_argument("--out", default=None, help="directory for burnin.json, burnin.txt and the rank logs")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config-file", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--result-file", default=None, help=argparse.SUPPRESS)
    return ap


def in_torchrun(environ: dict[str, str] | None = None) -> bool:
    env = environ if environ is not None else dict(os.environ)
    return "RANK" in env and "WORLD_SIZE" in env


def resolve_backend_and_world(backend: str, world_size: int | None) -> tuple[str, int]:
    if importlib.util.find_spec("torch") is None:
        raise Unsupported("torch is not installed in this Python")
    if in_torchrun():
        world_size = int(os.environ["WORLD_SIZE"])
    if backend == "gloo":  # no need to import torch (seconds) just to check settings
        return backend, world_size if world_size is not None else 2
    import torch

    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise Unsupported("backend nccl needs CUDA, and torch sees no CUDA device")
        gpus = torch.cuda.device_count()
        if world_size is None:
            world_size = gpus
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
        if local > gpus:
            raise ConfigError(f"{local} ranks on this node but only {gpus} GPU(s) visible")
    if world_size is None:
        world_size = 2
    return backend, world_size


def config_from_args(a: argparse.Namespace) -> Any:
    backend, world = resolve_backend_and_world(a.backend, a.world_size)
    if a.thresholds and not Path(a.thresholds).is_file():
        raise ConfigError(f"--thresholds {a.thresholds}: no such file")
    return make_config(
        backend=backend, world_size=world, sizes=a.sizes, phases=a.phases, collectives=a.collectives,
        iters=a.iters, warmup_iters=a.warmup_iters, duration=a.duration, timeout=a.timeout,
        gemm_seconds=a.gemm_seconds, gemm_size=a.gemm_size, nvshmem_timeout=a.nvshmem_timeout,
        expected_gpus=a.expected_gpus, thresholds_file=a.thresholds, thresholds=a.threshold,
        monitor_interval=a.monitor_interval,
        p2p_ab=a.p2p_ab, json_out=a.json, out=a.out,
        nodes=int(os.environ.get("GROUP_WORLD_SIZE", "1")) if in_torchrun() else 1,  # torchrun --nnodes
    )


def emit(doc: ResultDoc, json_out: bool) -> None:
    from provisioner.burnin.report import format_summary, format_table, json_line

    if json_out:
        sys.stdout.write(json_line(doc) + "\n")
    else:
        sys.stdout.write(format_table(doc) + "\n" + format_summary(doc))
    sys.stdout.flush()


def _real_stream(stream: Any) -> Any:
    """The stream if it is backed by a file descriptor a child can inherit (not under pytest/CliRunner)."""
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    return stream


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.worker:
        return rank.run(a.config_file, a.result_file)
    try:
        cfg = config_from_args(a)
    except ConfigError as exc:
        print(f"burnin: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Unsupported as exc:
        print(f"burnin: {exc}", file=sys.stderr)
        return EXIT_UNSUPPORTED
    if in_torchrun():
        from provisioner.burnin.worker import run_worker

        return run_worker(cfg, None)
    from provisioner.burnin.launcher import run_local

    doc = run_local(cfg, rank0_stderr=_real_stream(sys.stderr))
    emit(doc, cfg.json)
    return EXIT_OK if doc.get("status") == "pass" else EXIT_FAILED
