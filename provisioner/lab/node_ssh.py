"""The lab node's SSH endpoint: an asyncssh server on loopback whose commands run real bash in the node view.

- Own host key (``<root>/private/ssh/ssh_host_ed25519_key``) and one authorized client key; the private
  client key is written to ``<root>/private/client_key`` (0600) and ``<root>/private/known_hosts`` holds
  the host key, so `provisioner.transport.ssh.SshTransport` verifies the lab like any host. ``private/``
  is in no view of the lab (`provisioner.lab.sandbox`).
- Only ``root`` with that key may log in (public key auth only). The auth banner says LAB.
- ``exec``: ``bash -c <command>`` inside `provisioner.lab.sandbox.node_argv`, as its own session
  (process group); stdout/stderr are streamed as they come, the exit status (or signal) is
  returned. A ``signal`` request, the channel closing or the connection dropping kills the group.
- ``sftp``: served by the lab itself (no OpenSSH sftp-server needed): `provisioner.lab.sftp_child`,
  asyncssh's SFTP server run as a command INSIDE the node view, the channel piped to it as to any
  command (sshd runs ``sftp-server`` the same way). What it can reach is the node's mount namespace,
  confined by the kernel: files land where the node's commands see them, and a link planted by the
  node resolves inside the node's root, never on the machine. Exec and shell keep running real bash.
- Scenario ``ssh-drop``: the first command that runs the driver installer (``--no-kernel-modules``)
  or ``uv pip install`` has its connection dropped abruptly `DROP_AFTER_S` seconds in (the
  command is killed); ``<root>/run/once/ssh-drop`` is removed so later connections work.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import signal
from pathlib import Path
from typing import Any

import asyncssh

from provisioner.lab import safe_fs
from provisioner.lab.commands import resident_socket
from provisioner.lab.sandbox import (
    ensure_disk_full_opt,
    held_node_argv,
    lab_python,
    lab_pythonpath,
    make_node_fs,
    node_argv,
    node_env,
    node_holder_argv,
    node_script,
    serving_lock,
    stop_ct_holders,
)
from provisioner.lab.state import LabState, make_private_dir, private_dir

BANNER = "LAB: gpu-provisioner lab node (simulated Proxmox VE host; nothing here is real hardware)\n"
SERVER_VERSION = "LAB_gpu-provisioner"
DROP_PATTERN = re.compile(r"--no-kernel-modules?\b|\buv pip install\b")
DROP_AFTER_S = 0.5
#: how long the node view's holder may take to build the view and import the stand-ins
HOLDER_START_S = 60.0
_SIGNALS = {"INT": signal.SIGINT, "TERM": signal.SIGTERM, "KILL": signal.SIGKILL, "HUP": signal.SIGHUP,
            "QUIT": signal.SIGQUIT, "USR1": signal.SIGUSR1, "USR2": signal.SIGUSR2}


def ensure_keys(root: Path) -> tuple[Path, Path, Path]:
    """Create (once) the host key, the client key and known_hosts content; returns (host key, client key,
    client public key)."""
    private = make_private_dir(root)
    ssh_dir = private / "ssh"
    safe_fs.make_dirs(root, ssh_dir, 0o700)
    host_key = ssh_dir / "ssh_host_ed25519_key"
    client_key = private / "client_key"
    for path in (host_key, client_key):
        if not safe_fs.exists(root, path):
            key = asyncssh.generate_private_key("ssh-ed25519", comment="LAB gpu-provisioner")
            safe_fs.write_bytes(root, path, key.export_private_key(), 0o600)
            safe_fs.write_bytes(root, path.with_name(path.name + ".pub"), key.export_public_key())
        safe_fs.chmod(root, path, 0o600)
    return host_key, client_key, client_key.with_name("client_key.pub")


def write_known_hosts(root: Path, host: str, port: int) -> Path:
    """``<root>/known_hosts`` with the lab's host key for ``[host]:port``."""
    private = private_dir(root)
    pub = safe_fs.read_bytes(root, private / "ssh" / "ssh_host_ed25519_key.pub").decode().split()
    path = private / "known_hosts"
    pattern = host if port == 22 else f"[{host}]:{port}"
    safe_fs.write_bytes(root, path, f"{pattern} {pub[0]} {pub[1]}\n".encode())
    return path


def _kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class _NodeSession(asyncssh.SSHServerSession[bytes]):
    def __init__(self, server: LabSshServer, conn: asyncssh.SSHServerConnection) -> None:
        self._server = server
        self._conn = conn
        self._chan: Any = None
        self._argv: list[str] | None = None
        self._command: str | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._pending: list[bytes] = []
        self._eof = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._task: asyncio.Task[None] | None = None

    # -- requests --------------------------------------------------------------------------
    def connection_made(self, chan: Any) -> None:
        self._chan = chan

    def shell_requested(self) -> bool:
        self._argv = ["bash"]
        self._command = None
        return True

    def exec_requested(self, command: str) -> bool:
        self._command = command
        self._argv = ["bash", "-c", command]
        return True

    def subsystem_requested(self, subsystem: str) -> bool:
        if subsystem != "sftp":
            return False
        # the SFTP server runs in the node view like any command (kernel-confined, see the module doc)
        self._command = None
        self._argv = ["env", "PYTHONPATH=" + os.pathsep.join(str(p) for p in lab_pythonpath()),
                      lab_python(), "-m", "provisioner.lab.sftp_child"]
        return True

    def session_started(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    # -- data in ---------------------------------------------------------------------------
    def data_received(self, data: bytes, datatype: int | None) -> None:
        if self._proc is not None and self._proc.stdin is not None:
            self._proc.stdin.write(data)
        else:
            self._pending.append(data)

    def eof_received(self) -> bool:
        self._eof = True
        if self._proc is not None and self._proc.stdin is not None:
            self._proc.stdin.close()
        return True  # stay half-open: the command's output and exit status still have to go out

    def signal_received(self, signame: str) -> None:
        if self._proc is not None:
            _kill_group(self._proc.pid, _SIGNALS.get(signame, signal.SIGTERM))

    def connection_lost(self, exc: Exception | None) -> None:
        if self._proc is not None and self._proc.returncode is None:
            _kill_group(self._proc.pid)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- running ---------------------------------------------------------------------------
    async def _pump(self, stream: asyncio.StreamReader | None, stderr: bool) -> None:
        if stream is None:
            return
        while chunk := await stream.read(65536):
            await self._writable.wait()
            if self._chan.is_closing():
                continue
            if stderr:
                self._chan.write_stderr(chunk)
            else:
                self._chan.write(chunk)

    async def _run(self) -> None:
        assert self._argv is not None
        state = self._server.state
        if self._argv == ["bash"]:
            self._chan.write(BANNER.encode())
        if state.has_scenario("disk-full"):
            mounted = [ensure_disk_full_opt(state, vmid) for vmid in state.list_cts()]
            if any(mounted):
                self._server.forget_held_views()  # they were made before the new mount
        try:
            argv, env = await self._server.node_command(self._argv)
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env, start_new_session=True)
        except OSError as exc:
            self._chan.write_stderr(f"LAB: cannot start the command: {exc}\n".encode())
            self._chan.exit(255)
            return
        self._proc = proc
        assert proc.stdin is not None
        for data in self._pending:
            proc.stdin.write(data)
        self._pending.clear()
        if self._eof:
            proc.stdin.close()
        pumps = asyncio.gather(self._pump(proc.stdout, False), self._pump(proc.stderr, True))
        if self._command is not None and self._server.should_drop(self._command):
            await asyncio.wait({asyncio.ensure_future(proc.wait())}, timeout=DROP_AFTER_S)
            self._server.dropped(self._command)
            _kill_group(proc.pid)
            self._conn.abort()
            await proc.wait()
            pumps.cancel()
            return
        await pumps
        rc = await proc.wait()
        if self._chan.is_closing():
            return
        if rc < 0:
            name = signal.Signals(-rc).name.removeprefix("SIG")
            self._chan.exit_with_signal(name)
        else:
            self._chan.exit(rc)


class _NodeServer(asyncssh.SSHServer):
    def __init__(self, lab: LabSshServer) -> None:
        self._lab = lab
        self._conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn

    def begin_auth(self, username: str) -> bool:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.send_auth_banner(BANNER)
        return True

    def password_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return bool(username == "root" and key.public_data == self._lab.client_public.public_data)

    def session_requested(self) -> _NodeSession:
        assert self._conn is not None
        return _NodeSession(self._lab, self._conn)


class LabSshServer:
    """The node's SSH endpoint (port 0 = a free port on `host`)."""

    def __init__(self, state: LabState, host: str = "127.0.0.1", port: int = 0) -> None:
        self.state = state
        self.host = host
        self._port = port
        self.host_key_path, self.client_key_path, client_pub = ensure_keys(state.root)
        self.client_public = asyncssh.read_public_key(str(client_pub))
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._holder: asyncio.subprocess.Process | None = None
        self._holder_script: str | None = None
        self._holder_sock: Path | None = None
        self._holder_gen = 0
        self._holder_lock: asyncio.Lock | None = None
        self._failed_script: str | None = None
        self._serving: int | None = None

    # -- the held node view ------------------------------------------------------------------
    async def node_command(self, argv: list[str]) -> tuple[list[str], dict[str, str]]:
        """(argv, env) that run `argv` on the node: in the held node view (`provisioner.lab.resident`,
        rebuilt when the view's script changes), or in a view of its own where none can be held."""
        state = self.state
        if self._holder_lock is None:
            self._holder_lock = asyncio.Lock()
        async with self._holder_lock:
            script = node_script(state)
            holder = self._holder
            if (holder is None or holder.returncode is not None or script != self._holder_script) \
                    and script != self._failed_script:
                holder = await self._start_holder(script)
            if holder is not None and holder.returncode is None and self._holder_sock is not None:
                return held_node_argv(state, holder.pid, argv), node_env(state)
        return node_argv(state, argv), node_env(state)

    def forget_held_views(self) -> None:
        """The machine's mounts under the lab root changed: the next command builds fresh views."""
        self._holder_script = None
        stop_ct_holders(self.state.root)

    async def _start_holder(self, script: str) -> asyncio.subprocess.Process | None:
        old = self._holder
        self._holder_gen += 1
        run = self.state.root / "run" / "resident"
        safe_fs.make_dirs(self.state.root, run)
        sock = resident_socket(self.state.root)
        with os.fdopen(safe_fs.open_append(self.state.root, run / "holder.log"), "ab") as log:
            proc = await asyncio.create_subprocess_exec(
                *node_holder_argv(script, sock), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=log, env=node_env(self.state, {"PYTHONPATH": os.pathsep.join(str(p) for p in lab_pythonpath())}), start_new_session=True)
        assert proc.stdout is not None
        try:
            ready = await asyncio.wait_for(proc.stdout.readline(), HOLDER_START_S)
        except TimeoutError:
            ready = b""
        if ready != b"ready\n":
            _kill_group(proc.pid)
            await proc.wait()
            self._failed_script = script  # commands build their own view (as before) until it changes
            return None
        self._holder, self._holder_script, self._holder_sock = proc, script, sock
        if old is not None:
            await self._stop_holder(old)
        return proc

    @staticmethod
    async def _stop_holder(proc: asyncio.subprocess.Process) -> None:
        if proc.returncode is None:
            _kill_group(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except TimeoutError:
                _kill_group(proc.pid)
                await proc.wait()

    @property
    def port(self) -> int:
        if self._acceptor is None:
            raise RuntimeError("the lab SSH server is not started")
        port: int = self._acceptor.sockets[0].getsockname()[1]
        return port

    @property
    def known_hosts(self) -> Path:
        return private_dir(self.state.root) / "known_hosts"

    async def start(self) -> LabSshServer:
        make_node_fs(self.state.root, self.state.settings().storages)
        lock = serving_lock(self.state.root)
        lock.parent.mkdir(parents=True, exist_ok=True)
        self._serving = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(self._serving, fcntl.LOCK_EX)  # held views live while this is locked
        await self.node_command(["true"])  # the held node view, before the first command
        self._acceptor = await asyncssh.create_server(
            lambda: _NodeServer(self), self.host, self._port, server_host_keys=[str(self.host_key_path)],
            encoding=None, server_version=SERVER_VERSION, allow_scp=False, keepalive_interval=0)
        write_known_hosts(self.state.root, self.host, self.port)
        return self

    async def stop(self) -> None:
        if self._acceptor is not None:
            self._acceptor.close()
            await self._acceptor.wait_closed()
            self._acceptor = None
        if self._holder is not None:
            await self._stop_holder(self._holder)
            self._holder = None
        stop_ct_holders(self.state.root)
        if self._serving is not None:
            os.close(self._serving)
            self._serving = None

    # -- scenario ssh-drop -------------------------------------------------------------------
    def _drop_marker(self) -> Path:
        return self.state.root / "run" / "once" / "ssh-drop"

    def should_drop(self, command: str) -> bool:
        return self._drop_marker().exists() and bool(DROP_PATTERN.search(command))

    def dropped(self, command: str) -> None:
        self._drop_marker().unlink(missing_ok=True)
        log = self.state.root / "run" / "ssh-drop.log"
        safe_fs.append_bytes(self.state.root, log, f"LAB: dropped the connection during: {command}\n".encode())
