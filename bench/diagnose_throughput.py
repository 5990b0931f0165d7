"""Benchmark: `diagnose` throughput on a large realistic log, beside `grep -c` over the same file.

    uv run python bench/diagnose_throughput.py [--mb 50] [--failure ID] [--work DIR]

Builds a log of about `--mb` MB from the real-log fixtures (tests/fixtures/diagnose/): the healthy
outputs (nvidia-smi tables, installer and pip logs, inxi, the R610 banner) repeated, with one real
failure log (`--failure`, a fixture id; default the first installer failure) at the end, the shape of
an `nvidia-bug-report.log` or a long install log that fails last (issue 27 item 4). Then, in one run,
on one core:

- the diagnosis of the small failure log alone (its top finding is the reference);
- `provisioner.diagnose.diagnose` over the whole file as the CLI reads it (bounded head/tail reader),
  with wall time, CPU time and MB/s for both (the machine's load average beside them: on a shared
  machine the wall figure depends on it, the CPU figure much less);
- `grep -c -i error FILE` over the same file, wall time and MB/s.

It prints both and whether the large log's top finding equals the small log's. Goal: >= 20 MB/s.
Exit 1 when the top findings differ.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provisioner.diagnose import diagnose  # noqa: E402
from provisioner.diagnose.source import read_log  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "diagnose"


def _rows(name: str) -> list[dict[str, str]]:
    with (FIXTURES / name).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def build(path: Path, mb: float, failure_id: str | None) -> str:
    """Write the large log; return the failure log placed at its end."""
    healthy = "\n".join(r["log"] for r in _rows("healthy.jsonl")) + "\n"
    failures = [r for r in _rows("real-logs.jsonl") if r.get("category") != "healthy"]
    pick = next((r for r in failures if r["id"] == failure_id), None) if failure_id else None
    if pick is None:
        pick = next(r for r in failures if r["category"] == "installer_failure")
    block = healthy.encode()
    target = int(mb * 1_000_000)
    with path.open("wb") as fh:
        written = 0
        while written < target:
            fh.write(block)
            written += len(block)
        fh.write(pick["log"].encode() + b"\n")
    return pick["log"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=50.0)
    ap.add_argument("--failure", default=None, help="fixture id of the failure log put at the end")
    ap.add_argument("--work", default=None, help="directory for the built log (default: a temp dir)")
    args = ap.parse_args()
    try:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    except (AttributeError, OSError):
        pass
    work = Path(args.work or tempfile.mkdtemp(prefix="diagnose-bench-"))
    path = work / "big.log"
    small = build(path, args.mb, args.failure)
    size = path.stat().st_size

    ref = diagnose(small)
    ref_top = ref[0].category if ref else None

    t0, c0 = time.perf_counter(), time.process_time()
    log = read_log(str(path))
    found = diagnose(log.text)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    top = found[0].category if found else None

    t0 = time.perf_counter()
    grep = subprocess.run(["grep", "-c", "-i", "error", str(path)], capture_output=True, text=True, check=False)
    gwall = time.perf_counter() - t0

    mb = size / 1e6
    print(f"log: {path} {mb:.1f} MB (healthy fixtures repeated + one failure at the end)")
    if log.note:
        print(f"reader: {log.note}")
    print(f"diagnose: {wall:.2f} s = {mb / wall:.1f} MB/s wall, {cpu:.2f} s CPU = {mb / cpu:.1f} MB/s per CPU-second; "
          f"top finding {top} (small log alone: {ref_top}); load average {os.getloadavg()[0]:.1f}")
    print(f"grep -c:  {gwall:.3f} s = {mb / gwall:.0f} MB/s ({grep.stdout.strip()} lines)")
    print(f"same top finding: {'yes' if top == ref_top else 'NO'}; goal >= 20 MB/s: "
          f"{'met' if mb / wall >= 20 else 'NOT met'} (wall), {'met' if mb / cpu >= 20 else 'NOT met'} (CPU)")
    if not args.work:
        path.unlink()
        work.rmdir()
    return 0 if top == ref_top else 1


if __name__ == "__main__":
    raise SystemExit(main())
