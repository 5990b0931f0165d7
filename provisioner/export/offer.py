"""The export as a face offers it: a plan of what would be written (or why it cannot be), then the writing.

`provisioner export` and the wizard's Summary page call the same two functions: `plan_export` reads the
run's proof (its run log) and names every file the export folder will hold, without touching a host;
`write_export` gathers the runtime from the proving container (uv's pylock of the locked wheels, the venv's
runtime.json) through the transport it is given and writes the folder; for `oci` it then makes the image of that
container (`image_collect.build_image`, what `provisioner export --format oci` makes). Neither knows a UI.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from provisioner.export import flox, nix, oci_image, pylock, write
from provisioner.export.collect import DEFAULT_UV_DIR, Export, build, make_pylock, read_venv_runtime
from provisioner.export.image_collect import build_image
from provisioner.export.models import FORMATS
from provisioner.export.source import ExportRefused, Proof, read_run, require_proven
from provisioner.payloads import object_at
from provisioner.playbook import Playbook
from provisioner.transport.base import Transport
from provisioner.transport.container import ContainerTransport

#: what each format renders beside the core files (pylock.toml, runtime.json, host.json)
FORMAT_TITLES = {"pylock": "pylock.toml only (PEP 751)", "flox": "Flox environment (manifest.toml)",
                 "nix": "Nix flake (flake.nix)", "oci": "OCI image of the container (+ oci-archive)"}
DEFAULT_VENV = "/opt/torch-venv"
#: what `image_collect.build_image` writes beside the layout and the archive
IMAGE_INFO = "image.json"
CORE_FILES = (pylock.PYLOCK, "runtime.json", "host.json")


def venv_path(playbook: Playbook) -> str:
    """The venv the playbook's venv.build builds (where the export reads runtime.json)."""
    for step in playbook.steps:
        if step.kind == "venv.build":
            return str(step.params.get("path") or DEFAULT_VENV)
    return DEFAULT_VENV


def fetch_url(playbook: Playbook) -> Callable[[str], str]:
    """Where the venv's indexes are fetched from on this site (the playbook's venv.build mirrors, if any)."""
    from provisioner.steps.venv_build import VenvParams

    spec = next((s for s in playbook.steps if s.kind == "venv.build"), None)
    return VenvParams.model_validate(spec.params if spec is not None else {}).fetch_url


def uv_dir_of(playbook: Playbook) -> str:
    """Where the playbook's venv.build keeps the engine's uv in the container (the uv the export runs)."""
    from provisioner.steps.venv_build import VenvParams

    spec = next((s for s in playbook.steps if s.kind == "venv.build"), None)
    return VenvParams.model_validate(spec.params if spec is not None else {}).uv_dir


async def gather(ct: Transport, proof: Proof, venv: str, fetch: Callable[[str], str], vmid: int | None, *,
                 uv_dir: str = DEFAULT_UV_DIR, file_hosts: Sequence[str] = ()) -> Export:
    """The export's content, read from the proving container `ct` (the engine's uv runs there, by path), every
    answer checked (`collect`, `trust`). `file_hosts`: a site's files hosts besides its indexes (the lab's)."""
    venv_rt = await read_venv_runtime(ct, venv)
    torch_res = proof.resolved.get("torch") or {}
    doc = await make_pylock(ct, venv, proof.resolved["venv_lock"]["groups"], fetch=fetch,
                            variant=str(torch_res.get("variant") or ""), torch_index=str(venv_rt.index_url),
                            python=str(venv_rt.python), uv_dir=uv_dir, file_hosts=file_hosts)
    return build(proof, venv, venv_rt, doc, vmid)


def image_files(base: str = "container", rootfs: str = "full", manifest: str = "") -> list[tuple[str, str]]:
    """(name, what) of what `--format oci` writes beside the core files (`image_collect.build_image`): the plan's
    list and the CLI's (`cli.export_image.written`); `manifest` once it is made."""
    made = f", manifest {manifest}" if manifest else ""
    of = f"the container's {rootfs} root file system" if base == "container" else f"base {base}"
    return [(oci_image.LAYOUT, f"OCI image layout{made}: {of} less the driver, the proven venv, the burn-in"),
            (oci_image.ARCHIVE, "the same image as an oci-archive (skopeo, PVE 9.1 template storage)"),
            (IMAGE_INFO, "what the image holds: manifest digest, layers, the driver's files left out")]


def format_files(fmt: str, base: str = "container", rootfs: str = "full") -> list[tuple[str, str]]:
    """(name, what) of the files `fmt` writes beside the core files."""
    if fmt == "flox":
        return [(flox.MANIFEST, "Flox manifest: Python and uv pinned, the venv from pylock.toml")]
    if fmt == "nix":
        return [(nix.FLAKE, "Nix flake: pinned nixpkgs, one fixed-output fetch per wheel")]
    if fmt == "oci":
        return image_files(base, rootfs)
    return []


def check_oci(base: str, rootfs: str) -> None:
    """The oci parameters as `export --base/--rootfs` take them (`oci_image.check_base`, `ROOTFS_MODES`), and a
    local base that is there; ExportRefused says which."""
    try:
        oci_image.check_base(base)
    except oci_image.ImageRefused as exc:
        raise ExportRefused(str(exc)) from None
    if rootfs not in oci_image.ROOTFS_MODES:
        raise ExportRefused(f"the root file system must be one of {', '.join(oci_image.ROOTFS_MODES)}, got {rootfs!r}")
    kind, _, rest = base.partition(":")
    if kind in ("oci", "oci-archive") and "@" in rest:
        local = Path(rest.rsplit("@", 1)[0]).expanduser()
        if not (local.is_dir() if kind == "oci" else local.is_file()):
            raise ExportRefused(f"the base {kind}:{local} is not a {'folder' if kind == 'oci' else 'file'} here")


@dataclass
class ExportPlan:
    """What an export would write, or why it cannot."""

    fmt: str
    out: Path
    files: list[tuple[str, str]] = field(default_factory=list)
    refused: str = ""
    proof: Proof | None = None
    venv: str = DEFAULT_VENV
    uv_dir: str = DEFAULT_UV_DIR
    #: the folder as the user named it (a relative one stays relative on screen; `out` is the absolute path written)
    shown: str = ""
    vmid: int | None = None
    base: str | None = None
    #: oci, base `container`: the container's whole root file system or only what the venv runs on
    rootfs: str = "full"
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.refused

    def lines(self) -> list[str]:
        """The plan in words: the folder, each file with what it holds, what is read from where."""
        if self.refused:
            return [f"cannot export: {self.refused}"]
        out = [f"will write {self.shown or self.out}/ ({self.fmt}):"]
        out += [f"  {name} — {what}" for name, what in self.files]
        out += [f"  {note}" for note in self.notes]
        return out


def plan_export(run_log: Path, playbook: Playbook, fmt: str, out: Path | str, *, base: str | None = None,
                rootfs: str = "full", nixpkgs_rev: str = nix.NIXPKGS_REV) -> ExportPlan:
    """The export plan of the run `run_log` (a run log of this playbook), changing nothing anywhere. `base`
    and `rootfs` are oci's (`export --base/--rootfs`; the base by default the proving container itself)."""
    dest = Path(out).expanduser().absolute() if str(out).strip() else Path()
    if fmt == "oci":
        base = base or "container"
    plan = ExportPlan(fmt=fmt, out=dest, venv=venv_path(playbook), uv_dir=uv_dir_of(playbook), base=base or None,
                      rootfs=rootfs, shown=str(Path(out).expanduser()) if str(out).strip() else "")
    try:
        if fmt not in FORMATS:
            raise ExportRefused(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
        if not str(out).strip():
            raise ExportRefused("no destination folder given")
        if dest.exists() and not dest.is_dir():
            raise ExportRefused(f"{dest} exists and is not a folder")
        if fmt == "oci":
            check_oci(base or "container", rootfs)
        if fmt == "nix":
            if not re.fullmatch(r"[0-9a-f]{40}", nixpkgs_rev):
                raise ExportRefused(f"not a nixpkgs commit: {nixpkgs_rev!r}")
        if not run_log.is_file():
            raise ExportRefused(f"the run log {run_log} is not there: nothing was recorded")
        proof = read_run(run_log)
        require_proven(proof)
    except ExportRefused as exc:
        plan.refused = str(exc)
        return plan
    res = proof.resolved
    vmid = playbook.target.container or res.get("vmid")
    if vmid is None:
        plan.refused = "the playbook names no container and the run recorded none"
        return plan
    plan.proof, plan.vmid = proof, int(vmid)
    torch = object_at(res, "torch")
    runtime = object_at(res, "runtime")
    built = runtime.get("torch") or torch.get("version") or "the venv's torch"
    groups = res["venv_lock"]["groups"]
    plan.files = [
        (pylock.PYLOCK, f"every wheel of the lock ({len(groups)} group(s)): URL, sha256, size"),
        ("runtime.json", f"the proof: torch {built}, burn-in pass, run {proof.run_id}"),
        ("host.json", f"the host driver it needs (proven on {res.get('host_driver') or 'the host'})"),
        *format_files(fmt, plan.base or "container", rootfs),
    ]
    plan.notes = [f"read from CT {plan.vmid}: {plan.venv}/runtime.json and the pylock of the engine's uv "
                  f"({plan.uv_dir}/bin/uv, else this machine's uv lent for the call; never the container's PATH)"]
    if fmt == "oci":
        plan.notes.append(f"then from CT {plan.vmid} through pct exec: "
                          + (f"its {rootfs} root file system and " if plan.base == "container" else "")
                          + f"the venv {plan.venv}, as tar streams")
        if plan.base and plan.base != "container" and not plan.base.startswith(("oci:", "oci-archive:")):
            plan.notes.append(f"the base {plan.base} is copied by skopeo from its registry (reachable from here)")
    if dest.is_dir() and any(dest.iterdir()):
        plan.notes.append(f"{dest} is not empty: files of the same name are replaced")
    return plan


async def write_export(plan: ExportPlan, ct: Transport, *, fetch: Callable[[str], str] = str, uv_version: str = "",
                       nixpkgs_rev: str = nix.NIXPKGS_REV, cache: Path | None = None,
                       file_hosts: Sequence[str] = ()) -> list[str]:
    """Write the planned export: gather it from the proving container `ct`, then write the folder (oci: the
    image of that container, as `export --format oci` makes it). Returns the names written (relative to
    `plan.out`), exactly the plan's; raises ExportRefused (or ValueError from a rendering or the image)."""
    if not plan.ok or plan.proof is None:
        raise ExportRefused(plan.refused or "no plan")
    if plan.fmt == "oci" and not isinstance(ct, ContainerTransport):
        raise ExportRefused("the oci image is read from the container through pct exec: no container transport")
    if not uv_version:
        from provisioner.steps.venv_common import UV_PIN

        uv_version = UV_PIN
    exp = await gather(ct, plan.proof, plan.venv, fetch, plan.vmid, uv_dir=plan.uv_dir, file_hosts=file_hosts)

    def _write() -> list[str]:
        write.write_core(plan.out, exp)
        if plan.fmt == "oci":
            return []
        rendered = write.render(plan.out, plan.fmt, uv_version=uv_version, base=plan.base, nixpkgs_rev=nixpkgs_rev,
                                cache=cache)
        return list(rendered)

    rendered = await asyncio.to_thread(_write)
    if plan.fmt == "oci":
        assert isinstance(ct, ContainerTransport)
        info = await build_image(ct, plan.out, base=plan.base or "container", rootfs=plan.rootfs)
        rendered = [name for name, _ in image_files(plan.base or "container", plan.rootfs, str(info["manifest"]))]
    return [*CORE_FILES, *rendered]
