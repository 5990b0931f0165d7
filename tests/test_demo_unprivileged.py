"""`provisioner demo` as an unprivileged uid (issue #12 item 2): the lab's node and containers in user
namespaces, no root anywhere. Run as root, the test drops to uid/gid 65534 with `setpriv` and runs the
demo from this checkout with the machine's own Python and this checkout's installed packages."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.require import require

pytestmark = pytest.mark.timeout(900)
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def user_dir() -> Iterator[Path]:
    """A directory uid 65534 can reach (pytest's tmp_path sits under root's 0700 /tmp/pytest-of-root)."""
    path = Path(tempfile.mkdtemp(prefix="demo-unprivileged-"))
    os.chown(path, 65534, 65534)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_demo_as_an_unprivileged_user(user_dir: Path) -> None:
    tmp_path = user_dir
    require(os.geteuid() == 0, "dropping to an unprivileged uid needs root (run as another user, "
                               "`uv run provisioner demo` is this test by hand)")
    require(shutil.which("setpriv") is not None, "setpriv (util-linux) is not installed")
    minor = f"{sys.version_info[0]}.{sys.version_info[1]}"
    python = Path(f"/usr/bin/python{minor}")
    require(python.exists(), f"no machine Python {minor} at {python} for the unprivileged user")
    site = Path(sysconfig.get_paths()["purelib"])
    probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                            "unshare", "-Urm", "test", "-r", str(site / "click" / "__init__.py")],
                           capture_output=True, check=False)
    require(probe.returncode == 0, "uid 65534 cannot create user namespaces or read this checkout's packages")
    from provisioner.lab.sandbox import find_uv

    uv = find_uv()
    require(uv is not None, "uv is not installed")
    assert uv is not None
    home = tmp_path / "home"
    tmp = tmp_path / "tmp"
    bin_dir = tmp_path / "bin"
    for d in (home, tmp, bin_dir):
        d.mkdir()
    shutil.copy2(uv, bin_dir / "uv")  # the user's own uv on its PATH, as a user installs it
    for d in (home, tmp):
        os.chown(d, 65534, 65534)
    # the user's own wheel folder (a CPU torch and numpy for the lab's index, provisioner/lab/torch_supply.py),
    # named as a user names one: UV_FIND_LINKS
    from provisioner.lab.sandbox import discover_pythons
    from provisioner.lab.torch_supply import TorchSupplyError, supply

    try:
        supplied = supply(discover_pythons(), progress=False)
    except TorchSupplyError as exc:
        require(False, str(exc))
        raise
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for wheel in (supplied.path, supplied.numpy):
        assert wheel is not None
        shutil.copyfile(wheel, wheels / wheel.name)
    env = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(tmp), "LANG": "C.UTF-8",
           "PYTHONPATH": f"{ROOT}:{site}", "PROVISIONER_STATE_DIR": str(home / "state"), "UV_FIND_LINKS": str(wheels)}
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                        str(python), "-m", "provisioner", "demo"], cwd=str(home), env=env,
                       capture_output=True, text=True, timeout=850, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "no_driver_loaded" not in out and "couldn't communicate with the NVIDIA driver" not in out
    recaps = re.findall(r"│ \S+\s+│\s+(\d+) │\s+(\d+) │\s+(\d+) │\s+(\d+) │", out)
    assert len(recaps) == 2 and recaps[1][1] == "0" and recaps[1][2] == "0", out[-3000:]
    assert list(tmp.iterdir()) == [], "the demo left files in its temporary directory"
