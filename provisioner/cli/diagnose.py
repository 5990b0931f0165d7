"""`provisioner diagnose`: find why an install failed, from a log and/or live facts (ARCHITECTURE §7-8).

With --json the last stdout line is
  {"findings": [{"category", "confidence", "root_cause", "fix", "evidence": [lines], "rule", "rules"}]}
best first; no finding -> {"findings": []}. Exit 0 whenever the diagnosis ran (findings or not),
2 on unusable input (no --log/--facts, unreadable file, facts not a JSON object).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from provisioner.diagnose import Finding, diagnose
from provisioner.exitcodes import EXIT_CODES_HELP, ExitCode


def _fail(message: str) -> NoReturn:
    Console(stderr=True, highlight=False, soft_wrap=True).print(Text(f"error: {message}", style="bold red"))
    raise SystemExit(ExitCode.USAGE)


def _read_log(source: str) -> str:
    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        _fail(f"cannot read log {source}: {exc.strerror or exc}")
    return data.decode("utf-8", errors="replace")


def _read_facts(source: str) -> dict[str, Any]:
    try:
        raw = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
        facts = json.loads(raw)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        _fail(f"cannot read facts {source}: {exc}")
    if not isinstance(facts, dict):
        _fail(f"facts {source} must be a JSON object (probe name -> output)")
    return {str(k): v for k, v in facts.items()}


def _panel(finding: Finding) -> Panel:
    colour = "red" if finding.confidence >= 0.7 else "yellow"
    body: list[Text] = [
        Text.assemble(("Root cause: ", "bold"), finding.root_cause),
        Text.assemble(("Fix: ", "bold green"), finding.fix),
    ]
    if finding.evidence:
        body.append(Text("Evidence:", style="bold"))
        body.extend(Text.assemble(("  │ ", "dim"), line) for line in finding.evidence)
    body.append(Text(f"rule: {finding.rule}", style="dim"))
    title = Text.assemble((finding.category, f"bold {colour}"), f"  confidence {finding.confidence:.2f}")
    return Panel(Group(*body), title=title, title_align="left", border_style=colour)


@click.command(
    "diagnose",
    epilog=EXIT_CODES_HELP,
    help="Find why an install failed: match known failure signatures in a log (FILE or - for stdin) "
    "and/or check a dict of live facts (--facts FILE.json). Findings come best first.",
)
@click.option("--log", "log_path", metavar="FILE|-", help="Log file to diagnose ('-' reads stdin).")
@click.option("--facts", "facts_path", metavar="FILE.json", help="Live facts: JSON object of probe name -> output.")
@click.option("--json", "json_out", is_flag=True, help="Print the findings as one JSON line (last line of stdout).")
def command(log_path: str | None, facts_path: str | None, json_out: bool) -> None:
    if log_path is None and facts_path is None:
        _fail("give --log FILE (or - for stdin) and/or --facts FILE.json")
    if log_path == "-" and facts_path == "-":
        _fail("only one of --log and --facts can read stdin")
    text = _read_log(log_path) if log_path else ""
    facts = _read_facts(facts_path) if facts_path else None
    findings = diagnose(text, facts)
    if json_out:
        click.echo(json.dumps({"findings": [f.to_dict() for f in findings]}, ensure_ascii=False))
        return
    console = Console(highlight=False)
    if not findings:
        console.print(Text("No known failure signature found.", style="green"))
        return
    for finding in findings:
        console.print(_panel(finding))
