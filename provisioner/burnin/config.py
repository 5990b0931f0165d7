"""Burn-in settings: one dataclass, size parsing, defaults per backend.

Pure stdlib. The same object is built by the argparse entry (`python -m provisioner.burnin`)
and by the click wrapper (`provisioner burnin`), and travels to the worker processes as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import cast

from provisioner.burnin.shapes import BurninConfigDoc, ThresholdDefaults, ThresholdModel, ThresholdTable

PHASES: tuple[str, ...] = ("preflight", "gemm", "collectives", "fabric", "soak", "nvshmem")
#: what runs without --phases on one node; a world across several nodes adds "fabric"
DEFAULT_PHASES: tuple[str, ...] = tuple(p for p in PHASES if p != "fabric")
COLLECTIVES: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv")
BACKENDS: tuple[str, ...] = ("nccl", "gloo")

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([A-Za-z]*)\s*$")


class ConfigError(ValueError):
    """An invalid burn-in setting (maps to exit code 2)."""


def parse_size(text: str) -> int:
    """`8B`, `1KiB`, `128M`, `8GiB` -> bytes. Suffixes are binary, as in nccl-tests (K = 1024)."""
    m = _SIZE_RE.match(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ConfigError(f"invalid size {text!r}: use a number with B, K/KiB, M/MiB or G/GiB")
    value = int(m.group(1)) * _UNITS[m.group(2).lower()]
    if value <= 0:
        raise ConfigError(f"invalid size {text!r}: must be > 0")
    return value


def parse_sizes(spec: str) -> list[int]:
    """`MIN:MAX` doubling like nccl-tests `-b MIN -e MAX -f 2`; `MIN:MAX:F` for another factor; `S` alone."""
    parts = spec.split(":")
    if len(parts) == 1:
        return [parse_size(parts[0])]
    if len(parts) not in (2, 3):
        raise ConfigError(f"invalid size range {spec!r}: expected MIN:MAX or MIN:MAX:FACTOR")
    lo, hi = parse_size(parts[0]), parse_size(parts[1])
    factor = 2
    if len(parts) == 3:
        if not parts[2].strip().isdigit() or int(parts[2]) < 2:
            raise ConfigError(f"invalid step factor in {spec!r}: integer >= 2")
        factor = int(parts[2])
    if lo > hi:
        raise ConfigError(f"invalid size range {spec!r}: MIN > MAX")
    sizes: list[int] = []
    size = lo
    while size <= hi:
        sizes.append(size)
        size *= factor
    return sizes


def format_size(n: int) -> str:
    """Bytes -> the shortest exact binary form (`1KiB`, `8GiB`, `24B`)."""
    for unit, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{unit}"
    return f"{n}B"


def parse_phases(spec: str) -> tuple[str, ...]:
    names = tuple(p.strip() for p in spec.split(",") if p.strip())
    unknown = [p for p in names if p not in PHASES]
    if unknown or not names:
        raise ConfigError(f"unknown phase(s) {unknown or spec!r}; choose from {','.join(PHASES)}")
    return tuple(p for p in PHASES if p in names)  # canonical order


def parse_collectives(spec: str) -> tuple[str, ...]:
    names = tuple(c.strip() for c in spec.split(",") if c.strip())
    unknown = [c for c in names if c not in COLLECTIVES]
    if unknown or not names:
        raise ConfigError(f"unknown collective(s) {unknown or spec!r}; choose from {','.join(COLLECTIVES)}")
    return tuple(c for c in COLLECTIVES if c in names)


THRESHOLD_KEYS = ("min_fraction", "min_size_bytes", "gemm_slow_fraction", "soak_min_fraction",
                  "shm_warn_bytes", "shm_fail_bytes", "fabric_slow_fraction")


def parse_threshold_pairs(pairs: list[str] | tuple[str, ...] | None) -> ThresholdTable | None:
    """`--threshold KEY=VALUE` items -> an override for the threshold table.

    `all_reduce_busbw_gbps=V` sets the reference for whatever GPUs this node has; the other keys
    replace the table's defaults (`min_fraction=0.85`, `soak_min_fraction=0.7`, ...)."""
    if not pairs:
        return None
    defaults: dict[str, float | int] = {}
    models: list[ThresholdModel] = []
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        try:
            value = float(raw)
        except ValueError:
            value = float("nan")
        if not sep or value != value or value < 0:
            raise ConfigError(f"--threshold {pair!r}: expected KEY=NUMBER")
        if key == "all_reduce_busbw_gbps":
            models.append({"pattern": ".*", "world_size": None, "all_reduce_busbw_gbps": value,
                           "source": "--threshold all_reduce_busbw_gbps"})
        elif key in THRESHOLD_KEYS:
            defaults[key] = int(value) if key.endswith("_bytes") else value
        else:
            raise ConfigError(f"--threshold {key!r}: unknown key (all_reduce_busbw_gbps, {', '.join(THRESHOLD_KEYS)})")
    # every key is one of THRESHOLD_KEYS, the keys of ThresholdDefaults
    return {"defaults": cast(ThresholdDefaults, defaults), "models": models}


@dataclass(frozen=True)
class BurninConfig:
    """Everything one burn-in run needs. Build with `make_config` to get per-backend defaults."""

    backend: str
    world_size: int
    sizes: tuple[int, ...]
    phases: tuple[str, ...] = DEFAULT_PHASES
    collectives: tuple[str, ...] = COLLECTIVES
    iters: int = 20
    warmup_iters: int = 2
    duration: float = 60.0  # soak seconds
    timeout: float = 300.0  # seconds one guarded step (a row of one collective at one size) may take
    gemm_seconds: float = 30.0
    gemm_size: int = 8192
    nvshmem_timeout: float = 180.0
    expected_gpus: int | None = None
    thresholds_file: str | None = None
    thresholds_override: ThresholdTable | None = None
    monitor_interval: float = 1.0
    p2p_ab: bool = False  # rerun all_reduce with NCCL_P2P_DISABLE=1 (local launcher only)
    json: bool = False
    out: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> BurninConfig:
        raw = json.loads(text)
        for key in ("sizes", "phases", "collectives"):
            raw[key] = tuple(raw[key])
        return cls(**raw)

    def public_dict(self) -> BurninConfigDoc:
        """The settings echoed in the result (no override blobs), in the fields' order."""
        return {
            "backend": self.backend, "world_size": self.world_size, "sizes": [format_size(s) for s in self.sizes],
            "phases": list(self.phases), "collectives": list(self.collectives), "iters": self.iters,
            "warmup_iters": self.warmup_iters, "duration": self.duration, "timeout": self.timeout,
            "gemm_seconds": self.gemm_seconds, "gemm_size": self.gemm_size, "nvshmem_timeout": self.nvshmem_timeout,
            "expected_gpus": self.expected_gpus, "thresholds_file": self.thresholds_file,
            "monitor_interval": self.monitor_interval, "p2p_ab": self.p2p_ab, "json": self.json, "out": self.out,
        }


def make_config(
    *,
    backend: str,
    world_size: int,
    sizes: str | None = None,
    phases: str | None = None,
    collectives: str | None = None,
    iters: int | None = None,
    warmup_iters: int | None = None,
    duration: float | None = None,
    timeout: float | None = None,
    gemm_seconds: float | None = None,
    gemm_size: int | None = None,
    nvshmem_timeout: float | None = None,
    expected_gpus: int | None = None,
    thresholds_file: str | None = None,
    thresholds: list[str] | tuple[str, ...] | None = None,
    monitor_interval: float | None = None,
    p2p_ab: bool = False,
    json_out: bool = False,
    out: str | None = None,
    nodes: int = 1,
) -> BurninConfig:
    """Validate and fill defaults. gloo defaults are small: it checks logic, not speed."""
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    gpu = backend == "nccl"
    if world_size < 1:
        raise ConfigError("--world-size must be >= 1")
    if not gpu and world_size < 2:
        raise ConfigError("gloo needs --world-size >= 2 (gloo cannot send to itself)")
    size_list = parse_sizes(sizes or ("8B:8GiB" if gpu else "1KiB:1MiB"))
    cfg = BurninConfig(
        backend=backend,
        world_size=world_size,
        sizes=tuple(size_list),
        phases=parse_phases(phases) if phases else (PHASES if nodes > 1 else DEFAULT_PHASES),
        collectives=parse_collectives(collectives) if collectives else COLLECTIVES,
        iters=iters if iters is not None else (20 if gpu else 5),
        warmup_iters=warmup_iters if warmup_iters is not None else (2 if gpu else 1),
        duration=duration if duration is not None else (60.0 if gpu else 1.0),
        timeout=timeout if timeout is not None else (300.0 if gpu else 60.0),
        gemm_seconds=gemm_seconds if gemm_seconds is not None else (30.0 if gpu else 0.5),
        gemm_size=gemm_size if gemm_size is not None else (8192 if gpu else 128),
        nvshmem_timeout=nvshmem_timeout if nvshmem_timeout is not None else 180.0,
        expected_gpus=expected_gpus,
        thresholds_file=thresholds_file,
        thresholds_override=parse_threshold_pairs(thresholds),
        monitor_interval=monitor_interval if monitor_interval is not None else 1.0,
        p2p_ab=p2p_ab,
        json=json_out,
        out=out,
    )
    if cfg.iters < 1 or cfg.warmup_iters < 0:
        raise ConfigError("--iters must be >= 1 and --warmup-iters >= 0")
    if cfg.timeout <= 0 or cfg.nvshmem_timeout <= 0:
        raise ConfigError("timeouts must be > 0")
    if cfg.duration < 0 or cfg.gemm_seconds < 0:
        raise ConfigError("--duration and --gemm-seconds must be >= 0")
    if cfg.gemm_size < 16:
        raise ConfigError("--gemm-size must be >= 16")
    if cfg.expected_gpus is not None and cfg.expected_gpus < 0:
        raise ConfigError("--expected-gpus must be >= 0")
    return cfg
