"""venv.build's lock step (`uv pip compile --generate-hashes`) meeting a file whose bytes are not its link's sha256,
with real uv against a package index on loopback.

uv hashes what it downloads to build metadata: an sdist linked with another sha256 fails the compile with uv's
own "Hash mismatch for `name==version`" (crates/uv-distribution/src/error.rs `MismatchedHashes`), which
`parse_hash_mismatch` reads for venv.build's compile branch. A wheel read for its metadata is not hashed by uv
0.13.9 (the lock then carries the link's sha256), and the `--require-hashes` install is where its bytes are
refused; either way the mismatch reaches venv.build named, with the sha256 uv computed. The captured output
(uv 0.13.9) is tests/fixtures/outputs/uv_pip_compile_hash_mismatch_sdist_0.13.9.txt.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from provisioner.lab import wheels
from provisioner.steps.venv_build import parse_hash_mismatch
from tests.support.fake_pct import real_uv
from tests.support.require import require

OUTPUTS = Path(__file__).parent / "fixtures" / "outputs"
WRONG = "1" * 64


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A directory served over HTTP on loopback: (its path, its URL)."""
    root = tmp_path / "site"
    root.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _sdist(path: Path, name: str, version: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
        info = tarfile.TarInfo(f"{name}-{version}/PKG-INFO")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())
    return buf.getvalue()


def _page(root: Path, project: str, filename: str, sha256: str) -> None:
    page = root / "simple" / project
    page.mkdir(parents=True)
    (page / "index.html").write_text(
        f'<html><body><a href="/files/{filename}#sha256={sha256}">{filename}</a></body></html>\n')


def _uv(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    uv = real_uv()
    require(uv is not None, "uv is not installed")
    assert uv is not None
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
           "UV_NO_CONFIG": "1"}
    return subprocess.run([uv, *args], capture_output=True, text=True, env=env, timeout=300, check=False)


def test_the_captured_compile_failure_is_read_as_a_mismatch() -> None:
    text = (OUTPUTS / "uv_pip_compile_hash_mismatch_sdist_0.13.9.txt").read_text()
    assert parse_hash_mismatch(text) == {
        "name": "tinypkg", "version": "1.0", "expected": [WRONG],
        "computed": "cdf0976e866672b72264a6a644588eb001766ea356a0292bd79d4252fee3633a"}


def test_an_sdist_with_other_bytes_fails_the_lock_step_named(tmp_path: Path, served: tuple[Path, str]) -> None:
    root, url = served
    (root / "files").mkdir()
    data = _sdist(root / "files" / "tinypkg-1.0.tar.gz", "tinypkg", "1.0")
    _page(root, "tinypkg", "tinypkg-1.0.tar.gz", WRONG)
    (tmp_path / "in.txt").write_text("tinypkg\n")
    compiled = _uv(tmp_path, "pip", "compile", str(tmp_path / "in.txt"), "--generate-hashes", "--no-header",
                   "--no-annotate", "--no-progress", "--index-url", f"{url}/simple", "-o", str(tmp_path / "lock.txt"))
    assert compiled.returncode != 0, compiled.stdout + compiled.stderr
    assert parse_hash_mismatch(compiled.stdout + compiled.stderr) == {
        "name": "tinypkg", "version": "1.0", "expected": [WRONG], "computed": hashlib.sha256(data).hexdigest()}, \
        compiled.stderr
    assert not (tmp_path / "lock.txt").exists()


def test_a_wheel_with_other_bytes_is_refused_by_the_lock_or_the_hashed_install(
        tmp_path: Path, served: tuple[Path, str]) -> None:
    root, url = served
    wheel = wheels.make_wheel(root / "files", "tinypkg", "1.0", "py3-none-any", {"tinypkg/__init__.py": b""})
    _page(root, "tinypkg", wheel.name, WRONG)
    (tmp_path / "in.txt").write_text("tinypkg\n")
    lock = tmp_path / "lock.txt"
    compiled = _uv(tmp_path, "pip", "compile", str(tmp_path / "in.txt"), "--generate-hashes", "--no-header",
                   "--no-annotate", "--no-progress", "--index-url", f"{url}/simple", "-o", str(lock))
    told = compiled.stdout + compiled.stderr
    want = {"name": "tinypkg", "version": "1.0", "expected": [WRONG],
            "computed": hashlib.sha256(wheel.read_bytes()).hexdigest()}
    if compiled.returncode != 0:  # a uv that hashes the wheel it read for metadata
        assert parse_hash_mismatch(told) == want, told
        return
    # uv 0.13.9: the lock vouches for the link's sha256, so the install with --require-hashes refuses the bytes
    assert f"--hash=sha256:{WRONG}" in lock.read_text(), lock.read_text()
    venv = tmp_path / "venv"
    made = _uv(tmp_path, "venv", "-q", str(venv))
    assert made.returncode == 0, made.stderr
    installed = _uv(tmp_path, "pip", "install", "--python", str(venv / "bin" / "python"), "--require-hashes",
                    "--no-progress", "-r", str(lock), "--index-url", f"{url}/simple")
    assert installed.returncode != 0, installed.stdout + installed.stderr
    assert parse_hash_mismatch(installed.stdout + installed.stderr) == want, installed.stderr
    assert not list(venv.glob("lib/python*/site-packages/tinypkg"))
