"""Text helpers every NVIDIA parser shares: ANSI codes, line splitting, ``N/A`` cells, number prefixes,
R610's deprecation notes, driver versions and PCI bus ids. No I/O."""

from __future__ import annotations

import re

from provisioner.facts.models import ParseError

DRIVER_VERSION_RE = re.compile(r"^\d{3}\.\d{1,3}(?:\.\d{1,3})?$")
BUS_ID_RE = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NA = frozenset({"N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]", ""})


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences (``nvidia-smi topo -m`` underlines its headers)."""
    return _ANSI_RE.sub("", text)


def split_lines(text: str) -> list[str]:
    """Lines of a command's output, escape sequences and CR removed."""
    return strip_ansi(text).replace("\r\n", "\n").split("\n")


def require_text(text: str, what: str) -> None:
    """Raise ParseError when a command printed nothing."""
    if not text.strip():
        raise ParseError(f"{what}: empty output")


#: R610 appends a note to fields it deprecates: ``610.47 [Deprecated; will be removed in CUDA 14.0. Use KMD
#: Version instead]`` (Jaded-Encoding-Thaumaturgy/vs-jetpack#295, NVIDIA/ai-cloud-validation#473).
_DEPRECATED_NOTE_RE = re.compile(r"^(?P<value>\S.*?)\s*\[\s*Deprecated\b[^\]]*\]\s*$", re.I)


def strip_deprecation_note(value: str) -> tuple[str, bool]:
    """``"610.47 [Deprecated; ...]"`` -> (``"610.47"``, True); any other value unchanged, False."""
    m = _DEPRECATED_NOTE_RE.match(value.strip())
    return (m.group("value"), True) if m else (value, False)


def na(value: str) -> str | None:
    """A cell's value, None for ``N/A``/``[Not Supported]``/... (a deprecation note stripped)."""
    v = strip_deprecation_note(value)[0].strip()
    return None if v in _NA else v


def int_prefix(value: str | None) -> int | None:
    if value is None:
        return None
    m = re.match(r"^\s*(-?\d+)", value)
    return int(m.group(1)) if m else None


def float_prefix(value: str | None) -> float | None:
    if value is None:
        return None
    m = re.match(r"^\s*(-?\d+(?:\.\d+)?)", value)
    return float(m.group(1)) if m else None


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
