"""The wizard application: installed pages, the engine worker, event batching, global actions.

Pages are built when first shown (the first frame needs only the start page's module), and
nothing connects until a step runs. Given a session *factory* instead of a session, the app paints
its first frame (the start page's breadcrumb and bars) before the factory loads the playbook and
the engine, then opens the page; an error of the factory ends the app with its message.
"""

from __future__ import annotations

import shlex
import signal
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen

if TYPE_CHECKING:  # the engine (pydantic models, steps) loads after the first frame when a factory is given
    from provisioner.events import Event
    from screens.wizard_session import WizardSession


class EventsPending(Message):
    """Engine events are waiting; coalesced so that a flood of output is one repaint per batch."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, EventsPending)


class ProvisionerApp(App[int]):
    """`provisioner tui`: one page per stage, the same engine as the headless CLI."""

    CSS_PATH = str(Path(__file__).with_name("app.tcss"))
    TITLE = "gpu-provisioner"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+q", "request_quit", "Quit", priority=True,
                tooltip="Leave the wizard (asks first while a step runs or work is not applied)"),
        Binding("f1", "help", "Help", priority=True, tooltip="Keys and pages"),
        Binding("question_mark", "help", "Help", show=False),
        Binding("f5", "diagnose", "Diagnose", tooltip="Paste a log and get findings"),
        Binding("f6", "toggle_theme", "Theme", tooltip="Switch between light and dark"),
        Binding("ctrl+s", "save", "Save", tooltip="Save the recorded playbook"),
        Binding("ctrl+o", "run_log", "Run log", tooltip="Open this run's log"),
    ]

    def __init__(self, session: WizardSession | Callable[[], WizardSession], *, start_page: str = "connect",
                 lab: bool = False, resume: bool = False) -> None:
        super().__init__()
        self.resume = resume
        self._factory = None if not callable(session) else session
        self.start_page = start_page
        self.lab = lab
        self.busy = False
        self.quit_after_step = False
        #: set once the wizard is leaving (ctrl+q, an error): nothing opens a page after that
        self.leaving = False
        #: set on leaving when the saved recording has steps left to do: the command that resumes it
        #: (`provisioner tui` prints it after the wizard's screen is gone)
        self.resume_command: str | None = None
        self._engine_step = ""
        self.active_page: Any = None
        self._pending: list[Event] = []
        self._flush_posted = False
        self.pages: dict[str, Any] = {}
        self.theme = "textual-dark"
        if self._factory is None:
            assert not callable(session)
            self._use_session(session)

    def _use_session(self, session: WizardSession) -> None:
        self.session = session
        self.sub_title = f"{session.host}{'  · LAB' if self.lab else ''}"
        session.subscribe(self._sink)

    def on_mount(self) -> None:
        if self._factory is not None:
            from screens.loading import LoadingScreen

            self.push_screen(LoadingScreen(self.start_page))
            self.call_after_refresh(self._open)
            return
        screen = self.page_screen(self.start_page)
        screen.defer_body = True  # type: ignore[attr-defined]  # the first frame before the forms
        self.push_screen(screen)
        if self.resume:
            self.call_after_refresh(self.begin_resume)

    def exit(self, result: Any = None, return_code: int = 0, message: Any = None) -> None:
        self.leaving = True
        super().exit(result, return_code, message)

    def _open(self) -> None:
        """Build the session after the first frame, then replace the loading frame by the page (unless ctrl+q
        came first: a key pressed on the loading frame is handled before this callback, and a page mounted
        on a leaving app has no widgets)."""
        assert self._factory is not None
        if self.leaving:
            return
        try:
            session = self._factory()
        except SystemExit as exc:
            self.exit(return_code=int(exc.code or 0) if isinstance(exc.code, int) else 2, message=str(exc.code or ""))
            return
        except Exception as exc:
            error = exc
            message = error.format_message() if hasattr(error, "format_message") else str(error)
            self.exit(return_code=int(getattr(exc, "exit_code", 2)), message=f"error: {message}")
            return
        self._factory = None
        self._use_session(session)  # closed on unmount, also when the wizard is already leaving
        if self.leaving:
            return
        self.switch_screen(self.page_screen(self.start_page))  # not awaited: this runs in a refresh callback
        if self.resume:
            self.call_after_refresh(self.begin_resume)

    def begin_resume(self) -> None:
        """Resume a recorded or half-finished run: steps the host already matches are recorded as
        "no change"; the wizard then opens the page of the first step with changes (or the Summary)."""
        from screens.wizard_session import PAGES

        page = self.pages.get(self.start_page)

        async def walk() -> None:
            index = await self.session.resume()
            kind = None if index is None else self.session.runs[index].spec.kind
            name = next((p.name for p in PAGES if kind in p.kinds), "summary")
            done = sum(1 for r in self.session.runs if r.done)
            self.notify(f"resumed: {done} step(s) already done on the host" +
                        (f"; next: {kind}" if kind else "; every step is done"), markup=False)
            self.goto(name)

        if page is not None:
            self.start_engine(page, walk())

    def page_screen(self, name: str) -> Screen[Any]:
        """The screen of page `name`, built (its module imported) the first time it is needed."""
        screen = self.pages.get(name)
        if screen is None:
            from screens.pages import page_class

            screen = page_class(name)(self.session)
            self.pages[name] = screen
            self.install_screen(screen, name)
        assert isinstance(screen, Screen)
        return screen

    async def on_unmount(self) -> None:
        if hasattr(self, "session"):
            await self.session.close()

    # --- engine events --------------------------------------------------------------------------------

    def _sink(self, event: Event) -> None:
        self._pending.append(event)
        if not self._flush_posted:
            self._flush_posted = True
            self.post_message(EventsPending())

    def on_events_pending(self, _: EventsPending) -> None:
        self._flush_posted = False
        self.flush_events()

    def flush_events(self) -> None:
        if not self._pending:
            return
        events, self._pending = self._pending, []
        page = self.active_page
        if page is not None and page.is_mounted:
            page.handle_events(events)

    def start_engine(self, page: Any, coro: Coroutine[Any, Any, None]) -> None:
        """Run one engine task at a time, in a worker on the app's loop (the UI stays live)."""
        if self.busy:
            coro.close()
            return
        self.busy = True
        self.active_page = page
        page.refresh_controls()

        async def task() -> None:
            try:
                await coro
            except Exception as exc:
                page.log_line(f"error: {type(exc).__name__}: {exc}")
                self.notify(f"{type(exc).__name__}: {exc}", severity="error", markup=False)
            finally:
                self.flush_events()
                self.busy = False
                if page.is_mounted:
                    page.refresh_controls()
                    page.refresh_view()
                if self.quit_after_step:
                    self.leave(save=True)

        self.run_worker(task(), group="engine", exit_on_error=False, description="engine")

    # --- navigation and global actions ----------------------------------------------------------------

    def current_page_name(self) -> str | None:
        for name, screen in self.pages.items():
            if screen is self.screen:
                return name
        return None

    def goto(self, name: str) -> None:
        if self.screen is not self.pages.get(name) and isinstance(self.screen, Screen):
            if self.current_page_name() is None:
                return  # a dialog or the diagnose screen is on top
            self.switch_screen(self.page_screen(name))

    def action_next_page(self) -> None:
        from screens.wizard_session import PAGES

        name = self.current_page_name()
        if name is not None:
            index = [p.name for p in PAGES].index(name)
            if index + 1 < len(PAGES):
                self.goto(PAGES[index + 1].name)

    def action_prev_page(self) -> None:
        from screens.wizard_session import PAGES

        name = self.current_page_name()
        if name is not None:
            index = [p.name for p in PAGES].index(name)
            if index > 0:
                self.goto(PAGES[index - 1].name)

    def action_abort(self) -> None:
        self.session.aborted = True
        self.notify("wizard aborted: the summary shows what ran", severity="warning")
        self.goto("summary")

    def action_help(self) -> None:
        from screens.help import HelpScreen
        from screens.wizard_session import PAGES

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(PAGES))

    def running_step(self) -> str | None:
        """The step kind being planned or applied (None when the engine is idle)."""
        if not self.busy or not hasattr(self, "session"):
            return None
        for run in self.session.runs:
            if run.status in ("running", "planning"):
                return str(run.spec.kind)
        return "a step"

    def action_request_quit(self) -> None:
        """ctrl+q: leave at once when nothing would be lost; otherwise ask (finish / stop safely / save)."""
        from screens.dialogs import QuitDialog

        if isinstance(self.screen, QuitDialog):
            return
        running = self.running_step()
        lost = self.session.unsaved_work() if hasattr(self, "session") else []
        if running is None and not lost:
            self.leave()
            return

        def chosen(choice: str | None) -> None:
            if choice == "finish":
                self.quit_after_step = True
                self.notify("quitting when the step finishes", markup=False)
                if not self.busy:
                    self.leave(save=True)
            elif choice == "stop":
                self.stop_safely(then_quit=True)
            elif choice == "save":
                if self.action_save():
                    self.leave()
            elif choice == "quit":  # Discard
                self.leave()

        self.push_screen(QuitDialog(running=running, unsaved=bool(lost), lost=lost,
                                    record_to=str(getattr(getattr(self, "session", None), "record_to", ""))),
                         chosen)

    def exit_code(self) -> int:
        """130 (as after ctrl+c) when a step was interrupted and not completed since; else the app's code."""
        if hasattr(self, "session") and any(r.status == "interrupted" for r in self.session.runs):
            return int(128 + signal.SIGINT)
        return int(self.return_code or 0)

    def leave(self, *, save: bool = False) -> None:
        """Exit the wizard. `save`: write the recording first (after a stop or a finished step; a failed
        write is said and the wizard still exits). When the recording on disk has steps left to do (the
        interrupted one, those after it), `resume_command` names the command that continues there."""
        session = getattr(self, "session", None)
        if session is not None:
            if save and session.recorder.steps:
                try:
                    session.save(session.record_to)
                except OSError as exc:
                    self.notify(f"cannot save the recording: {exc.strerror or exc}", severity="error", markup=False)
            if session.saved_to is not None and session.saved_pending:
                self.resume_command = f"provisioner tui {shlex.quote(str(session.saved_to))}" + \
                                      (" --lab" if self.lab else "")
        self.exit(return_code=self.exit_code())

    def stop_safely(self, *, then_quit: bool = False) -> None:
        """Interrupt the running step (it is logged `interrupted`; the recording keeps it, marked pending)."""
        self.quit_after_step = then_quit
        self.workers.cancel_group(self, "engine")
        if not self.busy and then_quit:
            self.leave(save=True)

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    def action_diagnose(self) -> None:
        from screens.diagnose import DiagnoseScreen

        if not isinstance(self.screen, DiagnoseScreen):
            self.push_screen(DiagnoseScreen())

    def action_run_log(self) -> None:
        from screens.runlog_view import RunLogScreen

        if not isinstance(self.screen, RunLogScreen):
            self.push_screen(RunLogScreen(self.session.log_path))

    def action_save(self) -> bool:
        page = self.pages.get(self.current_page_name() or "")
        if page is not None:
            page.flush_forms()
        summary: Any = self.pages.get("summary")
        ready = bool(summary is not None and summary.is_mounted and summary.body_ready)
        path = summary.save_path() if ready else self.session.record_to
        try:
            out = self.session.save(path)
        except Exception as exc:
            self.notify(f"cannot save: {exc}", severity="error", markup=False)
            return False
        self.notify(f"playbook saved to {out}", markup=False)
        if ready:
            summary.refresh_view()
        return True

    def action_run_step(self) -> None:
        screen = self.screen
        if hasattr(screen, "action_run"):
            screen.action_run()

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        from screens.wizard_session import PAGES

        yield from super().get_system_commands(screen)
        yield SystemCommand("Run step", "Plan the next step of this page, or apply a shown plan", self.action_run_step)
        yield SystemCommand("Next page", "Go to the next wizard page", self.action_next_page)
        yield SystemCommand("Previous page", "Go back one page (entered values are kept)", self.action_prev_page)
        for page in PAGES:
            yield SystemCommand(f"Go to {page.title}", f"Open the {page.title} page",
                                lambda name=page.name: self.goto(name))
        yield SystemCommand("Diagnose a log", "Paste a log and get findings (diagnose mode)", self.action_diagnose)
        yield SystemCommand("Save playbook", "Write the recorded playbook (what ran)", self.action_save)
        yield SystemCommand("Open run log", "Show this run's JSON Lines event log", self.action_run_log)
        yield SystemCommand("Toggle light/dark", "Switch the theme", self.action_toggle_theme)
        yield SystemCommand("Abort wizard", "Stop and go to the summary", self.action_abort)
        yield SystemCommand("Help", "Keys and pages (? or F1)", self.action_help)
        yield SystemCommand("Stop the running step safely", "Interrupt it; a resume continues from there",
                            self.stop_safely)
