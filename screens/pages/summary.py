"""Summary: what ran (per step), save the recorded playbook, open the run log."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Button, DataTable, Input, Label, Static

from screens.step_page import StepPage
from screens.widgets.form_input import FormInput


class SummaryPage(StepPage):
    PAGE_NAME = "summary"

    def compose_view(self) -> ComposeResult:
        yield Static("", id="recap")
        table: DataTable[str] = DataTable(id="steps", cursor_type="row", zebra_stripes=True)
        table.add_columns("#", "step", "status", "result")
        yield table
        with Horizontal(classes="field"):
            yield Label("save playbook to", classes="field-label")
            yield FormInput(self.session.record_to, id="save-path", compact=True)
        with Horizontal(id="summary-actions"):
            yield Button("Save playbook", id="save", variant="success", compact=True)
            yield Button("Open run log", id="open-log", compact=True)
        yield Static("", id="saved", markup=False)

    def save_path(self) -> str:
        return self.query_one("#save-path", Input).value.strip() or self.session.record_to

    def refresh_view(self) -> None:
        recap = self.session.recap()
        text = Text()
        if self.session.aborted:
            text.append("ABORTED  ", style="bold red")
        text.append(f"{self.session.host}: ", style="bold")
        text.append("  ".join(f"{k}={v}" for k, v in recap.items()))
        text.append(f"\nrun log: {self.session.log_path}", style="dim")
        self.query_one("#recap", Static).update(text)
        table = self.query_one("#steps", DataTable)
        table.clear()
        for run in self.session.runs:
            table.add_row(str(run.index + 1), run.spec.name or run.spec.kind, run.status,  # numbered as the CLI
                          (run.message.splitlines() or [""])[0][:60])

    @on(Button.Pressed, "#save")
    def _save(self) -> None:
        self.wizard.action_save()
        self.query_one("#saved", Static).update(f"saved: {self.save_path()} "
                                                f"({len(self.session.succeeded)} steps that ran)")

    @on(Button.Pressed, "#open-log")
    def _open_log(self) -> None:
        self.wizard.action_run_log()
