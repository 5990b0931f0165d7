"""The OCI image of the lab's proven container: from the shipped playbook provisioned (the run's golden node,
this test's own copy: tests/support/lab.py, which checks that provisioning end to end), `export --format oci`,
then with no network read the image with skopeo, unpack it with umoci (every file of the venv's RECORDs is the
proven container's byte for byte; runc runs the bundle: the gloo burn-in passes in it), and run it with podman:
`podman run oci-archive:…` passes the gloo burn-in in the image's venv through its entrypoint (on podman's default
/dev/shm, 64000 KiB, the burn-in's preflight fails naming it; with `--shm-size 1g`, as the README's run command says,
it passes). Then the image as a
container template: `import --image` on this PVE 8.4 copy is refused in one line before any change; on a PVE 9.1 lab
with another host driver it creates the container from the image, installs the matching userspace and passes the
burn-in on the image's own venv; a second import changes nothing. Last (what was checked already off the disk), a
second export gives the same manifest digest."""

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
import tempfile
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


#: the burn-in the image runs on this machine's CPUs (two gloo ranks; no GPU here)
BURNIN_ARGS = ("--world-size", "2", "--backend", "gloo", "--sizes", "1KiB:64KiB", "--duration", "1", "--json")
#: limits at or under this machine's own: the machine is itself a container without CAP_SYS_RESOURCE, and podman's
#: defaults (RLIMIT_NOFILE 1048576, RLIMIT_NPROC) would be a raise that runc is refused ("error setting rlimit type 7")
ULIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")


def _passed_in_the_image_venv(burnin: subprocess.CompletedProcess[str], runtime: dict[str, str]) -> None:
    """The burn-in exited 0 with a passing verdict, run by the image's venv (its torch, its prefix)."""
    assert burnin.returncode == 0, burnin.stdout[-2000:] + burnin.stderr[-3000:]
    result = json.loads(burnin.stdout.strip().splitlines()[-1])
    assert result["verdict"]["overall"] == "pass", burnin.stdout[-2000:]
    assert result["environment"]["torch"] == runtime["torch"], result["environment"]
    assert result["environment"]["prefix"] == runtime["venv"], result["environment"]


def _runc_burnin(bundle: Path, entry: list[str], state: Path) -> subprocess.CompletedProcess[str]:
    """The burn-in through the image's entrypoint in umoci's bundle, run by runc: the config as umoci wrote it from the
    image, with the command given, no terminal, /dev/shm at 1g (`--shm-size 1g`) and the host's network namespace (the
    gloo ranks meet on loopback, which a fresh namespace has down)."""
    require(shutil.which("runc") is not None, "runc (the OCI runtime, a Debian package) is not installed")
    config = json.loads((bundle / "config.json").read_text())
    config["process"] = {**config["process"], "args": [*entry, "burnin", *BURNIN_ARGS], "terminal": False}
    (shm,) = [m for m in config["mounts"] if m["destination"] == "/dev/shm"]
    shm["options"] = [o for o in shm["options"] if not o.startswith("size=")] + ["size=1g"]
    config["linux"]["namespaces"] = [n for n in config["linux"]["namespaces"] if n["type"] != "network"]
    (bundle / "config.json").write_text(json.dumps(config))
    return subprocess.run(["runc", "--root", str(state), "run", "--bundle", str(bundle),
                           f"gpu-provisioner-test-{os.getpid()}"], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=900)


def _podman_runs_the_archive(archive: Path, runtime: dict[str, str], base: Path) -> None:
    """`podman run oci-archive:…` with a command, as the README says (in a private store): the image's entrypoint runs
    the burn-in in the image's venv. It fails its preflight on podman's default /dev/shm
    (64000 KiB; docker's is 64 MiB), naming it, and passes with the README's `--shm-size 1g`. The OCI runtime is runc:
    this machine's cgroups are hybrid, which crun refuses ("cgroups in hybrid mode not supported")."""
    require(shutil.which("podman") is not None, "podman (a Debian package) is not installed")
    require(shutil.which("runc") is not None, "runc (the OCI runtime, a Debian package) is not installed")
    # podman refuses a runroot longer than 50 characters (its state: a few small files), so it is a short one in /tmp
    runroot = tempfile.mkdtemp(prefix="podman-run-", dir="/tmp")
    store = ["podman", "--root", str(base / "storage"), "--runroot", runroot, "--tmpdir", str(base / "tmp")]
    (base / "tmp").mkdir(parents=True)
    try:
        image = f"oci-archive:{archive}"  # as the README's run command names it (podman copies it into its store once)
        run = [*store, "run", "--rm", "--runtime", "runc", "--network", "host", *ULIMITS]
        small = subprocess.run([*run, image, "burnin", *BURNIN_ARGS, "--phases", "preflight"], capture_output=True,
                               text=True, timeout=900)
        verdict = json.loads(small.stdout.strip().splitlines()[-1])["verdict"]
        assert small.returncode != 0 and verdict["failed_phases"] == ["preflight"], small.stdout[-2000:]
        assert any(re.match(r"preflight: /dev/shm is 6\d{4}KiB: NCCL fails to extend its segments", reason)
                   for reason in verdict["reasons"]), verdict  # podman's default: 64000k
        burnin = subprocess.run([*run, "--shm-size", "1g", image, "burnin", *BURNIN_ARGS], capture_output=True,
                                text=True, timeout=900)
        _passed_in_the_image_venv(burnin, runtime)
    finally:
        subprocess.run([*store, "system", "reset", "--force"], capture_output=True, timeout=300)
        shutil.rmtree(runroot, ignore_errors=True)


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

    # umoci wrote the runtime config from the image's own: its entrypoint (default command `smoke`, which needs a GPU)
    # and the toolkit's variables
    process = json.loads((bundle / "config.json").read_text())["process"]
    assert process["args"] == [f"{runtime['venv']}/bin/python", "/opt/gpu-provisioner/entrypoint.py", "smoke"], process
    assert {"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"} <= set(process["env"])
    # runc, the OCI runtime, runs that bundle: the gloo burn-in passes in the unpacked rootfs, in the image's venv
    _passed_in_the_image_venv(_runc_burnin(bundle, process["args"][:-1], tmp_path / "runc-state"), runtime)

    trash = scratch.trash_dir(tmp_path_factory)
    # checked: its GB off the disk before podman's copy, the PVE 9.1 node and the second export
    scratch.discard(bundle, trash)

    # podman loads the oci-archive and runs it: the image's entrypoint with the command given
    _podman_runs_the_archive(out / "image.oci.tar", runtime, tmp_path / "podman")
    scratch.discard(tmp_path / "podman", trash)

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
