"""Client of the lab's resident stand-in server (`provisioner.lab.resident`): stdlib only, run with
``python -S`` by a node stand-in's wrapper. Sends argv, environment and working directory, passes
stdin/stdout/stderr, forwards INT/TERM/HUP/QUIT and exits as the stand-in did (status or signal).
Where the server cannot be reached it runs the stand-in itself (``python -m MODULE``).

    python -S _client.py SOCKET PYTHON MODULE [ARGS...]
"""

import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import Iterator


def _fallback(python: str, module: str, args: list[str]) -> None:
    os.execv(python, [python, "-m", module, *args])  # noqa: S606 - argv list, no shell


#: sun_path holds 108 bytes with its NUL (unix(7)); a longer path is reached through its directory's descriptor
SUN_PATH_MAX = 107


@contextlib.contextmanager
def unix_address(path: str) -> Iterator[str]:
    """The address to bind(2) or connect(2) for the socket at `path`, however long: `path` itself up to
    `SUN_PATH_MAX`, past it ``/proc/self/fd/N/NAME`` (N an O_PATH descriptor of its directory, open while the
    address is in use). `provisioner.lab.resident.serve` binds and `main` connects through it."""
    if len(os.fsencode(path)) <= SUN_PATH_MAX:
        yield path
        return
    head, name = os.path.split(path)
    dfd = os.open(head or ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{dfd}/{name}"
    finally:
        os.close(dfd)


def main() -> None:
    sock_path, python, module, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with unix_address(sock_path) as address:
            conn.connect(address)
        try:
            cwd = os.getcwd()
        except OSError:
            cwd = "/"
        request = json.dumps({"module": module, "argv": args, "env": dict(os.environ), "cwd": cwd}).encode()
        conn.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(memoryview(
            __import__("array").array("i", [0, 1, 2])).cast("B")))])
    except OSError:
        conn.close()
        _fallback(python, module, args)
        return

    def forward(signum: int, _frame: object) -> None:
        try:
            conn.send(bytes([signum]))
        except OSError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, forward)
    reply = b""
    while not reply.endswith(b"\n"):
        try:
            chunk = conn.recv(64)
        except InterruptedError:
            continue
        if not chunk:
            break
        reply += chunk
    kind, _, number = reply.decode(errors="replace").strip().partition(" ")
    if kind == "fallback":
        conn.close()
        _fallback(python, module, args)
    if kind == "signal" and number.isdigit():
        signum = int(number)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)
    os._exit(int(number) if kind == "exit" and number.isdigit() else 255)


if __name__ == "__main__":
    main()
