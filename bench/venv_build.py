"""Benchmark: build the same PyTorch venv from a local PEP 503 index with uv and with pip.

    uv run python bench/venv_build.py [--reps 3] [--scale 0.01] [--json out.json]

The index (served by http.server on 127.0.0.1) holds stand-in wheels for the 26 packages that
`uv pip install torch==2.11.0 --index-url https://download.pytorch.org/whl/cu128` installs on the
reference host (tests/fixtures/logs/clean-uv-torch-install.log) plus torchvision 0.26.0, numpy and
pillow, with the real dependency graph and payloads of random bytes sized like the real wheels
times `--scale` (default 1/100: about 40 MB in total), spread over many files as real wheels are.

Flows, each timed end to end (create the venv, then install torch + torchvision):
- pip:        `python -m venv` + `pip install --index-url …` (pip's own HTTP/wheel cache);
- uv:         `uv venv` + `uv pip install --index-url …`;
- uv-locked:  what the `venv.build` step does — `uv venv` + `uv pip compile --generate-hashes`
              + `uv pip install --require-hashes -r lock`.
Cold = an empty cache directory for that run; warm = the cache a previous run of the same flow
filled. Every flow runs `--reps` times per cache state in this process; ratios are against the
median of pip-cold measured here.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import http.server
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

# name, version, approx. real wheel size in MiB, files in the wheel (scaled down), requirements
PACKAGES: list[tuple[str, str, float, int, list[str]]] = [
    ("torch", "2.11.0+cu128", 858.1, 400, [
        "filelock", "typing-extensions>=4.10.0", "setuptools", "sympy>=1.13.3", "networkx>=2.5.1", "jinja2",
        "fsspec>=0.8.5", "nvidia-cuda-nvrtc-cu12==12.8.93", "nvidia-cuda-runtime-cu12==12.8.90",
        "nvidia-cuda-cupti-cu12==12.8.90", "nvidia-cudnn-cu12==9.10.2.21", "nvidia-cublas-cu12==12.8.4.1",
        "nvidia-cufft-cu12==11.3.3.83", "nvidia-curand-cu12==10.3.9.90", "nvidia-cusolver-cu12==11.7.3.90",
        "nvidia-cusparse-cu12==12.5.8.93", "nvidia-cusparselt-cu12==0.7.1", "nvidia-nccl-cu12==2.27.5",
        "nvidia-nvshmem-cu12==3.3.20", "nvidia-nvtx-cu12==12.8.90", "nvidia-nvjitlink-cu12==12.8.93",
        "nvidia-cufile-cu12==1.13.1.3", "triton==3.5.1"]),
    ("torchvision", "0.26.0+cu128", 8.0, 60, ["numpy", "torch==2.11.0", "pillow>=5.3.0,!=8.3.*"]),
    ("nvidia-cudnn-cu12", "9.10.2.21", 674.0, 40, ["nvidia-cublas-cu12"]),
    ("nvidia-cublas-cu12", "12.8.4.1", 594.0, 20, []),
    ("nvidia-nccl-cu12", "2.27.5", 307.4, 10, []),
    ("nvidia-cusparselt-cu12", "0.7.1", 287.0, 10, []),
    ("nvidia-cusparse-cu12", "12.5.8.93", 288.0, 10, ["nvidia-nvjitlink-cu12"]),
    ("nvidia-cusolver-cu12", "11.7.3.90", 255.0, 10, ["nvidia-cublas-cu12", "nvidia-nvjitlink-cu12",
                                                       "nvidia-cusparse-cu12"]),
    ("nvidia-cufft-cu12", "11.3.3.83", 193.0, 10, ["nvidia-nvjitlink-cu12"]),
    ("triton", "3.5.1", 155.0, 300, []),
    ("nvidia-nvshmem-cu12", "3.3.20", 125.0, 20, []),
    ("nvidia-cuda-nvrtc-cu12", "12.8.93", 88.0, 10, []),
    ("nvidia-curand-cu12", "10.3.9.90", 63.0, 10, []),
    ("nvidia-nvjitlink-cu12", "12.8.93", 39.0, 10, []),
    ("nvidia-cuda-cupti-cu12", "12.8.90", 10.0, 30, []),
    ("nvidia-cufile-cu12", "1.13.1.3", 1.2, 10, []),
    ("nvidia-cuda-runtime-cu12", "12.8.90", 1.0, 20, []),
    ("nvidia-nvtx-cu12", "12.8.90", 0.1, 10, []),
    ("numpy", "2.3.4", 16.6, 400, []),
    ("pillow", "12.0.0", 7.0, 80, []),
    ("sympy", "1.14.0", 6.3, 600, ["mpmath<1.4,>=1.1.0"]),
    ("networkx", "3.5", 2.0, 500, []),
    ("setuptools", "80.9.0", 1.2, 200, []),
    ("mpmath", "1.3.0", 0.5, 40, []),
    ("fsspec", "2025.10.0", 0.2, 60, []),
    ("jinja2", "3.1.6", 0.13, 30, ["MarkupSafe>=2.0"]),
    ("typing-extensions", "4.15.0", 0.04, 2, []),
    ("markupsafe", "3.0.3", 0.02, 5, []),
    ("filelock", "3.20.0", 0.02, 5, []),
]
REQUIREMENTS = ["torch==2.11.0", "torchvision==0.26.0"]


def _record_hash(data: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(out: Path, name: str, version: str, size_mib: float, files: int, requires: list[str],
                scale: float, seed: int) -> Path:
    """A py3-none-any wheel whose payload is `size_mib * scale` MiB of random bytes over `files` files."""
    rng = random.Random(seed)
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    total = max(1024, int(size_mib * scale * 1024 * 1024))
    per_file = max(64, total // files)
    content: dict[str, bytes] = {f"{dist}/__init__.py": f"__version__ = {version!r}\n".encode()}
    for i in range(files):
        content[f"{dist}/_payload/part{i:04d}.bin"] = rng.randbytes(per_file)
    content[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires)).encode()
    content[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: gpu-provisioner-bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = "".join(f"{p},sha256={_record_hash(c)},{len(c)}\n" for p, c in content.items()) + f"{info}/RECORD,,\n"
    path = out / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:  # payload is random: compression would not help
        for p, c in [*content.items(), (f"{info}/RECORD", record.encode())]:
            zf.writestr(zipfile.ZipInfo(p, date_time=(2026, 1, 1, 0, 0, 0)), c)
    return path


def build_index(root: Path, scale: float) -> int:
    """root/<project>/index.html + wheels (PEP 503); returns the total bytes of the wheels."""
    root.mkdir(parents=True)
    total = 0
    for seed, (name, version, size, files, requires) in enumerate(PACKAGES):
        wheel = build_wheel(root, name, version, size, files, requires, scale, seed)
        total += wheel.stat().st_size
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        (root / name).mkdir()
        (root / name / "index.html").write_text(
            f'<!DOCTYPE html>\n<html><body>\n<a href="../{wheel.name}#sha256={digest}">{wheel.name}</a><br/>\n'
            "</body></html>\n")
    return total


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # clients may drop a download they no longer need
            super().handle_error(request, client_address)


def serve(root: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    server = _Server(("127.0.0.1", 0), functools.partial(_Handler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def clean_env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env.update({"UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                "HOME": str(work / "home")})
    return env


def run(argv: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(argv)}\n{proc.stdout}\n{proc.stderr}")


def flow_pip(python: str, uv: str, index: str, venv: Path, cache: Path, env: dict[str, str]) -> None:
    run([python, "-m", "venv", str(venv)], env)
    run([str(venv / "bin/python"), "-m", "pip", "install", "--isolated", "--disable-pip-version-check", "--quiet",
         "--index-url", index, "--cache-dir", str(cache), *REQUIREMENTS], env)


def flow_uv(python: str, uv: str, index: str, venv: Path, cache: Path, env: dict[str, str]) -> None:
    run([uv, "venv", "--quiet", "--python", python, "--cache-dir", str(cache), str(venv)], env)
    run([uv, "pip", "install", "--quiet", "--python", str(venv / "bin/python"), "--cache-dir", str(cache),
         "--index-url", index, *REQUIREMENTS], env)


def flow_uv_locked(python: str, uv: str, index: str, venv: Path, cache: Path, env: dict[str, str]) -> None:
    run([uv, "venv", "--quiet", "--python", python, "--cache-dir", str(cache), str(venv)], env)
    req = venv / "req.in"
    req.write_text("\n".join(REQUIREMENTS) + "\n")
    lock = venv / "lock.txt"
    py = str(venv / "bin/python")
    run([uv, "pip", "compile", "--quiet", str(req), "--generate-hashes", "--python", py, "--cache-dir", str(cache),
         "--index-url", index, "-o", str(lock)], env)
    run([uv, "pip", "install", "--quiet", "--require-hashes", "--python", py, "--cache-dir", str(cache),
         "--index-url", index, "-r", str(lock)], env)


FLOWS: dict[str, Callable[[str, str, str, Path, Path, dict[str, str]], None]] = {
    "pip": flow_pip, "uv": flow_uv, "uv-locked": flow_uv_locked}


def freeze(uv: str, venv: Path, env: dict[str, str]) -> list[str]:
    out = subprocess.run([uv, "pip", "freeze", "--python", str(venv / "bin/python")], env=env, capture_output=True,
                         text=True, check=True)
    return sorted(line for line in out.stdout.splitlines() if not line.startswith(("pip==", "setuptools==")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=3, help="runs per flow and cache state (default 3)")
    parser.add_argument("--scale", type=float, default=0.01, help="payload size relative to the real wheels")
    parser.add_argument("--python", default=os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
                        help="interpreter for the venvs (default: this Python's base interpreter)")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    uv = shutil.which("uv")
    if uv is None:
        print("uv is not on PATH", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="venv-bench-"))
    env = clean_env(work)
    uv_version = subprocess.run([uv, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    pip_version = subprocess.run([args.python, "-m", "pip", "--version"], capture_output=True, text=True,
                                 env=env, check=False).stdout.split(" from ")[0]
    total = build_index(work / "index", args.scale)
    server, url = serve(work / "index")
    print(f"index {url}: {len(PACKAGES)} wheels, {total / 2**20:.1f} MiB (scale {args.scale}); "
          f"{uv_version}; {pip_version}; Python {args.python}; {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.1f}")
    times: dict[tuple[str, str], list[float]] = {}
    sets: dict[str, list[str]] = {}
    try:
        for rep in range(args.reps):
            for name, flow in FLOWS.items():
                cache = work / f"cache-{name}"
                for state in ("cold", "warm"):
                    if state == "cold":
                        shutil.rmtree(cache, ignore_errors=True)  # a warm run follows with what this one fills
                    venv = work / f"venv-{name}-{state}-{rep}"
                    start = time.perf_counter()
                    flow(args.python, uv, url, venv, cache, env)
                    times.setdefault((name, state), []).append(time.perf_counter() - start)
                    sets.setdefault(name, freeze(uv, venv, env))
                    shutil.rmtree(venv)
    finally:
        server.shutdown()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if len({tuple(s) for s in sets.values()}) != 1:
        print("warning: the flows installed different package sets:", json.dumps(sets, indent=1), file=sys.stderr)
    base = statistics.median(times[("pip", "cold")])
    print(f"\n{'flow':<10} {'cache':<5} {'median s':>9} {'min s':>7} {'max s':>7}  {'× faster than pip-cold':>22}")
    rows = []
    for (name, state), values in times.items():
        med = statistics.median(values)
        rows.append({"flow": name, "cache": state, "runs": values, "median_s": med, "speedup_vs_pip_cold": base / med})
        print(f"{name:<10} {state:<5} {med:9.2f} {min(values):7.2f} {max(values):7.2f}  {base / med:21.1f}×")
    print(f"\n{len(sets['pip'])} packages installed by every flow; {args.reps} runs each; "
          f"load average at the end {os.getloadavg()[0]:.1f}")
    if args.json:
        args.json.write_text(json.dumps({"uv": uv_version, "pip": pip_version, "index_mib": total / 2**20,
                                         "scale": args.scale, "cpus": os.cpu_count(),
                                         "loadavg_end": os.getloadavg()[0], "results": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
