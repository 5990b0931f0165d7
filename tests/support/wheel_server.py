"""A real HTTP server for test wheels: a folder served on 127.0.0.1, or a hostile answer of the tests' choosing.

`serve(folder)` serves files as they are (the index of an export's wheels). `HostileServer` answers every
GET with `body_size` bytes of one byte value (an oversize body for a lock entry that says a few bytes), so a
download's size limit is tested against a real socket.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve `folder` over HTTP on 127.0.0.1; yields the base URL (no trailing slash)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=httpd.serve_forever, name="test-wheel-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


class _Oversize(BaseHTTPRequestHandler):
    body_size = 0

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        sent, block = 0, b"\0" * 65536
        with contextlib.suppress(OSError):
            while sent < self.body_size:
                n = min(len(block), self.body_size - sent)
                self.wfile.write(block[:n])
                sent += n

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def oversize(body_size: int) -> Iterator[str]:
    """An HTTP server whose every GET answers `body_size` bytes; yields its base URL."""
    handler = type("Oversize", (_Oversize,), {"body_size": body_size})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, name="test-oversize-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)
