"""`bundle --playbook` reaches the playbook's target the way the playbook says (issue #19): its port, key
and known_hosts — not ~/.ssh/known_hosts and the agent's keys. Real OpenSSH sshd (tests/support/sshd.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from provisioner.cli.bundle import command as bundle_command
from tests.support.sshd import Sshd


def _playbook(tmp_path: Path, sshd: Sshd, known_hosts: Path) -> Path:
    doc = {"schema_version": 1, "target": {"host": sshd.host, "ssh": {
        "user": sshd.user, "port": sshd.port, "key_file": str(sshd.client_key), "known_hosts": str(known_hosts)}},
        "steps": [{"kind": "node.connect"}]}
    path = tmp_path / "pb.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def empty_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No ~/.ssh of the user: only what the playbook names can make the connection work."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return home


def test_bundle_uses_the_playbooks_known_hosts_and_key(sshd: Sshd, tmp_path: Path, empty_home: Path) -> None:
    pb = _playbook(tmp_path, sshd, sshd.known_hosts)
    out = tmp_path / "b.tar.gz"
    res = CliRunner().invoke(bundle_command, ["--playbook", str(pb), "--venv", "/nonexistent", "-o", str(out),
                                              "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["unreachable"] is None and summary["probes"]["ok"] >= 5, summary
    assert not (empty_home / ".ssh" / "known_hosts").exists(), "the user's known_hosts was used or written"


def test_bundle_playbook_known_hosts_is_enforced(sshd: Sshd, tmp_path: Path, empty_home: Path) -> None:
    """The playbook's known_hosts lacks the key: refused (exit 4), even though the key file would log in."""
    pb = _playbook(tmp_path, sshd, tmp_path / "kh-empty")
    res = CliRunner().invoke(bundle_command, ["--playbook", str(pb), "-o", str(tmp_path / "b.tar.gz"), "--json"])
    assert res.exit_code == 4, res.output
    assert "unknown host" in json.loads(res.stdout.strip().splitlines()[-1])["unreachable"]


def test_command_line_options_still_win(sshd: Sshd, tmp_path: Path, empty_home: Path) -> None:
    pb = _playbook(tmp_path, sshd, tmp_path / "kh-empty")
    res = CliRunner().invoke(bundle_command, ["--playbook", str(pb), "--known-hosts", str(sshd.known_hosts),
                                              "--venv", "/nonexistent", "-o", str(tmp_path / "b.tar.gz"), "--json"])
    assert res.exit_code == 0, res.output
