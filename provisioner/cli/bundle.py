"""`provisioner bundle`: collect a redacted support bundle (tar.gz) from a node and its container.

With --json the last stdout line is
  {"bundle": PATH, "size": bytes, "sha256": ..., "members": n, "probes": {"ok": n, "absent": n, "failed": n,
   "timeout": n, "unreachable": n, "skipped": n}, "failed_probes": [{"name", "status", "why"}],
   "unreachable": null|reason, "redacted_members": [...],
   "findings": [{"category", "confidence", "root_cause", "fix", "evidence", "rule", "rules"}]}
Exit 0 when the bundle is written, 4 when the node could not be reached (the bundle is still
written: it records why), 2 on bad options, 1 when the bundle cannot be written.

`target_options` / `TargetChoice` are shared with `provisioner diagnose --host`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.text import Text

from provisioner import secrets
from provisioner.diagnose import diagnose
from provisioner.exitcodes import EXIT_CODES_HELP, ExitCode
from provisioner.playbook import MAX_BYTES, PlaybookError, load
from provisioner.render.safe_text import guard
from provisioner.session import LabNotRunning
from provisioner.support.bundle import write_bundle
from provisioner.support.collect import collect
from provisioner.support.doctor import check_of
from provisioner.support.probes import BUG_REPORT_BOUND_S, bundle_probes
from provisioner.support.scrub import Scrubber
from provisioner.support.target import NodeSpec, lab_spec, node_transport

F = TypeVar("F", bound=Callable[..., Any])


def _fail(message: str, code: ExitCode = ExitCode.USAGE) -> NoReturn:
    guard(Console(stderr=True, highlight=False, soft_wrap=True)).print(Text(f"error: {message}", style="bold red"))
    raise SystemExit(code)


def target_options(f: F) -> F:
    """--host/--user/--port/--key/--known-hosts/--trust-new-host/--local/--lab/--container/--venv."""
    options = [
        click.option("--host", metavar="[USER@]HOST", help="The Proxmox node to collect from, over SSH."),
        click.option("--user", default=None, metavar="USER", help="SSH user (default root, or USER@ from --host)."),
        click.option("--port", default=22, show_default=True, type=click.IntRange(1, 65535), help="SSH port."),
        click.option("--key", "key_file", metavar="FILE", type=click.Path(dir_okay=False),
                     help="SSH private key (default: your agent and ~/.ssh keys)."),
        click.option("--known-hosts", default="~/.ssh/known_hosts", show_default=True, metavar="FILE",
                     help="known_hosts file the host key is checked against."),
        click.option("--trust-new-host", is_flag=True,
                     help="Accept and record the host key of a host not yet in known_hosts."),
        click.option("--local", is_flag=True, help="Collect from this machine (the tool runs on the node itself)."),
        click.option("--lab", is_flag=True, help="Collect from the running lab (provisioner lab up)."),
        click.option("--container", "vmid", type=click.IntRange(100, 999_999_999), metavar="VMID",
                     help="Also collect inside this LXC container (pct exec)."),
        click.option("--venv", metavar="PATH", help="The torch venv to inspect (default /opt/torch-venv)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


@dataclass
class TargetChoice:
    spec: NodeSpec
    vmid: int | None
    venv: str | None
    known_secrets: list[str] = field(default_factory=list)


def target_from_options(
    host: str | None, user: str | None, port: int, key_file: str | None, known_hosts: str, trust_new_host: bool,
    local: bool, lab: bool, vmid: int | None, venv: str | None, default_host: str | None = None,
) -> TargetChoice:
    """Validate the target options (exits 2 on a bad combination)."""
    if (host and (local or lab)) or (local and lab) or not (host or default_host or local or lab):
        _fail("give exactly one of --host HOST, --local or --lab")
    if venv is not None and not venv.startswith("/"):
        _fail(f"--venv must be an absolute path in the target, got {venv!r}")
    if lab:
        try:
            spec, known = lab_spec()
        except LabNotRunning as exc:
            _fail(str(exc), ExitCode.UNREACHABLE)
        return TargetChoice(spec, vmid, venv, known)
    if local:
        return TargetChoice(NodeSpec(local=True), vmid, venv)
    address = host or default_host or ""
    if "@" in address:
        at_user, address = address.rsplit("@", 1)
        user = user or at_user
    spec = NodeSpec(host=address, user=user or "root", port=port, key_file=key_file, known_hosts=known_hosts,
                    trust_new_host=trust_new_host)
    try:
        node_transport(spec)  # validates the address and user without connecting
    except ValueError as exc:
        _fail(str(exc))
    return TargetChoice(spec, vmid, venv)


def _playbook_secrets(path: str) -> tuple[list[str], str, dict[str, Any]]:
    """Resolve the playbook's secret references (so their values get redacted); its text; its target."""
    try:
        playbook = load(path)
    except PlaybookError as exc:
        _fail(str(exc))
    known: list[str] = []
    api = playbook.target.api
    for ref in (api.password, api.token_value) if api else ():
        if ref:
            try:
                known.append(secrets.resolve(ref))
            except secrets.SecretError as exc:
                guard(Console(stderr=True, highlight=False, soft_wrap=True)).print(f"warning: {exc}", markup=False)
    target = playbook.target
    return known, playbook_text(path), {"host": target.host, "vmid": target.container, "user": target.ssh.user,
                                         "port": target.ssh.port, "key_file": target.ssh.key_file,
                                         "known_hosts": target.ssh.known_hosts, "local": target.local}


def playbook_text(path: str) -> str:
    """The playbook file as it is (already validated and size-bounded by `load`)."""
    with open(path, "rb") as fh:
        return fh.read(MAX_BYTES).decode("utf-8", "replace")


def _given(name: str) -> bool:
    """True when option `name` was given on the command line (not its default)."""
    ctx = click.get_current_context(silent=True)
    source = ctx.get_parameter_source(name) if ctx is not None else None
    return source is not None and source is not click.core.ParameterSource.DEFAULT


@click.command(
    "bundle",
    epilog=EXIT_CODES_HELP,
    help="Collect a redacted support bundle: node and container facts, nvidia-smi -q, versions, the container "
    "config, NVRM/Xid kernel lines, the installer log, the venv's packages, a torch collect_env-like summary and "
    "the last run logs, with a manifest (sha256 of every member). Secrets, tokens and passwords are redacted.",
)
@target_options
@click.option("-o", "--output", "output", required=True, metavar="FILE.tar.gz", help="Where to write the bundle.")
@click.option("--playbook", metavar="PLAYBOOK",
              help="Playbook whose secret references are resolved so their values are redacted "
                   "(its target is used when no --host/--local/--lab is given); it is added to the bundle.")
@click.option("--no-runs", is_flag=True, help="Leave out the run logs.")
@click.option("--bug-report-timeout", "bug_report_timeout", type=click.IntRange(1, 3600),
              default=BUG_REPORT_BOUND_S, show_default=True, metavar="SECONDS",
              help="Bound on the node's nvidia-bug-report.sh (it hangs where a GPU stops responding); past it "
                   "the report is stopped and the bundle says it timed out.")
@click.option("--json", "json_out", is_flag=True, help="Print a JSON summary as the last line of stdout.")
def command(host: str | None, user: str | None, port: int, key_file: str | None, known_hosts: str,
            trust_new_host: bool, local: bool, lab: bool, vmid: int | None, venv: str | None, output: str,
            playbook: str | None, no_runs: bool, bug_report_timeout: int, json_out: bool) -> None:
    known: list[str] = []
    extra: dict[str, str] = {}
    default_host: str | None = None
    if playbook:
        known, text, pb_target = _playbook_secrets(playbook)
        extra["playbook.yaml"] = text
        if not (host or local or lab):
            # The playbook's target, as the playbook says to reach it: its user, port, key and known_hosts
            # (each unless given on the command line) — not ~/.ssh/known_hosts and the agent's keys.
            if pb_target["local"]:
                local = True
            else:
                default_host = str(pb_target["host"])
                user = user or str(pb_target["user"])
                port = port if _given("port") else int(pb_target["port"])
                key_file = key_file if _given("key_file") else pb_target["key_file"]
                known_hosts = known_hosts if _given("known_hosts") else str(pb_target["known_hosts"])
        vmid = vmid if vmid is not None else pb_target["vmid"]
    choice = target_from_options(host, user, port, key_file, known_hosts, trust_new_host, local, lab, vmid, venv,
                                 default_host)
    known += choice.known_secrets
    err = guard(Console(stderr=True, highlight=False, soft_wrap=True))
    where = f"CT {choice.vmid} on {choice.spec.label}" if choice.vmid is not None else choice.spec.label
    err.print(f"collecting from {where} …", markup=False)

    async def run() -> Any:
        node = node_transport(choice.spec)
        try:
            return await collect(node, choice.vmid, choice.venv, probes=bundle_probes(bug_report_timeout))
        finally:
            await node.close()

    evidence = asyncio.run(run())
    try:
        result = write_bundle(evidence, output, known_secrets=known, extra_files=extra, include_runs=not no_runs)
    except OSError as exc:
        _fail(f"cannot write {output}: {exc.strerror or exc}", ExitCode.FAILED)
    scrub = Scrubber(known)
    findings = [scrub.scrub_obj(f.to_dict()) for f in diagnose(evidence.report_text(), evidence.facts, scrub.secrets)]
    digest = hashlib.sha256(result.path.read_bytes()).hexdigest()
    counts = evidence.counts()
    failed = [{"name": r.name, "status": r.status, "why": scrub(check_of(r).detail)}
              for r in evidence.records if r.status in ("failed", "timeout", "unreachable")]
    if json_out:
        click.echo(json.dumps({"bundle": str(result.path), "size": result.size, "sha256": digest,
                               "members": len(result.members) + 1, "probes": counts, "failed_probes": failed,
                               "unreachable": scrub(evidence.unreachable) if evidence.unreachable else None,
                               "container_unreachable": scrub(evidence.container_unreachable)
                               if evidence.container_unreachable else None,
                               "redacted_members": result.redacted_members, "findings": findings}))
    else:
        console = guard(Console(highlight=False))
        console.print(Text.assemble(("bundle: ", "bold"), str(result.path),
                                    f"  ({result.size} bytes, {len(result.members) + 1} members, sha256 {digest[:16]}…)"))
        console.print("probes: " + ", ".join(f"{n} {k}" for k, n in counts.items() if n), markup=False)
        for fp in failed:
            console.print(Text.assemble(("  ✗ ", "red"), (str(fp["name"]), "bold"), f"  {fp['why']}"))
        if result.redacted_members:
            console.print(f"redacted: {', '.join(result.redacted_members)}", markup=False)
        for f in findings[:3]:
            assert isinstance(f, dict)
            console.print(Text.assemble((f"{f['category']} ", "bold yellow"), f"({f['confidence']:.2f}) ",
                                        str(f["root_cause"])))
    if evidence.unreachable is not None:
        err.print(Text(f"node unreachable: {scrub(evidence.unreachable)}", style="bold red"))
        raise SystemExit(ExitCode.UNREACHABLE)
    if evidence.container_unreachable is not None:
        err.print(Text(f"container {choice.vmid}: {scrub(evidence.container_unreachable)}", style="yellow"))
