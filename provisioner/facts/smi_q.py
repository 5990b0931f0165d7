"""``nvidia-smi -q``: its indentation tree, the per-GPU details, and the NVLink fabric state per GPU."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from provisioner.facts.models import ParseError, SmiQGpu, SmiQuery
from provisioner.facts.nvidia_text import (
    DRIVER_VERSION_RE,
    float_prefix,
    int_prefix,
    na,
    require_text,
    split_lines,
    strip_deprecation_note,
)
from provisioner.facts.smi_failure import raise_if_failed

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
        return None if node is None or node.value is None else na(node.value)


_KV_RE = re.compile(r"^(?P<key>\S.*?)\s+:(?:\s(?P<value>.*))?$")


def parse_smi_q_tree(text: str) -> SmiNode:
    """The indentation tree of ``nvidia-smi -q`` (generic; see :func:`parse_smi_q`)."""
    root = SmiNode("", None)
    stack: list[tuple[int, SmiNode]] = [(-1, root)]
    for raw in split_lines(text):
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
        draw = float_prefix(
            _first(power_section, ("Instantaneous Power Draw",), ("Power Draw",), ("Average Power Draw",))
        )
        limit = float_prefix(
            _first(power_section, ("Current Power Limit",), ("Enforced Power Limit",), ("Power Limit",))
        )
    link = ("PCI", "GPU Link Info")
    return SmiQGpu(
        bus_id=bus_id,
        product_name=name,
        uuid=uuid,
        product_architecture=block.get("Product Architecture"),
        serial_number=block.get("Serial Number"),
        minor_number=int_prefix(block.get("Minor Number")),
        vbios_version=block.get("VBIOS Version"),
        persistence_mode=_enabled(block.get("Persistence Mode")),
        compute_cap=block.get("Compute Capability"),
        memory_total_mib=int_prefix(block.get("FB Memory Usage", "Total")),
        pcie_gen_current=int_prefix(block.get(*link, "PCIe Generation", "Current")),
        pcie_gen_max=int_prefix(block.get(*link, "PCIe Generation", "Max")),
        pcie_width_current=int_prefix(block.get(*link, "Link Width", "Current")),
        pcie_width_max=int_prefix(block.get(*link, "Link Width", "Max")),
        ecc_enabled=_enabled(block.get("ECC Mode", "Current")),
        ecc_pending=_enabled(block.get("ECC Mode", "Pending")),
        temperature_c=int_prefix(block.get("Temperature", "GPU Current Temp")),
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
    require_text(text, "nvidia-smi -q")
    raise_if_failed(text)
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
