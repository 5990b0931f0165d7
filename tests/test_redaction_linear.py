"""The key=value redaction rule (`password=…`, `HF_TOKEN: …`, `db.password = …`) is applied once per run of
`[\\w.-]` characters that holds a keyword (`redaction._mask_key_values`), not by `re.sub` over every position:
`re.sub` tried each position after a "." of a long run and read the run to its end from each, so a hostile
`"a.token" * 2000` (14 kB) took 4.6 s of CPU and an 8 MiB one would not finish (issue #34: hostile input,
bounded). The fast path must mask exactly what `re.sub` masks: a property test compares them on texts made of
keywords, run characters, separators, quotes, non-ASCII look-alikes (`ſ` folds to `s`) and line breaks.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner import redaction
from provisioner.redaction import MASK, redact

ATOMS = ["password", "PASSWORD", "Passwd", "token", "TOKEN", "api-key", "api_key", "apikey", "client_secret",
         "ticket", "credentials", "pwd", "secret", "ſecret", "private-key", "access_key", "_value", "-id", "hash",
         ".", "-", "_", "=", ":", " ", "\t", "\n", "'", '"', "x", "ab", "é", "K", "//", "env:", "file:", MASK, "|",
         ">", "&", ";", ",", "1", "HF_", "db.", "a.b.", "--", "İ", "ß"]


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.sampled_from(ATOMS), min_size=1, max_size=16).map("".join))
def test_the_fast_path_masks_what_re_sub_masks(text: str) -> None:
    assert redaction._mask_key_values(text) == redaction._KEY_VALUE_RE.sub(rf"\1{MASK}", text)


@pytest.mark.parametrize("text", [
    "db.password=hunter2 HF_TOKEN: hf_x export PVE_PASSWORD='a b'",
    "url?api_key=abc&token=def;x",
    "a.b.token.c=val",  # the keyword is not at the end of its run: no match (nor with re.sub)
    "password:\n  - x",
    'secret = "quoted value" and ticket=<redacted>',
    "ſecret=zz",  # non-ASCII text: the (?i) scan, as re does it
])
def test_known_shapes_mask_as_re_sub_does(text: str) -> None:
    assert redaction._mask_key_values(text) == redaction._KEY_VALUE_RE.sub(rf"\1{MASK}", text)


class _Counting:
    """`_KEY_VALUE_RE` with its `match` calls counted (the pattern object itself cannot be patched)."""

    def __init__(self, rx: re.Pattern[str]) -> None:
        self.rx = rx
        self.calls = 0

    def match(self, text: str, pos: int = 0) -> Any:
        self.calls += 1
        return self.rx.match(text, pos)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rx, name)


def test_a_long_run_of_keywords_is_tried_once(monkeypatch: pytest.MonkeyPatch) -> None:
    counting = _Counting(redaction._KEY_VALUE_RE)
    monkeypatch.setattr(redaction, "_KEY_VALUE_RE", counting)
    hostile = "a.token" * 200_000  # 1.4 MB, one run of [\w.-] with 200,000 keywords and 200,000 "." boundaries
    assert redaction._mask_key_values(hostile + "=x") == hostile + "=" + MASK
    assert counting.calls == 1
    counting.calls = 0
    lines = "token=abc\n" * 50_000
    assert redaction._mask_key_values(lines) == f"token={MASK}\n" * 50_000
    assert counting.calls == 50_000  # one per run that holds a keyword


def test_redact_masks_key_values_through_the_fast_path() -> None:
    assert redact("x db.password=hunter2 y") == f"x db.password={MASK} y"
    assert redact("ſecret=zz") == f"ſecret={MASK}"
