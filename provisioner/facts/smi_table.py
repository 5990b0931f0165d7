"""The default ``nvidia-smi`` table (box drawing; R450+ three-line GPU rows)."""

from __future__ import annotations

import re

from provisioner.facts.models import ParseError, SmiTable, SmiTableGpu
from provisioner.facts.nvidia_text import int_prefix, na, require_text, split_lines
from provisioner.facts.smi_failure import raise_if_failed

# --- default nvidia-smi table -----------------------------------------------------------------

_TITLE_RE = re.compile(
    r"NVIDIA-SMI\s+(?P<smi>\S+)\s+(?:Driver|KMD) Version:\s+(?P<driver>\S+)"
    r"(?:\s+CUDA(?: UMD)? Version:\s+(?P<cuda>\S+))?"
)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table_gpu(rows: list[str], where: str) -> SmiTableGpu:
    c1 = _cells(rows[0])
    m1 = re.match(r"^(\d+)\s+(.+?)\s+(On|Off)$", c1[0]) if len(c1) == 3 else None
    m2 = re.match(r"^(\S+)\s+(On|Off)$", c1[1]) if m1 else None
    if m1 is None or m2 is None:
        raise ParseError(f"nvidia-smi table {where}: bad GPU line {rows[0]!r}")
    c2 = _cells(rows[1]) if len(rows) > 1 else []
    m3 = re.match(r"^(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*/\s*(\S+)$", c2[0]) if len(c2) == 3 else None
    # MIG-enabled GPUs show "N/A" instead of "used / total"
    m4 = re.match(r"^(\S+)\s*/\s*(\S+)$|^(N/A)$", c2[1]) if m3 else None
    m5 = re.match(r"^(\S+)\s+(.+)$", c2[2]) if m3 else None
    if m3 is None or m4 is None or m5 is None:
        raise ParseError(f"nvidia-smi table {where}: bad usage line {rows[1] if len(rows) > 1 else ''!r}")
    mig = _cells(rows[2])[2] if len(rows) > 2 and len(_cells(rows[2])) == 3 else "N/A"
    fan, temp, perf, pwr, cap = m3.groups()
    return SmiTableGpu(
        index=int(m1.group(1)),
        name=m1.group(2),
        persistence_mode=m1.group(3) == "On",
        bus_id=m2.group(1),
        display_active=m2.group(2) == "On",
        volatile_uncorr_ecc=c1[2],
        fan_percent=int_prefix(na(fan)),
        temperature_c=int_prefix(na(temp)),
        perf_state=perf,
        power_usage_w=int_prefix(na(pwr)),
        power_cap_w=int_prefix(na(cap)),
        memory_used_mib=int_prefix(na(m4.group(1) or "N/A")),
        memory_total_mib=int_prefix(na(m4.group(2) or "N/A")),
        gpu_util_percent=int_prefix(na(m5.group(1))),
        compute_mode=m5.group(2),
        mig_mode=mig,
    )


def parse_smi_table(text: str) -> SmiTable:
    """Parse the default ``nvidia-smi`` table (box drawing; R450+ three-line GPU rows)."""
    require_text(text, "nvidia-smi")
    raise_if_failed(text)
    lines = split_lines(text)
    title = next((m for m in (_TITLE_RE.search(ln) for ln in lines) if m), None)
    if title is None:
        raise ParseError("nvidia-smi: no 'NVIDIA-SMI x Driver Version: y' title line")
    start = next((i for i, ln in enumerate(lines) if ln.startswith("|=")), None)
    if start is None:
        raise ParseError("nvidia-smi: no '|====' line above the GPU rows")
    groups: list[list[str]] = []
    current: list[str] = []
    for ln in lines[start + 1 :]:
        if ln.startswith("|"):
            current.append(ln)
        elif ln.startswith("+"):
            if current:
                groups.append(current)
            current = []
        else:
            break
    if current:
        groups.append(current)
    gpus = tuple(_table_gpu(g, f"GPU row {n}") for n, g in enumerate(groups))
    processes: list[str] = []
    proc_hdr = next((i for i, ln in enumerate(lines) if "| Processes:" in ln), None)
    if proc_hdr is not None:
        sep = next((i for i in range(proc_hdr, len(lines)) if lines[i].startswith("|=")), None)
        if sep is not None:
            for ln in lines[sep + 1 :]:
                if not ln.startswith("|"):
                    break
                processes.append(ln.strip().strip("|").strip())
    cuda = title.group("cuda")
    return SmiTable(
        smi_version=title.group("smi"),
        driver_version=title.group("driver"),
        cuda_version=None if cuda is None or cuda == "N/A" else cuda,
        gpus=gpus,
        processes=tuple(processes),
    )
