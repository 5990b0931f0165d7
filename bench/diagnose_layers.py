"""How far the layer guess (provisioner/diagnose/layers.py) gets alone: each labelled real log read by `guess_layer`
only, as if no rule knew any of its messages.

    uv run --no-sync python bench/diagnose_layers.py [--set-key-skip aside]

The layer guess decides only logs no rule explains; this measures its words on every log the project labels (the
shared corpus, the fixtures, the bench sets' read halves — never an `aside` half), per category: how often it
guesses, and how often the guess is the label. A category whose words mislead shows here before it shows on logs
from sources never seen.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provisioner.diagnose.evidence import log_evidence  # noqa: E402
from provisioner.diagnose.layers import guess_layer  # noqa: E402
from provisioner.diagnose.normalize import clean_log  # noqa: E402

SHARED = Path(os.environ.get("PROVISIONER_SHARED_CORPUS", "/work/shared/corpus"))
POOLS = (
    SHARED / "failures-public.jsonl",
    SHARED / "failures-regression.jsonl",
    ROOT / "tests/fixtures/logs/failures-public.jsonl",
    ROOT / "tests/fixtures/logs/heldout.jsonl",
    ROOT / "tests/fixtures/diagnose/real-logs.jsonl",
    *sorted(ROOT.glob("bench/heldout-*.jsonl")),
)


def rows(skip: str) -> list[dict[str, str]]:
    seen: set[str] = set()
    out: list[dict[str, str]] = []
    for pool in POOLS:
        if not pool.exists():
            continue
        for line in pool.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            if (skip and skip in str(r.get("set", ""))) or not r.get("category") or r["log"] in seen:
                continue
            seen.add(r["log"])
            out.append(r)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set-key-skip", default="aside", help="skip rows whose `set` contains this (default: aside)")
    args = ap.parse_args()
    guessed: Counter[str] = Counter()
    right: Counter[str] = Counter()
    total: Counter[str] = Counter()
    confusion: Counter[tuple[str, str]] = Counter()
    for r in rows(args.set_key_skip):
        cat = r["category"]
        total[cat] += 1
        g = guess_layer(clean_log(r["log"]).lines, log_evidence(r["log"]))
        if g is None:
            continue
        guessed[cat] += 1
        if g.category == cat:
            right[cat] += 1
        else:
            confusion[(cat, g.category)] += 1
    n, ng, nr = sum(total.values()), sum(guessed.values()), sum(right.values())
    print(f"{'category':26} logs guessed right")
    for cat in sorted(total):
        print(f"{cat:26} {total[cat]:4} {guessed[cat]:7} {right[cat]:5}")
    print(f"all: {n} logs, a guess on {ng} ({ng / n:.0%}), right {nr} ({nr / max(ng, 1):.0%} of guesses, "
          f"{nr / n:.0%} of logs)")
    print("most common wrong guesses:", ", ".join(f"{a}->{b} {k}" for (a, b), k in confusion.most_common(8)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
