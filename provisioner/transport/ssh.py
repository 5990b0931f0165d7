"""SSH with asyncssh: host keys checked against known_hosts, explicit trust-on-first-use.

- An unknown host is refused unless `trust_new_host` is set (the `--trust-new-host` flag or the
  TUI's fingerprint dialog). The key appended to known_hosts is the key of the connection that was
  made, and only when its fingerprint is the one shown and confirmed (`confirmed_fingerprint`, else
  the one the probe showed): a server that offers another key the second time gets nothing written
  and the connection is refused. It is written only to ~/.ssh/known_hosts or a file under the user's
  configuration directory, never through a link (`known_hosts_file`).
- A host whose key differs from known_hosts is always refused, loudly; a key marked `@revoked` is
  named as revoked.
- stdout and stderr are merged and streamed line by line; timeouts kill the remote command.
- Ciphers: AES-GCM is offered first (`cipher_preference`), then asyncssh's defaults. The server takes the
  first of the client's list it supports (RFC 4253 7.1); OpenSSH supports both AES-GCM ciphers, and with AES-NI
  they cost asyncssh half of chacha20-poly1305's CPU at both ends (`bench/ssh_stream.py`), which matters for
  what is streamed: an export's tar of a GB venv, an image upload.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # asyncssh (~0.9 s) is imported when a connection is made, not at start-up
    import asyncssh

from provisioner.events import Bus, Message
from provisioner.transport import known_hosts_file
from provisioner.transport.base import (
    CommandTimeout,
    CopyFailed,
    HostKeyError,
    LineCallback,
    LineSplitter,
    OutputCapExceeded,
    Transport,
    TransportError,
    host_label,
)
from provisioner.transport.plain_errors import connect_error

_PGID_MARKER = "__provisioner_pgid__="
#: offered before asyncssh's default order (which begins with chacha20-poly1305)
_PREFERRED_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")


def cipher_preference() -> list[str]:
    """The client's cipher list: AES-GCM first, then every other cipher asyncssh offers by default."""
    from asyncssh.encryption import get_default_encryption_algs

    defaults = [alg.decode() for alg in get_default_encryption_algs()]
    return [c for c in _PREFERRED_CIPHERS if c in defaults] + [c for c in defaults if c not in _PREFERRED_CIPHERS]


@dataclass
class SshTarget:
    host: str
    port: int = 22
    user: str = "root"
    key_file: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    trust_new_host: bool = False
    connect_timeout: float = 15.0
    #: the fingerprint the user saw and confirmed (the TUI's dialog): the only key that may be trusted
    confirmed_fingerprint: str | None = None

    @property
    def label(self) -> str:
        return host_label(self.host, self.port, self.user)


def fingerprint(key: asyncssh.SSHKey) -> str:
    """OpenSSH-style SHA256 fingerprint of a public key (asyncssh's own, `SHA256:...`)."""
    return str(key.get_fingerprint("sha256"))


def _known_host_pattern(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


async def probe_host_key(target: SshTarget) -> tuple[str, str]:
    """Fetch the server's host key without authenticating: (fingerprint, status).

    status is "known", "unknown", "changed" or "revoked" (marked `@revoked`) relative to known_hosts.
    """
    import asyncssh
    conn_key = await asyncssh.get_server_host_key(target.host, target.port)
    if conn_key is None:
        raise TransportError(f"{target.label}: no host key offered")
    status = _known_status(target, conn_key)
    return fingerprint(conn_key), status


KnownKeys = tuple[list["asyncssh.SSHKey"], list["asyncssh.SSHKey"], list["asyncssh.SSHKey"]]


def known_keys(target: SshTarget) -> KnownKeys:
    """(trusted host keys, trusted CA keys, revoked keys) for the target, matched as OpenSSH does:
    on port 22 the entry is the bare `host` (or address); on any other port only `[host]:port` —
    a bare `host` entry is NOT trusted for another port (asyncssh's own `match` falls back to it)."""
    import asyncssh

    path = Path(target.known_hosts).expanduser()
    if not path.exists():
        return [], [], []
    known = asyncssh.read_known_hosts(str(path))
    addr = "127.0.0.1" if target.host == "localhost" else target.host
    names = [target.host] + ([addr] if addr != target.host else [])
    if target.port != 22:
        names = [f"[{name}]:{target.port}" for name in names]
    trusted: list[asyncssh.SSHKey] = []
    ca_keys: list[asyncssh.SSHKey] = []
    revoked: list[asyncssh.SSHKey] = []
    for name in names:
        # port=None: no fallback to a bare entry; addr="": `name` may be "[host]:port", not an address
        keys, cas, revs, *_ = known.match(name, "", None)
        trusted += keys
        ca_keys += cas
        revoked += revs
    return trusted, ca_keys, revoked


def _known_status(target: SshTarget, key: asyncssh.SSHKey) -> str:
    trusted, _, revoked = known_keys(target)
    if any(k.public_data == key.public_data for k in revoked):
        return "revoked"
    if any(k.public_data == key.public_data for k in trusted):
        return "known"
    return "changed" if trusted else "unknown"


class SshTransport(Transport):
    name = "ssh"

    def __init__(self, target: SshTarget, bus: Bus | None = None) -> None:
        super().__init__(bus, target.label)
        self.target = target
        self.name = f"ssh:{target.label}"
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()

    async def connect(self) -> asyncssh.SSHClientConnection:
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            self._conn = await self._connect()
            return self._conn

    async def _connect(self) -> asyncssh.SSHClientConnection:
        import asyncssh
        t = self.target
        known_path = Path(t.known_hosts).expanduser()
        try:
            fp, status = await asyncio.wait_for(probe_host_key(t), t.connect_timeout)
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            raise TransportError(f"{t.label}: cannot connect: "
                                 f"{connect_error(exc, t.host, t.port, t.connect_timeout)}") from None
        if status == "revoked":
            raise HostKeyError(
                f"HOST KEY REVOKED for {t.label}: the server offers {fp}, which {known_path} marks @revoked. "
                "Refusing to connect. A revoked key is never trusted again; the host needs a new key.")
        if status == "changed":
            raise HostKeyError(
                f"HOST KEY CHANGED for {t.label}: the server offers {fp}, which does not match "
                f"{known_path}. This can be an attack (man in the middle) or a reinstalled host. "
                f"Refusing to connect. If the change is expected, remove the old entry with "
                f"`ssh-keygen -R {_known_host_pattern(t.host, t.port)!s}` and connect again."
            )
        expected: str | None = None
        if status == "unknown":
            if not t.trust_new_host:
                raise HostKeyError(
                    f"unknown host {t.label} (key {fp}); not in {known_path}. Verify the fingerprint "
                    "on the host (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`) and rerun with "
                    "--trust-new-host, or confirm it in the TUI."
                )
            known_hosts_file.check_writable(known_path)  # ~/.ssh/known_hosts or the config dir, before connecting
            expected = t.confirmed_fingerprint or fp
            if expected != fp:
                raise HostKeyError(
                    f"HOST KEY CHANGED for {t.label} since it was confirmed: confirmed {expected}, the server "
                    f"now offers {fp}. Nothing was written to {known_path}; refusing to connect.")
        seen: list[asyncssh.SSHKey] = []
        options: dict[str, object] = {
            "username": t.user,
            # exactly the keys our port-aware match trusts (not asyncssh's fallback to a bare host entry)
            "known_hosts": known_keys(t),
            "connect_timeout": t.connect_timeout,
            "keepalive_interval": 5,
            "keepalive_count_max": 3,
            "encryption_algs": cipher_preference(),
            # first contact: this very connection's key is accepted only if it is the confirmed one
            "client_factory": lambda: _confirmed_key_client(expected, seen),
        }
        if t.key_file:
            options["client_keys"] = [os.path.expanduser(t.key_file)]
        try:
            conn = await asyncssh.connect(t.host, t.port, **options)
        except asyncssh.HostKeyNotVerifiable as exc:
            if expected is not None and seen:
                raise HostKeyError(
                    f"HOST KEY CHANGED for {t.label} between connections: {fp} was shown and confirmed, the "
                    f"server then offered {fingerprint(seen[-1])}. Nothing was written to {known_path}; "
                    "refusing to connect.") from None
            raise HostKeyError(f"{t.label}: host key not verifiable: {exc}") from None
        except asyncssh.PermissionDenied as exc:
            raise TransportError(f"{t.label}: authentication failed: {exc.reason}") from None
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            raise TransportError(f"{t.label}: cannot connect: "
                                 f"{connect_error(exc, t.host, t.port, t.connect_timeout)}") from None
        if expected is not None:
            key = conn.get_server_host_key()
            if key is None or fingerprint(key) != expected:  # the accepted key is the confirmed one, or nothing
                conn.close()
                raise HostKeyError(f"{t.label}: the connection's host key is not the confirmed {expected}; "
                                   f"nothing was written to {known_path}")
            try:  # beneath its directory, no link followed (`known_hosts_file`)
                known_hosts_file.append_line(
                    known_path, f"{_known_host_pattern(t.host, t.port)} {key.export_public_key().decode().strip()}")
            except HostKeyError:
                conn.close()
                raise
            if self.bus is not None:
                how = "confirmed" if t.confirmed_fingerprint else "--trust-new-host"
                self.bus.emit(Message(host=self.host_label, level="warning",
                                      text=f"trusted the new host key {expected} of {t.label} ({how}); "
                                           f"added to {known_path}"))
        return conn

    async def _run(
        self, argv: Sequence[str], command: str, *, timeout: float | None, on_line: LineCallback,
        stdin: bytes | None,
    ) -> int | None:
        import asyncssh
        conn = await self.connect()
        pgid: list[int] = []

        def first_line_aware(line: str) -> None:
            if not pgid and line.startswith(_PGID_MARKER):
                pgid.append(int(line[len(_PGID_MARKER):]))
                return
            on_line(line)

        splitter = LineSplitter(first_line_aware)
        # sshd makes the session shell a session leader: $$ is the process group to kill on timeout.
        # stderr is merged into stdout remotely so the order of lines is preserved.
        wrapped = f"exec 2>&1; echo {_PGID_MARKER}$$; {command}"
        try:
            proc = await conn.create_process(wrapped, encoding="utf-8", errors="replace",
                                             stdin=asyncssh.PIPE if stdin is not None else asyncssh.DEVNULL)
        except (OSError, asyncssh.Error) as exc:
            self._conn = None
            raise TransportError(f"{self.target.label}: connection lost: {exc}") from None

        async def pump() -> int | None:
            if stdin is not None:
                proc.stdin.write(stdin.decode("utf-8", "replace"))
                proc.stdin.write_eof()
            async for chunk in _chunks(proc.stdout):
                splitter.feed(chunk)
            splitter.close()
            completed = await proc.wait()
            if completed.exit_status is None and completed.exit_signal is None:
                raise TransportError(f"{self.target.label}: connection dropped while running `{command}`")
            return completed.exit_status if completed.exit_status is not None else 255

        try:
            return await asyncio.wait_for(pump(), timeout)
        except TimeoutError:
            await self._kill_remote(proc, pgid)
            raise CommandTimeout(command) from None
        except (asyncio.CancelledError, OutputCapExceeded):  # past the output cap: stopped too
            await self._kill_remote(proc, pgid)
            raise
        except (asyncssh.Error, ConnectionError, BrokenPipeError) as exc:
            self._conn = None
            raise TransportError(f"{self.target.label}: connection dropped while running `{command}`: {exc}") \
                from None

    async def _kill_remote(self, proc: asyncssh.SSHClientProcess[str], pgid: list[int]) -> None:
        """Kill the remote command's whole process group, then close the channel."""
        import asyncssh
        conn = self._conn
        if pgid and conn is not None and not conn.is_closed():
            try:
                await asyncio.wait_for(conn.run(f"kill -KILL -- -{pgid[0]}", check=False), 5)
            except (asyncssh.Error, OSError, TimeoutError):
                pass
        proc.close()

    async def put(self, local: Path, remote: str, mode: int = 0o644) -> None:
        import asyncssh
        conn = await self.connect()
        try:
            async with conn.start_sftp_client() as sftp:
                await sftp.put(str(local), remote)
                await sftp.chmod(remote, mode)
        except asyncssh.SFTPError as exc:  # the node answered: the copy itself was refused
            raise CopyFailed(f"{self.target.label}: copy to {remote} failed: {exc.reason}") from None
        except (OSError, asyncssh.Error) as exc:
            raise TransportError(f"{self.target.label}: copy to {remote} failed: {exc}") from None

    async def close(self) -> None:
        if self._conn is not None:
            import asyncssh

            self._conn.close()
            try:
                await self._conn.wait_closed()
            except (OSError, asyncssh.Error):
                pass
            self._conn = None


def _confirmed_key_client_class() -> type[asyncssh.SSHClient]:
    import asyncssh

    class ConfirmedKeyClient(asyncssh.SSHClient):
        """Accepts a host key known_hosts does not list only when its fingerprint is the confirmed one
        (asyncssh asks this after known_hosts and `@revoked`); records every such key offered."""

        def __init__(self, expected: str | None, seen: list[asyncssh.SSHKey]) -> None:
            self.expected = expected
            self.seen = seen

        def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
            self.seen.append(key)
            return self.expected is not None and fingerprint(key) == self.expected

    return ConfirmedKeyClient


def _confirmed_key_client(expected: str | None, seen: list[asyncssh.SSHKey]) -> asyncssh.SSHClient:
    return _confirmed_key_client_class()(expected, seen)  # type: ignore[call-arg]


async def _chunks(stream: asyncssh.SSHReader[str]) -> asyncssh.AsyncIterator[str]:  # type: ignore[name-defined]
    while True:
        data = await stream.read(65536)
        if not data:
            return
        yield data
