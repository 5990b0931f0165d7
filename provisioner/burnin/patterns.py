"""Integer-valued test data whose sums are exact in float32 in any order (nccl-tests' idea, §6.2).

Rank r's element i is `((i*7 + r*13) mod 251) + 1`: at most 251, so a sum over up to 65 000 ranks
stays below 2^24 and ring, tree or NVLS reductions give bit-identical results. The pattern has
period 251 in i, so a buffer of any size is filled and checked from a 251-element base without
materialising the expected array.
"""

from __future__ import annotations

import torch

PERIOD = 251
CHUNK_ROWS = 1 << 18  # check in chunks of 251 * 2^18 elements (~66 M) to bound temporaries


def base(rank: int, device: torch.device) -> torch.Tensor:
    i = torch.arange(PERIOD, dtype=torch.int64, device=device)
    return ((i * 7 + rank * 13) % PERIOD + 1).to(torch.float32)


def base_sum(ranks: range, device: torch.device) -> torch.Tensor:
    total = torch.zeros(PERIOD, dtype=torch.float32, device=device)
    for r in ranks:
        total += base(r, device)
    return total


def _rolled(b: torch.Tensor, offset: int) -> torch.Tensor:
    shift = offset % PERIOD
    return torch.roll(b, -shift) if shift else b


def fill(dst: torch.Tensor, b: torch.Tensor, offset: int = 0) -> None:
    """dst[j] = b[(offset + j) mod 251] for a 1-D contiguous dst."""
    rb = _rolled(b, offset)
    n = dst.numel()
    m = n // PERIOD
    if m:
        dst[: m * PERIOD].view(m, PERIOD).copy_(rb.expand(m, PERIOD))
    tail = n - m * PERIOD
    if tail:
        dst[m * PERIOD :].copy_(rb[:tail])


def mismatches(t: torch.Tensor, b: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """Number of elements of 1-D t that differ from the periodic pattern, as an int64 tensor on t's device."""
    rb = _rolled(b, offset)
    n = t.numel()
    m = n // PERIOD
    total = torch.zeros((), dtype=torch.int64, device=t.device)
    for start in range(0, m, CHUNK_ROWS):
        rows = min(CHUNK_ROWS, m - start)
        block = t[start * PERIOD : (start + rows) * PERIOD].view(rows, PERIOD)
        total += (block != rb).sum()
    tail = n - m * PERIOD
    if tail:
        total += (t[m * PERIOD :] != rb[:tail]).sum()
    return total
