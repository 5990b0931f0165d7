"""`provisioner demo` on a bare machine: OpenSSH's sshd/sftp-server, LXC and busybox hidden (issue #12), and a
mount of its own under /usr (issue 22).

Runs the real demo (real lab, real SSH, real HTTPS, real uv) once, in a private mount namespace where those
paths are whiteouts in an overlay over /usr and a directory is bound at /usr/lib/wsl, then checks the second
replay's recap has 0 changes, what the demo prints, that its run logs outlive it and that nothing of its lab
is left in the temporary directory.
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


def _hide_script(argv: list[str], work: Path, then: list[str]) -> str:
    """Hide the tools (whiteouts in an overlay over /usr), check they are gone, run `then`, exec `argv`."""
    upper, ovl = shlex.quote(str(work / "upper")), shlex.quote(str(work / "work"))
    lines = ["set -e", f"mkdir -p {upper} {ovl}"]
    for p in HIDDEN:
        q = shlex.quote(str(work / "upper" / p))
        lines.append(f"if [ -e /usr/{p} ]; then mkdir -p \"$(dirname {q})\"; mknod {q} c 0 0; fi")
    lines.append(f"mount -t overlay hide-tools -o lowerdir=/usr,upperdir={upper},workdir={ovl} /usr")
    lines.append("test ! -x /usr/sbin/sshd && test ! -e /usr/lib/openssh/sftp-server && ! command -v lxc-start "
                 ">/dev/null && ! command -v busybox >/dev/null")
    lines.extend(then)
    lines.append("exec " + " ".join(shlex.quote(a) for a in argv))
    return "\n".join(lines)


def test_demo_on_a_bare_machine_whose_usr_has_a_mount_of_its_own(tmp_path: Path) -> None:
    """One demo run on a newcomer's machine: OpenSSH's sshd/sftp-server, LXC and busybox are missing (issue #12),
    and /usr has a mount of its own, as WSL2's /usr/lib/wsl (issue 22: in the lab's user namespaces such a
    mount is locked to /usr and overlayfs refused /usr as a lower layer, which killed `lxc.start`). The demo
    passes, its second replay changes nothing, it prints under 60 lines (one per step, the recaps, where the
    run logs are), its run logs outlive its lab, and it leaves nothing in the temporary directory."""
    require(os.geteuid() == 0, "hiding system paths needs a private mount namespace as root (unshare -m)")
    require(shutil.which("unshare") is not None, "util-linux unshare is not installed")
    require(subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False).returncode == 0,
            "this machine refuses `unshare -m` (a private mount namespace)")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    wsl = tmp_path / "wsl-like"
    wsl.mkdir()
    (wsl / "libdxcore.so").write_text("LAB test: a file of a mount under /usr\n")
    env = dict(os.environ, TMPDIR=str(tmp), PROVISIONER_STATE_DIR=str(tmp_path / "state"), COLUMNS="200")
    env.pop("PROVISIONER_LAB_ROOT", None)
    env.pop("PROVISIONER_LAB_WHEEL_CACHE", None)  # a newcomer's demo builds its own wheel index (tests/conftest.py)
    argv = [sys.executable, "-m", "provisioner", "demo"]
    # the tools hidden by an overlay over /usr, then a directory bound at /usr/lib/wsl on top of it
    submount = [f"mkdir -p /usr/lib/wsl && mount --bind {shlex.quote(str(wsl))} /usr/lib/wsl",
                "grep -q ' /usr/lib/wsl ' /proc/self/mountinfo", "test -e /usr/lib/wsl/libdxcore.so"]
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "bash", "-c",
                        _hide_script(argv, tmp_path / "hide", submount)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=850, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    recaps = re.findall(r"│ \S+\s+│\s+(\d+) │\s+(\d+) │\s+(\d+) │\s+(\d+) │", out)
    assert len(recaps) == 2, out[-3000:]
    assert recaps[1][1] == "0" and recaps[1][2] == "0", recaps
    assert "wrong fs type" not in out, out[-3000:]
    assert "LAB: stopped" in out
    lines = out.splitlines()
    assert len(lines) < 60, f"{len(lines)} lines:\n{out}"
    assert len([ln for ln in lines if re.match(r"^\s*\d+\. .+: (ok|changed) ", ln)]) == 22, out  # 11 steps x 2
    logs = re.findall(r"run log: (\S+\.jsonl)", out)
    assert len(logs) == 2 and all(Path(p).is_file() for p in logs), out
    assert all(Path(p).is_relative_to(tmp_path / "state") for p in logs)
    assert list(tmp.iterdir()) == [], "the demo left files in its temporary directory"
