"""The shared reference next to the repository (`../shared`: corpora, checks, researched facts),
found relative to this checkout (or at $PROVISIONER_SHARED_DIR), so tests never name a machine path."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("PROVISIONER_SHARED_DIR") or REPO.parent / "shared")


def shared_path(relative: str) -> Path:
    """`../shared/<relative>` of this checkout (it may not exist: callers skip with `require`)."""
    return SHARED / relative


def corpus(name: str) -> list[dict[str, Any]]:
    """A corpus of real cases from `../shared/corpus/` (JSON array or JSON Lines); [] when absent."""
    path = shared_path(f"corpus/{name}")
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    data = json.loads(text)
    return list(data) if isinstance(data, list) else [data]
