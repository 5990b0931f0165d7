"""Pending changes and PVE's config lock, against the lab node (issue 24 items 2 and 3).

* pve-container ``update_pct_config`` → ``vmconfig_hotplug_pending`` (src/PVE/LXC/Config.pm): a changed
  existing devN of a running container stays in ``[pve:pending]`` (``die "skip"``); a new devN is
  hot-plugged only since pve-container 6.0.4 (PVE 9, commit c702167); ``vm_start`` applies pending values.
  `lxc.gpu_passthrough` names the pending change and the restart in its plan, restarts, and verifies after.
* Raw mode edits ``/etc/pve/lxc/<vmid>.conf`` under ``lock_config`` (flock on
  ``/run/lock/lxc/pve-config-<vmid>.lock``, ``config_file_lock``): a held lock bounds the wait and the
  edit never loses another writer's change; nvidia-uvm's major is read when applying, and a major that
  moved (a kernel update) is found as drift and repaired.

The step runs through the engine (runner.run_step over the lab's SSH endpoint); the node's own ``pct``
is the lab's (the API handlers as root@pam).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.drift import Manifest, config_drift
from provisioner.events import Bus, Event, PlanReady, StepFinished
from provisioner.playbook import Playbook, SshSettings, StepSpec, Target
from provisioner.proxmox.lxc_conf import LxcConfig
from provisioner.runner import HostResult, build_context, make_step, run_step
from provisioner.transport.ssh import SshTarget, SshTransport
from tests.support.lab import ssh_node
from tests.support.require import require

pytestmark = pytest.mark.timeout(300)

VMID = 200
BASE = """\
arch: amd64
cores: 8
hostname: gpu-ct
memory: 65536
ostype: ubuntu
rootfs: local-lvm:vm-200-disk-0,size=64G
swap: 0
unprivileged: 1
"""


async def _lab(tmp_path: Path, pve: str) -> Any:
    require(os.geteuid() == 0, "the lab node sandbox needs root (mount namespaces, mknod)")
    require(shutil.which("unshare") is not None, "util-linux unshare is not installed")
    require(shutil.which("flock") is not None, "util-linux flock is not installed")
    from provisioner.lab.commands import write_node_bin
    from provisioner.lab.lab import Lab
    from provisioner.lab.sandbox import record_host_ns

    state = Lab(tmp_path / "lab", pve=pve).create_state()
    write_node_bin(state.root)
    record_host_ns(state.root)
    state.conf_path(VMID).parent.mkdir(parents=True, exist_ok=True)
    state.conf_path(VMID).write_text(BASE)
    state.set_status(VMID, "stopped")
    return state


@pytest.fixture(params=["8.4", "9"])
async def lab_node(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Any, Any]]:
    state = await _lab(tmp_path, str(request.param))
    async with ssh_node(state) as server:
        yield state, server


@pytest.fixture
async def lab84(tmp_path: Path) -> AsyncIterator[tuple[Any, Any]]:
    state = await _lab(tmp_path, "8.4")
    async with ssh_node(state) as server:
        yield state, server


class Run:
    """One lxc.gpu_passthrough step, planned or applied through the engine."""

    def __init__(self, server: Any, params: dict[str, Any]) -> None:
        ssh = SshSettings(user="root", port=server.port, key_file=str(server.client_key_path),
                          known_hosts=str(server.known_hosts))
        self.playbook = Playbook(schema_version=1, name="pending",
                                 target=Target(host="127.0.0.1", node="pve", container=VMID, ssh=ssh),
                                 steps=[StepSpec(kind="lxc.gpu_passthrough", params=params)])
        self.target = SshTarget(host="127.0.0.1", port=server.port, user="root", key_file=str(server.client_key_path),
                                known_hosts=str(server.known_hosts))

    async def __call__(self, mode: str) -> tuple[str, list[str], str]:
        """(status, planned changes, the finished message)."""
        events: list[Event] = []
        bus = Bus(events.append)
        node = SshTransport(self.target, bus)
        ctx = build_context(self.playbook, bus, node, mode="apply" if mode == "apply" else "plan", host="lab")
        try:
            status = await run_step(ctx, 0, "lxc.gpu_passthrough", make_step(self.playbook.steps[0]),
                                    "apply" if mode == "apply" else "plan", HostResult(host="lab"))
        finally:
            await node.close()
        plans = [e for e in events if isinstance(e, PlanReady)]
        finished = [e for e in events if isinstance(e, StepFinished)]
        return status, (plans[-1].changes if plans else []), finished[-1].message


def node_sh(state: Any, script: str) -> subprocess.CompletedProcess[str]:
    from provisioner.lab.sandbox import node_argv, node_env

    return subprocess.run(node_argv(state, ["bash", "-c", script]), env=node_env(state), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120, check=False)


def conf(state: Any) -> LxcConfig:
    return LxcConfig.parse(state.conf_path(VMID).read_text())


def modes(c: LxcConfig, view: dict[str, str]) -> dict[str, str]:
    return {k: v.rsplit("mode=", 1)[-1] for k, v in view.items() if k.startswith("dev")}


async def test_changed_devn_of_a_running_ct_is_pending_until_the_planned_restart(lab_node: tuple[Any, Any]) -> None:
    state, server = lab_node
    first = Run(server, {"mode": "dev", "dev_mode": "0666"})
    status, _, message = await first("apply")  # stopped CT: pct set applies at once
    assert status == "changed", message
    assert conf(state).pending() == {} and set(modes(conf(state), conf(state).options()).values()) == {"0666"}

    state.set_status(VMID, "running")
    # a hand edit on the running CT: pve-container keeps it pending (an existing devN is never hot-plugged)
    hand = node_sh(state, f"pct set {VMID} --dev0 /dev/nvidia0,mode=0600 && pct pending {VMID}")
    assert hand.returncode == 0, hand.stdout
    assert "cur dev0: /dev/nvidia0,mode=0666\nnew dev0: /dev/nvidia0,mode=0600\n" in hand.stdout, hand.stdout
    assert conf(state).get("dev0") == "/dev/nvidia0,mode=0666" and conf(state).pending() == {
        "dev0": "/dev/nvidia0,mode=0600"}
    manifest = Manifest(vmid=VMID, devices=["/dev/nvidia0"], dev_mode="0666")
    (finding,) = config_drift(conf(state), manifest)
    assert "dev0 (/dev/nvidia0) has mode 0600 pending in [pve:pending] (applies at the next restart)" in finding.text

    # the playbook's mode changes (0666 → 0660) on the running CT: the plan names the pending change and
    # the restart; replay applies both; the plan is then clean
    second = Run(server, {"mode": "dev", "dev_mode": "0660"})
    status, changes, _ = await second("plan")
    assert status == "changed"
    assert any("dev0 (/dev/nvidia0) has mode 0600 pending in [pve:pending], the playbook wants 0660" in c
               for c in changes), changes
    restart = [c for c in changes if c.startswith(f"restart CT {VMID} to apply its pending devN change(s)")]
    assert restart and "dev0 = /dev/nvidia0,mode=0660" in restart[0], changes
    pid_before = state.get_status(VMID).pid
    status, _, message = await second("apply")
    assert status == "changed", message
    after = conf(state)
    assert after.pending() == {}, after.render()
    assert set(modes(after, after.options()).values()) == {"0660"}, after.render()
    assert state.get_status(VMID).status == "running" and state.get_status(VMID).pid != pid_before  # restarted
    status, changes, message = await second("plan")
    assert (status, changes) == ("ok", []), message


async def test_a_new_devn_is_hot_plugged_on_pve9_and_pending_on_pve8(lab_node: tuple[Any, Any]) -> None:
    state, server = lab_node
    run = Run(server, {"mode": "dev", "modeset": False})
    status, _, message = await run("apply")
    assert status == "changed", message
    state.set_status(VMID, "running")
    with_modeset = Run(server, {"mode": "dev", "modeset": True})
    status, changes, _ = await with_modeset("plan")
    assert status == "changed"
    restart = [c for c in changes if c.startswith("restart CT")]
    pve9 = state.settings().pve_version == "9"
    # pve-container 6.0.4 (PVE 9) hot-plugs a new device; PVE 8 keeps every devN change pending
    assert bool(restart) is not pve9, changes
    pid_before = state.get_status(VMID).pid
    status, _, message = await with_modeset("apply")
    assert status == "changed", message
    assert conf(state).pending() == {}
    assert "/dev/nvidia-modeset" in "".join(conf(state).indexed("dev").values())
    assert (state.get_status(VMID).pid == pid_before) is pve9  # restarted only where it was pending
    assert (await with_modeset("plan"))[:2] == ("ok", [])


async def test_raw_edit_waits_for_pves_config_lock_and_keeps_the_other_writers_change(
        lab84: tuple[Any, Any]) -> None:
    state, server = lab84
    run = Run(server, {"mode": "raw"})
    lock_path = state.config_lock_path(VMID)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with state.config_lock(VMID):  # as PVE's API holds it during an update
        task = asyncio.ensure_future(run("apply"))
        # wait for the step's flock to be waiting on the same lock file (a state, not a time)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 120
        while not _other_holders(lock_path):
            assert not task.done(), task.result()
            assert loop.time() < deadline, "the raw edit never reached PVE's config lock"
            await asyncio.sleep(0.1)
        assert not task.done()
        assert state.conf_path(VMID).read_text() == BASE  # nothing written while the lock is held
        # the other writer (the holder of the lock) changes the file meanwhile
        state.conf_path(VMID).write_text(BASE.replace("cores: 8", "cores: 32"))
    status, _, message = await task
    assert status == "changed", message
    after = state.conf_path(VMID).read_text()
    assert "cores: 32" in after, after  # the other writer's change survived: no interleaving
    assert "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file" in after


async def test_raw_edit_gives_up_after_the_bounded_wait_without_writing(lab84: tuple[Any, Any],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner.steps.lxc_passthrough import LxcGpuPassthrough

    state, server = lab84
    monkeypatch.setattr(LxcGpuPassthrough, "lock_wait_s", 1)  # the bound, shortened (a setting, not a fake)
    run = Run(server, {"mode": "raw"})
    with state.config_lock(VMID):
        status, _, message = await run("apply")
    assert status == "failed"
    assert f"PVE's config lock /run/lock/lxc/pve-config-{VMID}.lock stayed taken for 1 s" in message
    assert state.conf_path(VMID).read_text() == BASE


async def test_a_moved_uvm_major_is_drift_and_repaired(lab84: tuple[Any, Any]) -> None:
    from provisioner.lab.sandbox import write_node_files

    state, server = lab84
    run = Run(server, {"mode": "raw"})
    old = state.settings().uvm_major
    status, _, message = await run("apply")
    assert status == "changed", message
    assert f"lxc.cgroup2.devices.allow: c {old}:* rwm" in state.conf_path(VMID).read_text()
    # a kernel update: nvidia-uvm registers another dynamic major after the reboot
    new = old - 2
    state.update_settings(uvm_major=new)
    write_node_files(state)
    manifest = Manifest(vmid=VMID, devices=["/dev/nvidia0", "/dev/nvidia-uvm"], passthrough="raw")
    findings = config_drift(conf(state), manifest, {"nvidia": 195, "nvidia-uvm": new})
    assert [f.repair for f in findings] == ["lxc.gpu_passthrough"], findings
    assert f"device major(s) {old} that no driver registers now (nvidia-uvm is {new}" in findings[0].text
    # the same finding through drift.gather (plan --check, diagnose --host, the wizard's Summary)
    from provisioner.drift import gather, manifest_path

    record = node_sh(state, f"mkdir -p $(dirname {manifest_path(VMID)}) && cat > {manifest_path(VMID)} <<'EOF'\n"
                            f"{manifest.render()}EOF")
    assert record.returncode == 0, record.stdout
    node = SshTransport(run.target, Bus(lambda e: None))
    try:
        report = await gather(node, VMID)
    finally:
        await node.close()
    stale = [f for f in report.findings if "no driver registers now" in f.text]
    assert stale and stale[0].repair == "lxc.gpu_passthrough" and f"major(s) {old}" in stale[0].text, report
    status, changes, _ = await run("plan")
    assert status == "changed"
    assert any(f"allows stale device major(s) {old}" in c for c in changes), changes
    assert any(f"c {new}:* rwm" in c for c in changes), changes
    status, _, message = await run("apply")
    assert status == "changed", message
    text = state.conf_path(VMID).read_text()
    assert f"c {new}:* rwm" in text and f"c {old}:* rwm" not in text, text
    assert (await run("plan"))[:2] == ("ok", [])


def _other_holders(path: Path) -> bool:
    """Whether a process other than this one has `path` open (the step's flock waiting on it)."""
    me = os.getpid()
    st = path.stat()
    target = (st.st_dev, st.st_ino)  # by inode: the node view names it /run/lock/lxc/...
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                other = os.stat(f"/proc/{pid}/fd/{fd}")
                if (other.st_dev, other.st_ino) == target:
                    return True
            except OSError:
                continue
    return False


@pytest.mark.parametrize("pve", ["8.4", "9"])
def test_lab_api_keeps_pending_values_as_pve_does(tmp_path: Path, pve: str) -> None:
    """update_pct_config/vmconfig_hotplug_pending per version, vm_pending's shape, vm_config's pending view,
    and the poststop hook's vmconfig_apply_pending."""
    from provisioner.lab.pve_api import CLI_IDENTITY, LabApi
    from provisioner.lab.state import LabState

    state = LabState.create(tmp_path / "lab", pve_version=pve)
    state.conf_path(VMID).parent.mkdir(parents=True, exist_ok=True)
    state.conf_path(VMID).write_text(BASE + "dev0: /dev/nvidia0,mode=0666\n")
    state.set_status(VMID, "running")
    api = LabApi(state, sync_tasks=True)
    base = f"/nodes/pve/lxc/{VMID}"

    def put(**params: Any) -> None:
        result = api.call("PUT", f"{base}/config", {"node": "pve", "vmid": VMID, **params}, CLI_IDENTITY)
        assert result.status == 200, result.message

    put(dev0="/dev/nvidia0,mode=0600", dev1="/dev/nvidiactl,mode=0666", cores=4, onboot=1)
    c = conf(state)
    assert c.get("cores") == "4" and c.get("onboot") == "1"  # $LXC_FASTPLUG_OPTIONS: at once
    assert c.pending()["dev0"] == "/dev/nvidia0,mode=0600"  # an existing devN: never hot-plugged
    assert ("dev1" in c.pending()) is (pve == "8.4")  # a new devN: hot-plugged since pve-container 6.0.4
    pending = {i["key"]: i for i in api.call("GET", f"{base}/pending", {"node": "pve", "vmid": VMID},
                                             CLI_IDENTITY).data}
    assert pending["dev0"] == {"key": "dev0", "value": "/dev/nvidia0,mode=0666", "pending": "/dev/nvidia0,mode=0600"}
    view = api.call("GET", f"{base}/config", {"node": "pve", "vmid": VMID}, CLI_IDENTITY).data
    current = api.call("GET", f"{base}/config", {"node": "pve", "vmid": VMID, "current": 1}, CLI_IDENTITY).data
    assert (view["dev0"], current["dev0"]) == ("/dev/nvidia0,mode=0600", "/dev/nvidia0,mode=0666")
    put(dev0="/dev/nvidia0,mode=0666")  # back to the current value: cleanup_pending drops it
    assert "dev0" not in conf(state).pending()
    put(delete="dev0")  # a devN delete on a running CT is pending too
    assert conf(state).pending_deletes() == ["dev0"] and conf(state).get("dev0")
    stop = api.call("POST", f"{base}/status/stop", {"node": "pve", "vmid": VMID}, CLI_IDENTITY)
    assert stop.status == 200
    after = conf(state)
    assert after.pending() == {} and after.get("dev0") is None and after.get("dev1") == "/dev/nvidiactl,mode=0666"


def test_pending_section_is_written_as_write_pct_config_writes_it() -> None:
    """``write_pct_config``: main section, ``\\n[pve:pending]\\n`` with sorted keys, then the snapshots."""
    text = BASE + "dev0: /dev/nvidia0,mode=0666\n\n[before]\narch: amd64\n"
    c = LxcConfig.parse(text)
    assert c.pending() == {}
    c.set_pending({"dev0": "/dev/nvidia0,mode=0600", "delete": "swap"})
    assert c.render() == (BASE + "dev0: /dev/nvidia0,mode=0666\n\n[pve:pending]\ndelete: swap\n"
                          "dev0: /dev/nvidia0,mode=0600\n\n[before]\narch: amd64\n")
    assert LxcConfig.parse(c.render()).pending_deletes() == ["swap"]
    assert c.effective()["dev0"] == "/dev/nvidia0,mode=0600" and "swap" not in c.effective()
    c.set_pending({})
    assert c.render() == text
