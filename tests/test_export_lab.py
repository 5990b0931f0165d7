"""The round trip in the lab: from the shipped playbook provisioned (the run's golden node, its own copy:
tests/support/lab.py, which checks that provisioning end to end), export what it proved, import it into a
second container (same wheels by sha256, same torch/CUDA, the burn-in passes there), and refuse a third
container whose host driver is below the export's floor before any change."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.session import LAB_BURNIN
from tests.support.lab import golden_playbook
from tests.support.labrun import REPO, LabRun, write_test_playbook

# a base image named by a digest no registry holds (the export is refused before any base is read)
BASE = "docker.io/library/ubuntu@sha256:" + hashlib.sha256(b"base image of the test").hexdigest()


def _cli(run: LabRun, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provisioner", *args], capture_output=True, text=True,
                          env=run.env(), cwd=REPO, timeout=timeout)


def exported_run_id(text: str) -> str:
    m = re.search(r"proof: run (\S+) of", text)
    assert m, text[-2000:]
    return m.group(1)


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
def lab(golden_copy: Callable[[Path], LabRun], tmp_path: Path) -> Iterator[LabRun]:
    """The shipped playbook provisioned (with its burn-in): the run's golden node, this test's own copy, running."""
    run = golden_copy(tmp_path / "base")
    with run.running():
        yield run


# four exports, an OCI build and unpack, an import (and, for the run's first golden-node user, the provisioning)
@pytest.mark.timeout(1800)
def test_export_import_round_trip_and_driver_floor(lab: LabRun, tmp_path: Path) -> None:
    from provisioner.cli.demo import demo_playbook

    # the provisioning (exit 0, every step ok/changed, burn-in pass) is the golden node's, checked where it ran
    book = golden_playbook(lab)
    # the playbooks of the imports: the shipped one with the lab's short burn-in and Pythons, as the demo does
    lab_book = write_test_playbook(tmp_path / "first.yaml", drop_kinds=(), params={"burnin.run": LAB_BURNIN,
                                                                                   "lxc.start": {"timeout_s": 10}})
    lab_book = demo_playbook(lab_book, tmp_path / "blackwell.yaml")

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

    # the container is hostile: a uv wrapper on its PATH is never run (the engine's uv runs by path) …
    ct_root = lab.state().ct_root(200)
    path_uv, marker = ct_root / "usr" / "local" / "bin" / "uv", ct_root / "root" / "wrapper-ran"
    path_uv.unlink()
    path_uv.write_text("#!/bin/sh\necho ran > /root/wrapper-ran\necho 'uv 0.13.9'\nexit 0\n")
    path_uv.chmod(0o755)
    wrapped = _cli(lab, "export", str(book), "--lab", "--format", "pylock", "-o", str(tmp_path / "wrapped"))
    assert wrapped.returncode == 0, wrapped.stderr[-3000:]
    assert not marker.exists(), "the uv on the container's PATH ran"
    assert (tmp_path / "wrapped" / "pylock.toml").read_text() == (out / "pylock.toml").read_text()
    # … and a forged answer from the engine's own uv_dir (the container's root replaced it) naming a file by a
    # percent-encoded path fails the export, naming the field, with nothing written
    forger = ct_root / "opt" / "uv" / "bin" / "uv"
    forger.parent.mkdir(parents=True)
    evil = (f"{lock['packages'][0]['wheels'][0]['url'].rsplit('/', 1)[0]}/..%2F..%2F..%2Fetc%2Fcron.d%2F"
            f"{lock['packages'][0]['wheels'][0]['url'].rsplit('/', 1)[1]}")
    forged = (f'lock-version = "1.0"\ncreated-by = "uv"\n[[packages]]\nname = "{lock["packages"][0]["name"]}"\n'
              f'version = "{lock["packages"][0]["version"]}"\nwheels = [{{ url = "{evil}", size = 10, '
              f'hashes = {{ sha256 = "{lock["packages"][0]["wheels"][0]["hashes"]["sha256"]}" }} }}]\n')
    forger.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo 'uv 0.13.9'; exit 0; }\n"
                      "while [ $# -gt 0 ]; do [ \"$1\" = -o ] && cat > \"$2\" <<'EOF'\n" + forged + "EOF\nshift; done\n")
    forger.chmod(0o755)
    traversal = _cli(lab, "export", str(book), "--lab", "--format", "oci", "--base", BASE, "-o",
                     str(tmp_path / "traversal"))
    assert traversal.returncode == 1, traversal.stderr[-3000:]
    assert "packages[0].wheels[0]" in traversal.stderr and "Invalid wheel filename" in traversal.stderr
    assert not (tmp_path / "traversal").exists() and not (ct_root / "etc" / "cron.d").exists()
    shutil.rmtree(ct_root / "opt" / "uv")

    second = _for_container(lab_book, tmp_path / "second.yaml", 201)
    imported = _cli(lab, "import", str(out), "--playbook", str(second), "--lab", "--json")
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert json.loads(imported.stdout.strip().splitlines()[-1])["status"] == "ok"
    assert "burn-in verdict: pass" in imported.stderr
    venv = lab.state().ct_root(201) / "opt" / "torch-venv"
    got = {hashlib.sha256(p.read_bytes()).hexdigest() for p in (venv / ".provisioner" / "wheels").glob("*.whl")}
    assert got == want
    rt = json.loads((venv / "runtime.json").read_text())
    assert (rt["torch"], rt["cuda"], rt["verified"]) == (runtime["torch"], runtime["cuda"], True)

    # the same export named by its run (the demo's copy of the playbook may be gone: --playbook names the target)
    run_id = exported_run_id(exported.stderr + exported.stdout)
    by_run = _cli(lab, "export", run_id, "--playbook", str(book), "--lab", "--format", "pylock", "-o",
                  str(tmp_path / "by-run"))
    assert by_run.returncode == 0, by_run.stderr[-3000:]
    assert (tmp_path / "by-run" / "pylock.toml").read_text() == (out / "pylock.toml").read_text()

    # the OCI image of this container (base layers, the venv layer, the burn-in unpacked): test_import_image_lab.py


    from provisioner.lab.day2 import upgrade_driver

    # import applies the resolver's rules: Blackwell GPUs on a 545 host driver are refused (R570) before
    # any change, although 545 is above the export's own floor (525.60.13)
    upgrade_driver(lab.state(), "545.23.08")
    blackwell = _cli(lab, "import", str(out), "--playbook", str(_for_container(lab_book, tmp_path / "b.yaml", 203)), "--lab")
    assert blackwell.returncode == 3, blackwell.stderr[-3000:]
    assert "R570" in blackwell.stderr and "needs driver ≥ 570" in blackwell.stderr
    assert not lab.state().conf_path(203).exists() and not lab.state().ct_dir(203).exists()

    upgrade_driver(lab.state(), "520.61.05")
    third = _for_container(lab_book, tmp_path / "third.yaml", 202)
    refused = _cli(lab, "import", str(out), "--playbook", str(third), "--lab")
    assert refused.returncode == 3, refused.stderr[-3000:]
    assert "below the export's floor 525.60.13" in refused.stderr
    assert not lab.state().conf_path(202).exists()
    assert not (lab.state().ct_dir(202)).exists()
