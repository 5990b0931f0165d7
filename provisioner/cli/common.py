"""Shared pieces of the headless commands: loading playbooks, running them, printing the recap."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from provisioner import interrupts
from provisioner.events import Bus
from provisioner.exitcodes import ExitCode
from provisioner.playbook import Playbook, PlaybookError, dump, load, local_file_problems
from provisioner.render.console import ConsoleRenderer
from provisioner.runlog import JsonlRunLog, Recorder
from provisioner.runner import HostResult, Mode, finish_event, new_run_id, recap_json, run_host, start_event
from provisioner.session import LabNotRunning, host_label, lab_shared, node_transport, point_at_lab, pve_factory


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
    json_out: bool,
    trust_new_host: bool = False,
    lab: bool = False,
    record_to: Path | None = None,
    verbose: bool = True,
) -> tuple[list[HostResult], dict[str, Any], Path]:
    run_id = new_run_id()
    runlog = JsonlRunLog(run_id)
    bus = Bus(runlog, ConsoleRenderer(Console(stderr=True, highlight=False, soft_wrap=True), verbose=verbose))
    recorder = Recorder(playbook)
    bus.subscribe(recorder)
    host = host_label(playbook.target)
    bus.emit(start_event(run_id, playbook_path, mode, [host]))
    node = node_transport(playbook.target, bus, trust_new_host=trust_new_host)
    with interrupts.cancel_on_signals():  # SIGINT/SIGTERM: the step is interrupted, the recap still comes
        result = await run_host(playbook, bus, node, mode=mode, host=host,
                                pve_factory=pve_factory(playbook.target), lab=lab, recorder=recorder,
                                shared=lab_shared() if lab else None)
    results = [result]
    bus.emit(finish_event(run_id, results))
    runlog.close()
    if record_to is not None and mode == "apply" and not result.failed:
        dump(recorder.playbook(), record_to)
    return results, recap_json(results), runlog.path


def common_run(playbook_path: str, *, mode: Mode, json_out: bool, lab: bool, trust_new_host: bool,
               check: bool = False, record_to: str | None = None) -> None:
    playbook = load_or_exit(playbook_path)
    if lab:
        try:
            playbook = point_at_lab(playbook)
        except LabNotRunning as exc:
            raise click.ClickException(str(exc)) from None
    if problems := local_file_problems(playbook.target):
        click.echo("error: " + "\n  ".join([f"{playbook_path}: invalid target files:", *problems]), err=True)
        raise SystemExit(ExitCode.USAGE)
    results, recap, log_path = asyncio.run(run_playbook(
        playbook, playbook_path, mode=mode, json_out=json_out, trust_new_host=trust_new_host, lab=lab,
        record_to=Path(record_to) if record_to else None))
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"run log: {log_path}", markup=False)
    if json_out:
        echo_json(recap)
    if recap["status"] != "ok":
        code = max((r.exit_code for r in results), default=1)
        raise SystemExit(code if code else ExitCode.FAILED)
    if check and any(r.pending_changes for r in results):
        raise SystemExit(ExitCode.CHANGES_PENDING)
