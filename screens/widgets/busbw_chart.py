"""Live bus bandwidth by message size: one bar per size, per collective."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


def format_size(size: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"


def render_bars(points: dict[tuple[str, int], float], width: int = 40) -> Text:
    """`points[(collective, size)] = busbw GB/s` as text bars scaled to the maximum."""
    text = Text()
    if not points:
        text.append("busbw: waiting for the first measurement…", style="dim")
        return text
    top = max(points.values()) or 1.0
    for collective in sorted({c for c, _ in points}):
        text.append(f"{collective} busbw (GB/s)\n", style="bold")
        for (coll, size), value in sorted(points.items(), key=lambda kv: kv[0][1]):
            if coll != collective:
                continue
            filled = max(0, round(width * value / top))
            text.append(f"{format_size(size):>6} ")
            text.append("█" * filled, style="green")
            text.append(" " * (width - filled))
            text.append(f" {value:7.2f}\n")
    return text


class BusbwChart(Static):
    DEFAULT_CSS = "BusbwChart { height: auto; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self.points: dict[tuple[str, int], float] = {}

    def on_mount(self) -> None:
        self.update(render_bars(self.points))

    def add(self, collective: str, size: int, busbw: float) -> None:
        self.points[(collective, size)] = busbw
        width = max(10, (self.size.width or 60) - 20)
        self.update(render_bars(self.points, width=width))
