"""Linear-time regexes for the diagnosis, and the literals that must occur for a pattern to match.

Every rule, context and field pattern is compiled with RE2 (`google-re2`): an automaton engine whose
search time is linear in the input whatever the pattern, so a hostile log (a 1 MB hex token, repeated
separators) cannot make a pattern backtrack (issue 23 item 2). RE2 has no look-around and no
back-references; `compile_rx` refuses such a pattern when the rules are loaded, so a rule can never
bring a backtracking engine back.

`required_literals` reads a pattern's syntax tree and returns a set of lower-case literals one of
which occurs in every text the pattern matches. The engine scans a large log once for all those
literals (one RE2 pass) and runs the patterns only near the lines that hold one: a cheap literal
prefilter before any pattern runs (issue 27 item 4).
"""

from __future__ import annotations

import logging
import os
import re
from functools import lru_cache
from typing import Any, Protocol, cast

# RE2's C++ core logs parse errors on stderr through absl before Python sees the exception.
os.environ.setdefault("ABSL_MIN_LOG_LEVEL", "3")
import re2  # type: ignore[import-untyped]

try:  # Python 3.11+: the parser moved to re._parser
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - older Pythons
    import sre_parse

logging.getLogger("re2").setLevel(logging.ERROR)

MIN_LITERAL = 3  # a shorter required literal would select nearly every line
# Words every healthy NVIDIA/installer log is full of (counted over tests/fixtures/diagnose/healthy.jsonl):
# as a prefilter they would select most lines, so a pattern's rarer literal is preferred to them.
COMMON = frozenset(
    "nvidia nvidia-smi /nvidia nvidia- version version: driver device devices memory package packages kernel "
    "kernel-open process performing installed installing downloading directory module cuda error failed found "
    "using building install gpu running torch disabled not out the and for with from".split()
)


def _score(lit: str) -> int:
    return len(lit) - (8 if lit in COMMON or lit.strip(" :/-_.,'\"`") in COMMON else 0)


class Match(Protocol):
    def start(self, group: int = 0) -> int: ...
    def end(self, group: int = 0) -> int: ...
    def group(self, group: int = 0) -> str: ...
    def groups(self) -> tuple[str | None, ...]: ...


class Regex(Protocol):
    """The part of RE2's pattern object the diagnosis uses (the same shape as `re.Pattern`)."""

    pattern: str

    def search(self, text: Any, pos: int = 0) -> Any: ...
    def finditer(self, text: Any) -> Any: ...


class UnsafePattern(ValueError):
    """A pattern RE2 cannot run in linear time (look-around, back-reference)."""


_OPTIONS = re2.Options()
_OPTIONS.case_sensitive = False
_OPTIONS.max_mem = 64 << 20


@lru_cache(maxsize=2048)
def compile_rx(regex: str) -> Regex:
    """A case-insensitive, multi-line RE2 regex (`^`/`$` at line ends)."""
    try:
        return cast(Regex, re2.compile("(?m)" + regex, _OPTIONS))
    except re2.error as exc:
        raise UnsafePattern(f"pattern not linear-time (RE2 refuses it): {regex!r}: {exc}") from None


_EXACT = re2.Options()
_EXACT.max_mem = 64 << 20


@lru_cache(maxsize=64)
def compile_rx_bytes(regex: str, exact: bool = False) -> Regex:
    """`compile_rx` for bytes input (no UTF-8 offset conversion per match: the prefilter's pass).
    `exact`: case-sensitive (for lower-case literals searched in lower-cased bytes: several times faster
    than RE2's case folding)."""
    try:
        return cast(Regex, re2.compile(("(?m)" + regex).encode(), _EXACT if exact else _OPTIONS))
    except re2.error as exc:
        raise UnsafePattern(f"pattern not linear-time (RE2 refuses it): {regex!r}: {exc}") from None


def next_span(rx: Regex, data: bytes, pos: int) -> tuple[int, int] | None:
    """The first match of a bytes regex at or after `pos`, as (start, end) offsets; None if none. Calls RE2
    directly (the wrapper's finditer builds a Match object per hit, most of the prefilter's cost)."""
    inner = getattr(rx, "_regexp", None)
    if inner is None:  # pragma: no cover - a wrapper without the private handle
        m = rx.search(data, pos)
        return None if m is None else (m.start(), m.end())
    start, end = inner.Match(re2._Anchor.UNANCHORED, data, pos, len(data))[0]
    return None if start < 0 else (start, end)


def _best(cands: list[frozenset[str]]) -> frozenset[str] | None:
    good = [c for c in cands if c and min(_score(x) for x in c) >= MIN_LITERAL]
    if not good:
        return None
    return max(good, key=lambda c: (min(_score(x) for x in c), -len(c)))


def _is_space_run(op: str, av: Any) -> bool:
    """`\\s+` (what a space in a rule pattern becomes) or `[ \\t]+` (a short message's, on one line): a phrase's
    words are joined by it."""
    if op != "MAX_REPEAT" or av[0] < 1:
        return False
    body = list(av[2])
    if len(body) != 1 or str(body[0][0]) != "IN":
        return False
    items = [(str(k), v) for k, v in body[0][1]]
    return (len(items) == 1 and items[0][0] == "CATEGORY" and str(items[0][1]) == "CATEGORY_SPACE") or sorted(
        items) == [("LITERAL", 9), ("LITERAL", 32)]


def _required(seq: Any) -> frozenset[str] | None:
    """A phrase is literal characters and `\\s+` runs (kept as one space: `literal_regex` turns it back)."""
    cands: list[frozenset[str]] = []
    run: list[str] = []

    def flush() -> None:
        phrase = "".join(run).strip(" ")
        if phrase:
            cands.append(frozenset({phrase}))
        run.clear()

    for op, av in seq:
        name = str(op)
        if name == "LITERAL":
            ch = chr(av).lower()
            run.append(" " if ch.isspace() else ch)
            continue
        if _is_space_run(name, av):
            if run and run[-1] != " ":
                run.append(" ")
            continue
        flush()
        if name == "SUBPATTERN":
            sub = _required(av[-1])
            if sub is not None:
                cands.append(sub)
        elif name == "BRANCH":
            branches = [_required(b) for b in av[1]]
            if all(b is not None for b in branches):
                cands.append(frozenset().union(*(b for b in branches if b is not None)))
        elif name in ("MAX_REPEAT", "MIN_REPEAT") and av[0] >= 1:
            sub = _required(av[2])
            if sub is not None:
                cands.append(sub)
    flush()
    return _best(cands)


def literal_regex(phrase: str) -> str:
    """The regex of a required phrase: its words escaped, joined by any whitespace run."""
    return r"\s+".join(re.escape(w) for w in phrase.split(" "))


@lru_cache(maxsize=2048)
def required_literals(regex: str) -> frozenset[str] | None:
    """Lower-case literals one of which every match contains (each at least MIN_LITERAL long, not a word
    every healthy log is full of); None if the pattern has no such literal (it then runs over the whole
    text once, still in linear time)."""
    try:
        tree = sre_parse.parse(regex)
    except Exception:
        return None
    return _required(list(tree))
