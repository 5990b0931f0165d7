"""The lab confines what it runs: a lab container (and the node) see only their own root (issue #19).

Real namespaces, real bash, real files: a canary in the machine's /srv and in the project directory
must survive `rm -rf` and `venv.build`-style `recreate` from inside a lab container, and the
machine's /root/.ssh and the worktree must not be readable from there.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.lab.sandbox import project_dir
from tests.support.require import require
from tests.test_lab_sandbox import ct, gpu_ct, make_lab, node

pytestmark = pytest.mark.timeout(180)


def _userns() -> bool:
    return subprocess.run(["unshare", "-Urm", "true"], capture_output=True, check=False).returncode == 0


@pytest.fixture
def canaries() -> Iterator[tuple[Path, Path, str]]:
    require(shutil.which("unshare") is not None and _userns(), "unprivileged user namespaces are not available")
    token = secrets.token_hex(8)
    srv = Path("/srv") / f"lab-canary-{token}"
    proj = project_dir() / f".lab-canary-{token}"
    try:
        srv.mkdir(parents=True)
        (srv / "keep").write_text(token)
    except PermissionError:
        pytest.skip("cannot write a canary in /srv as this user")
    proj.write_text(token)
    try:
        yield srv, proj, token
    finally:
        shutil.rmtree(srv, ignore_errors=True)
        proj.unlink(missing_ok=True)


def test_container_cannot_touch_the_machine(tmp_path: Path, canaries: tuple[Path, Path, str]) -> None:
    srv, proj, token = canaries
    state = make_lab(tmp_path / "lab")
    gpu_ct(state)
    script = (f"test -e {proj} && echo SAW-CANARY; test -e {srv}/keep && echo SAW-SRV; "
              f"rm -rf {srv} {srv}/keep {proj} 2>/dev/null; rm -rf /srv /opt 2>/dev/null; "
              f"mkdir -p {srv} && echo mine > {srv}/keep; echo owned > {proj} 2>/dev/null; "
              f"cat /root/.ssh/* 2>/dev/null | head -c 1 | grep -q . && echo READ-SSH; "
              f"test -e {project_dir() / 'pyproject.toml'} && echo READ-WORKTREE; "
              "test -c /dev/nvidia0 && ls -l /dev/nvidia0; true")
    r = ct(state, 200, script)
    assert r.returncode == 0, r.stdout
    assert "READ-SSH" not in r.stdout and "READ-WORKTREE" not in r.stdout and "SAW-CANARY" not in r.stdout, r.stdout
    assert "SAW-SRV" not in r.stdout, r.stdout
    # the passed device node is still what the steps check: a char device with the lab's major:minor
    assert " 195, 0 " in r.stdout.replace(",   ", ", "), r.stdout
    assert (srv / "keep").read_text() == token
    assert proj.read_text() == token
    # what the container wrote landed in its own rootfs, inside the lab root
    assert (state.ct_root(200) / "srv" / srv.name / "keep").read_text().strip() == "mine"


def test_node_cannot_touch_the_machine(tmp_path: Path, canaries: tuple[Path, Path, str]) -> None:
    srv, proj, token = canaries
    state = make_lab(tmp_path / "lab")
    r = node(state, f"rm -rf {srv} {proj} /srv/* 2>&1; test -e {project_dir() / 'README.md'} && echo READ-WORKTREE; "
                    "ls /root; true")
    assert "READ-WORKTREE" not in r.stdout, r.stdout
    assert (srv / "keep").read_text() == token
    assert proj.read_text() == token
