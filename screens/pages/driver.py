"""Driver: container userspace must equal the host kernel module; download progress; GPUs visible."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from provisioner.events import Progress
from provisioner.steps.state import GpuDetection
from screens.fit import fit_urls, has_long_url
from screens.step_page import StepPage
from screens.widgets.step_progress import progress_widgets, show_progress


def version_text(host: str | None, wanted: str, installed_note: str, detected: GpuDetection | None,
                 width: int = 200) -> Text:
    """The versions line, the step's plan note (a URL wider than `width` shortened in the middle: the page's
    tooltip holds it whole) and the GPUs the container sees."""
    text = Text()
    text.append("host kernel module ", style="bold")
    text.append(host or "? (run the inventory)")
    text.append("   playbook ", style="bold")
    text.append(wanted)
    if host and wanted not in ("host", host):
        text.append("   ✗ mismatch: userspace must equal the module", style="bold red")
    elif host:
        text.append("   ✓ match", style="green")
    if installed_note:
        text.append(f"\n{fit_urls(installed_note, width)}", style="dim")
    gpus = detected.gpus if detected is not None else []
    if gpus:
        text.append(f"\n{len(gpus)} GPU(s) visible in the container: ", style="bold")
        text.append(", ".join(sorted({g.name for g in gpus})))
    return text


class DriverPage(StepPage):
    PAGE_NAME = "driver"

    def compose_view(self) -> ComposeResult:
        yield Static("", id="versions")
        yield from progress_widgets("download-label", "download")

    def refresh_view(self) -> None:
        state = self.session.state
        host = state.host_driver or (state.inventory.driver_version if state.inventory is not None else None)
        wanted, note = "host", ""
        for index in self.indices:
            run = self.session.runs[index]
            if run.spec.kind == "driver.userspace":
                wanted = str(run.spec.params.get("version", "host"))
                note = "; ".join([*run.changes, *run.notes])
        width = max(30, (self.app.size.width or 80) - 6)
        versions = self.query_one("#versions", Static)
        versions.update(version_text(host, wanted, note, state.detection, width))
        versions.tooltip = note if has_long_url([note], width) else None

    def on_resize(self) -> None:  # Textual also calls StepPage.on_resize (handlers run along the MRO)
        if self.body_ready:
            self.refresh_view()  # the note's URL fitted to the new width

    def on_progress(self, event: Progress) -> None:
        done = f"{event.completed / 1e6:.1f}" + (f" / {event.total / 1e6:.1f} MB" if event.total else " MB")
        show_progress(self, "download-label", "download", event, f"{event.task}: {done}")
