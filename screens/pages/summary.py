"""Summary: what ran (per step), the host's day-two drift, save the recorded playbook, open the run log."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Button, DataTable, Input, Label, Static

from provisioner.drift import DriftReport
from screens.step_page import StepPage
from screens.widgets.form_input import FormInput


def drift_text(report: DriftReport | None, error: str = "") -> Text:
    """The drift section: the findings of `provisioner.drift` (the same `plan --check` and `diagnose --host`
    name), each with the step that repairs it on replay."""
    text = Text()
    text.append("Drift: ", style="bold")
    if error:
        text.append(f"not checked ({error})", style="yellow")
        return text
    if report is None:
        text.append("not checked yet (Check drift)", style="dim")
        return text
    if report.clean:
        text.append(f"none on {report.host} for CT {report.vmid}", style="green")
    for finding in report.findings:
        text.append("\n  • ", style="red")
        text.append(finding.text)
        text.append(f"  → replay repairs it ({finding.repair})" if finding.repair else "  → not repairable by replay",
                    style="dim")
    for note in report.unchecked:
        text.append(f"\n  not checked: {note}", style="dim")
    return text


class SummaryPage(StepPage):
    PAGE_NAME = "summary"

    def compose_view(self) -> ComposeResult:
        yield Static("", id="recap")
        table: DataTable[str] = DataTable(id="steps", cursor_type="row", zebra_stripes=True)
        table.add_columns("#", "step", "status", "result")
        yield table
        yield Static(drift_text(None), id="drift")
        with Horizontal(classes="field"):
            yield Label("save playbook to", classes="field-label")
            yield FormInput(self.session.record_to, id="save-path", compact=True)
        with Horizontal(id="summary-actions"):
            yield Button("Save playbook", id="save", variant="success", compact=True)
            yield Button("Open run log", id="open-log", compact=True)
            yield Button("Check drift", id="check-drift", compact=True)
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

    @on(Button.Pressed, "#check-drift")
    def _check_drift(self) -> None:
        self.query_one("#drift", Static).update(Text("Drift: checking …", style="dim"))
        self.run_worker(self.check_drift(), exclusive=True, group="drift")

    async def check_drift(self) -> DriftReport | None:
        """Gather the drift (engine: `StepSession.drift`) and render it; returns the report."""
        try:
            report = await self.session.drift()
        except Exception as exc:  # unreachable host, no container yet: the page says why
            self.query_one("#drift", Static).update(drift_text(None, f"{type(exc).__name__}: {exc}"))
            return None
        self.query_one("#drift", Static).update(drift_text(report))
        return report
