"""The OCI image of the lab's proven container: from the shipped playbook provisioned (the run's golden node,
this test's own copy: tests/support/lab.py, which checks that provisioning end to end), `export --format oci`,
then with no network read the image with skopeo, unpack it with umoci and, chrooted into the unpacked rootfs,
import torch and pass the gloo burn-in from the image's entrypoint; every file of the venv's RECORDs is the
proven container's byte for byte. Then the image as a container template: `import --image` on this PVE 8.4
copy is refused in one line before any change; on a PVE 9.1 lab with another host driver it creates the container
from the image, installs the matching userspace and passes the burn-in on the image's own venv; a second import
changes nothing. Last (what was checked already off the disk), a second export gives the same manifest digest."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import scratch
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
def test_oci_image_of_the_proven_container_runs_the_burnin_unpacked(lab: LabRun, tmp_path: Path,
                                                                   tmp_path_factory: pytest.TempPathFactory) -> None:
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
    trash = scratch.trash_dir(tmp_path_factory)
    scratch.discard(bundle, trash)  # checked: its GB off the disk before the PVE 9.1 node and the second export

    # the image as a container template. PVE 8 (this copy is 8.4): refused in one line naming the pylock
    # fallback, before any change (pve-storage before 0d392b2 knows no vztmpl/<x>.tar)
    conf_before = lab.state().read_conf(200).render()
    old_pve = _cli(lab, "import", str(out), "--image", "--playbook", str(book), "--lab", "--json")
    told = old_pve.stdout + old_pve.stderr
    assert old_pve.returncode == 3, told[-3000:]
    assert "PVE 8.4 cannot create a container from an OCI image (PVE >= 9.1)" in told, told[-3000:]
    (failed,) = [e for e in _events(told) if e.get("kind") == "step.finished" and e.get("status") == "failed"]
    assert failed["step"] == "export.template" and failed["message"] == (
        "PVE 8.4 cannot create a container from an OCI image (PVE >= 9.1); import the pylock instead: "
        f"provisioner import {out} --playbook {book}"), failed
    assert lab.state().read_conf(200).render() == conf_before
    assert not list((lab.root / "node" / "fs").rglob("gpu-runtime*"))

    # PVE 9.1, another node with another host driver: the image is uploaded into template storage, the container
    # is created from it, the userspace matching that node's module is installed and the burn-in passes on the
    # image's own venv (nothing rebuilt); a second import changes nothing
    _import_on_pve91(lab, out, runtime, records, tmp_path / "pve91")
    scratch.discard(tmp_path / "pve91", trash)  # checked: its node and container off the disk, and the image's
    scratch.discard(out, trash)

    # reproducible: the same export again gives the same manifest digest
    again = _cli(lab, "export", str(book), "--lab", "--format", "oci", "--rootfs", "runtime", "-o",
                 str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((tmp_path / "again" / "image.json").read_text())["manifest"] == info["manifest"]


def _events(told: str) -> list[dict[str, object]]:
    """The events of the run whose output is `told` (its `run log:` line names the file)."""
    (log,) = re.findall(r"run log: (\S+\.jsonl)", told)
    return [json.loads(line) for line in Path(log).read_text().splitlines()]


def _import_on_pve91(proven: LabRun, out: Path, runtime: dict[str, str], records: dict[str, str],
                     base: Path) -> None:
    other = LabRun(base, proven.lab_cache, profile="pve9")
    with other.running():
        env = other.env()
        upgraded = subprocess.run([sys.executable, "-m", "provisioner", "lab", "upgrade-driver", OTHER_DRIVER,
                                   "--root", str(other.root)], capture_output=True, text=True, env=env, timeout=600)
        assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
        book = str(REPO / "playbooks" / "pve9.yaml")
        first = _cli(other, "import", str(out), "--image", "--playbook", book, "--lab", "--json")
        told = first.stdout + first.stderr
        assert first.returncode == 0, told[-5000:]
        with (out / "image.oci.tar").open("rb") as f:
            name = f"gpu-runtime-{hashlib.file_digest(f, 'sha256').hexdigest()[:16]}.tar"
        assert f"upload image.oci.tar ({(out / 'image.oci.tar').stat().st_size} bytes) as local:vztmpl/{name}" \
            in told, told[-5000:]
        (created,) = (other.root / "tasks").glob("*vzcreate_200_*.log")  # the create task's log, as PVE keeps it
        assert "Detected OCI archive" in created.read_text()
        template = other.root / "node" / "fs" / "var" / "lib" / "vz" / "template" / "cache"
        assert sorted(p.name for p in template.iterdir()) == [name]  # no .part left
        assert f"install NVIDIA userspace {OTHER_DRIVER}" in told and "burn-in verdict: pass" in told, told[-5000:]
        counts = json.loads(first.stdout.strip().splitlines()[-1])["hosts"]
        (recap,) = counts.values()
        assert recap["failed"] == 0 and recap["changed"] >= 6, recap
        # the container's venv is the image's: the proven bytes, every file its RECORDs list
        venv = other.state().ct_root(200) / runtime["venv"].lstrip("/")
        for rel, sha in records.items():
            assert _sha_b64(venv / rel) == sha, rel
        again = _cli(other, "import", str(out), "--image", "--playbook", book, "--lab", "--json")
        assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
        (recap,) = json.loads(again.stdout.strip().splitlines()[-1])["hosts"].values()
        assert recap["changed"] == 0 and recap["failed"] == 0, recap
        # someone else's file under that name (another size): refused, never replaced
        (template / name).write_bytes(b"not ours\n")
        foreign = _cli(other, "import", str(out), "--image", "--playbook", book, "--lab", "--json")
        told = foreign.stdout + foreign.stderr
        assert foreign.returncode == 1, told[-3000:]
        assert f"local:vztmpl/{name} is in template storage with 9 bytes, not this export's" in told, told[-3000:]
        assert (template / name).read_bytes() == b"not ours\n"


#: a host driver other than the proven node's (the lab's default module is 595.71.05)
OTHER_DRIVER = "580.95.05"
