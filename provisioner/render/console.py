"""Rich rendering of the event stream: step headers, commands, live output, progress, recap.

Remote text is always wrapped in `rich.text.Text` (never parsed as markup).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from provisioner.events import (
    CommandEnded,
    CommandStarted,
    Event,
    Message,
    OutputLine,
    PlanReady,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
)
from provisioner.events import (
    Progress as ProgressEvent,
)
from provisioner.render.safe_text import plain

STATUS_STYLE = {"ok": "green", "changed": "yellow", "failed": "bold red", "skipped": "dim", "interrupted": "bold red"}


class ConsoleRenderer:
    """`verbose`: step headers, plans, every command and its output. Not verbose (`--quiet`, the demo): one
    line per step (number, title, status, time, first line of its message), warnings and errors, what failed
    in full, and the recap."""

    def __init__(self, console: Console | None = None, *, verbose: bool = True, multi_host: bool = False) -> None:
        self.console = console or Console(stderr=True, highlight=False, soft_wrap=True)
        self.verbose = verbose
        self.multi_host = multi_host
        self._progress: Progress | None = None
        self._tasks: dict[tuple[str, str], TaskID] = {}
        self._mode = "apply"
        self._titles: dict[tuple[str, int], str] = {}

    def _prefix(self, event: Event) -> Text:
        return Text(f"[{plain(event.host)}] ", style="cyan") if self.multi_host and event.host else Text()

    def __call__(self, event: Event) -> None:
        c = self.console
        p = self._prefix(event)
        if isinstance(event, RunStarted):
            self._mode = event.mode
            c.rule(Text(plain(f"{event.mode.upper()} {event.playbook}  (run {event.run_id})")))
        elif isinstance(event, StepStarted):
            self._stop_progress()
            self._titles[(event.host, event.index)] = event.title
            if self.verbose:
                c.print(p + Text(f"▶ {event.index + 1}. {plain(event.title)}", style="bold"))
        elif isinstance(event, PlanReady) and not self.verbose:
            return
        elif isinstance(event, PlanReady):
            for change in event.changes:
                c.print(p + Text("   will change: ", style="yellow") + Text(plain(change, multiline=True)))
            for note in event.notes:
                c.print(p + Text("   note: ", style="dim") + Text(plain(note, multiline=True)))
        elif isinstance(event, CommandStarted):
            if self.verbose:
                c.print(p + Text("   $ ", style="dim") + Text(plain(event.command), style="dim"))
        elif isinstance(event, OutputLine):
            if self.verbose:
                c.print(p + Text("     ") + Text(plain(event.line)), crop=False, overflow="ignore")
        elif isinstance(event, CommandEnded):
            if self.verbose and (event.exit_status != 0 or event.timed_out):
                what = "timed out" if event.timed_out else f"exit {event.exit_status}"
                c.print(p + Text(f"   ✗ {what} after {event.duration_s:.1f}s", style="red"))
        elif isinstance(event, ProgressEvent):
            self._on_progress(event)
        elif isinstance(event, Message):
            if not self.verbose and event.level == "info" and not _kept_info(event.text):
                return
            style = {"info": "", "warning": "yellow", "error": "bold red"}[event.level]
            c.print(p + Text(f"   {event.level}: ", style=style) + Text(plain(event.text, multiline=True)))
        elif isinstance(event, StepFinished) and not self.verbose:
            self._stop_progress()
            self._step_line(p, event)
        elif isinstance(event, StepFinished):
            self._stop_progress()
            style = STATUS_STYLE[event.status]
            c.print(p + Text(f"   {status_word(event.status, event.mode)}", style=style) +
                    Text(f" ({event.duration_s:.1f}s) " if event.duration_s else " ") +
                    Text(plain(event.message.splitlines()[0]) if event.message else "", style="dim" if event.status
                         in ("ok", "changed", "skipped") else ""))
            self._failure_lines(p, event)
        elif isinstance(event, RunFinished):
            self._stop_progress()
            c.print(recap_table(event.recap, mode=self._mode))

    def _step_line(self, p: Text, event: StepFinished) -> None:
        """One line for a finished step; a failed one adds its message's other lines and the diagnosis."""
        c = self.console
        title = self._titles.get((event.host, event.index), event.step)
        first = plain(event.message.splitlines()[0]) if event.message else ""
        c.print(p + Text(f"{event.index + 1:>2}. {plain(title)}: ")
                + Text(status_word(event.status, event.mode), style=STATUS_STYLE[event.status])
                + Text(f" ({event.duration_s:.1f}s)" if event.duration_s else "")
                + Text(f"  {first}"[:160], style="dim" if event.status in ("ok", "changed", "skipped") else ""),
                crop=False, overflow="ignore")
        self._failure_lines(p, event)

    def _failure_lines(self, p: Text, event: StepFinished) -> None:
        """A failed or interrupted step's message lines after the first, then each diagnosis and its fix."""
        if event.status not in ("failed", "interrupted"):
            return
        c = self.console
        for line in event.message.splitlines()[1:]:
            c.print(p + Text("     " + plain(line)))
        for finding in event.diagnosis:
            c.print(p + Text(f"   diagnosis [{finding.get('category')}]: ", style="magenta") +
                    Text(plain(str(finding.get("root_cause", "")), multiline=True)))
            if finding.get("fix"):
                c.print(p + Text("   fix: ", style="magenta") + Text(plain(str(finding["fix"]), multiline=True)))

    def _on_progress(self, event: ProgressEvent) -> None:
        if self._progress is None:
            columns: list[Any] = [TextColumn("   {task.description}"), BarColumn()]
            if event.unit == "bytes":
                columns.append(DownloadColumn())
            else:
                columns.append(TextColumn("{task.completed:.0f}/{task.total:.0f}"))
            columns.append(TimeRemainingColumn())
            self._progress = Progress(*columns, console=self.console, transient=True)
            self._progress.start()
        key = (event.host, event.task)
        if key not in self._tasks:
            self._tasks[key] = self._progress.add_task(escape(plain(event.task)), total=event.total)
        self._progress.update(self._tasks[key], completed=event.completed, total=event.total)

    def _stop_progress(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._tasks.clear()


def _kept_info(text: str) -> bool:
    """The info messages a quiet run still prints: verdicts (the burn-in's)."""
    return "verdict" in text



def status_word(status: str, mode: str) -> str:
    """What a step's status means to the reader: a plan changed nothing, it shows what *would* change."""
    if mode == "plan":
        return {"changed": "will change", "ok": "no change"}.get(status, status)
    return status


def recap_table(recap: dict[str, dict[str, int]], *, mode: str = "apply") -> Table:
    table = Table(title="Plan" if mode == "plan" else "Recap", title_justify="left")
    table.add_column("host")
    for col, style in (("ok", "green"), ("changed", "yellow"), ("failed", "red"), ("skipped", "dim")):
        table.add_column(status_word(col, mode), justify="right", style=style)
    for host, counts in recap.items():
        table.add_row(Text(plain(host)), *(str(counts.get(k, 0)) for k in ("ok", "changed", "failed", "skipped")))
    return table
