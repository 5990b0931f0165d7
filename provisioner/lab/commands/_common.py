"""Shared bits of the stand-ins: the lab state from the environment, printing, exit codes."""

from __future__ import annotations

import sys
from typing import NoReturn

from provisioner.lab.state import LabState


def state() -> LabState:
    """The lab these stand-ins belong to ($PROVISIONER_LAB_ROOT)."""
    try:
        return LabState.load()
    except FileNotFoundError as exc:
        die(f"LAB: {exc}", 255)


def out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def die(message: str, code: int = 255) -> NoReturn:
    """Print like a Perl `die` in PVE's CLI tools (message on stderr) and exit."""
    sys.stdout.flush()
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.stderr.flush()
    raise SystemExit(code)
