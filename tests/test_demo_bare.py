"""`provisioner demo` as a newcomer runs it, every newcomer condition at once (issue 32, item 5): a bare machine
(OpenSSH's sshd/sftp-server, LXC and busybox hidden, issue #12; a mount of its own under /usr, issue 22), an
unprivileged user (uid 65534, issue #12 item 2: the lab's node and containers in user namespaces, no root
anywhere) and the user's own wheel mirror (issue 22 items 1 and 2: the machine's /opt/wheels hidden, nothing of
ours configured, a folder of the user's named by UV_FIND_LINKS).

Runs the real demo (real lab, real SSH, real HTTPS, real uv, real CPU torch) once, in a private mount namespace
where those tools are whiteouts in an overlay over /usr, a directory is bound at /usr/lib/wsl and /opt/wheels is
a tmpfs; inside it the test drops to uid/gid 65534 with `setpriv` and runs the demo from this checkout with the
machine's own Python, this checkout's installed packages and the user's own uv. It then checks the second
replay's recap has 0 changes, what the demo prints, that its run logs outlive it, that nothing is left in the
temporary directory (the demo runs with no --root, as the README's first command: its lab is a temporary
directory it removes). That the burn-in's ranks run the venv's own Python, and that a venv whose torch lost
torch.distributed fails burnin.run with that reason, is checked on a copy of the golden node
(tests/test_golden_node.py).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import scratch
from tests.support.executables import copy_executable
from tests.support.require import require

pytestmark = pytest.mark.timeout(1800)

#: hidden by whiteouts in an overlay over /usr (the files are gone, as on a machine without the packages;
#: a single mount, so the lab's user namespaces can still use /usr as an overlay's lower layer)
HIDDEN = ("lib/openssh", "sbin/sshd", "bin/lxc-start", "sbin/lxc-start", "bin/busybox", "sbin/busybox")
ROOT = Path(__file__).resolve().parents[1]
#: the project machines' wheel folder, hidden by a tmpfs (what is left is PyPI and the user's own mirror)
WHEELS = Path("/opt/wheels")
#: the unprivileged user the demo runs as (nobody)
UID = 65534
AS_USER = ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups", "--"]


@pytest.fixture
def user_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory uid 65534 can reach (pytest's tmp_path sits under root's 0700 /tmp/pytest-of-root); afterwards
    moved into the run's trash and removed in the background (`tests.support.scratch`: its lab is ~26k files)."""
    path = Path(tempfile.mkdtemp(prefix="demo-newcomer-"))
    os.chown(path, UID, UID)
    try:
        yield path
    finally:
        scratch.discard(path, scratch.trash_dir(tmp_path_factory))


def _newcomer_script(argv: list[str], work: Path, wsl: Path) -> str:
    """As root in a private mount namespace: hide the tools (whiteouts in an overlay over /usr), bind `wsl` at
    /usr/lib/wsl on top of it, hide the machine's wheel folder, check all of it, then exec `argv` as the user."""
    upper, ovl = shlex.quote(str(work / "upper")), shlex.quote(str(work / "work"))
    lines = ["set -e", f"mkdir -p {upper} {ovl}"]
    for p in HIDDEN:
        q = shlex.quote(str(work / "upper" / p))
        lines.append(f"if [ -e /usr/{p} ]; then mkdir -p \"$(dirname {q})\"; mknod {q} c 0 0; fi")
    lines.append(f"mount -t overlay hide-tools -o lowerdir=/usr,upperdir={upper},workdir={ovl} /usr")
    lines.append("test ! -x /usr/sbin/sshd && test ! -e /usr/lib/openssh/sftp-server && ! command -v lxc-start "
                 ">/dev/null && ! command -v busybox >/dev/null")
    lines += [f"mkdir -p /usr/lib/wsl && mount --bind {shlex.quote(str(wsl))} /usr/lib/wsl",
              "grep -q ' /usr/lib/wsl ' /proc/self/mountinfo", "test -e /usr/lib/wsl/libdxcore.so"]
    lines += [f"if [ -d {WHEELS} ]; then mount -t tmpfs -o size=1M hide-wheels {WHEELS}; fi",
              f"test -z \"$(ls -A {WHEELS} 2>/dev/null)\""]
    lines.append("exec " + shlex.join([*AS_USER, *argv]))
    return "\n".join(lines)


def test_demo_as_a_newcomer_unprivileged_on_a_bare_machine_with_a_users_mirror(tmp_path: Path,
                                                                                user_dir: Path) -> None:
    """One demo run on a newcomer's machine: OpenSSH's sshd/sftp-server, LXC and busybox are missing (issue #12),
    /usr has a mount of its own, as WSL2's /usr/lib/wsl (issue 22: in the lab's user namespaces such a mount is
    locked to /usr and overlayfs refused /usr as a lower layer, which killed `lxc.start`), the user is not root
    and the torch comes from the user's own mirror (UV_FIND_LINKS), nothing else configured. The demo passes,
    its second replay changes nothing, it prints under 60 lines (one per step, the recaps, where the run logs
    are), its run logs outlive its lab, and its lab, in the temporary directory, is gone."""
    # -- what the machine must allow: a private mount namespace as root, and user namespaces for uid 65534
    require(os.geteuid() == 0, "hiding system paths needs a private mount namespace as root (unshare -m), and "
                               "dropping to an unprivileged uid needs root (as another user, `uv run provisioner "
                               "demo` is this test by hand)")
    require(shutil.which("unshare") is not None, "util-linux unshare is not installed")
    require(shutil.which("setpriv") is not None, "setpriv (util-linux) is not installed")
    require(subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False).returncode == 0,
            "this machine refuses `unshare -m` (a private mount namespace)")
    minor = f"{sys.version_info[0]}.{sys.version_info[1]}"
    python = Path(f"/usr/bin/python{minor}")
    require(python.exists(), f"no machine Python {minor} at {python} for the unprivileged user")
    site = Path(sysconfig.get_paths()["purelib"])
    probe = subprocess.run([*AS_USER, "unshare", "-Urm", "test", "-r", str(site / "click" / "__init__.py")],
                           capture_output=True, check=False)
    require(probe.returncode == 0, "uid 65534 cannot create user namespaces or read this checkout's packages")
    from provisioner.lab.sandbox import discover_pythons, find_uv
    from provisioner.lab.torch_supply import TorchSupplyError, supply

    uv = find_uv()
    require(uv is not None, "uv is not installed")
    assert uv is not None
    try:
        supplied = supply(discover_pythons(), progress=False)  # what this machine's configuration supplies
    except TorchSupplyError as exc:
        require(False, str(exc))
        raise

    # -- the user's machine: a home, a temporary directory, its own uv on its PATH, its own wheel mirror
    home, tmp, node, bin_dir, mirror = (user_dir / n for n in ("home", "tmp", "node", "bin", "my-wheels"))
    for d in (home, tmp, node, bin_dir, mirror):
        d.mkdir()
    for d in (home, tmp, node):
        os.chown(d, UID, UID)
    copy_executable(uv, bin_dir / "uv")  # the user's own uv on its PATH, as a user installs it
    # the user's own wheel folder (a CPU torch and numpy for the lab's index, provisioner/lab/torch_supply.py)
    for wheel in (supplied.path, supplied.numpy):
        assert wheel is not None
        if wheel.stat().st_mode & stat.S_IROTH:
            try:
                os.link(wheel, mirror / wheel.name)
                continue
            except OSError:
                pass
        shutil.copyfile(wheel, mirror / wheel.name)
    wsl = tmp_path / "wsl-like"
    wsl.mkdir()
    (wsl / "libdxcore.so").write_text("LAB test: a file of a mount under /usr\n")
    state = node / "state"
    # nothing of ours configured: no find-links, no PROVISIONER_* but where the user's state and cache go, and
    # pip's configuration /dev/null
    env = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(tmp),
           "LANG": "C.UTF-8", "PYTHONPATH": f"{ROOT}:{site}", "PIP_CONFIG_FILE": os.devnull,
           "PROVISIONER_STATE_DIR": str(state), "PROVISIONER_CACHE_DIR": str(node / "cache"),
           "UV_FIND_LINKS": str(mirror), "NO_COLOR": "1", "COLUMNS": "200"}
    # -- the demo exactly as the README's first command runs it: no --root, its lab in a fresh temporary
    #    directory that it stops and removes itself; as the user, on the bare machine (a private mount namespace)
    script = _newcomer_script([str(python), "-m", "provisioner", "demo"], tmp_path / "hide", wsl)
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "bash", "-c", script], cwd=str(home), env=env,
                       capture_output=True, text=True, timeout=1200, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-5000:]
    recaps = re.findall(r"│ \S+\s+│\s+(\d+) │\s+(\d+) │\s+(\d+) │\s+(\d+) │", out)
    assert len(recaps) == 2, out[-3000:]
    assert recaps[1][1] == "0" and recaps[1][2] == "0", recaps
    assert "wrong fs type" not in out, out[-3000:]
    assert "no_driver_loaded" not in out and "couldn't communicate with the NVIDIA driver" not in out
    # the lab's index serves the torch of the user's mirror, for its Python (as root on a machine with that
    # Python beside the playbook's, the replay's site notice says "serves torch for Python X"; the user has
    # only the machine's Python, which the demo takes for the playbook's: `lab up` says what the index serves)
    assert f"(torch for Python {supplied.python}: the lab's containers use it)" in out, out[-3000:]
    assert re.search(rf"Build the PyTorch venv with uv: changed .*\(Python {re.escape(supplied.python)}\)", out)
    assert "LAB: stopped" in out
    lines = out.splitlines()
    assert len(lines) < 60, f"{len(lines)} lines:\n{out}"
    assert len([ln for ln in lines if re.match(r"^\s*\d+\. .+: (ok|changed) ", ln)]) == 22, out  # 11 steps x 2
    logs = re.findall(r"run log: (\S+\.jsonl)", out)
    assert len(logs) == 2 and all(Path(p).is_file() for p in logs), out
    assert all(Path(p).is_relative_to(state) for p in logs)
    # its lab (a temporary directory) and its work files are gone: nothing left in the temporary directory
    assert list(tmp.iterdir()) == [], "the demo left files in its temporary directory"
    # (the burn-in's ranks running the venv's own Python, and a venv whose torch lost torch.distributed, are
    # checked on a copy of the golden node: tests/test_golden_node.py)
