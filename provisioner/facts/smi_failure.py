"""What ``nvidia-smi`` prints when it cannot report: the failure classes (no driver, version mismatch,
no devices, NVML errors, command not found, invalid field) and the status of any invocation."""

from __future__ import annotations

import re

from provisioner.facts.models import NvidiaSmiFailed, SmiFailure, SmiFailureKind, SmiStatus
from provisioner.facts.nvidia_text import strip_ansi

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


def raise_if_failed(text: str) -> None:
    """Raise NvidiaSmiFailed when the output is one of nvidia-smi's failures."""
    failure = classify_smi_failure(text)
    if failure is not None:
        raise NvidiaSmiFailed(failure)
