"""One rank of a local burn-in world: `--worker --config-file F [--result-file R]`, as the launcher starts it
(forked from the preloaded forkserver, or `python -m provisioner.burnin --worker …`).

Below the launcher and the entry point, so the launcher's forked rank runs the worker without importing
the entry point that imports the launcher.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from provisioner.burnin.config import BurninConfig


def worker_args(config_file: Path, result_file: Path) -> list[str]:
    return ["--worker", "--config-file", str(config_file), "--result-file", str(result_file)]


def run(config_file: str, result_file: str | None) -> int:
    """Run the worker with the launcher's config file; rank 0 writes the result to `result_file`."""
    # torch (seconds to import): only in a rank, never when the launcher or the CLI loads this module
    from provisioner.burnin.worker import run_worker

    cfg = BurninConfig.from_json(Path(config_file).read_text(encoding="utf-8"))
    return run_worker(cfg, result_file)


def main(args: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m provisioner.burnin --worker")
    ap.add_argument("--worker", action="store_true", required=True)
    ap.add_argument("--config-file", required=True)
    ap.add_argument("--result-file", default=None)
    a = ap.parse_args(args)
    return run(a.config_file, a.result_file)
