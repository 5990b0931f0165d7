"""What this machine lends the lab: the interpreter the stand-ins run with, the project they import, the
real CPython interpreters for the containers' venvs, and the real `uv`.

Below `sandbox` (which binds them into the views) and the stand-in commands (which write wrappers and
seed containers with them), so neither has to import the other.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path


def lab_python() -> str:
    """The interpreter the stand-ins run with."""
    return sys.executable


def project_dir() -> Path:
    """Directory that holds the `provisioner` package (for the stand-ins' imports)."""
    return Path(__file__).resolve().parents[2]


def lab_pythonpath() -> list[Path]:
    """Where the stand-ins (the lab's Python) import from besides its own prefix: the project, then
    this process's PYTHONPATH (a lab started with a plain Python and PYTHONPATH; bound read-only)."""
    out = [project_dir()]
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        p = Path(entry).resolve() if entry else None
        if p is not None and p.is_dir() and p not in out:
            out.append(p)
    return out


@cache
def discover_pythons() -> dict[str, Path]:
    """Real CPython interpreters on this machine: ``"3.12" -> /path/to/python3.12`` (newest patch)."""
    found: dict[str, tuple[tuple[int, ...], Path]] = {}
    roots = [Path.home() / ".pyenv" / "versions", Path("/root/.pyenv/versions"),
             Path.home() / ".local/share/uv/python", Path("/opt/python")]
    for base in roots:
        try:
            entries = sorted(base.iterdir()) if base.is_dir() else []
        except OSError:  # e.g. /root/.pyenv for another user
            continue
        for d in entries:
            m = re.search(r"(\d+)\.(\d+)\.(\d+)", d.name)
            if not m:
                continue
            minor = f"{m.group(1)}.{m.group(2)}"
            exe = d / "bin" / f"python{minor}"
            if not exe.exists():
                continue
            key = tuple(int(x) for x in m.groups())
            if minor not in found or key > found[minor][0]:
                found[minor] = (key, exe)
    for minor in ("3.10", "3.11", "3.12", "3.13", "3.14"):
        if minor not in found:
            exe_s = shutil.which(f"python{minor}", path="/usr/bin:/usr/local/bin")
            if exe_s:
                found[minor] = ((0,), Path(exe_s))
    return {k: v[1] for k, v in sorted(found.items())}


def find_uv() -> Path | None:
    """The real `uv` binary (not a pyenv shim); inside a lab view, the one the lab found
    (``PROVISIONER_LAB_UV``: the view's PATH no longer has the user's)."""
    given = os.environ.get("PROVISIONER_LAB_UV")
    if given and Path(given).exists():
        return Path(given)
    candidates: list[Path] = [Path(sys.prefix) / "bin" / "uv", Path(sys.base_prefix) / "bin" / "uv"]
    if os.environ.get("UV"):  # `uv run` names itself in $UV: a uv invoked by path, not on PATH
        candidates.append(Path(os.environ["UV"]))
    which = shutil.which("uv")
    if which:
        candidates.append(Path(which))
    for c in candidates:
        if c.exists():
            real = c.resolve()
            if "shims" not in real.parts:
                return real
    try:
        out = subprocess.run(["pyenv", "which", "uv"], capture_output=True, text=True, check=False, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return Path(out.stdout.strip()).resolve()
    except (OSError, subprocess.SubprocessError):
        pass
    return None
