"""Modal dialogs: host-key confirmation on first contact."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class HostKeyDialog(ModalScreen[bool]):
    """Trust-on-first-use only after the user compares the fingerprint."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = """
    HostKeyDialog { align: center middle; }
    HostKeyDialog > Vertical { width: 76; max-width: 100%; height: auto; border: thick $warning;
                               background: $surface; padding: 0 1; }
    HostKeyDialog #hk-text { height: auto; }
    HostKeyDialog Horizontal { height: auto; align-horizontal: right; }
    HostKeyDialog Button { margin-left: 1; }
    """

    def __init__(self, host: str, fingerprint: str, known_hosts: str) -> None:
        super().__init__()
        self.host = host
        self.fingerprint = fingerprint
        self.known_hosts = known_hosts

    def compose(self) -> ComposeResult:
        text = Text()
        text.append("Unknown SSH host\n", style="bold")
        text.append(f"{self.host} is not in {self.known_hosts}.\n\nIts host key fingerprint is:\n  ")
        text.append(self.fingerprint, style="bold")
        text.append("\n\nCompare it with `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` run on the node. "
                    "Trusting adds the key to known_hosts.")
        with Vertical():
            yield Static(text, id="hk-text")
            with Horizontal():
                yield Button("Cancel", id="hk-cancel")
                yield Button("Trust this host", id="hk-trust", variant="warning")

    @on(Button.Pressed, "#hk-trust")
    def _trust(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#hk-cancel")
    def action_cancel(self) -> None:
        self.dismiss(False)


QuitChoice = str  # "finish" | "stop" | "save" | "quit"; None: stay


class QuitDialog(ModalScreen[str | None]):
    """ctrl+q while a step runs or with work not yet applied: never lose work silently.

    While a step runs: finish it, then quit; or stop it safely now (the step is logged `interrupted`,
    the recording of what completed is saved, a resume continues there). With unsaved work: save the
    recording and quit, or quit anyway. Escape stays."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "stay", "Stay")]
    DEFAULT_CSS = """
    QuitDialog { align: center middle; }
    QuitDialog > Vertical { width: 76; max-width: 100%; height: auto; border: thick $warning;
                            background: $surface; padding: 0 1; }
    QuitDialog #quit-text { height: auto; }
    QuitDialog Horizontal { height: auto; align-horizontal: right; }
    QuitDialog Button { margin-left: 1; }
    """

    def __init__(self, *, running: str | None, unsaved: bool, record_to: str) -> None:
        super().__init__()
        self.running = running
        self.unsaved = unsaved
        self.record_to = record_to

    def compose(self) -> ComposeResult:
        text = Text()
        if self.running:
            text.append("A step is running\n", style="bold")
            text.append(f"{self.running} is changing the host. Finish it first, or stop it safely: it is logged "
                        "as interrupted and `provisioner tui PLAYBOOK` or `provisioner replay` continues from there.\n")
        else:
            text.append("Work not applied yet\n", style="bold")
            text.append("Edited or planned steps have not been applied; they are lost on quit.\n")
        text.append(f"\nThe recording of what completed is kept in {self.record_to}.")
        with Vertical():
            yield Static(text, id="quit-text")
            with Horizontal():
                yield Button("Stay", id="quit-stay")
                if self.running:
                    yield Button("Stop safely", id="quit-stop", variant="warning")
                    yield Button("Finish step, then quit", id="quit-finish", variant="primary")
                else:
                    yield Button("Quit", id="quit-quit", variant="warning")
                    yield Button("Save and quit", id="quit-save", variant="primary")

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        choice = (event.button.id or "").removeprefix("quit-")
        self.dismiss(None if choice == "stay" else choice)

    def action_stay(self) -> None:
        self.dismiss(None)
