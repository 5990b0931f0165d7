"""Passthrough: mode (auto/dev/raw) and the device nodes handed to the container; then start it."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from screens.step_page import StepPage


def devices_text(devices: list[str], mode_note: str) -> Text:
    text = Text()
    if not devices:
        text.append("Plan the passthrough to list the device nodes for this node's GPUs.", style="dim")
        return text
    text.append(f"{mode_note or 'devices'}\n", style="bold")
    for i in range(0, len(devices), 4):
        text.append("  " + "  ".join(f"{d:<22}" for d in devices[i:i + 4]).rstrip() + "\n")
    return text


class PassthroughPage(StepPage):
    PAGE_NAME = "passthrough"

    def compose_view(self) -> ComposeResult:
        yield Static("", id="devices")

    def refresh_view(self) -> None:
        devices = list(self.session.state.passthrough_devices or [])
        mode_note = ""
        for index in self.indices:
            run = self.session.runs[index]
            if run.spec.kind == "lxc.gpu_passthrough":
                mode_note = next((n for n in run.notes if n.startswith("mode ")), "")
        self.query_one("#devices", Static).update(devices_text(devices, mode_note))
