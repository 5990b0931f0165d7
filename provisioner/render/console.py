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
from provisioner.render.safe_text import guard, plain
from provisioner.step_registry import KINDS
from provisioner.words import errno_in_words

STATUS_STYLE = {"ok": "green", "changed": "yellow", "failed": "bold red", "skipped": "dim", "interrupted": "bold red"}


class ConsoleRenderer:
    """A run on two streams, as uv prints: its progress on `console` (stderr), what the command was asked
    for on `answer` (stdout: a plan's steps with what each will change, the recap). With `--json` the JSON
    takes stdout and the caller hands the stderr console as `answer` too.

    `verbose` (-v): step headers, every command and its output. Not verbose (the default): one line per
    step (number, title, status, time, first line of its message), warnings and errors, what failed in
    full. `quiet` (-q): no progress, only what failed, warnings and errors. The answer comes at every level."""

    def __init__(self, console: Console | None = None, *, verbose: bool = True, multi_host: bool = False,
                 quiet: bool = False, answer: Console | None = None) -> None:
        self.console = guard(console or Console(stderr=True, highlight=False, soft_wrap=True))
        self.answer = guard(answer) if answer is not None else self.console
        self.verbose = verbose and not quiet
        self.quiet = quiet
        self.multi_host = multi_host
        self._planned: dict[tuple[str, int], PlanReady] = {}
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
            if not self.quiet:
                self._rule(plain(f"{event.mode.upper()} {event.playbook}  (run {event.run_id})"))
        elif isinstance(event, StepStarted):
            self._stop_progress()
            self._titles[(event.host, event.index)] = event.title
            if self.verbose:
                c.print(p + Text(f"▶ {event.index + 1}. {plain(event.title)}", style="bold"))
        elif isinstance(event, PlanReady) and self._mode == "plan":
            self._planned[(event.host, event.index)] = event  # the plan: under its step's line (answer)
        elif isinstance(event, PlanReady) and self.verbose:
            self._plan_lines(c, p, event)
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
            if not self.quiet and c.is_terminal:  # a bar in a file or a pipe is only a blank line at its end
                self._on_progress(event)
        elif isinstance(event, Message):
            if event.level == "info" and (self.quiet or not (self.verbose or _kept_info(event.text))):
                return
            style = {"info": "", "warning": "yellow", "error": "bold red"}[event.level]
            c.print(p + Text(f"   {event.level}: ", style=style)
                    + Text(plain(errno_in_words(event.text), multiline=True)))
        elif isinstance(event, StepFinished):
            self._stop_progress()
            self._finished(p, event)
        elif isinstance(event, RunFinished):
            self._stop_progress()
            self.answer.print(recap_table(event.recap, mode=self._mode))

    def _finished(self, p: Text, event: StepFinished) -> None:
        """A plan's step: its line and what it will change, on the answer stream (one that failed is an error:
        stderr). An applied step: progress (verbose: its status under its header; default: its line; quiet:
        only when it failed)."""
        failed = event.status in ("failed", "interrupted")
        planned = self._planned.pop((event.host, event.index), None)
        if event.mode == "plan" and not failed:
            self._step_line(self.answer, p, event)
            if planned is not None:
                self._plan_lines(self.answer, p, planned)
            self._failure_lines(self.answer, p, event)
        elif self.verbose:
            sep, first = _detail(event)
            sep = sep if sep == ": " else " "  # "failed (1.2s) why", as verbose always printed
            self.console.print(p + Text(f"   {status_word(event.status, event.mode)}", style=STATUS_STYLE[event.status])
                               + Text(f" ({event.duration_s:.1f}s)" if event.duration_s else "")
                               + Text(f"{sep}{first}" if first else "", style="" if failed else "dim"))
            self._failure_lines(self.console, p, event)
        elif failed or not self.quiet:
            self._step_line(self.console, p, event)
            self._failure_lines(self.console, p, event)

    def _plan_lines(self, c: Console, p: Text, event: PlanReady) -> None:
        for change in event.changes:
            c.print(p + Text("   will change: ", style="yellow") + Text(plain(change, multiline=True)))
        for note in event.notes:
            c.print(p + Text("   note: ", style="dim") + Text(plain(note, multiline=True)))

    def _rule(self, title: str) -> None:
        """The run's header: a rule when its title fits the width, else the whole title (never cut)."""
        if len(title) + 6 <= self.console.width:
            self.console.rule(Text(title))
        else:
            self.console.print(Text(f"── {title}"), crop=False, overflow="ignore")

    def _step_line(self, c: Console, p: Text, event: StepFinished) -> None:
        """One line for a finished step, under its own title (a skipped step never started: its kind's
        title): number, title, status, time, the first line of its message (ok/changed/skipped: shortened
        at a word to fit the width; what failed in full)."""
        title = self._titles.get((event.host, event.index)) or step_title(event.step)
        sep, first = _detail(event)
        head = (p + Text(f"{event.index + 1:>2}. {plain(title)}: ")
                + Text(status_word(event.status, event.mode), style=STATUS_STYLE[event.status])
                + Text(f" ({event.duration_s:.1f}s)" if event.duration_s else ""))
        if event.status not in ("failed", "interrupted"):
            first = shorten(first, max(DETAIL_MIN, (c.width if c.is_terminal else LINE_MAX) - head.cell_len - 2))
        c.print(head + Text(f"{sep}{first}" if first else "",
                            style="dim" if event.status in ("ok", "changed", "skipped") else ""),
                crop=False, overflow="ignore")

    def _failure_lines(self, c: Console, p: Text, event: StepFinished) -> None:
        """A failed or interrupted step's message lines after the first, then each diagnosis and its fix."""
        if event.status not in ("failed", "interrupted"):
            return
        for line in errno_in_words(event.message).splitlines()[1:]:
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


#: a step line's width when the stream is no terminal (a file, a pipe); on a terminal, the terminal's
LINE_MAX = 200
#: the fewest characters of a step's detail kept on a narrow terminal
DETAIL_MIN = 24


def shorten(text: str, width: int) -> str:
    """`text` in at most `width` characters, cut after a whole word with an ellipsis (never mid-word)."""
    if len(text) <= width:
        return text
    cut = text[: max(1, width - 1)]
    space = cut.rfind(" ")
    if space > width // 3:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def step_title(kind: str) -> str:
    """A step kind's title (its class's, once the runner loaded the kinds), else the kind itself."""
    title = getattr(KINDS.get(kind), "title", None)
    return title if isinstance(title, str) and title else kind


def _detail(event: StepFinished) -> tuple[str, str]:
    """The first line of a step's message, in words (no errno numbers), with what goes before it: a message
    that repeats the status (`skipped: step 1 (node.connect) failed`) follows it after ": ", not twice."""
    first = errno_in_words(event.message.splitlines()[0]) if event.message else ""
    if first.startswith(f"{event.status}: "):
        return ": ", plain(first[len(event.status) + 2:])
    return "  ", plain(first)


def _kept_info(text: str) -> bool:
    """The info messages a non-verbose run still prints: verdicts (the burn-in's) and where each secret is read
    from (a plan names them before anything is sent)."""
    return "verdict" in text or text.startswith("secret target.")



def status_word(status: str, mode: str) -> str:
    """What a step's status means to the reader: a plan changed nothing, it shows what *would* change."""
    if mode == "plan":
        return {"changed": "will change", "ok": "no change"}.get(status, status)
    return status


def recap_table(recap: dict[str, dict[str, int]], *, mode: str = "apply") -> Table:
    """Each host's counts; an `interrupted` column when a step was interrupted (SIGINT, SIGTERM)."""
    table = Table(title="Plan" if mode == "plan" else "Recap", title_justify="left")
    table.add_column("host")
    columns = [("ok", "green"), ("changed", "yellow"), ("failed", "red"), ("skipped", "dim")]
    if any(counts.get("interrupted", 0) for counts in recap.values()):
        columns.append(("interrupted", "bold red"))
    for col, style in columns:
        table.add_column(status_word(col, mode), justify="right", style=style)
    for host, counts in recap.items():
        table.add_row(Text(plain(host)), *(str(counts.get(k, 0)) for k, _ in columns))
    return table
