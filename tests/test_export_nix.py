"""The Nix export: the flake evaluated by the real nix-instantiate against a stub nixpkgs that records its calls
(`tests.support.nix_stub`), and the names it fetches handed to the real uv.

Acceptance (#33): one fixed-output fetch per wheel, named by the wheel's real file name, with its sha256; uv
accepts every such name (and refuses the `/nix/store/<hash>-<wheel>` name the old flake handed it). Without
nix-instantiate (Debian nix-bin) or uv the tests skip; under CI=true that skip fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import parse_wheel_filename

from provisioner.export import nix, pylock, write
from provisioner.export.models import RuntimeProof
from tests.support import nix_stub
from tests.support.export_folder import export_folder, host, make_wheels, runtime
from tests.support.require import require

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "outputs"
STUB_STORE = "/nix/store/00000000000000000000000000000000-"


def _require_nix() -> None:
    require(nix_stub.nix_instantiate() is not None, "nix-instantiate (Debian nix-bin) is not installed")


def _evaluated(tmp_path: Path) -> tuple[Path, list[pylock.Wheel], dict[str, Any]]:
    _require_nix()
    folder, wheels = export_folder(tmp_path, make_wheels(tmp_path / "index"), "https://wheels.example")
    written = write.render(folder, "nix", uv_version="0.13.9")
    assert list(written) == [nix.LOCK, nix.FLAKE]  # the flake last, as `export --json` lists it
    return folder, wheels, nix_stub.evaluate(folder / nix.FLAKE, tmp_path / "eval")


def _unique(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records of the same call reached twice by the probe's walk (a derivation used by two outputs) once."""
    seen: dict[str, dict[str, Any]] = {}
    for c in calls:
        seen.setdefault(json.dumps(c, sort_keys=True), c)
    return list(seen.values())


def _venv(result: dict[str, Any]) -> dict[str, Any]:
    [venv] = [d for d in _unique(nix_stub.calls_of(result, "mkDerivation")) if d["pname"] == "torch-runtime-venv"]
    return venv


def _install_args(venv: dict[str, Any]) -> list[str]:
    """The `uv pip install` command line of the venv's installPhase, split as the shell splits it."""
    phase = venv["installPhase"].replace("\\\n", " ")
    [line] = [ln for ln in phase.splitlines() if ln.strip().startswith("uv pip install")]
    return shlex.split(line)


def test_one_fetch_per_wheel_named_by_its_real_file_name_with_its_sha256(tmp_path: Path) -> None:
    folder, wheels, result = _evaluated(tmp_path)
    fetches = _unique(nix_stub.calls_of(result, "fetchurl"))
    assert sorted(fetches, key=lambda f: f["name"]) == sorted(
        ({"name": w.filename, "url": w.url, "sha256": w.sha256} for w in wheels), key=lambda f: f["name"])
    assert "torch-2.11.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl" in {f["name"] for f in fetches}
    # the wheels gathered under those names, and uv given that folder, never a store path per wheel
    [farm] = _unique(nix_stub.calls_of(result, "linkFarm"))
    assert sorted(e["name"] for e in farm["entries"]) == sorted(w.filename for w in wheels)
    assert all(e["path"] == STUB_STORE + e["name"] for e in farm["entries"])
    args = _install_args(_venv(result))
    assert args[args.index("--find-links") + 1] == STUB_STORE + "proven-wheels"
    assert {"--offline", "--no-index", "--no-deps"} <= set(args)
    assert not [a for a in args if a.endswith(".whl")]
    assert sorted(args[args.index("--find-links") + 2:]) == sorted(f"{w.name}=={w.version}" for w in wheels)
    # nixpkgs pinned: the flake's input and flake.lock name the same rev, the lock its narHash
    assert result["nixpkgs"] == f"github:NixOS/nixpkgs/{nix.NIXPKGS_REV}"
    lock = json.loads((folder / nix.LOCK).read_text())
    locked = lock["nodes"]["nixpkgs"]["locked"]
    assert locked["rev"] == nix.NIXPKGS_REV and locked["narHash"] == nix.NIXPKGS_NAR_HASH
    assert lock["nodes"]["nixpkgs"]["original"]["rev"] == nix.NIXPKGS_REV and lock["version"] == 7
    assert lock["nodes"]["root"]["inputs"] == {"nixpkgs": "nixpkgs"}


def test_the_venv_is_a_derivation_patched_as_nixpkgs_patches_torch_bin(tmp_path: Path) -> None:
    """pkgs/development/python-modules/torch/bin/default.nix: autoPatchelfHook and autoAddDriverRunpath,
    libcuda.so.1 left to the host, torch/lib on the search path, not stripped."""
    _, _, result = _evaluated(tmp_path)
    venv = _venv(result)
    assert STUB_STORE + "auto-patchelf-hook" in venv["nativeBuildInputs"]
    assert STUB_STORE + "auto-add-driver-runpath-hook" in venv["nativeBuildInputs"]
    assert venv["autoPatchelfIgnoreMissingDeps"] == ["libcuda.so.1"] and venv["dontStrip"] is True
    assert sorted(venv["buildInputs"]) == [STUB_STORE + "gcc-lib", STUB_STORE + "zlib"]
    assert 'addAutoPatchelfSearchPath "$out/lib/python3.12/site-packages/torch/lib"' in venv["postFixup"]
    assert venv["version"] == "2.11.0+cu128"
    assert f"uv venv --python {STUB_STORE}python3-3.12/bin/python3" in venv["installPhase"]
    assert sorted(result["outputs"]["packages"]["x86_64-linux"]) == ["default", "venv", "wheels"]
    assert result["app"]["x86_64-linux"]["default"]["program"] == STUB_STORE + "torch-runtime/bin/torch-runtime"
    # no driver in the closure: nothing of nvidia-x11 / linuxPackages is asked of nixpkgs
    assert not [c for c in result["calls"] if "nvidia" in c["fn"]]


def test_uv_accepts_every_fetched_name_and_refuses_a_store_path_name(tmp_path: Path) -> None:
    _, wheels, result = _evaluated(tmp_path)
    uv = shutil.which("uv")
    require(uv is not None, "uv is not installed")
    assert uv is not None
    by_sha = {hashlib.sha256(p.read_bytes()).hexdigest(): p for p in (tmp_path / "index").iterdir()}
    named = tmp_path / "named"
    named.mkdir()
    for f in _unique(nix_stub.calls_of(result, "fetchurl")):
        parse_wheel_filename(f["name"])  # packaging reads it as a wheel name
        shutil.copyfile(by_sha[f["sha256"]], named / f["name"])  # the bytes the fetch checks, under its name
    args = _install_args(_venv(result))
    reqs = args[args.index("--find-links") + 2:]
    env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache"), "UV_NO_CONFIG": "1"}
    target = ["--python-version", "3.12", "--python-platform", "x86_64-manylinux_2_28", "--target",
              str(tmp_path / "target")]
    ok = subprocess.run([uv, "pip", "install", "--dry-run", "--offline", "--no-index", "--no-deps", "--find-links",
                         str(named), *target, *reqs], capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    for w in wheels:
        assert f"+ {w.name}=={w.version}" in ok.stderr, ok.stderr
    # the old flake's shape: a wheel under its store path's name is refused by uv
    torch = next(f for f in _unique(nix_stub.calls_of(result, "fetchurl")) if f["name"].startswith("torch-"))
    store_named = tmp_path / ("0123456789abcdfghijklmnpqrsvwxyz-" + torch["name"])
    shutil.copyfile(named / torch["name"], store_named)
    bad = subprocess.run([uv, "pip", "install", "--dry-run", "--offline", "--no-index", "--no-deps", *target,
                          str(store_named)], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode != 0 and "invalid version" in bad.stderr, bad.stderr


def _wrapper(result: dict[str, Any]) -> str:
    [script] = _unique(nix_stub.calls_of(result, "writeShellScriptBin"))
    assert script["name"] == "torch-runtime"
    text: str = script["text"]
    return text


def _fake_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "fake-venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text('#!/bin/sh\necho "ran: $* LD_LIBRARY_PATH=$LD_LIBRARY_PATH"\n')
    python.chmod(0o755)
    return venv


def test_the_wrapper_checks_the_driver_floor_then_runs_the_venv_python(tmp_path: Path) -> None:
    """The flake's torch-runtime script, run by sh against recorded /proc/driver/nvidia/version texts
    (tests/fixtures/outputs; the 520 one from the corpus case debian-nvml-mismatch-520-vs-525)."""
    _, _, result = _evaluated(tmp_path)
    script = tmp_path / "torch-runtime"
    script.write_text(_wrapper(result).replace(STUB_STORE + "torch-runtime-venv-2.11.0+cu128",
                                               str(_fake_venv(tmp_path))))
    low = tmp_path / "version-520"
    low.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  520.56.06  Thu Oct  6 21:38:55 UTC 2022\n"
                   "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n")

    def run(version_file: Path, **extra: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": "/usr/bin:/bin", "GPU_PROVISIONER_DRIVER_VERSION_FILE": str(version_file),
               "GPU_PROVISIONER_NVIDIA_SMI": str(tmp_path / "no-nvidia-smi"), **extra}
        return subprocess.run(["sh", str(script), "-c", "pass"], capture_output=True, text=True, env=env, timeout=60)

    refused = run(low)
    assert refused.returncode == 1 and "ran:" not in refused.stdout
    assert "driver 520.56.06 is below this runtime's floor 525.60.13" in refused.stderr
    ran = run(FIXTURES / "proc_driver_version_open_590.txt", GPU_PROVISIONER_DRIVER_LIBS="/host/driver/libs")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "ran: -c pass LD_LIBRARY_PATH=/host/driver/libs"
    plain = run(FIXTURES / "proc_driver_version_proprietary_550.txt")
    assert plain.returncode == 0 and plain.stdout.startswith("ran: -c pass")
    if not Path("/run/opengl-driver/lib").is_dir():  # not NixOS: the way to the host's libcuda is named
        assert "GPU_PROVISIONER_DRIVER_LIBS" in plain.stderr and "nixGL" in plain.stderr
    absent = run(tmp_path / "no-such-file")
    assert absent.returncode == 1 and "no NVIDIA driver found" in absent.stderr


def test_a_hostile_torch_string_stays_one_nix_string(tmp_path: Path) -> None:
    """Past the models' rules: the evaluated description is the string itself, the store name keeps only
    what a store name holds, and it reaches no shell text of the flake."""
    _require_nix()
    hostile = 'a"b\\c${x}$(touch /tmp/pwned)\n\'\'${y}'
    rt = RuntimeProof.model_construct(**{**runtime().__dict__, "torch": hostile})
    _, wheels = export_folder(tmp_path, make_wheels(tmp_path / "index"), "https://wheels.example")
    flake = tmp_path / "flake.nix"
    flake.write_text(nix.render(rt, host(), wheels))
    result = nix_stub.evaluate(flake, tmp_path / "eval")
    venv = _venv(result)
    assert result["description"] == f"PyTorch {hostile} runtime proven by gpu-provisioner"
    assert venv["version"] == nix.store_version(hostile) and "$" not in venv["version"] and "\n" not in venv["version"]
    assert "$(touch" not in venv["installPhase"] and "$(touch" not in _wrapper(result)


def test_names_and_pins_nix_cannot_hold_are_refused() -> None:
    epoch = pylock.Wheel(name="torch", version="1!2.0", url="https://x.example/torch-1%212.0-py3-none-any.whl",
                         sha256="0" * 64, size=1, filename="torch-1!2.0-py3-none-any.whl")
    with pytest.raises(ValueError, match=r"wheel 0 'torch-1!2.0-py3-none-any.whl': not a Nix store name"):
        nix.render(runtime(), host(), [epoch])
    with pytest.raises(ValueError, match="not a nixpkgs commit"):
        nix.render(runtime(), host(), [], "main")
    other = "b2a3852bd078e68dd2b3dfa8c00c67af1f0a7d20"
    with pytest.raises(ValueError, match=r"needs its narHash \(--nixpkgs-narhash"):
        nix.lock(other)
    with pytest.raises(ValueError, match="not a narHash"):
        nix.lock(other, "sha256-short")
    locked = json.loads(nix.lock(other, "sha256-afXE7AJ7MY6wY1pg/Y6UPHNYPy5GtUKeBkrZZ/gC71E="))["nodes"]["nixpkgs"]
    assert locked["locked"]["rev"] == other and "lastModified" not in locked["locked"]
