"""nccl-tests arithmetic and output format (reference/burnin.md §1.1-1.2), size parsing."""

from __future__ import annotations

import pytest

from provisioner.burnin.bandwidth import algbw, bus_factor, busbw, shape_for
from provisioner.burnin.config import ConfigError, format_size, make_config, parse_size, parse_sizes
from provisioner.burnin.report import _half, float_str, format_table


@pytest.mark.parametrize("n", [2, 4, 8])
def test_bus_factors_match_nccl_tests_formulas(n: int) -> None:
    # doc/PERFORMANCE.md: AllReduce 2(n-1)/n, ReduceScatter/AllGather/AlltoAll (n-1)/n, Broadcast/SendRecv 1
    assert bus_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
    for c in ("all_gather", "reduce_scatter", "alltoall"):
        assert bus_factor(c, n) == pytest.approx((n - 1) / n)
    assert bus_factor("broadcast", n) == 1.0
    assert bus_factor("sendrecv", n) == 1.0


def test_bus_factor_values_for_8_ranks() -> None:
    assert bus_factor("all_reduce", 8) == 1.75
    assert bus_factor("all_gather", 8) == 0.875
    assert bus_factor("all_reduce", 2) == 1.0
    assert bus_factor("all_reduce", 1) == 0.0


def test_algbw_uses_decimal_gigabytes() -> None:
    # 1 GiB in 10 ms: 1073741824 / 1e9 / 0.01 = 107.3741824 GB/s
    assert algbw(1 << 30, 0.01) == pytest.approx(107.3741824)
    assert busbw("all_reduce", 1 << 30, 0.01, 8) == pytest.approx(107.3741824 * 1.75)
    assert algbw(1024, 0.0) == 0.0


def test_recorded_nccl_tests_row_is_consistent_with_the_formula() -> None:
    # tinygrad README, 6x RTX 4090: 33554432 B, 2275.1 us, algbw 14.75, busbw 24.58 (all_reduce, n=6)
    a = algbw(33554432, 2275.1e-6)
    assert round(a, 2) == 14.75
    assert round(a * bus_factor("all_reduce", 6), 2) == 24.58


def test_split_collectives_round_the_per_rank_count_to_16_bytes() -> None:
    # (count/nranks) & ~(16/eltSize - 1): 1000 floats over 3 ranks -> 333 -> 332 per rank
    s = shape_for("all_gather", 4000, 3)
    assert (s.per_rank, s.count, s.size) == (332, 996, 3984)
    s = shape_for("all_reduce", 4000, 3)
    assert (s.per_rank, s.count, s.size) == (1000, 1000, 4000)
    # tiny sizes still run one element per rank
    assert shape_for("alltoall", 8, 8).per_rank == 1


def test_parse_sizes_doubles_like_nccl_tests() -> None:
    assert parse_sizes("8B:128") == [8, 16, 32, 64, 128]
    assert parse_sizes("1KiB:1MiB")[0] == 1024 and parse_sizes("1KiB:1MiB")[-1] == 1 << 20
    assert len(parse_sizes("1KiB:1MiB")) == 11
    assert len(parse_sizes("8B:8GiB")) == 31
    assert parse_sizes("1M:8M:4") == [1 << 20, 4 << 20]
    assert parse_size("128M") == 128 << 20 and parse_size("8GiB") == 8 << 30
    for bad in ("8XB", "", "1KiB:2KiB:1", "2KiB:1KiB", "0B"):
        with pytest.raises(ConfigError):
            parse_sizes(bad)
    assert format_size(1 << 30) == "1GiB" and format_size(24) == "24B"


def test_make_config_defaults_and_validation() -> None:
    gloo = make_config(backend="gloo", world_size=4)
    assert gloo.iters == 5 and gloo.sizes[0] == 1024 and gloo.sizes[-1] == 1 << 20
    nccl = make_config(backend="nccl", world_size=8)
    assert nccl.sizes[-1] == 8 << 30 and nccl.iters == 20 and nccl.gemm_size == 8192
    with pytest.raises(ConfigError):
        make_config(backend="gloo", world_size=1)
    with pytest.raises(ConfigError):
        make_config(backend="mpi", world_size=2)
    with pytest.raises(ConfigError):
        make_config(backend="gloo", world_size=2, phases="preflight,burn")
    assert make_config(backend="gloo", world_size=2, phases="soak,gemm").phases == ("gemm", "soak")


def test_float_str_ports_getfloatstr() -> None:
    # current nccl-tests (util.cu getFloatStr): 2 decimals while the integer part leaves room
    assert float_str(2275.1, 7) == "2275.10"
    assert float_str(14.75, 6) == " 14.75"
    assert float_str(52.314, 7) == "  52.31"
    assert float_str(123456.0, 7) == " 123456"
    assert float_str(12345678.0, 7) == "1.2e+07"


def _row(inplace: bool, t: float, a: float, b: float, wrong: int | None) -> dict[str, object]:
    return {"collective": "all_reduce", "size": 33554432, "count": 8388608, "type": "float", "redop": "sum",
            "root": -1, "inplace": inplace, "time_us": t, "algbw": a, "busbw": b, "wrong": wrong}


def test_table_row_has_the_exact_nccl_tests_layout() -> None:
    # Recorded row (tinygrad README). That nccl-tests build printed times >= 100 us with one decimal;
    # the current util.cu (getFloatStr) prints "2275.10". Same columns, same widths.
    recorded = ("    33554432       8388608     float     sum      -1   2275.1   14.75   24.58      0"
                "   2282.5   14.70   24.50      0")
    doc = {"phases": {"collectives": {"rows": [_row(False, 2275.1, 14.75, 24.58, 0),
                                                _row(True, 2282.5, 14.70, 24.50, 0)]}},
           "config": {"iters": 20, "warmup_iters": 1}, "devices": []}
    table = format_table(doc)
    line = next(x for x in table.splitlines() if x.startswith("    33554432"))
    # the format strings of util.cu, applied here independently of the implementation
    # (printf-style on purpose: these are the C format strings)
    spec = ("%12li  %12li  %8s  %6s  %6s" % (33554432, 8388608, "float", "sum", "%6i" % -1)  # noqa: UP031
            + "  %7s  %6s  %6s  %6g" % ("2275.10", " 14.75", " 24.58", 0.0)  # noqa: UP031
            + "  %7s  %6s  %6s  %6g" % ("2282.50", " 14.70", " 24.50", 0.0))  # noqa: UP031
    assert line == spec
    # and the same values as the recorded run, field by field (only the time precision differs)
    assert [t.rstrip("0") for t in line.split()] == [t.rstrip("0") for t in recorded.split()]
    assert "# Out of bounds values : 0 OK" in table
    assert "# Avg bus bandwidth    : 24.54 " in table
    header = next(x for x in table.splitlines() if "size" in x and "count" in x)
    # "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s"
    assert header == ("#       size         count      type   redop    root     time   algbw   busbw  #wrong"
                      "     time   algbw   busbw  #wrong ")


def test_unvalidated_half_prints_na() -> None:
    assert _half(_row(True, 10.0, 1.0, 1.0, None)).endswith("    N/A")
