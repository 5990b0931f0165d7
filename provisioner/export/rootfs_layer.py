"""A layer from a tar stream the proving container wrote: every member checked, then written again sorted,
owned by 0:0, with one fixed mtime, gzip'd with no name or time (the same container gives the same digest).

The container is a stranger's (a tenant with root in it controls what it sends): its tar is read from a
spool file on the controller (written with a size cap, never held in memory) and each member must be a
plain relative name (no absolute path, no `.`/`..`/empty component, no NUL or control character, valid
UTF-8), a regular file, directory, symbolic link or hard link (device nodes, FIFOs, sparse and other members
are refused), a relative link target that stays inside the root, a hard link to a regular file already sent,
no name twice and no member beneath a link or a file. Set-uid/set-gid bits are dropped; only the
permission and sticky bits are kept. The NVIDIA driver's userspace (what the container toolkit/CDI or the
driver step brings from the host) is left out by name (`is_driver_file`).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import posixpath
import re
import tarfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from provisioner import atomic
from provisioner.export import trust

MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
#: gzip level: 1 (a venv of torch is a GB; level 6 takes three times as long for ~10% less). The digest of
#: the compressed blob is reproducible with the same zlib; the layer's diff_id (its tar) everywhere.
GZIP_LEVEL = 1
_CTRL = re.compile(r"[\x00-\x1f\x7f]")
_DRIVER_NAMES = re.compile(
    r"^(libcuda\.so(\..*)?|libcudadebugger\.so(\..*)?|libnvidia-.*\.so(\..*)?|libnvcuvid\.so(\..*)?|"
    r"libnvoptix\.so(\..*)?|lib(GLX|EGL|GLESv1_CM|GLESv2|vdpau)_nvidia\.so(\..*)?|libOpenCL\.so\.1(\..*)?|"
    r"nvidia-(smi|debugdump|persistenced|cuda-mps-control|cuda-mps-server|installer|uninstall|settings|xconfig|"
    r"modprobe|powerd|ngx-updater|bug-report\.sh)|nvidia_icd\.json|10_nvidia\.json|nvidia\.icd)$")
_DRIVER_DIRS = ("lib/firmware/nvidia/", "usr/lib/firmware/nvidia/", "usr/share/nvidia/", "var/lib/nvidia/",
                "usr/lib/nvidia/", "usr/share/doc/NVIDIA_GLX-1.0/")


class LayerRefused(ValueError):
    """A member of the container's tar that this layer does not take (names the member, shown escaped)."""


def is_driver_file(name: str) -> bool:
    """A file of the NVIDIA driver's userspace (the host's, brought in by the toolkit/CDI or the driver step:
    an image never ships it): libcuda, libnvidia-*, nvidia-smi and the other tools, the firmware, the ICDs."""
    base = posixpath.basename(name)
    return bool(_DRIVER_NAMES.match(base)) or any(name.startswith(d) or name + "/" == d for d in _DRIVER_DIRS)


@dataclass
class Entry:
    """One member to write: its data is `size` bytes at `offset` of the spool, or `data`."""

    name: str
    kind: str  # "file", "dir", "symlink", "hardlink"
    mode: int
    size: int = 0
    offset: int = 0
    link: str = ""
    data: bytes | None = None


@dataclass
class Members:
    """A checked tar: entries by name, what was left out."""

    entries: dict[str, Entry] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    total: int = 0


def check_name(raw: str, what: str = "member") -> str:
    """A member name as a plain relative path (a leading ./ removed, a trailing / removed); refused otherwise."""
    name = raw[2:] if raw.startswith("./") else raw
    name = name.rstrip("/")
    if raw.startswith("/"):
        raise LayerRefused(f"{what} {trust.shown(raw)}: an absolute name: refused")
    if not name or name == ".":
        return ""
    if _CTRL.search(name) or len(name) > 4096:
        raise LayerRefused(f"{what} {trust.shown(raw)}: a control character or an overlong name: refused")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise LayerRefused(f"{what} {trust.shown(raw)}: not UTF-8: refused") from None
    for part in name.split("/"):
        if part in ("", ".", "..") or len(part) > 255:
            raise LayerRefused(f"{what} {trust.shown(raw)}: an empty, `.` or `..` component: refused")
    return name


def _check_link(name: str, target: str) -> str:
    if not target or _CTRL.search(target) or len(target) > 4096:
        raise LayerRefused(f"member {trust.shown(name)}: link target {trust.shown(target)} refused")
    if not target.startswith("/"):
        joined = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
        if joined == ".." or joined.startswith("../"):
            raise LayerRefused(f"member {trust.shown(name)}: link target {trust.shown(target)} leaves the root: "
                               "refused")
    return target


def read_members(spool: Path, *, drop: Callable[[str], bool] = is_driver_file, limit: int = 256 << 30,
                 max_members: int = 5_000_000) -> Members:
    """The checked members of the tar at `spool` (LayerRefused names the first that fails)."""
    out = Members()
    with open(spool, "rb") as fh:
        try:
            tar = tarfile.open(fileobj=fh, mode="r:", errorlevel=2)
        except tarfile.TarError as exc:
            raise LayerRefused(f"the container's tar stream cannot be read: {exc}") from None
        try:
            for m in _iter(tar):
                if len(out.entries) >= max_members:
                    raise LayerRefused(f"more than {max_members} members: refused")
                _take(out, m, drop, limit)
        except tarfile.TarError as exc:
            raise LayerRefused(f"the container's tar stream is damaged: {exc}") from None
    _check_parents(out)
    return out


def _iter(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    while True:
        m = tar.next()
        if m is None:
            return
        tar.members.clear()  # type: ignore[attr-defined]  # bounded memory: the index keeps only what `Entry` holds
        yield m


def _take(out: Members, m: tarfile.TarInfo, drop: Callable[[str], bool], limit: int) -> None:
    name = check_name(m.name)
    if not name:
        return
    if name in out.entries:
        raise LayerRefused(f"member {trust.shown(name)} appears twice: refused")
    if m.issparse() or not (m.isreg() or m.isdir() or m.issym() or m.islnk()):
        raise LayerRefused(f"member {trust.shown(name)}: a device node, FIFO or other special member: refused")
    if drop(name):
        out.dropped.append(name)
        return
    mode = m.mode & 0o1777
    if m.isdir():
        out.entries[name] = Entry(name, "dir", mode)
    elif m.issym():
        out.entries[name] = Entry(name, "symlink", 0o777, link=_check_link(name, m.linkname))
    elif m.islnk():
        target = check_name(m.linkname, f"hard link {trust.shown(name)} ->")
        first = out.entries.get(target)
        if first is None and target in out.dropped:
            out.dropped.append(name)
            return
        if first is None or first.kind != "file":
            raise LayerRefused(f"member {trust.shown(name)}: a hard link to {trust.shown(m.linkname)}, not a file "
                               "sent before it: refused")
        out.entries[name] = Entry(name, "hardlink", first.mode, link=target)
    else:
        out.total += m.size
        if out.total > limit:
            raise LayerRefused(f"the container's files pass {limit} bytes: refused")
        out.entries[name] = Entry(name, "file", mode, size=m.size, offset=m.offset_data)


def _check_parents(out: Members) -> None:
    """No member beneath a link or a file (a name stored through a symbolic link writes where the link
    points when the layer is unpacked)."""
    for name in out.entries:
        parent = posixpath.dirname(name)
        while parent:
            above = out.entries.get(parent)
            if above is not None:
                if above.kind != "dir":
                    raise LayerRefused(f"member {trust.shown(name)} lies beneath {trust.shown(parent)}, which is "
                                       f"a {above.kind}: refused")
                break  # its own parents were checked as a member
            parent = posixpath.dirname(parent)


def with_parents(entries: Iterable[Entry]) -> list[Entry]:
    """The entries sorted by name, each missing parent directory added (0755)."""
    named = {e.name: e for e in entries}
    for name in list(named):
        parent = posixpath.dirname(name)
        while parent and parent not in named:
            named[parent] = Entry(parent, "dir", 0o755)
            parent = posixpath.dirname(parent)
    return [named[n] for n in sorted(named)]


class _Hashing:
    """A write-only file that hashes and counts, and passes the bytes on."""

    def __init__(self, sink: Any) -> None:
        self.sink, self.digest, self.size = sink, hashlib.sha256(), 0

    def write(self, data: Any) -> int:
        b = bytes(data)
        self.digest.update(b)
        self.size += len(b)
        self.sink.write(b)
        return len(b)

    def flush(self) -> None:
        pass


@dataclass
class Layer:
    diff_id: str  # sha256:<hex> of the tar
    digest: str  # sha256:<hex> of the gzip blob
    size: int
    files: int
    dropped: list[str]

    def descriptor(self) -> dict[str, Any]:
        return {"mediaType": MT_LAYER, "digest": self.digest, "size": self.size}


class _Slice:
    """`size` bytes of `fh` from `offset`, read in chunks (tarfile's addfile reads from it)."""

    def __init__(self, fh: IO[bytes], offset: int, size: int) -> None:
        fh.seek(offset)
        self.fh, self.left = fh, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self.fh.read(n)
        self.left -= len(data)
        return data


def write_layer(blobs: Path, entries: Iterable[Entry], mtime: int, spool: Path | None = None,
                dropped: list[str] | None = None) -> Layer:
    """The gzip'd tar of `entries` (sorted, parents added, a hard link's data on its first name in that
    order) as a blob under `blobs`, named by its digest."""
    ordered = with_parents(entries)
    # the hard link groups: in sorted order the first name carries the data, the others link to it
    groups: dict[str, list[str]] = {}
    for e in ordered:
        if e.kind == "hardlink":
            groups.setdefault(e.link, [e.link]).append(e.name)
    carrier = {n: min(names) for names in groups.values() for n in names}
    by_name = {e.name: e for e in ordered}
    files = 0
    src = open(spool, "rb") if spool is not None else None
    try:
        writer = atomic.AtomicWriter(blobs / "layer.partial", mode=0o644)
        with writer as blob:
            gz_hash = _Hashing(blob)
            with gzip.GzipFile(filename="", mode="wb", fileobj=gz_hash, mtime=0,
                               compresslevel=GZIP_LEVEL) as gz:
                tar_hash = _Hashing(gz)
                with tarfile.open(fileobj=tar_hash, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
                    for e in ordered:
                        files += _write_entry(tar, e, by_name, carrier, mtime, src)
            writer.path = blobs / gz_hash.digest.hexdigest()
    finally:
        if src is not None:
            src.close()
    return Layer(diff_id=f"sha256:{tar_hash.digest.hexdigest()}", digest=f"sha256:{gz_hash.digest.hexdigest()}",
                 size=gz_hash.size, files=files, dropped=sorted(dropped or []))


def _write_entry(tar: tarfile.TarFile, e: Entry, by_name: dict[str, Entry], carrier: dict[str, str], mtime: int,
                 src: IO[bytes] | None) -> int:
    info = tarfile.TarInfo(e.name)
    info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode = mtime, 0, 0, "", "", e.mode
    if e.kind == "dir":
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
        return 0
    if e.kind == "symlink":
        info.type, info.linkname = tarfile.SYMTYPE, e.link
        tar.addfile(info)
        return 0
    first = carrier.get(e.name)
    if first is not None and first != e.name:
        info.type, info.linkname = tarfile.LNKTYPE, first
        tar.addfile(info)
        return 0
    data = by_name[e.link] if e.kind == "hardlink" else e  # the group's data (its original file)
    info.size = data.size if data.data is None else len(data.data)
    if data.data is not None:
        tar.addfile(info, io.BytesIO(data.data))
    else:
        assert src is not None
        tar.addfile(info, _Slice(src, data.offset, data.size))
    return 1
