"""`provisioner replay PLAYBOOK`: apply a playbook headless and idempotently, on one host or a fleet."""

from __future__ import annotations

import asyncio
import time

import click

from provisioner import interrupts
from provisioner.assembly import open_run
from provisioner.cli.common import (
    common_run,
    echo_json,
    load_or_exit,
    load_site_or_exit,
    renderer,
    site_option,
    stderr_console,
)
from provisioner.cli.verbosity import check_verbosity, verbosity_options
from provisioner.exitcodes import REPLAY_EXIT_CODES, ExitCode
from provisioner.fleet import failed_hosts, load_inventory, report_path, run_fleet, write_report
from provisioner.playbook import PlaybookError
from provisioner.runner import Mode, exit_code, recap_json


@click.command("replay", epilog=REPLAY_EXIT_CODES)
@click.argument("playbook", type=click.Path(dir_okay=False))
@click.option("--lab", is_flag=True, help="Point the playbook's target at the running lab.")
@click.option("--json", "json_out", is_flag=True, help="Print the recap as JSON (last stdout line).")
@click.option("--trust-new-host", is_flag=True, help="Accept and record an unknown SSH host key.")
@click.option("--record", "record_to", type=click.Path(dir_okay=False), default=None,
              help="Write the playbook as run (with resolved facts) to this file.")
@click.option("--inventory", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Run on every host of this inventory (YAML) concurrently.")
@click.option("--parallel", type=click.IntRange(1, 256), default=8, show_default=True,
              help="Hosts provisioned at the same time (with --inventory).")
@click.option("--limit", default=None, help="Comma-separated host names of the inventory to run on.")
@click.option("--resume-failed", is_flag=True, help="Only the hosts that failed in the last fleet run.")
@verbosity_options
@site_option
def command(playbook: str, lab: bool, json_out: bool, trust_new_host: bool, record_to: str | None,
            inventory: str | None, parallel: int, limit: str | None, resume_failed: bool, verbose: bool,
            quiet: bool, site_path: str | None) -> None:
    """Apply PLAYBOOK; a second replay reports no changes; an interrupted one resumes.

    Example: provisioner replay playbooks/blackwell-8gpu-lxc.yaml --lab --json

    Fleet: provisioner replay PLAYBOOK --inventory hosts.yaml --parallel 8 [--limit a,b] [--resume-failed]

    Progress (one line per step; -v every command) goes to stderr, the recap to stdout.
    """
    check_verbosity(verbose, quiet)
    if inventory is None:
        if limit or resume_failed:
            raise click.UsageError("--limit and --resume-failed need --inventory")
        common_run(playbook, mode="apply", json_out=json_out, lab=lab, trust_new_host=trust_new_host,
                   record_to=record_to, site_path=site_path, verbose=verbose, quiet=quiet)
        return
    fleet_run(playbook, inventory, mode="apply", json_out=json_out, trust_new_host=trust_new_host,
              parallel=parallel, limit=limit, resume_failed=resume_failed, verbose=verbose, quiet=quiet,
              site_path=site_path)


def fleet_run(playbook: str, inventory: str, *, mode: Mode, json_out: bool, trust_new_host: bool, parallel: int,
              limit: str | None, resume_failed: bool, quiet: bool, check: bool = False,
              site_path: str | None = None, verbose: bool = False) -> None:
    """Run PLAYBOOK on every host of INVENTORY (plan or apply), print the fleet recap; exit with the most
    specific code of its failed hosts (`runner.exit_code`)."""
    pb = load_or_exit(playbook)
    site = load_site_or_exit(site_path)
    try:
        inv = load_inventory(inventory)
    except PlaybookError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(ExitCode.USAGE) from None
    entries = inv.hosts
    if limit:
        wanted = {x.strip() for x in limit.split(",") if x.strip()}
        unknown = wanted - {e.label for e in entries}
        if unknown:
            raise click.UsageError(f"--limit names hosts not in the inventory: {', '.join(sorted(unknown))}")
        entries = [e for e in entries if e.label in wanted]
    rpath = report_path(playbook, inventory)
    if resume_failed:
        failed = failed_hosts(rpath)
        entries = [e for e in entries if e.label in failed]
        if not entries:
            click.echo("no failed hosts in the last fleet run: nothing to resume", err=True)
            if json_out:
                echo_json({"hosts": {}, "status": "ok"})
            return
    console = stderr_console()
    run = open_run(playbook, mode, [e.label for e in entries],
                   sinks=[renderer(verbose=verbose, quiet=quiet, json_out=json_out, multi_host=True)])
    started = time.time()
    results = asyncio.run(run_fleet(pb, entries, run.bus, mode=mode, parallel=parallel, trust_new_host=trust_new_host,
                                    site=site))
    run.finish(results)
    doc = write_report(rpath, results, started) if mode == "apply" else recap_json(results)
    console.print(f"run log: {run.log_path}" + (f"\nfleet report: {rpath}" if mode == "apply" else ""),
                  markup=False)
    if json_out:
        echo_json({"hosts": doc["hosts"], "status": doc["status"]})
    if interrupts.received() is not None:
        raise SystemExit(interrupts.exit_code())
    code = exit_code(results, check=check)
    if code:
        raise SystemExit(code)
