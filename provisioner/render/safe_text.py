"""Text from outside (remote output, step names from a playbook, PVE messages) is data for the terminal.

Rich passes ESC through, so an OSC or CSI sequence in a step name or in a command's output would
retitle the window, move the cursor, rewrite earlier lines or (OSC 52) write the clipboard. Every
such sequence is dropped; any other control character (C0 except tab/newline, DEL, C1) and the
bidirectional overrides that reorder what is displayed become "�". Same rules as the TUI
(`screens/plain_text.py`), kept here because the engine never imports the UI.

`guard(console)` and `install_streams()` (below) apply the same rules at the boundary itself, to whatever a
command prints: every `provisioner` command runs with both.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

if TYPE_CHECKING:
    from rich.console import Console

C = TypeVar("C", bound="Console")

# CSI (ESC [ … final), OSC/DCS/SOS/PM/APC strings (ESC ] P X ^ _ … BEL or ST), two-character ESC sequences.
# An unterminated string ends at the line's end (rich drops the BEL that would have ended it).
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[\]PX^_][^\x07\x1b\n]*(?:\x07|\x1b\\)?|\x1b[ -/]*[0-~]?")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def plain(text: str, *, multiline: bool = False) -> str:
    """`text` safe to print: escapes removed, control characters replaced (newlines kept if `multiline`)."""
    out = _CONTROL.sub("\ufffd", _ESCAPES.sub("", text).expandtabs())
    return out if multiline else out.replace("\n", "\ufffd")


# --- the rendering boundary -------------------------------------------------------------------------------
# Two layers, so that no command prints a host's escape sequence whatever it forgets to `plain()`:
# 1. Rich: `guard(console)` pushes `PlainSegments`, a render hook that rewrites the text of every segment that is
#    not rich's own control code: host text never carries SGR, cursor moves or OSC into what rich writes, while
#    rich's styling (made from styles, not from text) stays.
# 2. Everything else (click.echo of an error, json, print): `install_streams()` replaces sys.stdout/sys.stderr with
#    `PlainStream`, which drops every escape sequence and shows every other control character as "�". Rich writes
#    through the stream's `rich_proxied_file` (rich's own hook for proxied files), which keeps SGR and the
#    cursor controls of rich's live display and drops the rest (screen clears, OSC titles, clipboard, DCS).

_SGR = re.compile(r"\x1b\[[0-9;:]*m")
#: what rich itself writes for a live display: carriage return, cursor up/down, erase line, show/hide cursor
_RICH_CONTROL = re.compile(r"\x1b\[[0-9]*[ABK]|\x1b\[\?25[hl]|\r")


_NEEDS_WORK = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _strict(text: str) -> str:
    return plain(text, multiline=True) if _NEEDS_WORK.search(text) else text


def _rich_side(text: str) -> str:
    """What may pass from rich to the terminal: its SGR and live-display controls; other escapes dropped,
    other control characters shown as "�"."""
    if not _NEEDS_WORK.search(text):
        return text
    keep: list[str] = []

    def hold(m: re.Match[str]) -> str:
        keep.append(m.group(0))
        return f"\x00{len(keep) - 1}\x00"

    held = re.sub(rf"{_SGR.pattern}|{_RICH_CONTROL.pattern}", hold, text.replace("\x00", "\ufffd"))
    parts = re.split(r"\x00(\d+)\x00", held)
    return "".join(keep[int(p)] if i % 2 else _strict(p) for i, p in enumerate(parts))


def _make_hook() -> Any:
    from rich.console import RenderHook

    class PlainSegments(RenderHook):
        """A rich render hook: each renderable's text segments (not rich's control segments) made plain."""

        def process_renderables(self, renderables: list[Any]) -> list[Any]:
            return [_Plain(r) for r in renderables]

    return PlainSegments()


_SEGMENT_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


class _Plain:
    """A renderable rendered, then its text made plain across segment boundaries (a highlighter or markup may
    have split one escape sequence over several segments); rich's control segments pass untouched."""

    def __init__(self, renderable: Any) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.segment import Segment

        segments = list(console.render(self.renderable, options))
        text = "".join(seg.text for seg in segments if not seg.control)
        if not _NEEDS_WORK.search(text):
            yield from segments
            return
        drops = [m.span() for m in _ESCAPES.finditer(text)]
        at = 0  # offset of the segment in `text`
        k = 0  # first drop range that may overlap it
        for seg in segments:
            if seg.control:
                yield seg
                continue
            start, end = at, at + len(seg.text)
            at = end
            kept: list[str] = []
            pos = start
            while k < len(drops) and drops[k][1] <= start:
                k += 1
            j = k
            while j < len(drops) and drops[j][0] < end:
                a, b = max(drops[j][0], start), min(drops[j][1], end)
                kept.append(seg.text[pos - start:a - start])
                pos = max(pos, b)
                j += 1
            kept.append(seg.text[pos - start:])
            clean = _SEGMENT_CONTROL.sub("\ufffd", "".join(kept))
            if clean:
                yield Segment(clean, seg.style)


def guard(console: C) -> C:
    """`console` with every text segment made plain before it is written (idempotent)."""
    if not getattr(console, "_provisioner_guarded", False):
        console.push_render_hook(_make_hook())
        console._provisioner_guarded = True  # type: ignore[attr-defined]
    return console


class PlainStream(io.TextIOBase):
    """A text stream over `raw` that writes only plain text (see above); rich writes to `rich_proxied_file`."""

    def __init__(self, raw: TextIO, *, rich_side: bool = False) -> None:
        self.raw = raw
        self._rich_side = rich_side
        self._rich: PlainStream | None = None

    @property
    def rich_proxied_file(self) -> PlainStream:
        if self._rich_side:
            return self
        if self._rich is None:
            self._rich = PlainStream(self.raw, rich_side=True)
        return self._rich

    def write(self, text: str) -> int:
        self.raw.write(_rich_side(text) if self._rich_side else _strict(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.raw.flush()

    def isatty(self) -> bool:
        return self.raw.isatty()

    def fileno(self) -> int:
        return self.raw.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.raw, "encoding", "utf-8") or "utf-8")

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.raw, "errors", None)

    @property
    def buffer(self) -> Any:
        """Bytes bypass the text filter only where a caller asks for them: none of ours print host text so."""
        return self.raw.buffer


def install_streams() -> Callable[[], None]:
    """Replace sys.stdout and sys.stderr by `PlainStream`s (once); returns what puts the originals back."""
    before = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, PlainStream) and sys.stdout is not None:
        sys.stdout = PlainStream(sys.stdout)
    if not isinstance(sys.stderr, PlainStream) and sys.stderr is not None:
        sys.stderr = PlainStream(sys.stderr)

    def restore() -> None:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        sys.stdout, sys.stderr = before

    return restore
