"""Module durations for the suite's scheduling, from a suite report (`$PROVISIONER_SUITE_REPORT`, written by
tests/support/suite_report.py): `python scripts/suite_durations.py REPORT [REPORT...] > tests/support/durations.json`.
With several reports, a module takes its seconds from the last report that ran it (a whole run, then a run of the
modules changed since).

Each test module's seconds (setup + call + teardown of its tests, rounded) as one run measured them; the lab
tier runs its modules longest first (tests/support/tiers.py), so that the run does not end waiting on one
long module that was handed out last."""

from __future__ import annotations

import json
import sys
from collections import Counter


def module_seconds(report: dict[str, object]) -> dict[str, int]:
    tests = report["tests"]
    assert isinstance(tests, dict)
    total: Counter[str] = Counter()
    for nodeid, t in tests.items():
        total[nodeid.split("::", 1)[0]] += t["setup"] + t["call"] + t["teardown"]
    return {module: max(1, round(s)) for module, s in sorted(total.items())}


def main() -> None:
    seconds: dict[str, int] = {}
    for path in sys.argv[1:]:
        with open(path, encoding="utf-8") as f:
            seconds.update(module_seconds(json.load(f)))
    json.dump(dict(sorted(seconds.items())), sys.stdout, indent=0, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
