"""The first frame while the playbook and the engine load: the start page's breadcrumb and bars.

It imports nothing of the engine (that is what is loading), so it knows the pages by the titles in
`screens.pages.PAGE_TITLES` (a test checks they match `wizard_session.PAGES`).
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Static

from screens.pages import PAGE_TITLES


def loading_crumbs(start: str) -> Text:
    names = list(PAGE_TITLES)
    at = names.index(start) if start in names else 0
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"{at + 1}/{len(names)} ", style="dim")
    text.append(PAGE_TITLES[names[at]], style="bold reverse")
    return text


class LoadingScreen(Screen[None]):
    def __init__(self, start: str) -> None:
        super().__init__(id="loading")
        self.start = start

    def compose(self) -> ComposeResult:
        yield Static(loading_crumbs(self.start), id="crumbs")
        yield Static("loading the playbook…", id="body", markup=False)
        yield Footer()
