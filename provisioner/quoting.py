"""The one quoting layer: every command that reaches a shell is built here.

Remote commands travel as strings (SSH carries a string; `pct exec … -- bash -lc` takes a script),
so every argument is quoted with `shlex.quote`. NUL bytes cannot be carried by any shell or argv,
so they are refused rather than silently truncated.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence


class UnsafeArgument(ValueError):
    """An argument that no shell can carry intact (contains NUL)."""


def _check(arg: str) -> str:
    if "\x00" in arg:
        raise UnsafeArgument(f"argument contains a NUL byte: {arg[:40]!r}")
    return arg


def join(argv: Sequence[str]) -> str:
    """Quote an argv list into one POSIX shell command string; nothing in it is interpreted."""
    if not argv:
        raise ValueError("empty command")
    return " ".join(shlex.quote(_check(str(a))) for a in argv)


def script(*lines: str) -> str:
    """A bash script from lines that were themselves built with `join` (no quoting added)."""
    for line in lines:
        _check(line)
    return "\n".join(lines)


def bash_lc(script_text: str) -> list[str]:
    """argv that runs `script_text` in a login bash."""
    return ["bash", "-lc", _check(script_text)]


def pct_exec(vmid: int, argv: Sequence[str]) -> list[str]:
    """argv, run on the node, that runs `argv` inside container `vmid` (`pct exec <vmid> -- …`)."""
    if not isinstance(vmid, int) or not 100 <= vmid <= 999_999_999:
        raise ValueError(f"invalid vmid {vmid!r}")
    return ["pct", "exec", str(vmid), "--", *(_check(a) for a in argv)]


def pct_push(vmid: int, local: str, remote: str, perms: str | None = None) -> list[str]:
    """argv, run on the node, that copies node file `local` into the container at `remote`."""
    argv = ["pct", "push", str(vmid), _check(local), _check(remote)]
    if perms is not None:
        argv += ["--perms", perms]
    return argv
