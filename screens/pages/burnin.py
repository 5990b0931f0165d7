"""Burn-in: live busbw by message size, per-GPU temperature/power/Gflop/s, the verdict."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable, Static

from provisioner.events import Metric
from provisioner.payloads import BurninReport
from screens.step_page import StepPage
from screens.widgets.busbw_chart import BusbwChart

GPU_METRICS = {"gpu_temp": "temp °C", "gpu_power": "power W", "gflops": "Gflop/s"}


def verdict_text(doc: BurninReport | None) -> Text:
    text = Text()
    if doc is None:
        text.append("verdict: not run yet", style="dim")
        return text
    overall = doc.overall
    text.append("verdict: ", style="bold")
    text.append(overall.upper(), style="bold green" if overall == "pass" else "bold red")
    if doc.verdict.phases:
        text.append("   (" + ", ".join(f"{name}: {status}" for name, status in doc.verdict.phases.items()) + ")")
    return text


class BurninPage(StepPage):
    PAGE_NAME = "burnin"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gpu_values: dict[str, dict[str, float]] = {}

    def compose_view(self) -> ComposeResult:
        yield Static("", id="verdict")  # first: the answer is never below the charts
        table: DataTable[str] = DataTable(id="gpu-metrics", cursor_type="none", zebra_stripes=True)
        table.add_columns("GPU", *GPU_METRICS.values())
        yield table
        yield BusbwChart(id="busbw")

    def on_metric(self, event: Metric) -> None:
        if event.name == "busbw":
            try:
                size = int(event.labels.get("size", "0"))
            except ValueError:
                return
            self.query_one(BusbwChart).add(event.labels.get("collective") or "all_reduce", size, event.value)
        elif event.name in GPU_METRICS:
            gpu = event.labels.get("gpu", "?")
            self.gpu_values.setdefault(gpu, {})[event.name] = event.value
            self._refresh_gpu_table()

    def _refresh_gpu_table(self) -> None:
        table = self.query_one("#gpu-metrics", DataTable)
        table.clear()
        for gpu in sorted(self.gpu_values, key=lambda g: (len(g), g)):
            values = self.gpu_values[gpu]
            table.add_row(gpu, *[f"{values[m]:.1f}" if m in values else "–" for m in GPU_METRICS])

    def refresh_view(self) -> None:
        self.query_one("#verdict", Static).update(verdict_text(self.session.state.burnin))
