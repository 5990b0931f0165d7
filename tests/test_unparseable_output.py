"""Output no parser recognises is a finding about the host that names the command and shows its output,
never "internal error" (issue 22 item 5): the WSL2 case, where `ls -l /dev/nvidia*` in a container printed
`mount: …/newroot/usr: wrong fs type` and `lxc.start` failed with "internal error … ParseError"."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from provisioner.events import Bus, Event
from provisioner.facts import device_nodes
from provisioner.playbook import Playbook
from provisioner.runner import run_host
from provisioner.steps.base import Params, Plan, StepFailed, StepKind, parse_output
from provisioner.steps.context import StepContext
from provisioner.transport.base import CommandResult
from provisioner.transport.local import LocalTransport
from tests.support.step_kinds import use_kinds

MOUNT_ERROR = "mount: /tmp/lab/newroot/usr: wrong fs type, bad option, bad superblock on overlay."


def test_parse_output_names_the_command_and_shows_its_output() -> None:
    result = CommandResult("sh -c 'ls -l /dev/nvidia* 2>&1; true'", 0, [MOUNT_ERROR])
    with pytest.raises(StepFailed) as err:
        parse_output(result, device_nodes.parse_ls_dev, what="the device nodes in the container")
    failure = err.value
    assert failure.message.startswith("unexpected output from `sh -c 'ls -l /dev/nvidia* 2>&1; true'` "
                                      "(the device nodes in the container): ls -l line 1: not a long-listing entry")
    assert MOUNT_ERROR in failure.evidence and "internal error" not in str(failure)
    assert failure.fix


class ProbeParams(Params):
    pass


class UnguardedProbe(StepKind[ProbeParams]):
    """`test.probe`: parses a command's output without a guard (a step written before `parse_output`)."""

    kind = "test.probe"
    title = "probe"
    Params = ProbeParams

    async def check(self, ctx: StepContext) -> Plan:
        result = await ctx.node.run(["echo", MOUNT_ERROR], quiet=True)
        device_nodes.parse_ls_dev(result.output)
        return Plan.no_change("parsed")

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        return
        yield

    async def verify(self, ctx: StepContext) -> None:
        return


async def test_an_unguarded_parse_error_is_a_finding_not_an_internal_error(monkeypatch: pytest.MonkeyPatch,
                                                                            tmp_path: Path) -> None:
    use_kinds(monkeypatch, UnguardedProbe)
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    events: list[Event] = []
    bus = Bus(events.append)
    pb = Playbook.model_validate({"schema_version": 1, "target": {"host": "localhost", "local": True},
                                  "steps": [{"kind": "test.probe"}]})
    result = await run_host(pb, bus, LocalTransport(bus, "localhost"), mode="plan", host="localhost")
    assert result.failed
    finished = [e for e in events if getattr(e, "kind", "") == "step.finished"][-1]
    message = getattr(finished, "message", "")
    assert "internal error" not in message and "bug of gpu-provisioner" not in message, message
    assert message.startswith("test.probe (check): unexpected output from a probe: ls -l line 1"), message

