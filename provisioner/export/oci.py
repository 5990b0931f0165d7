"""The OCI rendering: an image layout (image-spec v1.1 `oci-layout`, `index.json`, `blobs/sha256`) made
without a daemon, and the `Containerfile` that says the same.

The one layer holds the export (pylock.toml, runtime.json, host.json), every wheel of the lock (fetched from
its URL and checked against its sha256 and size) and the install script; its tar is deterministic: entries
sorted, mtime the proof's time, uid/gid 0 with no user names, mode 0644/0755, gzip with no name and mtime 0,
so the same export gives the same manifest digest. The base is named by digest (annotations
`org.opencontainers.image.base.name/digest`); the proof travels as labels. The driver userspace is never in
the image: run it with CDI (`--device nvidia.com/gpu=all`) so the host injects its driver.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import shutil
import tarfile
import urllib.request
from calendar import timegm
from pathlib import Path
from time import strptime
from typing import Any

from provisioner import atomic
from provisioner.export import trust
from provisioner.export.models import HostNeeds, RuntimeProof
from provisioner.export.pylock import PYLOCK, Wheel

CONTAINERFILE = "Containerfile"
LAYOUT = "oci"
PREFIX = "opt/gpu-provisioner"
VENV = "/opt/torch-venv"
_BASE = re.compile(r"^[a-z0-9][a-z0-9._\-/:]*@sha256:[0-9a-f]{64}$")
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MT_INDEX = "application/vnd.oci.image.index.v1+json"

INSTALL_SH = f"""#!/bin/sh
# Builds the venv ($VENV, default {VENV}) from the wheels in this image, offline (--no-deps: the lock lists
# every package), then runs the same smoke check as gpu-provisioner's venv.build.
set -eu
d=/{PREFIX}
v="${{VENV:-{VENV}}}"
if [ ! -x "$v/bin/python" ]; then
  uv venv --python "${{PYTHON:-python3}}" "$v"
  uv pip install --python "$v/bin/python" --offline --no-deps "$d"/wheels/*.whl
fi
exec "$v/bin/python" "$d/smoke.py"
"""

def check_base(base: str) -> str:
    if not _BASE.match(base):
        raise ValueError(f"the base image must be named by digest (name@sha256:<64 hex>), got {base!r}")
    return base


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follow a redirect only to another https URL (never file://, ftp:// or plain http)."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        if not newurl.startswith("https://"):
            raise ValueError(f"{req.full_url}: redirected to {trust.shown(newurl)}, not an https URL: refused")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_HttpOnlyRedirects)


def fetch_wheel(w: Wheel, cache: Path) -> Path:
    """The wheel's bytes from its URL (cached by sha256), checked against the lock's sha256 and size; the
    size is enforced while streaming (past it the download stops and the partial file is deleted)."""
    if not w.url.startswith(("https://", "http://")):  # pylock.wheels checked it; this function refuses on its own
        raise ValueError(f"{trust.shown(w.url)}: not an http(s) URL: refused")
    trust.sha256(w.sha256, field=f"{w.filename} sha256")
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / w.sha256
    if path.is_file() and not path.is_symlink() and path.stat().st_size == w.size:
        return path
    digest = hashlib.sha256()
    size = 0
    with atomic.AtomicWriter(path, mode=0o600) as tmp:  # a private cache; on any error the temporary file goes
        with _OPENER.open(w.url, timeout=600) as resp:
            while chunk := resp.read(1 << 20):
                size += len(chunk)
                if size > w.size:
                    raise ValueError(f"{trust.shown(w.url)}: the body is larger than the lock's size {w.size}: "
                                     "download stopped, the partial file deleted")
                digest.update(chunk)
                tmp.write(chunk)
        if digest.hexdigest() != w.sha256 or size != w.size:  # the temporary file goes, the cache keeps nothing
            raise ValueError(f"{trust.shown(w.url)}: got sha256 {digest.hexdigest()} ({size} bytes), the lock says "
                             f"{w.sha256} ({w.size} bytes)")
    return path


def epoch_of(iso: str) -> int:
    return timegm(strptime(iso, "%Y-%m-%dT%H:%M:%SZ"))


def proof_labels(runtime: RuntimeProof, host: HostNeeds) -> dict[str, str]:
    """The proof as image labels (`io.gpu-provisioner.*`), shared by the layout and the runnable image."""
    return {
        "io.gpu-provisioner.torch": runtime.torch,
        "io.gpu-provisioner.cuda": str(runtime.cuda),
        "io.gpu-provisioner.variant": runtime.variant,
        "io.gpu-provisioner.python": runtime.python,
        "io.gpu-provisioner.arch-list": " ".join(runtime.arch_list),
        "io.gpu-provisioner.compute-capabilities": " ".join(host.compute_capabilities),
        "io.gpu-provisioner.burnin": runtime.burnin.verdict,
        "io.gpu-provisioner.proven": f"{runtime.proven.at} {runtime.proven.host} run {runtime.proven.run_id}",
        "io.gpu-provisioner.min-driver": host.min_driver,
        "io.gpu-provisioner.driver-proven-on": host.driver_proven_on,
        "io.gpu-provisioner.glibc-floor": host.glibc_floor,
    }


def labels(runtime: RuntimeProof, host: HostNeeds, base: str) -> dict[str, str]:
    return {
        "org.opencontainers.image.title": f"torch {runtime.torch} runtime",
        "org.opencontainers.image.created": runtime.proven.at,
        "org.opencontainers.image.base.name": base.split("@")[0],
        "org.opencontainers.image.base.digest": base.split("@")[1],
        **proof_labels(runtime, host),
    }


def _layer_files(export_dir: Path, wheels: list[tuple[Wheel, Path]], smoke: str) -> list[tuple[str, Path | bytes, int]]:
    files: list[tuple[str, Path | bytes, int]] = [
        (f"{PREFIX}/export/{name}", export_dir / name, 0o644) for name in (PYLOCK, "runtime.json", "host.json")]
    files += [(f"{PREFIX}/wheels/{w.filename}", path, 0o644) for w, path in wheels]
    files += [(f"{PREFIX}/install.sh", INSTALL_SH.encode(), 0o755), (f"{PREFIX}/smoke.py", smoke.encode(), 0o644)]
    return sorted(files, key=lambda f: f[0])


def _write_tar(out: Any, files: list[tuple[str, Path | bytes, int]], mtime: int) -> None:
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()
        entries: list[tuple[str, Path | bytes | None, int]] = []
        for fname, fsrc, fmode in files:
            parts = fname.split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    entries.append((d, None, 0o755))
            entries.append((fname, fsrc, fmode))
        for name, src, mode in sorted(entries, key=lambda e: e[0]):
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode = mtime, 0, 0, "", "", mode
            if src is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif isinstance(src, bytes):
                info.size = len(src)
                tar.addfile(info, io.BytesIO(src))
            else:
                info.size = src.stat().st_size
                with open(src, "rb") as fh:
                    tar.addfile(info, fh)


class _Hashing(io.RawIOBase):
    """A write-only file that hashes and counts, and passes the bytes on."""

    def __init__(self, sink: Any) -> None:
        self.sink, self.digest, self.size = sink, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.size

    def write(self, data: Any) -> int:
        b = bytes(data)
        self.digest.update(b)
        self.size += len(b)
        self.sink.write(b)
        return len(b)


def _blob(blobs: Path, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _json(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def build_layout(out: Path, export_dir: Path, runtime: RuntimeProof, host: HostNeeds,
                 wheels: list[tuple[Wheel, Path]], base: str, smoke: str) -> str:
    """Write the OCI image layout at `out` (replaced); returns the manifest digest."""
    check_base(base)
    if out.exists():
        shutil.rmtree(out)
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    mtime = epoch_of(runtime.proven.at)
    files = _layer_files(export_dir, wheels, smoke)
    layer = atomic.AtomicWriter(blobs / "layer", mode=0o644)  # named by its digest once written
    with layer as gz_file:
        gz_hash = _Hashing(gz_file)
        with gzip.GzipFile(filename="", mode="wb", fileobj=gz_hash, mtime=0, compresslevel=6) as gz:
            tar_hash = _Hashing(gz)
            _write_tar(tar_hash, files, mtime)
        layer_digest = gz_hash.digest.hexdigest()
        layer.path = blobs / layer_digest
    config = {
        "architecture": {"x86_64": "amd64", "aarch64": "arm64"}[host.machine], "os": "linux",
        "created": runtime.proven.at,
        "config": {"Labels": labels(runtime, host, base), "Env": [f"VIRTUAL_ENV={VENV}", f"PATH={VENV}/bin:"
                   "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                   "Cmd": ["/bin/sh", f"/{PREFIX}/install.sh"]},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{tar_hash.digest.hexdigest()}"]},
        "history": [{"created": runtime.proven.at, "created_by": "gpu-provisioner export --format oci"}],
    }
    cfg = _blob(blobs, _json(config))
    manifest = {"schemaVersion": 2, "mediaType": MT_MANIFEST, "config": {"mediaType": MT_CONFIG, **cfg},
                "layers": [{"mediaType": MT_LAYER, "digest": f"sha256:{layer_digest}", "size": gz_hash.size}],
                "annotations": {"org.opencontainers.image.base.name": base.split("@")[0],
                                "org.opencontainers.image.base.digest": base.split("@")[1],
                                "org.opencontainers.image.created": runtime.proven.at}}
    man = _blob(blobs, _json(manifest))
    index = {"schemaVersion": 2, "mediaType": MT_INDEX,
             "manifests": [{"mediaType": MT_MANIFEST, **man,
                            "annotations": {"org.opencontainers.image.ref.name": "latest"}}]}
    (out / "index.json").write_bytes(_json(index))
    (out / "oci-layout").write_bytes(_json({"imageLayoutVersion": "1.0.0"}))
    return str(man["digest"])


def _containerfile_str(v: str) -> str:
    """A Containerfile double-quoted value: JSON's escapes (quote, backslash, newline) and `$` escaped (a
    LABEL value is subject to variable expansion)."""
    return json.dumps(v).replace("$", "\\$")


def containerfile(runtime: RuntimeProof, host: HostNeeds, base: str) -> str:
    label_lines = " \\\n      ".join(f"{k}={_containerfile_str(v)}" for k, v in labels(runtime, host, base).items())
    return f"""# The same image as the OCI layout beside it, for a builder with a daemon (podman/buildah/docker build).
# The driver userspace is not in it: run with CDI so the host injects its driver (NVIDIA >= {host.min_driver}):
#   podman run --rm --device nvidia.com/gpu=all IMAGE
FROM {base}
COPY {PYLOCK} runtime.json host.json /{PREFIX}/export/
COPY wheels/ /{PREFIX}/wheels/
COPY install.sh smoke.py /{PREFIX}/
RUN chmod 0755 /{PREFIX}/install.sh
ENV VIRTUAL_ENV={VENV} PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LABEL {label_lines}
CMD ["/bin/sh", "/{PREFIX}/install.sh"]
"""
