"""The template pinned (issue #24 item 7): `lxc.create` records the template's name and the sha512 that PVE's
appliance index lists for it (`GET /nodes/{node}/aplinfo` → `sha512sum`, pve-manager PVE/APLInfo.pm), and a
replay whose index lists another digest says so. Against the lab's real HTTPS API (tests/support/lab.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping

from provisioner.events import Bus, Event
from provisioner.payloads import Resolved, TemplateRecord
from provisioner.playbook import loads
from provisioner.proxmox.client import PveClient
from provisioner.steps.context import StepContext
from provisioner.steps.lxc_create import CreateParams, LxcCreate, template_drift, template_record
from provisioner.transport.local import LocalTransport
from tests.support.lab import UBUNTU
from tests.support.lab import ApiLab as Lab

PB = "schema_version: 1\ntarget: {host: 127.0.0.1, node: pve, container: 200}\nsteps: []\n"
NAME = UBUNTU.partition(":")[2].removeprefix("vztmpl/")


def _ctx(lab: Lab, resolved: dict[str, object] | None = None) -> StepContext:
    state, server = lab
    client = PveClient.https("127.0.0.1", server.port, password=state.credentials().password, verify=server.cafile)
    events: list[Event] = []
    bus = Bus(events.append)
    ctx = StepContext(playbook=loads(PB), host="lab", bus=bus, node=LocalTransport(bus, "lab"),
                      pve_factory=lambda: client)
    ctx.resolved = Resolved.from_recorded(resolved or {})
    return ctx


def test_template_record_from_aplinfo_and_drift() -> None:
    apl: list[Mapping[str, object]] = [{"template": NAME, "sha512sum": "ab" * 64},
                                       {"template": "other.tar.zst", "sha512sum": "cd" * 64}]
    assert template_record(UBUNTU, apl).dump() == {"name": NAME, "sha512": "ab" * 64}
    assert template_record("local:vztmpl/custom.tar.zst", apl).dump() == {"name": "custom.tar.zst", "sha512": None}
    assert template_record(UBUNTU, None).dump() == {"name": NAME, "sha512": None}
    same = TemplateRecord(name=NAME, sha512="ab" * 64)
    assert template_drift(same, same) is None and template_drift(None, same) is None
    moved = template_drift(TemplateRecord(name=NAME, sha512="ef" * 64), same)
    assert moved is not None and f"sha512 {'ab' * 64}" in moved and f"recorded {'ef' * 64}" in moved
    renamed = template_drift(TemplateRecord(name="ubuntu-22.04-standard_22.04-1_amd64.tar.zst", sha512=None), same)
    assert renamed is not None and "the playbook recorded ubuntu-22.04-standard_22.04-1_amd64.tar.zst" in renamed


async def test_lxc_create_records_the_template_digest_the_node_lists(make_lab: Callable[..., Lab]) -> None:
    lab = make_lab()
    listed = next(e["sha512sum"] for e in lab[0].settings().aplinfo if e["template"] == NAME)
    step = LxcCreate(CreateParams(template=UBUNTU))
    ctx = _ctx(lab)
    plan = await step.check(ctx)
    assert any(c.startswith("create CT 200") for c in plan.changes) and plan.notes == []
    assert step.resolved(ctx)["template"] == {"name": NAME, "sha512": listed}
    # a replay whose index now lists another digest for the recorded template names it
    old = hashlib.sha512(b"an earlier build of the template").hexdigest()
    ctx2 = _ctx(lab, {"template": {"name": NAME, "sha512": old}})
    plan2 = await step.check(ctx2)
    assert plan2.notes == [f"warning: drift: aplinfo lists template {NAME} with sha512 {listed}, the playbook "
                           f"recorded {old}: the index re-published the file"]
