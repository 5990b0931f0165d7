"""The lab's HTTP servers (PVE API, wheel index, driver mirror) run in a background thread each."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer
from typing import Self


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
