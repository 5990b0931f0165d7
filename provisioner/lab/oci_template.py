"""The lab node's PVE 9.1 `pct create` from an OCI archive, as pve-container and pve-storage do it.

Sources (github:proxmox/pve-container @94f5585, github:proxmox/pve-storage @0c56bad "bump version to 9.1.7"):
- pve-storage 0d392b2 "allow .tar container templates" (libpve-storage-perl 9.0.x, PVE 9.1):
  ``$VZTMPL_EXT_RE_1 = qr/\\.(?|(tar)(?!\\.)|tar\\.(gz|xz|zst|bz2))/i`` -- before it (PVE 8) a vztmpl was only
  ``.tar.(gz|xz|zst|bz2)``, so ``local:vztmpl/<x>.tar`` is no volume a PVE 8 node knows, and the upload API
  (PVE/API2/Storage/Status.pm ``upload``) answers ``filename: wrong file extension``.
- pve-storage 7744cf2 ``POST /nodes/{node}/storage/{storage}/oci-registry-pull``: ``skopeo copy
  docker://<ref> oci-archive:<vztmpl dir>/<normalized name>.tar`` -- the same oci-archive this engine exports.
- pve-container src/PVE/LXC/Create.pm ``archive_is_oci_format``: the file name ends in ``.tar`` and
  ``tar -tf`` lists ``oci-layout``, ``index.json`` and something under ``blobs/``; src/PVE/API2/LXC.pm then
  prints ``Detected OCI archive`` (never on restore) and calls ``restore_oci_archive``: the layers are extracted
  in order into the rootfs (``PVE::RS::OCI::parse_and_extract_image``, in the CT's user namespace) and the
  image config is mapped: Entrypoint+Cmd -> ``entrypoint`` (``cmd2string``) unless it is ``/sbin/init``, then
  ``cmode: console`` and ``host-managed=1`` on each netN; User -> ``lxc.init.uid``/``gid``; WorkingDir ->
  ``lxc.init.cwd``; Env -> ``env`` (written as ``lxc.environment.runtime`` lines, src/PVE/LXC/Config.pm
  ``write_pct_config``); StopSignal -> ``lxc.signal.halt`` (default SIGTERM); a value with a control
  character is refused ("OCI config value for '<key>' contains forbidden control characters!").

The archive is input from a stranger: every blob is checked against its digest, every layer member's name
and link as provisioner.export.rootfs_layer checks them, nothing is written through a link
(provisioner.lab.safe_fs) and the total is bounded by the rootfs size.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import posixpath
import re
import shlex
import shutil
import stat
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from provisioner.export import trust
from provisioner.export.rootfs_layer import LayerRefused as LayerRefused
from provisioner.export.rootfs_layer import check_name
from provisioner.lab import safe_fs

#: where a ``dir`` storage keeps its vztmpl files, below its path (pve-storage Plugin.pm get_subdir "vztmpl")
TEMPLATE_SUBDIR = "template/cache"
#: PVE 9.1's vztmpl file name rule (pve-storage Storage.pm $VZTMPL_EXT_RE_1 since 0d392b2)
VZTMPL_RE_9 = re.compile(r"[^/]+\.(?:(tar)(?!\.)|tar\.(gz|xz|zst|bz2))\Z", re.I)
#: PVE 8's (before 0d392b2)
VZTMPL_RE_8 = re.compile(r"[^/]+\.tar\.(gz|xz|zst|bz2)\Z", re.I)
#: pve-container Config.pm `entrypoint`/`env` patterns: no control characters besides tab
_CTRL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})\Z")
_LAYER_TYPES = {"application/vnd.oci.image.layer.v1.tar": "", "application/vnd.oci.image.layer.v1.tar+gzip": "gz",
                "application/vnd.docker.image.rootfs.diff.tar.gzip": "gz"}
_JSON_LIMIT = 4 << 20
_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"


class OciRefused(ValueError):
    """The archive is not one the lab's PVE 9.1 creates a container from (the reason names the field)."""


@dataclass
class OciImage:
    """What `restore_oci_archive` did: the config lines PVE writes and what it extracted."""

    options: dict[str, str] = field(default_factory=dict)
    lxc: list[tuple[str, str]] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    layers: int = 0
    files: int = 0
    skipped: list[str] = field(default_factory=list)


def template_dir(storage_path: str | None) -> str:
    """The vztmpl folder of a dir storage, relative to the node's root (``var/lib/vz/template/cache``)."""
    return posixpath.join((storage_path or "/var/lib/vz").strip("/"), TEMPLATE_SUBDIR)


def node_template_path(lab_root: Path, storage_path: str | None, name: str) -> Path:
    """The vztmpl file `name` in the lab node's own file system (provisioner.lab.sandbox ``node_fs``)."""
    return lab_root / "node" / "fs" / template_dir(storage_path) / name


def listed_templates(lab_root: Path, storage_id: str, storage_path: str | None) -> list[dict[str, Any]]:
    """pve-storage Plugin.pm ``get_subdir_files`` for vztmpl on PVE 9.1: each ``.tar`` file of the folder
    (format ``tar``; the compressed stand-in templates are listed by the lab's settings)."""
    folder = node_template_path(lab_root, storage_path, "")
    try:
        fd = safe_fs.open_dir(lab_root, folder)
    except OSError:
        return []
    out: list[dict[str, Any]] = []
    try:
        for name in sorted(os.listdir(fd)):
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            hit = VZTMPL_RE_9.fullmatch(name)
            if stat.S_ISREG(st.st_mode) and hit and hit.group(1):
                out.append({"volid": f"{storage_id}:vztmpl/{name}", "format": "tar", "size": st.st_size,
                            "ctime": int(st.st_mtime), "content": "vztmpl"})
    finally:
        os.close(fd)
    return out


def archive_is_oci_format(archive: Path) -> bool:
    """pve-container Create.pm ``archive_is_oci_format``: a ``.tar`` listing oci-layout, index.json, blobs/."""
    if archive.suffix != ".tar" or archive.is_symlink() or not archive.is_file():
        return False
    seen = {"layout": False, "index": False, "blobs": False}
    try:
        with tarfile.open(archive, "r:") as tar:
            for m in tar:
                seen["layout"] |= m.name == "oci-layout"
                seen["index"] |= m.name == "index.json"
                seen["blobs"] |= m.name.startswith("blobs/")
    except (tarfile.TarError, OSError):
        return False
    return all(seen.values())


class _Archive:
    """The outer oci-archive: its blobs by digest, each read checked against its digest."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.blobs: dict[str, tarfile.TarInfo] = {}
        self.index: tarfile.TarInfo | None = None
        for m in tar:
            name = m.name[2:] if m.name.startswith("./") else m.name
            if name == "index.json" and m.isfile():
                self.index = m
            elif (hit := re.fullmatch(r"blobs/sha256/([0-9a-f]{64})", name)) and m.isfile():
                self.blobs[f"sha256:{hit.group(1)}"] = m

    def _member(self, digest: str, what: str) -> tarfile.TarInfo:
        if not isinstance(digest, str) or not _DIGEST.match(digest):
            raise OciRefused(f"{what}: digest {trust.shown(str(digest))} is not sha256:<64 hex>")
        m = self.blobs.get(digest)
        if m is None:
            raise OciRefused(f"{what}: blob {digest} is not in the archive")
        return m

    def verify(self, digest: str, what: str) -> tarfile.TarInfo:
        m = self._member(digest, what)
        h = hashlib.sha256()
        with self._open(m) as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        if f"sha256:{h.hexdigest()}" != digest:
            raise OciRefused(f"{what}: blob {digest} does not match its digest")
        return m

    def _open(self, m: tarfile.TarInfo) -> IO[bytes]:
        fh = self.tar.extractfile(m)
        if fh is None:
            raise OciRefused(f"member {trust.shown(m.name)} cannot be read")
        return fh

    def json(self, digest: str | None, what: str) -> dict[str, Any]:
        m = self.index if digest is None else self.verify(digest, what)
        if m is None:
            raise OciRefused("index.json is not in the archive")
        if m.size > _JSON_LIMIT:
            raise OciRefused(f"{what}: larger than {_JSON_LIMIT} bytes")
        try:
            doc = json.loads(self._open(m).read())
        except ValueError:
            raise OciRefused(f"{what}: not JSON") from None
        if not isinstance(doc, dict):
            raise OciRefused(f"{what}: not a JSON object")
        return doc

    def stream(self, digest: str) -> IO[bytes]:
        return self._open(self._member(digest, "layer"))


def _pick_manifest(index: Mapping[str, Any], arch: str) -> str:
    manifests = index.get("manifests")
    if not isinstance(manifests, list) or not manifests:
        raise OciRefused("index.json: no manifests")
    for entry in manifests:
        plat = entry.get("platform") if isinstance(entry, dict) else None
        if isinstance(entry, dict) and (not isinstance(plat, dict) or plat.get("architecture") in (None, arch)):
            return str(entry.get("digest"))
    raise OciRefused(f"index.json: no manifest for architecture {arch}")


def restore_oci_archive(archive: Path, lab_root: Path, rootdir: Path, *, arch: str = "amd64",
                        limit: int = 64 << 30, nets: Mapping[str, str] | None = None) -> OciImage:
    """Extract the image's layers in order into `rootdir` (whiteouts applied) and map its config as
    pve-container's ``restore_oci_archive`` does. Raises OciRefused (or LayerRefused) naming the bad field."""
    out = OciImage()
    with tarfile.open(archive, "r:") as tar, contextlib.closing(_Rootfs(lab_root, rootdir)) as fs:
        ar = _Archive(tar)
        manifest = ar.json(_pick_manifest(ar.json(None, "index.json"), arch), "manifest")
        layers = manifest.get("layers")
        cfg_desc = manifest.get("config")
        if not isinstance(layers, list) or not isinstance(cfg_desc, dict):
            raise OciRefused("manifest: no layers or no config")
        config = ar.json(str(cfg_desc.get("digest")), "image config")
        written = 0
        for n, layer in enumerate(layers):
            if not isinstance(layer, dict) or layer.get("mediaType") not in _LAYER_TYPES:
                raise OciRefused(f"manifest: layer {n}: media type "
                                 f"{trust.shown(str(layer.get('mediaType') if isinstance(layer, dict) else layer))}"
                                 " is not supported")
            digest = str(layer.get("digest"))
            ar.verify(digest, f"layer {n}")
            comp = _LAYER_TYPES[str(layer["mediaType"])]
            with ar.stream(digest) as raw, _decompress(raw, comp) as body, \
                    tarfile.open(fileobj=body, mode="r|", errorlevel=2) as lt:
                layer_fs = _Layer(fs)
                for m in lt:
                    written = layer_fs.apply(m, lt, out, written=written, limit=limit)
            out.layers += 1
    inner = config.get("config")
    _map_config(inner if isinstance(inner, dict) else {}, rootdir, lab_root, out, nets or {})
    return out


@contextlib.contextmanager
def _decompress(raw: IO[bytes], comp: str) -> Iterator[IO[bytes]]:
    if comp == "gz":
        with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
            yield gz  # type: ignore[misc]  # a GzipFile reads bytes
    else:
        yield raw


class _Rootfs:
    """The rootfs being extracted, reached through one directory fd: every path beneath it is opened without
    following a link (provisioner.lab.safe_fs.open_beneath: openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), and
    the last parent directory stays open (a layer's members come directory by directory)."""

    def __init__(self, lab_root: Path, rootdir: Path) -> None:
        self.fd = safe_fs.open_dir(lab_root, rootdir, create=True)
        self._last: tuple[str, int] | None = None

    def close(self) -> None:
        self._drop("")
        os.close(self.fd)

    def _drop(self, rel: str) -> None:
        """Forget the open parent when it is `rel` or beneath it ('' : whatever it is)."""
        if self._last is not None and (not rel or self._last[0] == rel or self._last[0].startswith(rel + "/")):
            os.close(self._last[1])
            self._last = None

    def _open(self, rel: str, *, create: bool) -> int | None:
        """A new fd of directory `rel` (made where missing when `create`); None when missing."""
        try:
            return safe_fs.open_dir_at(self.fd, rel, create=create)
        except FileNotFoundError:
            if create:
                raise
            return None

    def parent(self, rel_dir: str, *, create: bool) -> int | None:
        """The fd of directory `rel_dir` ('' : the rootfs), kept open for the next member."""
        if not rel_dir:
            return self.fd
        if self._last is not None and self._last[0] == rel_dir:
            return self._last[1]
        fd = self._open(rel_dir, create=create)
        if fd is not None:
            self._drop("")
            self._last = (rel_dir, fd)
        return fd

    def lstat(self, rel: str) -> os.stat_result | None:
        dfd = self.parent(posixpath.dirname(rel), create=False)
        if dfd is None:
            return None
        try:
            return os.lstat(posixpath.basename(rel), dir_fd=dfd)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def remove(self, rel: str) -> None:
        st = self.lstat(rel)
        if st is None:
            return
        dfd = self.parent(posixpath.dirname(rel), create=False)
        assert dfd is not None  # lstat found it there
        if stat.S_ISDIR(st.st_mode):
            self._drop(rel)
            shutil.rmtree(posixpath.basename(rel), dir_fd=dfd)
        else:
            os.unlink(posixpath.basename(rel), dir_fd=dfd)

    def children(self, rel: str) -> list[str]:
        fd = self._open(rel, create=False)
        if fd is None:
            return []
        try:
            return os.listdir(fd)
        finally:
            os.close(fd)


class _Layer:
    """One layer applied to the rootfs in one pass. Whiteouts hide what the lower layers hold (image-spec
    layer.md: "Whiteout files MUST only apply to resources in lower/parent layers"), wherever they stand in the
    tar: what this layer wrote before its whiteout is kept, and an opaque whiteout empties its directory of
    everything this layer did not write."""

    def __init__(self, fs: _Rootfs) -> None:
        self.fs = fs
        self.written: set[str] = set()  # this layer's names
        self.ancestors: set[str] = set()  # the directories above them

    def _mine(self, name: str) -> None:
        self.written.add(name)
        parent = posixpath.dirname(name)
        while parent and parent not in self.ancestors:
            self.ancestors.add(parent)
            parent = posixpath.dirname(parent)

    def _ours(self, name: str) -> bool:
        return name in self.written or name in self.ancestors

    def _hide_lower(self, directory: str) -> None:
        for child in self.fs.children(directory):
            path = posixpath.join(directory, child) if directory else child
            if not self._ours(path):
                self.fs.remove(path)
            elif (st := self.fs.lstat(path)) is not None and stat.S_ISDIR(st.st_mode):
                self._hide_lower(path)

    def apply(self, m: tarfile.TarInfo, lt: tarfile.TarFile, out: OciImage, *, written: int, limit: int) -> int:
        name = check_name(m.name)
        if not name:
            return written
        base, parent = posixpath.basename(name), posixpath.dirname(name)
        fs = self.fs
        if base.startswith(_WHITEOUT):
            if base == _OPAQUE:
                if parent == "" or ((st := fs.lstat(parent)) is not None and stat.S_ISDIR(st.st_mode)):
                    self._hide_lower(parent)
            else:
                target = base[len(_WHITEOUT):]
                if not target:
                    raise LayerRefused(f"member {trust.shown(m.name)}: a whiteout of nothing: refused")
                hidden = check_name(posixpath.join(parent, target) if parent else target, "whiteout")
                if not self._ours(hidden):
                    fs.remove(hidden)
            return written
        if m.isdir():
            st = fs.lstat(name)
            if st is not None and not stat.S_ISDIR(st.st_mode):
                fs.remove(name)
            dfd = fs.parent(parent, create=True)
            assert dfd is not None
            with contextlib.suppress(FileExistsError):
                os.mkdir(base, 0o700, dir_fd=dfd)
            fd = safe_fs.open_beneath(dfd, base, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fchmod(fd, stat.S_IMODE(m.mode) | 0o700)  # the lab's user owns it: keep it writable to the lab
            finally:
                os.close(fd)
        elif m.isreg():
            written += m.size
            if written > limit:
                raise OciRefused(f"the image's layers exceed the rootfs size ({limit} bytes): no space left on device")
            fs.remove(name)
            fh = lt.extractfile(m)
            if fh is None:
                raise LayerRefused(f"member {trust.shown(m.name)} cannot be read")
            dfd = fs.parent(parent, create=True)
            assert dfd is not None
            fd = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
            try:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view):]
                os.fchmod(fd, stat.S_IMODE(m.mode))
            finally:
                os.close(fd)
            out.files += 1
        elif m.issym():
            if not m.linkname or _CTRL.search(m.linkname) or len(m.linkname) > 4096:
                raise LayerRefused(f"member {trust.shown(m.name)}: link target {trust.shown(m.linkname)} refused")
            fs.remove(name)
            dfd = fs.parent(parent, create=True)
            assert dfd is not None
            os.symlink(m.linkname, base, dir_fd=dfd)  # the link is never followed here: a CT path
        elif m.islnk():
            src = check_name(m.linkname, "hard link target")
            fs.remove(name)
            sfd = fs._open(posixpath.dirname(src), create=False)
            if sfd is None:
                raise LayerRefused(f"member {trust.shown(m.name)}: hard link target {trust.shown(src)} is missing")
            try:
                dfd = fs.parent(parent, create=True)
                assert dfd is not None
                os.link(posixpath.basename(src), base, src_dir_fd=sfd, dst_dir_fd=dfd, follow_symlinks=False)
            finally:
                os.close(sfd)
        else:  # devices and fifos: an unprivileged CT's user namespace cannot mknod them either
            out.skipped.append(name)
            return written
        self._mine(name)
        return written


def _checked(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise OciRefused(f"OCI config value for '{key}' is not a string")
    if _CTRL.search(value):
        raise OciRefused(f"OCI config value for '{key}' contains forbidden control characters!")
    return value


def _checked_list(key: str, value: object) -> list[str]:
    if not isinstance(value, list):
        raise OciRefused(f"OCI config value for '{key}' is not a list")
    if any(not isinstance(v, str) or _CTRL.search(v) for v in value):
        raise OciRefused(f"OCI config array-value for '{key}' contains forbidden control characters!")
    return list(value)


def _map_config(cfg: Mapping[str, Any], rootdir: Path, lab_root: Path, out: OciImage,
                nets: Mapping[str, str]) -> None:
    init = [*_checked_list("Entrypoint", cfg.get("Entrypoint") or []), *_checked_list("Cmd", cfg.get("Cmd") or [])]
    if init and init[0] != "/sbin/init":
        out.options["entrypoint"] = shlex.join(init)  # PVE::Tools::cmd2string quotes the same way
        out.options["cmode"] = "console"
        for key, value in nets.items():
            if "host-managed=" not in value:
                out.options[key] = f"{value},host-managed=1"
    if user := cfg.get("User"):
        uid, gid = _resolve_user(_checked("User", user), rootdir, lab_root)
        if uid is not None:
            out.lxc.append(("lxc.init.uid", uid))
        if gid is not None:
            out.lxc.append(("lxc.init.gid", gid))
    if cwd := cfg.get("WorkingDir"):
        out.lxc.append(("lxc.init.cwd", _checked("WorkingDir", cwd)))
    for var in _checked_list("Env", cfg.get("Env") or []):
        if not re.match(r"\w+=", var):
            raise OciRefused(f"OCI config value for 'Env' {trust.shown(var)} is not NAME=value")
        out.env.append(var)
    out.lxc.append(("lxc.signal.halt", _checked("StopSignal", cfg.get("StopSignal") or "SIGTERM")))


def _resolve_user(userstr: str, rootdir: Path, lab_root: Path) -> tuple[str | None, str | None]:
    """Create.pm ``resolve_oci_user``: ``user[:group]``, names looked up in the image's passwd/group."""
    m = re.fullmatch(r"([^:]+)(?::([^:]+))?", userstr)
    if not m:
        raise OciRefused("OCI config value for 'User' has an invalid format")

    def lookup(file: str, name: str, col: int) -> str | None:
        if name.isdigit():
            return name
        try:
            text = safe_fs.read_bytes(lab_root, rootdir / "etc" / file).decode("utf-8", "replace")
        except OSError:
            return None
        for line in text.splitlines():
            fields = line.split(":")
            if len(fields) > col and fields[0] == name:
                return fields[col] if fields[col].isdigit() else None
        return None

    uid = lookup("passwd", m.group(1), 2)
    gid = lookup("group", m.group(2), 2) if m.group(2) else None
    if gid is None and not m.group(2) and not m.group(1).isdigit():
        gid = lookup("passwd", m.group(1), 3)
    return uid, gid
