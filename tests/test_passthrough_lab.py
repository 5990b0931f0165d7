"""`lxc.gpu_passthrough` in raw mode against the lab node: the exact lines, nothing else touched, a backup.

The step runs through the engine (runner.run_step, SSH transport) against the lab's SSH endpoint,
whose bash sees ``/etc/pve/lxc/200.conf`` = the lab state's file and a cgroup2 ``/sys/fs/cgroup``
(as on PVE 8/9), so the key must be ``lxc.cgroup2.devices.allow``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.events import Bus, Event, StepFinished
from provisioner.playbook import Playbook, SshSettings, StepSpec, Target
from provisioner.runner import HostResult, build_context, make_step, run_step
from provisioner.steps.gpu_common import PassthroughParams, wanted_devices
from provisioner.steps.lxc_passthrough import raw_lines_for
from provisioner.transport.ssh import SshTarget, SshTransport
from tests.support.lab import ssh_node
from tests.support.require import require

pytestmark = pytest.mark.timeout(180)

VMID = 200
BACKUP_DIR = "/etc/gpu-provisioner/backups"

#: CT 200 as PVE writes it, with lines that are not ours: a description (PVE-encoded ':'), a TUN
#: passthrough added by hand, and a snapshot section.
ORIGINAL = """\
#GPU container%3A managed by hand before the provisioner
arch: amd64
cores: 64
hostname: gpu-ct
memory: 491520
net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:5E:0A:01,ip=10.0.0.50/24,gw=10.0.0.1,type=veth
ostype: ubuntu
parent: before-gpu
rootfs: local-lvm:vm-200-disk-0,size=64G
swap: 0
unprivileged: 0
lxc.cgroup2.devices.allow: c 10:200 rwm
lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file

[before-gpu]
arch: amd64
cores: 64
hostname: gpu-ct
memory: 491520
ostype: ubuntu
rootfs: local-lvm:vm-200-disk-0,size=64G
snaptime: 1781600000
swap: 0
unprivileged: 0
"""


@pytest.fixture
async def lab_node(tmp_path: Path) -> AsyncIterator[tuple[Any, Any]]:
    require(os.geteuid() == 0, "the lab node sandbox needs root (mount namespaces, mknod)")
    require(shutil.which("unshare") is not None, "util-linux unshare is not installed")
    from provisioner.lab.commands import write_node_bin
    from provisioner.lab.lab import Lab
    from provisioner.lab.sandbox import record_host_ns

    state = Lab(tmp_path / "lab").create_state()
    write_node_bin(state.root)
    record_host_ns(state.root)
    state.conf_path(VMID).parent.mkdir(parents=True, exist_ok=True)
    state.conf_path(VMID).write_text(ORIGINAL)
    state.set_status(VMID, "stopped")
    async with ssh_node(state) as server:
        yield state, server


def _playbook(server: Any) -> Playbook:
    ssh = SshSettings(user="root", port=server.port, key_file=str(server.client_key_path),
                      known_hosts=str(server.known_hosts))
    return Playbook(schema_version=1, name="passthrough-raw",
                    target=Target(host="127.0.0.1", node="pve", container=VMID, ssh=ssh),
                    steps=[StepSpec(kind="lxc.gpu_passthrough", params={"mode": "raw"})])


async def test_raw_mode_writes_exactly_our_lines_keeps_the_rest_and_backs_up(lab_node: tuple[Any, Any]) -> None:
    state, server = lab_node
    playbook = _playbook(server)
    events: list[Event] = []
    bus = Bus(events.append)
    target = SshTarget(host="127.0.0.1", port=server.port, user="root", key_file=str(server.client_key_path),
                       known_hosts=str(server.known_hosts))
    node = SshTransport(target, bus)
    ctx = build_context(playbook, bus, node, mode="apply", host="lab")
    step = make_step(playbook.steps[0])
    try:
        before = await node.run(["sh", "-c", f"ls {BACKUP_DIR} 2>/dev/null; true"], timeout=30, quiet=True)
        had_dir = (await node.run(["test", "-d", BACKUP_DIR], timeout=30, quiet=True)).ok
        status = await run_step(ctx, 0, "lxc.gpu_passthrough", step, "apply", HostResult(host="lab"))
        finished = [e for e in events if isinstance(e, StepFinished)]
        assert status == "changed", finished[-1].message if finished else events

        inv = ctx.state.inventory
        assert inv is not None and inv.cgroup_version == 2  # the lab node's /sys/fs/cgroup is cgroup2fs
        uvm_major, _ = state.host_devices()["/dev/nvidia-uvm"]
        devices = wanted_devices(inv, PassthroughParams(mode="raw"))
        lines = raw_lines_for(devices, inv)
        expected = ["lxc.cgroup2.devices.allow: c 195:* rwm", f"lxc.cgroup2.devices.allow: c {uvm_major}:* rwm"]
        expected += [f"lxc.mount.entry: /dev/nvidia{i} dev/nvidia{i} none bind,optional,create=file"
                     for i in range(8)]
        expected += [f"lxc.mount.entry: /dev/{n} dev/{n} none bind,optional,create=file"
                     for n in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")]
        assert [f"{k}: {v}" for k, v in lines] == expected

        main, _, snapshot = ORIGINAL.partition("\n[before-gpu]")
        after = state.conf_path(VMID).read_text()
        assert after == main.rstrip("\n") + "\n" + "\n".join(expected) + "\n\n[before-gpu]" + snapshot

        listing = await node.run(["sh", "-c", f"ls {BACKUP_DIR} 2>/dev/null; true"], timeout=30, quiet=True)
        new = sorted(set(listing.output.split()) - set(before.output.split()))
        assert len(new) == 1 and new[0].startswith(f"{VMID}.conf."), new
        backup = await node.run(["cat", f"{BACKUP_DIR}/{new[0]}"], timeout=30, quiet=True)
        assert backup.output == ORIGINAL
        # The lab node's /etc is an overlay: the backup lives in the lab root, never in this machine's /etc.
        assert (state.root / "etc" / "gpu-provisioner" / "backups" / new[0]).read_text() == ORIGINAL
        assert had_dir or not Path(BACKUP_DIR, new[0]).exists()

        # idempotent: a second check finds nothing to do and leaves the file alone
        plan = await make_step(playbook.steps[0]).check(ctx)
        assert not plan.has_changes, plan.changes
        assert state.conf_path(VMID).read_text() == after
    finally:
        await node.close()
