"""Honest measurement (issue 35 item 5): top-1 of `diagnose` on the held-out half of the real failure logs.

    uv run --no-sync python bench/diagnose_heldout.py [--half heldout|work] [--json OUT]

The pool is every real failure log the project holds, deduplicated by log text (first source wins):

- tests/fixtures/logs/failures-public.jsonl, tests/fixtures/logs/heldout.jsonl,
- tests/fixtures/diagnose/real-logs.jsonl,
- /work/shared/corpus/failures-public.jsonl and failures-regression.jsonl (when present).

The split is fixed before any rule work and does not depend on the logs' text: a case is in the
held-out half when the first byte of sha256("issue35:" + id) is even. The rule author reads only the
`work` half; this script prints the held-out half's score and the ids/categories of its misses (never
its logs). Scoring is in-process (`provisioner.diagnose.diagnose`, the call the CLI makes for --log):
the top finding's category against the case's `category`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provisioner.diagnose import diagnose  # noqa: E402

SHARED = Path(os.environ.get("PROVISIONER_SHARED_CORPUS", "/work/shared/corpus"))
POOLS: tuple[Path, ...] = (
    ROOT / "tests/fixtures/logs/failures-public.jsonl",
    ROOT / "tests/fixtures/logs/heldout.jsonl",
    ROOT / "tests/fixtures/diagnose/real-logs.jsonl",
    SHARED / "failures-public.jsonl",
    SHARED / "failures-regression.jsonl",
)


def in_heldout(case_id: str) -> bool:
    return hashlib.sha256(f"issue35:{case_id}".encode()).digest()[0] % 2 == 0


def cases() -> list[dict[str, str]]:
    seen: set[str] = set()
    out: list[dict[str, str]] = []
    for pool in POOLS:
        if not pool.is_file():
            continue
        for line in pool.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            key = hashlib.sha256(row["log"].encode()).hexdigest()
            if key in seen or row.get("category") in (None, "healthy"):
                continue
            seen.add(key)
            out.append({"id": row["id"], "category": row["category"], "log": row["log"], "pool": pool.name})
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--half", choices=("heldout", "work"), default="heldout")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = [c for c in cases() if in_heldout(c["id"]) == (args.half == "heldout")]
    ok = 0
    misses: list[str] = []
    per: Counter[str] = Counter()
    for r in rows:
        found = diagnose(r["log"])
        top = found[0].category if found else None
        if top == r["category"]:
            ok += 1
        else:
            per[r["category"]] += 1
            misses.append(f"{r['id']}:{r['category']}->{top}")
    n = len(rows)
    print("misses:", " ".join(misses) or "none")
    print("misses per expected category:", dict(per))
    print(f"{args.half} half top-1: {ok}/{n} = {ok / max(n, 1):.1%}")
    if args.json:
        args.json.write_text(json.dumps({"half": args.half, "n": n, "ok": ok, "misses": misses}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
