"""Turn pasted log text into something rules can match reliably.

What users paste: ANSI colour codes (raw ESC sequences or the caret form `^[[31m`), CRLF line
ends and `\\r` progress bars, timestamps and syslog/dmesg/compose prefixes, Markdown quote
markers, and messages hard-wrapped by a terminal at a fixed width. `clean_log` removes the
noise and builds two views of the text for matching: line by line, and (only when the log
looks hard-wrapped) with wrapped lines joined back. Both keep a map back to the visible lines
so that findings can cite them.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from dataclasses import dataclass

MAX_LOG_CHARS = 20_000_000
MAX_LINE_CHARS = 4096  # a longer line keeps its head: no message a rule reads is longer
EVIDENCE_MAX_CHARS = 400

_ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI (colours, cursor moves)
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC (titles, hyperlinks)
    r"|\x1b[@-Z\\-_]"  # other two-byte escapes
    r"|\^\[\[[0-9;]*[A-Za-z]"  # caret form as copied from `less` or `cat -v`
    r"|(?<![\]\[])\[\d{1,3}(?:;\d{1,3})*m"  # ESC already lost: "[1;31m"
)
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_MONTHS = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
_PREFIX_RE = re.compile(
    r"^\s*(?:"
    r"\[\s*\d+\.\d+\]"  # dmesg: [  12.345678]
    r"|\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?(?:\s+UTC)?\]?"  # ISO
    rf"|(?:{_MONTHS})\s+\d{{1,2}}\s+\d{{2}}:\d{{2}}:\d{{2}}(?:\s+[\w.-]+\s+[\w\-./@]+(?:\[\d+\])?:)?"  # syslog
    r"|\[?\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\]?(?=\s)"  # bare time
    r"|[\w.-]+[-_]\d+\s+\|"  # docker compose: "trainer-1  |"
    r"|>+(?=\s|$)"  # Markdown / e-mail quote markers
    r")\s*"
)


@dataclass(frozen=True)
class LogView:
    """One matchable rendering of the log with a map from character offsets to lines."""

    text: str
    starts: tuple[int, ...]  # offset where each segment starts
    line_index: tuple[int, ...]  # visible line each segment came from

    def lines_for_span(self, start: int, end: int) -> list[int]:
        """Indices of the visible lines a match [start, end) touches, in order."""
        first = bisect.bisect_right(self.starts, start) - 1
        last = bisect.bisect_right(self.starts, max(start, end - 1)) - 1
        seen: list[int] = []
        for seg in range(max(first, 0), max(last, 0) + 1):
            idx = self.line_index[seg]
            if idx not in seen:
                seen.append(idx)
        return seen


@dataclass(frozen=True)
class CleanLog:
    """The visible lines (for evidence) and the views rules are matched against."""

    lines: tuple[str, ...]
    views: tuple[LogView, ...]
    full_text: str  # first view's text, for context/unless checks and field extraction

    def evidence(self, indices: list[int]) -> list[str]:
        out: list[str] = []
        for i in indices:
            line = self.lines[i].strip()
            if len(line) > EVIDENCE_MAX_CHARS:
                line = line[: EVIDENCE_MAX_CHARS - 1] + "…"
            if line:
                out.append(line)
        return out


# Typography that pasting through a web page, a word processor or an input method puts into a tool's ASCII
# message (qixuema/envs#4 pasted "couldn‘t communicate"): curly/prime quotes and non-breaking or thin spaces.
# Folded one character for one, so offsets and line lengths stay those of the visible text.
TYPOGRAPHY: dict[str, str] = {
    **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\uff07", "'"),
    **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\uff02", '"'),
    **dict.fromkeys("\u00a0\u2007\u2009\u200a\u202f\u3000", " "),
}
_TYPOGRAPHY = str.maketrans(TYPOGRAPHY)


def fold_typography(text: str) -> str:
    """`text` with typographic quotes and spaces as the ASCII a tool printed (same length); ASCII text as is."""
    return text if text.isascii() else text.translate(_TYPOGRAPHY)


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences (and their pasted caret/lost-ESC forms)."""
    return _ANSI_RE.sub("", text)


def strip_prefix(line: str) -> str:
    """Remove leading timestamps, dmesg/syslog/compose prefixes and quote markers."""
    for _ in range(4):
        new = _PREFIX_RE.sub("", line, count=1)
        if new == line:
            break
        line = new
    return line


def split_lines(text: str) -> list[str]:
    """Split on \\r\\n, \\n and bare \\r (progress bars overwrite: each state is its own line)."""
    text = text.replace("\r\n", "\n")
    out: list[str] = []
    for raw in text.split("\n"):
        if "\r" in raw:
            parts = [p for p in raw.split("\r") if p.strip()]
            out.extend(parts or [""])
        else:
            out.append(raw)
    return out


_BORDER_END = ("|", "+", "-", "=", "#", "*", "│", "┃", "╯", "╮", "┘", "┐")


def _is_wrapped(line: str, width: int) -> bool:
    """A line cut by the terminal: exactly the wrap width and not ending like a table border."""
    return len(line) == width and not line.endswith(_BORDER_END)


def _wrap_width(lines: list[str]) -> int | None:
    """The terminal width a log was hard-wrapped at, if it looks hard-wrapped."""
    if not lines:
        return None
    width = max(len(line) for line in lines)
    if width < 60:
        return None
    count = Counter(len(line) for line in lines if _is_wrapped(line, width))[width]
    return width if count >= 2 else None


def _build_view(parts: list[tuple[str, int]], joiners: list[str]) -> LogView:
    chunks: list[str] = []
    starts: list[int] = []
    idx: list[int] = []
    pos = 0
    for (seg, line_no), joiner in zip(parts, joiners, strict=True):
        starts.append(pos)
        idx.append(line_no)
        chunks.append(seg)
        chunks.append(joiner)
        pos += len(seg) + len(joiner)
    return LogView("".join(chunks), tuple(starts), tuple(idx))


def clean_log(text: str) -> CleanLog:
    """Clean pasted text and build the views rules match against."""
    if len(text) > MAX_LOG_CHARS:  # keep the end: failures are usually last
        text = text[-MAX_LOG_CHARS:]
    visible: list[str] = []
    for raw in split_lines(text):
        if len(raw) > MAX_LINE_CHARS:
            raw = raw[:MAX_LINE_CHARS]
        line = _CONTROL_RE.sub("", strip_ansi(raw)).replace("\t", "    ").rstrip()
        visible.append(line)
    matchable = [strip_prefix(fold_typography(line)) for line in visible]
    parts = [(m, i) for i, m in enumerate(matchable)]
    views = [_build_view(parts, ["\n"] * len(parts))]
    width = _wrap_width(visible)
    if width is not None:
        joiners = ["" if _is_wrapped(visible[i], width) else "\n" for i in range(len(visible))]
        views.append(_build_view(parts, joiners))
    return CleanLog(tuple(visible), tuple(views), views[0].text)
