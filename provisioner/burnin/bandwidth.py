"""nccl-tests' bandwidth arithmetic (doc/PERFORMANCE.md and src/*.cu GetBw), pure.

- `algbw = S / t` with S the size of the whole array in bytes and GB = 1e9.
- `busbw = algbw * factor`: all_reduce 2(n-1)/n; all_gather, reduce_scatter, alltoall (n-1)/n;
  broadcast, reduce, sendrecv 1.
- all_gather, reduce_scatter and alltoall use a per-rank count rounded down to a 16-byte
  multiple (`(count/nranks) & ~(16/eltSize - 1)`); S is then `per_rank * nranks * eltSize`.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9
SPLIT_COLLECTIVES = frozenset({"all_gather", "reduce_scatter", "alltoall"})
REDUCING = frozenset({"all_reduce", "reduce_scatter", "reduce"})


def bus_factor(collective: str, n: int) -> float:
    """The busbw/algbw factor of nccl-tests for `n` ranks."""
    if n < 1:
        raise ValueError("n must be >= 1")
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in SPLIT_COLLECTIVES:
        return (n - 1) / n
    if collective in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    raise ValueError(f"unknown collective {collective!r}")


def algbw(size_bytes: int, seconds: float) -> float:
    """GB/s (1e9) moved per second for an array of `size_bytes`."""
    if seconds <= 0:
        return 0.0
    return size_bytes / GB / seconds


def busbw(collective: str, size_bytes: int, seconds: float, n: int) -> float:
    return algbw(size_bytes, seconds) * bus_factor(collective, n)


@dataclass(frozen=True)
class Shape:
    """Element counts for one collective at one requested size."""

    count: int  # elements of the whole array (the nccl-tests `count` column)
    per_rank: int  # elements each rank contributes / receives (== count when not split)
    size: int  # bytes of the whole array (the nccl-tests `size` column, S in the formulas)


def shape_for(collective: str, size_bytes: int, n: int, elt_size: int = 4) -> Shape:
    """Counts as nccl-tests computes them; at least one element per rank so every row runs."""
    count = max(1, size_bytes // elt_size)
    if collective in SPLIT_COLLECTIVES:
        align = max(1, 16 // elt_size)
        per_rank = (count // n) & ~(align - 1)
        if per_rank == 0:
            per_rank = max(1, count // n)
        return Shape(count=per_rank * n, per_rank=per_rank, size=per_rank * n * elt_size)
    return Shape(count=count, per_rank=count, size=count * elt_size)
