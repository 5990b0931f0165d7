"""The loaded kernel module: ``/sys/module/nvidia/version``, ``/proc/driver/nvidia/version`` and
``/proc/driver/nvidia/gpus/*/information``."""

from __future__ import annotations

import re

from provisioner.facts.models import DriverVersionInfo, GpuProcInfo, ParseError
from provisioner.facts.nvidia_text import DRIVER_VERSION_RE, na, normalise_bus_id, require_text, split_lines

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
    require_text(text, "/proc/driver/nvidia/version")
    lines = split_lines(text)
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
                               uuid=na(fields.get("gpu uuid", "")), model=na(fields.get("model", ""))))

    for raw in split_lines(text):
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
