"""`provisioner resolve`: pick the PyTorch wheel index and torch version for a host (ARCHITECTURE §8).

With --json the last stdout line is one JSON object:
  {"variant", "index_url", "torch", "torchvision", "reasons", "rejected": [{"variant", "torch", "reason"}],
   "verified", ...}  (exit 0)
  {"error": {"code", "message", "fix"}, ...}  (exit 3: no solution; exit 2: invalid input)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from packaging.version import Version
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from provisioner.exitcodes import EXIT_CODES_HELP, ExitCode
from provisioner.render.safe_text import guard
from provisioner.resolver import Resolution, ResolveError, ResolveRequest, load_data, parse_data, resolve

MAX_ROWS = 20


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err.get("loc", ()) if not isinstance(p, int)) or "input"
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"--{field}: {msg}")
    return "; ".join(parts)


def _emit_json(obj: dict[str, Any]) -> None:
    click.echo(json.dumps(obj, ensure_ascii=False))


def _render(result: Resolution | ResolveError, console: Console) -> None:
    if isinstance(result, Resolution):
        head = Text.assemble(
            ("torch ", "bold"),
            (result.torch, "bold green"),
            " from ",
            (result.index_url, "bold cyan"),
            f"  (CUDA {result.cuda}",
            f", torchvision {result.torchvision})" if result.torchvision else ")",
        )
        console.print(head)
        console.print(Text(f"uv pip install torch=={result.torch} --index-url {result.index_url}", style="dim"))
        if not result.verified:
            console.print(
                Text("UNVERIFIED: this choice rests on data not confirmed by a measurement", style="bold yellow")
            )
    else:
        console.print(Text.assemble(("no solution ", "bold red"), (f"[{result.code}] ", "red"), result.message))
        console.print(Text.assemble(("fix: ", "bold"), result.fix))
    for reason in result.reasons:
        console.print(Text(f"  • {reason}"))
    if isinstance(result, Resolution):
        for warning in result.warnings:
            console.print(Text(f"  ! {warning}", style="yellow"))
    if result.others:
        table = Table(title="Other tools on this host", show_lines=False)
        for col in ("tool", "would install", "result"):
            table.add_column(col)
        for o in result.others:
            table.add_row(
                Text(o.tool),
                Text(f"{o.torch}+{o.variant}"),
                Text(o.note, style="green" if o.works else "red"),
            )
        console.print(table)
    relevant = [r for r in result.rejected if r.kinds != ["pin"]]
    relevant.sort(key=lambda r: ("pin" not in r.kinds, Version(r.torch)), reverse=True)  # pinned, newest first
    shown = relevant[:MAX_ROWS]
    hidden = len(result.rejected) - len(shown)
    caption = f"{hidden} more not shown (excluded by the torch requirement or older); see --json" if hidden else None
    table = Table(title="Rejected candidates", caption=caption)
    for col in ("variant", "torch", "why"):
        table.add_column(col)
    for r in shown:
        table.add_row(Text(r.variant), Text(r.torch), Text(r.reason))
    console.print(table)


@click.command("resolve", epilog=EXIT_CODES_HELP)
@click.option(
    "--cc",
    "ccs",
    multiple=True,
    required=True,
    metavar="X.Y",
    help="Compute capability of a GPU; repeat once per GPU (nvidia-smi --query-gpu=compute_cap).",
)
@click.option("--driver", required=True, metavar="VERSION", help="NVIDIA driver version, e.g. 595.71.05.")
@click.option(
    "--python", "python_version", required=True, metavar="X.Y", help="Target Python, e.g. 3.12 (3.13t free-threaded)."
)
@click.option("--arch", type=click.Choice(["x86_64", "aarch64"]), default="x86_64", show_default=True)
@click.option("--glibc", default=None, metavar="X.Y", help="Target glibc (ldd --version), e.g. 2.39.")
@click.option(
    "--torch", "torch_requirement", default=None, metavar="SPEC", help="PEP 440 requirement, e.g. '==2.11.0'."
)
@click.option(
    "--prefer",
    type=click.Choice(["lowest-cuda", "newest-cuda"]),
    default="lowest-cuda",
    show_default=True,
    help="Which CUDA variant of the chosen torch version to take.",
)
@click.option(
    "--data",
    "data_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Use this wheel data file instead of the packaged one.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object as the last line.")
@click.pass_context
def command(
    ctx: click.Context,
    ccs: tuple[str, ...],
    driver: str,
    python_version: str,
    arch: str,
    glibc: str | None,
    torch_requirement: str | None,
    prefer: str,
    data_path: Path | None,
    as_json: bool,
) -> None:
    """Pick the download.pytorch.org index and torch version for every GPU of a host.

    e.g. provisioner resolve --cc 12.0 --cc 12.0 --driver 595.71.05 --python 3.12 --torch '==2.11.0' --json
    """
    try:
        request = ResolveRequest.model_validate(
            {
                "cc": list(ccs),
                "driver": driver,
                "python": python_version,
                "arch": arch,
                "glibc": glibc,
                "torch": torch_requirement,
                "prefer": prefer,
            }
        )
        data = parse_data(data_path.read_text(encoding="utf-8")) if data_path else load_data()
    except (ValidationError, ValueError, OSError) as exc:
        message = _validation_message(exc) if isinstance(exc, ValidationError) else str(exc)
        if as_json:
            _emit_json(
                {"error": {"code": "invalid_input", "message": message, "fix": "correct the arguments (see --help)"}}
            )
        click.echo(f"error: {message}", err=True)
        ctx.exit(ExitCode.USAGE)
        return
    result = resolve(request, data)
    if as_json:
        _emit_json(result.contract())
    else:
        _render(result, guard(Console(file=sys.stdout, highlight=False, soft_wrap=False)))
    ctx.exit(ExitCode.OK if isinstance(result, Resolution) else ExitCode.NO_SOLUTION)
