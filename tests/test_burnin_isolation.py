"""provisioner/burnin ships into the container venv alone: stdlib + torch + pynvml only."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import provisioner.burnin

PKG = Path(provisioner.burnin.__file__).parent
ALLOWED_THIRD_PARTY = {"torch", "pynvml"}


def require(cond: bool, reason: str) -> None:
    if not cond:
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)(reason)


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: use absolute imports"
            names.append(node.module or "")
    return names


def test_every_import_is_stdlib_torch_pynvml_or_the_package_itself() -> None:
    files = sorted(PKG.glob("*.py"))
    assert len(files) > 10
    bad = []
    for f in files:
        for name in _imports(f):
            top = name.split(".")[0]
            if name == "provisioner.burnin" or name.startswith("provisioner.burnin."):
                continue
            if top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY or top == "__future__":
                continue
            bad.append(f"{f.name}: {name}")
    assert bad == []


def test_thresholds_data_file_ships_inside_the_package() -> None:
    data = json.loads((PKG / "thresholds.json").read_text())
    assert data["schema_version"] == 1 and data["models"]


SHIPPED_RUN = r"""
import importlib, json, pkgutil, sys
root = sys.argv[1]
sys.path[:] = [root] + [p for p in sys.path if not p.rstrip('/').endswith(sys.argv[2].rstrip('/'))]

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.startswith("provisioner.") and not name.startswith("provisioner.burnin"):
            raise ImportError("burn-in imported " + name)
        if name.split(".")[0] in {"click", "rich", "pydantic", "yaml", "textual", "asyncssh"}:
            raise ImportError("burn-in imported " + name)
        return None

sys.meta_path.insert(0, Block())
import provisioner.burnin as pkg
assert pkg.__file__.startswith(root), pkg.__file__
for m in pkgutil.iter_modules(pkg.__path__):
    importlib.import_module("provisioner.burnin." + m.name)
from provisioner.burnin.config import make_config
from provisioner.burnin.launcher import run_local
doc = run_local(make_config(backend="gloo", world_size=2, sizes="1KiB", phases="collectives",
                            collectives="all_reduce,sendrecv"))
print(json.dumps({"status": doc["status"], "rows": len(doc["phases"]["collectives"]["rows"]),
                  "modules": sorted(k for k in sys.modules if k.startswith("provisioner"))}))
"""


def test_the_shipped_copy_runs_alone(tmp_path: Path) -> None:
    from tests.support.torch_env import ensure_torch

    ensure_torch()  # torch supplied as the lab's is (the controller does not depend on it)
    try:
        import torch.distributed as dist
    except ImportError:
        dist = None  # type: ignore[assignment]
    require(dist is not None and dist.is_gloo_available(), "torch with gloo is not installed")
    ship = tmp_path / "venv-site"
    shutil.copytree(PKG, ship / "provisioner" / "burnin", ignore=shutil.ignore_patterns("__pycache__"))
    (ship / "provisioner" / "__init__.py").write_text("")  # what the container gets: an empty parent
    repo_root = str(PKG.parents[1])
    proc = subprocess.run(
        [sys.executable, "-c", SHIPPED_RUN, str(ship), repo_root],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ship)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["status"] == "pass" and out["rows"] == 4
    assert all(m == "provisioner" or m.startswith("provisioner.burnin") for m in out["modules"])


def test_importing_the_package_does_not_import_torch() -> None:
    code = "import sys, provisioner.burnin, provisioner.burnin.config, provisioner.burnin.report; " \
           "print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
