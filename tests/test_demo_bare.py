"""`provisioner demo` on a bare machine: OpenSSH's sshd/sftp-server, LXC and busybox hidden (issue #12).

Runs the real demo (real lab, real SSH, real HTTPS, real uv) in a private mount namespace where
those paths are over-mounted with empty files/dirs, then checks the second replay's recap has 0
changes and that nothing of the demo's lab is left in the temporary directory.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.require import require

pytestmark = pytest.mark.timeout(900)

#: hidden by whiteouts in an overlay over /usr (the files are gone, as on a machine without the packages;
#: a single mount, so the lab's user namespaces can still use /usr as an overlay's lower layer)
HIDDEN = ("lib/openssh", "sbin/sshd", "bin/lxc-start", "sbin/lxc-start", "bin/busybox", "sbin/busybox")
ROOT = Path(__file__).resolve().parents[1]


def _hide_script(argv: list[str], work: Path) -> str:
    upper, ovl = shlex.quote(str(work / "upper")), shlex.quote(str(work / "work"))
    lines = ["set -e", f"mkdir -p {upper} {ovl}"]
    for p in HIDDEN:
        q = shlex.quote(str(work / "upper" / p))
        lines.append(f"if [ -e /usr/{p} ]; then mkdir -p \"$(dirname {q})\"; mknod {q} c 0 0; fi")
    lines.append(f"mount -t overlay hide-tools -o lowerdir=/usr,upperdir={upper},workdir={ovl} /usr")
    lines.append("test ! -x /usr/sbin/sshd && test ! -e /usr/lib/openssh/sftp-server && ! command -v lxc-start "
                 ">/dev/null && ! command -v busybox >/dev/null")
    lines.append("exec " + " ".join(shlex.quote(a) for a in argv))
    return "\n".join(lines)


def test_demo_with_system_tools_hidden(tmp_path: Path) -> None:
    require(os.geteuid() == 0, "hiding system paths needs a private mount namespace as root (unshare -m)")
    require(shutil.which("unshare") is not None, "util-linux unshare is not installed")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), PROVISIONER_STATE_DIR=str(tmp_path / "state"))
    env.pop("PROVISIONER_LAB_ROOT", None)
    argv = [sys.executable, "-m", "provisioner", "demo"]
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "bash", "-c", _hide_script(argv, tmp_path / "hide")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=850, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    recaps = re.findall(r"│ \S+\s+│\s+(\d+) │\s+(\d+) │\s+(\d+) │\s+(\d+) │", out)
    assert len(recaps) == 2, out[-3000:]
    assert recaps[1][1] == "0" and recaps[1][2] == "0", recaps
    assert "LAB: stopped" in out
    assert list(tmp.iterdir()) == [], "the demo left files in its temporary directory"


def test_demo_where_usr_has_a_mount_of_its_own(tmp_path: Path) -> None:
    """WSL2 mounts /usr/lib/wsl, container runtimes bind paths under /usr (issue 22): in the lab's user
    namespaces such a mount is locked to /usr and overlayfs refuses /usr as a lower layer, which killed
    `lxc.start`. Here a directory is bound over /usr/lib/openssh and the whole demo must still pass."""
    require(os.geteuid() == 0, "a bind mount under /usr needs a private mount namespace as root (unshare -m)")
    require(shutil.which("unshare") is not None, "util-linux unshare is not installed")
    require(subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False).returncode == 0,
            "this machine refuses `unshare -m` (a private mount namespace)")
    require(Path("/usr/lib/openssh").is_dir(), "/usr/lib/openssh is not there to mount over")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    wsl = tmp_path / "wsl-like"
    wsl.mkdir()
    (wsl / "libdxcore.so").write_text("LAB test: a file of a mount under /usr\n")
    env = dict(os.environ, TMPDIR=str(tmp), PROVISIONER_STATE_DIR=str(tmp_path / "state"))
    env.pop("PROVISIONER_LAB_ROOT", None)
    argv = [sys.executable, "-m", "provisioner", "demo"]
    script = "\n".join([
        "set -e",
        f"mount --bind {shlex.quote(str(wsl))} /usr/lib/openssh",
        "grep -q ' /usr/lib/openssh ' /proc/self/mountinfo",
        "test -e /usr/lib/openssh/libdxcore.so",
        "exec " + " ".join(shlex.quote(a) for a in argv)])
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "bash", "-c", script],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=850, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    recaps = re.findall(r"│ \S+\s+│\s+(\d+) │\s+(\d+) │\s+(\d+) │\s+(\d+) │", out)
    assert len(recaps) == 2, out[-3000:]
    assert recaps[1][1] == "0" and recaps[1][2] == "0", recaps
    assert "wrong fs type" not in out, out[-3000:]
