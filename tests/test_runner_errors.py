"""Errors of the Proxmox login reach the recap with their own exit code and fix (issue #19), never as
"internal error … a bug of gpu-provisioner": TLS refusal → 4, a missing secret → 2. Real HTTPS to the
lab's API server (tests/support/lab.py); the node is this machine (target.local)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from provisioner.events import Bus, Event, StepFinished
from provisioner.playbook import loads
from provisioner.runner import run_host
from provisioner.session import pve_factory
from provisioner.transport.local import LocalTransport
from tests.support.lab import ApiLab as Lab


def _playbook(port: int, api: str) -> str:
    return (f"schema_version: 1\ntarget:\n  host: 127.0.0.1\n  local: true\n  container: 200\n"
            f"  api:\n    port: {port}\n{api}steps:\n  - kind: lxc.create\n")


async def _plan(text: str) -> tuple[int, str]:
    pb = loads(text)
    events: list[Event] = []
    bus = Bus(events.append)
    result = await run_host(pb, bus, LocalTransport(bus, "node"), mode="plan", host="node",
                            pve_factory=pve_factory(pb.target))
    (finished,) = [e for e in events if isinstance(e, StepFinished)]
    assert finished.status == "failed"
    return result.exit_code, finished.message


async def test_tls_refusal_is_exit_4_with_a_fix(make_lab: Callable[..., Lab], monkeypatch: pytest.MonkeyPatch) -> None:
    state, server = make_lab()
    monkeypatch.setenv("PVE_LAB_PW", state.credentials().password)
    # The system CA bundle does not sign the lab's certificate.
    code, message = await _plan(_playbook(server.port, "    password: env:PVE_LAB_PW\n"
                                                       "    ca_file: /etc/ssl/certs/ca-certificates.crt\n"))
    assert code == 4
    assert "refusing the Proxmox API: TLS certificate of https://127.0.0.1" in message
    assert "fix: set target.api.ca_file" in message and "internal error" not in message
    # A wrong pinned fingerprint is refused the same way.
    code, message = await _plan(_playbook(server.port, "    password: env:PVE_LAB_PW\n    fingerprint: " +
                                          ":".join(["AB"] * 32) + "\n"))
    assert code == 4 and "does not match the pinned fingerprint" in message


async def test_missing_secret_is_exit_2(make_lab: Callable[..., Lab], monkeypatch: pytest.MonkeyPatch) -> None:
    _, server = make_lab()
    monkeypatch.delenv("PVE_NO_SUCH_PW", raising=False)
    code, message = await _plan(_playbook(server.port, "    password: env:PVE_NO_SUCH_PW\n"))
    assert code == 2 and "environment variable PVE_NO_SUCH_PW is not set" in message
    assert "internal error" not in message
