"""The OCI image of a proven runtime (provisioner.export.oci_image, rootfs_layer, image_collect): the
container's tar checked member by member, the layers reproducible, the image read by skopeo and umoci and run
from its unpacked rootfs.

The container here is this machine reached through a `pct` stand-in (tests/support/fake_pct.py) with a venv
of the machine's Debian Python; the lab's proven container (real torch, the gloo burn-in) is
tests/test_import_image_lab.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from provisioner.export import oci_image, pylock, rootfs_layer, write
from provisioner.export.collect import Export
from provisioner.export.image_collect import build_image
from provisioner.export.oci_image import ImageRefused
from provisioner.export.rootfs_layer import LayerRefused
from provisioner.transport.container import ContainerTransport
from provisioner.transport.local import LocalTransport
from tests.support.export_folder import host, lock_dict, make_wheels, runtime
from tests.support.fake_pct import FAKE_PCT
from tests.support.require import require

SYSTEM_PYTHON = "/usr/bin/python3.11"


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return path


def _info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", mode: int = 0o644, uid: int = 0,
          mtime: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode, info.uid, info.mtime = kind, link, mode, uid, mtime
    return info


@pytest.mark.parametrize(("members", "says"), [
    ([(_info("/etc/cron.d/evil"), b"x")], "an absolute name"),
    ([(_info("usr/../../etc/shadow"), b"x")], "`..` component"),
    ([(_info("dev/sda", tarfile.CHRTYPE), None)], "a device node"),
    ([(_info("run.fifo", tarfile.FIFOTYPE), None)], "a device node, FIFO"),
    ([(_info("usr/lib/escape", tarfile.SYMTYPE, link="../../../etc/shadow"), None)], "leaves the root"),
    ([(_info("usr/bin/x", tarfile.LNKTYPE, link="etc/shadow"), None)], "not a file sent before it"),
    ([(_info("a"), b"1"), (_info("a"), b"2")], "appears twice"),
    ([(_info("lib", tarfile.SYMTYPE, link="/etc"), None), (_info("lib/cron.d/evil"), b"x")], "beneath 'lib'"),
    ([(_info("usr/bin/tool\nname"), b"x")], "control character"),
])
def test_hostile_members_are_refused_naming_the_member(tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]],
                                                       says: str) -> None:
    spool = _tar(tmp_path / "ct.tar", members)
    with pytest.raises(LayerRefused, match=r"member|hard link") as exc:
        rootfs_layer.read_members(spool)
    assert says in str(exc.value)
    assert "\n" not in str(exc.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ct.tar"]  # nothing written anywhere


def test_a_layer_is_normalized_and_leaves_out_the_driver(tmp_path: Path) -> None:
    """Two tars of the same files in another order, with other owners and times, give one diff_id; the
    driver's userspace is left out (libcudart, the CUDA runtime a wheel carries, is not the driver); set-uid
    bits go; a hard link whose name sorts first carries the data."""
    def members(order: int, uid: int, mtime: int) -> list[tuple[tarfile.TarInfo, bytes | None]]:
        ms: list[tuple[tarfile.TarInfo, bytes | None]] = [
            (_info("usr/lib/x86_64-linux-gnu/libcuda.so.595.71.05", uid=uid, mtime=mtime), b"driver"),
            (_info("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", tarfile.SYMTYPE, link="libnvidia-ml.so.595.71.05"),
             None),
            (_info("usr/bin/nvidia-smi", mode=0o755, uid=uid, mtime=mtime), b"smi"),
            (_info("opt/v/lib/libcudart.so.12", uid=uid, mtime=mtime), b"cudart"),
            (_info("usr/bin/su", mode=0o4755, uid=uid, mtime=mtime), b"su"),
            (_info("z/data", uid=uid, mtime=mtime), b"shared"),
            (_info("a/link", tarfile.LNKTYPE, link="z/data"), None),
        ]
        return ms if order == 0 else [*ms[:-2][::-1], *ms[-2:]]

    layers = []
    for i, (uid, mtime) in enumerate([(0, 10), (1000, 99999)]):
        spool = _tar(tmp_path / f"ct{i}.tar", members(i, uid, mtime))
        got = rootfs_layer.read_members(spool)
        assert sorted(got.dropped) == ["usr/bin/nvidia-smi", "usr/lib/x86_64-linux-gnu/libcuda.so.595.71.05",
                                       "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"]
        blobs = tmp_path / f"blobs{i}"
        blobs.mkdir()
        layers.append(rootfs_layer.write_layer(blobs, list(got.entries.values()), 1_700_000_000, spool=spool,
                                               dropped=got.dropped))
    assert layers[0].diff_id == layers[1].diff_id and layers[0].digest == layers[1].digest
    blob = tmp_path / "blobs0" / layers[0].digest.split(":")[1]
    with tarfile.open(blob, "r:gz") as tar:
        seen = {m.name: m for m in tar}
    assert list(seen) == sorted(seen)
    assert seen["usr/bin/su"].mode == 0o755 and seen["opt/v/lib/libcudart.so.12"].isreg()
    assert seen["a/link"].isreg() and seen["z/data"].islnk() and seen["z/data"].linkname == "a/link"
    assert {m.uid for m in seen.values()} == {0} and {m.mtime for m in seen.values()} == {1_700_000_000}


def _container(tmp_path: Path) -> ContainerTransport:
    """This machine as container 200: `pct exec 200 -- argv` runs argv here (tests/support/fake_pct.py)."""
    bin_dir = tmp_path / "node-bin"
    bin_dir.mkdir()
    (bin_dir / "pct").write_text(FAKE_PCT)
    (bin_dir / "pct").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "FAKE_PCT_LOG": str(tmp_path / "pct.log")}
    return ContainerTransport(LocalTransport(env=env), 200, login=False)


def _export(tmp_path: Path, name: str, venv: Path) -> Path:
    files = make_wheels(tmp_path / "index")
    doc = pylock.parse(lock_dict(files, "https://wheels.example"))
    out = tmp_path / name
    write.write_core(out, Export(runtime=runtime().model_copy(update={"venv": str(venv)}), host=host(), pylock=doc))
    return out


def _skopeo(ref: str) -> dict[str, object]:
    got = subprocess.run(["skopeo", "inspect", ref], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    doc: dict[str, object] = json.loads(got.stdout)
    return doc


@pytest.mark.timeout(900)
def test_image_of_a_container_is_reproducible_read_by_skopeo_and_runs_unpacked(tmp_path: Path) -> None:
    require(shutil.which("skopeo") is not None and shutil.which("umoci") is not None,
            "skopeo and umoci (Debian packages) are not installed")
    require(Path(SYSTEM_PYTHON).is_file() and shutil.which("uv") is not None, f"{SYSTEM_PYTHON} and uv")
    require(shutil.which("unshare") is not None, "unshare (util-linux) is not installed")
    venv = tmp_path / "venv"
    made = subprocess.run(["uv", "venv", "-q", "--python", SYSTEM_PYTHON, str(venv)], capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0, made.stderr
    (venv / "lib" / "python3.11" / "site-packages" / "proven.py").write_text("WHAT = 'the proven bytes'\n")
    ct = _container(tmp_path)
    first = asyncio.run(build_image(ct, _export(tmp_path, "one", venv), rootfs="runtime"))
    second = asyncio.run(build_image(ct, _export(tmp_path, "two", venv), rootfs="runtime"))
    assert first["manifest"] == second["manifest"]  # reproducible
    assert first["archive_sha256"] == second["archive_sha256"]

    layout = tmp_path / "one" / oci_image.LAYOUT
    inspected = _skopeo(f"oci:{layout}:latest")
    assert inspected["Digest"] == first["manifest"] and len(inspected["Layers"]) == 3  # type: ignore[arg-type]
    env = inspected["Env"]
    assert isinstance(env, list)
    assert "NVIDIA_VISIBLE_DEVICES=all" in env and "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in env
    assert "NVIDIA_REQUIRE_CUDA=cuda>=12.0,driver>=525.60.13" in env
    assert _skopeo(f"oci-archive:{tmp_path / 'one' / oci_image.ARCHIVE}")["Digest"] == first["manifest"]

    bundle = tmp_path / "bundle"
    unpacked = subprocess.run(["umoci", "unpack", "--rootless", "--image", f"{layout}:latest", str(bundle)],
                              capture_output=True, text=True, timeout=600)
    assert unpacked.returncode == 0, unpacked.stderr
    rootfs = bundle / "rootfs"
    assert not list(rootfs.rglob("libcuda.so*")) and not (rootfs / "usr" / "bin" / "nvidia-smi").exists()
    assert (rootfs / str(venv).lstrip("/") / "lib" / "python3.11" / "site-packages" / "proven.py").read_bytes() == \
        (venv / "lib" / "python3.11" / "site-packages" / "proven.py").read_bytes()
    # the entrypoint runs a command in the venv, in a user namespace chrooted into the unpacked rootfs
    chroot = shutil.which("chroot", path="/usr/sbin:/usr/bin:/sbin:/bin")
    assert chroot is not None
    ran = subprocess.run(["unshare", "-r", chroot, str(rootfs), f"{venv}/bin/python",
                          f"/{oci_image.PREFIX}/entrypoint.py", "python", "-c",
                          "import proven, sys; print(proven.WHAT, sys.prefix)"],
                         capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["the", "proven", "bytes", str(venv)]


def test_a_base_named_by_digest_must_match_it(tmp_path: Path) -> None:
    """A local layout named by a digest it does not hold is refused before any layer is copied."""
    layout = tmp_path / "base"
    (layout / "blobs" / "sha256").mkdir(parents=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    bogus = hashlib.sha256(b"no such manifest").hexdigest()
    blobs = tmp_path / "out" / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    with pytest.raises(ImageRefused, match="missing"):
        oci_image.named_base(f"oci:{layout}@sha256:{bogus}", blobs, "amd64", tmp_path)
    with pytest.raises(ImageRefused, match="must be `container`"):
        oci_image.named_base("ubuntu:24.04", blobs, "amd64", tmp_path)
    assert not list(blobs.iterdir())


def test_the_layers_are_compressed_off_the_callers_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wizard builds the image in its own event loop: the compression of each layer (a GB of venv) runs in
    a worker thread, so the loop goes on meanwhile. Each layer's compression here waits for a tick of the loop;
    on the loop's own thread that tick could never come."""
    import threading

    require(Path(SYSTEM_PYTHON).is_file() and shutil.which("uv") is not None, f"{SYSTEM_PYTHON} and uv")
    venv = tmp_path / "venv"
    made = subprocess.run(["uv", "venv", "-q", "--python", SYSTEM_PYTHON, str(venv)], capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0, made.stderr
    ticked = threading.Event()
    real = oci_image.layer_from_spool
    seen: list[bool] = []

    def layer_waiting_for_the_loop(*args: object, **kwargs: object) -> object:
        ticked.clear()
        seen.append(ticked.wait(timeout=60))  # set by the loop's ticker while this runs
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(oci_image, "layer_from_spool", layer_waiting_for_the_loop)

    async def main() -> dict[str, object]:
        stop = asyncio.Event()

        async def ticker() -> None:
            while not stop.is_set():
                ticked.set()
                await asyncio.sleep(0.01)

        tick = asyncio.create_task(ticker())
        try:
            return await build_image(_container(tmp_path), _export(tmp_path, "one", venv), rootfs="runtime")
        finally:
            stop.set()
            await tick

    info = asyncio.run(main())
    assert seen == [True, True], seen  # the base layer and the venv layer, each while the loop ran
    assert str(info["manifest"]).startswith("sha256:")
