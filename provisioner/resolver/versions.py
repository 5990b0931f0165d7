"""Pure parsers and comparisons for compute capabilities, driver, CUDA, Python and glibc versions."""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import Version

_CC_DOTTED = re.compile(r"^(\d{1,2})\.(\d)$")
_CC_SM = re.compile(r"^(?:sm_|compute_)?(\d{1,2})(\d)([af]?)$")
_DRIVER = re.compile(r"^\d{2,4}(\.\d{1,3}){0,2}$")
_PYTHON = re.compile(r"^(?:cp|py)?(3)\.?(\d{1,2})(?:\.\d+)?(t?)$")
_GLIBC = re.compile(r"^(\d)\.(\d{1,3})$")


@dataclass(frozen=True, order=True)
class CC:
    """A compute capability such as 12.0 (ordered numerically: 9.0 < 10.0)."""

    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def sm(self) -> str:
        return f"sm_{self.major}{self.minor}"


def parse_cc(text: str) -> CC:
    """'12.0', '8.6' (what nvidia-smi --query-gpu=compute_cap prints) or 'sm_120'/'120'."""
    value = text.strip().lower()
    m = _CC_DOTTED.match(value)
    if m:
        return CC(int(m.group(1)), int(m.group(2)))
    if value.startswith("sm_"):
        m = _CC_SM.match(value)
        if m and not m.group(3):
            return CC(int(m.group(1)), int(m.group(2)))
    raise ValueError(f"not a compute capability: {text!r} (expected e.g. 8.6 or 12.0)")


def parse_version_tuple(text: str) -> tuple[int, ...]:
    """'595.71.05' -> (595, 71, 5); used for driver versions and their floors (a ValueError if malformed)."""
    return Version(text).release


def parse_driver(text: str) -> tuple[int, ...]:
    """An NVIDIA Linux driver version: '595.71.05', '470.86' or '580'."""
    value = text.strip()
    if not _DRIVER.match(value):
        raise ValueError(f"not an NVIDIA driver version: {text!r} (expected e.g. 595.71.05)")
    return parse_version_tuple(value)


def driver_at_least(driver: tuple[int, ...], floor: str) -> bool:
    """Compare with zero padding: (580, 95, 5) >= '580' and (570, 26) >= '570.26'."""
    return Version(".".join(map(str, driver))) >= Version(floor)  # packaging pads the shorter with zeros


def driver_branch(driver: tuple[int, ...]) -> int:
    return driver[0]


def normalize_python(text: str) -> str:
    """'3.12', '3.12.4', 'cp312', '3.13t' -> '3.12' / '3.13t'."""
    value = text.strip().lower()
    m = _PYTHON.match(value)
    if not m:
        raise ValueError(f"not a Python version: {text!r} (expected e.g. 3.12 or 3.13t)")
    return f"{m.group(1)}.{int(m.group(2))}{m.group(3)}"


def parse_glibc(text: str) -> tuple[int, int]:
    """'2.39' (what `ldd --version` reports) -> (2, 39)."""
    m = _GLIBC.match(text.strip())
    if not m:
        raise ValueError(f"not a glibc version: {text!r} (expected e.g. 2.28)")
    return int(m.group(1)), int(m.group(2))


def cuda_tuple(cuda: str) -> tuple[int, int]:
    major, minor = Version(cuda).release[:2]  # '12.8' -> (12, 8); '12' is a ValueError, as before
    return major, minor


def cc_from_text(text: str) -> CC:
    """A CC as written in the data file ('10.0')."""
    major, minor = text.split(".")
    return CC(int(major), int(minor))


@dataclass(frozen=True)
class ArchEntry:
    """One entry of a build's arch list: SASS ('sm_86', 'sm_90a') or PTX ('compute_120')."""

    kind: str  # "sass" | "ptx"
    code: str  # "86", "90a", "120"
    cc: CC
    arch_specific: bool  # sm_90a / sm_100f style targets


def parse_arch_entry(entry: str) -> ArchEntry:
    m = _CC_SM.match(entry.strip().lower())
    if not m or not entry.startswith(("sm_", "compute_")):
        raise ValueError(f"not an arch-list entry: {entry!r}")
    kind = "ptx" if entry.startswith("compute_") else "sass"
    code = f"{m.group(1)}{m.group(2)}{m.group(3)}"
    return ArchEntry(kind, code, CC(int(m.group(1)), int(m.group(2))), bool(m.group(3)))
