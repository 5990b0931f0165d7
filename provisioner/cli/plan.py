"""`provisioner plan PLAYBOOK`: gather facts and show what would change; change nothing."""

from __future__ import annotations

import click

from provisioner.cli.common import common_run


@click.command("plan")
@click.argument("playbook", type=click.Path(dir_okay=False))
@click.option("--lab", is_flag=True, help="Point the playbook's target at the running lab.")
@click.option("--json", "json_out", is_flag=True, help="Print the recap as JSON (last stdout line).")
@click.option("--check", is_flag=True, help="Exit 10 when changes are pending.")
@click.option("--trust-new-host", is_flag=True, help="Accept and record an unknown SSH host key.")
def command(playbook: str, lab: bool, json_out: bool, check: bool, trust_new_host: bool) -> None:
    """Show what PLAYBOOK would change, without changing anything.

    Example: provisioner plan playbooks/blackwell-8gpu-lxc.yaml --lab --check
    """
    common_run(playbook, mode="plan", json_out=json_out, lab=lab, trust_new_host=trust_new_host, check=check)
