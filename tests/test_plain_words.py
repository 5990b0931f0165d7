"""Words for the face in use (issue 28): connection errors in plain words, skipped steps that name the
failed one, fixes that name the wizard's field or the playbook key."""

from __future__ import annotations

import asyncio
import socket

import pytest

from provisioner.events import Bus, Event, StepFinished
from provisioner.playbook import loads
from provisioner.proxmox.client import _map_error
from provisioner.runner import run_host
from provisioner.transport.base import TransportError
from provisioner.transport.local import LocalTransport
from provisioner.transport.plain_errors import connect_error
from provisioner.transport.ssh import SshTarget, SshTransport
from provisioner.words import Words


def closed_port() -> int:
    """A port nothing listens on: bound, then closed (the kernel answers RST to a connect)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_refused_connect_is_said_plainly() -> None:
    port = closed_port()
    with pytest.raises(OSError) as info:
        await asyncio.open_connection("127.0.0.1", port)
    assert "Errno 111" in str(info.value) or "Connect call failed" in str(info.value)
    assert connect_error(info.value, "127.0.0.1", port) == f"connection refused: nothing listens on 127.0.0.1 port {port}"


async def test_ssh_transport_says_connection_refused(tmp_path: object) -> None:
    port = closed_port()
    ssh = SshTransport(SshTarget(host="127.0.0.1", port=port, user="root", connect_timeout=10))
    with pytest.raises(TransportError) as info:
        await ssh.run(["true"], timeout=10)
    text = str(info.value)
    assert f"connection refused: nothing listens on 127.0.0.1 port {port}" in text, text
    assert "Errno" not in text


def test_api_unreachable_is_said_plainly() -> None:
    import requests

    port = closed_port()
    with pytest.raises(requests.exceptions.ConnectionError) as info:
        requests.get(f"https://127.0.0.1:{port}/api2/json/version", timeout=10)
    text = str(_map_error(info.value, f"https://127.0.0.1:{port}/api2/json"))
    assert f"connection refused: nothing listens on 127.0.0.1 port {port}" in text, text
    assert "Max retries" not in text and "Errno" not in text


def test_other_errors_keep_their_meaning() -> None:
    assert "no answer from h port 22 within 5 s" in connect_error(TimeoutError(), "h", 22, 5)
    # issue 36: the resolver's errno in words, never `[Errno -2] Name or service not known`
    assert connect_error(socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "nohost", 22) == \
        "host name 'nohost' not found (DNS): check the name, or this machine's resolver"
    assert connect_error(socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution"), "h", 22) == \
        "cannot resolve the host name 'h': the DNS server did not answer (temporary failure in name resolution)"
    assert connect_error(OSError(113, "No route to host"), "h", 22).startswith("no route to host h")
    assert connect_error(OSError(5, "Input/output error"), "h", 22) == "Input/output error"


def test_fixes_name_the_field_in_the_wizard_and_the_key_headless() -> None:
    cli, wizard = Words(), Words("wizard", {"lxc.create": "Container"})
    assert cli.field("lxc.create", "vmid", "choose another container id") == \
        "choose another container id (playbook key target.container)"
    assert wizard.field("lxc.create", "vmid", "choose another container id") == \
        "choose another container id (field 'container id' on the Container page)"
    assert wizard.where("lxc.create", "rootfs_size_gb") == "field 'rootfs size gb' on the Container page"
    assert cli.where("lxc.create", "rootfs_size_gb") == "playbook key lxc.create params: rootfs_size_gb"
    assert (cli.retry, wizard.retry) == ("then replay", "then Retry (ctrl+r)")


async def test_skipped_steps_name_the_step_that_failed(tmp_path: object) -> None:
    """On this machine (no Proxmox) node.connect fails; every later step says which step stopped it."""
    playbook = loads("schema_version: 1\ntarget:\n  host: 127.0.0.1\n  container: 200\nsteps:\n"
                     "  - kind: node.connect\n  - kind: node.inventory\n  - kind: lxc.start\n", "pb.yaml")
    bus = Bus()
    events: list[Event] = []
    bus.subscribe(events.append)
    result = await run_host(playbook, bus, LocalTransport(), mode="plan", host="local")
    finished = {e.index: e for e in events if isinstance(e, StepFinished)}
    assert finished[0].status == "failed", finished[0].message
    assert result.by_index == {0: "failed", 1: "skipped", 2: "skipped"}
    for i in (1, 2):
        assert finished[i].message == "skipped: step 1 (node.connect) failed", finished[i].message


async def test_an_api_error_at_apply_that_names_a_node_value_names_the_field_in_a_replay(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A template removed between the plan and the create (the node answers `volume ... does not exist`): the
    replay's failed step carries the finding that names lxc.create's field, first, as the wizard's does."""
    from collections.abc import AsyncIterator

    from provisioner.steps.base import Params, Plan, StepFailed, StepKind
    from provisioner.steps.context import StepContext
    from tests.support.step_kinds import use_kinds

    class CreateParams(Params):
        template: str
        rootfs_storage: str = "local-lvm"

    class RacedCreate(StepKind[CreateParams]):
        """lxc.create whose node lost the template after the plan (the create request is refused)."""

        kind = "lxc.create"
        title = "Create the LXC container"
        Params = CreateParams

        async def check(self, ctx: StepContext) -> Plan:
            return Plan(changes=["create CT 200"])

        async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
            yield ctx.info("creating")
            raise StepFailed("create CT 200: 500 volume 'local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst' "
                             "does not exist")

    use_kinds(monkeypatch, RacedCreate)
    playbook = loads("schema_version: 1\ntarget:\n  host: 127.0.0.1\n  container: 200\nsteps:\n  - kind: lxc.create\n"
                     "    params: {template: 'local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst'}\n", "pb.yaml")
    bus = Bus()
    events: list[Event] = []
    bus.subscribe(events.append)
    result = await run_host(playbook, bus, LocalTransport(), mode="apply", host="local")
    assert result.exit_code != 0
    (done,) = [e for e in events if isinstance(e, StepFinished)]
    assert done.status == "failed"
    first = done.diagnosis[0]
    assert first["root_cause"] == "template 'local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst' is not on the node"
    assert first["fix"] == "choose one the node has (playbook key lxc.create params: template), then replay"
