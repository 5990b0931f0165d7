"""`provisioner import DIR --playbook P`: build and prove a venv from an export on P's container.

The run is P with its venv made from the export: P's steps up to `gpu.detect` (the container, the
passthrough, the driver userspace matching the host), `export.preflight` right after `node.inventory` (a
host driver below host.json's floor stops the run before any change), then `export.install` in place of
`torch.resolve`/`venv.build`, then P's `burnin.run`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from provisioner.cli.verbosity import verbosity_options
from provisioner.exitcodes import ExitCode
from provisioner.playbook import Playbook, StepSpec

_REPLACED = ("torch.resolve", "venv.build", "burnin.run", "burnin.multinode")


def derive(pb: Playbook, export_dir: Path, venv: str | None = None) -> Playbook:
    """P with its venv made from the export: the driver floor checked right after node.inventory (before any
    change), export.install in place of torch.resolve/venv.build, then P's burn-in on that venv."""
    folder = str(export_dir.resolve())
    path = venv or next((str(s.params.get("path")) for s in pb.steps if s.kind == "venv.build" and s.params.get("path")),
                        "/opt/torch-venv")
    burnin = next((s for s in pb.steps if s.kind == "burnin.run"), StepSpec(kind="burnin.run", params={}))
    steps: list[StepSpec] = []
    for s in pb.steps:
        if s.kind in _REPLACED:
            continue
        steps.append(s)
        if s.kind == "node.inventory":
            steps.append(StepSpec(kind="export.preflight", params={"export_dir": folder}))
    if not any(s.kind == "export.preflight" for s in steps):
        steps.insert(0, StepSpec(kind="export.preflight", params={"export_dir": folder}))
    steps += [StepSpec(kind="export.install", params={"export_dir": folder, "path": path}),
              burnin.model_copy(update={"params": {**burnin.params, "venv": path}})]
    return pb.model_copy(update={"steps": steps, "resolved": {}, "name": f"{pb.name} (import {export_dir.name})"})


@click.command("import")
@click.argument("export_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--playbook", "playbook_path", type=click.Path(dir_okay=False, exists=True), required=True,
              help="The playbook of the target container (its venv.build/torch.resolve are replaced).")
@click.option("--venv", default=None, help="The venv path (default: the playbook's venv.build path).")
@click.option("--image", is_flag=True, help="Create the container from the export's OCI image (PVE >= 9.1) "
              "instead of building the venv from the pylock.")
@click.option("--lab", is_flag=True, help="Point the playbook's target at the running lab.")
@click.option("--json", "json_out", is_flag=True, help="Print the recap as JSON (last stdout line).")
@click.option("--trust-new-host", is_flag=True, help="Accept and record an unknown SSH host key.")
@verbosity_options
def command(export_dir: Path, playbook_path: str, venv: str | None, image: bool, lab: bool, json_out: bool,
            trust_new_host: bool, verbose: bool, quiet: bool) -> None:
    """Build a venv from EXPORT_DIR on the playbook's container and prove it (smoke test and burn-in);
    a host driver below host.json's floor is refused before anything is changed (exit 3).

    Example: provisioner import out --playbook playbooks/blackwell-8gpu-lxc.yaml --lab
    """
    import provisioner.export.steps  # noqa: F401 - registers export.preflight and export.install
    from provisioner.cli.common import common_run, load_or_exit
    from provisioner.export.write import ExportInvalid, read_export
    from provisioner.playbook import dump
    from provisioner.steps.base import load_step_kinds

    load_step_kinds()
    try:  # read without following links, every field checked, before anything else
        read_export(export_dir)
    except ExportInvalid as exc:
        click.echo(f"error: {export_dir} is not an export folder this engine imports: {exc}", err=True)
        raise SystemExit(ExitCode.USAGE) from None
    pb = load_or_exit(playbook_path)
    if image:
        import provisioner.export.image_import as image_import
        from provisioner.export.write import read_runtime

        try:
            derived = image_import.derive_image(pb, export_dir, read_runtime(export_dir).venv, playbook_path)
        except ValueError as exc:
            click.echo(f"error: {exc}", err=True)
            raise SystemExit(ExitCode.USAGE) from None
    else:
        derived = derive(pb, export_dir, venv)
    with tempfile.TemporaryDirectory(prefix="gpu-provisioner-import-") as tmp:
        book = Path(tmp) / f"import-{Path(playbook_path).name}"  # not a run of P for `export P`
        dump(derived, book)
        common_run(str(book), mode="apply", json_out=json_out, lab=lab, trust_new_host=trust_new_host,
                   verbose=verbose, quiet=quiet)
