"""The exported OCI archive as a PVE 9.1 container template, in the lab's API (provisioner.lab.oci_template).

The archive is the engine's own `image.oci.tar` (provisioner.export.image_collect.build_image of a real venv,
as tests/test_oci_image.py makes it); a PVE 9.1 node lists it in vztmpl storage and `POST /nodes/{node}/lxc`
squashes its layers into the rootfs and writes the config lines pve-container's Create.pm
``restore_oci_archive`` writes; a PVE 8 node knows no ``vztmpl/<x>.tar`` volume (pve-storage before 0d392b2).
Hand-made archives check whiteouts and the refusal of hostile members.
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
from typing import Any

import pytest

from provisioner.export import oci_image, pylock, write
from provisioner.export.collect import Export
from provisioner.export.image_collect import build_image
from provisioner.lab import oci_template
from provisioner.lab.pve_api import CLI_IDENTITY, LabApi
from provisioner.lab.state import LabState
from provisioner.proxmox.lxc_conf import parse_property_string
from provisioner.transport.container import ContainerTransport
from provisioner.transport.local import LocalTransport
from tests.support.export_folder import host, lock_dict, make_wheels, runtime
from tests.support.fake_pct import FAKE_PCT
from tests.support.require import require

SYSTEM_PYTHON = "/usr/bin/python3.11"
NET0 = "name=eth0,bridge=vmbr0,ip=dhcp,type=veth"


def _real_archive(tmp_path: Path) -> tuple[Path, Path]:
    """The engine's image.oci.tar of a real venv (this machine as container 200 through tests/support/fake_pct)."""
    require(Path(SYSTEM_PYTHON).is_file() and shutil.which("uv") is not None, f"{SYSTEM_PYTHON} and uv")
    venv = tmp_path / "venv"
    made = subprocess.run(["uv", "venv", "-q", "--python", SYSTEM_PYTHON, str(venv)], capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0, made.stderr
    (venv / "lib" / "python3.11" / "site-packages" / "proven.py").write_text("WHAT = 'the proven bytes'\n")
    bin_dir = tmp_path / "node-bin"
    bin_dir.mkdir()
    (bin_dir / "pct").write_text(FAKE_PCT)
    (bin_dir / "pct").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "FAKE_PCT_LOG": str(tmp_path / "pct.log")}
    ct = ContainerTransport(LocalTransport(env=env), 200, login=False)
    out = tmp_path / "export"
    doc = pylock.parse(lock_dict(make_wheels(tmp_path / "index"), "https://wheels.example"))
    write.write_core(out, Export(runtime=runtime().model_copy(update={"venv": str(venv)}), host=host(), pylock=doc))
    asyncio.run(build_image(ct, out, rootfs="runtime"))
    return out / oci_image.ARCHIVE, venv


def _lab(tmp_path: Path, pve: str) -> tuple[LabState, LabApi]:
    state = LabState.create(tmp_path / f"lab-{pve}", pve_version=pve)
    return state, LabApi(state, sync_tasks=True)


def _put_template(state: LabState, archive: Path, name: str) -> None:
    dest = oci_template.node_template_path(state.root, "/var/lib/vz", name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(archive, dest)


def _create(api: LabApi, state: LabState, vmid: int, template: str) -> Any:
    node = state.settings().node
    return api.call("POST", f"/nodes/{node}/lxc", {"vmid": vmid, "ostemplate": template, "rootfs": "local-lvm:8",
                                                   "net0": NET0, "unprivileged": 1}, CLI_IDENTITY)


def _task(api: LabApi, state: LabState, upid: str) -> tuple[dict[str, Any], list[str]]:
    api.join_tasks(timeout=120)
    node = state.settings().node
    status = api.call("GET", f"/nodes/{node}/tasks/{upid}/status", {}, CLI_IDENTITY).data
    log = api.call("GET", f"/nodes/{node}/tasks/{upid}/log", {"limit": 0}, CLI_IDENTITY).data
    return status, [row["t"] for row in log]


@pytest.mark.timeout(600)
def test_pve91_creates_a_container_from_the_exported_image(tmp_path: Path) -> None:
    archive, venv = _real_archive(tmp_path)
    state, api = _lab(tmp_path, "9")
    _put_template(state, archive, "gpu-runtime.tar")
    node = state.settings().node
    listed = api.call("GET", f"/nodes/{node}/storage/local/content", {"content": "vztmpl"}, CLI_IDENTITY)
    assert listed.status == 200, listed
    entry = next(e for e in listed.data if e["volid"] == "local:vztmpl/gpu-runtime.tar")
    assert entry["format"] == "tar" and entry["size"] == archive.stat().st_size

    made = _create(api, state, 301, "local:vztmpl/gpu-runtime.tar")
    assert made.status == 200, made
    status, log = _task(api, state, made.data)
    assert status["exitstatus"] == "OK", log
    assert "Detected OCI archive" in log
    proven = venv / "lib" / "python3.11" / "site-packages" / "proven.py"
    in_ct = state.ct_root(301) / str(proven).lstrip("/")
    assert in_ct.read_bytes() == proven.read_bytes()  # the image's venv layer, squashed into the rootfs
    assert not list(state.ct_root(301).rglob("libcuda.so*"))
    conf = state.read_conf(301)
    info = json.loads((archive.parent / "image.json").read_text())
    image_cfg = _image_config(archive)
    assert conf.get("cmode") == "console"
    assert conf.get("entrypoint") == " ".join(image_cfg["Entrypoint"] + image_cfg.get("Cmd", []))
    assert parse_property_string(conf.get("net0") or "", "name").get("host-managed") == "1"
    env = [v for _, v in conf.raw_lines("lxc.environment.runtime")]
    assert env == image_cfg["Env"] and "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in env
    assert ("lxc.signal.halt", "SIGTERM") in conf.raw_lines("lxc.signal.halt")
    assert info["manifest"].startswith("sha256:")


def _image_config(archive: Path) -> dict[str, Any]:
    with tarfile.open(archive) as tar:
        def blob(digest: str) -> dict[str, Any]:
            fh = tar.extractfile(f"blobs/sha256/{digest.split(':')[1]}")
            assert fh is not None
            doc: dict[str, Any] = json.loads(fh.read())
            return doc
        fh = tar.extractfile("index.json")
        assert fh is not None
        manifest = blob(json.loads(fh.read())["manifests"][0]["digest"])
        cfg: dict[str, Any] = blob(manifest["config"]["digest"])["config"]
        return cfg


def test_pve8_knows_no_oci_template_and_creates_nothing(tmp_path: Path) -> None:
    state, api = _lab(tmp_path, "8.4")
    archive = _hand_archive(tmp_path, [[("etc/hostname", b"x\n")]])
    _put_template(state, archive, "gpu-runtime.tar")
    made = _create(api, state, 301, "local:vztmpl/gpu-runtime.tar")
    assert made.status == 500 and made.message == "unable to parse directory volume name 'vztmpl/gpu-runtime.tar'\n"
    assert not state.has_ct(301)


# -- hand-made archives ---------------------------------------------------------------------------------------

Member = tuple[str, bytes | None] | tarfile.TarInfo


def _layer(members: list[Member]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tar.addfile(m)
                continue
            name, data = m
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _hand_archive(tmp_path: Path, layers: list[list[Member]], config: dict[str, Any] | None = None) -> Path:
    blobs: dict[str, bytes] = {}

    def add(data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return digest

    descs = [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": add(d), "size": len(d)}
             for d in (_layer(m) for m in layers)]
    cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": config or {}}).encode()
    manifest = json.dumps({"schemaVersion": 2, "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                                          "digest": add(cfg), "size": len(cfg)},
                           "layers": descs}).encode()
    mdigest = add(manifest)
    index = json.dumps({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                                                           "digest": mdigest, "size": len(manifest)}]}).encode()
    path = tmp_path / "hand.tar"
    with tarfile.open(path, "w") as tar:
        for name, data in [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index),
                           *((f"blobs/sha256/{d.split(':')[1]}", b) for d, b in blobs.items())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_layers_squash_with_whiteouts_in_order(tmp_path: Path) -> None:
    archive = _hand_archive(tmp_path, [
        [("etc", None), ("etc/keep", b"1"), ("etc/gone", b"2"), ("var", None), ("var/cache", None),
         ("var/cache/old", b"3")],
        [("etc/.wh.gone", b""), ("var/cache/new", b"4"), ("var/cache/.wh..wh..opq", b""), ("etc/keep", b"5")],
    ], config={"Entrypoint": ["/sbin/init"], "Env": ["A=b c"], "WorkingDir": "/srv", "User": "0:0"})
    assert oci_template.archive_is_oci_format(archive)
    root = tmp_path / "ct" / "rootfs"
    root.mkdir(parents=True)
    got = oci_template.restore_oci_archive(archive, tmp_path, root, nets={"net0": NET0})
    assert (root / "etc" / "keep").read_bytes() == b"5" and not (root / "etc" / "gone").exists()
    assert sorted(p.name for p in (root / "var" / "cache").iterdir()) == ["new"]
    assert got.options == {}  # /sbin/init: a system container, no entrypoint, no cmode, net untouched
    assert got.env == ["A=b c"]
    assert ("lxc.init.cwd", "/srv") in got.lxc and ("lxc.init.uid", "0") in got.lxc


def test_whiteouts_hide_only_the_lower_layers_wherever_they_stand_in_the_tar(tmp_path: Path) -> None:
    """One pass over each layer (image-spec layer.md: whiteouts apply to the lower layers only): an opaque
    directory keeps what this layer wrote into it before the marker, also below a subdirectory of it, and hides
    every lower entry there; a whiteout after this layer's own file of that name leaves the file."""
    archive = _hand_archive(tmp_path, [
        [("var", None), ("var/lib", None), ("var/lib/a", None), ("var/lib/a/old", b"1"), ("var/lib/b", b"2"),
         ("etc", None), ("etc/x", b"3")],
        [("var/lib/a", None), ("var/lib/a/mine", b"4"), ("var/lib/.wh..wh..opq", b""), ("etc/x", b"5"),
         ("etc/.wh.x", b""), ("var/lib/c", b"6")],
    ])
    root = tmp_path / "ct" / "rootfs"
    root.mkdir(parents=True)
    oci_template.restore_oci_archive(archive, tmp_path, root)
    assert sorted(p.name for p in (root / "var" / "lib").iterdir()) == ["a", "c"]
    assert sorted(p.name for p in (root / "var" / "lib" / "a").iterdir()) == ["mine"]
    assert (root / "etc" / "x").read_bytes() == b"5"
    # `.wh.` alone names no entry: refused (taken as the whiteout of its directory, it removed /etc)
    (tmp_path / "n").mkdir()
    nothing = _hand_archive(tmp_path / "n", [[("etc", None), ("etc/.wh.", b"")]])
    with pytest.raises(oci_template.LayerRefused, match="a whiteout of nothing"):
        oci_template.restore_oci_archive(nothing, tmp_path, root)
    assert (root / "etc" / "x").read_bytes() == b"5"


def _sym(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info


@pytest.mark.parametrize(("members", "config", "names"), [
    ([("../escape", b"x")], None, "../escape"),
    ([("/etc/abs", b"x")], None, "/etc/abs"),
    ([_sym("etc", "/tmp"), ("etc/passwd", b"x")], None, "etc"),
    ([("a", b"x")], {"Entrypoint": ["/bin/sh", "-c", "x\ny"]}, "Entrypoint"),
    ([("a", b"x")], {"Env": ["A=1\x1b"]}, "Env"),
])
def test_hostile_archives_are_refused_and_write_nothing_outside(tmp_path: Path, members: list[Member],
                                                                 config: dict[str, Any] | None, names: str) -> None:
    archive = _hand_archive(tmp_path, [members], config=config)
    root = tmp_path / "lab" / "ct" / "rootfs"
    root.mkdir(parents=True)
    with pytest.raises((oci_template.OciRefused, oci_template.LayerRefused, OSError)) as exc:
        oci_template.restore_oci_archive(archive, tmp_path / "lab", root)
    assert names in str(exc.value) or isinstance(exc.value, OSError)
    assert not (tmp_path / "lab" / "ct" / "escape").exists() and not (tmp_path / "escape").exists()
    assert not Path("/tmp/passwd").exists() or Path("/tmp/passwd").read_bytes() != b"x"


def test_a_blob_that_does_not_match_its_digest_is_refused(tmp_path: Path) -> None:
    archive = _hand_archive(tmp_path, [[("a", b"the real bytes")]])
    raw = archive.read_bytes().replace(b"the real bytes", b"the fake bytes")
    archive.write_bytes(raw)
    root = tmp_path / "lab" / "rootfs"
    root.mkdir(parents=True)
    with pytest.raises(oci_template.OciRefused, match="does not match its digest"):
        oci_template.restore_oci_archive(archive, tmp_path / "lab", root)
    assert not (root / "a").exists()


def test_import_image_derives_the_template_playbook_and_pve8_gets_the_fallback(tmp_path: Path) -> None:
    from provisioner.export import image_import
    from provisioner.playbook import load

    book = load(str(Path(__file__).resolve().parent.parent / "playbooks" / "blackwell-8gpu-lxc.yaml"))
    folder = tmp_path / "export"
    folder.mkdir()
    derived = image_import.derive_image(book, folder, "/opt/torch-venv", "P.yaml")
    kinds = [s.kind for s in derived.steps]
    assert "venv.build" not in kinds and "torch.resolve" not in kinds and "export.install" not in kinds
    assert kinds.index("export.template") == kinds.index("lxc.create") - 1
    assert kinds.index("export.preflight") == kinds.index("node.inventory") + 1
    create = next(s for s in derived.steps if s.kind == "lxc.create")
    assert create.params["template"] == "local:vztmpl/gpu-runtime.tar"
    assert derived.steps[-1].kind == "burnin.run" and derived.steps[-1].params["venv"] == "/opt/torch-venv"
    assert not image_import.supports_oci((8, 4)) and not image_import.supports_oci((9, 0))
    assert image_import.supports_oci((9, 1))
    line = image_import.refusal("8.4", "out", "P.yaml")
    assert "\n" not in line and line.endswith("import the pylock instead: provisioner import out --playbook P.yaml")
