"""The lab's HTTP servers (PVE API, wheel index, driver mirror) run in a background thread each; the plain-HTTP
ones (wheel index, package index, files host, driver mirror) answer through one quiet GET/HEAD handler."""

from __future__ import annotations

import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import unquote


class QuietGetHandler(BaseHTTPRequestHandler):
    """A handler that logs nothing and answers GET and HEAD through `serve(head)`: HEAD sends the same status and
    headers as GET, without the body."""

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_HEAD(self) -> None:
        self.serve(head=True)

    def do_GET(self) -> None:
        self.serve(head=False)

    def serve(self, head: bool) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def send_body(self, code: int, body: bytes, ctype: str = "text/html", head: bool = False) -> None:
        """Status, Content-Type and Content-Length, then the body unless this answers a HEAD."""
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def send_file(self, code: int, path: Path, ctype: str = "application/octet-stream", head: bool = False) -> None:
        """Status and headers at once, then the file streamed in chunks, as a real file host answers: a client
        waiting for a 190 MB wheel sees its status before the last byte is read from disk."""
        with path.open("rb") as src:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(path.stat().st_size))
            self.end_headers()
            if not head:
                shutil.copyfileobj(src, self.wfile, 1 << 20)

    def path_parts(self) -> list[str]:
        """The request path's segments, unquoted, without the query."""
        return [unquote(p) for p in self.path.split("?", 1)[0].split("/") if p]


class BackgroundHttpServer:
    """start()/stop() and the bound port of a `ThreadingHTTPServer` serving from a daemon thread."""

    thread_name = "lab-http"
    _httpd: ThreadingHTTPServer
    _thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        port: int = self._httpd.server_address[1]
        return port

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        daemon=True, name=self.thread_name)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(5)
            self._thread = None
        self._httpd.server_close()
