"""Summary: what ran (per step), the host's day-two drift, save the recorded playbook, open the run log, and
export the proven runtime (the engine's `provisioner.export.offer`: plan first, write on confirmation)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Button, DataTable, Input, Label, Select, Static

from provisioner.drift import DriftReport
from provisioner.export.models import FORMATS
from provisioner.export.offer import FORMAT_TITLES, ExportPlan, fetch_url, plan_export, write_export
from provisioner.export.source import ExportRefused
from provisioner.transport.base import Transport
from screens.fit import middle_ellipsis, word_ellipsis
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


#: the oci base field's forms, as `provisioner export --base` takes them (`oci_image.check_base`)
#: (55 columns: the field's width at 80×24; the tooltip spells each form out)
BASE_PLACEHOLDER = "container (default), oci:DIR@… oci-archive:TAR@… NAME@…"
BASE_TOOLTIP = ("The oci image's base, as `provisioner export --base` takes it: `container` (the default: the "
                "proving container's own root file system, less the NVIDIA driver), oci:DIR@sha256:<hex> (a local "
                "OCI layout), oci-archive:FILE@sha256:<hex> (an archive) or NAME@sha256:<hex> (copied by skopeo "
                "from its registry). Not used by the other formats.")


class SummaryPage(StepPage):
    PAGE_NAME = "summary"
    export_plan: ExportPlan | None = None  # the plan on screen that Write export confirms
    export_planned_for: tuple[str, str, str, str] | None = None  # (format, dest, base, rootfs) of that plan
    #: oci, base `container`: the container's whole root file system (`export --rootfs`'s default) or "runtime"
    export_rootfs = "full"

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
        yield Static("Export the proven runtime", classes="section")
        with Horizontal(classes="field"):
            yield Label("export format", classes="field-label")
            yield Select([(f"{fmt}: {FORMAT_TITLES[fmt]}", fmt) for fmt in FORMATS], value="pylock",
                         allow_blank=False, id="export-format", compact=True)
        with Horizontal(classes="field"):
            yield Label("export to", classes="field-label")
            yield FormInput(f"export-{self.session.log_path.stem}", id="export-dest", compact=True)
        with Horizontal(classes="field"):
            yield Label("oci base", classes="field-label")
            base = FormInput("", placeholder=BASE_PLACEHOLDER, id="export-base", compact=True)
            base.tooltip = BASE_TOOLTIP
            yield base
        with Horizontal(id="export-actions"):
            yield Button("Plan export", id="export-plan", compact=True)
            yield Button("Write export", id="export-write", variant="warning", compact=True, disabled=True)
        yield Static(Text("pylock.toml, runtime.json and host.json, plus the format's files: Plan export "
                          "shows them first", style="dim"), id="export-result")

    def _body_mounted(self) -> None:
        super()._body_mounted()
        path = self.query_one("#save-path", Input)
        path.tooltip = path.value

        def show_end() -> None:  # a long path shows its end (the file name and extension), not its start
            path.cursor_position = 0
            path.cursor_position = len(path.value)

        self.call_after_refresh(show_end)

    def save_path(self) -> str:
        return self.query_one("#save-path", Input).value.strip() or self.session.record_to

    def refresh_view(self) -> None:
        recap = self.session.recap()
        text = Text()
        if self.session.aborted:
            text.append("ABORTED  ", style="bold red")
        text.append(f"{self.session.host}: ", style="bold")
        text.append("  ".join(f"{k}={v}" for k, v in recap.items()))
        text.append("\nrun log: ", style="dim")
        text.append(middle_ellipsis(str(self.session.log_path), max(20, (self.app.size.width or 80) - 12)),
                    style="dim")
        self.query_one("#recap", Static).update(text)
        table = self.query_one("#steps", DataTable)
        table.clear()
        room = max(20, (self.app.size.width or 80) - 40)
        for number, step, status, result in self.rows():
            table.add_row(number, step, status, word_ellipsis(result, room))

    def rows(self) -> list[tuple[str, str, str, str]]:
        """One row per event of the run that counts (every apply, in order: two updates of a step are two rows,
        each burn-in its own verdict), then the steps that have not completed, as they stand; numbered as the CLI."""
        out: list[tuple[str, str, str, str]] = []
        for event in self.session.finished:
            name = self.session.runs[event.index].spec.name or event.step if 0 <= event.index < len(
                self.session.runs) else event.step
            what = event.status if event.mode == "apply" else f"{event.status} (plan)"
            out.append((str(event.index + 1), name, what, (event.message.splitlines() or [""])[0]))
        seen = {event.index for event in self.session.finished}
        for run in self.session.runs:
            if run.status in ("ok", "changed", "failed", "interrupted", "skipped"):
                if run.index not in seen:  # a status with no event of this run (opened as it stood)
                    out.append((str(run.index + 1), run.spec.name or run.spec.kind, run.status,
                                (run.message.splitlines() or [""])[0]))
                continue  # its events are above
            note = "edited: plan again" if run.status == "edited" else \
                "an earlier step was edited: plan again" if run.status == "outdated" else "not applied yet"
            out.append((str(run.index + 1), run.spec.name or run.spec.kind,
                        "pending" if run.status in ("planning", "planned") else run.status, note))
        return out

    @on(Button.Pressed, "#save")
    def _save(self) -> None:
        self.wizard.action_save()
        pending = len(self.session.saved_pending)
        self.query_one("#saved", Static).update(
            f"saved: {middle_ellipsis(self.save_path(), max(20, (self.app.size.width or 80) - 40))} "
            f"({len(self.session.succeeded)} steps that ran" + (f", {pending} pending)" if pending else ")"))

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

    # --- export (the engine writes; the page edits the parameters and shows the plan and the result) ------

    def export_params(self) -> tuple[str, str, str]:
        fmt = self.query_one("#export-format", Select).value
        dest = self.query_one("#export-dest", Input).value.strip()
        base = self.query_one("#export-base", Input).value.strip()
        return str(fmt), dest, base

    @on(Select.Changed, "#export-format")
    @on(Input.Changed, "#export-dest")
    @on(Input.Changed, "#export-base")
    def _export_edited(self) -> None:
        """An edited parameter drops the plan on screen: Write export needs a plan of exactly these values. (A
        change event that leaves the values as planned — one delivered after the plan, an edit undone — keeps it.)"""
        if self.export_plan is not None and (*self.export_params(), self.export_rootfs) != self.export_planned_for:
            self.export_plan = None
            self.query_one("#export-write", Button).disabled = True
            self.query_one("#export-result", Static).update(Text("changed: Plan export again", style="dim"))

    @on(Button.Pressed, "#export-plan")
    def _plan_export(self) -> None:
        self.plan_export()

    def export_source(self) -> Path:
        """The run whose proof is exported: this session's run log (what the steps applied and proved)."""
        return self.session.log_path

    def plan_export(self) -> ExportPlan:
        """The export plan of this run for the parameters on screen (`provisioner.export.offer.plan_export`)."""
        fmt, dest, base = self.export_params()
        plan = plan_export(self.export_source(), self.session.playbook(), fmt, dest, base=base or None,
                           rootfs=self.export_rootfs)
        self.export_plan = plan if plan.ok else None
        self.export_planned_for = (fmt, dest, base, self.export_rootfs)
        text = Text()
        width = max(30, (self.app.size.width or 80) - 6)
        for n, line in enumerate(plan.lines()):
            indent = " " * (len(line) - len(line.lstrip()) + 2)
            wrapped = textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False,
                                    break_long_words=False) or [""]  # a path is never cut mid-name
            text.append(("\n" if n else "") + "\n".join(wrapped),
                        style=("bold" if n == 0 else "") + ("" if plan.ok else " red"))
        if plan.ok:
            text.append("\nWrite export writes these files.", style="bold yellow")
        self.query_one("#export-result", Static).update(text)
        self.query_one("#export-write", Button).disabled = not plan.ok
        return plan

    @on(Button.Pressed, "#export-write")
    def _write_export(self) -> None:
        if self.export_plan is None:
            return
        self.query_one("#export-write", Button).disabled = True
        then = f", then the image of CT {self.export_plan.vmid}" if self.export_plan.fmt == "oci" else ""
        self.query_one("#export-result", Static).update(Text(f"exporting: uv makes pylock.toml in the container{then} …",
                                                             style="dim"))
        self.run_worker(self.write_export(self.export_plan), exclusive=True, group="export")

    def container_transport(self, vmid: int) -> Transport:
        """The proving container, through the session's node connection (`pct exec`; the oci image's tar
        streams go the same way)."""
        from provisioner.transport.container import ContainerTransport

        return ContainerTransport(self.session.context().node, vmid)

    async def write_export(self, plan: ExportPlan) -> list[str]:
        """Write the confirmed plan (engine: `offer.write_export`); the page reports the files or the reason."""
        result = self.query_one("#export-result", Static)
        try:
            assert plan.vmid is not None
            written = await write_export(plan, self.container_transport(plan.vmid),
                                         fetch=fetch_url(self.session.playbook()))
        except (ExportRefused, ValueError, OSError) as exc:
            result.update(Text(f"export failed: {exc}", style="red"))
            return []
        except Exception as exc:  # an unreachable host: the page says why, the wizard stays
            result.update(Text(f"export failed: {type(exc).__name__}: {exc}", style="red"))
            return []
        self.export_plan = None
        text = Text(f"wrote {Path(plan.out)}/:", style="bold green")
        for name in written:
            text.append(f"\n  {name}")
        result.update(text)
        return written
