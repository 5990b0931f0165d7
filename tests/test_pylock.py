"""pylock.toml as PEP 751 says, made from a real uv compile against real PyPI (upload-time included).

The proving container is this machine (`LocalTransport`, a real process per command) with a hostile `uv`
first on its PATH: the export must run the engine's uv by path (this machine's uv 0.13.9, lent into a private
folder), never the PATH's. The lock it makes is written with tomli_w, read back with packaging's pylock
reader, and installed (`uv pip install --dry-run -r pylock.toml`). PyPI unreachable: skipped (a failure
under CI=true).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tomllib
import urllib.request
from datetime import datetime
from pathlib import Path

from packaging.pylock import Pylock

from provisioner.export import pylock
from provisioner.export.collect import local_uv, make_pylock
from provisioner.steps.venv_common import UV_PIN
from provisioner.transport.local import LocalTransport
from tests.support.require import require

PYPI = "https://pypi.org/simple"


def _pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen(f"{PYPI}/six/", timeout=15) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _hostile_path(tmp: Path) -> tuple[str, Path]:
    """A PATH whose first `uv` is a wrapper that leaves a marker and answers a forged lock."""
    bindir, marker = tmp / "hostile-bin", tmp / "wrapper-ran"
    bindir.mkdir()
    wrapper = bindir / "uv"
    wrapper.write_text(f"#!/bin/sh\necho ran > {marker}\necho 'uv {UV_PIN}'\nexit 0\n")
    wrapper.chmod(0o755)
    return f"{bindir}:/usr/local/bin:/usr/bin:/bin", marker


def test_a_pylock_from_real_pypi_round_trips_through_packaging_and_uv(tmp_path: Path) -> None:
    require(_pypi_reachable(), f"PyPI ({PYPI}) is not reachable from this machine")
    uv = local_uv(UV_PIN)
    require(uv is not None, f"no uv {UV_PIN} binary on this machine (the engine lends its own uv)")
    assert uv is not None
    venv = tmp_path / "venv"
    subprocess.run([str(uv), "venv", "--quiet", "--python", sys.executable, str(venv)], check=True, timeout=300)
    (tmp_path / "req.txt").write_text("six==1.16.0\n")
    locked = subprocess.run([str(uv), "pip", "compile", "--quiet", "--no-config", str(tmp_path / "req.txt"),
                             "--generate-hashes", "--python", str(venv / "bin" / "python"), "--index-url", PYPI],
                            capture_output=True, text=True, check=True, timeout=300)
    path, marker = _hostile_path(tmp_path)
    ct = LocalTransport(env={"PATH": path})
    python = ".".join(map(str, sys.version_info[:3]))
    lock = asyncio.run(make_pylock(ct, str(venv), {"extra": {"text": locked.stdout, "index_url": PYPI}},
                                   variant="cpu", torch_index=PYPI, python=python, uv_dir=str(tmp_path / "no-uv")))
    assert not marker.exists(), "the uv on the container's PATH ran"

    (six,) = lock.packages
    (wheel,) = six.wheels or []
    assert (six.name, str(six.version), six.sdist) == ("six", "1.16.0", None)
    assert isinstance(wheel.upload_time, datetime) and wheel.upload_time.year == 2021
    assert wheel.size == 11053 and wheel.url and wheel.url.startswith("https://files.pythonhosted.org/")
    assert lock.created_by == "gpu-provisioner"
    minor = ".".join(python.split(".")[:2])
    assert str(lock.requires_python) == f"=={minor}.*"
    assert [str(m) for m in lock.environments or []] == [
        f'sys_platform == "linux" and platform_machine == "{os.uname().machine}" and python_version == "{minor}"']

    out = tmp_path / "export"
    out.mkdir()
    text = pylock.dumps(lock)
    (out / pylock.PYLOCK).write_text(text)
    assert "upload-time = 2021-05-05" in text
    assert Pylock.from_dict(tomllib.loads(text)) == lock  # packaging's reader gives the same lock back
    assert pylock.load(text) == lock
    dry = subprocess.run([str(uv), "pip", "install", "--dry-run", "--no-config", "-r", str(out / pylock.PYLOCK),
                          "--python", str(venv / "bin" / "python")], capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr
    assert "six==1.16.0" in dry.stderr + dry.stdout
