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
