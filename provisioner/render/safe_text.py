"""Text from outside (remote output, step names from a playbook, PVE messages) is data for the terminal.

Rich passes ESC through, so an OSC or CSI sequence in a step name or in a command's output would
retitle the window, move the cursor, rewrite earlier lines or (OSC 52) write the clipboard. Every
such sequence is dropped; any other control character (C0 except tab/newline, DEL, C1) and the
bidirectional overrides that reorder what is displayed become "�". Same rules as the TUI
(`screens/plain_text.py`), kept here because the engine never imports the UI.
"""

from __future__ import annotations

import re

# CSI (ESC [ … final), OSC/DCS/SOS/PM/APC strings (ESC ] P X ^ _ … BEL or ST), two-character ESC sequences.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -/]*[0-~]?")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def plain(text: str, *, multiline: bool = False) -> str:
    """`text` safe to print: escapes removed, control characters replaced (newlines kept if `multiline`)."""
    out = _CONTROL.sub("\ufffd", _ESCAPES.sub("", text).expandtabs())
    return out if multiline else out.replace("\n", "\ufffd")
