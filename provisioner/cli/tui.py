"""`provisioner tui [--lab] [--playbook FILE]`: the interactive wizard (Textual, imported lazily)."""

from __future__ import annotations

from pathlib import Path

import click

from provisioner.cli.common import load_or_exit
from provisioner.exitcodes import ExitCode
from provisioner.session import LabNotRunning, point_at_lab

DEFAULT_PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "blackwell-8gpu-lxc.yaml"


@click.command("tui")
@click.option("--lab", is_flag=True, help="Point the wizard at the running lab (`provisioner lab up`).")
@click.option("--playbook", "playbook_path", type=click.Path(dir_okay=False), default=None,
              help="Playbook giving the steps and defaults (default: the shipped Blackwell playbook).")
@click.option("--page", default="connect", show_default=True, help="Page to open first.")
@click.option("--record", "record_to", type=click.Path(dir_okay=False), default=None,
              help="Where the Summary page saves the playbook of what ran (default: ./recorded-<run id>.yaml).")
def command(lab: bool, playbook_path: str | None, page: str, record_to: str | None) -> None:
    """The interactive wizard: each page shows a step's plan, applies it on confirmation and streams
    its output; the Summary page saves the playbook of what ran (replay it with `provisioner replay`).

    Example: provisioner tui --lab
    """
    path = playbook_path or str(DEFAULT_PLAYBOOK)
    playbook = load_or_exit(path)
    if lab:
        try:
            playbook = point_at_lab(playbook)
        except LabNotRunning as exc:
            raise click.ClickException(str(exc)) from None
    from screens.app import ProvisionerApp  # Textual only when the wizard runs
    from screens.wizard_session import PAGES, WizardSession

    if page not in {p.name for p in PAGES}:
        names = ", ".join(p.name for p in PAGES)
        raise click.BadParameter(f"unknown page {page!r} (one of {names})", param_hint="--page")
    session = WizardSession(playbook, playbook_path=path, lab=lab, record_to=record_to)
    code = ProvisionerApp(session, start_page=page, lab=lab).run()
    raise SystemExit(int(code or ExitCode.OK))
