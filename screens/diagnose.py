"""Diagnose mode, reachable from anywhere (F5): paste a log, get findings; each evidence line with its number in
the pasted log (`L7: …`), as the console and `--json`'s `evidence_lines` give it."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Button, Footer, Static, TextArea

from provisioner.diagnose.numbered import evidence_lines_of, numbered
from provisioner.diagnose.source import bound_text
from provisioner.runner import diagnose_lines
from screens.plain_text import plain_line

EVIDENCE_SHOWN = 3  # evidence lines per finding (the console and --json give them all)


def findings_text(findings: list[dict[str, Any]]) -> Text:
    """The findings as the screen shows them: category, confidence, cause, fix, the first evidence lines."""
    text = Text()
    if not findings:
        text.append("no finding: nothing in this log matches a known failure", style="dim")
        return text
    for finding in findings:
        confidence = finding.get("confidence")
        text.append(f"● {finding.get('category', '?')}", style="bold")
        if isinstance(confidence, int | float):
            text.append(f"  ({confidence:.0%})", style="dim")
        text.append(f"\n  cause: {plain_line(str(finding.get('root_cause', '')))}"
                    f"\n  fix:   {plain_line(str(finding.get('fix', '')))}\n")
        evidence = [str(e) for e in list(finding.get("evidence") or [])[:EVIDENCE_SHOWN]]
        for line in numbered(evidence, evidence_lines_of(finding.get("evidence_lines"))):
            text.append(f"  evidence: {plain_line(line)}\n", style="dim")
    return text


class DiagnoseScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Close"),
        Binding("ctrl+r", "diagnose", "Diagnose"),
    ]

    def compose(self) -> ComposeResult:
        yield Static("Diagnose: paste a failing log below, then press Diagnose (ctrl+r). Esc closes.",
                     id="crumbs")
        yield TextArea("", id="diag-input", soft_wrap=False)
        with Horizontal(id="actions"):
            yield Button("Diagnose", id="diag-run", variant="primary", compact=True)
            yield Button("Close", id="diag-close", compact=True)
        yield Static("", id="findings")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(TextArea).focus()

    @on(Button.Pressed, "#diag-run")
    def action_diagnose(self) -> None:
        lines = bound_text(self.query_one(TextArea).text).splitlines()
        self.findings = diagnose_lines(lines)
        self.query_one("#findings", Static).update(findings_text(self.findings))

    @on(Button.Pressed, "#diag-close")
    def _close(self) -> None:
        self.app.pop_screen()
