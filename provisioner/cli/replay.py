"""`provisioner replay PLAYBOOK`: apply a playbook headless and idempotently."""

from __future__ import annotations

import click

from provisioner.cli.common import common_run


@click.command("replay")
@click.argument("playbook", type=click.Path(dir_okay=False))
@click.option("--lab", is_flag=True, help="Point the playbook's target at the running lab.")
@click.option("--json", "json_out", is_flag=True, help="Print the recap as JSON (last stdout line).")
@click.option("--trust-new-host", is_flag=True, help="Accept and record an unknown SSH host key.")
@click.option("--record", "record_to", type=click.Path(dir_okay=False), default=None,
              help="Write the playbook as run (with resolved facts) to this file.")
def command(playbook: str, lab: bool, json_out: bool, trust_new_host: bool, record_to: str | None) -> None:
    """Apply PLAYBOOK; a second replay reports no changes; an interrupted one resumes.

    Example: provisioner replay playbooks/blackwell-8gpu-lxc.yaml --lab --json
    """
    common_run(playbook, mode="apply", json_out=json_out, lab=lab, trust_new_host=trust_new_host,
               record_to=record_to)
