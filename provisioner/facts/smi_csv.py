"""``nvidia-smi --query-gpu=... --format=csv`` (the GPU inventory, with its command) and ``nvidia-smi -L``."""

from __future__ import annotations

import re
from collections.abc import Sequence

from provisioner.facts.models import Gpu, ParseError
from provisioner.facts.nvidia_text import (
    BUS_ID_RE,
    DRIVER_VERSION_RE,
    int_prefix,
    na,
    require_text,
    split_lines,
    strip_deprecation_note,
)
from provisioner.facts.smi_failure import raise_if_failed

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
    require_text(text, "nvidia-smi --query-gpu")
    raise_if_failed(text)
    missing = [f for f in QUERY_FIELDS if f not in fields]
    if missing:
        raise ParseError(f"nvidia-smi --query-gpu: fields {missing} were not queried")
    pos = {name: i for i, name in enumerate(fields)}
    gpus: list[Gpu] = []
    for lineno, raw in enumerate(split_lines(text), start=1):
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

        index = int_prefix(cell("index"))
        if index is None or not cell("index").isdigit():
            raise ParseError(f"nvidia-smi --query-gpu line {lineno}: index {cell('index')!r} is not a number")
        bus_id = cell("pci.bus_id")
        if not BUS_ID_RE.match(bus_id):
            raise ParseError(f"nvidia-smi --query-gpu line {lineno}: bad PCI bus id {bus_id!r}")
        uuid = cell("uuid")
        if not re.match(r"^(GPU|MIG)-[0-9a-fA-F-]+$", uuid):
            raise ParseError(f"nvidia-smi --query-gpu line {lineno}: bad GPU UUID {uuid!r}")
        cc = na(cell("compute_cap"))
        if cc is not None and not re.match(r"^\d+\.\d+$", cc):
            raise ParseError(f"nvidia-smi --query-gpu line {lineno}: bad compute capability {cc!r}")
        driver = strip_deprecation_note(cell("driver_version"))[0]
        if not DRIVER_VERSION_RE.match(driver):
            raise ParseError(f"nvidia-smi --query-gpu line {lineno}: bad driver version {driver!r}")
        mem_raw = na(cell("memory.total"))
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


# --- nvidia-smi -L --------------------------------------------------------------------------------

_SMI_L_RE = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?) \(UUID: (?P<uuid>GPU-[0-9a-fA-F-]+)\)\s*$")


def parse_smi_list(text: str) -> list[tuple[int, str, str]]:
    """Parse ``nvidia-smi -L``: (index, name, UUID) per ``GPU N: <name> (UUID: GPU-...)`` line (MIG lines skipped)."""
    require_text(text, "nvidia-smi -L")
    raise_if_failed(text)
    out = []
    for raw in split_lines(text):
        m = _SMI_L_RE.match(raw.strip())
        if m:
            out.append((int(m.group("index")), m.group("name"), m.group("uuid")))
    if not out:
        raise ParseError("nvidia-smi -L: no 'GPU N: ... (UUID: GPU-...)' line")
    return out
