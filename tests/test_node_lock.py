"""The node-side lock (issue #19): flock(1) on the node, held over the SSH channel. Real OpenSSH sshd and
real flock on this machine (tests/support/sshd.py); the lock dir is a temporary directory."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from provisioner.node_lock import NodeLock
from provisioner.steps.base import StepFailed
from provisioner.transport.local import LocalTransport
from provisioner.transport.ssh import SshTarget, SshTransport
from tests.support.require import require
from tests.support.sshd import Sshd


def _ssh(sshd: Sshd, host: str) -> SshTransport:
    return SshTransport(SshTarget(host=host, port=sshd.port, user=sshd.user, key_file=str(sshd.client_key),
                                  known_hosts=str(sshd.known_hosts)))


@pytest.fixture(autouse=True)
def _flock() -> None:
    require(shutil.which("flock") is not None, "flock(1) (util-linux) is not installed")


async def _wait_released(make: object, lock_dir: Path, vmid: int) -> NodeLock:
    """Take the lock once its previous holder's process has gone (a state, polled with a deadline)."""
    deadline = asyncio.get_running_loop().time() + 60
    while True:
        lock = make()  # type: ignore[operator]
        try:
            await lock.acquire()
            return lock  # type: ignore[no-any-return]
        except StepFailed:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.05)


async def test_second_controller_is_refused_until_the_first_releases(sshd: Sshd, tmp_path: Path) -> None:
    one, two = _ssh(sshd, "127.0.0.1"), _ssh(sshd, "127.0.0.1")
    first = NodeLock(one, 200, "127.0.0.1", str(tmp_path))
    await first.acquire()
    assert first.held
    # Another controller, another label for the same node: the lock is on the node, so it is refused.
    second = NodeLock(two, 200, "localhost", str(tmp_path))
    with pytest.raises(StepFailed) as info:
        await second.acquire()
    assert "another controller is provisioning container 200 on this node: controller" in info.value.message
    assert "(target 127.0.0.1)" in info.value.message
    # A different container is independent.
    other_ct = NodeLock(two, 201, "localhost", str(tmp_path))
    await other_ct.acquire()
    await other_ct.release()
    await first.release()
    again = NodeLock(two, 200, "localhost", str(tmp_path))
    await again.acquire()
    await again.release()
    await one.close()
    await two.close()


async def test_lock_dies_with_its_connection(sshd: Sshd, tmp_path: Path) -> None:
    """A controller that vanishes (connection closed without releasing) leaves no stale lock."""
    one, two = _ssh(sshd, "127.0.0.1"), _ssh(sshd, "127.0.0.1")
    first = NodeLock(one, 300, "a", str(tmp_path))
    await first.acquire()
    await one.close()  # no release(): the channel just goes away
    lock = await _wait_released(lambda: NodeLock(two, 300, "b", str(tmp_path)), tmp_path, 300)
    await lock.release()
    await two.close()


async def test_local_transport_lock(tmp_path: Path) -> None:
    a, b = LocalTransport(None, "node"), LocalTransport(None, "node")
    first = NodeLock(a, 400, "local", str(tmp_path))
    await first.acquire()
    with pytest.raises(StepFailed, match="another controller"):
        await NodeLock(b, 400, "local", str(tmp_path)).acquire()
    await first.release()
    second = NodeLock(b, 400, "local", str(tmp_path))
    await second.acquire()
    await second.release()


def test_the_cli_starts_without_importing_asyncssh() -> None:
    """asyncssh costs ~0.7 s of CPU to import; every `provisioner plan/replay` paid it at start-up while the node
    lock imported it at module level. It is imported when a connection is made (transport.ssh, node_lock)."""
    import subprocess
    import sys

    probe = ("import sys, provisioner.cli.common, provisioner.node_lock, provisioner.runner; "
             "print(sorted(m for m in sys.modules if m == 'asyncssh' or m.startswith('asyncssh.')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout[:500]
