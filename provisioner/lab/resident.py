"""The lab node's resident stand-in server: the node view's holder process, answering stand-in calls.

One process per lab (started by the SSH endpoint, `provisioner.lab.node_ssh`) runs in the node
view (`provisioner.lab.sandbox.node_argv`) for the lab's whole life. It does two jobs:

- it holds the node view's namespaces, so a command of the SSH endpoint enters them with
  ``nsenter`` (`provisioner.lab.sandbox.held_node_argv`) instead of building the view again;
- it has imported the stand-ins (``pct``, ``nvidia-smi``, ``pveversion`` ... with pydantic and the
  render code) once, and runs each call in a forked child: the stand-in wrapper's client
  (`provisioner.lab.commands._client`, stdlib only; node and container wrappers alike, the socket
  is ``<root>/run/resident/node.sock``) sends its argv, environment and working directory and
  passes its stdin/stdout/stderr over a unix socket (SCM_RIGHTS); the child takes on the client's
  identity before it touches anything of the client's: where the client runs in another user
  namespace (a container) it joins that namespace first (``setns(CLONE_NEWUSER)``: the
  container's root, with capabilities over the container's namespaces only, none over the node's),
  then the client's mount namespace (the caller's view, node or container, exactly as it is), then
  the client's uid and gid as that namespace maps them (``setresgid``/``setresuid``); it keeps no
  descriptor of the node's (everything above 2 is closed), takes the client's descriptors as its
  own, runs the stand-in's ``main`` as ``python -m`` would, and its exit status (or signal) goes
  back to the client, which exits the same way. A client whose namespaces cannot be joined (one
  that left, or one in a namespace the node has no authority over) is told to run the stand-in
  itself. The client is named by a pidfd (``SO_PEERPIDFD``, else ``pidfd_open`` of its
  ``SO_PEERCRED`` pid), so a pid reused after the client left never names another process.

Its stdin is a pipe from the SSH endpoint: when that ends (the lab stopped, or was killed) it exits.
The child is a session of its own; a signal the client gets (INT/TERM/HUP/QUIT) is forwarded to
that session, and a client that goes away (killed, connection dropped) takes the session with it
(SIGKILL), as a process group killed by the SSH endpoint would. Where the socket is not there (or
refuses), the wrapper runs the stand-in itself as before: same output, only slower.

Protocol (one connection per call): client -> server one message ``{"module", "argv", "env",
"cwd"}`` (JSON) with 3 fds; then zero or more 1-byte signal numbers. Server -> client
``"exit N\\n"`` or ``"signal N\\n"``.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import importlib
import json
import os
import select
import signal
import socket
import sys
from pathlib import Path

#: modules imported before the first call (what the node stand-ins need)
PRELOAD = ("provisioner.lab.commands.pct", "provisioner.lab.commands.nvidia_smi",
           "provisioner.lab.commands.pveversion", "provisioner.lab.commands.nvidia_modprobe",
           "provisioner.lab.commands.lspci", "provisioner.lab.pvesh", "provisioner.lab.commands.systemctl",
           "provisioner.lab.pve_api")
MAX_MSG = 1 << 20
#: what a client may ask for: the node's stand-ins from the node's own view; from a container's view
#: (another user namespace) only the stand-ins a container has (a container never runs node code)
NODE_MODULES = frozenset({*PRELOAD[:-1]})
CT_MODULES = frozenset({"provisioner.lab.commands.apt_get", "provisioner.lab.commands.nvidia_smi",
                        "provisioner.lab.commands.kmod"})
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
#: getsockopt: a pidfd of the peer as it connected (Linux 6.5+)
SO_PEERPIDFD = 77
_LIBC = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int, kind: int) -> None:
    """setns(2) (os.setns is Python 3.12+)."""
    if _LIBC.setns(fd, kind) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _peer_pidfd(conn: socket.socket) -> int:
    """A pidfd of the client: as it connected where the kernel says (SO_PEERPIDFD), else by its pid."""
    try:
        return int(conn.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD))
    except OSError:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        return os.pidfd_open(int.from_bytes(creds[:4], sys.byteorder, signed=True))


def _peer_ids(conn: socket.socket) -> tuple[int, int]:
    """The client's uid and gid as the current user namespace maps them (SO_PEERCRED)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    return (int.from_bytes(creds[4:8], sys.byteorder), int.from_bytes(creds[8:12], sys.byteorder))


def _pidfd_pid(pidfd: int) -> int:
    """The pid a pidfd names (its fdinfo's ``Pid:``); -1 where that process has exited."""
    with open(f"/proc/self/fdinfo/{pidfd}") as fh:
        for line in fh:
            if line.startswith("Pid:"):
                return int(line.split()[1])
    raise OSError("no pid in the pidfd's fdinfo")


class Peer:
    """The client's namespaces, opened while its pidfd shows it alive (so they are its own)."""

    def __init__(self, conn: socket.socket) -> None:
        self.pidfd = _peer_pidfd(conn)
        self.user = self.mnt = -1
        try:
            pid = _pidfd_pid(self.pidfd)
            if pid <= 0:
                raise ProcessLookupError("the client has exited")
            self.user = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
            self.mnt = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            signal.pidfd_send_signal(self.pidfd, 0)  # still alive: the pid was the client's all along
            mine = os.stat("/proc/self/ns/user")
            theirs = os.fstat(self.user)
            self.same_userns = (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for fd in (self.pidfd, self.user, self.mnt):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.pidfd = self.user = self.mnt = -1


def become_peer(conn: socket.socket, user_fd: int, mnt_fd: int, same_userns: bool) -> tuple[int, int]:
    """Take on the client's credentials: its user namespace (where it is not ours), its mount
    namespace, its uid and gid as that namespace maps them. Returns (uid, gid)."""
    if not same_userns:
        _setns(user_fd, CLONE_NEWUSER)  # from here on: no capability over the node's namespaces
    uid, gid = _peer_ids(conn)
    _setns(mnt_fd, CLONE_NEWNS)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    return uid, gid


def _recv_request(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    fds = array.array("i")
    msg, anc, _flags, _addr = conn.recvmsg(MAX_MSG, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    request = json.loads(msg.decode())
    if not isinstance(request, dict):
        raise ValueError("bad request")
    return request, list(fds)


def _run_child(request: dict[str, object], fds: list[int], conn: socket.socket, peer: Peer, entered: int) -> None:
    """In the forked child: become the client (`become_peer`: its user namespace, mount namespace and
    ids) and then the stand-in it asked for; one byte on `entered` says it got that far (else the
    supervisor tells the client to run the stand-in itself). Never returns."""
    code = 255
    try:
        os.setsid()
        try:
            become_peer(conn, peer.user, peer.mnt, peer.same_userns)
        except OSError:
            os._exit(code)
        os.write(entered, b"1")
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # nothing of the node's stays at hand
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        env = request.get("env")
        if isinstance(env, dict):
            os.environ.clear()
            os.environ.update({str(k): str(v) for k, v in env.items()})
        with contextlib.suppress(OSError):
            os.chdir(str(request.get("cwd") or "/"))
        sys.stdin = open(0, encoding="utf-8", errors="surrogateescape", closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", errors="strict", closefd=False)
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
        module = str(request["module"])
        argv = request.get("argv")
        sys.argv = [module, *(str(a) for a in argv)] if isinstance(argv, list) else [module]
        try:
            # as `python -m MODULE` would: each stand-in's __main__ block is `raise SystemExit(main())`
            raise SystemExit(importlib.import_module(module).main())
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code & 0xFF
            else:
                sys.stderr.write(f"{exc.code}\n")
                code = 1
        except KeyboardInterrupt:
            code = 130
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


def _supervise(conn: socket.socket) -> None:
    """In a forked supervisor: run one call and report its status (never returns)."""
    try:
        request, fds = _recv_request(conn)
        if len(fds) != 3:  # its own stdin, stdout and stderr, or none of the resident's are lent to it
            conn.sendall(b"fallback\n")
            return
        try:
            peer = Peer(conn)
        except OSError:
            conn.sendall(b"fallback\n")  # the client runs the stand-in itself
            return
        if str(request.get("module")) not in (NODE_MODULES if peer.same_userns else CT_MODULES):
            conn.sendall(b"fallback\n")  # not served here: the client runs it itself, in its own view
            return
        entered, entered_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(entered)
            _run_child(request, fds, conn, peer, entered_w)
        os.close(entered_w)
        peer.close()
        for fd in fds:
            os.close(fd)
        ok = os.read(entered, 1) == b"1"
        os.close(entered)
        if not ok:  # it could not become the client: the client runs the stand-in itself, in its own view
            os.waitpid(pid, 0)
            conn.sendall(b"fallback\n")
            return
        pidfd = os.pidfd_open(pid)
        while True:
            ready, _, _ = select.select([conn.fileno(), pidfd], [], [])
            if pidfd in ready:
                break
            data = conn.recv(16)
            if not data:  # the client went away: so does the stand-in
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
                break
            for sig in data:
                with contextlib.suppress(OSError):
                    os.killpg(pid, sig)
        _, status = os.waitpid(pid, 0)
        reply = f"signal {os.WTERMSIG(status)}\n" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}\n"
        with contextlib.suppress(OSError):
            conn.sendall(reply.encode())
    finally:
        os._exit(0)


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def serve(sock_path: Path) -> int:
    # a call runs in the client's mount namespace, where the directory this started in (``python -m``
    # puts it first on sys.path) may be a container's: imports come from the lab's own paths only
    sys.path[:] = [p for p in sys.path if p and os.path.isabs(p) and p != os.getcwd()]
    for module in PRELOAD:
        importlib.import_module(module)
    sock_path.parent.mkdir(parents=True, exist_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fresh = sock_path.with_name(f"{sock_path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        fresh.unlink()
    # a lab root in a deep directory (a test's tmp_path) gives a path past sun_path's 108 bytes (unix(7)): bound
    # as it was, it failed ("AF_UNIX path too long"), no holder started and every command built a view of its own
    from provisioner.lab.commands._client import unix_address

    with unix_address(str(fresh)) as address:
        server.bind(address)
    os.chmod(fresh, 0o600)
    mine = fresh.stat().st_ino
    os.replace(fresh, sock_path)  # a newer holder takes the path over from an older one
    server.listen(64)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGCHLD, lambda *_: _reap())
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    try:
        while True:
            # stdin is a pipe from the SSH endpoint: at its end (the lab stopped or died) so does this
            ready, _, _ = select.select([server, sys.stdin.fileno()], [], [])
            if sys.stdin.fileno() in ready and not os.read(sys.stdin.fileno(), 4096):
                return 0
            if server not in ready:
                continue
            conn, _ = server.accept()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                server.close()
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _supervise(conn)
            conn.close()
    finally:
        with contextlib.suppress(OSError):
            if sock_path.stat().st_ino == mine:  # not a newer holder's
                sock_path.unlink()


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "--socket":
        sys.stderr.write("usage: python -m provisioner.lab.resident --socket PATH\n")
        return 2
    return serve(Path(args[1]))


if __name__ == "__main__":
    raise SystemExit(main())
