"""The lab confines what it runs: a lab container (and the node) see only their own root (issue #19).

Real namespaces, real bash, real files: a canary in the machine's /srv and in the project directory
must survive `rm -rf` and `venv.build`-style `recreate` from inside a lab container, and the
machine's /root/.ssh and the worktree must not be readable from there.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from provisioner import quoting
from provisioner.lab import render
from provisioner.lab.lab import LAB_MARKER, Lab, LabError
from provisioner.lab.sandbox import lab_host, node_fs, project_dir
from provisioner.lab.state import LabState
from tests.support.lab import ct, gpu_ct, node, start_services
from tests.support.lab import lab_state as make_lab
from tests.support.require import require

pytestmark = pytest.mark.timeout(600)  # a deadline, not a speed check: a lab under a loaded 2-core CI


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


# --- issue 23 item 1: the lab server and its SFTP never act outside the lab for a view ---------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LabState, dict[str, Any]]]:
    """A lab with its SSH endpoint and API serving (as `lab up` runs them), CT 200 running."""
    require(shutil.which("unshare") is not None and _userns(), "unprivileged user namespaces are not available")
    base = tmp_path_factory.mktemp("served")
    state = Lab(base / "lab").create_state()
    gpu_ct(state)
    services = start_services(state)
    try:
        yield state, services.connection()
    finally:
        services.stop()


def _ssh(conn: dict[str, Any], command: str) -> tuple[int | None, str]:
    c = conn["ssh"]

    async def go() -> tuple[int | None, str]:
        async with asyncssh.connect(c["host"], c["port"], username="root", client_keys=[c["key_file"]],
                                    known_hosts=c["known_hosts"]) as ssh:
            r = await ssh.run(command, check=False)
            return r.exit_status, str(r.stdout) + str(r.stderr)

    return asyncio.run(go())


def _machine_canary(tmp_path: Path) -> tuple[Path, bytes]:
    """A file of the machine's (outside the lab root) that nothing of the lab may change."""
    machine = tmp_path / "machine"
    machine.mkdir()
    canary = machine / "canary"
    data = f"machine canary {secrets.token_hex(8)}\n".encode()
    canary.write_bytes(data)
    return canary, data


def test_symlinked_node_file_never_rewrites_a_machine_file(tmp_path: Path,
                                                          served: tuple[LabState, dict[str, Any]]) -> None:
    state, conn = served
    canary, data = _machine_canary(tmp_path)
    version = state.root / "node" / "sys-module" / "nvidia" / "version"
    # from inside CT 200: the lab's node files are not even there to replace
    status, out = _ssh(conn, quoting.join(quoting.pct_exec(200, quoting.bash_lc(
        f"ls {state.root}/node | sed 's/^/ENTRY:/'; ln -sfn {canary} {version} 2>/dev/null && echo PLANTED; true"))))
    assert status == 0, out
    assert "PLANTED" not in out and "ENTRY:" not in out, out
    # from the node (root there, the node's files are its own): plant the link, then one more command
    status, out = _ssh(conn, f"ln -sfn {canary} {version} && test -L {version} && echo PLANTED")
    assert status == 0 and "PLANTED" in out, out
    status, out = _ssh(conn, "cat /sys/module/nvidia/version")
    assert canary.read_bytes() == data, "the lab server wrote through a link planted by the node"
    assert status == 0, out
    assert out == render.render_sys_module_version(lab_host(state.settings())), out  # written afresh
    assert not version.is_symlink()


def test_sftp_never_reaches_outside_the_lab(tmp_path: Path, served: tuple[LabState, dict[str, Any]]) -> None:
    state, conn = served
    canary, data = _machine_canary(tmp_path)
    machine = canary.parent
    esc = node_fs(state.root) / "tmp" / "esc"
    esc.unlink(missing_ok=True)
    esc.symlink_to(machine)  # what `ln -s` in the node (or a container holding the node's /tmp) leaves
    keylink = node_fs(state.root) / "tmp" / "keys"
    keylink.unlink(missing_ok=True)
    keylink.symlink_to(state.root / "private")
    c = conn["ssh"]
    got = tmp_path / "got"
    upload = tmp_path / "upload"
    upload.write_text("LAB upload\n")

    async def attempt(op: str, *args: str) -> str:
        async with asyncssh.connect(c["host"], c["port"], username="root", client_keys=[c["key_file"]],
                                    known_hosts=c["known_hosts"]) as ssh, ssh.start_sftp_client() as sftp:
            try:
                await getattr(sftp, op)(*args)
            except (asyncssh.SFTPError, OSError) as exc:
                return f"refused: {exc}"
            return "done"

    r_get = asyncio.run(attempt("get", "/tmp/esc/canary", str(got)))
    r_put = asyncio.run(attempt("put", str(upload), "/tmp/esc/planted"))
    r_key = asyncio.run(attempt("get", "/tmp/keys/client_key", str(tmp_path / "key")))
    r_abs = asyncio.run(attempt("get", str(state.root / "private" / "client_key"), str(tmp_path / "key2")))
    assert r_get.startswith("refused") and not got.exists(), r_get
    assert r_put.startswith("refused"), r_put
    assert sorted(p.name for p in machine.iterdir()) == ["canary"], "SFTP created a file outside the lab"
    assert canary.read_bytes() == data
    assert r_key.startswith("refused") and r_abs.startswith("refused"), (r_key, r_abs)
    assert not (tmp_path / "key").exists() and not (tmp_path / "key2").exists()
    # inside the node's own root SFTP still works (the kernel confines it, nothing is mapped)
    assert asyncio.run(attempt("put", str(upload), "/tmp/inside")) == "done"
    assert (node_fs(state.root) / "tmp" / "inside").read_text() == "LAB upload\n"


def test_no_view_reads_the_labs_secrets(served: tuple[LabState, dict[str, Any]]) -> None:
    state, conn = served
    key = Path(conn["ssh"]["key_file"])
    assert key.read_bytes().startswith(b"-----BEGIN"), key
    secrets_ = [key, state.credentials_path, Path(conn["ssh"]["known_hosts"]), state.root / "private" / "connection.json",
                state.root / "private" / "api-password"]
    script = "; ".join(f"head -c 64 {p} 2>/dev/null | grep -q . && echo READ:{p.name}" for p in secrets_)
    key_line = key.read_text().splitlines()[1]  # a line of the key's own base64, nowhere else
    script += (f"; grep -rlF --exclude-dir=newroot -D skip {key_line} {state.root} 2>/dev/null | head -3 | sed 's/^/FOUND:/'"
               f"; umount -l {state.root}/private 2>/dev/null; mount -o remount,rw {state.root} 2>/dev/null"
               f"; head -c 64 {key} 2>/dev/null | grep -q . && echo READ-AFTER-UMOUNT"
               f"; ls {state.root}/ct 2>/dev/null | grep -q . && echo SEES-CONTAINERS; true")
    status, out = _ssh(conn, quoting.join(quoting.pct_exec(200, quoting.bash_lc(script))))
    assert status == 0, out
    assert "READ" not in out and "FOUND" not in out and "SEES-CONTAINERS" not in out, out
    # the node (its commands run as root in the node view) cannot read them either, nor rewrite them
    status, out = _ssh(conn, script.replace("SEES-CONTAINERS", "node-sees-its-containers")
                       + f"; echo evil > {state.root}/private/connection.json 2>/dev/null && echo WROTE; true")
    assert status == 0, out
    assert "READ" not in out and "FOUND" not in out and "WROTE" not in out, out
    assert not (state.root / "private" / "connection.json").exists(), "the node wrote into the lab's secrets"


def test_lab_up_never_wipes_a_directory_it_did_not_make(tmp_path: Path) -> None:
    """`lab up --root DIR` wiped DIR whenever it held a lab.json (issue 23, item 7)."""
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "lab.json").write_text("{}")
    (foreign / "thesis.tex").write_text("years of work\n")
    with pytest.raises(LabError, match="not made by the lab"):
        Lab(foreign).create_state()
    assert sorted(p.name for p in foreign.iterdir()) == ["lab.json", "thesis.tex"]
    # a directory the lab made is its own to wipe and make again
    made = tmp_path / "made"
    first = Lab(made).create_state()
    (made / "ct" / "leftover").write_text("from the last lab\n")
    second = Lab(made).create_state()
    assert second.root == first.root and not (made / "ct" / "leftover").exists()
    assert (made / LAB_MARKER).is_file() and (made / "private").stat().st_mode & 0o777 == 0o700
