"""The help screen (`?` or F1): the keys, the pages and what each does, and where work is kept."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS: tuple[tuple[str, str], ...] = (
    ("ctrl+r", "plan the page's next step; a second press applies the plan shown"),
    ("ctrl+n / ctrl+b", "next / previous page (entered values are kept)"),
    ("tab / shift+tab", "next / previous field"),
    ("ctrl+s", "save the recording (a playbook of what ran; saved after every applied step anyway)"),
    ("ctrl+o", "this run's event log (JSON Lines)"),
    ("f5", "diagnose a log: paste it, get the root cause and the fix"),
    ("f6", "light / dark theme"),
    ("ctrl+p (palette)", "every command by name"),
    ("ctrl+q", "quit: asks first while a step runs or work is not applied"),
    ("? / f1", "this help"),
)


class HelpScreen(ModalScreen[None]):
    """Keys, pages, and the wizard's promises (plan before change, nothing lost on quit)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close"), Binding("q", "close", "Close"),
                                             Binding("f1", "close", "Close", show=False)]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 96; max-width: 100%; height: auto; max-height: 100%;
                                  border: thick $primary; background: $surface; padding: 0 1; }
    """

    def __init__(self, pages: tuple[Any, ...] = ()) -> None:
        super().__init__()
        self.page_defs = pages

    def compose(self) -> ComposeResult:
        keys = Table.grid(padding=(0, 2))
        keys.add_column(style="bold", no_wrap=True)
        keys.add_column()
        for key, what in KEYS:
            keys.add_row(key, what)
        pages = Table.grid(padding=(0, 2))
        pages.add_column(style="bold", no_wrap=True)
        pages.add_column()
        for page in self.page_defs:
            pages.add_row(page.title, ", ".join(page.kinds) or "what ran, drift, save the playbook")
        intro = Text("Every page edits a step's parameters, shows its plan and applies it only after you "
                     "confirm. Nothing on the host changes without a plan you saw.\n", style="")
        with VerticalScroll():
            yield Static(Text("Help", style="bold"))
            yield Static(intro)
            yield Static(Text("Keys", style="bold underline"))
            yield Static(keys)
            yield Static(Text("\nPages and the playbook steps they drive", style="bold underline"))
            yield Static(pages)
            yield Static(Text("\nescape closes this help.", style="dim"))

    def action_close(self) -> None:
        self.dismiss(None)
