"""provisioner export: the proof models, pylock.toml, the Flox/Nix/OCI renderings, the burn-in refusal.

The Nix tests hand the rendering to the real tools (nix-instantiate: a Debian package that .ci/run installs);
without it they skip, and under CI=true that skip fails. The OCI image is tests/test_oci_image.py (skopeo,
umoci) and tests/test_export_offer.py (the wizard's and the CLI's one engine path).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from provisioner.events import RunStarted, StepFinished
from provisioner.export import flox, nix, pylock, write
from provisioner.export.collect import glibc_floor
from provisioner.export.models import floor_problem
from provisioner.export.source import ExportRefused, find_proof, read_run, require_proven
from provisioner.runlog import JsonlRunLog
from tests.support.export_folder import PLAYBOOK, export_folder, host, make_wheels, runtime
from tests.support.require import require

REPO = Path(__file__).resolve().parents[1]
_runtime, _host = runtime, host




# --- the models and pylock.toml --------------------------------------------------------------------

def test_export_folder_round_trips_through_the_models(tmp_path: Path) -> None:
    folder, wheels = export_folder(tmp_path, make_wheels(tmp_path / "index"), "https://wheels.example")
    runtime, host, back = write.read_export(folder)
    assert runtime == _runtime() and host == _host() and back == wheels
    assert [w.filename for w in wheels] == sorted(p.name for p in (tmp_path / "index").iterdir())
    doc = tomllib.loads((folder / "pylock.toml").read_text())
    assert doc["lock-version"] == "1.0" and doc["tool"]["gpu-provisioner"]["torch-variant"] == "cu128"
    assert all(set(w) >= {"url", "hashes", "size"} for p in doc["packages"] for w in p["wheels"])
    no_size = pylock.parse({"lock-version": "1.0", "created-by": "t", "packages": [
        {"name": "torch", "version": "1", "wheels": [{"url": "https://x/torch-1-py3-none-any.whl",
                                                     "hashes": {"sha256": "0" * 64}}]}]})
    with pytest.raises(pylock.PylockError, match=r"wheels\[0\]\.size: a wheel without a size"):
        pylock.wheels(no_size)


def test_merge_keeps_the_torch_index_entry_and_every_nvidia_wheel() -> None:
    """uv's pylock for each lock group (the shape `uv pip compile --format pylock.toml` 0.13.9 writes: one wheel
    per package, no size for a PEP 503 HTML index; the hashes here are placeholders)."""
    torch_group = """lock-version = "1.0"
created-by = "uv"
requires-python = ">=3.12.1"

[[packages]]
name = "torch"
version = "2.11.0+cu128"
wheels = [{ url = "https://download.pytorch.org/whl/cu128/torch-2.11.0%2Bcu128-cp312-cp312-manylinux_2_28_x86_64.whl", hashes = { sha256 = "SHA_TORCH" } }]

[[packages]]
name = "nvidia-nccl-cu12"
version = "2.27.3"
wheels = [{ url = "https://download.pytorch.org/whl/nvidia_nccl_cu12-2.27.3-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", hashes = { sha256 = "SHA_NCCL" } }]
"""
    extra_group = torch_group.replace("download.pytorch.org/whl/cu128/torch", "pypi.example/torch") + """
[[packages]]
name = "nvidia-ml-py"
version = "13.595.45"
wheels = [{ url = "https://files.pythonhosted.org/nvidia_ml_py-13.595.45-py3-none-any.whl", hashes = { sha256 = "SHA_NVML" }, size = 52411 }]
"""
    for name in ("TORCH", "NCCL", "NVML"):
        torch_group = torch_group.replace(f"SHA_{name}", hashlib.sha256(name.encode()).hexdigest())
        extra_group = extra_group.replace(f"SHA_{name}", hashlib.sha256(name.encode()).hexdigest())
    groups = {"torch": {"index_url": "https://download.pytorch.org/whl/cu128", "extra_index_url": None},
              "extra": {"index_url": "https://pypi.org/simple", "extra_index_url": "https://download.pytorch.org/whl/cu128"}}
    doc = pylock.merge({"torch": torch_group, "extra": extra_group}, groups, variant="cu128",
                       torch_index=groups["torch"]["index_url"], python="3.12")
    by_name = {p.name: p for p in doc.packages}
    assert sorted(by_name) == ["nvidia-ml-py", "nvidia-nccl-cu12", "torch"]
    assert by_name["torch"].index == "https://download.pytorch.org/whl/cu128"
    assert "download.pytorch.org" in str(by_name["torch"].wheels[0].url)
    assert by_name["nvidia-ml-py"].index == "https://pypi.org/simple"
    torch_url, nccl_url = str(by_name["torch"].wheels[0].url), str(by_name["nvidia-nccl-cu12"].wheels[0].url)
    assert sorted(pylock.missing_sizes(doc)) == sorted([torch_url, nccl_url])
    doc = pylock.set_sizes(doc, {torch_url: 7, nccl_url: 9})
    again = pylock.load(pylock.dumps(doc))
    assert again == doc
    assert pylock.tool(doc)["indexes"] == ["https://download.pytorch.org/whl/cu128", "https://pypi.org/simple"]
    assert doc.created_by == "gpu-provisioner" and str(doc.requires_python) == "==3.12.*"
    assert [str(m) for m in doc.environments or []] == [
        'sys_platform == "linux" and platform_machine == "x86_64" and python_version == "3.12"']
    assert glibc_floor("2.28", pylock.wheels(doc)) == "2.28"


def test_driver_floor() -> None:
    assert floor_problem("595.71.05", _host()) is None
    problem = floor_problem("520.61.05", _host())
    assert problem is not None and "below the export's floor 525.60.13" in problem


# --- the burn-in refusal -----------------------------------------------------------------------------

def _run_log(runs: Path, playbook: str, burnin: str) -> Path:
    log = JsonlRunLog("20261203T090000-abcdef", runs)
    log(RunStarted(host="", run_id="20261203T090000-abcdef", playbook=playbook, mode="apply", hosts=["pve1:22"]))
    log(StepFinished(host="pve1:22", index=9, step="venv.build", status="changed",
                     resolved={"venv_lock": {"groups": {"torch": {"text": "torch==2.11.0"}}},
                               "runtime": {"torch": "2.11.0+cu128", "cuda": "12.8"}}))
    resolved = {"burnin": {"verdict": "pass", "summary": "pass"}} if burnin == "ok" else {}
    log(StepFinished(host="pve1:22", index=10, step="burnin.run", status=burnin, resolved=resolved,
                     message="burn-in failed: all_reduce busbw 3.1 GB/s < 30" if burnin == "failed" else ""))
    log.close()
    return log.path


def test_a_run_without_a_passing_burnin_is_refused(tmp_path: Path) -> None:
    failed = read_run(_run_log(tmp_path / "a", str(PLAYBOOK), "failed")) if (tmp_path / "a").mkdir() is None else None
    assert failed is not None
    with pytest.raises(ExportRefused, match=r"burn-in failed .*all_reduce busbw"):
        require_proven(failed)
    passed = read_run(_run_log(tmp_path / "b", str(PLAYBOOK), "ok")) if (tmp_path / "b").mkdir() is None else None
    assert passed is not None
    require_proven(passed)


def test_export_cli_refuses_without_passing_burnin(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "runs").mkdir(parents=True)
    _run_log(state / "runs", str(PLAYBOOK.resolve()), "failed")
    env = {"PROVISIONER_STATE_DIR": str(state), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "provisioner", "export", str(PLAYBOOK), "--format", "pylock",
                           "-o", str(tmp_path / "out")], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "export refused" in proc.stderr and "the burn-in failed" in proc.stderr
    assert not (tmp_path / "out").exists()
    proof = find_proof(str(PLAYBOOK), __import__("provisioner.playbook", fromlist=["load"]).load(PLAYBOOK),
                       state / "runs")
    assert proof.burnin_status == "failed"


# --- Flox --------------------------------------------------------------------------------------------

def test_flox_manifest_holds_to_the_reference_fields() -> None:
    text = flox.render(_runtime(), _host(), "0.13.9")
    doc = tomllib.loads(text)
    assert set(doc) <= flox.TOP_LEVEL and doc["version"] == 1
    for install_id, descriptor in doc["install"].items():
        assert set(descriptor) <= flox.CATALOG_DESCRIPTOR and "pkg-path" in descriptor, install_id
    assert doc["install"]["python3"] == {"pkg-path": "python312", "version": "3.12.3"}
    assert doc["install"]["uv"] == {"pkg-path": "uv", "version": "0.13.9"}
    assert set(doc["hook"]) <= flox.HOOK and "gp_floor=525.60.13" in doc["hook"]["on-activate"]
    wheels = tomllib.loads(flox.render(_runtime(), _host(), "0.13.9", [pylock.Wheel(
        name="six", version="1.16.0", url="https://x.example/six-1.16.0-py2.py3-none-any.whl", sha256="0" * 64, size=1,
        filename="six-1.16.0-py2.py3-none-any.whl")]))  # tests/test_export_flox.py runs this hook
    assert "uv pip install" in wheels["hook"]["on-activate"] and "six==1.16.0" in wheels["hook"]["on-activate"]
    assert set(doc["options"]) <= flox.OPTIONS
    assert doc["options"]["systems"] == ["x86_64-linux"] and set(doc["options"]["systems"]) <= flox.SYSTEMS
    assert doc["options"]["cuda-detection"] is True
    assert all(isinstance(v, str) for v in doc["vars"].values())


# --- Nix ---------------------------------------------------------------------------------------------

def test_flake_parses_and_fetches_exactly_the_pylock_wheels(tmp_path: Path) -> None:
    folder, wheels = export_folder(tmp_path, make_wheels(tmp_path / "index"), "https://wheels.example")
    write.render(folder, "nix", uv_version="0.13.9")
    text = (folder / "flake.nix").read_text()
    assert f"github:NixOS/nixpkgs/{nix.NIXPKGS_REV}" in text and "/run/opengl-driver/lib" in text
    assert "autoAddDriverRunpath" in text and "nvidia-x11" not in text  # the driver is the host's
    assert json.loads((folder / "flake.lock").read_text())["nodes"]["nixpkgs"]["locked"]["rev"] == nix.NIXPKGS_REV
    require(shutil.which("nix-instantiate") is not None, "nix-instantiate (Debian nix-bin) is not installed")
    parsed = subprocess.run(["nix-instantiate", "--parse", str(folder / "flake.nix")], capture_output=True, text=True,
                            timeout=120)
    assert parsed.returncode == 0, parsed.stderr
    for w in wheels:  # evaluated against a stub nixpkgs in tests/test_export_nix.py
        assert f'fetchurl {{ name = "{w.filename}"; sha256 = "{w.sha256}"; url = "{w.url}"; }}' in parsed.stdout


# --- import: the derived playbook ----------------------------------------------------------------------

def test_import_checks_the_driver_floor_before_any_change_and_replaces_the_venv_steps(tmp_path: Path) -> None:
    from provisioner.cli.import_export import derive
    from provisioner.playbook import load

    folder, _ = export_folder(tmp_path, make_wheels(tmp_path / "index"), "https://wheels.example")
    pb = load(PLAYBOOK)
    kinds = [s.kind for s in derive(pb, folder).steps]
    assert kinds[:3] == ["node.connect", "node.inventory", "export.preflight"]
    assert kinds.index("export.preflight") < kinds.index("lxc.create")
    assert "torch.resolve" not in kinds and "venv.build" not in kinds
    assert kinds[-2:] == ["export.install", "burnin.run"]
    install, burnin = derive(pb, folder, "/opt/imported").steps[-2:]
    assert install.params["path"] == "/opt/imported" and burnin.params["venv"] == "/opt/imported"


def test_a_recorded_playbook_is_its_own_proof(tmp_path: Path) -> None:
    from provisioner.playbook import load

    pb = load(PLAYBOOK)
    recorded = pb.model_copy(update={"resolved": {"venv_lock": {"groups": {"torch": {"text": "x"}}},
                                                  "runtime": {"torch": "2.11.0+cu128"},
                                                  "burnin": {"verdict": "pass", "summary": "pass"}}})
    proof = find_proof(str(PLAYBOOK), recorded, tmp_path)
    require_proven(proof)
    assert proof.run_id == "recorded"
    failing = recorded.model_copy(update={"resolved": {**recorded.resolved, "burnin": {"verdict": "fail"}}})
    with pytest.raises(ExportRefused, match="burn-in failed"):
        require_proven(find_proof(str(PLAYBOOK), failing, tmp_path))
    with pytest.raises(ExportRefused, match="no apply run"):
        find_proof(str(PLAYBOOK), pb, tmp_path)
