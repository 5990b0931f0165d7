"""``nvidia-smi topo -m`` (link matrix, affinities, legend) and ``nvidia-smi topo -p2p`` (P2P status)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from provisioner.facts.models import P2PMatrix, ParseError, TopoMatrix
from provisioner.facts.nvidia_text import na, require_text, split_lines
from provisioner.facts.smi_failure import raise_if_failed

# --- nvidia-smi topo -m / topo -p2p -----------------------------------------------------------

_SPLIT_RE = re.compile(r"\t| {2,}")
_LEGEND_RE = re.compile(r"^\s+(\S+)\s+=\s+(.+?)\s*$")
_NIC_LEGEND_RE = re.compile(r"^\s+(NIC\d+):\s+(\S+)\s*$")
_TRAILING_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_LINK_RE = re.compile(r"^(X|SYS|NODE|PHB|PXB|PIX|SOC|CPU|NV\d+)$")


def _grid_cells(line: str) -> list[str]:
    return [c.strip() for c in _SPLIT_RE.split(line) if c.strip()]


def _parse_legend(lines: Iterable[str]) -> tuple[dict[str, str], dict[str, str]]:
    legend: dict[str, str] = {}
    nics: dict[str, str] = {}
    for ln in lines:
        m = _LEGEND_RE.match(ln)
        if m:
            legend[m.group(1)] = m.group(2)
            continue
        m = _NIC_LEGEND_RE.match(ln)
        if m:
            nics[m.group(1)] = m.group(2)
    return legend, nics


def _grid(text: str, what: str) -> tuple[list[str], list[list[str]], list[str]]:
    """Header cells, data rows (cells), and the lines from ``Legend:`` on."""
    lines = split_lines(text)
    legend_at = next((i for i, ln in enumerate(lines) if ln.strip() == "Legend:"), len(lines))
    body = [ln for ln in lines[:legend_at] if ln.strip()]
    header_idx = None
    for i, ln in enumerate(body):
        cells = _grid_cells(ln)
        # the header starts with GPU0 too, but a data row's second cell is the diagonal "X"
        if cells and cells[0] == "GPU0" and (len(cells) == 1 or cells[1] != "X"):
            header_idx = i
            break
    if header_idx is None:
        raise ParseError(f"{what}: no header line with GPU0")
    header = _grid_cells(body[header_idx])
    rows = [_grid_cells(ln) for ln in body[header_idx + 1 :]]
    return header, rows, lines[legend_at:]


def parse_topo_matrix(text: str) -> TopoMatrix:
    """Parse ``nvidia-smi topo -m`` (tab-separated; ANSI underline codes are stripped)."""
    require_text(text, "nvidia-smi topo -m")
    raise_if_failed(text)
    header, rows, tail = _grid(text, "nvidia-smi topo -m")
    trailing = [h for h in header if h in _TRAILING_COLUMNS or "Affinity" in h]
    devices = [h for h in header if h not in trailing]
    links: dict[str, dict[str, str]] = {}
    cpu: dict[str, str] = {}
    numa: dict[str, str | None] = {}
    gpu_numa: dict[str, str | None] = {}
    for cells in rows:
        label = cells[0]
        if label not in devices:
            raise ParseError(f"nvidia-smi topo -m: unexpected row {label!r} (devices {devices})")
        values = cells[1 : 1 + len(devices)]
        if len(values) != len(devices):
            raise ParseError(f"nvidia-smi topo -m: row {label} has {len(values)} links, expected {len(devices)}")
        for v in values:
            if not _LINK_RE.match(v):
                raise ParseError(f"nvidia-smi topo -m: row {label}: unknown link type {v!r}")
        links[label] = dict(zip(devices, values, strict=True))
        extra = dict(zip(trailing, cells[1 + len(devices) :], strict=False))
        if "CPU Affinity" in extra:
            cpu[label] = extra["CPU Affinity"]
        if "NUMA Affinity" in extra:
            numa[label] = na(extra["NUMA Affinity"])
        if "GPU NUMA ID" in extra:
            gpu_numa[label] = na(extra["GPU NUMA ID"])
    _require_rows_and_diagonal(links, devices, "nvidia-smi topo -m", ", expected 'X'")
    legend, nics = _parse_legend(tail)
    return TopoMatrix(
        devices=tuple(devices),
        links=links,
        cpu_affinity=cpu,
        numa_affinity=numa,
        gpu_numa_id=gpu_numa,
        nic_names=nics,
        legend=legend,
    )


def _require_rows_and_diagonal(rows: Mapping[str, Mapping[str, str]], labels: Sequence[str], what: str,
                               hint: str = "") -> None:
    """Every label has its row and an "X" on the diagonal (the matrix is the one nvidia-smi prints)."""
    for d in labels:
        if d not in rows:
            raise ParseError(f"{what}: no row for {d}")
        if rows[d][d] != "X":
            raise ParseError(f"{what}: diagonal entry for {d} is {rows[d][d]!r}{hint}")


P2P_CODES = frozenset({"X", "OK", "CNS", "GNS", "TNS", "NS", "DR", "U"})


def parse_topo_p2p(text: str) -> P2PMatrix:
    """Parse ``nvidia-smi topo -p2p r`` (or ``w``/``n``/``a``/``p``): OK/CNS/GNS/TNS/NS/DR/U."""
    require_text(text, "nvidia-smi topo -p2p")
    raise_if_failed(text)
    header, rows, tail = _grid(text, "nvidia-smi topo -p2p")
    gpus = header
    status: dict[str, dict[str, str]] = {}
    for cells in rows:
        label, values = cells[0], cells[1:]
        if label not in gpus or len(values) != len(gpus):
            raise ParseError(f"nvidia-smi topo -p2p: bad row {cells!r} for GPUs {gpus}")
        bad = [v for v in values if v not in P2P_CODES]
        if bad:
            raise ParseError(f"nvidia-smi topo -p2p: row {label}: unknown status {bad[0]!r}")
        status[label] = dict(zip(gpus, values, strict=True))
    _require_rows_and_diagonal(status, gpus, "nvidia-smi topo -p2p")
    legend, _ = _parse_legend(tail)
    return P2PMatrix(gpus=tuple(gpus), status=status, legend=legend)
