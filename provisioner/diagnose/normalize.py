"""Turn pasted log text into something rules can match reliably.

What users paste: ANSI colour codes (raw ESC sequences or the caret form `^[[31m`), CRLF line
ends and `\\r` progress bars, timestamps and syslog/dmesg prefixes, what a wrapper puts before
each line of the program it runs (docker compose's container name, a Kubernetes node's CRI log
fields, torchrun's and mpirun's rank tags, Ray's and vLLM's worker tags, Python logging's
"name - LEVEL -"), Markdown quote markers, and messages hard-wrapped by a terminal at a fixed
width. `clean_log` removes the noise and builds two views of the text for matching: line by
line, and (only when the log looks hard-wrapped) with wrapped lines joined back. Both keep a
map back to the visible lines so that findings can cite them.
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
    r"|(?:stdout|stderr)\s+[FP](?=\s)"  # a Kubernetes node's container log (CRI): "<time> stderr F <line>"
    r"|[\w.-]+\s+\|(?=\s|$)"  # docker compose: "trainer-1  |", or the container_name: "ollama  |"
    r"|\[[A-Za-z_]*\d+(?:,\d+)?\](?:<std(?:out|err)>)?:"  # torchrun's "[rank1]:", "[default0]:"; mpirun's "[1,0]<stderr>:"
    r"|\((?:[\w.]+\s+)?pid=\d+(?:,\s*ip=[0-9A-Fa-f.:]+)?\)"  # Ray/vLLM workers: "(Worker pid=509)", "(pid=9, ip=10.0.0.2)"
    r"|-\s+(?:[\w.]+\s+-\s+)?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+-(?=\s)"  # logging's "%(asctime)s - %(name)s - %(levelname)s -"
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


# --- a program's format string as a matcher over the cleaned log (issue 35 item 1) -------------------------------------
#
# One normaliser for every message the catalogue holds: the format string (printf `%s`/`%d`/`%x`, as harvested by
# scripts/harvest_catalogue.py) becomes an RE2 regex, searched case-insensitively over `clean_log`'s views (ANSI,
# timestamps, typography and hard wraps already undone there), that tolerates what the same message looks like in
# other logs: any whitespace run (line breaks included) between words; spaces or none around `/` and `:`
# ("Driver/library", "driver / library", "error:unknown"); quotes of any kind or none around a value; a sentence's
# trailing `.`/`,`/`!` or none; a kernel's `NVRM:` repeated at each wrapped line; and whatever prefix the program
# or a wrapper puts before it (`nvidia-container-cli:`, `Error:`, a library's exception name): the match is not
# anchored. The first sentence is matched (a paste often stops there); leading and trailing values are dropped.

CONVERSION_RE = re.compile(r"%[-+ #0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|z|j|t|L|q)?([diouxXsScpfgeEv])")
_PROGRAM_PREFIX_RE = re.compile(
    r"^(?:(?:NVRM|ERROR|Error|error|WARN|WARNING|Warning|FIXME|INFO|nvidia-container-cli|nvidia-smi)\s*:\s*)+"
)
_SENTENCE_END_RE = re.compile(r"[.!?](?:\s*\n|\s{2,}|\s(?=[A-Z]))")
_TOKEN_RE = re.compile(r"%%|" + CONVERSION_RE.pattern + r"|\s+|[/:]|[\"'`]|[.,;!?]|[^\s/:\"'`.,;!?%]+|%")
MAX_FORMAT_WORDS = 24  # a longer first sentence is matched on its head (a paste is often cut)
_VALUE = {"d": r"[-+]?\d+", "i": r"[-+]?\d+", "u": r"\d+", "o": r"[0-7]+", "x": r"(?:0x)?[0-9a-f]+",
          "X": r"(?:0x)?[0-9a-f]+", "p": r"(?:0x)?[0-9a-f]+", "f": r"[-+0-9.e]+", "g": r"[-+0-9.e]+",
          "e": r"[-+0-9.e]+", "E": r"[-+0-9.e]+", "c": r"\S"}
_ANY_VALUE = r"[^\n]{0,200}?"


def message_head(fmt: str) -> str:
    """The part of a format string a matcher reads: its first sentence, without the program's prefix."""
    text = fold_typography(fmt).strip()
    text = _PROGRAM_PREFIX_RE.sub("", text)
    text = re.sub(r"\n[ \t]*NVRM:[ \t]*", "\n", text)  # the kernel repeats its prefix on each line
    end = _SENTENCE_END_RE.search(text)
    if end is not None and end.start() >= 12:
        text = text[: end.start()]
    words = list(re.finditer(r"\S+", text))
    if len(words) > MAX_FORMAT_WORDS:  # cut after the last word kept (its line breaks stay line breaks)
        text = text[: words[MAX_FORMAT_WORDS - 1].end()]
    return text.strip()


def format_regex(fmt: str) -> str:
    """An RE2 regex (case-insensitive with `rx.compile_rx`) for a program's printf-style format string."""
    tokens = [m.group(0) for m in _TOKEN_RE.finditer(message_head(fmt))]

    # values and punctuation at either end say nothing: the words between them are the message
    def is_word(tok: str) -> bool:
        return not (tok.isspace() or CONVERSION_RE.fullmatch(tok) or tok in "/:\"'`.,;!?%")
    while tokens and not is_word(tokens[0]):
        tokens.pop(0)
    tail: list[str] = []
    while tokens and not is_word(tokens[-1]):
        tail.insert(0, tokens.pop())
    # ...but a label's colon before its value is part of the message: "device error: %s" is not every "device
    # error" (NCCL's "failed or device error."), "mount error: %s" not every "mount error"
    label = next((t for t in tail if not t.isspace()), None) == ":"
    # a head of three words or fewer ("device error:", "mount error:") is matched on one line: across a line break
    # it is two lines' words ("…available for execution on the device" / "ERROR: Detected …"), not a wrap
    short = sum(1 for t in tokens if is_word(t)) <= 3
    out: list[str] = []
    loose = False  # the previous token was `/` or `:`: the whitespace after it is optional
    for n, tok in enumerate(tokens):
        conv = CONVERSION_RE.fullmatch(tok)
        if tok.isspace():
            if not loose:
                out.append(r"\s+(?:NVRM\s*:\s*)?" if "\n" in tok else (r"[ \t]+" if short else r"\s+"))
            continue
        if tok in ("/", ":"):
            if out and out[-1].startswith(r"\s+"):
                out.pop()
            out.append((r"[ \t]*" + re.escape(tok) + r"[ \t]*") if short else (r"\s*" + re.escape(tok) + r"\s*"))
            loose = True
            continue
        loose = False
        if conv is not None:
            out.append(_VALUE.get(conv.group(1), _ANY_VALUE))
        elif tok == "%%":
            out.append("%")
        elif tok in "\"'`":
            out.append(r"[\"'`]?")
        elif tok in ".,;!?" and n + 1 < len(tokens) and not tokens[n + 1].isspace():
            out.append(re.escape(tok))  # inside a word or a value: `lxc.cgroup`, `%d.%d`
        elif tok in ".,;!?":
            out.append(r"[.,;!?]?")
        else:
            out.append(re.escape(tok))
    if label and out:
        out.append(r"\s*:")
    elif tokens and re.fullmatch(r"\w+", tokens[-1]) and tokens[-1][-1].isascii() \
            and not (tail and CONVERSION_RE.fullmatch(tail[0])):
        # the message's last word is a whole word ("Unsupported SM" is not "Unsupported SMEM size"), unless a value
        # is printed onto it ("compute_%d", "platform%s"); RE2's \b knows ASCII word characters only, so a message
        # ending in Chinese ("… 无法识别") has no boundary to ask for
        out.append(r"\b")
    return "".join(out)
