"""The lab's package indexes shaped like the real ones: a PyTorch index with side packages, files on another host,
and a PyPI mirror.

What the real download.pytorch.org/whl/<variant>/ looks like (reference/real-world.md, "The PyTorch index and uv"):

- it carries, besides torch and torchvision, the packages they need (numpy, pillow, filelock, jinja2, markupsafe,
  typing-extensions, sympy, networkx, fsspec, …) **in a few old versions**, so under uv's first-index rule an
  extra index that is the PyTorch index pins those to its old versions: `numpy>=2.3` fails "No solution found"
  (astral-sh/uv#7554, #2840, #5001);
- its project pages link the files on **another host** (download-r2.pytorch.org): here a second loopback
  address (127.0.0.2, else another port of 127.0.0.1) serves every file, the pages only link;
- some links carry **no `#sha256=`** (scenario `hashless-links`: torch's files but cp310's, `_hashless`) and some
  files **changed after their hash was published** (scenario `changed-bytes`: torch 2.11.0+cu128 serves other
  bytes than its link's hash, as pytorch/vision#9243 torchvision 0.24.0+cu128 and pytorch/pytorch#195141 triton
  did; pytorch/pytorch#181056, torch 2.11.0+cu128 cp310 itself, is a link without a hash);
- PyPI (`/pypi/simple/`) has the current versions, nvidia-ml-py and packages that themselves require torch
  (`torchmetrics` needs `torch>=2.0.0` and `numpy>1.20.0`, as its METADATA on PyPI says).

The side packages are LAB stand-ins (pure-Python wheels named and versioned like the real ones, whose modules
only carry `__version__`): the resolver and installer paths are what is modelled, not numpy itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import tempfile
import threading
import zipfile
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

from provisioner.lab.build_once import build_once
from provisioner.lab.httpd import BackgroundHttpServer, QuietGetHandler
from provisioner.lab.simple_index import links_page, project_of
from provisioner.lab.wheels import NVML_PY_VERSION, VARIANTS, make_wheel, pynvml_source

SHAPE_VERSION = "1"
#: (project, old versions on download.pytorch.org/whl/<variant>/) — "a few old versions" of each side package
TORCH_INDEX_SIDE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("numpy", ("1.26.4", "2.1.2")), ("pillow", ("10.2.0", "11.0.0")), ("filelock", ("3.13.1",)),
    ("jinja2", ("3.1.4",)), ("markupsafe", ("2.1.5",)), ("typing-extensions", ("4.12.2",)),
    ("sympy", ("1.13.3",)), ("networkx", ("3.3",)), ("fsspec", ("2024.6.1",)),
)
#: (project, versions on PyPI, Requires-Dist)
PYPI: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("numpy", ("2.1.2", "2.3.4"), ()), ("pillow", ("11.3.0",), ()), ("filelock", ("3.20.0",), ()),
    ("jinja2", ("3.1.6",), ("MarkupSafe>=2.0",)), ("markupsafe", ("3.0.3",), ()),
    ("typing-extensions", ("4.15.0",), ()), ("sympy", ("1.14.0",), ()), ("networkx", ("3.5",), ()),
    ("fsspec", ("2025.9.0",), ()), ("packaging", ("25.0",), ()),
    ("torchmetrics", ("1.8.2",), ("numpy>1.20.0", "packaging>17.1", "torch>=2.0.0")),
)
#: the files scenario `changed-bytes` serves altered (the reference host's torch; pytorch/vision#9243 saw it happen)
CHANGED_PREFIX = "torch-2.11.0+cu128-"
INDEX_SCENARIOS = ("hashless-links", "changed-bytes")


def _module(project: str) -> str:
    return {"pillow": "PIL", "typing-extensions": "typing_extensions"}.get(project, project.replace("-", "_"))


def _side_wheel(out: Path, project: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    mod = _module(project)
    path = f"{mod}.py" if project == "typing-extensions" else f"{mod}/__init__.py"
    return make_wheel(out, project, version, "py3-none-any",
                      {path: f'"""LAB stand-in for {project} {version}."""\n__version__ = "{version}"\n'.encode()},
                      requires=list(requires), summary=f"LAB stand-in for {project} (gpu-provisioner lab)")


def build_side(base: Path) -> Path:
    """Side packages of the PyTorch index (`torch-side/`) and the PyPI mirror (`pypi/`), built once under `base`."""

    def build(root: Path) -> None:
        for project, versions in TORCH_INDEX_SIDE:
            for v in versions:
                _side_wheel(root / "torch-side", project, v)
        for project, versions, requires in PYPI:
            for v in versions:
                _side_wheel(root / "pypi", project, v, requires)
        make_wheel(root / "pypi", "nvidia-ml-py", NVML_PY_VERSION, "py3-none-any", {"pynvml.py": pynvml_source()},
                   summary="Python Bindings for the NVIDIA Management Library (copy served by the LAB)")

    root = base / f"index-shape-{SHAPE_VERSION}-{hashlib.sha256(pynvml_source()).hexdigest()[:8]}"
    return build_once(root, base / f".index-shape-{SHAPE_VERSION}.lock", build)


def rebuilt(wheel: Path, into: Path) -> Path:
    """The same wheel re-published with other bytes (one more file in it): a valid wheel of the same name whose
    sha256 is not the one the index links (what pytorch/vision#9243 and pytorch/pytorch#195141 saw). Made in
    `into` (the files host's own directory: the wheel index beside `wheel` may be shared by other labs) as a copy
    with one member appended, not a recompression, so a 190 MB torch is ready well within a client's read timeout."""
    out = into / wheel.name
    if not out.exists():
        tmp = into / f".{wheel.name}.tmp"
        shutil.copyfile(wheel, tmp)
        with zipfile.ZipFile(tmp, "a") as dst:
            dst.writestr("torch/_lab_republished.txt", "LAB: scenario changed-bytes: re-published after its hash\n")
        tmp.replace(out)
    return out


def _sha256(path: Path) -> str:
    cache = path.with_name(path.name + ".sha256")
    if cache.exists():
        return cache.read_text().strip()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    tmp = cache.with_name(f".{cache.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(digest + "\n")
    tmp.replace(cache)  # whole or not at all: another lab's server may read it at once
    return digest


class Shelves:
    """Which wheel files each index holds: `/whl/<variant>/` (torch + side packages) and `/pypi/`."""

    def __init__(self, wheel_root: Path, side_root: Path) -> None:
        self.wheel_root, self.side_root = wheel_root, side_root

    def files(self, shelf: str) -> list[Path]:
        if shelf == "pypi":
            return self._pypi()
        if shelf in VARIANTS and (self.wheel_root / shelf).is_dir():
            return sorted([*(self.wheel_root / shelf).glob("*.whl"), *(self.side_root / "torch-side").glob("*.whl")])
        return []

    def _pypi(self) -> list[Path]:
        """PyPI's shelf: the real wheels the lab was supplied with (numpy, typing-extensions: what the real torch
        imports, beside it in the wheel root) in place of those projects' stand-ins, then the stand-ins."""
        real_dir = next((self.wheel_root / v for v in VARIANTS if (self.wheel_root / v).is_dir()), None)
        real = [f for f in sorted(real_dir.glob("*.whl")) if project_of(f.name) not in ("torch", "torchvision",
                                                                                       "nvidia-ml-py")] \
            if real_dir is not None else []
        have = {project_of(f.name) for f in real}
        stand_ins = [f for f in sorted((self.side_root / "pypi").glob("*.whl")) if project_of(f.name) not in have]
        return sorted([*real, *stand_ins])

    def find(self, shelf: str, name: str) -> Path | None:
        return next((f for f in self.files(shelf) if f.name == name), None)


def _hashless(filename: str) -> bool:
    """Scenario `hashless-links`: the torch files of every Python but cp310 lose their `#sha256=`, the way the
    real index gave hashes for only some files of a release (astral-sh/uv#13195: torch 2.7.0+cu128 aarch64
    links without, x86_64 with); uv expects all or none of a project's files hashed."""
    return project_of(filename) == "torch" and "-cp310-" not in filename


class _FilesHandler(QuietGetHandler):
    """The files host (download-r2.pytorch.org / files.pythonhosted.org): `/<shelf>/<file>`."""

    server_version = "LAB-files"

    def serve(self, head: bool) -> None:
        srv: Any = self.server
        parts = self.path_parts()
        shelf = parts[1] if parts[:1] == ["whl"] and len(parts) == 3 else ("pypi" if parts[:1] == ["packages"] else "")
        found = srv.shelves.find(shelf, parts[-1]) if shelf and len(parts) >= 2 else None
        if found is None:
            self.send_body(404, b"LAB: no such file\n", "text/plain", head)
            return
        changed = found.name.startswith(CHANGED_PREFIX) and "changed-bytes" in srv.scenarios()
        self.send_file(200, srv.changed(found) if changed else found, head=head)


class _PagesHandler(QuietGetHandler):
    """The index pages: `/whl/<variant>/<project>/` and `/pypi/simple/<project>/` (PEP 503), files linked on
    the files host."""

    server_version = "LAB-package-index"

    def serve(self, head: bool) -> None:
        srv: Any = self.server
        parts = self.path_parts()
        if parts[:2] == ["pypi", "simple"]:
            shelf, rest, prefix = "pypi", parts[2:], "/pypi/simple"
        elif parts[:1] == ["whl"] and len(parts) >= 2:
            shelf, rest, prefix = parts[1], parts[2:], f"/whl/{parts[1]}"
        elif parts == ["whl"]:
            self.send_body(200, links_page("LAB wheel index", [(f"/whl/{v}/", v) for v in VARIANTS]), head=head)
            return
        else:
            self.send_body(404, b"LAB: not found\n", "text/plain", head)
            return
        files = srv.shelves.files(shelf)
        if not files:
            self.send_body(404, b"LAB: no such index\n", "text/plain", head)
            return
        if not rest:
            projects = sorted({project_of(f.name) for f in files})
            self.send_body(200, links_page(f"Links for {shelf}", [(f"{prefix}/{p}/", p) for p in projects]), head=head)
            return
        project = rest[0].lower().replace("_", "-").replace(".", "-")
        hashless = shelf != "pypi" and "hashless-links" in srv.scenarios()
        base = srv.files_url + ("/packages" if shelf == "pypi" else f"/whl/{shelf}")
        links = []
        for f in files:
            if project_of(f.name) != project:
                continue
            frag = "" if hashless and _hashless(f.name) else f"#sha256={_sha256(f)}"
            links.append((f"{base}/{quote(f.name)}{frag}", f.name))
        if not links:
            self.send_body(404, b"LAB: no such project\n", "text/plain", head)
            return
        self.send_body(200, links_page(f"Links for {project}", links), head=head)


def _files_host(preferred: str) -> str:
    """A second loopback address for the files host when this machine answers on it (Linux: all of 127/8)."""
    with contextlib.suppress(OSError), socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        return "127.0.0.2"
    return preferred


class FilesServer(BackgroundHttpServer):
    thread_name = "lab-files-host"

    def __init__(self, shelves: Shelves, scenarios: Any, host: str) -> None:
        self.host = host
        self._httpd = ThreadingHTTPServer((host, 0), _FilesHandler)
        self._httpd.daemon_threads = True
        self._httpd.shelves = shelves  # type: ignore[attr-defined]
        self._httpd.scenarios = scenarios  # type: ignore[attr-defined]
        self._httpd.changed = self.changed  # type: ignore[attr-defined]
        #: this host's own directory for the files it serves changed (made on the first one, removed on stop)
        self.changed_dir: Path | None = None
        self._changing = threading.Lock()

    def changed(self, wheel: Path) -> Path:
        """`wheel` re-published with other bytes (`rebuilt`), made once: requests at once wait for it."""
        with self._changing:
            if self.changed_dir is None:
                self.changed_dir = Path(tempfile.mkdtemp(prefix="lab-changed-bytes-"))
            return rebuilt(wheel, self.changed_dir)

    def stop(self) -> None:
        super().stop()
        if self.changed_dir is not None:
            shutil.rmtree(self.changed_dir, ignore_errors=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


class ShapedIndexServer(BackgroundHttpServer):
    """The PyTorch index (`base_url` = `/whl/`) and the PyPI mirror (`pypi_url` = `/pypi/simple`) on `host`,
    every file served by a `FilesServer` on another loopback address."""

    thread_name = "lab-package-index"

    def __init__(self, wheel_root: Path, side_root: Path, scenarios: Any, host: str = "127.0.0.1") -> None:
        self.host = host
        shelves = Shelves(wheel_root, side_root)
        self.files = FilesServer(shelves, scenarios, _files_host(host))
        self._httpd = ThreadingHTTPServer((host, 0), _PagesHandler)
        self._httpd.daemon_threads = True
        self._httpd.shelves = shelves  # type: ignore[attr-defined]
        self._httpd.scenarios = scenarios  # type: ignore[attr-defined]
        self._httpd.files_url = self.files.base_url  # type: ignore[attr-defined]

    def start(self) -> ShapedIndexServer:
        self.files.start()
        super().start()
        return self

    def stop(self) -> None:
        super().stop()
        self.files.stop()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/whl/"

    @property
    def pypi_url(self) -> str:
        return f"http://{self.host}:{self.port}/pypi/simple"
