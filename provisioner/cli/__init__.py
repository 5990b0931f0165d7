"""The headless face: `provisioner <command>`.

Each command lives in its own module of this package and exposes a `click.Command` named
`command`. Modules are imported lazily so that `provisioner resolve` does not pay for Textual or
torch.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

import click

from provisioner.exitcodes import EXIT_CODES_HELP

# name -> (module, one-line summary with an example)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("demo", "Start the lab, replay the shipped Blackwell playbook, print the recap.  e.g. provisioner demo"),
    "lab": ("lab", "Run the embedded Proxmox lab.  e.g. provisioner lab up --scenario no-uvm"),
    "plan": ("plan", "Show what a playbook would change.  e.g. provisioner plan playbooks/blackwell-8gpu-lxc.yaml --lab"),
    "replay": ("replay", "Apply a playbook headless.  e.g. provisioner replay playbooks/blackwell-8gpu-lxc.yaml --lab"),
    "resolve": ("resolve", "Pick the PyTorch wheel index.  e.g. provisioner resolve --cc 12.0 --driver 595.71.05 --python 3.12"),
    "burnin": ("burnin", "Multi-GPU burn-in.  e.g. provisioner burnin --backend gloo --world-size 4 --json"),
    "diagnose": ("diagnose", "Find why an install failed.  e.g. provisioner diagnose --log install.log --json"),
    "export": ("export", "Export a proven runtime (pylock/flox/nix/oci).  e.g. provisioner export PLAYBOOK --format nix -o out"),
    "import": ("import_export", "Build and prove a venv from an export.  e.g. provisioner import out --playbook P --lab"),
    "bundle": ("bundle", "Collect a redacted support bundle.  e.g. provisioner bundle --host root@pve -o b.tar.gz"),
    "tui": ("tui", "The interactive wizard.  e.g. provisioner tui --lab"),
}


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        try:
            module = importlib.import_module(f"provisioner.cli.{entry[0]}")
        except ModuleNotFoundError as exc:
            if exc.name == f"provisioner.cli.{entry[0]}":
                return _not_available(cmd_name, entry[1])
            raise
        cmd: click.Command = module.command
        return cmd

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        """A mistyped command names the closest ones (`provisioner demoo`: "Did you mean 'demo'?")."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMANDS and not ctx.resilient_parsing:
            ctx.fail(no_such_command(name))
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, summary) for name, (_, summary) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def no_such_command(name: str) -> str:
    """`No such command 'demoo'. Did you mean 'demo'?` (difflib's close matches among the commands)."""
    close = difflib.get_close_matches(name, list(COMMANDS), n=3, cutoff=0.6)
    if not close:
        return f"No such command {name!r}. The commands: {', '.join(COMMANDS)}."
    if len(close) == 1:
        return f"No such command {name!r}. Did you mean {close[0]!r}?"
    return f"No such command {name!r}. Did you mean one of: {', '.join(repr(c) for c in close)}?"


def _not_available(name: str, summary: str) -> click.Command:
    def _run() -> None:
        raise click.ClickException(f"'{name}' is not available in this build")

    return click.Command(name, callback=_run, help=summary)


@click.group(cls=LazyGroup, epilog=EXIT_CODES_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpu-provisioner")
def main() -> None:
    """gpu-provisioner: take a Proxmox VE node with NVIDIA GPUs to a proven PyTorch environment."""
    from provisioner.render.safe_text import install_streams  # what a host says is shown as text, never run

    click.get_current_context().call_on_close(install_streams())


def run(args: list[str] | None = None) -> Any:
    """Entry for tests: run the CLI in-process without exiting the interpreter."""
    return main.main(args=args, standalone_mode=False)
