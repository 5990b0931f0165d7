"""Remote output is data: strip terminal escape sequences and neutralise control characters.

Textual's `Log` only replaces U+0000–U+0014, so an ESC (U+001B) from a remote tool would reach the
real terminal. Colour sequences (CSI … m) are dropped; any other control character becomes "�".
"""

from __future__ import annotations

import re

# CSI (ESC [ … final), OSC (ESC ] … BEL or ST), and two-character ESC sequences.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def plain_line(line: str) -> str:
    """One line safe to show as plain text in a terminal."""
    return _CONTROL.sub("�", _ANSI.sub("", line).expandtabs())
