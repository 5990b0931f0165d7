"""`provisioner burnin`: the thin click face of provisioner.burnin (the burn-in itself ships alone)."""

from __future__ import annotations

import click

from provisioner.burnin.entry import main as burnin_main
from provisioner.exitcodes import ExitCode

# click option name -> the argparse flag of `python -m provisioner.burnin` it maps to
_VALUED = (
    "backend", "world_size", "sizes", "phases", "collectives", "iters", "warmup_iters", "duration", "timeout",
    "gemm_seconds", "gemm_size", "nvshmem_timeout", "expected_gpus", "thresholds", "monitor_interval", "out",
)


def to_argv(params: dict[str, object]) -> list[str]:
    """The click parameters as the argv of the package entry point."""
    argv: list[str] = []
    for name in _VALUED:
        value = params.get(name)
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    pairs = params.get("threshold") or ()
    for pair in pairs if isinstance(pairs, (tuple, list)) else (pairs,):
        argv += ["--threshold", str(pair)]
    if params.get("p2p_ab"):
        argv.append("--p2p-ab")
    if params.get("json_out"):
        argv.append("--json")
    return argv


NO_TORCH = ("burnin: torch is not installed in this Python (the controller does not need it): "
            "`uv run --extra burnin provisioner burnin ...` installs it (PyPI's CUDA build, for a GPU host); "
            "for a CPU-only one, `uv pip install torch --index-url https://download.pytorch.org/whl/cpu`")


@click.command(
    "burnin",
    epilog="Exit codes: 0 pass · 1 failed · 2 invalid settings · 3 unsupported here (no torch, nccl without CUDA).",
)
@click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto", show_default=True,
              help="nccl on GPUs, gloo on CPU (tests, thresholds off).")
@click.option("--world-size", type=int, default=None, help="Ranks to start (default: visible GPUs; 2 for gloo).")
@click.option("--sizes", default=None, help="MIN:MAX doubling like nccl-tests -b/-e/-f 2, e.g. 8B:8GiB.")
@click.option("--phases", default=None,
              help="Comma list of preflight,gemm,collectives,fabric,soak,nvshmem (default all but fabric; "
                   "fabric, the per-node and per-pair results, is on by default under a multi-node torchrun).")
@click.option("--collectives", default=None,
              help="Comma list of all_reduce,all_gather,reduce_scatter,alltoall,broadcast,sendrecv (default all).")
@click.option("--iters", type=int, default=None, help="Timed calls per row (20 nccl, 5 gloo).")
@click.option("--warmup-iters", type=int, default=None, help="Untimed calls per row (2 nccl, 1 gloo).")
@click.option("--duration", type=float, default=None, help="Soak seconds of the large all_reduce (0 skips).")
@click.option("--timeout", type=float, default=None,
              help="Seconds one row (one collective at one size) may take before it is declared hung.")
@click.option("--gemm-seconds", type=float, default=None, help="GEMM stress seconds per GPU.")
@click.option("--gemm-size", type=int, default=None, help="GEMM matrix side.")
@click.option("--nvshmem-timeout", type=float, default=None, help="Seconds for the NVSHMEM probe subprocess.")
@click.option("--expected-gpus", type=int, default=None, help="Fail the preflight unless NVML sees this many GPUs.")
@click.option("--thresholds", type=click.Path(dir_okay=False), default=None,
              help="JSON file merged over the built-in per-GPU-model thresholds.")
@click.option("--threshold", multiple=True, metavar="KEY=VALUE",
              help="Override one threshold, e.g. all_reduce_busbw_gbps=30, min_fraction=0.85 or "
                   "fabric_slow_fraction=0.7 (repeatable).")
@click.option("--monitor-interval", type=float, default=None, help="NVML sampling period in seconds.")
@click.option("--p2p-ab", is_flag=True, help="Also rerun all_reduce with NCCL_P2P_DISABLE=1 and compare.")
@click.option("--json", "json_out", is_flag=True, help="Print the result as one JSON line (the last stdout line).")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Directory for burnin.json, burnin.txt and the per-rank logs.")
@click.pass_context
def command(ctx: click.Context, /, **params: object) -> None:
    """Multi-GPU burn-in: NVML preflight, GEMM stress, NCCL collectives (nccl-tests busbw), soak, NVSHMEM.

    e.g. provisioner burnin --backend gloo --world-size 4 --sizes 1KiB:1MiB --json
    """
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        # the controller does not depend on torch (the container's venv has its own): say how to get it
        click.echo(NO_TORCH, err=True)
        ctx.exit(int(ExitCode.NO_SOLUTION))
    code = burnin_main(to_argv(params))
    ctx.exit(int(ExitCode(code)))
