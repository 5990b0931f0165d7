"""Modal dialogs: host-key confirmation on first contact, trusting what a failed step could not verify, and what
to do with running or unsaved work on quit."""

from __future__ import annotations

from typing import ClassVar, TypeVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from provisioner.events import ParamOffer
from screens.fit import middle_ellipsis
from screens.plain_text import plain_line

ResultT = TypeVar("ResultT")


class WarningDialog(ModalScreen[ResultT]):
    """A centred dialog in a warning frame: its text (`body`, a Static with id `text_id`) above its buttons
    (`buttons`), which stand right-aligned below."""

    DEFAULT_CSS = """
    WarningDialog { align: center middle; }
    WarningDialog > Vertical { width: 76; max-width: 100%; height: auto; border: thick $warning;
                               background: $surface; padding: 0 1; }
    WarningDialog .dialog-text { height: auto; }
    WarningDialog Horizontal { height: auto; align-horizontal: right; }
    WarningDialog Button { margin-left: 1; }
    """
    text_id: ClassVar[str]

    def body(self) -> Text:  # pragma: no cover - overridden
        raise NotImplementedError

    def buttons(self) -> list[Button]:  # pragma: no cover - overridden
        raise NotImplementedError

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.body(), id=self.text_id, classes="dialog-text")
            with Horizontal():
                yield from self.buttons()


class ConfirmDialog(WarningDialog[bool]):
    """A yes/no warning: the button `accept_id` dismisses with True; `cancel_id` and escape with False."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]
    accept_id: ClassVar[str]
    cancel_id: ClassVar[str]

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        if event.button.id in (self.accept_id, self.cancel_id):
            self.dismiss(event.button.id == self.accept_id)

    def action_cancel(self) -> None:
        self.dismiss(False)


class HostKeyDialog(ConfirmDialog):
    """Trust-on-first-use only after the user compares the fingerprint."""

    text_id = "hk-text"
    accept_id, cancel_id = "hk-trust", "hk-cancel"

    def __init__(self, host: str, fingerprint: str, known_hosts: str) -> None:
        super().__init__()
        self.host = host
        self.fingerprint = fingerprint
        self.known_hosts = known_hosts

    def body(self) -> Text:
        text = Text()
        text.append("Unknown SSH host\n", style="bold")
        text.append(f"{self.host} is not in {self.known_hosts}.\n\nIts host key fingerprint is:\n  ")
        text.append(self.fingerprint, style="bold")
        text.append("\n\nCompare it with `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` run on the node. "
                    "Trusting adds the key to known_hosts.")
        return text

    def buttons(self) -> list[Button]:
        return [Button("Cancel", id="hk-cancel"), Button("Trust this host", id="hk-trust", variant="warning")]


class OfferDialog(ConfirmDialog):
    """A failed step's offered edit (`ParamOffer`): what the user is asked to check, then Cancel or the edit.
    Cancel is focused first: trusting takes a deliberate choice."""

    text_id = "offer-text"
    accept_id, cancel_id = "offer-accept", "offer-cancel"

    def __init__(self, step: str, offer: ParamOffer) -> None:
        super().__init__()
        self.step = step
        self.offer = offer

    def body(self) -> Text:
        text = Text()
        text.append(f"{self.step} failed: {self.offer.action.rstrip('…').lower()} what it could not verify, "
                    f"then plan it again?\n\n", style="bold")
        for line in self.offer.confirm:
            text.append(plain_line(line) + "\n")
        return text

    def buttons(self) -> list[Button]:
        return [Button("Cancel", id="offer-cancel"),
                Button(f"{self.offer.action.rstrip('…')} and plan again", id="offer-accept", variant="warning")]

    def on_mount(self) -> None:
        self.query_one("#offer-cancel", Button).focus()


QuitChoice = str  # "finish" | "stop" | "save" | "quit"; None: stay


class QuitDialog(WarningDialog[str | None]):
    """ctrl+q while a step runs or with work not yet applied: never lose work silently.

    While a step runs: finish it, then quit; or stop it safely now (the step is logged `interrupted`,
    the recording keeps it and the steps after it, marked pending; a resume plans them again). With work
    not saved (a plan waiting for Apply, edited fields, a confirmation such as trusted sha256s): save the
    recording and quit (it keeps them, marked pending), or discard them. Escape stays."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "stay", "Stay")]
    text_id = "quit-text"

    def __init__(self, *, running: str | None, unsaved: bool, record_to: str, lost: list[str] | None = None) -> None:
        super().__init__()
        self.running = running
        self.unsaved = unsaved
        self.record_to = record_to
        self.lost = lost or []

    def body(self) -> Text:
        text = Text()
        if self.running:
            text.append("A step is running\n", style="bold")
            text.append(f"{self.running} is changing the host. Finish it first, or stop it safely: it is logged "
                        "as interrupted and `provisioner tui PLAYBOOK` or `provisioner replay` continues from there.\n")
        else:
            text.append("Work not saved yet\n", style="bold")
            for line in self.lost:
                text.append(f"  • {plain_line(line)}\n")
            text.append("Save and quit keeps it in the recording (steps not applied are marked pending; opening "
                        "the recording plans them again). Discard drops it.\n")
        text.append("\nRecording: ")
        text.append(middle_ellipsis(self.record_to, 60))
        return text

    def buttons(self) -> list[Button]:
        stay = Button("Stay", id="quit-stay")
        if self.running:
            return [stay, Button("Stop safely", id="quit-stop", variant="warning"),
                    Button("Finish step, then quit", id="quit-finish", variant="primary")]
        return [stay, Button("Discard", id="quit-quit", variant="warning"),
                Button("Save and quit", id="quit-save", variant="primary")]

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        choice = (event.button.id or "").removeprefix("quit-")
        self.dismiss(None if choice == "stay" else choice)

    def action_stay(self) -> None:
        self.dismiss(None)
