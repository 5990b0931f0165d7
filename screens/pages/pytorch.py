"""PyTorch: the resolver's choice with its reasons, the rejected candidates, and an override."""

from __future__ import annotations

import textwrap

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.widgets import DataTable, Select, Static

from provisioner.resolver.models import Resolution
from screens.fit import word_ellipsis
from screens.step_page import StepPage
from screens.widgets.params_form import ParamsForm
from screens.wizard_session import StepRun


def choice_text(res: Resolution | None, width: int = 200) -> Text:
    """The choice and its reasons, each reason wrapped at words with a hanging indent to `width` columns."""
    text = Text()
    if res is None:
        text.append("Run the resolver to see which PyTorch build fits every GPU, the driver and Python.",
                    style="dim")
        return text
    text.append("chosen ", style="bold")
    text.append(f"torch {res.torch} · {res.variant} · {res.index_url}\n")
    for reason in res.reasons:
        lines = textwrap.wrap(f"because: {reason}", max(20, width - 2), subsequent_indent="  ",
                              break_long_words=False, break_on_hyphens=False) or [""]
        text.append("".join(f"  {line}\n" for line in lines))
    return text


def variant_order(variant: str) -> tuple[int, int]:
    """cu126 < cu128 < cu130 < cpu (CUDA builds by version, then the CPU build)."""
    if variant.startswith("cu") and variant[2:].isdigit():
        return (0, int(variant[2:]))
    return (1, 0)


def candidate_variants(res: Resolution | None) -> list[str]:
    seen: set[str] = set()
    for variant in [res.variant, *[r.variant for r in res.rejected]] if res is not None else []:
        if variant:
            seen.add(variant)
    return sorted(seen, key=lambda v: (variant_order(v), v))


class PyTorchPage(StepPage):
    PAGE_NAME = "pytorch"

    def compose_view(self) -> ComposeResult:
        yield Static("", id="choice")
        table: DataTable[str] = DataTable(id="rejected", cursor_type="row", zebra_stripes=True)
        table.add_columns("rejected", "torch", "reason")
        yield table
        yield Select[str]([], prompt="override the variant…", id="override", compact=True)

    def plan_notes(self, run: StepRun) -> list[str]:
        """The choice, its reasons and the rejected candidates are on the page itself: the plan pane keeps
        only what the page does not show (warnings, the recorded choice, other tools' picks)."""
        shown = ("because: ", "rejected ", "torch ")
        return [n for n in run.notes if not n.startswith(shown) and "more rejected candidates" not in n]

    def refresh_view(self) -> None:
        choice = self.session.state.torch
        res = choice.resolution if choice is not None else None
        width = (self.app.size.width or 80) - 4
        self.query_one("#choice", Static).update(choice_text(res, width))
        table = self.query_one("#rejected", DataTable)
        room = max(20, width - 22)  # the reason column: cut at a word, with "…" (the plan's notes say it whole)
        rows = [(r.variant, r.torch, word_ellipsis(r.reason, room)) for r in (res.rejected if res is not None else [])]
        if table.row_count != len(rows):
            table.clear()
            table.add_rows(rows)
        select = self.query_one("#override", Select)
        options = candidate_variants(res)
        if options and len(options) != len(getattr(select, "_options", [])) - 1:
            select.set_options([(v, v) for v in options])

    @on(Select.Changed, "#override")
    def _override(self, event: Select.Changed) -> None:
        event.stop()
        if event.value is Select.NULL:
            return
        for form in self.query(ParamsForm):
            if any(s.name == "variant" for s in form.specs):
                form.set_value("variant", event.value)
