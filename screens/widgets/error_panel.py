"""The panel a failed step shows: failing command, output tail, diagnose findings; retry/skip/abort."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Static

from screens.plain_text import plain_line


def error_text(title: str, message: str, command: str, tail: list[str], diagnosis: list[dict[str, Any]]) -> Text:
    """Plain text (remote output is data, never markup) with a few styled headings."""
    text = Text()
    text.append(f"✗ {title} failed\n", style="bold")
    for line in message.rstrip().splitlines():
        text.append(plain_line(line) + "\n")
    if command:
        text.append("\nfailing command: ", style="bold")
        text.append(plain_line(command) + "\n")
    if tail:
        text.append("\nlast output:\n", style="bold")
        for line in tail:
            text.append("  " + plain_line(line) + "\n")
    for finding in diagnosis:
        text.append(f"\ndiagnosis [{finding.get('category', '?')}]: ", style="bold")
        text.append(plain_line(str(finding.get("root_cause", ""))) + "\n")
        if finding.get("fix"):
            text.append("fix: ", style="bold")
            text.append(plain_line(str(finding["fix"])) + "\n")
        for line in list(finding.get("evidence") or [])[:3]:
            text.append("  evidence: " + plain_line(str(line)) + "\n")
    return text


class ErrorPanel(Vertical):
    """Hidden until a step fails. The choices come first (never cut off), the details scroll below."""

    DEFAULT_CSS = """
    ErrorPanel { height: auto; max-height: 1fr; display: none; border: round $error; padding: 0 1; }
    ErrorPanel.shown { display: block; }
    ErrorPanel #error-buttons { height: 1; }
    ErrorPanel #error-hint { width: 1fr; color: $text-muted; padding-left: 1; }
    ErrorPanel #error-scroll { height: auto; max-height: 100%; }
    ErrorPanel #error-text { height: auto; }
    ErrorPanel Button { margin-right: 1; min-width: 8; }
    ErrorPanel Button.-hidden { display: none; }
    """

    def compose(self) -> ComposeResult:
        with Horizontal(id="error-buttons"):
            yield Button("Retry", id="retry", variant="warning", compact=True)
            yield Button("Skip", id="skip", compact=True)
            yield Button("Abort", id="abort", variant="error", compact=True)
            yield Button("Trust…", id="offer", compact=True, classes="-hidden")  # a failed step's ParamOffer
            yield Static("Retry plans again and asks before applying", id="error-hint", markup=False)
        with VerticalScroll(id="error-scroll"):
            yield Static("", id="error-text")

    def show(self, text: Text, offer: str = "") -> None:
        """The failure's text; `offer`: the label of the button that offers an edit settling it ("" none)."""
        self.query_one("#error-text", Static).update(text)
        button = self.query_one("#offer", Button)
        button.label = offer or "Trust…"
        button.set_class(not offer, "-hidden")
        self.add_class("shown")

    def hide(self) -> None:
        self.remove_class("shown")

    @property
    def shown(self) -> bool:
        return self.has_class("shown")
