"""How well `diagnose` keeps its answer when a real log is pasted through another tool (issue 35).

    uv run --no-sync python bench/diagnose_repaste.py [CORPUS.jsonl ...]

Each real failure log that scores top-1 as pasted is pasted again the way real tools print or wrap it — a
wrapper's per-line prefix (docker compose, a Kubernetes node's CRI log file, torchrun, mpirun, Ray/vLLM workers,
journald, Python logging), a terminal's hard wrap, a word wrap, CRLF, a Markdown quote or code indent, colour
codes, lower case — and scored again. Prints, per re-paste, how many kept the category, and the ids lost.
Default corpora: the shared public and regression sets and `bench/heldout-2026-12-06.jsonl`.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provisioner.diagnose import diagnose  # noqa: E402

SHARED = Path(os.environ.get("PROVISIONER_SHARED_CORPUS", "/work/shared/corpus"))
DEFAULT = (SHARED / "failures-public.jsonl", SHARED / "failures-regression.jsonl",
           ROOT / "bench/heldout-2026-12-06.jsonl")


def _each(prefix: Callable[[int], str]) -> Callable[[str], str]:
    return lambda text: "\n".join(prefix(i) + line for i, line in enumerate(text.splitlines()))


def _word_wrap(text: str, width: int = 80) -> str:
    out: list[str] = []
    for line in text.splitlines():
        out.extend(textwrap.wrap(line, width, break_on_hyphens=False, drop_whitespace=False) or [""])
    return "\n".join(out)


def _hard_wrap(text: str, width: int = 100) -> str:
    return "\n".join(line[i:i + width] for line in text.splitlines() for i in range(0, max(len(line), 1), width))


REPASTES: dict[str, Callable[[str], str]] = {
    "cri": _each(lambda i: f"2024-05-01T12:00:{i % 60:02d}.123456789Z stderr F "),
    "compose": _each(lambda i: "ollama        | "),
    "journald": _each(lambda i: f"May 01 12:00:{i % 60:02d} pve ollama[1234]: "),
    "logging": _each(lambda i: "2024-05-01 12:00:00,123 - worker - ERROR - "),
    "torchrun": _each(lambda i: "[rank3]: "),
    "mpirun": _each(lambda i: "[1,0]<stderr>:"),
    "ray": _each(lambda i: "(RayWorkerWrapper pid=12345, ip=10.0.0.2) "),
    "word-wrap-80": _word_wrap,
    "hard-wrap-100": _hard_wrap,
    "crlf": lambda text: text.replace("\n", "\r\n"),
    "quote": _each(lambda i: "> "),
    "indent": _each(lambda i: "    "),
    "ansi": lambda text: "\n".join(f"\x1b[31m{line}\x1b[0m" for line in text.splitlines()),
    "lower": str.lower,
}


def _top(text: str) -> str | None:
    findings = diagnose(text)
    return findings[0].category if findings else None


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or [p for p in DEFAULT if p.is_file()]
    rows = [json.loads(line) for p in paths for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [r for r in rows if r.get("category")]
    kept = [r for r in rows if _top(r["log"]) == r["category"]]
    print(f"as pasted: {len(kept)}/{len(rows)} top-1; each re-paste of those {len(kept)}:")
    for name, repaste in REPASTES.items():
        lost = [(r["id"], r["category"], _top(repaste(r["log"]))) for r in kept]
        lost = [x for x in lost if x[1] != x[2]]
        print(f"  {name:14s} {len(kept) - len(lost)}/{len(kept)}" + "".join(f"\n      lost {i}: {c} -> {g}" for i, c, g in lost))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
