"""The lab's held views and resident stand-in server (issue #12, speed): the same answers as a view and
a Python of their own, views that follow the container's config, signals and kills that reach the
stand-in. Real lab, real SSH (our SshTransport), real namespaces."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.lab.commands import resident_socket
from provisioner.lab.lab import LabServices
from provisioner.lab.sandbox import ct_holder_file
from provisioner.transport.base import CommandTimeout
from tests.support.lab import gpu_ct, start_lab
from tests.support.lab import ssh_transport as transport

pytestmark = pytest.mark.timeout(240)

#: stand-in calls whose stdout, stderr and status must not depend on how they run
CALLS = [
    "pveversion -v",
    "pveversion --bogus",
    "nvidia-smi -L",
    "nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader",
    "pct list",
    "pct exec 999 -- true",
    "pct exec 200 -- sh -c 'ls /dev/nvidia*; echo err >&2; exit 7'",
    "pvesh get /version --output-format json",
    "echo from-stdin | pct exec 200 -- cat",
]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[LabServices, dict[str, Any]]]:
    services, conn = start_lab(tmp_path / "lab")
    gpu_ct(services.state, raw=None)
    yield services, conn
    services.stop()


async def _answers(node: Any, calls: list[str]) -> list[tuple[int | None, list[str]]]:
    out = []
    for call in calls:
        r = await node.run(["bash", "-c", f"{call} 2>&1"], timeout=120)
        out.append((r.exit_status, r.lines))
    return out


async def test_resident_answers_as_a_python_of_its_own(lab: tuple[LabServices, dict[str, Any]]) -> None:
    services, conn = lab
    sock = resident_socket(services.state.root)
    assert sock.is_socket(), "the node view's holder serves the stand-ins from the lab's start"
    node = transport(conn)
    try:
        resident = await _answers(node, CALLS)
        off = sock.with_name("node.sock.off")
        sock.rename(off)  # the wrappers now run each stand-in in a Python of its own
        try:
            alone = await _answers(node, CALLS)
        finally:
            off.rename(sock)
    finally:
        await node.close()
    assert resident == alone
    assert resident[0][0] == 0 and resident[0][1][0].startswith("proxmox-ve: ")
    assert resident[1][0] == 255 and "Unknown option: bogus" in resident[1][1][0]
    assert resident[5][0] == 255
    assert resident[6][0] == 7 and "/dev/nvidia0" in resident[6][1] and "err" in resident[6][1]
    assert resident[8] == (0, ["from-stdin"])


async def test_a_lab_in_a_deep_directory_holds_its_views_too(tmp_path: Path) -> None:
    """A lab root whose socket path passes sun_path's 108 bytes (unix(7); a test's tmp_path, a deep home): the
    resident holder binds and serves it all the same (it failed with "AF_UNIX path too long" and every command
    built a view of its own, ~0.2 CPU-s of mounts each), and the stand-ins reach it."""
    root = tmp_path / ("d" * 60) / ("e" * 60) / "lab"
    services, conn = start_lab(root)
    try:
        sock = resident_socket(services.state.root)
        assert len(os.fsencode(str(sock))) > 108
        assert sock.is_socket(), (services.state.root / "run" / "resident" / "holder.log").read_text()[-2000:]
        held, _ = asyncio.run_coroutine_threadsafe(services.ssh.node_command(["true"]), services._loop).result(60)
        assert held[0] == "nsenter", held[:3]  # the held view, not a fresh one
        gpu_ct(services.state, raw=None)
        node = transport(conn)
        try:
            answers = await _answers(node, CALLS[:3])
        finally:
            await node.close()
        assert answers[0][0] == 0 and answers[0][1][0].startswith("proxmox-ve: ")
        assert answers[1][0] == 255 and "Unknown option: bogus" in answers[1][1][0]
        assert answers[2][0] == 0 and len(answers[2][1]) == 8, answers[2]
        assert "path too long" not in (services.state.root / "run" / "resident" / "holder.log").read_text()
    finally:
        services.stop()


async def test_held_container_view_follows_config_and_start(lab: tuple[LabServices, dict[str, Any]]) -> None:
    services, conn = lab
    state = services.state
    node = transport(conn)
    holder = ct_holder_file(state.root, 200)
    try:
        r = await node.run(["pct", "exec", "200", "--", "sh", "-c", "ls /dev | grep -c '^nvidia[0-9]'"])
        assert r.lines == ["8"]
        first = json.loads(holder.read_text())["pid"]
        r = await node.run(["pct", "exec", "200", "--", "true"])
        assert r.ok and json.loads(holder.read_text())["pid"] == first, "an unchanged container keeps its view"
        r = await node.run(["pct", "set", "200", "--delete", "dev7"])
        assert r.ok, r.lines
        # PVE 8 cannot hot-unplug a device: the delete waits in [pve:pending] until the container restarts
        # (pve-container's vmconfig_hotplug_pending), so the running container still has the node
        r = await node.run(["pct", "exec", "200", "--", "sh", "-c", "ls /dev | grep -c '^nvidia[0-9]'"])
        assert r.lines == ["8"], "a pending delete is not applied to a running container"
        for verb in ("stop", "start"):
            r = await node.run(["pct", verb, "200"])
            assert r.ok, r.lines
        await _gone(first)
        r = await node.run(["pct", "exec", "200", "--", "sh", "-c", "ls /dev | grep -c '^nvidia[0-9]'"])
        assert r.lines == ["7"], "the view follows the config"
        second = json.loads(holder.read_text())["pid"]
        assert second != first
        await _gone(first)
        r = await node.run(["pct", "stop", "200"])
        assert r.ok, r.lines
        assert not holder.exists()
        await _gone(second)
        r = await node.run(["pct", "exec", "200", "--", "true"])
        assert r.exit_status == 255 and "not running" in r.lines[-1]
    finally:
        await node.close()


async def _gone(pid: int) -> None:
    """Wait (with a deadline) until `pid` has exited (a zombie has: only its parent has to reap it)."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            return
        if state in ("Z", "X"):
            return
        assert asyncio.get_running_loop().time() < deadline, f"process {pid} still runs"
        await asyncio.sleep(0.05)


def _is_sleep(pid: int) -> bool:
    try:
        return "sleep" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:
        return False


async def test_a_killed_command_takes_its_stand_in_along(lab: tuple[LabServices, dict[str, Any]],
                                                          tmp_path: Path) -> None:
    services, conn = lab
    node = transport(conn)
    pidfile = services.state.ct_root(200) / "root" / "sleep.pid"
    try:
        with pytest.raises(CommandTimeout):
            await node.run(["pct", "exec", "200", "--", "sh", "-c", "echo $$ > /root/sleep.pid; exec sleep 300"],
                           timeout=3)
        deadline = asyncio.get_running_loop().time() + 30
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert asyncio.get_running_loop().time() < deadline, "the container command never started"
            await asyncio.sleep(0.05)
        pid = int(pidfile.read_text())
        # the pid as the container sees it is the machine's too (the lab has no pid namespace)
        while _is_sleep(pid):
            assert asyncio.get_running_loop().time() < deadline, "the container command survived the kill"
            await asyncio.sleep(0.05)
        assert (await node.run(["pct", "exec", "200", "--", "true"])).ok
    finally:
        await node.close()
    assert os.path.exists(resident_socket(services.state.root))
