"""Run commands on this machine (the node target when the tool runs on the Proxmox node itself)."""

from __future__ import annotations

import asyncio
import codecs
import errno
import os
import shutil
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

from provisioner.environ import copy_environ
from provisioner.events import Bus
from provisioner.transport.base import CommandTimeout, LineCallback, LineSplitter, OutputCapExceeded, Transport


class LocalTransport(Transport):
    name = "local"

    def __init__(self, bus: Bus | None = None, host_label: str = "localhost",
                 env: Mapping[str, str] | None = None) -> None:
        super().__init__(bus, host_label)
        self.env = copy_environ() | dict(env or {})

    async def _run(
        self, argv: Sequence[str], command: str, *, timeout: float | None, on_line: LineCallback,
        stdin: bytes | None,
    ) -> int | None:
        proc = await _spawn(argv, stdin is not None, self.env)
        splitter = LineSplitter(on_line)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")

        async def pump() -> None:
            assert proc.stdout is not None
            if stdin is not None and proc.stdin is not None:
                try:
                    proc.stdin.write(stdin)
                    await proc.stdin.drain()
                    proc.stdin.close()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the command exited (or closed its stdin) unread: its output and exit status decide
            while chunk := await proc.stdout.read(65536):
                splitter.feed(decoder.decode(chunk))
            splitter.feed(decoder.decode(b"", final=True))
            splitter.close()

        try:
            await asyncio.wait_for(pump(), timeout)
            return await proc.wait()
        except (TimeoutError, asyncio.CancelledError, OutputCapExceeded) as exc:  # past the cap: stopped too
            _kill_group(proc)
            await _reap(proc)
            if isinstance(exc, TimeoutError):
                raise CommandTimeout(command) from None
            raise

    async def put(self, local: Path, remote: str, mode: int = 0o644) -> None:
        dest = Path(remote)
        dest.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(shutil.copyfile, local, dest)
        os.chmod(dest, mode)


REAP_S = 10.0
#: exec(2) refuses a program some process still holds open for writing (ETXTBSY). A file just written here (a uv lent
#: into a folder, `put` then run) can be held for a moment by a child another thread forked while the file was open:
#: the child keeps the descriptor until its own exec. The kernel's answer is transient; Go's os/exec meets the same
#: race (golang/go#22315). Bounded retries, then the error as it is.
ETXTBSY_TRIES = 20


async def _retry_pause(attempt: int) -> None:
    await asyncio.sleep(0.05 * attempt)


async def _spawn(argv: Sequence[str], with_stdin: bool, env: Mapping[str, str]) -> asyncio.subprocess.Process:
    attempt = 1
    while True:
        try:
            return await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if with_stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            if exc.errno != errno.ETXTBSY or attempt == ETXTBSY_TRIES:
                raise
        await _retry_pause(attempt)
        attempt += 1


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """After the kill: read and drop what is left in the pipe (asyncio's `wait()` also waits for the pipe to
    close, and a pump stopped at the output cap no longer reads it), then wait for the exit; bounded, since a
    process that left the group may hold the pipe open."""

    async def drain() -> None:
        if proc.stdout is not None:
            while await proc.stdout.read(1 << 16):
                pass
        await proc.wait()

    try:
        await asyncio.wait_for(drain(), REAP_S)
    except TimeoutError:
        pass


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
