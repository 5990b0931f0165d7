"""The run log (JSON Lines events) rendered as readable plain lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Log, Static

from screens.plain_text import plain_line


def describe(event: dict[str, Any]) -> str:
    kind = event.get("kind", "?")
    if kind == "output":
        return f"  {event.get('line', '')}"
    if kind == "command.started":
        return f"$ {event.get('command', '')}"
    if kind == "command.ended":
        return f"  [exit {event.get('exit_status')}, {event.get('duration_s', 0):.1f}s]"
    if kind in ("step.started", "step.finished", "step.plan"):
        detail = event.get("status") or event.get("title") or "; ".join(event.get("changes") or [])
        return f"{kind} #{event.get('index')} {event.get('step', '')}: {detail}"
    if kind == "message":
        return f"{event.get('level')}: {event.get('text')}"
    return f"{kind}: " + json.dumps({k: v for k, v in event.items() if k not in ("kind", "ts", "host")})[:200]


class RunLogScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "Close")]

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def compose(self) -> ComposeResult:
        yield Static(f"run log {self.path}  (Esc closes)", id="crumbs", markup=False)
        yield Log(max_lines=20000, id="runlog")
        yield Footer()

    def on_mount(self) -> None:
        lines: list[str] = []
        try:
            raw = self.path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raw, lines = [], [f"cannot read {self.path}: {exc.strerror}"]
        for line in raw:
            try:
                lines.append(plain_line(describe(json.loads(line))))
            except json.JSONDecodeError:
                lines.append(plain_line(line))
        self.query_one(Log).write_lines(lines)
