"""What the ``.run`` installer left: ``/var/log/nvidia-installer.log`` and the installers still in /root."""

from __future__ import annotations

import re

from provisioner.facts.models import InstallerLog, InstallerRecord, ParseError
from provisioner.facts.nvidia_text import require_text, split_lines

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
    require_text(text, "nvidia-installer log")
    lines = split_lines(text)
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
