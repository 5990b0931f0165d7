"""Write an export folder: pylock.toml, runtime.json, host.json, then the chosen rendering."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from provisioner.export import flox, nix, oci, pylock
from provisioner.export.collect import VERIFY, Export
from provisioner.export.models import HostNeeds, RuntimeProof
from provisioner.paths import cache_dir


def write_core(out: Path, exp: Export) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / pylock.PYLOCK).write_text(pylock.dumps(exp.pylock), encoding="utf-8")
    (out / "runtime.json").write_text(exp.runtime.model_dump_json(indent=2) + "\n", encoding="utf-8")
    (out / "host.json").write_text(exp.host.model_dump_json(indent=2) + "\n", encoding="utf-8")


def read_export(folder: Path) -> tuple[RuntimeProof, HostNeeds, list[pylock.Wheel]]:
    """An export folder's proof, host needs and wheels, validated."""
    runtime = RuntimeProof.model_validate_json((folder / "runtime.json").read_text(encoding="utf-8"))
    host = HostNeeds.model_validate_json((folder / "host.json").read_text(encoding="utf-8"))
    wheels = pylock.wheels(pylock.load((folder / pylock.PYLOCK).read_text(encoding="utf-8")))
    return runtime, host, wheels


def render_oci(folder: Path, base: str, cache: Path | None = None) -> str:
    """The OCI layout `folder/oci` and its Containerfile context from the folder's export; the manifest digest."""
    runtime, host, wheels = read_export(folder)
    oci.check_base(base)
    store = cache or cache_dir() / "export-wheels"
    fetched = [(w, oci.fetch_wheel(w, store)) for w in wheels]
    wdir = folder / "wheels"
    wdir.mkdir(exist_ok=True)
    for w, path in fetched:
        if not (wdir / w.filename).exists():
            shutil.copyfile(path, wdir / w.filename)
    (folder / "install.sh").write_text(oci.INSTALL_SH, encoding="utf-8")
    (folder / "smoke.py").write_text(VERIFY, encoding="utf-8")
    (folder / oci.CONTAINERFILE).write_text(oci.containerfile(runtime, host, base), encoding="utf-8")
    return oci.build_layout(folder / oci.LAYOUT, folder, runtime, host, fetched, base, VERIFY)


def render(folder: Path, fmt: str, *, uv_version: str, base: str | None = None, nixpkgs_rev: str = nix.NIXPKGS_REV,
           cache: Path | None = None) -> dict[str, str]:
    """The rendering of `fmt` beside the core files; what was written (name -> note)."""
    runtime, host, wheels = read_export(folder)
    if fmt == "flox":
        (folder / flox.MANIFEST).write_text(flox.render(runtime, host, uv_version), encoding="utf-8")
        return {flox.MANIFEST: "Flox manifest"}
    if fmt == "nix":
        (folder / nix.FLAKE).write_text(nix.render(runtime, host, wheels, nixpkgs_rev), encoding="utf-8")
        return {nix.FLAKE: "Nix flake"}
    if fmt == "oci":
        if not base:
            raise ValueError("--format oci needs --base NAME@sha256:<digest> (the base image, named by digest)")
        digest = render_oci(folder, base, cache)
        return {oci.LAYOUT: f"OCI image layout, manifest {digest}", oci.CONTAINERFILE: "Containerfile"}
    return {}


def summary(folder: Path) -> dict[str, object]:
    runtime, host, wheels = read_export(folder)
    return {"dir": str(folder), "torch": runtime.torch, "cuda": runtime.cuda, "wheels": len(wheels),
            "min_driver": host.min_driver, "proven": json.loads(runtime.proven.model_dump_json())}
