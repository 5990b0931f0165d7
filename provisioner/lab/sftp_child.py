"""The lab node's SFTP server process: asyncssh's SFTP server over stdin/stdout, run INSIDE the node view.

The SSH endpoint (`provisioner.lab.node_ssh`) starts it for a ``sftp`` subsystem request like any
command of the node (in the node view's namespaces, `provisioner.lab.sandbox.node_argv`) and pipes
the channel to it, as OpenSSH's sshd runs ``sftp-server`` as the user. So what SFTP can reach is what
the node's mount namespace holds, confined by the kernel (no path mapping): the node's own root, where
a link planted by the node or a container resolves inside that root, never on the machine.

    python -m provisioner.lab.sftp_child        # SFTP version 3 on fds 0/1
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import asyncssh
from asyncssh.logging import logger
from asyncssh.sftp import SFTPServerHandler

#: the SFTP protocol version the lab offers (asyncssh's default, as OpenSSH's sftp-server)
SFTP_VERSION = 3


class _Channel:
    """What asyncssh's SFTP server asks of its channel, for a pipe."""

    def __init__(self) -> None:
        self.logger = logger
        self._closed = asyncio.Event()

    def is_closing(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def close(self) -> None:
        self._closed.set()

    def get_environment(self) -> dict[str, str]:
        return {}

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class _Reader:
    def __init__(self, stream: asyncio.StreamReader, chan: _Channel) -> None:
        self._stream = stream
        self.channel = chan
        self.logger = logger

    async def readexactly(self, n: int) -> bytes:
        return await self._stream.readexactly(n)  # IncompleteReadError is an EOFError: the session ends

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class _Writer:
    def __init__(self, fd: int, chan: _Channel) -> None:
        self._fd = fd
        self.channel = chan

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]

    def close(self) -> None:
        self.channel.close()


async def _serve() -> None:
    loop = asyncio.get_running_loop()
    stream = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream), os.fdopen(0, "rb", buffering=0))
    chan = _Channel()
    server = asyncssh.SFTPServer(chan)  # type: ignore[arg-type]
    handler = SFTPServerHandler(server, _Reader(stream, chan), _Writer(1, chan), SFTP_VERSION)  # type: ignore[arg-type]
    await handler.run()


def main() -> int:
    os.umask(0o022)
    try:
        os.chdir(os.environ.get("HOME", "/root"))
    except OSError:
        os.chdir("/")
    asyncio.run(_serve())
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
