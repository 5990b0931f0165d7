"""The proven runtime as a complete, runnable OCI image (image-spec v1.1 layout, and the same as an
`oci-archive` tar), made without a daemon.

Layers, in order:
1. the base: the proving container's own root file system (`--rootfs full`) or only the files the venv's code
   runs on (`--rootfs runtime`), read through `pct exec` as a tar and checked member by member
   (`rootfs_layer`), less the NVIDIA driver's userspace and less the venv; or the layers of a base named by
   digest (a local OCI layout `oci:DIR@sha256:…`, an archive `oci-archive:FILE@sha256:…`, or a registry's
   `NAME@sha256:…` copied by skopeo), each blob checked against its digest;
2. the venv: the proven venv's own bytes (never rebuilt at start) and the interpreter it needs when that lies
   outside /usr;
3. gpu-provisioner's files under /opt/gpu-provisioner: the entrypoint, the smoke test, the burn-in package and
   the export (pylock.toml, runtime.json, host.json).

The config runs `ENTRYPOINT [venv python, entrypoint.py]`: `smoke` (the default), `burnin ARGS…` (the
burn-in, `python -m provisioner.burnin`), or any command with the venv first on PATH. `NVIDIA_VISIBLE_DEVICES`,
`NVIDIA_DRIVER_CAPABILITIES=compute,utility` and `NVIDIA_REQUIRE_CUDA` (from host.json's floor) are what the
NVIDIA container toolkit reads. Reproducible: every tar sorted, owner 0:0, one mtime (the proof's), gzip
with no name or time, no timestamp in the config or its history, JSON with sorted keys: the same export
gives the same manifest digest.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner import atomic
from provisioner.export import oci, rootfs_layer
from provisioner.export.models import HostNeeds, RuntimeProof
from provisioner.export.rootfs_layer import Entry, Layer, LayerRefused

LAYOUT = "image"
ARCHIVE = "image.oci.tar"
TAG = "latest"
PREFIX = "opt/gpu-provisioner"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_INDEX = "application/vnd.oci.image.index.v1+json"
_LAYER_TYPES = ("application/vnd.oci.image.layer.v1.tar", "application/vnd.oci.image.layer.v1.tar+gzip",
                "application/vnd.oci.image.layer.v1.tar+zstd",
                "application/vnd.docker.image.rootfs.diff.tar.gzip")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_NAMED = re.compile(r"^(?P<kind>oci|oci-archive):(?P<path>[^@]+)@(?P<digest>sha256:[0-9a-f]{64})$")
_REGISTRY = re.compile(r"^[a-z0-9][a-z0-9._\-/:]*@sha256:[0-9a-f]{64}$")
ROOTFS_MODES = ("full", "runtime")

ENTRYPOINT = r'''"""gpu-provisioner's entrypoint: `smoke` (default), `burnin ARGS...`, or any command with the venv first."""
import os, sys
HERE = "/opt/gpu-provisioner"
venv = os.environ.get("VIRTUAL_ENV") or os.path.dirname(os.path.dirname(sys.executable))
py = os.path.join(venv, "bin", "python")
args = sys.argv[1:] or ["smoke"]
env = dict(os.environ, VIRTUAL_ENV=venv, PATH=os.path.join(venv, "bin") + ":" + os.environ.get("PATH", "/usr/bin:/bin"))
if args[0] == "smoke":
    os.execve(py, [py, os.path.join(HERE, "smoke.py")], env)
if args[0] == "burnin":
    env["PYTHONPATH"] = os.path.join(HERE, "burnin")
    os.execve(py, [py, "-m", "provisioner.burnin", *args[1:]], env)
os.execvpe(args[0], args, env)
'''


class ImageRefused(ValueError):
    """The image cannot be made as asked (a base that does not match its digest, a member refused…)."""


def require_cuda(runtime: RuntimeProof, host: HostNeeds) -> str:
    """`NVIDIA_REQUIRE_CUDA` from the export's floors. The toolkit's grammar: comma-separated constraints are
    ANDed, space-separated ones ORed (NVIDIA/nvidia-container-toolkit, "Environment variables (OCI spec)":
    `cuda>=X.Y`, `driver>=R.V`, `arch`, `brand`). `cuda>=` is the CUDA major the wheels run on with
    minor-version compatibility (the driver floor holds the rest); a CPU build needs only the driver floor."""
    parts = []
    if runtime.cuda:
        parts.append(f"cuda>={runtime.cuda.split('.')[0]}.0")
    if host.min_driver:
        parts.append(f"driver>={host.min_driver}")
    return ",".join(parts)


def labels(runtime: RuntimeProof, host: HostNeeds, base: str) -> dict[str, str]:
    return {
        "org.opencontainers.image.title": f"torch {runtime.torch} runtime",
        "org.opencontainers.image.base.name": base,
        **oci.proof_labels(runtime, host),
        "io.gpu-provisioner.venv": runtime.venv,
    }


def env_of(runtime: RuntimeProof, host: HostNeeds) -> list[str]:
    venv = runtime.venv
    return [f"PATH={venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", f"VIRTUAL_ENV={venv}",
            "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
            f"NVIDIA_REQUIRE_CUDA={require_cuda(runtime, host)}"]


@dataclass
class Base:
    """The base's layers (descriptors, diff_ids) already under `blobs`, and what it is called."""

    name: str
    layers: list[dict[str, Any]] = field(default_factory=list)
    diff_ids: list[str] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)


def _json(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def put_blob(blobs: Path, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    atomic.write_bytes(blobs / digest, data, mode=0o644)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def copy_blob(src: Path, blobs: Path, digest: str, size: int | None = None) -> None:
    """`src` into `blobs` as `digest`, checked while copying (a blob that is not its digest is refused)."""
    if not _DIGEST.match(digest):
        raise ImageRefused(f"not a sha256 digest: {digest!r}")
    h, n = hashlib.sha256(), 0
    with atomic.AtomicWriter(blobs / digest.split(":")[1], mode=0o644) as out, open(src, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
            n += len(chunk)
            out.write(chunk)
        if f"sha256:{h.hexdigest()}" != digest or (size is not None and n != size):
            raise ImageRefused(f"{src}: the blob is sha256:{h.hexdigest()} ({n} bytes), not {digest}")


# --- a base named by digest ---------------------------------------------------------------------------

def _read_json_blob(layout: Path, digest: str, limit: int = 4 << 20) -> Any:
    if not _DIGEST.match(digest):
        raise ImageRefused(f"not a sha256 digest: {digest!r}")
    path = layout / "blobs" / "sha256" / digest.split(":")[1]
    if path.is_symlink() or not path.is_file() or path.stat().st_size > limit:
        raise ImageRefused(f"{layout}: blob {digest} is missing, a link or too large")
    data = path.read_bytes()
    if f"sha256:{hashlib.sha256(data).hexdigest()}" != digest:
        raise ImageRefused(f"{layout}: blob {digest} does not match its digest")
    return json.loads(data)


def _manifest_in(layout: Path, digest: str, arch: str) -> dict[str, Any]:
    """The image manifest `digest` names in the layout (an index: its linux/`arch` manifest)."""
    doc = _read_json_blob(layout, digest)
    if doc.get("mediaType") == MT_INDEX or "manifests" in doc:
        for m in doc.get("manifests", []):
            plat = m.get("platform") or {}
            if plat.get("os") == "linux" and plat.get("architecture") == arch:
                return _manifest_in(layout, str(m["digest"]), arch)
        raise ImageRefused(f"{layout}: index {digest} has no linux/{arch} image")
    if not isinstance(doc.get("layers"), list) or not isinstance(doc.get("config"), dict):
        raise ImageRefused(f"{layout}: {digest} is not an image manifest")
    return dict(doc)


def _extract_archive(archive: Path, into: Path) -> Path:
    """An oci-archive's layout files (oci-layout, index.json, blobs/sha256/<hex>) into `into`; any other
    member is refused."""
    ok = re.compile(r"^(oci-layout|index\.json|blobs|blobs/sha256|blobs/sha256/[0-9a-f]{64})$")
    with tarfile.open(archive, "r:") as tar:
        for m in tar:
            name = m.name[2:] if m.name.startswith("./") else m.name
            name = name.rstrip("/")
            if not name or name == ".":
                continue
            if not ok.match(name) or not (m.isreg() or m.isdir()):
                raise ImageRefused(f"{archive}: member {name!r} is not part of an OCI layout: refused")
            if m.isdir():
                (into / name).mkdir(parents=True, exist_ok=True)
                continue
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            src = tar.extractfile(m)
            assert src is not None
            with open(into / name, "wb") as out:
                shutil.copyfileobj(src, out)
    return into


def check_base(spec: str) -> str:
    """`spec` if it is a base the image can take (`export --base`, the wizard's field): `container`, a local
    layout or archive named by digest, or a registry's name by digest; ImageRefused names the forms."""
    if spec != "container" and not _NAMED.match(spec) and not _REGISTRY.match(spec):
        raise ImageRefused(f"the base must be `container`, oci:DIR@sha256:<hex>, oci-archive:FILE@sha256:<hex> "
                           f"or NAME@sha256:<hex>; got {spec!r}")
    return spec


def named_base(spec: str, blobs: Path, arch: str, work: Path) -> Base:
    """The layers of the base `spec` copied into `blobs`, each checked against its digest."""
    m = _NAMED.match(check_base(spec))
    if m is None:
        if spec == "container":
            raise ImageRefused("the base `container` is read from the container, not copied as a named image")
        layout = work / "pulled"
        got = subprocess.run(["skopeo", "copy", "--override-os", "linux", "--override-arch", arch,
                              f"docker://{spec}", f"oci:{layout}:base"], capture_output=True, text=True,
                             timeout=3600, check=False)
        if got.returncode != 0:
            raise ImageRefused(f"skopeo could not copy {spec} (no registry reachable? name a local OCI layout "
                               f"or archive instead): {got.stderr.strip()[-300:]}")
        # skopeo verified the registry's bytes against the digest named; of an index it copies the manifest of
        # --override-arch, whose own digest the layout's index.json names
        index = json.loads((layout / "index.json").read_text())
        digest, want, path = str(index["manifests"][0]["digest"]), spec.split("@")[1], layout
    else:
        path, want = Path(m.group("path")), m.group("digest")
        digest = want
        if m.group("kind") == "oci-archive":
            path = _extract_archive(path, work / "base")
    if not (path / "oci-layout").is_file():
        raise ImageRefused(f"{path}: not an OCI image layout (no oci-layout file)")
    manifest = _manifest_in(path, digest, arch)
    config = _read_json_blob(path, str(manifest["config"]["digest"]))
    diff_ids = list(config.get("rootfs", {}).get("diff_ids") or [])
    if len(diff_ids) != len(manifest["layers"]):
        raise ImageRefused(f"{spec}: the config lists {len(diff_ids)} diff_ids for {len(manifest['layers'])} layers")
    layers = []
    for layer in manifest["layers"]:
        if layer.get("mediaType") not in _LAYER_TYPES:
            raise ImageRefused(f"{spec}: layer media type {layer.get('mediaType')!r} is not a tar layer")
        d = str(layer["digest"])
        src = path / "blobs" / "sha256" / d.split(":")[1]
        if src.is_symlink() or not src.is_file():
            raise ImageRefused(f"{spec}: layer {d} is missing")
        copy_blob(src, blobs, d, int(layer["size"]))
        layers.append({"mediaType": str(layer["mediaType"]), "digest": d, "size": int(layer["size"])})
    history = [{"created_by": f"base {spec.split('@')[0]}@{want}", "comment": f"layer {i + 1} of the base"}
               for i in range(len(layers))]
    return Base(name=f"{spec.split('@')[0]}@{want}", layers=layers, diff_ids=[str(d) for d in diff_ids],
                history=history)


# --- gpu-provisioner's layer ----------------------------------------------------------------------

def tool_entries(export_files: dict[str, bytes], smoke: str, burnin_tgz: bytes) -> list[Entry]:
    """/opt/gpu-provisioner: the entrypoint, the smoke test, the burn-in package, the export's files."""
    out = [Entry(f"{PREFIX}/entrypoint.py", "file", 0o755, data=ENTRYPOINT.encode()),
           Entry(f"{PREFIX}/smoke.py", "file", 0o644, data=smoke.encode())]
    out += [Entry(f"{PREFIX}/export/{name}", "file", 0o644, data=data) for name, data in sorted(export_files.items())]
    with tarfile.open(fileobj=io.BytesIO(burnin_tgz), mode="r:gz") as tar:
        for m in tar:
            name = rootfs_layer.check_name(m.name)
            if m.isreg() and name:
                src = tar.extractfile(m)
                assert src is not None
                out.append(Entry(f"{PREFIX}/burnin/{name}", "file", 0o644, data=src.read()))
    return out


#: the directories a runtime needs to exist (mount points and /tmp) when the base did not bring them
MOUNT_DIRS = (Entry("dev", "dir", 0o755), Entry("proc", "dir", 0o755), Entry("sys", "dir", 0o755),
              Entry("run", "dir", 0o755), Entry("tmp", "dir", 0o1777), Entry("etc", "dir", 0o755))


def layer_from_spool(blobs: Path, spool: Path, mtime: int, *, mount_dirs: bool = False,
                     limit: int = 256 << 30) -> Layer:
    """A layer of the container's tar at `spool`: checked, the driver's files left out, written again."""
    try:
        members = rootfs_layer.read_members(spool, limit=limit)
    except LayerRefused as exc:
        raise ImageRefused(str(exc)) from None
    entries = list(members.entries.values())
    if mount_dirs:
        entries += [e for e in MOUNT_DIRS if e.name not in members.entries]
    return rootfs_layer.write_layer(blobs, entries, mtime, spool=spool, dropped=members.dropped)


# --- the layout and the archive ----------------------------------------------------------------------

def write_layout(out: Path, blobs: Path, base: Base, layers: list[tuple[Layer, str]], runtime: RuntimeProof,
                 host: HostNeeds) -> str:
    """config, manifest, index.json and oci-layout for `base` + `layers` (already under `blobs`); the
    manifest digest."""
    arch = {"x86_64": "amd64", "aarch64": "arm64"}[host.machine]
    config = {
        "architecture": arch, "os": "linux",
        "config": {"Env": env_of(runtime, host), "Labels": labels(runtime, host, base.name),
                   "Entrypoint": [f"{runtime.venv}/bin/python", f"/{PREFIX}/entrypoint.py"], "Cmd": ["smoke"],
                   "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [*base.diff_ids, *(layer.diff_id for layer, _ in layers)]},
        "history": [*base.history, *({"created_by": f"gpu-provisioner export: {what}"} for _, what in layers)],
    }
    cfg = put_blob(blobs, _json(config))
    layer_descs = [*base.layers, *(layer.descriptor() for layer, _ in layers)]
    manifest = {"schemaVersion": 2, "mediaType": MT_MANIFEST, "config": {"mediaType": MT_CONFIG, **cfg},
                "layers": layer_descs,
                "annotations": {"org.opencontainers.image.base.name": base.name}}
    man = put_blob(blobs, _json(manifest))
    index = {"schemaVersion": 2, "mediaType": MT_INDEX,
             "manifests": [{"mediaType": MT_MANIFEST, **man,
                            "platform": {"architecture": arch, "os": "linux"},
                            "annotations": {"org.opencontainers.image.ref.name": TAG}}]}
    atomic.write_text(out / "index.json", _json(index).decode())
    atomic.write_text(out / "oci-layout", _json({"imageLayoutVersion": "1.0.0"}).decode())
    keep = {str(d["digest"]).split(":")[1] for d in layer_descs} | {cfg["digest"].split(":")[1],
                                                                     man["digest"].split(":")[1]}
    for blob in blobs.iterdir():  # what an earlier export of this folder left
        if blob.name not in keep:
            blob.unlink()
    return str(man["digest"])


def write_archive(layout: Path, archive: Path, mtime: int) -> str:
    """The layout as an `oci-archive` tar (what `skopeo copy oci-archive:…` and PVE 9.1's vztmpl storage take):
    sorted, 0:0, one mtime; its sha256."""
    blob_names = sorted(f"blobs/sha256/{p.name}" for p in (layout / "blobs" / "sha256").iterdir())
    names = ["oci-layout", "index.json", "blobs", "blobs/sha256", *blob_names]
    entries = []
    for name in sorted(names):
        path = layout / name
        if path.is_dir():
            entries.append(Entry(name, "dir", 0o755))
        else:
            entries.append(Entry(name, "file", 0o644, size=path.stat().st_size))
    digest = hashlib.sha256()
    with atomic.AtomicWriter(archive, mode=0o644) as fh:
        hashing = _HashingFile(fh, digest)
        with tarfile.open(fileobj=hashing, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            for e in entries:
                info = tarfile.TarInfo(e.name)
                info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode = mtime, 0, 0, "", "", e.mode
                if e.kind == "dir":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                else:
                    info.size = e.size
                    with open(layout / e.name, "rb") as src:
                        tar.addfile(info, src)
    return digest.hexdigest()


class _HashingFile:
    def __init__(self, sink: Any, digest: Any) -> None:
        self.sink, self.digest = sink, digest

    def write(self, data: Any) -> int:
        b = bytes(data)
        self.digest.update(b)
        self.sink.write(b)
        return len(b)


def fresh_layout(out: Path) -> Path:
    """`out` made ready for a layout (an earlier one's blobs kept: the same export reuses them); blobs/sha256."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ImageRefused(f"{out}: not a folder")
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    for partial in blobs.glob(".*.tmp"):
        partial.unlink()
    return blobs


def temp_dir(out: Path) -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix=".image-work-", dir=out)
