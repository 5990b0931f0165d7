"""Proxmox task waits (issue #19): bounded by the step's timeout, with progress events, against the lab's
real HTTPS API (tests/support/lab.py); the half-created CT's ownership helpers on real configs."""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from typing import Any

import pytest

from provisioner.events import Bus, Event, Progress
from provisioner.playbook import loads
from provisioner.proxmox.client import PveClient
from provisioner.proxmox.tasks import WaitPolicy
from provisioner.steps import ownership
from provisioner.steps.base import StepFailed
from provisioner.steps.context import StepContext
from provisioner.steps.lxc_create import CreateParams
from provisioner.steps.task_wait import wait_task
from provisioner.transport.local import LocalTransport
from tests.support.lab import UBUNTU
from tests.support.lab import ApiLab as Lab

PB = "schema_version: 1\ntarget: {host: 127.0.0.1, node: pve, container: 200}\nsteps: []\n"


def _ctx(client: PveClient, events: list[Event]) -> StepContext:
    bus = Bus(events.append)
    return StepContext(playbook=loads(PB), host="lab", bus=bus, node=LocalTransport(bus, "lab"),
                       pve_factory=lambda: client)


def _client(lab: Lab) -> PveClient:
    state, server = lab
    return PveClient.https("127.0.0.1", server.port, password=state.credentials().password, verify=server.cafile)


def _create(client: PveClient) -> str:
    return client.create_ct("pve", {"vmid": 200, "ostemplate": UBUNTU, "rootfs": "local-lvm:8",
                                    "net0": "name=eth0,bridge=vmbr0,ip=dhcp"})


def test_wait_policy_backs_off_to_its_cap() -> None:
    assert list(islice(WaitPolicy(timeout_s=60, first_poll_s=0.1, max_poll_s=1.0).intervals(), 6)) == \
        [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


async def test_stuck_task_times_out_at_the_configured_bound_with_progress(make_lab: Callable[..., Lab]) -> None:
    lab = make_lab(scenarios=["api-timeout"])
    client = _client(lab)
    events: list[Event] = []
    upid = _create(client)
    with pytest.raises(StepFailed) as info:
        await wait_task(_ctx(client, events), "create CT 200", upid, 1.5,
                        WaitPolicy(timeout_s=1.5, first_poll_s=0.05, max_poll_s=0.1, progress_every_s=0.2))
    assert "create CT 200: Proxmox task did not finish in time" in info.value.message
    assert "did not finish within 1.5 s (last status: running)" in info.value.message
    progress = [e for e in events if isinstance(e, Progress)]
    assert progress, "no progress while waiting"
    assert all(p.task == "create CT 200: Proxmox task running" and p.total == 1.5 and p.unit == "s"
               for p in progress)
    assert [p.completed for p in progress] == sorted(p.completed for p in progress)


async def test_finished_and_failed_tasks(make_lab: Callable[..., Lab]) -> None:
    client = _client(make_lab())
    result = await wait_task(_ctx(client, []), "create CT 200", _create(client), 60)
    assert result.ok and any("extracting archive" in line for line in result.log)
    failing = _client(make_lab(scenarios=["start-fails"]))
    await wait_task(_ctx(failing, []), "create", _create(failing), 60)
    with pytest.raises(StepFailed) as info:
        await wait_task(_ctx(failing, []), "start CT 200", failing.start_ct(200, "pve"), 60)
    assert "Proxmox task failed: startup for container '200' failed" in info.value.message


_OURS = {"hostname": "gpu-ct", "cores": 8, "memory": 65536, "swap": 0, "unprivileged": 1, "tags": "gpu-provisioner",
         "net0": "name=eth0,bridge=vmbr0,ip=dhcp,type=veth", "rootfs": "local-lvm:vm-200-disk-0,size=64G"}


@pytest.mark.parametrize(("config", "ours", "diff_keys"), [
    ({"hostname": "gpu-ct", "cores": 8, "memory": 65536, "swap": 0, "unprivileged": 1, "tags": "gpu-provisioner",
      "net0": "name=eth0,bridge=vmbr0,ip=dhcp,type=veth", "rootfs": "local-lvm:vm-200-disk-0,size=64G",
      "features": "nesting=1"}, True, []),
    ({"hostname": "gpu-ct", "cores": 8, "memory": 65536, "swap": 0, "unprivileged": 1, "tags": "ml;gpu-provisioner",
      "net0": "name=eth0,bridge=vmbr0,ip=dhcp,type=veth", "rootfs": "local-lvm:vm-200-disk-0,size=65536M",
      "features": "nesting=1"}, True, []),
    ({"hostname": "gpu-ct", "cores": 8, "memory": 65536, "swap": 0, "unprivileged": 1,
      "net0": "name=eth0,bridge=vmbr0,ip=dhcp,type=veth", "rootfs": "local-lvm:vm-200-disk-0,size=32G"},
     False, ["rootfs.size_gb", "features.nesting"]),
    # every feature is compared, not only nesting (issue 23): PVE's boolean spellings are the same value
    ({**_OURS, "features": "nesting=yes,keyctl=0"}, True, []),
    ({**_OURS, "features": "nesting=1,keyctl=1"}, True, ["features.keyctl"]),
    ({**_OURS, "features": "fuse=1,nesting=1,mknod=1,force_rw_sys=1"}, True,
     ["features.force_rw_sys", "features.fuse", "features.mknod"]),
    ({**_OURS, "features": "nesting=1,mount=nfs;cifs"}, True, ["features.mount"]),
])
def test_ownership_by_tag_and_spec(config: dict[str, Any], ours: bool, diff_keys: list[str]) -> None:
    params = CreateParams.model_validate({})
    assert ownership.is_ours(config) is ours
    assert [d.split(":")[0] for d in ownership.differences(params, config)] == diff_keys
