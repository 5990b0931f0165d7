"""Passthrough: mode (auto/dev/raw) and the device nodes handed to the container; then start it.

With the node's inventory known, the GPUs are a checklist (one line per GPU of the inventory); the text
field still takes `all`, lists and ranges (`0-3,6`) and both stay in step. An index the inventory does
not list is refused in the form, before any plan.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.widgets import SelectionList, Static

from provisioner.steps.state import HostInventory
from screens.step_page import StepPage
from screens.widgets.checklist import Checklist
from screens.widgets.params_form import ParamsForm

PASSTHROUGH = "lxc.gpu_passthrough"


def devices_text(devices: list[str], mode_note: str, width: int = 100) -> Text:
    """The device nodes in as many columns as `width` holds (a row never wraps)."""
    text = Text()
    if not devices:
        text.append("Plan the passthrough to list the device nodes for this node's GPUs.", style="dim")
        return text
    text.append(f"{mode_note or 'devices'}\n", style="bold")
    cell = max(len(d) for d in devices) + 2
    per_row = max(1, min(4, (width - 2) // cell))
    for i in range(0, len(devices), per_row):
        text.append("  " + "".join(f"{d:<{cell}}" for d in devices[i:i + per_row]).rstrip() + "\n")
    return text


def ranges_text(chosen: list[int], available: list[int]) -> str:
    """The selection as the field writes it: `all`, else ranges (`0-3,6`)."""
    picked = sorted(set(chosen))
    if picked and picked == sorted(available):
        return "all"
    parts: list[str] = []
    start = prev = None
    for i in [*picked, None]:
        if i is not None and prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None and prev is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = i
    return ",".join(parts)


def unknown_gpus(params: BaseModel, inventory: HostInventory | None) -> dict[str, str]:
    """{"gpus": why} when the selection names an index the inventory does not list."""
    gpus = getattr(params, "gpus", "all")
    if inventory is None or not inventory.gpus or gpus == "all":
        return {}
    have = sorted(g.index for g in inventory.gpus)
    missing = [i for i in gpus if i not in have]
    if not missing:
        return {}
    return {"gpus": f"GPU {', '.join(map(str, missing))} not on this node (the inventory lists "
                    f"{ranges_text(have, [])})"}


class PassthroughPage(StepPage):
    PAGE_NAME = "passthrough"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._syncing = False

    def compose_view(self) -> ComposeResult:
        yield Static("", id="devices")
        yield Static("GPUs to pass (space toggles; the gpus field below takes ranges too)", id="gpu-list-title",
                     classes="section")
        yield Checklist[int](id="gpu-list", compact=True)

    def passthrough_form(self) -> ParamsForm | None:
        for index in self.indices:
            if self.session.runs[index].spec.kind == PASSTHROUGH:
                forms = list(self.query(f"#form-{index}").results(ParamsForm))
                return forms[0] if forms else None
        return None

    def selected_indices(self) -> list[int] | None:
        """The passthrough step's GPUs as indices (None: `all`)."""
        for index in self.indices:
            run = self.session.runs[index]
            if run.spec.kind == PASSTHROUGH:
                model = run.spec.params.get("gpus", "all")
                if model == "all":
                    return None
                from provisioner.validate import index_ranges

                value = index_ranges(model)
                return list(value) if isinstance(value, list) else None
        return None

    def refresh_view(self) -> None:
        devices = list(self.session.state.passthrough_devices or [])
        mode_note = ""
        for index in self.indices:
            run = self.session.runs[index]
            if run.spec.kind == PASSTHROUGH:
                mode_note = next((n for n in run.notes if n.startswith("mode ")), "")
        self.query_one("#devices", Static).update(devices_text(devices, mode_note, (self.app.size.width or 80) - 4))
        self.refresh_gpu_list()

    def refresh_gpu_list(self) -> None:
        inventory = self.session.state.inventory
        listing = self.query_one("#gpu-list", SelectionList)
        shown = inventory is not None and bool(inventory.gpus)
        listing.display = shown
        self.query_one("#gpu-list-title").display = shown
        form = self.passthrough_form()
        if form is not None and not getattr(form, "_inventory_check", False):
            form.checks.append(lambda params: unknown_gpus(params, self.session.state.inventory))
            form._inventory_check = True  # type: ignore[attr-defined]
        if not shown or inventory is None:
            return
        chosen = self.selected_indices()
        want = {g.index for g in inventory.gpus} if chosen is None else set(chosen)
        if listing.option_count != len(inventory.gpus):
            listing.clear_options()
            listing.add_options([(f"{g.index}  {g.name}  {g.pci_bus_id}", g.index, g.index in want)
                                 for g in sorted(inventory.gpus, key=lambda g: g.index)])
            return
        if set(listing.selected) != want:
            self._syncing = True
            try:
                listing.deselect_all()
                for i in sorted(want):
                    listing.select(i)
            finally:
                self._syncing = False

    @on(SelectionList.SelectedChanged, "#gpu-list")
    def _gpus_picked(self, event: SelectionList.SelectedChanged[int]) -> None:
        event.stop()
        inventory = self.session.state.inventory
        form = self.passthrough_form()
        if self._syncing or form is None or inventory is None:
            return
        text = ranges_text(list(event.selection_list.selected), [g.index for g in inventory.gpus])
        form.set_value("gpus", text)  # none picked: the field says what it needs

    def store_params(self, index: int, values: dict[str, Any]) -> None:
        super().store_params(index, values)
        if self.session.runs[index].spec.kind == PASSTHROUGH:
            self.refresh_gpu_list()
