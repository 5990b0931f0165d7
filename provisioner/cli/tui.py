"""`provisioner tui [PLAYBOOK] [--lab]`: the interactive wizard (Textual, imported lazily)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import click

from provisioner.exitcodes import ExitCode

DEFAULT_PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "blackwell-8gpu-lxc.yaml"


@click.command("tui", epilog="""\b
Exit codes: 0 ok (also after quitting), 2 invalid playbook or flag, 4 the lab could not start,
130 a step was stopped (interrupted): the command that resumes it is printed.
\b
Examples:
  provisioner tui --lab                          the shipped playbook against the lab (started if needed)
  provisioner tui recorded.yaml --lab            resume a recorded or half-finished run where the host stands""")
@click.argument("playbook", required=False, type=click.Path(dir_okay=False, exists=True))
@click.option("--lab", is_flag=True,
              help="Point the wizard at the lab; starts one when none runs (it keeps running after the wizard "
                   "exits unless --stop-lab).")
@click.option("--stop-lab", is_flag=True, help="With --lab: stop the lab this command started when the wizard exits.")
@click.option("--playbook", "playbook_opt", type=click.Path(dir_okay=False), default=None, hidden=True,
              help="Same as the PLAYBOOK argument (kept for old scripts).")
@click.option("--page", default="connect", show_default=True, help="Page to open first.")
@click.option("--record", "record_to", type=click.Path(dir_okay=False), default=None,
              help="Where the recording (a playbook of the steps that completed, with the resolved facts) is saved "
                   "after every applied step and by ctrl+s (default: <state dir>/recorded/recorded-<run id>.yaml).")
@click.option("--site", "site_path", type=click.Path(dir_okay=False), default=None,
              help="A site profile (YAML: this site's mirrors, burn-in sizes) applied at run time, never recorded.")
def command(playbook: str | None, lab: bool, stop_lab: bool, playbook_opt: str | None, page: str,
            record_to: str | None, site_path: str | None) -> None:
    """The interactive wizard: each page shows a step's plan, applies it on confirmation and streams
    its output; the recording of what ran is saved as steps complete (replay it with `provisioner replay`).

    Given a PLAYBOOK (e.g. a recording), the wizard resumes it: every step the host already matches is
    checked and recorded as "no change", and the wizard opens at the first step with changes to confirm.
    Without one it starts at the Connect page with the shipped Blackwell playbook.
    """
    path = playbook or playbook_opt or str(DEFAULT_PLAYBOOK)
    resume = playbook is not None
    from screens.app import ProvisionerApp  # Textual only when the wizard runs
    from screens.pages import PAGE_TITLES

    if page not in PAGE_TITLES:
        names = ", ".join(PAGE_TITLES)
        raise click.BadParameter(f"unknown page {page!r} (one of {names})", param_hint="--page")

    def open_session() -> Any:
        """Load the playbook and the engine after the first frame (the wizard paints first)."""
        from provisioner.playbook import PlaybookError, load
        from provisioner.session import LabNotRunning, allow_lab_secrets, point_at_lab
        from provisioner.site import apply_site, load_site
        from screens.wizard_session import WizardSession

        if lab:
            with contextlib.suppress(LabNotRunning):  # point_at_lab says so below
                allow_lab_secrets()  # a recording of a lab run refers to the lab's password file
        try:
            playbook = load(path)
            site = load_site(site_path) if site_path else None
        except PlaybookError as exc:
            raise click.UsageError(str(exc)) from None
        if lab:
            try:
                playbook = point_at_lab(playbook)
            except LabNotRunning as exc:
                raise click.ClickException(str(exc)) from None
        if site is not None:
            playbook = apply_site(playbook, site)
        return WizardSession(playbook, playbook_path=path, lab=lab, record_to=record_to)

    started_lab = _ensure_lab() if lab else None
    try:
        app = ProvisionerApp(open_session, start_page=page, lab=lab, resume=resume)
        code = app.run()
        if app.resume_command:  # the wizard's screen is gone: the terminal says how to continue
            click.echo(f"resume with: {app.resume_command}", err=True)
    finally:
        if stop_lab:
            _stop(started_lab)
        elif started_lab is not None:
            click.echo(f"LAB: still running in {started_lab.root} (`provisioner lab down` stops it)", err=True)
    raise SystemExit(int(code or app.return_code or ExitCode.OK))


def _ensure_lab() -> Any:
    """Start the lab (at PROVISIONER_LAB_ROOT or the default root) unless one runs; returns the `Lab`
    started here (to stop on exit), or None when one was already running."""
    from provisioner.lab.lab import Lab, LabError
    from provisioner.lab.sandbox import SandboxUnavailable, unshare_prefix

    lab = Lab()
    if lab.running_pid() is not None and lab.connection() is not None:
        return None
    try:
        unshare_prefix()
    except SandboxUnavailable as exc:
        click.echo(str(exc).splitlines()[0], err=True)
        raise SystemExit(ExitCode.USAGE) from None
    click.echo(f"LAB: starting the lab in {lab.root}", err=True)
    try:
        _, started = lab.up()
    except LabError as exc:
        raise click.ClickException(str(exc)) from None
    return lab if started else None


def _stop(lab: Any) -> None:
    if lab is not None:
        lab.down()
        click.echo(f"LAB: stopped ({lab.root})", err=True)
