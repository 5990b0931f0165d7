"""A real PyTorch index page (tests/fixtures/index/torch_cu128_links.html) served on loopback, and the listing and
lock helpers the venv_links and wizard-offer tests share (once in the venv_links test module)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from provisioner.steps.venv_links import (
    LIST_LINKS,
    Listing,
    parse_listing,
)

PAGE = (Path(__file__).resolve().parents[1] / "fixtures" / "index" / "torch_cu128_links.html").read_bytes()
AARCH64_270 = "torch-2.7.0+cu128-cp310-cp310-manylinux_2_28_aarch64.whl"
X86_270_SHA = "ac1849553ee673dfafb44c610c60cb60a2890f0e117f43599a526cf777eb8b8c"
WIN_270_SHA = "c52c4b869742f00b12cb34521d1381be6119fa46244791704b00cc4a3cb06850"
DOWNLOADED = "5" * 63 + "a"  # what uv would have hashed from the aarch64 download (the issue gives no sha256)


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        found = self.path == "/whl/cu128/torch/"
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(PAGE if found else b"not found\n")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def index() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/whl/cu128"
    server.shutdown()
    server.server_close()


def _list(*pages: str) -> Listing:
    out = subprocess.run([sys.executable, "-c", LIST_LINKS, *pages], capture_output=True, text=True, check=True,
                         timeout=120)
    return parse_listing(out.stdout)


def _lock(*hashes: str, version: str = "2.7.0+cu128") -> str:
    return f"torch=={version} \\\n" + " \\\n".join(f"    --hash=sha256:{h}" for h in hashes) + "\n"
