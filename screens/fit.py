"""Long values on a narrow screen: a URL too wide for its line is shortened in the middle (the host and the
file name stay readable), and the full text goes to the widget's tooltip, so nothing folds mid-URL."""

from __future__ import annotations

import re

ELLIPSIS = "…"
_URL = re.compile(r"\b(?:https?|file|ftp)://\S+?(?=[;,.:)\]]*(?:\s|$))")  # without trailing punctuation


def middle_ellipsis(value: str, width: int) -> str:
    """`value` cut in the middle to `width` columns (with one "…"), or unchanged where it fits."""
    if len(value) <= width:
        return value
    if width <= 1:
        return ELLIPSIS[:width]
    keep = width - 1
    head = (keep + 1) // 2
    tail = keep - head
    return value[:head] + ELLIPSIS + (value[-tail:] if tail else "")


def fit_urls(line: str, width: int) -> str:
    """`line` with every URL wider than `width` columns shortened in the middle (the rest untouched)."""
    return _URL.sub(lambda m: middle_ellipsis(m.group(0), width), line)


def has_long_url(lines: list[str], width: int) -> bool:
    """Whether `fit_urls` would shorten something in `lines` (then the full text belongs in a tooltip)."""
    return any(fit_urls(line, width) != line for line in lines)


def word_ellipsis(value: str, width: int) -> str:
    """`value` cut at the last whole word that fits `width` columns, with "…" (unchanged where it fits);
    a first word wider than `width` is shortened in the middle."""
    if len(value) <= width:
        return value
    head = value[:max(0, width - 1)]
    cut = head.rsplit(" ", 1)[0].rstrip(" ,;:") if " " in head else ""
    return (cut + " " + ELLIPSIS) if cut else middle_ellipsis(value, width)
