"""Where a newly trusted SSH host key may be written, and writing it without following a link.

`--trust-new-host` (or the wizard's fingerprint dialog) appends one line to the known_hosts file the target
names (`target.ssh.known_hosts`, `--known-hosts`). A playbook names that path, so the path is held to two
places: the user's own `~/.ssh/known_hosts`, or a file under the user's configuration directory for
gpu-provisioner (`~/.config/gpu-provisioner/...`). Any other path is refused before the connection is made,
naming the field. Below that base every component is opened with `O_NOFOLLOW` beneath the directory opened
before it (a planted symbolic link anywhere below the base is refused, never followed), `..` is refused, and
the file must be a regular file with one link (not a FIFO, a device, or a hard link to another file).
Reading a known_hosts file from anywhere stays allowed: only writing is confined.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from provisioner.secrets import user_config_dir
from provisioner.transport.base import HostKeyError

FIELD = "target.ssh.known_hosts (or --known-hosts)"


class KnownHostsPathError(HostKeyError):
    """A known_hosts path a new host key may not be written to."""


def user_known_hosts() -> Path:
    return Path.home() / ".ssh" / "known_hosts"


def _split(path: str | Path) -> tuple[Path, tuple[str, ...]]:
    """(base directory, the components below it) for a path a key may be written to; refused otherwise."""
    raw = Path(path).expanduser()
    if "\x00" in str(raw):
        raise KnownHostsPathError(f"{FIELD} contains a NUL character")
    if ".." in raw.parts:
        raise KnownHostsPathError(f"{FIELD} {str(raw)!r} contains '..'; name the file directly")
    p = Path(os.path.abspath(raw))
    home = Path(os.path.abspath(Path.home()))
    if p == home / ".ssh" / "known_hosts":
        return home, (".ssh", "known_hosts")
    config = Path(os.path.abspath(user_config_dir()))
    if p != config and p.is_relative_to(config):
        return config, p.relative_to(config).parts
    raise KnownHostsPathError(
        f"{FIELD} names {p}: a new host key is written only to {home / '.ssh' / 'known_hosts'} or a file under "
        f"{config}; refusing to write it elsewhere. Point {FIELD} at one of those, or add the key there yourself "
        "after checking its fingerprint (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` on the node)")


def check_writable(path: str | Path) -> None:
    """Refuse (`KnownHostsPathError`) a path a new host key may not be written to, before connecting."""
    _split(path)


def _refuse_link(exc: OSError, where: Path) -> KnownHostsPathError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return KnownHostsPathError(f"{FIELD}: {where} is a symbolic link (or not a directory); a host key is "
                                   "never written through a link")
    return KnownHostsPathError(f"{FIELD}: cannot write {where}: {exc.strerror}")


def append_line(path: str | Path, line: str) -> Path:
    """Append `line` (one known_hosts entry) to `path`, confined as the module says; returns the file written."""
    if "\n" in line.rstrip("\n") or "\r" in line:
        raise KnownHostsPathError("a known_hosts entry is one line")
    base, rest = _split(path)
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    fd = os.open(base, flags)
    where = base
    try:
        for part in rest[:-1]:
            where = where / part
            try:
                os.mkdir(part, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            except OSError as exc:
                raise _refuse_link(exc, where) from None
            try:
                sub = os.open(part, flags | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise _refuse_link(exc, where) from None
            os.close(fd)
            fd = sub
        where = where / rest[-1]
        try:
            out = os.open(rest[-1], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                          | os.O_NOCTTY | os.O_CLOEXEC, 0o600, dir_fd=fd)
        except OSError as exc:
            raise _refuse_link(exc, where) from None
        try:
            info = os.fstat(out)
            if not stat.S_ISREG(info.st_mode):
                raise KnownHostsPathError(f"{FIELD}: {where} is not a regular file; refusing to write to it")
            if info.st_nlink > 1:
                raise KnownHostsPathError(f"{FIELD}: {where} has other hard links; refusing to write to it")
            data = (line.rstrip("\n") + "\n").encode()
            if os.write(out, data) != len(data):
                raise KnownHostsPathError(f"{FIELD}: short write to {where}")
        finally:
            os.close(out)
    finally:
        os.close(fd)
    return where
