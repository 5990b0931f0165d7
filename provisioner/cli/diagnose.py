"""`provisioner diagnose`: find why an install failed, from a log and/or live facts (ARCHITECTURE §7-8).

With --json the last stdout line is
  {"findings": [{"category", "confidence", "root_cause", "fix", "evidence": [lines], "rule", "rules"}],
   "input": {"bytes", "bytes_read", "partial", "note"},   (input: only when --log was read in part)
   "checks": [{"name", "ok": true|false|null, "detail"}]}  (checks: a live check, one per probe)
best first; no finding -> {"findings": []}. A host or bundle check (--host/--local/--lab, --bundle) adds
"checks" (one per probe) and "verdict": "healthy" | "fault".

Exit codes, one rule for every source (`support.doctor.is_fault`): 0 no fault found (no finding; for a host
or bundle also no ✗ check: "healthy"); 1 a fault found (a finding, or a ✗ check), so the same root cause
exits 1 from --log, --facts, --bundle and --host alike; 2 unusable input (no --log/--facts, unreadable
file, a FIFO/device given as --log, facts not a JSON object, a bad bundle); 4 the host is unreachable.
The log is read bounded (provisioner/diagnose/source.py): a file over 64 MiB is diagnosed from its
head and tail, and the output says so.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.text import Text

from provisioner.cli.bundle import target_from_options, target_options
from provisioner.cli.diagnose_console import finding_panel, redacted, typed_evidence_rows
from provisioner.diagnose import diagnose
from provisioner.diagnose.evidence import log_evidence
from provisioner.diagnose.source import LogInput, LogRefused, read_log
from provisioner.exitcodes import EXIT_CODES_HELP, ExitCode
from provisioner.render.safe_text import guard
from provisioner.support.diagnose_sources import BundleError, Check, HostUnreachable, bundle_report, live_report
from provisioner.support.doctor import is_fault, verdict
from provisioner.support.target import node_transport


def _fail(message: str) -> NoReturn:
    guard(Console(stderr=True, highlight=False, soft_wrap=True)).print(Text(f"error: {message}", style="bold red"))
    raise SystemExit(ExitCode.USAGE)


def _read_log(source: str) -> LogInput:
    try:
        return read_log(source)
    except LogRefused as exc:
        _fail(f"cannot read log: {exc}")
    except OSError as exc:
        _fail(f"cannot read log {source}: {exc.strerror or exc}")


def _read_facts(source: str) -> dict[str, Any]:
    try:
        raw = read_log(source)
        if raw.partial:
            _fail(f"facts {source} are larger than a facts file can be ({raw.size} bytes)")
        facts = json.loads(raw.text)
    except LogRefused as exc:
        _fail(f"cannot read facts: {exc}")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        _fail(f"cannot read facts {source}: {exc}")
    if not isinstance(facts, dict):
        _fail(f"facts {source} must be a JSON object (probe name -> output)")
    return {str(k): v for k, v in facts.items()}


@click.command(
    "diagnose",
    epilog=EXIT_CODES_HELP,
    help="Find why an install failed: match known failure signatures in a log (FILE or - for stdin), "
    "check live facts of a host (--host/--local/--lab, optionally --container), a support bundle "
    "(--bundle FILE.tar.gz) or a dict of facts (--facts FILE.json). Findings come best first.\n\n"
    "Example: provisioner diagnose --log install.log --json",
)
@click.option("--log", "log_path", metavar="FILE|-", help="Log file to diagnose ('-' reads stdin).")
@click.option("--facts", "facts_path", metavar="FILE.json", help="Live facts: JSON object of probe name -> output.")
@target_options
@click.option("--bundle", "bundle_path", metavar="FILE.tar.gz", help="Diagnose a support bundle written by `provisioner bundle`.")
@click.option("--json", "json_out", is_flag=True, help="Print the findings as one JSON line (last line of stdout).")
@click.option("--evidence", "show_evidence", is_flag=True,
              help="Also print the typed evidence read from the log (where it ran, driver, userspace, device nodes, "
                   "versions, installer phase, NCCL/Xid), JSON key 'evidence'.")
def command(log_path: str | None, facts_path: str | None, host: str | None, user: str, port: int,
            key_file: str | None, known_hosts: str, trust_new_host: bool, local: bool, lab: bool, vmid: int | None,
            venv: str | None, bundle_path: str | None, json_out: bool, show_evidence: bool) -> None:
    live = bool(host or local or lab)
    if log_path is None and facts_path is None and not live and not bundle_path:
        _fail("give --log FILE (or - for stdin), --host/--local/--lab, --bundle FILE.tar.gz and/or --facts FILE.json")
    if log_path == "-" and facts_path == "-":
        _fail("only one of --log and --facts can read stdin")
    checks: list[Check] = []
    secrets: tuple[str, ...] = ()  # the values this run knows as secret (a live target's), masked in the output
    log_in = _read_log(log_path) if log_path else None
    text = log_in.text if log_in else ""
    facts = _read_facts(facts_path) if facts_path else None
    if bundle_path:
        try:
            findings, checks = bundle_report(bundle_path, log_text=text)
        except BundleError as exc:
            _fail(str(exc))
    elif live:
        choice = target_from_options(host, user, port, key_file, known_hosts, trust_new_host, local, lab, vmid, venv)
        secrets = tuple(choice.known_secrets)
        try:
            findings, checks = asyncio.run(live_report(node_transport(choice.spec), choice.vmid, choice.venv,
                                                       log_text=text, known_secrets=choice.known_secrets))
        except HostUnreachable as exc:
            guard(Console(stderr=True, highlight=False, soft_wrap=True)).print(Text(f"error: {exc}", style="bold red"))
            raise SystemExit(ExitCode.UNREACHABLE) from None
    else:
        findings = diagnose(text, facts)
    checked = live or bool(bundle_path)  # a host or bundle check: probes judged, a verdict given
    fault = ExitCode.FAILED if is_fault(findings, checks) else ExitCode.OK
    evidence = redacted(log_evidence(text).model_dump(mode="json", exclude_defaults=True), secrets) \
        if show_evidence else None
    if json_out:
        out: dict[str, object] = {"findings": [f.to_dict() for f in findings]}
        if evidence is not None:
            out["evidence"] = evidence
        if log_in is not None and log_in.note:  # only when the reader left part of the log out
            out["input"] = log_in.to_dict()
        if checked:
            out["checks"] = [c.to_dict() for c in checks]
            out["verdict"] = "fault" if fault else "healthy"
        click.echo(json.dumps(redacted(out, secrets), ensure_ascii=False))
        raise SystemExit(fault)
    console = guard(Console(highlight=False))
    if evidence is not None:
        console.print(Text("Evidence:", style="bold"))
        for row in typed_evidence_rows(evidence):
            console.print(row, markup=False)
    if log_in is not None and log_in.note:
        console.print(Text(f"Note: {log_in.note}", style="yellow"))
    if checked:
        passed = sum(1 for c in checks if c.ok)
        failed = sum(1 for c in checks if c.ok is False)
        unchecked = sum(1 for c in checks if c.ok is None)
        console.print(Text(f"Checked ({passed} ✓, {failed} ✗, {unchecked} –):", style="bold"))
        for c in checks:
            style = "green" if c.ok else ("red" if c.ok is False else "dim")
            console.print(Text.assemble(("  " + c.mark + " ", style), (c.name, "bold"), f"  {c.detail}"))
    for finding in findings:
        console.print(finding_panel(finding, secrets))
    if checked:  # one verdict, last: "healthy: …" or what is wrong
        said = verdict(findings, checks)
        console.print(Text(said[:1].upper() + said[1:] + ".", style="red bold" if fault else "green bold"))
    elif not findings:
        console.print(Text("No known failure signature found.", style="green"))
    raise SystemExit(fault)
