"""What a container (or an export folder) says, checked before anything is fetched, written or rendered.

A tenant with root in the proving container controls every byte it answers: uv's pylock, the venv's
runtime.json, the sizes it reads from the index. So each wheel's file name must follow the wheel file name
grammar (`packaging.utils.parse_wheel_filename`), name the package and version it is listed under, and be
the last segment of its URL (percent-decoded only into the characters a wheel name may hold: no `/`, `\\`,
`..`, absolute or hidden names); the URL must be https on an allowed index host (the indexes the venv was
built from and the hosts those indexes keep their files on) or on one of the site's mirrors; sizes and
sha256 must be well formed. The export folder is read without following symbolic links, bounded, and a
file that fails is named without its content.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from pydantic import ValidationError

#: the largest wheel an export takes (the biggest CUDA wheels are ~3 GiB)
MAX_WHEEL_BYTES = 16 << 30
#: the largest export file read (pylock.toml of a few hundred wheels is ~100 KiB)
MAX_EXPORT_FILE = 8 << 20
#: where the public indexes keep their files (pages on one host, files on another)
FILE_HOSTS = {
    "pypi.org": ("files.pythonhosted.org",),
    "download.pytorch.org": ("download.pytorch.org", "download-r2.pytorch.org"),
}
_WHEEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]*\.whl")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class Untrusted(ValueError):
    """A value from the container or an export folder that fails its check; the message names the field."""


def shown(value: object, limit: int = 120) -> str:
    """A hostile value for a message: ASCII-escaped (no terminal escapes, no newlines) and cut short."""
    text = ascii(value)
    return text if len(text) <= limit else text[:limit] + "…'"


def origin(url: str) -> str:
    """`scheme://host[:port]` of an http(s) URL, lower-cased ("" for anything else)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        return ""
    return f"{parts.scheme}://{parts.netloc}".lower()


def allowed_origins(indexes: Iterable[str], mirrors: Iterable[str] = ()) -> frozenset[str]:
    """The origins wheels may come from: each index the venv was built from (as the engine recorded it, not
    as the container says) and the https hosts a public index keeps its files on (`FILE_HOSTS`), and each
    site mirror or files host the site names. Anything else (file://, another host) is foreign."""
    out: set[str] = set()
    mirror_origins = {o for o in (origin(m) for m in mirrors) if o}
    out |= mirror_origins
    for url in indexes:
        o = origin(url)
        if not o:
            continue
        out.add(o)  # an index the engine recorded (the playbook's or the resolver's), as it was named
        host = (urlsplit(url).hostname or "").lower()
        out |= {f"https://{h}" for h in FILE_HOSTS.get(host, ())}
    return frozenset(out)


def wheel_filename(name: str, *, field: str) -> str:
    """`name` if it is a plain wheel file name (grammar and characters); Untrusted naming `field` otherwise."""
    if not _WHEEL_NAME.fullmatch(name) or ".." in name:
        raise Untrusted(f"{field}: {shown(name)} is not a wheel file name (a plain name: letters, digits, ._+!-)")
    try:
        parse_wheel_filename(name)
    except InvalidWheelFilename:
        raise Untrusted(f"{field}: {shown(name)} does not follow the wheel file name grammar") from None
    return name


def wheel_from_url(url: str, *, package: str, version: str, allowed: frozenset[str] | None, field: str,
                   listed_name: str | None = None) -> str:
    """The wheel's file name: the URL's last segment, checked (scheme, host, grammar, package and version).
    `allowed` None: any https or http origin (an export folder read back states its own hosts)."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http"):
        raise Untrusted(f"{field}: {shown(url)} is not an https URL (file://, ftp:// and others are refused)")
    if parts.username or parts.password or not parts.hostname:
        raise Untrusted(f"{field}: {shown(url)} has no plain host (user info is refused)")
    o = origin(url)
    if allowed is not None and o not in allowed:
        raise Untrusted(f"{field}: {shown(url)} is on {shown(o)}, not an allowed index host "
                        f"({', '.join(sorted(allowed)) or 'none'})")
    if allowed is None and parts.scheme != "https":
        raise Untrusted(f"{field}: {shown(url)} is not https")
    if parts.query:
        raise Untrusted(f"{field}: {shown(url)} carries a query")
    segments = parts.path.split("/")
    if any(unquote(s) in (".", "..") for s in segments):
        raise Untrusted(f"{field}: {shown(url)} has a '..' path segment")
    name = wheel_filename(unquote(segments[-1]), field=field)
    if listed_name is not None and listed_name != name:
        raise Untrusted(f"{field}: the listed name {shown(listed_name)} is not the URL's file {shown(name)}")
    wname, wversion, _, _ = parse_wheel_filename(name)
    if wname != canonicalize_name(package) or str(wversion) != str(version):
        raise Untrusted(f"{field}: {shown(name)} is not a wheel of {shown(package)} {shown(version)}")
    return name


def sha256(value: object, *, field: str) -> str:
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise Untrusted(f"{field}: {shown(value)} is not a sha256 (64 lower-case hex digits)")
    return value


def size(value: object, *, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_WHEEL_BYTES:
        raise Untrusted(f"{field}: {shown(value)} is not a wheel size (1 byte to {MAX_WHEEL_BYTES >> 30} GiB)")
    return value


def fields_of(exc: ValidationError, where: str) -> str:
    """A pydantic error as `where: field: message` lines, without the input (it may be a stranger's file)."""
    return "; ".join(f"{where}: {'.'.join(map(str, e['loc'])) or '(document)'}: {e['msg']}" for e in exc.errors())


def read_export_file(folder: Path, name: str, *, limit: int = MAX_EXPORT_FILE) -> str:
    """`folder/name` as UTF-8 text, opened without following a symbolic link (O_NOFOLLOW), a regular file of
    at most `limit` bytes; Untrusted names the file and why, never its content or a link's target."""
    try:
        dirfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise Untrusted(f"{folder}: cannot open the export folder ({os.strerror(exc.errno or 0)})") from None
    try:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Untrusted(f"{folder / name} is a symbolic link: refused (an export folder holds plain files)"
                                ) from None
            raise Untrusted(f"{folder / name}: cannot open ({os.strerror(exc.errno or 0)})") from None
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise Untrusted(f"{folder / name} is not a regular file: refused")
            data = fh.read(limit + 1)
    finally:
        os.close(dirfd)
    if len(data) > limit:
        raise Untrusted(f"{folder / name} is larger than {limit} bytes: refused")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Untrusted(f"{folder / name} is not UTF-8 text") from None
