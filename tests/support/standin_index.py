"""A PEP 503 index of stand-in wheels served on loopback, and the playbook and node venv.build tests run against it
(once in the venv.build test module; here so that other test modules import it from here)."""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import stat
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.playbook import Playbook
from tests.support.fake_pct import Node, known_gpus, real_uv, reference_gpus
from tests.support.require import require

PY = f"{sys.version_info.major}.{sys.version_info.minor}"
ARCH_LIST = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]  # torch 2.11.0+cu128 (torch-matrix.md)

# --- stand-in wheels -------------------------------------------------------------------------------

FAKE_TORCH = '''\
"""Stand-in torch: no CUDA, just what the provisioner's verify script touches."""
import os

__version__ = "{version}"
_CUDA = {cuda!r}


class version:
    cuda = _CUDA


def _count():
    return int(os.environ.get("STANDIN_TORCH_GPUS", "1")) if _CUDA else 0


class _Matrix:
    def __init__(self, rows):
        self.rows = rows

    def __matmul__(self, other):
        cols = list(zip(*other.rows))
        return _Matrix([[sum(a * b for a, b in zip(r, c)) for c in cols] for r in self.rows])

    def sum(self):
        return _Scalar(sum(sum(r) for r in self.rows))


class _Scalar:
    def __init__(self, value):
        self.value = value

    def item(self):
        return self.value


def ones(shape, device="cpu"):
    if str(device).startswith("cuda"):
        index = int(str(device).partition(":")[2] or 0)
        if index >= _count():
            raise RuntimeError("CUDA error: invalid device ordinal")
    rows, cols = shape
    return _Matrix([[1.0] * cols for _ in range(rows)])


class cuda:
    @staticmethod
    def is_available():
        return _count() > 0

    @staticmethod
    def device_count():
        return _count()

    @staticmethod
    def get_arch_list():
        return {arch_list!r} if _CUDA else []

    @staticmethod
    def get_device_capability(i=0):
        major, minor = os.environ.get("STANDIN_TORCH_CC", "12.0").split(".")
        return (int(major), int(minor))
'''


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def build_wheel(out: Path, name: str, version: str, files: dict[str, str], requires: tuple[str, ...] = (),
                scripts: dict[str, str] | None = None) -> Path:
    """A py3-none-any wheel with METADATA, WHEEL and a RECORD whose hashes are right."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    content = dict(files)
    for script, text in (scripts or {}).items():
        content[f"{dist}-{version}.data/scripts/{script}"] = text
    content[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    content[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: gpu-provisioner-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = "".join(f"{p},sha256={_b64(hashlib.sha256(c.encode()).digest())},{len(c.encode())}\n"
                     for p, c in content.items()) + f"{info}/RECORD,,\n"
    path = out / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for p, c in [*content.items(), (f"{info}/RECORD", record)]:
            zi = zipfile.ZipInfo(p, date_time=(2026, 1, 1, 0, 0, 0))
            zi.external_attr = (stat.S_IFREG | (0o755 if "/scripts/" in p else 0o644)) << 16
            zf.writestr(zi, c)
    return path


def fake_torch(out: Path, version: str, cuda: str | None) -> Path:
    return build_wheel(out, "torch", version,
                       {"torch/__init__.py": FAKE_TORCH.format(version=version, cuda=cuda, arch_list=ARCH_LIST)},
                       ("filelock",))


class Index:
    """A PEP 503 "simple" tree under `root`, served by http.server on 127.0.0.1."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.wheels = root / "_build"
        self.wheels.mkdir(parents=True)
        handler = functools.partial(_QuietHandler, directory=str(root))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def publish(self, sub: str, wheel: Path) -> None:
        """Put `wheel` into index `sub` (e.g. whl/cu128 or pypi) and rewrite its project page."""
        base = self.root / sub
        project = wheel.name.split("-")[0].replace("_", "-").lower()
        (base / project).mkdir(parents=True, exist_ok=True)
        (base / wheel.name).write_bytes(wheel.read_bytes())
        files = sorted(p for p in base.glob("*.whl") if p.name.split("-")[0].replace("_", "-").lower() == project)
        links = "".join(f'<a href="../{p.name}#sha256={hashlib.sha256(p.read_bytes()).hexdigest()}">{p.name}</a><br/>\n'
                        for p in files)
        (base / project / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Pages must be revalidated (the tests publish new versions while uv's cache is warm)."""

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "max-age=0, must-revalidate")
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def index(tmp_path: Path) -> Iterator[Index]:
    idx = Index(tmp_path / "www")
    w = idx.wheels
    filelock = build_wheel(w, "filelock", "3.20.0", {"filelock/__init__.py": "__version__ = '3.20.0'\n"})
    # PyTorch cu128 index: torch, torchvision and the dependencies it mirrors.
    idx.publish("whl/cu128", fake_torch(w, "2.11.0+cu128", "12.8"))
    idx.publish("whl/cu128", build_wheel(w, "torchvision", "0.26.0+cu128",
                                         {"torchvision/__init__.py": "__version__ = '0.26.0+cu128'\n"},
                                         ("torch==2.11.0",)))
    idx.publish("whl/cu128", filelock)
    # A cu130 index that lacks torch 2.11.0.
    idx.publish("whl/cu130", fake_torch(w, "2.12.1+cu130", "13.0"))
    idx.publish("whl/cu130", filelock)
    # PyPI: its default torch (CPU-only in this stand-in), nvidia-ml-py, an add-on that needs torch.
    idx.publish("pypi", fake_torch(w, "2.11.0", None))
    idx.publish("pypi", build_wheel(w, "nvidia-ml-py", "13.580.82", {"pynvml.py": "__version__ = '13.580.82'\n"}))
    idx.publish("pypi", build_wheel(w, "torch-addon", "1.0.0", {"torch_addon/__init__.py": "import torch\n"},
                                    ("torch>=2.0",)))
    idx.publish("pypi", filelock)
    yield idx
    idx.close()


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Node:
    require(real_uv() is not None, "uv is not on PATH")
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    return Node(tmp_path / "node", extra_env={"STANDIN_TORCH_GPUS": "2", "STANDIN_TORCH_CC": "12.0"})


def make_playbook(venv: Path, *, resolve: dict[str, Any] | None = None, build: dict[str, Any] | None = None,
                  resolved: dict[str, Any] | None = None) -> Playbook:
    return Playbook.model_validate({
        "schema_version": 1,
        "target": {"host": "lab-node", "container": 101, "local": True},
        "steps": [
            {"kind": "torch.resolve", "params": {"torch": "==2.11.0", "python": PY, **(resolve or {})}},
            {"kind": "venv.build", "params": {"path": str(venv), "extra_packages": ["nvidia-ml-py", "torch-addon"],
                                              **(build or {})}},
        ],
        "resolved": resolved or {},
    })


def lab(index: Index, *, pypi: bool = True) -> dict[str, Any]:
    """Two GPUs known, and the mirrors a site (here: the lab) sets on venv.build."""
    build: dict[str, Any] = {"index_mirror": f"{index.url}/whl"}
    build.update({"pypi_mirror": f"{index.url}/pypi"} if pypi else {"extras_from_torch_index": True})
    return {"state": known_gpus(reference_gpus(2)), "settings": {"venv.build": build}}


def freeze(venv: Path) -> list[str]:
    uv = real_uv()
    assert uv is not None
    out = subprocess.run([uv, "pip", "freeze", "--python", str(venv / "bin/python")], capture_output=True, text=True,
                         check=True, env={"PATH": "/usr/bin:/bin", "UV_NO_CONFIG": "1"})
    return out.stdout.splitlines()
