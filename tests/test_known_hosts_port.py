"""known_hosts matched as OpenSSH does (issue #19): a bare `host` entry is for port 22 only; on another
port only `[host]:port` counts. Real OpenSSH sshd on a random port (tests/support/sshd.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.transport.base import HostKeyError
from provisioner.transport.ssh import SshTarget, SshTransport, known_keys
from tests.support.known_hosts import config_known_hosts
from tests.support.sshd import Sshd


def _target(sshd: Sshd, kh: Path, **kw: object) -> SshTarget:
    return SshTarget(host=sshd.host, port=sshd.port, user=sshd.user, key_file=str(sshd.client_key),
                     known_hosts=str(kh), **kw)  # type: ignore[arg-type]


def _key(sshd: Sshd) -> str:
    kind, data = sshd.host_pub.read_text().split()[:2]
    return f"{kind} {data}"


async def test_bare_host_entry_is_not_trusted_for_another_port(sshd: Sshd, tmp_path: Path) -> None:
    assert sshd.port != 22
    kh = tmp_path / "kh"
    kh.write_text(f"{sshd.host} {_key(sshd)}\n")  # the right key, but recorded for port 22
    t = SshTransport(_target(sshd, kh))
    with pytest.raises(HostKeyError, match="unknown host"):
        await t.run(["true"])
    await t.close()


async def test_bracketed_entry_for_the_port_is_trusted(sshd: Sshd, tmp_path: Path) -> None:
    kh = tmp_path / "kh"
    kh.write_text(f"{sshd.host} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEs0Fo6cZZq2D7+UcNtVJCfZ2ccXZ2L3sHgw0eXQKq7e\n"
                  f"[{sshd.host}]:{sshd.port} {_key(sshd)}\n")
    t = SshTransport(_target(sshd, kh))
    assert (await t.run(["echo", "ok"])).lines == ["ok"]
    await t.close()


async def test_trusting_a_new_port_records_a_bracketed_entry(sshd: Sshd, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    kh = config_known_hosts(tmp_path, monkeypatch)
    kh.write_text(f"{sshd.host} {_key(sshd)}\n")
    t = SshTransport(_target(sshd, kh, trust_new_host=True))
    assert (await t.run(["true"])).exit_status == 0
    await t.close()
    assert f"[{sshd.host}]:{sshd.port} {_key(sshd)}" in kh.read_text()


def test_port_22_uses_the_bare_entry_only(tmp_path: Path) -> None:
    key_a = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEs0Fo6cZZq2D7+UcNtVJCfZ2ccXZ2L3sHgw0eXQKq7e"
    kh = tmp_path / "kh"
    kh.write_text(f"pve1 {key_a}\n")
    assert len(known_keys(SshTarget(host="pve1", port=22, known_hosts=str(kh)))[0]) == 1
    assert known_keys(SshTarget(host="pve1", port=2222, known_hosts=str(kh)))[0] == []
    kh.write_text(f"[pve1]:2222 {key_a}\n")
    assert known_keys(SshTarget(host="pve1", port=22, known_hosts=str(kh)))[0] == []
    assert len(known_keys(SshTarget(host="pve1", port=2222, known_hosts=str(kh)))[0]) == 1
