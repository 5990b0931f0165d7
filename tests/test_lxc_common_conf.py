"""`steps.lxc_common.read_conf` reads the container config through the evidence fact `bundle` and
`diagnose --host` read (`facts.evidence.LXC_CONFIG_FILE`, issue 25), on this machine's real shell: a config
that is not there is "depends on an earlier step" in a plan and a failure naming the file when applying."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from provisioner.events import Bus, Event
from provisioner.facts import evidence
from provisioner.playbook import loads
from provisioner.steps.base import DependsOnEarlier, StepFailed
from provisioner.steps.context import StepContext
from provisioner.steps.lxc_common import conf_path, read_conf
from provisioner.transport.local import LocalTransport

VMID = 999999999  # the highest id PVE allows (pve-container: 100..999999999); no such container here
PB = f"schema_version: 1\ntarget: {{host: 127.0.0.1, node: pve, container: {VMID}}}\nsteps: []\n"


class RecordingLocal(LocalTransport):
    """This machine's shell, remembering the argv of each command it ran."""

    ran: list[list[str]]

    async def _run(self, argv: Sequence[str], command: str, **kw: Any) -> int | None:
        self.ran.append(list(argv))
        return await super()._run(argv, command, **kw)


def _ctx(mode: str) -> tuple[StepContext, RecordingLocal]:
    events: list[Event] = []
    bus = Bus(events.append)
    node = RecordingLocal(bus, "local")
    node.ran = []
    return StepContext(playbook=loads(PB), host="local", bus=bus, node=node, mode=mode), node


@pytest.fixture(autouse=True)
def _no_such_config() -> None:
    if Path(conf_path(VMID)).exists():
        pytest.skip(f"{conf_path(VMID)} exists on this machine")


async def test_a_missing_config_depends_on_an_earlier_step_in_a_plan() -> None:
    ctx, node = _ctx("plan")
    with pytest.raises(DependsOnEarlier, match=f"CT {VMID} config does not exist yet"):
        await read_conf(ctx, VMID)
    # the probe is the one the bundle and `diagnose --host` run, bound to this container
    assert node.ran == [list(evidence.bind(evidence.LXC_CONFIG_FILE, VMID, None).argv)]


async def test_a_missing_config_fails_naming_the_file_when_applying() -> None:
    ctx, node = _ctx("apply")
    with pytest.raises(StepFailed) as err:
        await read_conf(ctx, VMID)
    assert err.value.message == f"cannot read {conf_path(VMID)}: {conf_path(VMID)}: not present"
    with pytest.raises(StepFailed):
        await read_conf(ctx, VMID)
    assert len(node.ran) == 2  # each read probes the node again (the lxc.* steps edit the file)
