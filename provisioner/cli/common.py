"""Shared pieces of the headless commands: loading playbooks, running them, printing the recap."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from provisioner import interrupts
from provisioner.assembly import open_run
from provisioner.events import Event, PlanReady
from provisioner.exitcodes import ExitCode
from provisioner.playbook import Playbook, PlaybookError, dump, load, local_file_problems
from provisioner.render.console import ConsoleRenderer
from provisioner.render.safe_text import guard
from provisioner.runner import HostResult, Mode, PlannedStep, Recap, exit_code, recap_json, run_host
from provisioner.session import (
    LabNotRunning,
    allow_lab_secrets,
    host_label,
    node_transport,
    point_at_lab,
    pve_factory,
    python_notice,
)
from provisioner.site import SiteProfile, apply_site, load_site

#: `--site FILE` on plan, replay and tui
site_option = click.option(
    "--site", "site_path", type=click.Path(dir_okay=False), default=None,
    help="A site profile (YAML: this site's mirrors, burn-in sizes) applied at run time, never recorded.")


def load_or_exit(path: str) -> Playbook:
    try:
        return load(path)
    except PlaybookError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(ExitCode.USAGE) from None


def echo_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


async def run_playbook(
    playbook: Playbook,
    playbook_path: str,
    *,
    mode: Mode,
    trust_new_host: bool = False,
    record_to: Path | None = None,
    verbose: bool = False,
    quiet: bool = False,
    json_out: bool = False,
) -> tuple[list[HostResult], Recap, Path]:
    """One host: open the run, run the playbook, finish the run (and write the recording). The progress goes
    to stderr, the answer (the plan, the recap) to stdout; with `json_out` the JSON takes stdout alone."""
    host = host_label(playbook.target)
    plans = PlanCollector([host])
    run = open_run(playbook_path, mode, [host], sinks=[renderer(verbose=verbose, quiet=quiet, json_out=json_out), plans])
    recorder = run.record(host, playbook)
    node = node_transport(playbook.target, run.bus, trust_new_host=trust_new_host)
    with interrupts.cancel_on_signals():  # SIGINT/SIGTERM: the step is interrupted, the recap still comes
        result = await run_host(playbook, run.bus, node, mode=mode, host=host,
                                pve_factory=pve_factory(playbook.target))
    results = [result]
    run.finish(results)
    if record_to is not None and mode == "apply" and not result.failed:
        dump(recorder.playbook(), record_to)
    recap = recap_json(results)
    if mode == "plan":
        recap["plan"] = plans.by_host
    return results, recap, run.log_path


class PlanCollector:
    """`plan --json`: every step's changes, notes and commands by host, as the (redacted) bus carried them —
    what the recap's "changed" count stands for."""

    def __init__(self, hosts: list[str]) -> None:
        self.by_host: dict[str, list[PlannedStep]] = {host: [] for host in hosts}

    def __call__(self, event: Event) -> None:
        if isinstance(event, PlanReady) and (event.changes or event.commands):
            self.by_host.setdefault(event.host, []).append(
                {"index": event.index, "step": event.step, "changes": list(event.changes),
                 "commands": list(event.commands), "notes": list(event.notes)})


def stderr_console() -> Console:
    return guard(Console(stderr=True, highlight=False, soft_wrap=True))


def stdout_console() -> Console:
    return guard(Console(highlight=False, soft_wrap=True))


def renderer(*, verbose: bool, quiet: bool, json_out: bool, multi_host: bool = False) -> ConsoleRenderer:
    """The run's progress on stderr, its answer on stdout (on stderr too under `--json`: the JSON is stdout's)."""
    progress = stderr_console()
    return ConsoleRenderer(progress, verbose=verbose, quiet=quiet, multi_host=multi_host,
                           answer=progress if json_out else stdout_console())


def load_site_or_exit(path: str | None) -> SiteProfile | None:
    if path is None:
        return None
    try:
        return load_site(path)
    except PlaybookError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(ExitCode.USAGE) from None


def with_lab(playbook: Playbook, lab: bool, site_path: str | None = None) -> Playbook:
    """`--lab`: the playbook pointed at the running lab, with the lab's site profile; `--site FILE`: that
    site profile on top. The recorder writes back only what the playbook itself set (`provisioner.site`)."""
    site = load_site_or_exit(site_path)
    if lab:
        try:
            pointed = point_at_lab(playbook)
        except LabNotRunning as exc:
            raise click.ClickException(str(exc)) from None
        notice = python_notice(playbook, pointed)
        if notice:
            click.echo(notice, err=True)
        playbook = pointed
    return apply_site(playbook, site) if site is not None else playbook


def common_run(playbook_path: str, *, mode: Mode, json_out: bool, lab: bool, trust_new_host: bool,
               check: bool = False, record_to: str | None = None, site_path: str | None = None,
               verbose: bool = False, quiet: bool = False) -> None:
    if lab:
        with contextlib.suppress(LabNotRunning):  # `with_lab` says so below
            allow_lab_secrets()  # a recording of a lab run refers to the lab's password file
    playbook = with_lab(load_or_exit(playbook_path), lab, site_path)
    if problems := local_file_problems(playbook.target):
        click.echo("error: " + "\n  ".join([f"{playbook_path}: invalid target files:", *problems]), err=True)
        raise SystemExit(ExitCode.USAGE)
    results, recap, log_path = asyncio.run(run_playbook(
        playbook, playbook_path, mode=mode, trust_new_host=trust_new_host,
        record_to=Path(record_to) if record_to else None, verbose=verbose, quiet=quiet, json_out=json_out))
    stderr_console().print(f"run log: {log_path}", markup=False)
    if json_out:
        echo_json(recap)
    code = exit_code(results, check=check)
    if code:
        raise SystemExit(code)
