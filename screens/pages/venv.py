"""Venv: the package set (torch from the resolved index, extras), build progress, the locked result."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from provisioner.events import Progress
from provisioner.resolver.models import Resolution
from screens.step_page import StepPage
from screens.widgets.step_progress import progress_widgets, show_progress


def installed_packages(freeze: list[str]) -> list[str]:
    """The `name==version` lines of `uv pip freeze` (not uv's "Using Python … environment at" banner)."""
    out: list[str] = []
    for line in freeze:
        line = line.strip()
        if line and not line.startswith("#") and ("==" in line or " @ " in line) and " at: " not in line:
            out.append(line)
    return out


def packages_text(params: dict[str, Any], res: Resolution | None, freeze: list[str]) -> Text:
    text = Text()
    torch = params.get("torch") or (res.torch if res is not None else None) or "(from the resolver)"
    vision = params.get("torchvision") or (res.torchvision if res is not None else None) or "(matching torch)"
    index = params.get("index_url") or (res.index_url if res is not None else None) or "(from the resolver)"
    text.append("packages ", style="bold")
    text.append(f"torch=={torch}  torchvision=={vision}")
    for extra in params.get("extra_packages", ["nvidia-ml-py"]):
        text.append(f"  {extra}")
    text.append("\nindex ", style="bold")
    text.append(str(index))
    freeze = installed_packages(freeze)
    if freeze:
        text.append(f"\ninstalled ({len(freeze)}): ", style="bold")
        text.append(", ".join(freeze[:8]) + (" …" if len(freeze) > 8 else ""))
    return text


class VenvPage(StepPage):
    PAGE_NAME = "venv"

    def compose_view(self) -> ComposeResult:
        yield Static("", id="packages")
        yield from progress_widgets("venv-progress-label", "venv-progress")

    def refresh_view(self) -> None:
        state = self.session.state
        params: dict[str, Any] = {}
        for index in self.indices:
            params = dict(self.session.runs[index].spec.params)
        self.query_one("#packages", Static).update(
            packages_text(params, state.torch.resolution if state.torch is not None else None, list(state.venv_freeze)))

    def on_progress(self, event: Progress) -> None:
        show_progress(self, "venv-progress-label", "venv-progress", event,
                      f"{event.task}: {event.completed:g}" + (f"/{event.total:g}" if event.total else ""))
