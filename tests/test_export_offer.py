"""One engine path for `oci`: the wizard's plan (`provisioner.export.offer.plan_export`) names the files
`provisioner export --format oci` writes and takes the bases its `--base` takes, refused by the same check.

The proof is a recorded run log of the wizard (tests/fixtures/runs/20261203T131151-82a539.jsonl, see SOURCE.md
there: a passing burn-in of the reference playbook). The image itself, written through the wizard, is
tests/test_tui_export.py; through the CLI on the lab, tests/test_import_image_lab.py.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from provisioner.cli import export, export_image
from provisioner.export import offer, write
from provisioner.export.offer import CORE_FILES, plan_export
from provisioner.export.source import ExportRefused
from provisioner.playbook import load
from provisioner.transport.local import LocalTransport
from tests.support.export_folder import PLAYBOOK, export_folder, make_wheels

PROVEN_RUN = Path(__file__).parent / "fixtures" / "runs" / "20261203T131151-82a539.jsonl"
DIGEST = "sha256:" + hashlib.sha256(b"a base of the test").hexdigest()


def _names(plan: offer.ExportPlan) -> list[str]:
    return [name for name, _ in plan.files]


@pytest.mark.parametrize("rootfs", ["full", "runtime"])
def test_the_oci_plan_names_exactly_the_files_the_cli_writes(tmp_path: Path, rootfs: str) -> None:
    plan = plan_export(PROVEN_RUN, load(PLAYBOOK), "oci", tmp_path / "out", rootfs=rootfs)
    assert plan.ok, plan.refused
    assert plan.base == "container" and plan.rootfs == rootfs  # the CLI's --base default
    cli = [*CORE_FILES, *export_image.written({"manifest": DIGEST}, "container", rootfs)]
    assert _names(plan) == cli
    assert not {"oci", "oci/", "Containerfile"} & set(_names(plan))  # the old layout is gone
    text = "\n".join(plan.lines())
    assert f"its {rootfs} root file system" in text and "less the driver" in text
    assert not (tmp_path / "out").exists()  # a plan writes nothing


def test_the_plan_takes_every_base_the_cli_takes(tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    layout.mkdir()
    archive = tmp_path / "base.oci.tar"
    archive.write_bytes(b"")
    pb = load(PLAYBOOK)
    for base in ("container", f"oci:{layout}@{DIGEST}", f"oci-archive:{archive}@{DIGEST}",
                 f"docker.io/library/debian@{DIGEST}"):
        plan = plan_export(PROVEN_RUN, pb, "oci", tmp_path / "out", base=base)
        assert plan.ok, (base, plan.refused)
        assert plan.base == base and _names(plan) == [*CORE_FILES, *export_image.written({"manifest": DIGEST})]
    registry = plan_export(PROVEN_RUN, pb, "oci", tmp_path / "out", base=f"debian@{DIGEST}")
    assert any("copied by skopeo" in note for note in registry.notes)
    gone = plan_export(PROVEN_RUN, pb, "oci", tmp_path / "out", base=f"oci:{tmp_path / 'nothing'}@{DIGEST}")
    assert not gone.ok and "is not a folder here" in gone.refused


@pytest.mark.parametrize(("base", "rootfs", "says"), [
    ("ubuntu:24.04", "full", "the base must be `container`, oci:DIR@sha256:<hex>"),
    ("oci:/srv/base", "full", "the base must be `container`"),
    ("container", "everything", "the root file system must be one of full, runtime"),
])
def test_the_plan_and_the_cli_refuse_a_base_with_the_same_words(tmp_path: Path, base: str, rootfs: str,
                                                                says: str) -> None:
    plan = plan_export(PROVEN_RUN, load(PLAYBOOK), "oci", tmp_path / "out", base=base, rootfs=rootfs)
    assert not plan.ok and says in plan.refused
    args = [str(PLAYBOOK), "--format", "oci", "--base", base, "-o", str(tmp_path / "cli")]
    if rootfs in ("full", "runtime"):
        args += ["--rootfs", rootfs]
        ran = CliRunner().invoke(export.command, args)
        # refused before anything is read or written (no run log of this playbook is even looked for)
        assert ran.exit_code == 1 and f"error: export refused: {plan.refused}" in ran.output, ran.output
    assert not (tmp_path / "out").exists() and not (tmp_path / "cli").exists()


def test_a_relative_folder_is_planned_as_given_and_written_absolute(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    plan = plan_export(PROVEN_RUN, load(PLAYBOOK), "oci", "export")
    assert plan.ok and plan.out == tmp_path / "export" and plan.shown == "export"
    assert plan.lines()[0] == "will write export/ (oci):"


def test_the_oci_image_needs_the_container_and_is_no_rendering_of_the_folder(tmp_path: Path) -> None:
    """The image is read from the container through pct exec: a plain transport is refused before anything
    runs, and the folder renderer has no oci branch left (the old wheels-only layout)."""
    plan = plan_export(PROVEN_RUN, load(PLAYBOOK), "oci", tmp_path / "out")
    with pytest.raises(ExportRefused, match="no container transport"):
        asyncio.run(offer.write_export(plan, LocalTransport()))
    folder, _ = export_folder(tmp_path / "folder", make_wheels(tmp_path / "index"), "https://wheels.example")
    before = sorted(p.name for p in folder.iterdir())
    with pytest.raises(ValueError, match="made from the proving container"):
        write.render(folder, "oci", uv_version="0.13.9")
    assert sorted(p.name for p in folder.iterdir()) == before and not (tmp_path / "out").exists()
