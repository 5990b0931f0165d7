"""`provisioner lab up|status|down` as a user runs them (subprocesses; the lab runs as a daemon)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.session import lab_connection
from tests.support.require import require

pytestmark = pytest.mark.timeout(240)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from provisioner.cli import main; main()", *args], capture_output=True, text=True,
                          timeout=200, check=False)


@pytest.fixture(autouse=True)
def _cli_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    require(os.geteuid() == 0, "the lab sandboxes need root (mount namespaces, mknod)")
    require(shutil.which("unshare") is not None, "util-linux unshare is not installed")


def test_lab_up_status_down(tmp_path: Path) -> None:
    root = tmp_path / "lab"
    r = cli("lab", "up", "--root", str(root), "--scenario", "no-uvm", "--pve", "9", "--json")
    try:
        assert r.returncode == 0, r.stderr
        conn = json.loads(r.stdout.splitlines()[-1])
        assert conn["started"] is True and conn["lab"] == "LAB"
        assert conn["scenarios"] == ["no-uvm"] and conn["pve"] == "9"
        assert conn["api"]["password"] == f"file:{root}/private/api-password"
        assert (root / "private" / "api-password").stat().st_mode & 0o777 == 0o600
        assert (root / "private" / "client_key").stat().st_mode & 0o777 == 0o600
        assert conn["index_url"].startswith("http://127.0.0.1:") and conn["index_url"].endswith("/whl/")
        on_disk = lab_connection(root)
        assert on_disk["ssh"] == conn["ssh"] and on_disk["pid"] == conn["pid"]
        # the password never appears in what the lab prints
        password = (root / "private" / "api-password").read_text().strip()
        assert password not in r.stdout + r.stderr

        again = cli("lab", "up", "--root", str(root))
        assert again.returncode == 0
        assert "already running" in again.stderr and "LAB" in again.stderr

        st = cli("lab", "status", "--root", str(root), "--json")
        assert st.returncode == 0
        status = json.loads(st.stdout)
        assert status["running"] is True and status["pid"] == conn["pid"] and status["scenarios"] == ["no-uvm"]
        # what `lab status` is asked for is on stdout: `provisioner lab status | grep ssh` finds the line (issue 36)
        text = cli("lab", "status", "--root", str(root))
        assert text.returncode == 0 and text.stderr == "", text.stderr
        (ssh,) = [ln for ln in text.stdout.splitlines() if "ssh" in ln.split()[:1]]
        assert f"-p {conn['ssh']['port']}" in ssh, text.stdout
    finally:
        down = cli("lab", "down", "--root", str(root))
    assert down.returncode == 0 and "LAB: stopped" in down.stderr
    assert not (root / "private" / "connection.json").exists()
    st = cli("lab", "status", "--root", str(root), "--json")
    assert st.returncode == 1 and json.loads(st.stdout)["running"] is False
    assert cli("lab", "down", "--root", str(root)).stderr.startswith("LAB: not running")


def test_lab_up_rejects_unknown_scenario(tmp_path: Path) -> None:
    r = cli("lab", "up", "--root", str(tmp_path / "lab"), "--scenario", "meteor-strike")
    assert r.returncode == 2
    assert "meteor-strike" in r.stderr
    assert not (tmp_path / "lab").exists()


def test_connection_banner_prints_fingerprints_verbatim() -> None:
    """Rich would turn `:CD:` inside a fingerprint into an emoji; the banner's console must not (issue #12)."""
    from rich.console import Console

    from provisioner.cli.lab import _console, _describe

    fp = "AB:CD:EF:12:CD:34:[b]x[/b]"
    conn = {"node": "pve", "pve": "8.4", "scenarios": [], "root": "/lab", "pid": 1, "index_url": "http://h:1/whl/",
            "driver_mirror": "http://h:2",
            "ssh": {"host": "127.0.0.1", "port": 22, "user": "root", "key_file": "/k", "known_hosts": "/kh"},
            "api": {"port": 8006, "user": "root@pam", "password": "file:/p", "ca_file": "/ca", "fingerprint": fp}}
    plain = Console(width=400)
    with plain.capture() as cap:
        plain.print(fp)
    assert cap.get().strip() != fp  # a default Rich console does alter it: the check below can fail
    console = _console()
    console.width = 400
    with console.capture() as cap:
        for line in _describe(conn):
            console.print(line)
    assert f"(fingerprint {fp})" in cap.get()
