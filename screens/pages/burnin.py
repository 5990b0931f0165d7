"""Burn-in: live busbw by message size, per-GPU temperature/power/Gflop/s, the verdict."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable, ProgressBar, Static

from provisioner.events import Metric, Progress
from provisioner.payloads import BurninReport
from provisioner.steps.burnin_run import PHASE_TASK, SIZES_TASK, SOAK_TASK, BurninParams
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


def clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}" if seconds >= 3600 \
        else f"{seconds // 60}:{seconds % 60:02d}"


@dataclass
class LiveState:
    """The running burn-in as its Progress events tell it (`burnin_run.PHASE_TASK` …), on this page's clock."""

    phase: str = ""
    done: int = 0
    total: int = 0
    phase_started: float = 0.0
    sizes: tuple[str, int, int] | None = None  # collective, done, total
    soak_s: int = 0
    soak_ahead: bool = False

    def text(self, now: float) -> Text:
        text = Text()
        if not self.phase:
            return text
        text.append(f"phase {min(self.done + 1, self.total)}/{self.total}: ", style="bold")
        text.append(self.phase, style="bold")
        if self.sizes is not None and self.phase == "collectives":
            coll, done, total = self.sizes
            text.append(f" · {coll} {done}/{total} sizes")
        elapsed = now - self.phase_started
        text.append(f" · {clock(elapsed)} in this phase")
        if self.phase == "soak" and self.soak_s:
            text.append(f" · soak {clock(min(elapsed, self.soak_s))}/{clock(self.soak_s)}")
            text.append(f" · ETA {clock(self.soak_s - elapsed)}", style="bold")
        elif self.soak_ahead and self.soak_s:
            text.append(f" · ETA ≥ {clock(self.soak_s)} (the soak still to come)", style="dim")
        return text

    def fraction(self, now: float) -> tuple[float, float]:
        """(completed, total) of the current phase for the bar: sizes, soak seconds, else the phase count."""
        if self.phase == "soak" and self.soak_s:
            return min(now - self.phase_started, self.soak_s), self.soak_s
        if self.sizes is not None and self.phase == "collectives":
            return self.sizes[1], max(self.sizes[2], 1)
        return self.done, max(self.total, 1)


class BurninPage(StepPage):
    PAGE_NAME = "burnin"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gpu_values: dict[str, dict[str, float]] = {}
        self.live = LiveState()

    def compose_view(self) -> ComposeResult:
        yield Static("", id="verdict")  # first: the answer is never below the charts
        yield Static("", id="phase", markup=False)
        yield ProgressBar(id="phase-bar", show_eta=False, classes="idle")
        table: DataTable[str] = DataTable(id="gpu-metrics", cursor_type="none", zebra_stripes=True)
        table.add_columns("GPU", *GPU_METRICS.values())
        yield table
        yield BusbwChart(id="busbw")

    def now(self) -> float:
        """The page's clock (time in a phase, the ETA)."""
        return time.monotonic()

    def on_progress(self, event: Progress) -> None:
        now = self.now()
        if event.task.startswith(PHASE_TASK):
            name = event.task.removeprefix(PHASE_TASK)
            self.live.phase, self.live.done, self.live.total = name, int(event.completed), int(event.total or 0)
            self.live.phase_started, self.live.sizes = now, None
            phases = self.phases_asked()
            self.live.soak_ahead = "soak" in phases[phases.index(name) + 1:] if name in phases else False
            if self.live.soak_ahead and not self.live.soak_s:
                self.live.soak_s = self.soak_seconds()
        elif event.task.startswith(SIZES_TASK):
            self.live.sizes = (event.task.removeprefix(SIZES_TASK), int(event.completed), int(event.total or 0))
        elif event.task == SOAK_TASK:
            self.live.soak_s = int(event.total or 0)
        self.refresh_live()
        if self._ticker is None:
            self._ticker = self.set_interval(1.0, self.refresh_live)

    _ticker: Any = None

    def step_params(self) -> Any:
        """The burn-in step's parameters as the step reads them (the model's defaults filled in)."""
        index = self.indices[0] if self.indices else None
        if index is None:
            return None
        try:
            return BurninParams.model_validate(self.session.runs[index].spec.params)
        except ValueError:
            return None

    def phases_asked(self) -> list[str]:
        params = self.step_params()
        return [p for p in (params.phases if params is not None else "").split(",") if p]

    def soak_seconds(self) -> int:
        params = self.step_params()
        return int(params.duration_s) if params is not None else 0

    def refresh_live(self) -> None:
        now = self.now()
        running = self.wizard.busy and bool(self.live.phase)
        self.query_one("#phase", Static).update(self.live.text(now) if running else Text())
        bar = self.query_one("#phase-bar", ProgressBar)
        bar.set_class(not running, "idle")
        if running:
            done, total = self.live.fraction(now)
            bar.update(total=total, progress=done)
        elif self._ticker is not None:
            self._ticker.stop()
            self._ticker = None

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
        doc = self.session.state.burnin
        if doc is None and self.wizard.busy and self.live.phase:
            self.query_one("#verdict", Static).update(Text.assemble(("verdict: ", "bold"),
                                                                    ("running…", "bold yellow")))
        else:
            self.query_one("#verdict", Static).update(verdict_text(doc))
        self.refresh_live()
