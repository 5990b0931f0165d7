"""The project's one provisioning lock, held on the node itself: two runs (replays, wizards, from one
controller or several) cannot provision one container at once.

What it guards is the container and its node-side state (its config, passed devices, boot unit,
provisioning record), per container id (`ct-<vmid>`; `nextid` while the playbook lets Proxmox choose
one). There used to be a second lock, a flock in the controller's state dir per host label and vmid
(`runner.container_lock`); it guarded nothing this one does not: the controller keeps no state per
container that two runs could both write (run logs and recorded playbooks are per run; the fleet
report, per playbook and inventory, is written after the hosts' runs, outside that lock too), and as a
guard of the container it only separated runs that share that state dir and spell the host the same
way (`127.0.0.1` and `localhost` ran at once), and the wizard never took it. So it was removed.
This one lives on the node:
`flock(1)` on `/run/lock/gpu-provisioner/ct-<vmid>.lock` (where PVE keeps its own
`/run/lock/lxc/pve-config-<vmid>.lock`), held by a process whose stdin is our SSH channel. When
the run ends we close the channel; when the controller dies (SIGKILL, lost network) sshd closes
it — either way `cat` sees EOF, exits, and the kernel drops the lock. No stale lock survives its
holder, and the holder's description is kept beside it for the message the next controller shows.

The lab's node keeps its own persistent /run (under the lab root), as a real node does until it
reboots, so the same directory serves there.
Only `replay` (apply) takes the lock; `plan` changes nothing and takes no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from typing import TYPE_CHECKING, Any

from provisioner import quoting
from provisioner.exitcodes import ExitCode
from provisioner.steps.base import StepFailed
from provisioner.transport.base import Transport, TransportError
from provisioner.transport.local import LocalTransport
from provisioner.transport.ssh import SshTransport

if TYPE_CHECKING:  # asyncssh (~0.7 s to import) only when a lock is taken over SSH, as transport.ssh does
    import asyncssh

LOCK_DIR = "/run/lock/gpu-provisioner"
BUSY_EXIT = 75  # EX_TEMPFAIL
_ACQUIRE_TIMEOUT_S = 60.0


def lock_name(vmid: int | None) -> str:
    return f"ct-{int(vmid)}" if vmid is not None else "nextid"


def holder_description(host_label: str) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return f"controller {socket.gethostname()} pid {os.getpid()} (target {host_label}) since {stamp}"


def lock_script(name: str, holder: str, lock_dir: str = LOCK_DIR) -> str:
    """Shell run on the node: take the lock or say who has it; then hold it until stdin closes."""
    lock = f"{lock_dir}/{name}.lock"
    owner = f"{lock}.owner"
    q = quoting.join
    return quoting.script(
        f"mkdir -p {q([lock_dir])} || exit 71",
        "command -v flock >/dev/null 2>&1 || { echo 'NOFLOCK'; exit 69; }",
        f"exec 9>>{q([lock])} || exit 71",
        f"if ! flock -n 9; then echo \"BUSY $(head -c 400 {q([owner])} 2>/dev/null)\"; exit {BUSY_EXIT}; fi",
        f"printf '%s\\n' {q([holder])} > {q([owner])}",
        "echo LOCKED",
        "exec cat >/dev/null",  # fd 9 (and with it the lock) lives as long as this cat, i.e. our channel
    )


class NodeLock:
    """`await lock.acquire()` raises StepFailed naming the holder when another controller has it."""

    def __init__(self, node: Transport, vmid: int | None, host_label: str, lock_dir: str = LOCK_DIR) -> None:
        self.node = node
        self.lock_dir = lock_dir
        self.name = lock_name(vmid)
        self.vmid = vmid
        self.host_label = host_label
        self._proc: Any = None
        self._ssh_proc: asyncssh.SSHClientProcess[str] | None = None
        self.held = False

    async def acquire(self) -> None:
        script = lock_script(self.name, holder_description(self.host_label), self.lock_dir)
        try:
            first = await asyncio.wait_for(self._start(script), _ACQUIRE_TIMEOUT_S)
        except TimeoutError:
            await self.release()
            raise StepFailed(f"could not take the node lock {self.lock_dir}/{self.name}.lock within "
                             f"{_ACQUIRE_TIMEOUT_S:g} s", exit_code=ExitCode.UNREACHABLE) from None
        if first == "LOCKED":
            self.held = True
            return
        await self.release()
        what = f"container {self.vmid}" if self.vmid is not None else "a new container"
        if first.startswith("BUSY"):
            holder = first[4:].strip() or "an unknown controller"
            raise StepFailed(f"another controller is provisioning {what} on this node: {holder}",
                             fix=f"wait for that run to finish; the lock ({self.lock_dir}/{self.name}.lock on the node) "
                                 "is released as soon as its controller ends or loses the connection",
                             exit_code=ExitCode.FAILED)
        if first == "NOFLOCK":
            raise StepFailed("the node has no flock(1) to take the node lock (util-linux)",
                             fix="install util-linux on the node", exit_code=ExitCode.FAILED)
        raise StepFailed(f"could not take the node lock {self.lock_dir}/{self.name}.lock: {first or 'no answer'}",
                         exit_code=ExitCode.FAILED)

    async def _start(self, script: str) -> str:
        if isinstance(self.node, SshTransport):
            import asyncssh

            try:
                conn = await self.node.connect()
                proc = await conn.create_process(f"exec 2>&1; {script}", encoding="utf-8", errors="replace",
                                                 stdin=asyncssh.PIPE)
            except (OSError, asyncssh.Error) as exc:
                raise TransportError(f"{self.node.target.label}: cannot take the node lock: {exc}") from None
            self._ssh_proc = proc
            line: str = await proc.stdout.readline()
            return line.strip()
        if isinstance(self.node, LocalTransport):
            local = await asyncio.create_subprocess_exec("sh", "-c", script, stdin=asyncio.subprocess.PIPE,
                                                         stdout=asyncio.subprocess.PIPE,
                                                         stderr=asyncio.subprocess.STDOUT)
            self._proc = local
            assert local.stdout is not None
            raw: bytes = await local.stdout.readline()
            return raw.decode("utf-8", "replace").strip()
        return "LOCKED"  # a transport without a shell of its own (tests' in-memory nodes): nothing to lock

    async def release(self) -> None:
        self.held = False
        if self._ssh_proc is not None:
            import asyncssh

            proc, self._ssh_proc = self._ssh_proc, None
            with contextlib.suppress(OSError, asyncssh.Error, BrokenPipeError):
                proc.stdin.write_eof()
            with contextlib.suppress(OSError, asyncssh.Error, TimeoutError):
                await asyncio.wait_for(proc.wait(), 10)
            proc.close()
        if self._proc is not None:
            lproc, self._proc = self._proc, None
            if lproc.stdin is not None:
                with contextlib.suppress(OSError, BrokenPipeError):
                    lproc.stdin.close()
            with contextlib.suppress(ProcessLookupError, TimeoutError):
                await asyncio.wait_for(lproc.wait(), 10)
            if lproc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    lproc.kill()
                await lproc.wait()
