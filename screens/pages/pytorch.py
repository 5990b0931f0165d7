"""PyTorch: the resolver's choice with its reasons, the rejected candidates, and an override."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.widgets import DataTable, Select, Static

from screens.step_page import StepPage
from screens.widgets.params_form import ParamsForm


def choice_text(res: dict[str, Any]) -> Text:
    text = Text()
    if not res:
        text.append("Run the resolver to see which PyTorch build fits every GPU, the driver and Python.",
                    style="dim")
        return text
    text.append("chosen ", style="bold")
    text.append(f"torch {res.get('torch')} · {res.get('variant')} · {res.get('index_url')}\n")
    for reason in res.get("reasons") or []:
        text.append(f"  because: {reason}\n")
    return text


def variant_order(variant: str) -> tuple[int, int]:
    """cu126 < cu128 < cu130 < cpu (CUDA builds by version, then the CPU build)."""
    if variant.startswith("cu") and variant[2:].isdigit():
        return (0, int(variant[2:]))
    return (1, 0)


def candidate_variants(res: dict[str, Any]) -> list[str]:
    seen: set[str] = set()
    for variant in [res.get("variant"), *[r.get("variant") for r in res.get("rejected") or []]]:
        if isinstance(variant, str) and variant:
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

    def refresh_view(self) -> None:
        res = self.session.shared().get("resolution") or {}
        self.query_one("#choice", Static).update(choice_text(res))
        table = self.query_one("#rejected", DataTable)
        rows = [(str(r.get("variant", "?")), str(r.get("torch", "") or ""), str(r.get("reason", "")))
                for r in res.get("rejected") or []]
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
