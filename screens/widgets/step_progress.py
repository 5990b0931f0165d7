"""A step's progress on its page: a label and a bar, hidden (class `idle`) until the step reports progress, so
that an idle page shows no animation."""

from __future__ import annotations

from textual.dom import DOMNode
from textual.widget import Widget
from textual.widgets import ProgressBar, Static

from provisioner.events import Progress


def progress_widgets(label_id: str, bar_id: str) -> list[Widget]:
    """The label (plain text) and the hidden bar, in that order."""
    return [Static("", id=label_id, markup=False),
            ProgressBar(total=None, show_eta=False, id=bar_id, classes="idle")]


def show_progress(page: DOMNode, label_id: str, bar_id: str, event: Progress, label: str) -> None:
    """The bar shown and set to `event`'s figures, the label set to `label`."""
    bar = page.query_one(f"#{bar_id}", ProgressBar)
    bar.remove_class("idle")
    bar.update(total=event.total, progress=event.completed)
    page.query_one(f"#{label_id}", Static).update(label)
