"""The OCI image of the lab's proven container: from the shipped playbook provisioned (the run's golden node,
this test's own copy: tests/support/lab.py, which checks that provisioning end to end), `export --format oci`,
then with no network read the image with skopeo, unpack it with umoci and, chrooted into the unpacked rootfs,
import torch and pass the gloo burn-in from the image's entrypoint; every file of the venv's RECORDs is the
proven container's byte for byte, and a second export gives the same manifest digest."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.lab import golden_playbook
from tests.support.labrun import REPO, LabRun
from tests.support.require import require


def _cli(run: LabRun, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provisioner", *args], capture_output=True, text=True,
                          env=run.env(), cwd=REPO, timeout=timeout)


@pytest.fixture
def lab(golden_copy: Callable[[Path], LabRun], tmp_path: Path) -> Iterator[LabRun]:
    """The shipped playbook provisioned (with its burn-in): the run's golden node, this test's own copy, running."""
    require(os.geteuid() == 0, "the lab's container sandbox (mount namespaces) and chroot need root")
    require(shutil.which("skopeo") is not None and shutil.which("umoci") is not None,
            "skopeo and umoci (Debian packages) are not installed")
    run = golden_copy(tmp_path / "base")
    with run.running():
        yield run


def _record_files(venv: Path) -> dict[str, str]:
    """Every file the venv's RECORDs list (relative to site-packages' parent dirs) -> the RECORD's sha256."""
    out: dict[str, str] = {}
    for record in venv.glob("lib/python*/site-packages/*.dist-info/RECORD"):
        site = record.parent.parent
        with open(record, newline="") as fh:
            for row in csv.reader(fh):
                if len(row) >= 2 and row[1].startswith("sha256="):
                    path = (site / row[0]).resolve()
                    out[str(path.relative_to(venv.resolve()))] = row[1][len("sha256="):]
    return out


def _sha_b64(path: Path) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()


# two image exports of a torch venv, an unpack, a burn-in (and, for the run's first golden-node user, the
# provisioning)
@pytest.mark.timeout(2400)
def test_oci_image_of_the_proven_container_runs_the_burnin_unpacked(lab: LabRun, tmp_path: Path) -> None:
    # the provisioning (exit 0, every step ok/changed, burn-in pass) is the golden node's, checked where it ran
    book = golden_playbook(lab)  # the playbook that provisioned this copy

    out = tmp_path / "image-export"
    made = _cli(lab, "export", str(book), "--lab", "--format", "oci", "--rootfs", "runtime", "-o", str(out), "--json")
    assert made.returncode == 0, made.stderr[-3000:]
    assert json.loads(made.stdout.strip().splitlines()[-1])["files"][-3:] == ["image", "image.oci.tar", "image.json"]
    info = json.loads((out / "image.json").read_text())
    runtime = json.loads((out / "runtime.json").read_text())

    # no network from here on: skopeo reads the layout and the archive from disk
    inspected = subprocess.run(["skopeo", "inspect", f"oci:{out / 'image'}:latest"], capture_output=True, text=True,
                               timeout=300)
    assert inspected.returncode == 0, inspected.stderr
    doc = json.loads(inspected.stdout)
    assert doc["Digest"] == info["manifest"] and len(doc["Layers"]) == info["base_layers"] + 2
    assert {"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.0,driver>=525.60.13"} <= set(doc["Env"])
    archived = subprocess.run(["skopeo", "inspect", f"oci-archive:{out / 'image.oci.tar'}"], capture_output=True,
                              text=True, timeout=300)
    assert archived.returncode == 0 and json.loads(archived.stdout)["Digest"] == info["manifest"], archived.stderr

    bundle = tmp_path / "bundle"
    unpacked = subprocess.run(["umoci", "unpack", "--image", f"{out / 'image'}:latest", str(bundle)],
                              capture_output=True, text=True, timeout=900)
    assert unpacked.returncode == 0, unpacked.stderr
    rootfs = bundle / "rootfs"
    assert not list(rootfs.rglob("libcuda.so*")) and not list(rootfs.rglob("libnvidia-ml.so*"))
    assert not (rootfs / "usr" / "bin" / "nvidia-smi").exists()

    # the venv is the proven container's, byte for byte (every file its RECORDs list)
    proven_venv = lab.state().ct_root(200) / runtime["venv"].lstrip("/")
    image_venv = rootfs / runtime["venv"].lstrip("/")
    records = _record_files(proven_venv)
    assert len(records) > 100
    for rel, sha in records.items():
        assert _sha_b64(image_venv / rel) == sha == _sha_b64(proven_venv / rel), rel

    # chrooted into the unpacked rootfs (its own /proc, the machine's /dev): torch imports and the gloo
    # burn-in passes, both through the image's entrypoint
    entry = [f"{runtime['venv']}/bin/python", "/opt/gpu-provisioner/entrypoint.py"]
    script = ('mount -t proc proc "$1/proc" && mount --rbind /dev "$1/dev" && shift && exec chroot "$@"')
    chroot = shutil.which("chroot", path="/usr/sbin:/usr/bin:/sbin:/bin") or "chroot"
    base = ["unshare", "--mount", "--fork", "sh", "-c", script.replace("chroot", chroot), "sh", str(rootfs), str(rootfs)]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/root"}
    imported = subprocess.run([*base, *entry, "python", "-c", "import torch; print(torch.__version__)"],
                              capture_output=True, text=True, timeout=600, env=env)
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert imported.stdout.strip().splitlines()[-1] == runtime["torch"]
    burnin = subprocess.run([*base, *entry, "burnin", "--world-size", "2", "--backend", "gloo", "--sizes",
                             "1KiB:64KiB", "--duration", "1", "--json"], capture_output=True, text=True, timeout=900,
                            env=env)
    assert burnin.returncode == 0, burnin.stdout[-2000:] + burnin.stderr[-3000:]
    result = json.loads(burnin.stdout.strip().splitlines()[-1])
    assert result["verdict"]["overall"] == "pass", json.dumps(result)[:2000]

    again = _cli(lab, "export", str(book), "--lab", "--format", "oci", "--rootfs", "runtime", "-o",
                 str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((tmp_path / "again" / "image.json").read_text())["manifest"] == info["manifest"]
