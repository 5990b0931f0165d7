"""Pilot tests of the Connect page against a real OpenSSH sshd: host-key dialog, failure panel, retry."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Button, Log, Switch

from provisioner.playbook import SshSettings, load
from screens.app import ProvisionerApp
from screens.dialogs import HostKeyDialog
from screens.widgets.error_panel import ErrorPanel
from screens.wizard_session import WizardSession
from tests.support.known_hosts import config_known_hosts
from tests.support.sshd import Sshd
from tests.support.tui import PLAYBOOK, screen_text, wait_for, wait_idle

pytestmark = pytest.mark.sshd


def _session(sshd: Sshd, known_hosts: Path, tmp_path: Path) -> WizardSession:
    playbook = load(PLAYBOOK)
    ssh = SshSettings(user=sshd.user, port=sshd.port, key_file=str(sshd.client_key), known_hosts=str(known_hosts))
    target = playbook.target.model_copy(update={"host": sshd.host, "ssh": ssh})
    return WizardSession(playbook.model_copy(update={"target": target}), playbook_path=str(PLAYBOOK),
                         runs_dir=tmp_path)


def _fingerprint(pub: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True).stdout
    return out.split()[1]


async def test_first_contact_asks_for_the_fingerprint_then_fails_without_pve_and_retries(
        sshd: Sshd, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    known = config_known_hosts(tmp_path, monkeypatch)  # empty: first contact (where a new key may be written)
    session = _session(sshd, known, tmp_path)
    app = ProvisionerApp(session)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: isinstance(app.screen, HostKeyDialog), what="the host-key dialog")
        dialog = app.screen
        assert isinstance(dialog, HostKeyDialog)
        assert dialog.fingerprint == _fingerprint(sshd.host_pub)
        assert dialog.fingerprint in screen_text(app)
        await pilot.click("#hk-trust")
        await wait_idle(app, pilot)

        page = app.screen
        assert page.name == "connect"
        # The key was recorded only after the confirmation, and it is the key whose fingerprint was confirmed.
        assert session.confirmed_fingerprint == dialog.fingerprint
        assert sshd.host_pub.read_text().split()[1] in known.read_text()
        # This sshd is not a Proxmox node: node.connect fails with a clear panel.
        run = session.runs[0]
        assert run.status == "failed"
        assert "does not look like a Proxmox VE node" in run.message
        panel = page.query_one(ErrorPanel)
        assert panel.shown
        text = screen_text(app)
        assert "Connect to the Proxmox node failed" in text
        assert page.query_one("#run", Button).label.plain == "Retry"

        # Turn off the PVE requirement in the generic form and retry.
        switch = page.query_one("#s0--require_pve", Switch)
        switch.value = False
        await pilot.pause()
        assert session.runs[0].spec.params == {"require_pve": False}
        await pilot.click("#retry")
        await wait_idle(app, pilot)
        assert session.runs[0].status == "ok"
        assert not panel.shown
        assert any(line.startswith("logged in as root") for line in session.runs[0].notes)
        log_text = "\n".join(page.query_one("#log", Log).lines)
        assert "node.connect: ok" in log_text
        assert session.recorded_playbook().steps[0].params == {"require_pve": False}


async def test_refusing_the_fingerprint_does_not_connect(sshd: Sshd, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    known = tmp_path / "known_hosts"
    session = _session(sshd, known, tmp_path)
    app = ProvisionerApp(session)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: isinstance(app.screen, HostKeyDialog), what="the host-key dialog")
        await pilot.press("escape")
        await wait_idle(app, pilot)
        assert app.screen.name == "connect"
        assert session.runs[0].status == "pending"
        assert not known.exists() or known.read_text() == ""
        assert "not trusted" in screen_text(app)


async def test_a_changed_host_key_is_refused_loudly(sshd: Sshd, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    known = tmp_path / "known_hosts"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = (tmp_path / "other.pub").read_text().split()
    known.write_text(f"[{sshd.host}]:{sshd.port} {other[0]} {other[1]}\n")
    session = _session(sshd, known, tmp_path)
    app = ProvisionerApp(session)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("ctrl+r")
        await wait_idle(app, pilot)
        assert not isinstance(app.screen, HostKeyDialog)
        run = session.runs[0]
        assert run.status == "failed"
        assert "HOST KEY CHANGED" in run.message
        assert app.screen.query_one(ErrorPanel).shown
