"""Test-only fault injection, read from env `BURNIN_FAULT`.

Grammar: `KIND:key=value:key=value`, several faults separated by `;`.
- `corrupt:rank=1[:collective=all_reduce]` adds 1 to the first element of that rank's result
  before it is checked (every size; `collective=gemm` corrupts the GEMM result instead).
- `hang:rank=1[:collective=all_reduce]` makes that rank sleep forever when it reaches the
  collective, as a wedged NCCL kernel would; the per-collective timeout must turn it into a verdict.
- `crash:rank=1[:collective=all_reduce]` makes that rank exit abruptly (exit status 3).
- `slow:rank=1[:ms=20]` makes that rank sleep `ms` before each exchange of the fabric phase (a slow
  GPU, NIC or link on that rank's node); `corrupt` with no collective also damages its fabric sends.
- `stall:rank=1[:ms=20]` is a stall that passes (another job's burst on a shared host): the same sleep,
  in the fabric phase's first measurement only, not when a slow-looking round is measured again.
- `crowded:rank=1[:ms=20]` is contention with the pairs running beside it (two nodes' ranks sharing a loaded
  host's CPUs, a shared uplink): the same sleep whenever that rank's pair is measured with other pairs of its
  round, not when it is measured alone.
- `burst:rank=1[:ms=20]` is a load on the whole machine while the fabric phase's still-slow pairs are measured
  alone (its last recheck): the same sleep, then only; planted on every rank, it slows a pair and its reference alike.
- `blip:rank=1[:ms=20]` is a load that passes while the still-slow pairs are measured alone: the same sleep in the last
  recheck's first sample only (`fabric_eval.ALONE_SAMPLES`).
A run with faults records them in its result (`fault_injection`) so it is never mistaken for a real one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ENV = "BURNIN_FAULT"
KINDS = ("corrupt", "hang", "crash", "slow", "stall", "crowded", "burst", "blip")


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int
    collective: str | None = None  # None: every collective
    ms: float | None = None  # `slow`, `stall`, `crowded`, `burst`, `blip`: delay per call

    def applies(self, kind: str, rank: int, collective: str) -> bool:
        return self.kind == kind and self.rank == rank and self.collective in (None, collective)


def parse_faults(spec: str | None) -> tuple[Fault, ...]:
    if not spec:
        return ()
    faults = []
    for part in spec.split(";"):
        part = part.strip()
        if not part:
            continue
        kind, *items = part.split(":")
        if kind not in KINDS:
            raise ValueError(f"{ENV}: unknown fault kind {kind!r} (use {', '.join(KINDS)})")
        opts: dict[str, str] = {}
        for item in items:
            key, sep, value = item.partition("=")
            if not sep or key not in ("rank", "collective", "ms"):
                raise ValueError(f"{ENV}: bad item {item!r} in {part!r}")
            opts[key] = value
        if "rank" not in opts or not opts["rank"].isdigit():
            raise ValueError(f"{ENV}: {part!r} needs rank=N")
        ms = opts.get("ms")
        if ms is not None and not ms.replace(".", "", 1).isdigit():
            raise ValueError(f"{ENV}: {part!r}: ms must be a number")
        faults.append(Fault(kind=kind, rank=int(opts["rank"]), collective=opts.get("collective"),
                            ms=float(ms) if ms is not None else None))
    return tuple(faults)


def faults_from_env() -> tuple[Fault, ...]:
    return parse_faults(os.environ.get(ENV))


def find(faults: tuple[Fault, ...], kind: str, rank: int, collective: str) -> Fault | None:
    for f in faults:
        if f.applies(kind, rank, collective):
            return f
    return None
