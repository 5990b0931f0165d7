"""`provisioner import DIR --image`: the container made from the export's OCI image on a PVE >= 9.1 node.

PVE 9.1 creates a container from an OCI archive in vztmpl storage (pve-storage 0d392b2 "allow .tar container
templates"; pve-container Create.pm ``archive_is_oci_format``/``restore_oci_archive``: the layers squashed into
the rootfs, the image's Entrypoint/Env written as ``entrypoint``/``lxc.environment.runtime``). `export.template`
puts ``image.oci.tar`` into a vztmpl storage of the node, at the path ``pvesm path <storage>:vztmpl/<name>.tar``
names (pve-storage Plugin.pm ``filesystem_path``: ``<path>/template/cache/<name>`` on a dir storage), named by
its sha256, and lxc.create uses it as its template; the venv is the image's own
(the burn-in's bytes), so torch.resolve/venv.build are dropped; the driver step installs the userspace matching
this node's module and the burn-in re-proves. An older PVE is refused before any change, naming the fallback.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic import Field, field_validator

from provisioner import validate
from provisioner.events import Event
from provisioner.exitcodes import ExitCode
from provisioner.export import oci_image
from provisioner.export.steps import ExportDir
from provisioner.playbook import Playbook, StepSpec
from provisioner.steps.base import Plan, StepFailed, StepKind, register
from provisioner.steps.context import StepContext
from provisioner.steps.pve_ops import call, node_name

#: the first PVE release that creates containers from OCI archives (pve-container 6.0.15, pve-storage 9.0.17)
MIN_PVE = (9, 1)
_DROPPED = ("torch.resolve", "venv.build", "export.install", "burnin.run", "burnin.multinode")


def refusal(release: str, export_dir: str, playbook: str) -> str:
    """The one line an older PVE gets: why, and the pylock import that works there."""
    return (f"PVE {release} cannot create a container from an OCI image (PVE >= 9.1); import the pylock instead: "
            f"provisioner import {export_dir} --playbook {playbook}")


def supports_oci(major_minor: tuple[int, int]) -> bool:
    return major_minor >= MIN_PVE


#: a vztmpl file name this step writes: plain characters, ``.tar`` (pve-storage's ``$VZTMPL_EXT_RE_1`` on 9.1)
_TEMPLATE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}\.tar\Z")


def template_name(archive_sha256: str) -> str:
    """The image's file name in template storage: named by its content, so a name in the storage is that image
    (an upload never replaces a different file, and the same export is found again)."""
    return f"gpu-runtime-{archive_sha256[:16]}.tar"


def archive_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class TemplateParams(ExportDir):
    storage: validate.StorageId = "local"
    name: str = Field("gpu-runtime.tar", description="The vztmpl file name on the node (<name>.tar)")
    sha256: str | None = Field(None, description="The archive's sha256 (checked before and after the upload)")
    playbook: str = Field("P", description="The playbook named in the fallback line")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _TEMPLATE_NAME.fullmatch(v):
            raise ValueError(f"{v!r}: a template file name is letters, digits, '.', '_', '-', ending in .tar")
        return v

    @field_validator("sha256")
    @classmethod
    def _sha(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[0-9a-f]{64}", v):
            raise ValueError("sha256: 64 lowercase hex digits")
        return v


@register
class ExportTemplate(StepKind[TemplateParams]):
    """The export's image.oci.tar in the node's vztmpl storage, on a PVE that can create from it: uploaded
    beside its destination (``pvesm path`` of the volume), checked there, then linked into place (never over a
    file already there)."""

    kind = "export.template"
    title = "Put the export's OCI image into template storage"
    Params = TemplateParams

    def _archive(self) -> Path:
        path = Path(self.params.export_dir) / oci_image.ARCHIVE
        if path.is_symlink() or not path.is_file():
            raise StepFailed(f"{path}: no {oci_image.ARCHIVE} (export with --format oci)", exit_code=ExitCode.USAGE)
        return path

    def volid(self) -> str:
        return f"{self.params.storage}:vztmpl/{self.params.name}"

    async def check(self, ctx: StepContext) -> Plan:
        version = await call(ctx, "read the PVE version", ctx.pve().version)
        if not supports_oci(version.major_minor):
            raise StepFailed(refusal(version.release, self.params.export_dir, self.params.playbook),
                             exit_code=ExitCode.NO_SOLUTION)
        archive = self._archive()
        node = node_name(ctx)
        stores = await call(ctx, "list storages", ctx.pve().storages, node, "vztmpl")
        names = sorted(str(s.get("storage")) for s in stores)
        if self.params.storage not in names:
            raise StepFailed(f"storage {self.params.storage!r} on {node} holds no container templates "
                             f"(storages with vztmpl content: {', '.join(names) or 'none'})",
                             fix="name one of those as export.template's storage, or add vztmpl to the storage's "
                                 "content (Datacenter > Storage > Edit > Content)", exit_code=ExitCode.USAGE)
        content = await call(ctx, "list templates", ctx.pve().storage_content, self.params.storage, "vztmpl", node)
        listed = next((item for item in content if item.get("volid") == self.volid()), None)
        if listed is not None:
            size = archive.stat().st_size
            if listed.get("size") != size:
                raise StepFailed(f"{self.volid()} is in template storage with {listed.get('size')} bytes, not this "
                                 f"export's {size}: a different file has that name; it is left as it is",
                                 fix="remove that template on the node, or name another (export.template name:)")
            return Plan.no_change(f"{self.volid()} is in template storage")
        return Plan(changes=[f"upload {oci_image.ARCHIVE} ({archive.stat().st_size} bytes) as {self.volid()}"])

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        archive = self._archive()
        where = await ctx.node.run(["pvesm", "path", self.volid()], timeout=60, quiet=True)
        dest = where.lines[-1].strip() if where.ok and where.lines else ""
        if not (dest.startswith("/") and posixpath.normpath(dest) == dest
                and posixpath.basename(dest) == self.params.name):
            raise StepFailed(f"`pvesm path {self.volid()}` gave no path for the template "
                             f"({where.output.strip()[:300] or f'exit {where.exit_status}'})")
        want = self.params.sha256 or archive_sha256(archive)
        part = dest + ".part"  # not a vztmpl name: never listed, never used, while it is written
        yield ctx.info(f"uploading {oci_image.ARCHIVE} to {self.volid()} ({dest})")
        await ctx.node.put(archive, part)
        try:
            got = await ctx.node.run(["sha256sum", "--", part], timeout=600, quiet=True)
            seen = got.lines[-1].split()[0] if got.ok and got.lines else ""
            if seen != want:
                raise StepFailed(f"the uploaded {part} has sha256 {seen or '(unreadable)'}, the export's is {want}")
            placed = await ctx.node.run(["ln", "--", part, dest], timeout=60, quiet=True)
            if not placed.ok:  # `ln` never replaces a file: one appeared there since the plan
                raise StepFailed(f"{dest} could not be made ({placed.output.strip()[:300]}); a file already there "
                                 "is left as it is")
        finally:
            await ctx.node.run(["rm", "-f", "--", part], timeout=60, quiet=True)


def derive_image(pb: Playbook, export_dir: Path, venv: str, playbook_path: str) -> Playbook:
    """P with its container created from the export's image: export.preflight after node.inventory,
    export.template before lxc.create (whose template it becomes), no venv build, then P's burn-in on `venv`."""
    folder = str(export_dir.resolve())
    archive = export_dir / oci_image.ARCHIVE
    sha = archive_sha256(archive) if archive.is_file() and not archive.is_symlink() else None
    tmpl = TemplateParams(export_dir=folder, playbook=playbook_path,
                          **({"name": template_name(sha), "sha256": sha} if sha else {}))
    volid = f"{tmpl.storage}:vztmpl/{tmpl.name}"
    burnin = next((s for s in pb.steps if s.kind == "burnin.run"), StepSpec(kind="burnin.run", params={}))
    steps: list[StepSpec] = []
    for s in pb.steps:
        if s.kind in _DROPPED:
            continue
        if s.kind == "lxc.create":
            steps.append(StepSpec(kind="export.template", params=tmpl.model_dump()))
            s = s.model_copy(update={"params": {**s.params, "template": volid}})
        steps.append(s)
        if s.kind == "node.inventory":
            steps.append(StepSpec(kind="export.preflight", params={"export_dir": folder}))
    if not any(s.kind == "lxc.create" for s in steps):
        raise ValueError("the playbook creates no container (lxc.create): --image needs one")
    if not any(s.kind == "export.preflight" for s in steps):
        steps.insert(0, StepSpec(kind="export.preflight", params={"export_dir": folder}))
    steps.append(burnin.model_copy(update={"params": {**burnin.params, "venv": venv}}))
    return pb.model_copy(update={"steps": steps, "resolved": {}, "name": f"{pb.name} (import image {export_dir.name})"})
