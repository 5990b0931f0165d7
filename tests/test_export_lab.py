"""The round trip in the lab: replay the shipped playbook, export what it proved, import it into a second
container (same wheels by sha256, same torch/CUDA, the burn-in passes there), and refuse a third container
whose host driver is below the export's floor before any change."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.labrun import REPO, LabRun, lab_importable, write_test_playbook
from tests.support.require import require

LAB_BURNIN = {"sizes": "1KiB:256KiB", "duration_s": 2}


def _cli(run: LabRun, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provisioner", *args], capture_output=True, text=True,
                          env=run.env(), cwd=REPO, timeout=timeout)


def _for_container(src: Path, dest: Path, vmid: int) -> Path:
    doc: dict[str, Any] = yaml.safe_load(src.read_text())
    doc["target"]["container"] = vmid
    for step in doc["steps"]:
        if step["kind"] == "lxc.create":
            step["params"]["hostname"] = f"import-{vmid}"
            step["params"]["net"]["ip"] = f"192.0.2.{vmid % 250}/24"
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


@pytest.fixture
def lab(tmp_path: Path) -> Any:
    require(lab_importable(), "the embedded lab (provisioner.lab.lab) is not in this build")
    require(os.geteuid() == 0, "the lab's container sandbox (mount namespaces) needs root")
    run = LabRun(tmp_path / "base", tmp_path / "lab-cache")
    with run.running():
        yield run


def test_export_import_round_trip_and_driver_floor(lab: LabRun, tmp_path: Path) -> None:
    from provisioner.cli.demo import demo_playbook

    book = write_test_playbook(tmp_path / "first.yaml", drop_kinds=(), params={"burnin.run": LAB_BURNIN,
                                                                               "lxc.start": {"timeout_s": 10}})
    book = demo_playbook(book, tmp_path / "blackwell.yaml")  # the lab's Pythons, as the demo does
    first = lab.replay(book)
    assert first.rc == 0, first.stderr[-3000:]

    out = tmp_path / "export"
    exported = _cli(lab, "export", str(book), "--lab", "--format", "nix", "-o", str(out), "--json")
    assert exported.returncode == 0, exported.stderr[-3000:]
    doc = json.loads(exported.stdout.strip().splitlines()[-1])
    assert doc["wheels"] >= 3 and doc["files"][-1] == "flake.nix"
    runtime = json.loads((out / "runtime.json").read_text())
    host = json.loads((out / "host.json").read_text())
    assert runtime["burnin"]["verdict"] == "pass" and host["min_driver"] == "525.60.13"
    lock = tomllib.loads((out / "pylock.toml").read_text())
    want = {w["hashes"]["sha256"] for p in lock["packages"] for w in p["wheels"]}
    assert {p["name"] for p in lock["packages"]} >= {"torch", "torchvision", "nvidia-ml-py"}
    assert all(w["size"] > 0 for p in lock["packages"] for w in p["wheels"])

    second = _for_container(book, tmp_path / "second.yaml", 201)
    imported = _cli(lab, "import", str(out), "--playbook", str(second), "--lab", "--json")
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert json.loads(imported.stdout.strip().splitlines()[-1])["status"] == "ok"
    assert "burn-in verdict: pass" in imported.stderr
    venv = lab.state().ct_root(201) / "opt" / "torch-venv"
    got = {hashlib.sha256(p.read_bytes()).hexdigest() for p in (venv / ".provisioner" / "wheels").glob("*.whl")}
    assert got == want
    rt = json.loads((venv / "runtime.json").read_text())
    assert (rt["torch"], rt["cuda"], rt["verified"]) == (runtime["torch"], runtime["cuda"], True)

    from provisioner.lab.day2 import upgrade_driver

    upgrade_driver(lab.state(), "520.61.05")
    third = _for_container(book, tmp_path / "third.yaml", 202)
    refused = _cli(lab, "import", str(out), "--playbook", str(third), "--lab")
    assert refused.returncode == 3, refused.stderr[-3000:]
    assert "below the export's floor 525.60.13" in refused.stderr
    assert not lab.state().conf_path(202).exists()
    assert not (lab.state().ct_dir(202)).exists()
