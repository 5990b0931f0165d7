"""Write an export folder: pylock.toml, runtime.json, host.json, then the chosen rendering; read one back.

Files are written atomically (a temporary file renamed over the name: a symbolic link planted at a name is
replaced, never followed) and read back without following links (`trust.read_export_file`), each checked
(`pylock.load`/`pylock.wheels`, the models' field rules), a refusal naming the file and field, never its
content. The folder is made absolute first (`-o out` is relative to where the command runs).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pydantic import ValidationError

from provisioner import atomic, download
from provisioner.export import flox, nix, oci, pylock, trust
from provisioner.export.collect import Export
from provisioner.export.models import HostNeeds, RuntimeProof
from provisioner.paths import cache_dir


class ExportInvalid(ValueError):
    """An export folder that cannot be read as one (a link, a field that fails its rule); names the field."""


def write_core(out: Path, exp: Export) -> None:
    out = out.absolute()
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out / pylock.PYLOCK, pylock.dumps(exp.pylock))
    atomic.write_text(out / "runtime.json", exp.runtime.model_dump_json(indent=2) + "\n")
    atomic.write_text(out / "host.json", exp.host.model_dump_json(indent=2) + "\n")


def read_runtime(folder: Path) -> RuntimeProof:
    try:
        return RuntimeProof.model_validate_json(trust.read_export_file(folder, "runtime.json"))
    except trust.Untrusted as exc:
        raise ExportInvalid(str(exc)) from None
    except ValidationError as exc:
        raise ExportInvalid(trust.fields_of(exc, str(folder / "runtime.json"))) from None


def read_host(folder: Path) -> HostNeeds:
    try:
        return HostNeeds.model_validate_json(trust.read_export_file(folder, "host.json"))
    except trust.Untrusted as exc:
        raise ExportInvalid(str(exc)) from None
    except ValidationError as exc:
        raise ExportInvalid(trust.fields_of(exc, str(folder / "host.json"))) from None


def read_pylock_text(folder: Path) -> str:
    try:
        return trust.read_export_file(folder, pylock.PYLOCK)
    except trust.Untrusted as exc:
        raise ExportInvalid(str(exc)) from None


def read_wheels(text: str) -> list[pylock.Wheel]:
    try:
        return pylock.wheels(pylock.load(text))
    except pylock.PylockError as exc:
        raise ExportInvalid(str(exc)) from None


def read_export(folder: Path) -> tuple[RuntimeProof, HostNeeds, list[pylock.Wheel]]:
    """An export folder's proof, host needs and wheels, validated (ExportInvalid names what fails)."""
    folder = folder.absolute()
    return read_runtime(folder), read_host(folder), read_wheels(read_pylock_text(folder))


def _own_dir(folder: Path, rel: str) -> Path:
    """`folder/rel` made as a directory, no part of it a symbolic link (one planted there is refused, never
    followed out of the folder)."""
    path = folder
    for part in rel.split("/"):
        path = path / part
        if path.is_symlink():
            raise ExportInvalid(f"{path} is a symbolic link: the export writes only its own folders")
        path.mkdir(exist_ok=True)
    return path


def copy_wheels(folder: Path, wheels: list[pylock.Wheel], cache: Path | None = None) -> None:
    """Every wheel fetched (sha256 and size checked while streaming, `oci.fetch_wheel`) into `folder/wheels`
    under its checked file name, a planted link replaced, never followed."""
    store = (cache or cache_dir() / "export-wheels").absolute()
    fetched = [(w, oci.fetch_wheel(w, store)) for w in wheels]
    wdir = _own_dir(folder, flox.WHEELS)
    for w, path in fetched:
        target = wdir / w.filename  # a checked plain file name (pylock.wheels): never a path
        if target.is_symlink() or not target.is_file() or download.sha256_file(target) != w.sha256:
            with atomic.AtomicWriter(target, mode=0o644) as fh, open(path, "rb") as src:
                shutil.copyfileobj(src, fh)


def render_flox(folder: Path, uv_version: str, cache: Path | None = None,
                catalog_torch: str | None = None) -> dict[str, str]:
    """The folder as a Flox environment's project: manifest.toml and the wheels its venv is built from
    (wheels/, wheels/SHA256SUMS), so that activation fetches nothing."""
    folder = folder.absolute()
    runtime, host, wheels = read_export(folder)
    manifest = flox.render(runtime, host, uv_version, wheels, catalog_torch)
    local = flox.venv_wheels(runtime, wheels, catalog_torch)
    written = {flox.MANIFEST: "Flox manifest"}
    if local:
        copy_wheels(folder, local, cache)
        atomic.write_text(folder / flox.SUMS, flox.sums(local))
        written[f"{flox.WHEELS}/"] = f"{len(local)} proven wheels and SHA256SUMS"
    atomic.write_text(folder / flox.MANIFEST, manifest)
    return written


def render(folder: Path, fmt: str, *, uv_version: str, base: str | None = None, nixpkgs_rev: str = nix.NIXPKGS_REV,
           cache: Path | None = None, nixpkgs_narhash: str | None = None,
           flox_catalog_torch: str | None = None) -> dict[str, str]:
    """The rendering of `fmt` beside the core files; what was written (name -> note)."""
    folder = folder.absolute()
    runtime, host, wheels = read_export(folder)
    if fmt == "flox":
        return render_flox(folder, uv_version, cache, flox_catalog_torch)
    if fmt == "nix":
        flake, lock = nix.render(runtime, host, wheels, nixpkgs_rev), nix.lock(nixpkgs_rev, nixpkgs_narhash)
        atomic.write_text(folder / nix.FLAKE, flake)
        atomic.write_text(folder / nix.LOCK, lock)
        return {nix.LOCK: f"nixpkgs pinned at {nixpkgs_rev}", nix.FLAKE: "Nix flake"}
    if fmt == "oci":  # an image of the proving container, not of this folder: offer.write_export
        raise ValueError("the oci format is made from the proving container (image_collect.build_image)")
    return {}


def summary(folder: Path) -> dict[str, object]:
    folder = folder.absolute()
    runtime, host, wheels = read_export(folder)
    return {"dir": str(folder), "torch": runtime.torch, "cuda": runtime.cuda, "wheels": len(wheels),
            "min_driver": host.min_driver, "proven": json.loads(runtime.proven.model_dump_json())}
