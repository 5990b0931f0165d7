"""Pure parsers for NVIDIA facts: nvidia-smi outputs, kernel module version, device nodes.

No I/O here: each ``parse_*`` takes the text a command printed and returns a model from
:mod:`provisioner.facts.models`, or raises :class:`~provisioner.facts.models.ParseError`.
The commands they belong to are named in each docstring.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from provisioner.facts.models import (
    DevNode,
    DevNodes,
    DriverVersionInfo,
    Gpu,
    GpuProcInfo,
    InstallerLog,
    InstallerRecord,
    NvidiaSmiFailed,
    NvSwitchFacts,
    P2PMatrix,
    ParseError,
    PciDevice,
    ProcDevices,
    SmiFailure,
    SmiFailureKind,
    SmiQGpu,
    SmiQuery,
    SmiStatus,
    SmiTable,
    SmiTableGpu,
    TopoMatrix,
    UserspaceLibs,
)

DRIVER_VERSION_RE = re.compile(r"^\d{3}\.\d{1,3}(?:\.\d{1,3})?$")
BUS_ID_RE = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NA = frozenset({"N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]", ""})


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences (``nvidia-smi topo -m`` underlines its headers)."""
    return _ANSI_RE.sub("", text)


def _lines(text: str) -> list[str]:
    return strip_ansi(text).replace("\r\n", "\n").split("\n")


def _require_text(text: str, what: str) -> None:
    if not text.strip():
        raise ParseError(f"{what}: empty output")


# --- nvidia-smi failures ----------------------------------------------------------------------

_FAILURES: tuple[tuple[re.Pattern[str], SmiFailureKind], ...] = (
    (
        re.compile(r"Failed to initialize NVML: Driver/library version mismatch"),
        SmiFailureKind.DRIVER_LIBRARY_MISMATCH,
    ),
    (
        re.compile(r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"),
        SmiFailureKind.NO_DRIVER,
    ),
    (re.compile(r"^No devices were found", re.M), SmiFailureKind.NO_DEVICES),
    (re.compile(r"Failed to initialize NVML: Unknown Error"), SmiFailureKind.NVML_UNKNOWN_ERROR),
    (
        re.compile(r"Failed to initialize NVML: Insufficient Permissions"),
        SmiFailureKind.INSUFFICIENT_PERMISSIONS,
    ),
    (re.compile(r"NVIDIA-SMI couldn't find libnvidia-ml\.so library"), SmiFailureKind.NVML_NOT_FOUND),
    (
        re.compile(
            r"nvidia-smi: (?:command )?not found|command not found: nvidia-smi|"
            r"exec: \"?nvidia-smi\"?: executable file not found"
        ),
        SmiFailureKind.COMMAND_NOT_FOUND,
    ),
    (re.compile(r"^Field \"[^\"]+\" is not a valid field to query", re.M), SmiFailureKind.INVALID_FIELD),
    (re.compile(r"Failed to initialize NVML: "), SmiFailureKind.OTHER_NVML_ERROR),
)
_NVML_LIB_RE = re.compile(r"NVML library version:\s*(\S+)")
_INVALID_FIELD_RE = re.compile(r"Field \"([^\"]+)\" is not a valid field to query")


def classify_smi_failure(text: str) -> SmiFailure | None:
    """Classify the error text ``nvidia-smi`` prints when it cannot report (or None)."""
    plain = strip_ansi(text)
    for pattern, kind in _FAILURES:
        m = pattern.search(plain)
        if m is None:
            continue
        line_start = plain.rfind("\n", 0, m.start()) + 1
        line_end = plain.find("\n", m.start())
        message = plain[line_start : None if line_end < 0 else line_end].strip()
        lib = _NVML_LIB_RE.search(plain)
        bad_field = _INVALID_FIELD_RE.search(plain)
        return SmiFailure(
            kind=kind,
            message=message,
            nvml_library_version=lib.group(1) if lib else None,
            invalid_field=bad_field.group(1) if bad_field else None,
        )
    return None


def parse_smi_status(text: str) -> SmiStatus:
    """Status of any ``nvidia-smi`` invocation: ok, or the classified failure."""
    failure = classify_smi_failure(text)
    return SmiStatus(ok=failure is None, failure=failure)


def _raise_if_failed(text: str) -> None:
    failure = classify_smi_failure(text)
    if failure is not None:
        raise NvidiaSmiFailed(failure)


#: R610 appends a note to fields it deprecates: ``610.47 [Deprecated; will be removed in CUDA 14.0. Use KMD
#: Version instead]`` (Jaded-Encoding-Thaumaturgy/vs-jetpack#295, NVIDIA/ai-cloud-validation#473).
_DEPRECATED_NOTE_RE = re.compile(r"^(?P<value>\S.*?)\s*\[\s*Deprecated\b[^\]]*\]\s*$", re.I)


def strip_deprecation_note(value: str) -> tuple[str, bool]:
    """``"610.47 [Deprecated; ...]"`` -> (``"610.47"``, True); any other value unchanged, False."""
    m = _DEPRECATED_NOTE_RE.match(value.strip())
    return (m.group("value"), True) if m else (value, False)


def _na(value: str) -> str | None:
    v = strip_deprecation_note(value)[0].strip()
    return None if v in _NA else v


def _int_prefix(value: str | None) -> int | None:
    if value is None:
        return None
    m = re.match(r"^\s*(-?\d+)", value)
    return int(m.group(1)) if m else None


def _float_prefix(value: str | None) -> float | None:
    if value is None:
        return None
    m = re.match(r"^\s*(-?\d+(?:\.\d+)?)", value)
    return float(m.group(1)) if m else None


# --- nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] ----------------------------

QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "compute_cap",
    "driver_version",
    "memory.total",
)
"""The fields of the GPU inventory query, in the order the command asks for them."""

QUERY_GPU_COMMAND: tuple[str, ...] = (
    "nvidia-smi",
    f"--query-gpu={','.join(QUERY_FIELDS)}",
    "--format=csv,noheader",
)


def parse_gpu_query_csv(text: str, fields: Sequence[str] = QUERY_FIELDS) -> list[Gpu]:
    """Parse ``nvidia-smi --query-gpu=<fields> --format=csv[,noheader][,nounits]``.

    ``fields`` is the ``--query-gpu`` list in the order it was asked (all of
    :data:`QUERY_FIELDS` must be present). A header line, if present, is skipped.
    ``[N/A]`` / ``[Not Supported]`` become ``None`` for ``compute_cap`` and ``memory.total``.
    """
    _require_text(text, "nvidia-smi --query-gpu")
    _raise_if_failed(text)
    missing = [f for f in QUERY_FIELDS if f not in fields]
    if missing:
        raise ParseError(f"nvidia-smi --query-gpu: fields {missing} were not queried")
    pos = {name: i for i, name in enumerate(fields)}
    gpus: list[Gpu] = []
    for lineno, raw in enumerate(_lines(text), start=1):
        line = raw.strip()
        if not line:
            continue
        cells = [c.strip() for c in line.split(",")]
        if cells[0].split(" ")[0] == fields[0]:  # header: "index, name, ..., memory.total [MiB]"
            continue
        if len(cells) != len(fields):
            raise ParseError(
                f"nvidia-smi --query-gpu line {lineno}: expected {len(fields)} comma-separated "
                f"values ({', '.join(fields)}), got {len(cells)}: {line!r}"
            )

        def cell(name: str, cells: list[str] = cells) -> str:
            return cells[pos[name]]

        index = _int_prefix(cell("index"))
        if index is None or not cell("index").isdigit():
            raise ParseError(f"nvidia-smi --query-gpu line {lineno}: index {cell('index')!r} is not a number")
        bus_id = cell("pci.bus_id")
        if not BUS_ID_RE.match(bus_id):
            raise ParseError(f"nvidia-smi --query-gpu line {lineno}: bad PCI bus id {bus_id!r}")
        uuid = cell("uuid")
        if not re.match(r"^(GPU|MIG)-[0-9a-fA-F-]+$", uuid):
            raise ParseError(f"nvidia-smi --query-gpu line {lineno}: bad GPU UUID {uuid!r}")
        cc = _na(cell("compute_cap"))
        if cc is not None and not re.match(r"^\d+\.\d+$", cc):
            raise ParseError(f"nvidia-smi --query-gpu line {lineno}: bad compute capability {cc!r}")
        driver = strip_deprecation_note(cell("driver_version"))[0]
        if not DRIVER_VERSION_RE.match(driver):
            raise ParseError(f"nvidia-smi --query-gpu line {lineno}: bad driver version {driver!r}")
        mem_raw = _na(cell("memory.total"))
        memory: int | None = None
        if mem_raw is not None:
            m = re.match(r"^(\d+)(?:\s*MiB)?$", mem_raw)
            if m is None:
                raise ParseError(f"nvidia-smi --query-gpu line {lineno}: bad memory.total {mem_raw!r}")
            memory = int(m.group(1))
        gpus.append(
            Gpu(
                index=index,
                name=cell("name"),
                uuid=uuid,
                pci_bus_id=bus_id,
                compute_cap=cc,
                driver_version=driver,
                memory_mib=memory,
            )
        )
    if not gpus:
        raise ParseError("nvidia-smi --query-gpu: no GPU rows in the output")
    return gpus


# --- nvidia-smi -q ----------------------------------------------------------------------------


@dataclass
class SmiNode:
    """A line of ``nvidia-smi -q``: ``key : value`` or a section header with children."""

    key: str
    value: str | None
    children: list[SmiNode] = field(default_factory=list)

    def child(self, *path: str) -> SmiNode | None:
        node: SmiNode | None = self
        for key in path:
            if node is None:
                return None
            wanted = key.lower()
            node = next((c for c in node.children if c.key.lower() == wanted), None)
        return node

    def get(self, *path: str) -> str | None:
        """Value at ``path`` with ``N/A`` mapped to None."""
        node = self.child(*path)
        return None if node is None or node.value is None else _na(node.value)


_KV_RE = re.compile(r"^(?P<key>\S.*?)\s+:(?:\s(?P<value>.*))?$")


def parse_smi_q_tree(text: str) -> SmiNode:
    """The indentation tree of ``nvidia-smi -q`` (generic; see :func:`parse_smi_q`)."""
    root = SmiNode("", None)
    stack: list[tuple[int, SmiNode]] = [(-1, root)]
    for raw in _lines(text):
        if not raw.strip() or raw.strip().startswith("====="):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        body = raw.strip(" ")
        m = _KV_RE.match(body)
        node = SmiNode(m.group("key").strip(), (m.group("value") or "").strip()) if m else SmiNode(body.strip(), None)
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


def _enabled(value: str | None) -> bool | None:
    if value is None:
        return None
    v = value.lower()
    if v in ("enabled", "on", "yes"):
        return True
    if v in ("disabled", "off", "no"):
        return False
    return None


def _first(node: SmiNode, *paths: tuple[str, ...]) -> str | None:
    for path in paths:
        v = node.get(*path)
        if v is not None:
            return v
    return None


def _smi_q_gpu(block: SmiNode) -> SmiQGpu:
    bus_id = block.key.split(" ", 1)[1].strip()
    name = block.get("Product Name")
    uuid = block.get("GPU UUID")
    if name is None or uuid is None:
        raise ParseError(f"nvidia-smi -q: GPU block {bus_id} has no Product Name / GPU UUID")
    power_section = block.child("GPU Power Readings") or block.child("Power Readings")
    draw = limit = None
    if power_section is not None:
        draw = _float_prefix(
            _first(power_section, ("Instantaneous Power Draw",), ("Power Draw",), ("Average Power Draw",))
        )
        limit = _float_prefix(
            _first(power_section, ("Current Power Limit",), ("Enforced Power Limit",), ("Power Limit",))
        )
    link = ("PCI", "GPU Link Info")
    return SmiQGpu(
        bus_id=bus_id,
        product_name=name,
        uuid=uuid,
        product_architecture=block.get("Product Architecture"),
        serial_number=block.get("Serial Number"),
        minor_number=_int_prefix(block.get("Minor Number")),
        vbios_version=block.get("VBIOS Version"),
        persistence_mode=_enabled(block.get("Persistence Mode")),
        compute_cap=block.get("Compute Capability"),
        memory_total_mib=_int_prefix(block.get("FB Memory Usage", "Total")),
        pcie_gen_current=_int_prefix(block.get(*link, "PCIe Generation", "Current")),
        pcie_gen_max=_int_prefix(block.get(*link, "PCIe Generation", "Max")),
        pcie_width_current=_int_prefix(block.get(*link, "Link Width", "Current")),
        pcie_width_max=_int_prefix(block.get(*link, "Link Width", "Max")),
        ecc_enabled=_enabled(block.get("ECC Mode", "Current")),
        ecc_pending=_enabled(block.get("ECC Mode", "Pending")),
        temperature_c=_int_prefix(block.get("Temperature", "GPU Current Temp")),
        power_draw_w=draw,
        power_limit_w=limit,
    )


_CUDA_VERSION_RE = re.compile(r"^\d+\.\d+$")


def _version_or_none(value: str | None, pattern: re.Pattern[str]) -> str | None:
    return value if value is not None and pattern.match(value) else None


def parse_smi_q(text: str) -> SmiQuery:
    """Parse ``nvidia-smi -q`` (any driver from R450 on; absent fields become None).

    R610 deprecates ``Driver Version``/``CUDA Version`` (their values carry a ``[Deprecated; ...]`` note) in
    favour of ``KMD Version``/``CUDA UMD Version``: the new fields win, the notes are stripped and listed in
    ``deprecated_fields``; a field this parser does not know is ignored, never an error.
    """
    _require_text(text, "nvidia-smi -q")
    _raise_if_failed(text)
    if "NVSMI LOG" not in text:
        raise ParseError("nvidia-smi -q: missing the '==============NVSMI LOG==============' header")
    tree = parse_smi_q_tree(text)
    deprecated = tuple(c.key for c in tree.children
                       if c.value is not None and strip_deprecation_note(c.value)[1])
    kmd = _version_or_none(tree.get("KMD Version"), DRIVER_VERSION_RE)
    legacy = tree.get("Driver Version")
    driver = kmd or legacy
    if driver is None or not DRIVER_VERSION_RE.match(driver):
        raise ParseError(f"nvidia-smi -q: missing or bad 'KMD Version' / 'Driver Version' ({legacy!r})")
    umd = _version_or_none(tree.get("CUDA UMD Version"), _CUDA_VERSION_RE)
    attached = tree.get("Attached GPUs")
    if attached is None or not attached.isdigit():
        raise ParseError(f"nvidia-smi -q: missing or bad 'Attached GPUs' ({attached!r})")
    blocks = [c for c in tree.children if c.value is None and re.match(r"^GPU [0-9A-Fa-f]{4,8}:", c.key)]
    return SmiQuery(
        timestamp=tree.get("Timestamp"),
        driver_version=driver,
        cuda_version=umd or tree.get("CUDA Version"),
        attached_gpus=int(attached),
        gpus=tuple(_smi_q_gpu(b) for b in blocks),
        kmd_version=kmd,
        cuda_umd_version=umd,
        deprecated_fields=deprecated,
    )


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
        fan_percent=_int_prefix(_na(fan)),
        temperature_c=_int_prefix(_na(temp)),
        perf_state=perf,
        power_usage_w=_int_prefix(_na(pwr)),
        power_cap_w=_int_prefix(_na(cap)),
        memory_used_mib=_int_prefix(_na(m4.group(1) or "N/A")),
        memory_total_mib=_int_prefix(_na(m4.group(2) or "N/A")),
        gpu_util_percent=_int_prefix(_na(m5.group(1))),
        compute_mode=m5.group(2),
        mig_mode=mig,
    )


def parse_smi_table(text: str) -> SmiTable:
    """Parse the default ``nvidia-smi`` table (box drawing; R450+ three-line GPU rows)."""
    _require_text(text, "nvidia-smi")
    _raise_if_failed(text)
    lines = _lines(text)
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
    lines = _lines(text)
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
    _require_text(text, "nvidia-smi topo -m")
    _raise_if_failed(text)
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
            numa[label] = _na(extra["NUMA Affinity"])
        if "GPU NUMA ID" in extra:
            gpu_numa[label] = _na(extra["GPU NUMA ID"])
    for d in devices:
        if d not in links:
            raise ParseError(f"nvidia-smi topo -m: no row for {d}")
        if links[d][d] != "X":
            raise ParseError(f"nvidia-smi topo -m: diagonal entry for {d} is {links[d][d]!r}, expected 'X'")
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


P2P_CODES = frozenset({"X", "OK", "CNS", "GNS", "TNS", "NS", "DR", "U"})


def parse_topo_p2p(text: str) -> P2PMatrix:
    """Parse ``nvidia-smi topo -p2p r`` (or ``w``/``n``/``a``/``p``): OK/CNS/GNS/TNS/NS/DR/U."""
    _require_text(text, "nvidia-smi topo -p2p")
    _raise_if_failed(text)
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
    for g in gpus:
        if g not in status:
            raise ParseError(f"nvidia-smi topo -p2p: no row for {g}")
        if status[g][g] != "X":
            raise ParseError(f"nvidia-smi topo -p2p: diagonal entry for {g} is {status[g][g]!r}")
    legend, _ = _parse_legend(tail)
    return P2PMatrix(gpus=tuple(gpus), status=status, legend=legend)


# --- userspace driver libraries -------------------------------------------------------------

#: where the .run installer (and distribution packages) put the userspace libraries
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")
_LIB_VERSION_RE = re.compile(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)\b")


def parse_lib_versions(text: str) -> list[str]:
    """Versions from ``ls`` of ``libnvidia-ml.so.<version>`` files (the ``.so.1`` link is no version)."""
    return sorted(set(_LIB_VERSION_RE.findall(text)))


def parse_userspace_libs(text: str) -> UserspaceLibs:
    """Parse ``ls -1`` of ``libcuda.so.*`` and ``libnvidia-ml.so.*`` in `LIB_DIRS` (empty = none installed)."""
    files = tuple(line.strip() for line in text.splitlines() if line.strip().startswith("/"))
    return UserspaceLibs(files=files, versions=tuple(parse_lib_versions(text)))


# --- kernel module version --------------------------------------------------------------------


def parse_module_version(text: str) -> str:
    """Parse ``/sys/module/nvidia/version`` (a bare version such as ``595.71.05``)."""
    version = text.strip()
    if not DRIVER_VERSION_RE.match(version):
        raise ParseError(f"/sys/module/nvidia/version: {version[:80]!r} is not a driver version")
    return version


_NVRM_OPEN_RE = re.compile(
    r"NVRM version: NVIDIA UNIX Open Kernel Module for (?P<arch>\S+)"
    r"\s+(?P<ver>\d+\.\d+(?:\.\d+)?)\s*(?P<rest>.*)$"
)
_NVRM_PROP_RE = re.compile(
    r"NVRM version: NVIDIA UNIX (?:(?P<arch1>\S+) Kernel Module|Kernel Module for (?P<arch2>\S+))"
    r"\s+(?P<ver>\d+\.\d+(?:\.\d+)?)\s*(?P<rest>.*)$"
)


def parse_proc_driver_version(text: str) -> DriverVersionInfo:
    """Parse ``/proc/driver/nvidia/version`` (open and proprietary banners, + ``GCC version:``)."""
    _require_text(text, "/proc/driver/nvidia/version")
    lines = _lines(text)
    nvrm = next((ln for ln in lines if ln.startswith("NVRM version:")), None)
    if nvrm is None:
        raise ParseError("/proc/driver/nvidia/version: no 'NVRM version:' line")
    gcc_line = next((ln for ln in lines if ln.startswith("GCC version:")), None)
    gcc = gcc_line.split(":", 1)[1].strip() if gcc_line else None
    m = _NVRM_OPEN_RE.search(nvrm)
    if m:
        return DriverVersionInfo(
            version=m.group("ver"),
            flavour="open",
            arch=m.group("arch"),
            build_info=m.group("rest").strip(),
            gcc_version=gcc or None,
        )
    m = _NVRM_PROP_RE.search(nvrm)
    if m:
        return DriverVersionInfo(
            version=m.group("ver"),
            flavour="proprietary",
            arch=m.group("arch1") or m.group("arch2"),
            build_info=m.group("rest").strip(),
            gcc_version=gcc or None,
        )
    raise ParseError(f"/proc/driver/nvidia/version: unrecognised banner {nvrm.strip()!r}")


# --- /proc/devices ----------------------------------------------------------------------------


def parse_proc_devices(text: str) -> ProcDevices:
    """Parse ``/proc/devices`` into name -> major maps (first major wins for a repeated name)."""
    _require_text(text, "/proc/devices")
    section: dict[str, int] | None = None
    char: dict[str, int] = {}
    block: dict[str, int] = {}
    seen_header = False
    for lineno, raw in enumerate(_lines(text), start=1):
        line = raw.strip()
        if not line:
            continue
        if line == "Character devices:":
            section, seen_header = char, True
            continue
        if line == "Block devices:":
            section, seen_header = block, True
            continue
        m = re.match(r"^(\d+)\s+(\S.*)$", line)
        if m is None or section is None:
            raise ParseError(f"/proc/devices line {lineno}: unexpected {line!r}")
        section.setdefault(m.group(2), int(m.group(1)))
    if not seen_header:
        raise ParseError("/proc/devices: no 'Character devices:' section")
    return ProcDevices(char=char, block=block)


# --- ls -l /dev/nvidia* and stat ---------------------------------------------------------------

_LS_RE = re.compile(
    r"^(?P<type>[-bcdlps])(?P<perm>[-rwxsStT]{9})[.+@]?\s+\d+\s+(?P<owner>\S+)\s+(?P<group>\S+)\s+"
    r"(?:(?P<major>\d+),\s*(?P<minor>\d+)|\d+)\s+(?P<rest>.+)$"
)
_LS_MISSING_RE = re.compile(r"^ls: cannot access '?(?P<path>[^':]+)'?: No such file or directory")


def _perm_bits(perm: str) -> int:
    mode = 0
    bits = (
        stat.S_IRUSR,
        stat.S_IWUSR,
        stat.S_IXUSR,
        stat.S_IRGRP,
        stat.S_IWGRP,
        stat.S_IXGRP,
        stat.S_IROTH,
        stat.S_IWOTH,
        stat.S_IXOTH,
    )
    for ch, bit in zip(perm, bits, strict=True):
        if ch in "rwxst":
            mode |= bit
    special = ((2, "sS", stat.S_ISUID), (5, "sS", stat.S_ISGID), (8, "tT", stat.S_ISVTX))
    for idx, chars, bit in special:
        if perm[idx] in chars:
            mode |= bit
    return mode


def _join(directory: str | None, name: str) -> str:
    if name.startswith("/") or not directory:
        return name
    return directory.rstrip("/") + "/" + name


def parse_ls_dev(text: str, directory: str | None = None) -> DevNodes:
    """Parse ``ls -l /dev/nvidia*`` (and ``ls -l /dev/nvidia-caps``) into device nodes.

    ``directory`` names the directory listed when ``ls`` was given a single directory (its
    entries are printed without a ``dir:`` header). Non-device entries are skipped; paths ``ls``
    could not access are reported in ``missing``.
    """
    current = directory
    nodes: list[DevNode] = []
    missing: list[str] = []
    recognised = False
    for lineno, raw in enumerate(_lines(text), start=1):
        line = raw.rstrip()
        if not line.strip():
            continue
        if re.match(r"^total \d+$", line):
            recognised = True
            continue
        m_dir = re.match(r"^(/\S*):$", line)
        if m_dir:
            current, recognised = m_dir.group(1), True
            continue
        m_miss = _LS_MISSING_RE.match(line)
        if m_miss:
            missing.append(m_miss.group("path"))
            recognised = True
            continue
        m = _LS_RE.match(line)
        if m is None:
            raise ParseError(f"ls -l line {lineno}: not a long-listing entry: {line!r}")
        recognised = True
        if m.group("type") not in "cb" or m.group("major") is None:
            continue
        name = m.group("rest").split()[-1]
        nodes.append(
            DevNode(
                path=_join(current, name),
                type="c" if m.group("type") == "c" else "b",
                major=int(m.group("major")),
                minor=int(m.group("minor")),
                mode=_perm_bits(m.group("perm")),
                owner=m.group("owner"),
                group=m.group("group"),
            )
        )
    if not recognised:
        raise ParseError("ls -l: empty output")
    return DevNodes(nodes=tuple(nodes), missing=tuple(missing))


STAT_DEV_FORMAT = "%n %F %t %T %a"
"""``stat -c`` format understood by :func:`parse_stat_dev` (major/minor in hex)."""

_STAT_RE = re.compile(
    r"^(?P<path>\S+) (?P<ftype>[a-z][a-z ]*?) (?P<major>[0-9a-f]+) (?P<minor>[0-9a-f]+) (?P<mode>[0-7]{1,4})$"
)
_STAT_MISSING_RE = re.compile(r"^stat: cannot (?:stat|statx) '(?P<path>[^']+)': No such file or directory")


def parse_stat_dev(text: str) -> DevNodes:
    """Parse ``stat -c '%n %F %t %T %a' /dev/nvidia*`` (hex major/minor, octal mode)."""
    _require_text(text, "stat")
    nodes: list[DevNode] = []
    missing: list[str] = []
    for lineno, raw in enumerate(_lines(text), start=1):
        line = raw.strip()
        if not line:
            continue
        m_miss = _STAT_MISSING_RE.match(line)
        if m_miss:
            missing.append(m_miss.group("path"))
            continue
        m = _STAT_RE.match(line)
        if m is None:
            raise ParseError(f"stat line {lineno}: expected '{STAT_DEV_FORMAT}' output, got {line!r}")
        ftype = m.group("ftype")
        if ftype not in ("character special file", "block special file"):
            continue
        nodes.append(
            DevNode(
                path=m.group("path"),
                type="c" if ftype.startswith("character") else "b",
                major=int(m.group("major"), 16),
                minor=int(m.group("minor"), 16),
                mode=int(m.group("mode"), 8),
            )
        )
    return DevNodes(nodes=tuple(nodes), missing=tuple(missing))


# --- /var/log/nvidia-installer.log ------------------------------------------------------------

_SUCCESS_RE = re.compile(
    r"Installation of the NVIDIA Accelerated Graphics Driver for Linux-\S+ \(version: (?P<ver>\d+(?:\.\d+)+)\) "
    r"is now complete"
)
_INSTALLING_RE = re.compile(r"Installing NVIDIA driver version (?P<ver>\d+(?:\.\d+)+)")
_FAILED_STEP_RE = re.compile(r"^-> .*\bfailed\b", re.I)


def _collect_message(lines: list[str], i: int) -> tuple[str, int]:
    """Join an ``ERROR:``/``WARNING:`` message with its indented continuation lines."""
    parts = [lines[i].strip()]
    j = i + 1
    while (
        j < len(lines)
        and lines[j].startswith((" ", "\t"))
        and lines[j].strip()
        and not lines[j].lstrip().startswith(("->", "ERROR:", "WARNING:"))
    ):
        parts.append(lines[j].strip())
        j += 1
    return " ".join(parts), j


def parse_installer_log(text: str) -> InstallerLog:
    """Extract the decisive lines of ``/var/log/nvidia-installer.log`` (or the installer's output).

    ``outcome`` is ``succeeded`` when the "is now complete" marker is present, ``failed`` when an
    ``ERROR:`` line is (``ERROR: Installation has failed.`` in particular), else ``incomplete``.
    """
    _require_text(text, "nvidia-installer log")
    lines = _lines(text)
    version_m = re.search(r"^installer version:\s*(\S+)", text, re.M)
    cmdline: list[str] = []
    idx = next((i for i, ln in enumerate(lines) if ln.strip() == "nvidia-installer command line:"), None)
    if idx is not None:
        for ln in lines[idx + 1 :]:
            if not ln.startswith("    ") or not ln.strip():
                break
            cmdline.append(ln.strip())
    errors: list[str] = []
    warnings: list[str] = []
    failed_steps: list[str] = []
    decisive: list[str] = []
    load_error: str | None = None
    driver_version: str | None = None
    succeeded = False
    markers = 0
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped.startswith("ERROR:"):
            msg, i = _collect_message(lines, i)
            errors.append(msg)
            decisive.append(msg)
            markers += 1
            continue
        if stripped.startswith("WARNING:"):
            msg, i = _collect_message(lines, i)
            warnings.append(msg)
            markers += 1
            continue
        if stripped.startswith("->"):
            markers += 1
            if stripped.startswith("-> Kernel module load error:"):
                load_error = stripped.split(":", 1)[1].strip()
                decisive.append(stripped)
            elif _FAILED_STEP_RE.match(stripped):
                failed_steps.append(stripped)
                decisive.append(stripped)
        m_inst = _INSTALLING_RE.search(stripped)
        if m_inst:
            driver_version = m_inst.group("ver")
        m_ok = _SUCCESS_RE.search(stripped)
        if m_ok:
            succeeded = True
            driver_version = m_ok.group("ver")
            decisive.append(stripped)
            markers += 1
        i += 1
    if version_m is None and markers == 0:
        raise ParseError("nvidia-installer log: no installer header, '->' steps, ERROR: or WARNING: lines")
    outcome = "failed" if errors else ("succeeded" if succeeded else "incomplete")
    return InstallerLog(
        installer_version=version_m.group(1) if version_m else None,
        command_line=tuple(cmdline),
        outcome=outcome,
        driver_version=driver_version or (version_m.group(1) if version_m else None),
        errors=tuple(errors),
        failed_steps=tuple(failed_steps),
        warnings=tuple(warnings),
        kernel_module_load_error=load_error,
        decisive_lines=tuple(decisive),
    )


INSTALLER_RECORD_SEPARATOR = "--- nvidia-installer.log ---"


def parse_installer_record(text: str) -> InstallerRecord:
    """Parse ``ls -1 /root/NVIDIA-Linux-*.run``, the separator line, then the installer log (may be empty)."""
    head, sep, log = text.partition(INSTALLER_RECORD_SEPARATOR)
    if not sep:
        raise ParseError(f"installer record: no {INSTALLER_RECORD_SEPARATOR!r} line")
    leftovers = tuple(line.strip().rsplit("/", 1)[-1] for line in head.splitlines()
                      if re.fullmatch(r"\S*/NVIDIA-Linux-[\w.-]+\.run", line.strip()))
    parsed: InstallerLog | None = None
    if log.strip():
        try:
            parsed = parse_installer_log(log)
        except ParseError:
            parsed = None  # a log that is no installer's says nothing about the last install
    return InstallerRecord(leftover_installers=leftovers, log=parsed)


# --- /proc/driver/nvidia/gpus/<bus>/information -----------------------------------------------


def normalise_bus_id(bus: str) -> str:
    """``0000:17:00.0`` (proc, lspci -D) or ``00000000:17:00.0`` (nvidia-smi) -> ``00000000:17:00.0``."""
    parts = bus.strip().split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    if len(parts) != 3:
        raise ParseError(f"not a PCI bus id: {bus!r}")
    domain, b, rest = parts
    return f"{int(domain, 16):08X}:{b.upper()}:{rest.upper()}"


GPU_INFORMATION_COMMAND: tuple[str, ...] = (
    "sh", "-c", 'for f in /proc/driver/nvidia/gpus/*/information; do [ -r "$f" ] || continue; '
                'echo "==> $f"; cat "$f"; done; true')


def parse_gpu_information(text: str) -> list[GpuProcInfo]:
    """Parse the ``==> <path>`` headed concatenation of ``/proc/driver/nvidia/gpus/*/information`` files
    (NVIDIA README "procinterface": ``Device Minor:`` is the minor of ``/dev/nvidiaN``)."""
    out: list[GpuProcInfo] = []
    bus: str | None = None
    fields: dict[str, str] = {}

    def flush() -> None:
        if bus is None:
            return
        minor = fields.get("device minor")
        if minor is None or not minor.isdigit():
            raise ParseError(f"{bus}/information: no 'Device Minor' line")
        location = fields.get("bus location") or bus
        out.append(GpuProcInfo(bus_id=normalise_bus_id(location), minor=int(minor),
                               uuid=_na(fields.get("gpu uuid", "")), model=_na(fields.get("model", ""))))

    for raw in _lines(text):
        line = raw.strip()
        m = re.match(r"^==> /proc/driver/nvidia/gpus/([^/]+)/information$", line)
        if m:
            flush()
            bus, fields = m.group(1), {}
            continue
        if bus is None or ":" not in line:
            continue
        key, value = line.split(":", 1)
        fields[key.strip().lower()] = value.strip()
    flush()
    return out


# --- lspci -nn, NVSwitch ------------------------------------------------------------------------

_LSPCI_NN_RE = re.compile(
    r"^(?P<slot>[0-9A-Fa-f:.]+)\s+(?P<desc>.*?)\s*\[(?P<cls>[0-9a-fA-F]{4})\]:\s*(?P<rest>.*?)"
    r"\s*\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]")


def parse_lspci_nn(text: str) -> list[PciDevice]:
    """Parse ``lspci -nn`` lines (``07:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3]``)."""
    out = []
    for raw in _lines(text):
        m = _LSPCI_NN_RE.match(raw.strip())
        if m:
            out.append(PciDevice(slot=m.group("slot"), class_id=m.group("cls").lower(),
                                 vendor_id=m.group("vendor").lower(), device_id=m.group("device").lower(),
                                 description=f"{m.group('desc')}: {m.group('rest')}"))
    return out


NVSWITCH_COMMAND: tuple[str, ...] = (
    "sh", "-c", "lspci -nn -d 10de: 2>/dev/null | sed 's/^/pci: /'; "
                "for d in /dev/nvidia-nvswitch[0-9]*; do [ -e \"$d\" ] && echo \"dev: $d\"; done; "
                "ls -1 /proc/driver/nvidia-nvswitch/devices 2>/dev/null | sed 's/^/proc: /'; true")

#: PCI class of an NVSwitch: "Bridge [0680]" (e.g. 10de:1af1 NVSwitch, 10de:22a3 H100 NVSwitch in pci.ids)
NVSWITCH_PCI_CLASS = "0680"


def parse_nvswitch(text: str) -> NvSwitchFacts:
    """Parse the output of :data:`NVSWITCH_COMMAND` (prefixed lines pci:/dev:/proc:)."""
    pci: list[str] = []
    devs: list[str] = []
    procs: list[str] = []
    for raw in _lines(text):
        line = raw.strip()
        if line.startswith("pci: "):
            for d in parse_lspci_nn(line[5:]):
                if d.vendor_id == "10de" and d.class_id == NVSWITCH_PCI_CLASS:
                    pci.append(f"{d.slot} [{d.vendor_id}:{d.device_id}]")
        elif line.startswith("dev: "):
            devs.append(line[5:].strip())
        elif line.startswith("proc: ") and line[6:].strip():
            procs.append(line[6:].strip())
    return NvSwitchFacts(pci=tuple(pci), dev_nodes=tuple(devs), proc_devices=tuple(procs))


def parse_fabric_states(text: str) -> dict[str, str]:
    """``nvidia-smi -q``: bus id -> ``Fabric`` / ``State`` of GPUs attached to an NVLink fabric (N/A omitted)."""
    tree = parse_smi_q_tree(text)
    out: dict[str, str] = {}
    for block in tree.children:
        if block.value is None and re.match(r"^GPU [0-9A-Fa-f]{4,8}:", block.key):
            state = block.get("Fabric", "State")
            if state is not None:
                out[block.key.split(" ", 1)[1].strip()] = state
    return out


# --- nvidia-smi -L --------------------------------------------------------------------------------

_SMI_L_RE = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?) \(UUID: (?P<uuid>GPU-[0-9a-fA-F-]+)\)\s*$")


def parse_smi_list(text: str) -> list[tuple[int, str, str]]:
    """Parse ``nvidia-smi -L``: (index, name, UUID) per ``GPU N: <name> (UUID: GPU-...)`` line (MIG lines skipped)."""
    _require_text(text, "nvidia-smi -L")
    _raise_if_failed(text)
    out = []
    for raw in _lines(text):
        m = _SMI_L_RE.match(raw.strip())
        if m:
            out.append((int(m.group("index")), m.group("name"), m.group("uuid")))
    if not out:
        raise ParseError("nvidia-smi -L: no 'GPU N: ... (UUID: GPU-...)' line")
    return out
