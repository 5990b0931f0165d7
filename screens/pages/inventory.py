"""Inventory: the node's GPUs (index, name, CC, memory, PCI id), host driver, PVE version, warnings."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable, Static

from provisioner.steps.state import HostInventory
from screens.step_page import StepPage

GPU_COLUMNS = ("#", "name", "CC", "memory", "PCI id")


def facts_text(inv: HostInventory | None) -> Text:
    text = Text()
    if inv is None:
        text.append("Run the inventory to read the node's GPUs and driver.", style="dim")
        return text
    text.append("host driver ", style="bold")
    text.append(f"{inv.driver_version} ({inv.module_flavour} kernel module)   ")
    text.append("PVE ", style="bold")
    text.append(f"{inv.pve_version}   ")
    text.append("kernel ", style="bold")
    text.append(f"{inv.kernel}   ")
    text.append("cgroup ", style="bold")
    text.append(f"v{inv.cgroup_version}")
    for warning in inv.warnings:
        text.append("\n⚠ ", style="bold yellow")
        text.append(str(warning))
    return text


def short_pci(bus_id: str) -> str:
    """nvidia-smi's 00000000:17:00.0 as lspci writes it (0000:17:00.0): fits 80 columns."""
    domain, sep, rest = bus_id.partition(":")
    if sep and len(domain) == 8 and domain.isalnum():
        return f"{domain[-4:]}:{rest}".lower()
    return bus_id


def gpu_rows(inv: HostInventory | None) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for gpu in inv.gpus if inv is not None else []:
        memory = gpu.memory_mib
        rows.append((str(gpu.index), gpu.name.removeprefix("NVIDIA "), str(gpu.compute_cap),
                     f"{memory} MiB" if memory is not None else "?", short_pci(gpu.pci_bus_id)))
    return rows


class InventoryPage(StepPage):
    PAGE_NAME = "inventory"

    def compose_view(self) -> ComposeResult:
        table: DataTable[str] = DataTable(id="gpus", cursor_type="row", zebra_stripes=True)
        table.add_columns(*GPU_COLUMNS)
        yield table
        yield Static("", id="facts")

    def refresh_view(self) -> None:
        inv = self.session.state.inventory
        table = self.query_one("#gpus", DataTable)
        rows = gpu_rows(inv)
        if table.row_count != len(rows):
            table.clear()
            table.add_rows(rows)
        self.query_one("#facts", Static).update(facts_text(inv))
