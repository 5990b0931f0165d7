"""Inventory: the node's GPUs (index, name, CC, memory, PCI id), host driver, PVE version, warnings."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable, Static

from screens.step_page import StepPage

GPU_COLUMNS = ("#", "name", "CC", "memory", "PCI id")


def facts_text(inv: dict[str, Any]) -> Text:
    text = Text()
    if not inv:
        text.append("Run the inventory to read the node's GPUs and driver.", style="dim")
        return text
    text.append("host driver ", style="bold")
    text.append(f"{inv.get('driver_version', '?')} ({inv.get('module_flavour', '?')} kernel module)   ")
    text.append("PVE ", style="bold")
    text.append(f"{inv.get('pve_version', '?')}   ")
    text.append("kernel ", style="bold")
    text.append(f"{inv.get('kernel', '?')}   ")
    text.append("cgroup ", style="bold")
    text.append(f"v{inv.get('cgroup_version', '?')}")
    for warning in inv.get("warnings") or []:
        text.append("\n⚠ ", style="bold yellow")
        text.append(str(warning))
    return text


def short_pci(bus_id: str) -> str:
    """nvidia-smi's 00000000:17:00.0 as lspci writes it (0000:17:00.0): fits 80 columns."""
    domain, sep, rest = bus_id.partition(":")
    if sep and len(domain) == 8 and domain.isalnum():
        return f"{domain[-4:]}:{rest}".lower()
    return bus_id


def gpu_rows(inv: dict[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for gpu in inv.get("gpus") or []:
        memory = gpu.get("memory_mib")
        name = str(gpu.get("name", "?")).removeprefix("NVIDIA ")
        rows.append((str(gpu.get("index", "?")), name, str(gpu.get("compute_cap", "?")),
                     f"{memory} MiB" if memory is not None else "?", short_pci(str(gpu.get("pci_bus_id", "?")))))
    return rows


class InventoryPage(StepPage):
    PAGE_NAME = "inventory"

    def compose_view(self) -> ComposeResult:
        table: DataTable[str] = DataTable(id="gpus", cursor_type="row", zebra_stripes=True)
        table.add_columns(*GPU_COLUMNS)
        yield table
        yield Static("", id="facts")

    def refresh_view(self) -> None:
        inv = self.session.shared().get("inventory") or {}
        table = self.query_one("#gpus", DataTable)
        rows = gpu_rows(inv)
        if table.row_count != len(rows):
            table.clear()
            table.add_rows(rows)
        self.query_one("#facts", Static).update(facts_text(inv))
