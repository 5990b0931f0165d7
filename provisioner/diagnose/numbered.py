"""Evidence lines as a person reads them: `L<n>: text`, `<n>` the line's 1-based number in the log the user has
(the `line` of `--json`'s `evidence_lines`), or the text alone where it is not a log line (a live fact, a probe's
output). One form for every face: the console (`provisioner.cli.diagnose_console`) and the TUI's diagnose screen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from provisioner.diagnose.model import EvidenceLine
from provisioner.redaction import REDACTOR

#: the most characters of one evidence line shown (prefix included; the JSON keeps the engine's longer cut)
CONSOLE_LINE_CHARS = 200


def cut_line(text: str, limit: int = CONSOLE_LINE_CHARS) -> str:
    """`text` on one line (whitespace runs folded), at most `limit` characters ("…" marks a cut)."""
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: max(limit - 1, 0)] + "…"


def numbered(evidence: Iterable[str], evidence_lines: Iterable[EvidenceLine],
             secrets: Iterable[str] = (), limit: int = CONSOLE_LINE_CHARS) -> list[str]:
    """Each of `evidence` as `L<n>: text` (its number from `evidence_lines`), or as the text alone where it has
    no number; same order as `evidence`, redacted, each at most `limit` characters long (prefix included)."""
    line_of: dict[str, int] = {}
    for e in evidence_lines:
        if e.line is not None:
            line_of.setdefault(e.text, e.line)
    scrub = REDACTOR.with_values(secrets)
    out: list[str] = []
    for text in evidence:
        n = line_of.get(text)
        prefix = f"L{n}: " if n is not None else ""
        out.append(prefix + cut_line(scrub.text(text), limit - len(prefix)))
    return out


def evidence_lines_of(entries: object) -> list[EvidenceLine]:
    """A finding's JSON `evidence_lines` (a list of `{"line": int | null, "text": str}`) back as `EvidenceLine`s;
    an entry of any other shape is left out (its line is then shown without a number), a non-positive or
    non-integer `line` counts as none."""
    out: list[EvidenceLine] = []
    if not isinstance(entries, list):
        return out
    for entry in entries:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("text"), str):
            continue
        line = entry.get("line")
        ok = isinstance(line, int) and not isinstance(line, bool) and line > 0
        out.append(EvidenceLine(line if ok else None, entry["text"]))
    return out
