"""The shape every wizard page shares: step forms, the plan, run controls, live output, errors.

A page drives the playbook steps of its kinds in order. "Run" (ctrl+r) plans the next step that is
not done; a plan without changes is applied at once (nothing to confirm), a plan with changes is
shown ("will change: …") and the button becomes "Apply", which is the confirmation. That holds for
every run: the first, a Retry after a failure (it plans again and waits for Apply) and a re-run
after an edit. Editing a finished step marks it "edited" and the finished steps after it
"outdated" (they may depend on it): each is planned again; the recording keeps the new values,
marked pending, until they are applied. A failure shows the error panel with Retry / Skip / Abort.
The engine runs in a worker on the app's loop; its events arrive through the app (batched) and
are rendered here as plain text.

Layout (80×24 and up): breadcrumb; the page's view and step forms (scrolling); the plan waiting
for confirmation; the live output (or the error panel in its place); the action bar; the footer.
"""

from __future__ import annotations

import textwrap
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widget import MountError, Widget
from textual.widgets import Button, Footer, Log, Static

from provisioner.events import (
    CommandEnded,
    CommandStarted,
    Event,
    Message,
    Metric,
    OutputLine,
    PlanReady,
    Progress,
    StepFinished,
    StepStarted,
)
from provisioner.node_resources import field_problems
from provisioner.steps.base import load_step_kinds
from screens.dialogs import OfferDialog
from screens.fit import fit_urls, has_long_url, middle_ellipsis, word_ellipsis
from screens.plain_text import plain_line
from screens.widgets.error_panel import ErrorPanel, error_text
from screens.widgets.params_form import ParamsForm
from screens.wizard_app import WizardApp
from screens.wizard_session import PAGES, PageDef, StepRun, WizardSession, params_model

LOG_MAX_LINES = 5000
STATUS_MARK = {"pending": "○", "planning": "…", "planned": "◐", "running": "▶", "ok": "✓", "changed": "✓",
               "failed": "✗", "skipped": "↷", "interrupted": "✗", "edited": "✎", "outdated": "↻"}
STATUS_WORDS = {"edited": "edited: plan again", "outdated": "outdated: an earlier step was edited"}


def breadcrumb(current: str, width: int = 200) -> Text:
    """All pages with the current one highlighted; when too wide, a window around the current page."""
    names = [p.name for p in PAGES]
    at = names.index(current) if current in names else 0
    first, last = 0, len(PAGES)
    full = sum(len(p.title) + 3 for p in PAGES)
    while full > width - 8 and last - first > 1:
        if at - first > last - 1 - at:
            first += 1
        else:
            last -= 1
        full = sum(len(p.title) + 3 for p in PAGES[first:last])
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"{at + 1}/{len(PAGES)} ", style="dim")
    if first:
        text.append("… › ", style="dim")
    for i, page in enumerate(PAGES[first:last], start=first):
        if i > first:
            text.append(" › ", style="dim")
        text.append(page.title, style="bold reverse" if page.name == current else "")
    if last < len(PAGES):
        text.append(" › …", style="dim")
    return text


class PageBody(Vertical):
    """The page's specialised view and step forms (mounted after the first frame on the start page)."""

    DEFAULT_CSS = "PageBody { height: auto; }"

    def __init__(self, page: StepPage) -> None:
        super().__init__(id="page-body")
        self.page_screen = page

    def compose(self) -> ComposeResult:
        yield from self.page_screen.compose_view()
        yield from self.page_screen.compose_steps()


#: One field per fact: parameters another page already edits are not shown twice (the container id is the
#: Container page's own field; `onboot` is the Container page's, mirrored into the boot unit step).
WIZARD_HIDDEN: dict[str, tuple[str, ...]] = {"lxc.create": ("vmid",), "lxc.boot_persistence": ("onboot",)}


class StepPage(Screen[None]):
    """Base of the wizard pages; subclasses add their specialised view."""

    PAGE_NAME: ClassVar[str] = ""
    AUTO_SCROLL_OUTPUT: ClassVar[bool] = True
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+r", "run", "Run", tooltip="Plan the next step; apply it on a second press"),
        Binding("ctrl+b", "app.prev_page", "Back"),
        Binding("ctrl+n", "app.next_page", "Next"),
    ]

    def __init__(self, session: WizardSession) -> None:
        self.page: PageDef = next(p for p in PAGES if p.name == self.PAGE_NAME)
        super().__init__(name=self.page.name, id=f"page-{self.page.name}")
        self.session = session
        self.indices = session.indices(self.page.kinds)
        self.form_valid: dict[int, bool] = {}
        self.phase = ""  # "plan" or "apply" while the engine runs a step of this page
        self.defer_body = False  # the start page: paint the frame first, then build the forms
        self.body_ready = False
        self._checked_against: object = session.resources

    @property
    def wizard(self) -> WizardApp:
        app = self.app
        assert isinstance(app, WizardApp)
        return app

    # --- layout ------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(breadcrumb(self.page.name, self.app.size.width), id="crumbs")
        with VerticalScroll(id="body"):
            if not self.defer_body:
                yield PageBody(self)
        with VerticalScroll(id="plan-box"):
            yield Static("", id="plan", markup=False)
        yield ErrorPanel(id="error")
        yield Log(max_lines=LOG_MAX_LINES, id="log", auto_scroll=self.AUTO_SCROLL_OUTPUT)
        with Horizontal(id="actions"):
            yield Button("◀ Back", id="back", compact=True)
            yield Static("", id="status", markup=False)
            yield Button("Run", id="run", variant="primary", compact=True)
            yield Button("Next ▶", id="next", compact=True)
        yield Footer()

    def compose_view(self) -> ComposeResult:
        """The page's specialised widgets, above the step forms."""
        return
        yield

    def compose_steps(self) -> ComposeResult:
        if self.page.kinds and not self.indices:
            yield Static(f"This playbook has no {' / '.join(self.page.kinds)} step; nothing to do here.",
                         classes="note", markup=False)
        kinds = load_step_kinds()
        for index in self.indices:
            run = self.session.runs[index]
            cls = kinds.get(run.spec.kind)
            title = cls.title if cls is not None else run.spec.kind
            yield Static(self._step_title(run, title), id=f"title-{index}", classes="step-title")
            model = params_model(run.spec.kind)
            if model is not None and model.model_fields:
                form = ParamsForm(model, run.spec.params, key=f"s{index}", id=f"form-{index}",
                                  exclude=WIZARD_HIDDEN.get(run.spec.kind, ()))
                form.checks.append(self.node_check(run.spec.kind))
                yield form

    def node_check(self, kind: str) -> Any:
        """The form's check against what the node offers (storages with the content a field needs, bridges,
        templates, cores, memory: `provisioner.node_resources`), as the values are typed."""
        def check(params: Any) -> dict[str, str]:
            return field_problems(kind, params.model_dump(), self.session.resources)
        return check

    def on_mount(self) -> None:
        if self.leaving:  # ctrl+q came while the page was being mounted: its widgets are already being pruned
            return
        self.fit_height()
        if self.defer_body:
            self.query_one("#run", Button).disabled = True
            self.call_after_refresh(self._fill_body)
            return
        self._body_mounted()

    @property
    def leaving(self) -> bool:
        """The wizard is quitting (`ProvisionerApp.exit`): a page mounted or resumed now has no widgets to fill."""
        return bool(getattr(self.app, "leaving", False))

    async def _fill_body(self) -> None:
        if self.leaving:
            return
        body = self.query_one("#body")
        try:
            await body.mount(PageBody(self))
        except MountError:
            return  # the wizard is quitting before the page was filled
        self.defer_body = False
        self._body_mounted()

    def _body_mounted(self) -> None:
        self.body_ready = True
        self.refresh_controls()
        self.refresh_view()
        self.focus_first()

    def focus_first(self) -> None:
        """Something is focused from the start: the first field, else the Run button."""
        from textual.widgets import Input, Select, Switch

        if self.focused is not None:
            return
        for widget in self.query_one("#body").query("*"):
            if isinstance(widget, Input | Select | Switch) and widget.focusable:
                widget.focus(scroll_visible=False)
                return
        self.query_one("#run", Button).focus()

    def on_screen_suspend(self) -> None:
        self.flush_forms()

    def flush_forms(self) -> None:
        """Apply edits still waiting for validation (the values a run or the playbook reads)."""
        for form in self.query(ParamsForm):
            form.flush()

    def on_resize(self) -> None:
        if self.leaving:
            return
        self.query_one("#crumbs", Static).update(breadcrumb(self.page.name, self.app.size.width))
        self.fit_height()
        if self.body_ready:
            self.refresh_controls()  # titles and the plan fitted to the new width

    def fit_height(self) -> None:
        """Live output gets 8 rows from 28 rows up, 6 below (80×24 keeps room for the forms).
        Set on the two widgets, not by a screen class: that would restyle every widget."""
        short = self.app.size.height < 28
        self.query_one("#log").styles.height = 6 if short else 8
        self.query_one("#plan-box").styles.max_height = 8 if short else 10

    def on_screen_resume(self) -> None:
        if self.leaving:
            return
        self.query_one("#crumbs", Static).update(breadcrumb(self.page.name, self.app.size.width))
        if not self.body_ready:
            return
        if self._checked_against is not self.session.resources:  # the node was read since: check the fields
            self._checked_against = self.session.resources
            for form in self.query(ParamsForm):
                form.revalidate()
        self.refresh_controls()
        self.refresh_view()

    # --- state shown ---------------------------------------------------------------------------------

    def _step_title(self, run: StepRun, title: str | None = None) -> Text:
        cls = load_step_kinds().get(run.spec.kind)
        title = title or (cls.title if cls is not None else run.spec.kind)
        # the status word first; where the line is too narrow the kind goes, then the title loses whole words
        # (never the status word, never half a word)
        width = max(20, (self.app.size.width or 80) - 5)
        status = f"{STATUS_MARK.get(run.status, '?')} {STATUS_WORDS.get(run.status, run.status)}"
        kind = f"  [{run.spec.kind}]"
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(status, style="bold")
        room = width - len(status) - 3
        if len(title) + len(kind) <= room:
            text.append(f" · {title}", style="bold")
            text.append(kind, style="dim")
        elif room >= 8:
            text.append(f" · {word_ellipsis(title, room)}", style="bold")
        return text

    def next_index(self) -> int | None:
        for index in self.indices:
            if not self.session.runs[index].done:
                return index
        return None

    def refresh_controls(self) -> None:
        if not self.body_ready:
            return
        for i in self.indices:
            self.query_one(f"#title-{i}", Static).update(self._step_title(self.session.runs[i]))
        button = self.query_one("#run", Button)
        index = self.next_index()
        busy = self.wizard.busy
        valid = all(self.form_valid.get(i, True) for i in self.indices)
        if index is None:
            button.label = "Done ✓" if self.indices else "—"
            button.disabled = True
        else:
            run = self.session.runs[index]
            if run.planned and run.changes:
                button.label = f"Apply ({len(run.changes)})"
            elif run.status in ("failed", "interrupted"):
                button.label = "Retry"
            else:
                button.label = "Plan"
            button.disabled = busy or not valid
        self.query_one("#status", Static).update(self.status_line())
        self.show_plan()

    def status_line(self) -> str:
        if self.wizard.busy:
            return "running…"
        done = sum(1 for i in self.indices if self.session.runs[i].done)
        return f"{done}/{len(self.indices)} steps done" if self.indices else ""

    def plan_notes(self, run: StepRun) -> list[str]:
        """The notes shown under a plan; a page that shows them in its own view leaves them out."""
        return list(run.notes)

    def show_plan(self) -> None:
        """The plan pane: each change on its own lines with a hanging indent (wrapped to the pane, never
        cut), the confirmation line right under the heading, then the notes. The pane scrolls; the page's
        title and form keep their place above it."""
        text = Text()
        waiting = False
        width = max(30, (self.app.size.width or 80) - 6)

        shown: list[str] = []  # every line as given: the tooltip's full text where a URL was shortened

        def item(line: str, bullet: str, style: str = "") -> None:
            shown.append(line)
            room = width - len(bullet)
            for n, part in enumerate(textwrap.wrap(fit_urls(line, room), room, break_on_hyphens=False,
                                                   break_long_words=False) or [""]):
                text.append((bullet if n == 0 else " " * len(bullet)) + part + "\n", style=style)

        for index in self.indices:
            run = self.session.runs[index]
            if run.status in ("planned", "running", "ok", "changed") and (run.changes or run.notes):
                if run.changes and run.status in ("planned", "running"):
                    waiting = waiting or run.planned
                    text.append(f"{run.spec.name or run.spec.kind} will change:\n", style="bold")
                    if run.planned:
                        text.append(f"Apply (ctrl+r) makes these {len(run.changes)} change(s); "
                                    "editing a field plans again.\n", style="bold yellow")
                    for change in run.changes:
                        item(change, "  • ")
                elif run.status == "planned":
                    text.append("no change needed\n", style="bold")
                for note in self.plan_notes(run):
                    item(note, "  ", "dim")
        text.rstrip()
        plan = self.query_one("#plan", Static)
        plan.update(text)
        plan.tooltip = "\n".join(shown) if has_long_url(shown, width - 4) else None
        box = self.query_one("#plan-box")
        box.set_class(bool(text.plain.strip()), "shown")
        box.set_class(waiting, "waiting")

    def show_error(self, index: int) -> None:
        run = self.session.runs[index]
        cls = load_step_kinds().get(run.spec.kind)
        title = cls.title if cls is not None else run.spec.kind
        command = run.failing_command or run.last_command
        self.query_one(ErrorPanel).show(error_text(title, run.message, command, list(run.tail)[-12:],
                                                   run.diagnosis), run.offer.action if run.offer else "")
        self.set_class(True, "-error")

    def hide_error(self) -> None:
        self.query_one(ErrorPanel).hide()
        self.set_class(False, "-error")

    def refresh_view(self) -> None:
        """Subclasses refresh their specialised widgets from the typed `session.state`."""

    # --- forms ------------------------------------------------------------------------------------

    @on(ParamsForm.Changed)
    def _form_changed(self, event: ParamsForm.Changed) -> None:
        if not event.form.key.startswith("s"):
            return
        index = int(event.form.key[1:])
        self.form_valid[index] = not event.errors
        if not event.errors:
            self.store_params(index, event.values)
        self.refresh_controls()

    def store_params(self, index: int, values: dict[str, Any]) -> None:
        """Keep the edited parameters; an edit to a finished step reopens it (and what follows)."""
        run = self.session.runs[index]
        before, was_done = run.spec.params, run.done and run.status != "skipped"
        self.session.set_params(index, values)
        if was_done and run.spec.params != before:
            self.session.reopen(index)
            self.log_line(f"── edited: {run.spec.name or run.spec.kind}; it will be planned again")

    # --- running ------------------------------------------------------------------------------------

    @on(Button.Pressed, "#run")
    def _run_pressed(self) -> None:
        self.action_run()

    @on(Button.Pressed, "#back")
    def _back(self) -> None:
        self.wizard.action_prev_page()

    @on(Button.Pressed, "#next")
    def _next(self) -> None:
        self.wizard.action_next_page()

    @on(Button.Pressed, "#retry")
    def _retry(self) -> None:
        self.action_run()

    @on(Button.Pressed, "#offer")
    def _offer(self) -> None:
        """The failed step offers an edit of its own parameters (trust a sha256 it could not verify): shown
        with what to check, applied only when confirmed, then planned again like Retry (nothing is applied
        before the new plan is confirmed)."""
        index = self.next_index()
        run = self.session.runs[index] if index is not None else None
        if self.wizard.busy or run is None or run.offer is None:
            return
        offer = run.offer

        def decided(accepted: bool | None) -> None:
            if not accepted or run.offer is not offer:
                return
            current = run.spec.params.get(offer.param)
            value = {**(current if isinstance(current, dict) else {}), **offer.add}
            self.store_params(run.index, {offer.param: value})
            for form in self.query(f"#form-{run.index}").results(ParamsForm):
                form.set_value(offer.param, value)  # the field shows what the step now runs with
            self.log_line(f"── {offer.param}: added {', '.join(offer.add)} (confirmed in the wizard)")
            self.action_run()

        self.app.push_screen(OfferDialog(run.spec.name or run.spec.kind, offer), decided)

    @on(Button.Pressed, "#skip")
    def _skip(self) -> None:
        if self.wizard.busy:
            return
        index = self.next_index()
        if index is not None:
            self.session.skip(index)
        self.hide_error()
        self.start(self.advance())

    @on(Button.Pressed, "#abort")
    def _abort(self) -> None:
        self.hide_error()
        self.wizard.action_abort()

    def action_run(self) -> None:
        """Plan the next step, or apply the plan on screen (the confirmation). Retry is a new plan."""
        if self.wizard.busy or not self.body_ready or self.next_index() is None:
            return
        self.flush_forms()
        if not all(self.form_valid.get(i, True) for i in self.indices):
            self.notify("fix the highlighted fields first", severity="warning")
            return
        index = self.next_index()
        assert index is not None
        earlier = [r for r in self.session.runs[:index] if not r.done]
        waiting = [r for r in earlier if r.planned and r.changes]
        if waiting:  # a shown plan was neither confirmed nor dropped: later steps would run without it
            names = ", ".join(r.spec.name or r.spec.kind for r in waiting)
            self.notify(f"{names}: its plan waits for confirmation (Apply) on its page; apply it first",
                        severity="warning", markup=False)
            return
        if earlier:
            self.log_line("note: earlier steps have not run: " + ", ".join(r.spec.name or r.spec.kind
                                                                          for r in earlier))
        self.hide_error()
        self.start(self.advance())

    def start(self, coro: Any) -> None:
        self.wizard.start_engine(self, coro)

    async def before_run(self) -> bool:
        """Hook run before the page's first engine call (the connect page checks the host key)."""
        return True

    async def advance(self) -> None:
        """Apply the plan the user confirmed, then plan the following steps: those without changes
        apply at once; the first one with changes stops, its plan on screen, for the next confirmation."""
        if not await self.before_run():
            return
        while (index := self.next_index()) is not None:
            run = self.session.runs[index]
            if not (run.planned and run.changes):
                self.phase = "plan"
                self.log_line(f"── plan: {run.spec.name or run.spec.kind}")
                status = await self.session.plan(index)
                self.after_step(index)
                if status == "failed":
                    self.show_error(index)
                    return
                if run.changes:
                    return  # every change waits for its confirmation (Apply)
            self.phase = "apply"
            self.log_line(f"── apply: {run.spec.name or run.spec.kind}")
            status = await self.session.apply(index)
            self.after_step(index)
            if status not in ("ok", "changed"):
                self.show_error(index)
                return
        if any(r.status == "outdated" for r in self.session.runs):
            await self.replan_later()

    async def replan_later(self) -> None:
        """The steps after an edited one are planned again (`StepSession.replan_outdated`): unchanged ones
        are done at once; the first with changes waits, its plan on its own page."""
        self.phase = "plan"
        self.log_line("── planning the later steps again after the edit")
        stop = await self.session.replan_outdated()
        self.phase = ""
        self.after_step(self.indices[-1] if self.indices else 0)
        if stop is not None:
            run = self.session.runs[stop]
            why = "has changes to confirm" if run.status == "planned" else f"is {run.status}"
            self.log_line(f"{run.spec.name or run.spec.kind} {why}: see its page")
            self.notify(f"{run.spec.name or run.spec.kind} {why}: see its page", markup=False)

    def after_step(self, index: int) -> None:
        self.wizard.flush_events()
        self.phase = ""
        self.refresh_controls()
        self.refresh_view()

    # --- events -------------------------------------------------------------------------------------

    def log_line(self, line: str) -> None:
        self.wizard.flush_events()  # keep the order of engine output and page notes
        log = self.query_one("#log", Log)
        log.add_class("has-output")
        log.write_lines(self.fit_log(plain_line(line)))

    def log_width(self) -> int:
        """The columns a line of the live output has (its box, less the border and the scrollbar)."""
        log = self.query_one("#log", Log)
        width = log.scrollable_content_region.width if log.display and log.size.width else 0
        return max(20, (width or (self.app.size.width or 80) - 3) - 1)

    def fit_log(self, line: str, width: int | None = None) -> list[str]:
        """`line` wrapped at word boundaries to the live output's width, continued with a hanging indent;
        a word wider than a line (a path, a URL) is shortened in the middle. The run log keeps every line
        whole (ctrl+o)."""
        if width is None or len(line) > width:
            width = width or self.log_width()
        if len(line) <= width:
            return [line]
        indent = len(line) - len(line.lstrip(" "))
        hang = " " * min(indent + 2, width // 2)
        words = [middle_ellipsis(w, width - len(hang)) for w in line.split(" ")]
        return textwrap.wrap(" ".join(words), width, subsequent_indent=hang, initial_indent="",
                             break_long_words=False, break_on_hyphens=False, drop_whitespace=True) or [line]

    def handle_events(self, events: list[Event]) -> None:
        """Render a batch of engine events (remote text as plain text)."""
        log = self.query_one("#log", Log)
        lines: list[str] = []
        width = self.log_width()
        for event in events:
            if isinstance(event, OutputLine):
                lines.extend(self.fit_log(plain_line(event.line), width))
                continue
            if isinstance(event, CommandStarted):
                lines.extend(self.fit_log(plain_line(f"$ {event.command}")))
            elif isinstance(event, CommandEnded):
                if event.exit_status != 0:
                    lines.append(f"[exit {event.exit_status}{' timeout' if event.timed_out else ''}]")
            elif isinstance(event, Message):
                lines.extend(self.fit_log(plain_line(f"{event.level}: {event.text}")))
            elif isinstance(event, PlanReady):
                for change in event.changes:
                    lines.extend(self.fit_log(plain_line(f"will change: {change}")))
            elif isinstance(event, StepFinished):
                lines.extend(self.fit_log(plain_line(self._finished_line(event))))
            elif isinstance(event, StepStarted):
                pass
            elif isinstance(event, Progress):
                self.on_progress(event)
            elif isinstance(event, Metric):
                self.on_metric(event)
        if lines:
            log.add_class("has-output")
            log.write_lines(lines)

    def _finished_line(self, event: StepFinished) -> str:
        if self.phase == "plan" and event.status in ("ok", "changed"):
            run = self.session.runs[event.index] if 0 <= event.index < len(self.session.runs) else None
            count = len(run.changes) if run is not None else 0
            return f"{event.step}: planned, " + (f"{count} change(s) to confirm" if count else "nothing to change")
        first = event.message.splitlines()[0] if event.message else ""
        return f"{event.step}: {event.status} {first}".rstrip()

    def on_progress(self, event: Progress) -> None:
        """Specialised pages show progress bars."""

    def on_metric(self, event: Metric) -> None:
        """Specialised pages show live metrics."""

    def query_widget(self, selector: str) -> Widget:
        return self.query_one(selector)
