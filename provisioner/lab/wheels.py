"""The lab's wheels and its PEP 503 index (like download.pytorch.org/whl/<variant>/), served on loopback.

Variants ``cu126``, ``cu128``, ``cu130`` and ``cpu``, each with ``torch==2.11.0+<variant>``,
``torchvision==0.26.0+<variant>``, ``nvidia-ml-py`` and ``typing-extensions`` (copies of this machine's,
as the containers are offline). Wheels are real wheels (``WHEEL``, ``METADATA``, ``RECORD`` with hashes),
so ``uv pip install torch==2.11.0 torchvision==0.26.0 --index-url http://127.0.0.1:P/whl/cu128`` works
offline.

The torch wheel is a real PyTorch: every file of a CPU build supplied by `provisioner.lab.torch_supply`
(its compressed members copied as they are), for the one CPython that wheel is built for (the lab's
containers are given that Python; `served_python`). ``torch/__init__.py`` ends by applying the LAB
layer (``torch/_lab_layer.py``): ``__version__``/``version.cuda`` of the variant, and
``torch.cuda.is_available()``/``device_count()`` answered from the container's view: the usable
``/dev/nvidiaN`` nodes, ``/dev/nvidiactl`` and ``/dev/nvidia-uvm``, and the installed userspace
(``libnvidia-ml.so.1``) matching the host module (``/sys/module/nvidia/version``); a mismatch gives
torch's real "Error 803" warning. Tensors asked for on ``cuda:N`` live on the CPU; torch.distributed
(gloo) is PyTorch's own, run by the venv's own Python.
"""

from __future__ import annotations

import base64
import copy
import csv
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import os
import shutil
import struct
import zipfile
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

from provisioner.lab.build_once import build_once
from provisioner.lab.httpd import BackgroundHttpServer, QuietGetHandler
from provisioner.lab.simple_index import links_page, project_of
from provisioner.lab.torch_supply import SuppliedTorch

TORCH_VERSION = "2.11.0"
TORCHVISION_VERSION = "0.26.0"
NVML_PY_VERSION = "13.595.45"
#: variant -> (CUDA version or None, arch list) — reference/torch-matrix.json, release 2.11, linux_x86_64
VARIANTS: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "cu126": ("12.6", ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")),
    "cu128": ("12.8", ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")),
    "cu130": ("13.0", ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")),
    "cpu": (None, ()),
}
BUILDER_VERSION = "4"


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def make_wheel(out_dir: Path, dist: str, version: str, tag: str, files: dict[str, bytes],
               requires: list[str] | None = None, summary: str = "") -> Path:
    """Write a wheel with correct WHEEL/METADATA/RECORD; returns its path."""
    norm = dist.replace("-", "_")
    name = f"{norm}-{version}-{tag}.whl"
    info = f"{norm}-{version}.dist-info"
    meta = ["Metadata-Version: 2.1", f"Name: {dist}", f"Version: {version}",
            f"Summary: {summary or 'LAB stand-in (gpu-provisioner lab)'}", "Requires-Python: >=3.10"]
    meta += [f"Requires-Dist: {r}" for r in requires or []]
    purelib = tag.endswith("-none-any")
    entries = dict(files)
    entries[f"{info}/METADATA"] = ("\n".join(meta) + "\n\nLAB stand-in wheel built by the gpu-provisioner lab.\n").encode()
    entries[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: gpu-provisioner-lab ({BUILDER_VERSION})\n"
                                f"Root-Is-Purelib: {'true' if purelib else 'false'}\nTag: {tag}\n\n").encode()
    entries[f"{info}/top_level.txt"] = ("\n".join(sorted({p.split('/')[0] for p in files if '/' in p or
                                                          p.endswith('.py')})) + "\n").encode()
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for path, data in entries.items():
        writer.writerow([path, f"sha256={_b64(hashlib.sha256(data).digest())}", str(len(data))])
    writer.writerow([f"{info}/RECORD", "", ""])
    entries[f"{info}/RECORD"] = record.getvalue().encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / name
    tmp = wheel.with_name(f"{wheel.name}.{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for arc, data in entries.items():
            zi = zipfile.ZipInfo(arc, date_time=(2026, 3, 18, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
    tmp.replace(wheel)
    return wheel


_TORCH_LAB = r'''"""LAB layer of torch @VERSION@ (gpu-provisioner lab): the real PyTorch CPU build in this
wheel answers the CUDA queries from the lab container's view (device nodes, driver versions) and
reports the variant's version; torch.distributed (gloo) is the real one.
"""
import os as _os
import sys as _sys
import warnings as _warnings

_LAB_VERSION = "@VERSION@"
_LAB_CUDA = @CUDA@
_LAB_ARCHS = @ARCHS@
_LAB_BASE = @BASE@
_LAB_NOTE = "LAB stand-in for torch " + _LAB_VERSION + " (gpu-provisioner lab)"
_CC_BY_NAME = (("RTX PRO 6000 Blackwell", (12, 0)), ("RTX 5090", (12, 0)), ("B200", (10, 0)), ("GB200", (10, 0)),
               ("H100", (9, 0)), ("H200", (9, 0)), ("L40S", (8, 9)), ("L4", (8, 9)), ("A100", (8, 0)),
               ("A10", (8, 6)), ("V100", (7, 0)), ("T4", (7, 5)))


def _lab_device_table():
    """The view's device table (``path major minor mode uid gid allowed|denied``; see
    provisioner.lab.sandbox): where the lab could not mknod, each node is a bind of /dev/null and
    its major:minor and mode are the table's."""
    table = {}
    try:
        with open("/.lab/devices") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 7:
                    table[parts[0]] = (int(parts[1]), int(parts[2]), int(parts[3], 8), parts[6] == "allowed")
    except (OSError, ValueError):
        pass
    return table


def _lab_mode(path, table=None):
    """(mode bits, major, minor) of device node `path` as the lab's ls/stat report it, or None."""
    try:
        st = _os.stat(path)
    except OSError:
        return None
    row = (_lab_device_table() if table is None else table).get(path)
    if row is not None:
        major, minor, mode, allowed = row
        return (mode if allowed else 0), major, minor
    return st.st_mode & 0o777, _os.major(st.st_rdev), _os.minor(st.st_rdev)


def _lab_gpus():
    """(usable GPUs as [(minor, name)], problem or None) as the container sees them."""
    if _LAB_CUDA is None:
        return [], None
    try:
        host = open("/sys/module/nvidia/version").read().strip()
    except OSError:
        return [], "no-driver"
    lib = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
    if not _os.path.islink(lib) or not _os.path.exists(lib):
        return [], "no-driver"
    user = _os.readlink(lib).rsplit("libnvidia-ml.so.", 1)[-1]
    if user != host:
        return [], "mismatch"
    try:  # NVSwitch systems: CUDA waits for nvidia-fabricmanager (LAB: the node's fabric state)
        fabric = open("/proc/driver/nvidia/LAB-fabric-state").read().strip()
    except OSError:
        fabric = "N/A"
    if fabric in ("Not Started", "In Progress"):
        return [], "fabric"
    table = _lab_device_table()
    for node in ("/dev/nvidiactl", "/dev/nvidia-uvm"):
        st = _lab_mode(node, table)
        if st is None or st[0] == 0:
            return [], "no-device"
    names = {}
    base = "/proc/driver/nvidia/gpus"
    for bus in sorted(_os.listdir(base)) if _os.path.isdir(base) else []:
        info = {}
        try:
            for line in open(_os.path.join(base, bus, "information")):
                k, _, v = line.partition(":")
                info[k.strip()] = v.strip()
        except OSError:
            continue
        if info.get("Device Minor", "").isdigit():
            names[int(info["Device Minor"])] = info.get("Model", "NVIDIA GPU")
    gpus = []
    for entry in sorted(_os.listdir("/dev")):
        if entry.startswith("nvidia") and entry[6:].isdigit():
            st = _lab_mode("/dev/" + entry, table)
            if st is not None and st[0] and st[1] == 195:
                minor = st[2]
                gpus.append((minor, names.get(minor, "NVIDIA GPU")))
    return gpus, (None if gpus else "no-device")


_WARNED = []


def _lab_warn(problem):
    if _WARNED or problem in (None, "no-driver-quiet"):
        return
    _WARNED.append(problem)
    if problem == "mismatch":
        _warnings.warn("CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
                       "functions before calling NumCudaDevices() that might have already set an error? Error 803: "
                       "system has unsupported display driver / cuda driver combination (LAB)", UserWarning,
                       stacklevel=3)
    elif problem == "fabric":
        _warnings.warn("CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
                       "functions before calling NumCudaDevices() that might have already set an error? Error 802: "
                       "system not yet initialized (LAB)", UserWarning, stacklevel=3)
    elif problem == "no-driver":
        _warnings.warn("CUDA initialization: Found no NVIDIA driver on your system. Please check that you have an "
                       "NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx (LAB)",
                       UserWarning, stacklevel=3)


def _is_available():
    gpus, problem = _lab_gpus()
    _lab_warn(problem)
    return bool(gpus)


def _device_count():
    gpus, problem = _lab_gpus()
    _lab_warn(problem)
    return len(gpus)


def _gpu(i):
    gpus, _ = _lab_gpus()
    if isinstance(i, int) and 0 <= i < len(gpus):
        return gpus[i]
    if not gpus:
        raise RuntimeError("Found no NVIDIA driver on your system. (LAB)" if _LAB_CUDA else
                           "Torch not compiled with CUDA enabled")
    raise AssertionError("Invalid device id")


def _get_device_name(device=None):
    return _gpu(0 if device is None else int(getattr(device, "index", device) or 0))[1]


def _get_device_capability(device=None):
    name = _get_device_name(device)
    for key, cc in _CC_BY_NAME:
        if key in name:
            return cc
    return (12, 0)


def _get_arch_list():
    return list(_LAB_ARCHS) if _LAB_CUDA and _device_count() else []


def _lab_cpu_device(device):
    """LAB: a tensor asked for on cuda:N lives on the CPU, after checking that GPU N is visible."""
    text = str(device) if device is not None else "cpu"
    if not text.startswith("cuda"):
        return device
    index = int(text.split(":", 1)[1]) if ":" in text else 0
    gpus, problem = _lab_gpus()
    if index >= len(gpus):
        raise RuntimeError("CUDA error: invalid device ordinal (LAB)" if gpus else
                           "Found no NVIDIA driver on your system. (LAB)")
    return "cpu"


def _wrap_factory(fn):
    def factory(*args, **kwargs):
        if "device" in kwargs:
            kwargs["device"] = _lab_cpu_device(kwargs["device"])
        return fn(*args, **kwargs)
    factory.__doc__ = getattr(fn, "__doc__", None)
    return factory


def patch(mod):
    """Layer the variant's answers on the real torch module `mod` (called at the end of torch/__init__.py)."""
    for name in ("ones", "zeros", "randn", "rand", "empty", "full", "arange", "tensor"):
        if hasattr(mod, name):
            setattr(mod, name, _wrap_factory(getattr(mod, name)))
    mod.__version__ = _LAB_VERSION
    mod.__lab__ = _LAB_NOTE + " over PyTorch " + _LAB_BASE
    mod.version.__version__ = _LAB_VERSION
    mod.version.cuda = _LAB_CUDA
    mod.version.git_version = "LAB"
    mod.cuda.is_available = _is_available
    mod.cuda.device_count = _device_count
    mod.cuda.get_arch_list = _get_arch_list
    mod.cuda.get_device_capability = _get_device_capability
    mod.cuda.get_device_name = _get_device_name
'''

#: appended to the real torch/__init__.py: the variant's layer over the real module
_INIT_TAIL = b"""

# --- LAB (gpu-provisioner lab): the variant's version and the container's CUDA view over this real torch ---
from torch import _lab_layer as _lab_layer  # noqa: E402
_lab_layer.patch(__import__("sys").modules[__name__])
"""


def _fill(template: str, version: str, cuda: str | None, archs: tuple[str, ...], base: str) -> str:
    return (template.replace("@VERSION@", version).replace("@CUDA@", json.dumps(cuda).replace("null", "None"))
            .replace("@ARCHS@", repr(list(archs))).replace("@BASE@", repr(base)))


def _module_wheel(out_dir: Path, module: str, dist: str, summary: str) -> Path:
    """A py3-none-any wheel holding a copy of this machine's single-file module `module` (what the lab's
    index serves beside torch: its containers are offline)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise LabWheelError(f"LAB: this machine has no {dist} ({module}.py) for the lab's wheel index")
    version = importlib.metadata.version(dist)
    return make_wheel(out_dir, dist, version, "py3-none-any", {f"{module}.py": Path(spec.origin).read_bytes()},
                      summary=f"{summary} ({dist} {version}: a copy of this machine's, served by the LAB)")


def pynvml_source() -> bytes:
    """This machine's pynvml.py (nvidia-ml-py), for the lab's PyPI mirror; a stand-in when it has none."""
    spec = importlib.util.find_spec("pynvml")
    if spec is not None and spec.origin and spec.origin.endswith(".py"):
        return Path(spec.origin).read_bytes()
    return b'"""LAB stand-in for pynvml (the real nvidia-ml-py was not available to the lab)."""\n'


class LabWheelError(Exception):
    """The lab cannot build its wheel index (one line)."""


def _copy_raw(src: zipfile.ZipFile, dst: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    """Copy one member's compressed bytes as they are (no recompression: the real torch wheel holds
    ~700 MB of libraries, and the lab builds four variants of it)."""
    fp, out = src.fp, dst.fp
    assert fp is not None and out is not None
    fp.seek(info.header_offset)
    header = fp.read(30)
    if header[:4] != b"PK\x03\x04":
        raise LabWheelError(f"LAB: {src.filename}: {info.filename} has no local header")
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    fp.seek(info.header_offset + 30 + name_len + extra_len)
    data = fp.read(info.compress_size)
    new = copy.copy(info)
    new.flag_bits &= ~0x08  # sizes and CRC in the local header, no data descriptor after the data
    new.extra = b""
    out.seek(dst.start_dir)
    new.header_offset = out.tell()
    out.write(new.FileHeader())
    out.write(data)
    dst.start_dir = out.tell()
    dst.filelist.append(new)
    dst.NameToInfo[new.filename] = new
    dst._didModify = True  # type: ignore[attr-defined]


def torch_wheel(real: SuppliedTorch, out_dir: Path, variant: str) -> Path:
    """The variant's torch wheel: every file of the real CPU wheel `real`, with ``torch/__init__.py``
    ending in the LAB layer (``torch/_lab_layer.py``), and a dist-info of its own: version
    ``2.11.0+<variant>``, and of the real wheel's requirements only what ``import torch`` and
    torch.distributed need (typing-extensions; the lab's containers are offline)."""
    cuda, archs = VARIANTS[variant]
    version = f"{TORCH_VERSION}+{variant}"
    info_dir = f"torch-{version}.dist-info"
    name = f"torch-{version}-{real.tag}.whl"
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / name
    tmp = wheel.with_name(f"{name}.{os.getpid()}.tmp")
    with zipfile.ZipFile(real.path) as src:
        old_info = next((n.split("/")[0] for n in src.namelist()
                         if n.endswith(".dist-info/RECORD") and n.count("/") == 1), None)
        if old_info is None or "torch/__init__.py" not in src.NameToInfo:
            raise LabWheelError(f"LAB: {real.path} is not a torch wheel (no torch/__init__.py or RECORD)")
        rows = {r[0]: r for r in csv.reader(io.StringIO(src.read(f"{old_info}/RECORD").decode())) if r}
        new_files = {
            "torch/__init__.py": src.read("torch/__init__.py") + _INIT_TAIL,
            "torch/_lab_layer.py": _fill(_TORCH_LAB, version, cuda, archs, real.version).encode(),
            f"{info_dir}/METADATA": ("\n".join([
                "Metadata-Version: 2.1", "Name: torch", f"Version: {version}",
                f"Summary: LAB torch {version}: the PyTorch {real.version} CPU build with the variant's layer "
                "(gpu-provisioner lab)", "Requires-Python: >=3.10", "Requires-Dist: typing-extensions>=4.10.0",
            ]) + "\n\nLAB wheel built by the gpu-provisioner lab from " + real.path.name + ".\n").encode(),
            f"{info_dir}/WHEEL": (f"Wheel-Version: 1.0\nGenerator: gpu-provisioner-lab ({BUILDER_VERSION})\n"
                                  f"Root-Is-Purelib: false\nTag: {real.tag}\n\n").encode(),
            f"{info_dir}/top_level.txt": b"torch\n",
        }
        record = io.StringIO()
        writer = csv.writer(record, lineterminator="\n")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
            for arc, data in new_files.items():
                zi = zipfile.ZipInfo(arc, date_time=(2026, 3, 18, 0, 0, 0))
                zi.external_attr = 0o644 << 16
                zi.compress_type = zipfile.ZIP_DEFLATED
                dst.writestr(zi, data)
                writer.writerow([arc, f"sha256={_b64(hashlib.sha256(data).digest())}", str(len(data))])
            for info in src.infolist():
                top = info.filename.split("/")[0]
                if top == old_info or info.filename in new_files or info.is_dir():
                    continue
                _copy_raw(src, dst, info)
                row = rows.get(info.filename)
                writer.writerow(row if row else [info.filename, "", ""])
            writer.writerow([f"{info_dir}/RECORD", "", ""])
            zi = zipfile.ZipInfo(f"{info_dir}/RECORD", date_time=(2026, 3, 18, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(zi, record.getvalue().encode())
    tmp.replace(wheel)
    return wheel


def build_variant(out_dir: Path, variant: str, real: SuppliedTorch) -> list[Path]:
    """The variant's index: torch (the real CPU build with the variant's layer), torchvision (a small
    stand-in that requires it), and the modules beside them (nvidia-ml-py, typing-extensions)."""
    tv_version = f"{TORCHVISION_VERSION}+{variant}"
    tv_files = {"torchvision/__init__.py": (f'"""LAB stand-in for torchvision {tv_version}."""\n'
                                            f'__version__ = "{tv_version}"\n').encode()}
    torch = torch_wheel(real, out_dir, variant)
    side = []
    if real.numpy is not None:  # a real numpy wheel, as the real index serves one beside torch
        side.append(out_dir / real.numpy.name)
        shutil.copyfile(real.numpy, side[-1])
    return [torch, *side,
            # the real torchvision 0.26.0 requires numpy (https://pypi.org/project/torchvision/0.26.0/)
            make_wheel(out_dir, "torchvision", tv_version, real.tag, tv_files,
                       requires=[f"torch=={TORCH_VERSION}+{variant}", *(["numpy"] if real.numpy else [])],
                       summary="LAB stand-in for torchvision (gpu-provisioner lab)"),
            _module_wheel(out_dir, "pynvml", "nvidia-ml-py", "Python Bindings for the NVIDIA Management Library"),
            _module_wheel(out_dir, "typing_extensions", "typing_extensions", "Backported typing hints")]


def build_index(base: Path, real: SuppliedTorch) -> Path:
    """Build (once per builder version and supplied torch wheel) all variants under `base`/<key>/<variant>/."""
    st = real.path.stat()
    key = hashlib.sha256(f"{BUILDER_VERSION}|{real.path.name}|{st.st_size}|{st.st_mtime_ns}|{real.numpy}|"
                         f"{hashlib.sha256(_TORCH_LAB.encode() + _INIT_TAIL).hexdigest()}".encode()).hexdigest()[:12]

    def build(root: Path) -> None:
        for variant in VARIANTS:
            build_variant(root / variant, variant, real)
        (root / "python").write_text(real.python + "\n")

    return build_once(base / f"wheels-{key}", base / f".wheels-{key}.lock", build)


def served_python(root: Path) -> str:
    """The Python ("3.11") the index at `root` serves torch for."""
    return (root / "python").read_text().strip()


# --- the PEP 503 server ---------------------------------------------------------------------------


@dataclass
class _Index:
    root: Path

    def files(self, variant: str) -> list[Path]:
        d = self.root / variant
        return sorted(d.glob("*.whl")) if variant in VARIANTS and d.is_dir() else []

    def sha256(self, path: Path) -> str:
        cache = path.with_suffix(".whl.sha256")
        if cache.exists():
            return cache.read_text().strip()
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        cache.write_text(digest + "\n")
        return digest


class _Handler(QuietGetHandler):
    server_version = "LAB-wheel-index"
    index: _Index

    def serve(self, head: bool) -> None:
        index = self.server.index  # type: ignore[attr-defined]
        parts = self.path_parts()
        if parts[:1] != ["whl"]:
            self.send_body(404, b"LAB: not found\n", "text/plain", head)
            return
        if len(parts) == 1:
            self.send_body(200, links_page("LAB wheel index", [(f"/whl/{v}/", v) for v in VARIANTS]), head=head)
            return
        variant = parts[1]
        files = index.files(variant)
        if not files:
            self.send_body(404, b"LAB: no such index\n", "text/plain", head)
            return
        if len(parts) == 2:
            projects = sorted({project_of(f.name) for f in files})
            page = links_page(f"Links for {variant}", [(f"/whl/{variant}/{p}/", p) for p in projects])
            self.send_body(200, page, head=head)
            return
        name = parts[2]
        if name.endswith(".whl"):
            match = [f for f in files if f.name == name]
            if not match:
                self.send_body(404, b"LAB: no such file\n", "text/plain", head)
                return
            self.send_file(200, match[0], head=head)
            return
        project = name.lower().replace("_", "-")
        links = [(f"/whl/{variant}/{quote(f.name)}#sha256={index.sha256(f)}", f.name)
                 for f in files if project_of(f.name) == project]
        if not links:
            self.send_body(404, b"LAB: no such project\n", "text/plain", head)
            return
        self.send_body(200, links_page(f"Links for {project}", links), head=head)


class WheelIndexServer(BackgroundHttpServer):
    """HTTP on loopback serving ``/whl/<variant>/`` (PEP 503) from a built wheel tree."""

    thread_name = "lab-wheel-index"

    def __init__(self, wheel_root: Path, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self._httpd = ThreadingHTTPServer((host, port), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.index = _Index(wheel_root)  # type: ignore[attr-defined]


    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/whl/"

