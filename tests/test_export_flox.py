"""The Flox export: the manifest read by tomllib against the manifest reference, its on-activate hook run by sh
against recorded /proc/driver/nvidia/version texts, and the venv it builds from the export's wheels with the
real uv, the wheel server stopped first (nothing is fetched at activation). No flox CLI here: the hook is run
with the variables Flox sets (FLOX_ENV, FLOX_ENV_CACHE, FLOX_ENV_PROJECT) pointing at test folders.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from provisioner.export import flox, pylock, write
from tests.support.export_folder import export_folder, host, make_wheels, runtime
from tests.support.require import require
from tests.support.wheel_server import serve

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "outputs"
#: /proc/driver/nvidia/version of a 520 host, verbatim from the corpus case debian-nvml-mismatch-520-vs-525
#: (https://github.com/illinois-scicomp/machine-shop-maintenance/issues/70)
PROC_520 = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  520.56.06  Thu Oct  6 21:38:55 UTC 2022\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n")


def _wheel(name: str, version: str, tag: str = "py3-none-any") -> pylock.Wheel:
    filename = f"{name.replace('-', '_')}-{version}-{tag}.whl"
    return pylock.Wheel(name=name, version=version, url=f"https://download.example/{filename}", sha256="0" * 64,
                        size=1, filename=filename)


WHEELS = [_wheel("torch", "2.11.0+cu128", "cp312-cp312-manylinux_2_28_x86_64"), _wheel("nvidia-cublas-cu12", "12.8.4.1"),
          _wheel("triton", "3.5.0", "cp312-cp312-manylinux_2_28_x86_64"), _wheel("nvidia-ml-py", "13.595.45")]


def test_the_manifest_holds_to_the_reference_and_installs_what_manylinux_wheels_need() -> None:
    doc = tomllib.loads(flox.render(runtime(), host(), "0.13.9", WHEELS))
    assert set(doc) <= flox.TOP_LEVEL and doc["version"] == 1
    for install_id, descriptor in doc["install"].items():
        assert set(descriptor) <= flox.CATALOG_DESCRIPTOR and "pkg-path" in descriptor, install_id
    assert doc["install"]["python3"] == {"pkg-path": "python312", "version": "3.12.3"}
    assert doc["install"]["uv"] == {"pkg-path": "uv", "version": "0.13.9"}
    assert doc["install"]["gcc-unwrapped"] == {"pkg-path": "gcc-unwrapped"}  # libstdc++.so.6 (flox/flox#1774)
    assert doc["install"]["zlib"] == {"pkg-path": "zlib"}
    assert not any(d["pkg-path"].startswith("flox-cuda/") for d in doc["install"].values())
    hook = doc["hook"]["on-activate"]
    assert set(doc["hook"]) <= flox.HOOK and set(doc["options"]) <= flox.OPTIONS
    assert doc["options"] == {"systems": ["x86_64-linux"], "cuda-detection": True}
    assert "--offline --no-index --no-deps" in hook and "http" not in hook  # built from wheels/, never fetched
    for w in WHEELS:
        assert f" {w.name}=={w.version}" in hook
    assert hook.index("gp_floor=525.60.13") < hook.index("uv venv")  # the floor first
    assert doc["vars"]["GPU_PROVISIONER_TORCH_FROM"] == "proven wheels"


def test_torch_comes_from_the_flox_cuda_catalog_only_where_it_holds_the_proven_version() -> None:
    doc = tomllib.loads(flox.render(runtime(), host(), "0.13.9", WHEELS, catalog_torch="2.11.0"))
    group = {"pkg-group": "pytorch-cuda", "systems": ["x86_64-linux"]}
    assert doc["install"]["torch"] == {"pkg-path": "flox-cuda/python3Packages.torch", "version": "2.11.0", **group}
    assert doc["install"]["torchvision"] == {"pkg-path": "flox-cuda/python3Packages.torchvision",
                                             "version": "0.26.0", **group}
    assert doc["install"]["python3"] == {"pkg-path": "python3", **group}
    hook = doc["hook"]["on-activate"]
    # only what the catalog does not give is built from wheels: the NVML bindings, not torch or CUDA libraries
    assert " nvidia-ml-py==13.595.45" in hook
    assert "torch==" not in hook and "nvidia-cublas" not in hook and "triton" not in hook
    assert doc["vars"]["GPU_PROVISIONER_TORCH_FROM"] == "flox-cuda catalog"
    assert [w.name for w in flox.venv_wheels(runtime(), WHEELS, "2.11.0")] == ["nvidia-ml-py"]
    # another version in the catalog: the proven wheels
    other = tomllib.loads(flox.render(runtime(), host(), "0.13.9", WHEELS, catalog_torch="2.10.0"))
    assert "torch" not in other["install"] and " torch==2.11.0+cu128" in other["hook"]["on-activate"]
    with pytest.raises(ValueError, match="--flox-catalog-torch: not a version"):
        flox.render(runtime(), host(), "0.13.9", WHEELS, catalog_torch="latest; rm -rf /")


def _floor_only(tmp_path: Path) -> Path:
    script = tmp_path / "on-activate.sh"
    script.write_text(tomllib.loads(flox.render(runtime(), host(), "0.13.9"))["hook"]["on-activate"])
    return script


@pytest.mark.parametrize(("proc", "smi", "ok", "said"), [
    ("proc_driver_version_proprietary_550.txt", None, True, ""),
    ("proc_driver_version_open_590.txt", None, True, ""),
    ("proc_driver_version_open_aarch64_580.txt", None, True, ""),
    ("proc_driver_version_open_dkms_570.txt", None, True, ""),
    ("520", None, False, "the host NVIDIA driver 520.56.06 is below this runtime's floor 525.60.13 "
                         "(proven on 595.71.05): upgrade the host driver"),
    (None, "520.61.05\n", False, "driver 520.61.05 is below this runtime's floor 525.60.13"),
    (None, "595.71.05\n595.71.05\n", True, ""),
    (None, None, False, "no NVIDIA driver found"),
])
def test_the_hook_checks_the_driver_floor_on_activation(tmp_path: Path, proc: str | None, smi: str | None, ok: bool,
                                                        said: str) -> None:
    """The hook's floor check run by sh: /proc/driver/nvidia/version as the kernel module prints it (recorded
    fixtures), else nvidia-smi's `--query-gpu=driver_version --format=csv,noheader` (a stand-in script)."""
    version_file = tmp_path / "absent"
    if proc == "520":
        version_file.write_text(PROC_520)
    elif proc is not None:
        version_file = FIXTURES / proc
    smi_path = tmp_path / "nvidia-smi"
    if smi is not None:
        smi_path.write_text(f"#!/bin/sh\nprintf '{smi.replace(chr(10), chr(92) + 'n')}'\n")
        smi_path.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "GPU_PROVISIONER_DRIVER_VERSION_FILE": str(version_file),
           "GPU_PROVISIONER_NVIDIA_SMI": str(smi_path)}
    proc_run = subprocess.run(["sh", str(_floor_only(tmp_path))], capture_output=True, text=True, env=env, timeout=60)
    assert (proc_run.returncode == 0) is ok, proc_run.stderr
    if said:
        assert said in proc_run.stderr and proc_run.stderr.count("\n") == 1


def _activate(project: Path, env_dir: Path, cache: Path, version_file: Path) -> subprocess.CompletedProcess[str]:
    uv = shutil.which("uv")
    assert uv is not None
    hook = tomllib.loads((project / flox.MANIFEST).read_text())["hook"]["on-activate"]
    script = project.parent / "activate.sh"
    script.write_text(hook + 'echo "VIRTUAL_ENV=$VIRTUAL_ENV"\n')
    env = {"PATH": f"{Path(uv).parent}:/usr/bin:/bin", "HOME": str(project.parent), "FLOX_ENV": str(env_dir),
           "FLOX_ENV_CACHE": str(cache), "FLOX_ENV_PROJECT": str(project),
           "UV_CACHE_DIR": str(project.parent / "uv-cache"), "GPU_PROVISIONER_DRIVER_VERSION_FILE": str(version_file),
           "GPU_PROVISIONER_NVIDIA_SMI": str(project.parent / "no-nvidia-smi")}
    return subprocess.run(["sh", str(script)], capture_output=True, text=True, env=env, timeout=300)


def test_activation_builds_the_venv_from_the_exported_wheels_without_the_network(tmp_path: Path) -> None:
    require(shutil.which("uv") is not None, "uv is not installed")
    from provisioner.lab.wheels import make_wheel

    index = tmp_path / "index"
    index.mkdir()
    # wheels this interpreter installs (the proven torch wheel is cp312; the hook is what is under test)
    files = [make_wheel(index, "torch", "2.11.0+cu128", "py3-none-any",
                        {"torch/__init__.py": b"__version__ = '2.11.0+cu128'\n"}),
             make_wheel(index, "nvidia-ml-py", "13.595.45", "py3-none-any", {"pynvml.py": b"# stand-in\n"})]
    with serve(index) as url:
        folder, wheels = export_folder(tmp_path, files, url)
        written = write.render(folder, "flox", uv_version="0.13.9", cache=tmp_path / "cache")
    assert sorted(written) == [flox.MANIFEST, "wheels/"]
    assert (folder / flox.SUMS).read_text() == flox.sums(wheels)
    shutil.rmtree(index)  # the server is gone and so are its files: activation has only the export folder

    env_dir = tmp_path / "flox-env"
    (env_dir / "bin").mkdir(parents=True)
    (env_dir / "bin" / "python3").symlink_to(sys.executable)  # the environment's python3 ($FLOX_ENV/bin)
    cache = tmp_path / "flox-cache"
    cache.mkdir()
    low = tmp_path / "version-520"
    low.write_text(PROC_520)
    refused = _activate(folder, env_dir, cache, low)
    assert refused.returncode == 1 and "below this runtime's floor 525.60.13" in refused.stderr
    assert not (cache / "torch-runtime").exists()  # refused before anything was built

    good = FIXTURES / "proc_driver_version_open_590.txt"
    first = _activate(folder, env_dir, cache, good)
    assert first.returncode == 0, first.stderr
    venv = cache / "torch-runtime"
    assert f"VIRTUAL_ENV={venv}" in first.stdout
    got = subprocess.run([str(venv / "bin" / "python"), "-c", "import torch, pynvml; print(torch.__version__)"],
                         capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert got.stdout.strip() == "2.11.0+cu128", got.stderr
    # a second activation keeps the venv (idempotent: the stamp equals wheels/SHA256SUMS)
    (venv / "kept").write_text("")
    again = _activate(folder, env_dir, cache, good)
    assert again.returncode == 0 and (venv / "kept").exists(), again.stderr

    # a wheel changed in the folder, on a machine whose venv is not built from this folder yet: refused by its
    # sha256, nothing installed from it
    torch_wheel = folder / "wheels" / wheels[[w.name for w in wheels].index("torch")].filename
    torch_wheel.write_bytes(torch_wheel.read_bytes() + b"x")
    (venv / ".gpu-provisioner-SHA256SUMS").unlink()
    tampered = _activate(folder, env_dir, cache, good)
    assert tampered.returncode == 1 and "does not match wheels/SHA256SUMS" in tampered.stderr
    assert (venv / "kept").exists()  # the checked venv was not touched before the check


def test_a_planted_link_for_the_wheels_folder_is_refused(tmp_path: Path) -> None:
    folder, _ = export_folder(tmp_path, make_wheels(tmp_path / "index"), "https://wheels.example")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (folder / "wheels").symlink_to(elsewhere)
    with pytest.raises(write.ExportInvalid, match="wheels is a symbolic link"):
        write.copy_wheels(folder, [], tmp_path / "cache")
    assert not os.listdir(elsewhere)
