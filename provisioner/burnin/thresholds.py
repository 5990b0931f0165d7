"""The per-GPU-model threshold table (`thresholds.json`), overridable by a file or a dict. Pure."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path

from provisioner.burnin.shapes import ThresholdTable

DATA_FILE = Path(__file__).with_name("thresholds.json")


def load_default() -> ThresholdTable:
    data: ThresholdTable = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    return data


def merge(base: ThresholdTable, override: ThresholdTable) -> ThresholdTable:
    """`defaults` keys replace the base ones; override `models` are tried before the base models."""
    out = copy.deepcopy(base)
    unknown = set(override) - {"defaults", "models", "schema_version", "about"}
    if unknown:
        raise ValueError(f"thresholds: unknown top-level key(s) {sorted(unknown)}")
    defaults = override.get("defaults", {})
    if not isinstance(defaults, dict):
        raise ValueError("thresholds: 'defaults' must be an object")
    out["defaults"].update(defaults)
    models = override.get("models", [])
    if not isinstance(models, list):
        raise ValueError("thresholds: 'models' must be a list")
    for m in models:
        if not isinstance(m, dict) or "pattern" not in m:
            raise ValueError(f"thresholds: model entry needs a 'pattern': {m!r}")
        re.compile(str(m["pattern"]))
    out["models"] = list(models) + out["models"]
    return out


def load(path: str | None = None, override: ThresholdTable | None = None) -> ThresholdTable:
    table = load_default()
    if path:
        table = merge(table, json.loads(Path(path).read_text(encoding="utf-8")))
    if override:
        table = merge(table, override)
    return table


@dataclass(frozen=True)
class Reference:
    """The reference that applies to this node, or why none does."""

    busbw_gbps: float | None
    pattern: str | None
    source: str
    reason: str | None = None  # set when no bandwidth verdict is possible


def lookup(table: ThresholdTable, gpu_names: list[str], world_size: int) -> Reference:
    if len(set(gpu_names)) > 1:
        return Reference(None, None, "", f"mixed GPU models {sorted(set(gpu_names))}: no single reference")
    name = gpu_names[0] if gpu_names else ""  # unknown model: only a catch-all override (".*") matches
    for entry in table["models"]:
        if re.search(str(entry["pattern"]), name, flags=re.IGNORECASE):
            source = str(entry.get("source", ""))
            want = entry.get("world_size")
            if want is not None and int(want) != world_size:
                return Reference(
                    None, str(entry["pattern"]), source,
                    f"reference for {name} is for {want} GPUs, this run has {world_size}",
                )
            value = entry.get("all_reduce_busbw_gbps")
            if value is None:
                return Reference(None, str(entry["pattern"]), source, f"no reference busbw for {name}")
            return Reference(float(value), str(entry["pattern"]), source)
    if not name:
        return Reference(None, None, "", "GPU model unknown (no NVML names)")
    return Reference(None, None, "", f"no reference for GPU model {name!r}")
