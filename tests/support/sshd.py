"""A real OpenSSH sshd on 127.0.0.1 for tests: own host key, own client key, random port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.require import require

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else None)


@dataclass
class Sshd:
    host: str
    port: int
    user: str
    client_key: Path
    host_key: Path
    host_pub: Path
    known_hosts: Path  # holds the correct host key
    workdir: Path
    process: subprocess.Popen[bytes]

    def known_hosts_line(self) -> str:
        key = self.host_pub.read_text().split()
        return f"[{self.host}]:{self.port} {key[0]} {key[1]}\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _keygen(path: Path, kind: str = "ed25519") -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)], check=True)


def start_sshd(workdir: Path, extra_config: str = "") -> Sshd:
    """Start sshd (needs root for privilege separation, as in CI) and wait until it accepts."""
    require(SSHD is not None, "OpenSSH sshd is not installed (apt-get install openssh-server)")
    require(os.geteuid() == 0, "sshd tests run as root (sshd needs its privsep user)")
    assert SSHD is not None
    workdir.mkdir(parents=True, exist_ok=True)
    os.chmod(workdir, 0o755)
    host_key = workdir / "ssh_host_ed25519_key"
    client_key = workdir / "id_ed25519"
    _keygen(host_key)
    _keygen(client_key)
    auth = workdir / "authorized_keys"
    auth.write_text((workdir / "id_ed25519.pub").read_text())
    os.chmod(auth, 0o600)
    Path("/run/sshd").mkdir(exist_ok=True)
    port = _free_port()
    config = workdir / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {auth}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PubkeyAuthentication yes\nPermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n"
        f"PidFile {workdir}/sshd.pid\nLogLevel ERROR\nAcceptEnv LANG LC_*\n"
        "ClientAliveInterval 2\nClientAliveCountMax 3\n" + extra_config
    )
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(config)], stderr=open(workdir / "sshd.log", "wb")
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited: {(workdir / 'sshd.log').read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                if s.recv(4).startswith(b"SSH-"):
                    break
        except OSError:
            time.sleep(0.05)
    known = workdir / "known_hosts"
    sshd = Sshd("127.0.0.1", port, "root", client_key, host_key, workdir / "ssh_host_ed25519_key.pub",
                known, workdir, proc)
    known.write_text(sshd.known_hosts_line())
    return sshd


def stop_sshd(sshd: Sshd) -> None:
    sshd.process.terminate()
    try:
        sshd.process.wait(5)
    except subprocess.TimeoutExpired:
        sshd.process.kill()


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    server = start_sshd(tmp_path / "sshd")
    yield server
    stop_sshd(server)
