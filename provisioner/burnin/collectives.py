"""Collective sweeps with torch.distributed, timed and checked the nccl-tests way.

Per collective and size: warm-up calls, then a timed batch of back-to-back calls between a
barrier and one device sync (host clock, as nccl-tests' BenchTime); the per-rank time is
averaged over ranks. Then one untimed call on freshly filled data is compared bit-exactly with
the expected values and the wrong-element count is summed over ranks (`#wrong`).

torch has no out-of-place all_reduce or broadcast: out-of-place there is a device copy from the
send buffer followed by the in-place call (the copy is inside the timing). As in nccl-tests,
in-place alltoall and sendrecv are timed but not validated (`wrong` is None, printed N/A).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from provisioner.burnin import patterns
from provisioner.burnin.bandwidth import algbw, bus_factor, shape_for
from provisioner.burnin.config import BurninConfig, format_size
from provisioner.burnin.faults import Fault, find
from provisioner.burnin.report import table_footer, table_header, table_row
from provisioner.burnin.shapes import CollectiveRow, RankDevice
from provisioner.burnin.watchdog import Watchdog

ROOT = 0
REDOP = {"all_reduce": "sum", "reduce_scatter": "sum"}
HANG_SECONDS = 1e9


def _all_gather_single(out: torch.Tensor, inp: torch.Tensor) -> None:
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # torch >= 2.13 renamed it
    fn(out, inp)


def _reduce_scatter_single(out: torch.Tensor, inp: torch.Tensor) -> None:
    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    fn(out, inp)


@dataclass
class Bench:
    run: Callable[[], None]
    refill: Callable[[], None]
    check: Callable[[], torch.Tensor] | None  # local wrong-element count; None = not validated
    result: torch.Tensor  # what a `corrupt` fault damages


@dataclass
class Runtime:
    """What a rank needs to run collectives."""

    cfg: BurninConfig
    rank: int
    world: int
    device: torch.device
    dog: Watchdog
    faults: tuple[Fault, ...] = ()
    guard_slack: float = 0.0  # rank 0 waits a little longer so it can report the others' timeouts
    log: Callable[[str], None] = lambda _msg: None
    emit: Callable[[str], None] = lambda _line: None  # raw progress lines (rank 0: the live nccl-tests table)
    devices: list[RankDevice] = field(default_factory=list)
    _hung: set[str] = field(default_factory=set)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        if self.device.type == "cuda":
            dist.barrier(device_ids=[self.device.index])
        else:
            dist.barrier()

    def apply_stall_faults(self, collective: str) -> None:
        if collective in self._hung:
            return
        if find(self.faults, "crash", self.rank, collective):
            self.log(f"fault injection: rank {self.rank} crashes in {collective}")
            os._exit(3)
        if find(self.faults, "hang", self.rank, collective):
            self._hung.add(collective)
            self.log(f"fault injection: rank {self.rank} hangs in {collective}")
            time.sleep(HANG_SECONDS)


def make_bench(collective: str, size: int, inplace: bool, rt: Runtime) -> tuple[Bench, int, int]:
    """Buffers and closures for one row; returns (bench, count, size_bytes)."""
    n, r, dev = rt.world, rt.rank, rt.device
    shape = shape_for(collective, size, n)
    c = shape.per_rank
    mine = patterns.base(r, dev)

    def empty(k: int) -> torch.Tensor:
        return torch.empty(k, dtype=torch.float32, device=dev)

    if collective == "all_reduce":
        buf = empty(c)
        expected = patterns.base_sum(range(n), dev)
        if inplace:
            def refill() -> None:
                patterns.fill(buf, mine)

            def run() -> None:
                dist.all_reduce(buf)
        else:
            src = empty(c)

            def refill() -> None:
                patterns.fill(src, mine)
                buf.zero_()

            def run() -> None:
                buf.copy_(src)
                dist.all_reduce(buf)
        return Bench(run, refill, lambda: patterns.mismatches(buf, expected), buf), shape.count, shape.size

    if collective == "all_gather":
        out = empty(c * n)
        inp = out.narrow(0, r * c, c) if inplace else empty(c)
        bases = [patterns.base(k, dev) for k in range(n)]

        def refill() -> None:
            out.zero_()
            patterns.fill(inp, mine)

        def check() -> torch.Tensor:
            return sum((patterns.mismatches(out.narrow(0, k * c, c), bases[k]) for k in range(n)),
                       torch.zeros((), dtype=torch.int64, device=dev))

        return Bench(lambda: _all_gather_single(out, inp), refill, check, out), shape.count, shape.size

    if collective == "reduce_scatter":
        inp = empty(c * n)
        out = inp.narrow(0, r * c, c) if inplace else empty(c)
        expected = patterns.base_sum(range(n), dev)

        def refill() -> None:
            patterns.fill(inp, mine)
            if not inplace:
                out.zero_()

        return (
            Bench(lambda: _reduce_scatter_single(out, inp), refill,
                  lambda: patterns.mismatches(out, expected, r * c), out),
            shape.count, shape.size,
        )

    if collective == "alltoall":
        inp = empty(c * n)
        out = inp if inplace else empty(c * n)
        bases = [patterns.base(k, dev) for k in range(n)]

        def refill() -> None:
            if not inplace:
                out.zero_()
            patterns.fill(inp, mine)

        def check() -> torch.Tensor:
            return sum((patterns.mismatches(out.narrow(0, k * c, c), bases[k], r * c) for k in range(n)),
                       torch.zeros((), dtype=torch.int64, device=dev))

        return (
            Bench(lambda: dist.all_to_all_single(out, inp), refill, None if inplace else check, out),
            shape.count, shape.size,
        )

    if collective == "broadcast":
        buf = empty(c)
        root_base = patterns.base(ROOT, dev)
        if inplace:
            def refill() -> None:
                patterns.fill(buf, mine)  # non-root ranks start with their own data: a no-op shows up

            def run() -> None:
                dist.broadcast(buf, src=ROOT)
        else:
            src = empty(c)

            def refill() -> None:
                patterns.fill(src, mine)
                patterns.fill(buf, mine)

            def run() -> None:
                if r == ROOT:
                    buf.copy_(src)
                dist.broadcast(buf, src=ROOT)
        return Bench(run, refill, lambda: patterns.mismatches(buf, root_base), buf), shape.count, shape.size

    if collective == "sendrecv":
        send = empty(c)
        recv = send if inplace else empty(c)
        prev_base = patterns.base((r - 1) % n, dev)

        def refill() -> None:
            if not inplace:
                recv.zero_()
            patterns.fill(send, mine)

        def run() -> None:
            ops = [dist.P2POp(dist.isend, send, (r + 1) % n), dist.P2POp(dist.irecv, recv, (r - 1) % n)]
            for req in dist.batch_isend_irecv(ops):
                req.wait()

        return (
            Bench(run, refill, None if inplace else (lambda: patterns.mismatches(recv, prev_base)), recv),
            shape.count, shape.size,
        )

    raise ValueError(f"unknown collective {collective!r}")


# .item() on a CUDA tensor may wait for the device while holding the GIL, which would also stop
# the watchdog thread; torch.cuda.synchronize() waits with the GIL released, so sync first.
def _mean_over_ranks(value: float, rt: Runtime) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=rt.device)
    dist.all_reduce(t)
    rt.sync()
    return float(t.item()) / rt.world


def _sum_over_ranks(t: torch.Tensor, rt: Runtime) -> int:
    t = t.to(torch.int64).reshape(1)
    dist.all_reduce(t)
    rt.sync()
    return int(t.item())


def measure(bench: Bench, rt: Runtime, iters: int, warmup: int) -> float:
    """Seconds per call, averaged over ranks."""
    bench.refill()
    for _ in range(warmup):
        bench.run()
    rt.sync()
    rt.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        bench.run()
    rt.sync()
    return _mean_over_ranks((time.perf_counter() - t0) / iters, rt)


def validate(bench: Bench, rt: Runtime, collective: str) -> int | None:
    """Refill, one call, compare; returns the wrong-element count over all ranks (None if not validated)."""
    bench.refill()
    rt.sync()
    rt.barrier()
    bench.run()
    rt.sync()
    if bench.check is None:
        return None
    if find(rt.faults, "corrupt", rt.rank, collective):
        bench.result.view(-1)[0] += 1
    return _sum_over_ranks(bench.check(), rt)


def row_dict(collective: str, size: int, count: int, inplace: bool, seconds: float, wrong: int | None,
             n: int) -> CollectiveRow:
    a = algbw(size, seconds)
    return {
        "collective": collective,
        "size": size,
        "count": count,
        "type": "float",
        "redop": REDOP.get(collective, "none"),
        "root": ROOT if collective == "broadcast" else -1,
        "inplace": inplace,
        "time_us": seconds * 1e6,
        "algbw": a,
        "busbw": a * bus_factor(collective, n),
        "wrong": wrong,
    }


def usable_sizes(sizes: tuple[int, ...], rt: Runtime) -> tuple[list[int], list[int]]:
    """Sizes whose buffers fit in the GPU memory every rank has free (about 3x the size is needed)."""
    if rt.device.type != "cuda":
        return list(sizes), []
    free = torch.tensor([float(torch.cuda.mem_get_info(rt.device)[0])], dtype=torch.float64, device=rt.device)
    dist.all_reduce(free, op=dist.ReduceOp.MIN)
    rt.sync()
    budget = float(free.item()) * 0.9
    fits = [s for s in sizes if 3.2 * s <= budget]
    return fits, [s for s in sizes if s not in fits]


@dataclass
class SweepOutcome:
    rows: list[CollectiveRow] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped_sizes: list[int] = field(default_factory=list)
    broken: bool = False  # the process group raised: stop using it


def region_name(collective: str, size: int, inplace: bool) -> str:
    return f"{collective} {format_size(size)} {'in-place' if inplace else 'out-of-place'}"


def sweep(rt: Runtime, outcome: SweepOutcome, on_error: Callable[[str, BaseException], str]) -> None:
    """Every collective x size x placement; rows are appended to `outcome` as they complete, so a
    timeout mid-sweep still reports what ran."""
    cfg = rt.cfg
    sizes, skipped = usable_sizes(cfg.sizes, rt)
    outcome.skipped_sizes = skipped
    for collective in cfg.collectives:
        if rt.rank == 0:
            for line in table_header(collective, sizes, cfg.public_dict(), rt.devices):
                rt.emit(line)
        done: list[CollectiveRow] = []
        for size in sizes:
            pair: list[CollectiveRow] = []
            for inplace in (False, True):
                region = region_name(collective, size, inplace)
                try:
                    with rt.dog.guard(region, cfg.timeout + rt.guard_slack):
                        rt.apply_stall_faults(collective)
                        bench, count, nbytes = make_bench(collective, size, inplace, rt)
                        seconds = measure(bench, rt, cfg.iters, cfg.warmup_iters)
                        wrong = validate(bench, rt, collective)
                        del bench
                except Exception as exc:
                    outcome.errors.append(on_error(region, exc))
                    outcome.broken = True
                    return
                row = row_dict(collective, nbytes, count, inplace, seconds, wrong, rt.world)
                outcome.rows.append(row)
                pair.append(row)
            done += pair
            if rt.rank == 0:
                rt.emit(table_row(pair[0], pair[1]))
            if rt.device.type == "cuda" and size >= 256 << 20:
                torch.cuda.empty_cache()
        if rt.rank == 0:
            for line in table_footer(collective, done):
                rt.emit(line)


@dataclass
class SoakOutcome:
    size: int = 0
    samples: list[float] = field(default_factory=list)
    seconds: float = 0.0
    wrong: int = 0
    error: str | None = None


def soak(rt: Runtime, size: int, out: SoakOutcome, on_error: Callable[[str, BaseException], str],
         check_every: int = 10) -> None:
    """Repeat the large out-of-place all_reduce for cfg.duration seconds (like nccl-tests -N 0)."""
    cfg = rt.cfg
    out.size = size
    n = rt.world
    region = f"soak all_reduce {format_size(size)}"
    try:
        bench, _count, nbytes = make_bench("all_reduce", size, False, rt)
        out.size = nbytes
        factor = bus_factor("all_reduce", n)
        elapsed = 0.0
        k = 0
        while elapsed < cfg.duration:
            with rt.dog.guard(f"{region} sample {k}", cfg.timeout + rt.guard_slack):
                t_start = time.perf_counter()
                seconds = measure(bench, rt, cfg.iters, 0)
                out.samples.append(algbw(nbytes, seconds) * factor)
                k += 1
                if k % check_every == 0:
                    out.wrong += validate(bench, rt, "all_reduce") or 0
                # identical on every rank, so every rank stops after the same sample
                elapsed += _mean_over_ranks(time.perf_counter() - t_start, rt)
        with rt.dog.guard(f"{region} final check", cfg.timeout + rt.guard_slack):
            out.wrong += validate(bench, rt, "all_reduce") or 0
        out.seconds = elapsed
    except Exception as exc:
        out.error = on_error(region, exc)
