"""`provisioner export PLAYBOOK|RUN --format pylock|flox|nix|oci [-o DIR]`: the proven runtime as a folder."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from provisioner.exitcodes import ExitCode
from provisioner.export.models import FORMATS
from provisioner.export.nix import NIXPKGS_REV


def _lab_file_hosts(lab: bool) -> list[str]:
    """`--lab`: the lab's files host (its index keeps files on another address, as download.pytorch.org keeps
    them on download-r2): a host the export may take wheels from."""
    if not lab:
        return []
    from provisioner.session import lab_connection

    files = str(lab_connection().get("files_url") or "")
    return [files] if files else []


async def _collect(pb: Any, proof: Any, venv: str, trust_new_host: bool, file_hosts: list[str]) -> Any:
    from provisioner.events import Bus
    from provisioner.export.offer import fetch_url, gather, uv_dir_of
    from provisioner.session import node_transport
    from provisioner.transport.container import ContainerTransport

    vmid = pb.target.container or proof.resolved.get("vmid")
    if vmid is None:
        raise click.ClickException("the playbook names no container and the run recorded none")
    node = node_transport(pb.target, Bus(), trust_new_host=trust_new_host)
    try:
        return await gather(ContainerTransport(node, int(vmid)), proof, venv, fetch_url(pb), int(vmid),
                            uv_dir=uv_dir_of(pb), file_hosts=file_hosts)
    finally:
        await node.close()


@click.command("export")
@click.argument("source")
@click.option("--format", "fmt", type=click.Choice(FORMATS), required=True, help="What to render beside pylock.toml.")
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The folder to write (default: ./export-<run id>).")
@click.option("--playbook", "playbook_path", type=click.Path(dir_okay=False, exists=True), default=None,
              help="The playbook whose target holds the container (when SOURCE is a run).")
@click.option("--lab", is_flag=True, help="Point the playbook's target at the running lab.")
@click.option("--base", default=None, help="oci: `container` (default: the proving container's own root file system), "
              "oci:DIR@sha256:..., oci-archive:FILE@sha256:... or NAME@sha256:... (copied by skopeo)")
@click.option("--rootfs", type=click.Choice(("full", "runtime")), default="full", show_default=True,
              help="oci, base `container`: its whole root file system, or only what the venv runs on")
@click.option("--nixpkgs-rev", default=NIXPKGS_REV, show_default=True, help="nix: the nixpkgs commit to pin.")
@click.option("--nixpkgs-narhash", default=None,
              help="nix: another --nixpkgs-rev's narHash for flake.lock (`nix flake prefetch github:NixOS/nixpkgs/REV`).")
@click.option("--flox-catalog-torch", default=None, metavar="VERSION",
              help="flox: the torch version the flox-cuda catalog holds (`flox show flox-cuda/python3Packages.torch`); "
                   "torch comes from the catalog when it is the proven version, else from the proven wheels.")
@click.option("--trust-new-host", is_flag=True, help="Accept and record an unknown SSH host key.")
@click.option("--json", "json_out", is_flag=True, help="Print what was written as JSON.")
def command(source: str, fmt: str, output: Path | None, playbook_path: str | None, lab: bool, base: str | None,
            nixpkgs_rev: str, trust_new_host: bool, json_out: bool, rootfs: str = "full",
            nixpkgs_narhash: str | None = None, flox_catalog_torch: str | None = None) -> None:
    """Export what a run proved: pylock.toml (every wheel with URL, sha256, size), runtime.json, host.json
    and a Flox manifest, a Nix flake or an OCI image layout. Refused (exit 1) without a passing burn-in.

    Example: provisioner export playbooks/blackwell-8gpu-lxc.yaml --lab --format oci -o out
    """
    from provisioner.cli.common import echo_json, load_or_exit, with_lab
    from provisioner.export import write
    from provisioner.export.offer import venv_path
    from provisioner.export.source import ExportRefused, find_proof, require_proven
    from provisioner.steps.venv_common import UV_PIN

    src_is_playbook = Path(source).is_file() and Path(source).suffix in (".yaml", ".yml")
    try:
        if fmt == "oci":  # the wizard's plan checks the same (provisioner.export.offer.check_oci)
            from provisioner.export.offer import check_oci

            check_oci(base or "container", rootfs)
        pb = load_or_exit(source) if src_is_playbook else None
        proof = find_proof(source, pb)
        require_proven(proof)
        if pb is None:
            named = playbook_path or proof.playbook
            if not named or not Path(named).is_file():
                raise ExportRefused(f"run {proof.run_id}'s playbook {proof.playbook} is gone: name the target with "
                                    "--playbook")
            pb = load_or_exit(named)
        elif playbook_path:
            pb = load_or_exit(playbook_path)
        target = with_lab(pb, lab)
        exp = asyncio.run(_collect(target, proof, venv_path(pb), trust_new_host, _lab_file_hosts(lab)))
    except ExportRefused as exc:
        click.echo(f"error: export refused: {exc}", err=True)
        raise SystemExit(ExitCode.FAILED) from None
    out = (output or Path(f"export-{proof.run_id}")).absolute()  # `-o out`: relative to where it runs
    try:
        write.write_core(out, exp)
        if fmt == "oci":  # the image of the proving container (provisioner.export.image_collect)
            from provisioner.cli import export_image

            written = export_image.written(asyncio.run(export_image.build_from(
                target, proof, out, base or "container", rootfs, trust_new_host)), base or "container", rootfs)
        else:
            written = write.render(out, fmt, uv_version=UV_PIN, base=base, nixpkgs_rev=nixpkgs_rev,
                                   nixpkgs_narhash=nixpkgs_narhash, flox_catalog_torch=flox_catalog_torch)
    except (ValueError, OSError) as exc:  # ExportInvalid, PylockError, a download refused or failed
        click.echo(f"error: export failed: {exc}", err=True)
        raise SystemExit(ExitCode.FAILED) from None
    from provisioner.export.offer import CORE_FILES

    files = [*CORE_FILES, *written]  # what the wizard's plan names too (offer.plan_export)
    info = {**write.summary(out), "format": fmt, "files": files, "notes": proof.notes}
    if json_out:
        echo_json(info)
    else:
        for note in proof.notes:
            click.echo(note, err=True)
        click.echo(f"exported torch {exp.runtime.torch} (CUDA {exp.runtime.cuda}), {info['wheels']} wheels, "
                   f"host driver >= {exp.host.min_driver} to {out}: {', '.join(files)}")
