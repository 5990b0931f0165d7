"""Real command outputs recorded as fixtures (tests/fixtures/outputs, each with its source in the README there)."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "outputs"


def fx(name: str) -> str:
    """The recorded output `name`, as text."""
    return (FIXTURES / name).read_text(encoding="utf-8")
