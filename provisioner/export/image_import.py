"""`provisioner import DIR --image`: the container made from the export's OCI image on a PVE >= 9.1 node.

PVE 9.1 creates a container from an OCI archive in vztmpl storage (pve-storage 0d392b2 "allow .tar container
templates"; pve-container Create.pm ``archive_is_oci_format``/``restore_oci_archive``: the layers squashed into
the rootfs, the image's Entrypoint/Env written as ``entrypoint``/``lxc.environment.runtime``). `export.template`
puts ``image.oci.tar`` into the node's ``local`` vztmpl folder (``/var/lib/vz/template/cache``, where pve-storage
lists it as ``local:vztmpl/<name>.tar``) and lxc.create uses it as its template; the venv is the image's own
(the burn-in's bytes), so torch.resolve/venv.build are dropped; the driver step installs the userspace matching
this node's module and the burn-in re-proves. An older PVE is refused before any change, naming the fallback.
"""

from __future__ import annotations

import posixpath
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic import Field

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


class TemplateParams(ExportDir):
    storage: validate.StorageId = "local"
    name: str = Field("gpu-runtime.tar", description="The vztmpl file name on the node (<name>.tar)")
    playbook: str = Field("P", description="The playbook named in the fallback line")


@register
class ExportTemplate(StepKind[TemplateParams]):
    """The export's image.oci.tar in the node's vztmpl storage, on a PVE that can create from it."""

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
        self._archive()
        content = await call(ctx, "list templates", ctx.pve().storage_content, self.params.storage, "vztmpl",
                             node_name(ctx))
        if any(item.get("volid") == self.volid() for item in content):
            return Plan.no_change(f"{self.volid()} is in template storage")
        return Plan(changes=[f"upload {oci_image.ARCHIVE} as {self.volid()}"])

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        yield ctx.info(f"uploading {oci_image.ARCHIVE} to {self.volid()}")
        await ctx.node.put(self._archive(), posixpath.join("/var/lib/vz/template/cache", self.params.name))


def derive_image(pb: Playbook, export_dir: Path, venv: str, playbook_path: str) -> Playbook:
    """P with its container created from the export's image: export.preflight after node.inventory,
    export.template before lxc.create (whose template it becomes), no venv build, then P's burn-in on `venv`."""
    folder = str(export_dir.resolve())
    tmpl = TemplateParams(export_dir=folder, playbook=playbook_path)
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
