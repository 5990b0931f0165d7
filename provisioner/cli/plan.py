"""`provisioner plan PLAYBOOK`: gather facts and show what would change; change nothing."""

from __future__ import annotations

import click

from provisioner.cli.common import common_run, site_option
from provisioner.cli.verbosity import check_verbosity, verbosity_options
from provisioner.exitcodes import PLAN_EXIT_CODES


@click.command("plan", epilog=PLAN_EXIT_CODES)
@click.argument("playbook", type=click.Path(dir_okay=False))
@click.option("--lab", is_flag=True, help="Point the playbook's target at the running lab.")
@click.option("--json", "json_out", is_flag=True,
              help="Print the recap and the plan as JSON on stdout (the plan's text goes to stderr).")
@click.option("--check", is_flag=True, help="Exit 10 when changes are pending.")
@click.option("--trust-new-host", is_flag=True, help="Accept and record an unknown SSH host key.")
@click.option("--inventory", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Plan for every host of this inventory (YAML) concurrently.")
@click.option("--parallel", type=click.IntRange(1, 256), default=8, show_default=True,
              help="Hosts planned at the same time (with --inventory).")
@click.option("--limit", default=None, help="Comma-separated host names of the inventory to plan for.")
@verbosity_options
@site_option
def command(playbook: str, lab: bool, json_out: bool, check: bool, trust_new_host: bool, inventory: str | None,
            parallel: int, limit: str | None, verbose: bool, quiet: bool, site_path: str | None) -> None:
    """Show what PLAYBOOK would change, without changing anything.

    Example: provisioner plan playbooks/blackwell-8gpu-lxc.yaml --lab --check

    Fleet: provisioner plan PLAYBOOK --inventory hosts.yaml --check (exit 10 when any host has changes)

    The plan (each step, what it will change) and its recap go to stdout, progress to stderr:
    `provisioner plan PLAYBOOK --lab | grep 'will change'` lists the changes.
    """
    check_verbosity(verbose, quiet)
    if inventory is not None:
        from provisioner.cli.replay import fleet_run

        fleet_run(playbook, inventory, mode="plan", json_out=json_out, trust_new_host=trust_new_host,
                  parallel=parallel, limit=limit, resume_failed=False, verbose=verbose, quiet=quiet, check=check,
                  site_path=site_path)
        return
    if limit:
        raise click.UsageError("--limit needs --inventory")
    common_run(playbook, mode="plan", json_out=json_out, lab=lab, trust_new_host=trust_new_host, check=check,
               site_path=site_path, verbose=verbose, quiet=quiet)
