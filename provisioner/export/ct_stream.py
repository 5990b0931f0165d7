"""A command's binary stdout, from a container, into a file on the controller: `pct exec <vmid> -- argv` run
on the node (no login shell: nothing a profile prints reaches the stream), read in chunks with a cap on the
bytes (past it the command is stopped and the file deleted by the caller). The transports' `run` reads text
lines; a tar of a root file system is neither text nor something to hold in memory.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import IO

from provisioner import quoting
from provisioner.transport.base import Transport
from provisioner.transport.container import ContainerTransport

CHUNK = 1 << 20
#: the largest SSH packet this client accepts on a stream's channel (it advertises it when it opens the channel,
#: RFC 4254 5.1; asyncssh's default is 32 KiB): a quarter of the transport's 256 KiB limit (RFC 4253 6.1 lets
#: OpenSSH take up to that), a quarter of the per-packet work for a GB tar (`bench/ssh_stream.py`)
STREAM_PKTSIZE = 128 << 10
STREAM_WINDOW = 32 * STREAM_PKTSIZE
STDERR_KEEP = 4096


class StreamFailed(RuntimeError):
    """The command failed, passed the cap or timed out (the message holds the tail of its stderr, escaped)."""


async def stream_to(ct: ContainerTransport, argv: list[str], dest: IO[bytes], *, limit: int,
                    timeout: float = 3600.0) -> int:
    """Run `argv` in the container, its stdout written to `dest`; the byte count."""
    node: Transport = ct.node
    wrapped = quoting.pct_exec(ct.vmid, argv)
    try:
        from provisioner.transport.ssh import SshTransport
    except ImportError:  # pragma: no cover - asyncssh is a dependency
        SshTransport = None  # type: ignore[assignment,misc]
    if SshTransport is not None and isinstance(node, SshTransport):
        return await asyncio.wait_for(_over_ssh(node, quoting.join(wrapped), dest, limit), timeout)
    return await asyncio.wait_for(_local(wrapped, dest, limit, getattr(node, "env", None)), timeout)


def _tail(err: bytes) -> str:
    from provisioner.export import trust

    lines = err.decode("utf-8", "replace").strip().splitlines()[-3:]
    return " | ".join(trust.shown(line, 300) for line in lines)


async def _over_ssh(node: object, command: str, dest: IO[bytes], limit: int) -> int:
    import asyncssh

    conn = await node.connect()  # type: ignore[attr-defined]
    proc = await conn.create_process(command, encoding=None, stdin=asyncssh.DEVNULL, max_pktsize=STREAM_PKTSIZE,
                                     window=STREAM_WINDOW)
    err = bytearray()

    async def drain_err() -> None:
        while chunk := await proc.stderr.read(65536):
            err.extend(chunk)
            del err[:-STDERR_KEEP]

    errs = asyncio.ensure_future(drain_err())
    size = 0
    try:
        while chunk := await proc.stdout.read(CHUNK):
            size += len(chunk)
            if size > limit:
                raise StreamFailed(f"the container sent more than {limit} bytes: stopped")
            dest.write(chunk)
        done = await proc.wait()
        await errs
    finally:
        if not errs.done():
            errs.cancel()
        proc.close()
    if done.exit_status != 0:
        raise StreamFailed(f"`{command}` exited {done.exit_status}: {_tail(bytes(err))}")
    return size


async def _local(argv: list[str], dest: IO[bytes], limit: int, env: dict[str, str] | None) -> int:
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                env=env, start_new_session=True)
    assert proc.stdout is not None and proc.stderr is not None
    err = bytearray()

    async def drain_err() -> None:
        assert proc.stderr is not None
        while chunk := await proc.stderr.read(65536):
            err.extend(chunk)
            del err[:-STDERR_KEEP]

    errs = asyncio.ensure_future(drain_err())
    size = 0
    try:
        while chunk := await proc.stdout.read(CHUNK):
            size += len(chunk)
            if size > limit:
                raise StreamFailed(f"the container sent more than {limit} bytes: stopped")
            dest.write(chunk)
        status = await proc.wait()
        await errs
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        if not errs.done():
            errs.cancel()
    if status != 0:
        raise StreamFailed(f"`{quoting.join(argv)}` exited {status}: {_tail(bytes(err))}")
    return size


def spool_path(folder: Path, name: str) -> Path:
    return folder / f".{name}.tar.partial"
