"""The lab's driver mirror: ``NVIDIA-Linux-x86_64-<ver>.run`` and its ``.sha256sum`` over HTTP on loopback,
with download.nvidia.com's path layouts:

* ``/XFree86/Linux-x86_64/<ver>/NVIDIA-Linux-x86_64-<ver>.run`` + ``.sha256sum`` (GeForce/RTX/workstation
  releases; ``latest.txt``);
* ``/tesla/<ver>/NVIDIA-Linux-x86_64-<ver>.run`` with NO checksum file (data-center releases, as
  us.download.nvidia.com/tesla/ publishes them; the HGX profile's driver is published only here);
* ``/XFree86/Linux-aarch64/<ver>/NVIDIA-Linux-aarch64-<ver>.run`` + ``.sha256sum`` (the GH200 profile).

The .run files are the lab's installer stand-ins (`provisioner.lab.commands.installer`) for
595.71.05, 580.95.05 and the lab host's driver version. Scenario ``corrupt-download``: the first
download of a .run (marker ``<root>/run/once/corrupt-download``) is damaged in transit, so its
SHA-256 no longer matches the published ``.sha256sum`` (and makeself's own check fails).
"""

from __future__ import annotations

import re
import threading
from http.server import ThreadingHTTPServer

from provisioner.lab.commands.installer import LAB_DRIVER_VERSIONS, build_run, corrupt, run_name, sha256sum_line
from provisioner.lab.httpd import BackgroundHttpServer, QuietGetHandler
from provisioner.lab.state import LabState

BASE_PATH = "/XFree86/Linux-x86_64"
_V = r"(\d+\.\d+(?:\.\d+)?)"
_PATH_RE = re.compile(rf"^/XFree86/Linux-x86_64/{_V}/NVIDIA-Linux-x86_64-{_V}\.run(\.sha256sum)?$")
_TESLA_RE = re.compile(rf"^/tesla/{_V}/NVIDIA-Linux-x86_64-{_V}\.run(\.sha256sum)?$")
_AARCH64_RE = re.compile(rf"^/XFree86/Linux-aarch64/{_V}/NVIDIA-Linux-aarch64-{_V}\.run(\.sha256sum)?$")


def layout_of(state: LabState) -> str:
    """Where the lab host's own driver version is published (its profile's layout)."""
    from provisioner.lab.profiles import get_profile

    return get_profile(state.settings().profile).driver_layout


class DriverMirror:
    """Builds (and caches in memory) the .run bytes per version."""

    def __init__(self, state: LabState) -> None:
        self.state = state
        self._cache: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def versions(self, layout: str = "XFree86/Linux-x86_64") -> list[str]:
        """Versions published under `layout`: the lab's x86_64 set, the host's own version in its layout."""
        host = self.state.settings().driver_version
        host_layout = layout_of(self.state)
        if layout == "XFree86/Linux-x86_64":
            base = set(LAB_DRIVER_VERSIONS) - ({host} if host_layout != layout else set())
            return sorted(base | ({host} if host_layout == layout else set()))
        return [host] if host_layout == layout else []

    def run_bytes(self, version: str) -> bytes:
        with self._lock:
            if version not in self._cache:
                self._cache[version] = build_run(version)
            return self._cache[version]

    def download(self, version: str) -> bytes:
        """What a client gets for the .run (damaged once under scenario corrupt-download)."""
        data = self.run_bytes(version)
        marker = self.state.root / "run" / "once" / "corrupt-download"
        with self._lock:
            if marker.exists() and self.state.has_scenario("corrupt-download"):
                marker.unlink()
                return corrupt(data)
        return data


class _Handler(QuietGetHandler):
    server_version = "LAB-driver-mirror"

    def serve(self, head: bool) -> None:
        mirror: DriverMirror = self.server.mirror  # type: ignore[attr-defined]
        path = self.path.split("?", 1)[0]
        if path == f"{BASE_PATH}/latest.txt":
            v = mirror.state.settings().driver_version
            self.send_body(200, f"{v} {v}/{run_name(v)}\n".encode(), "text/plain", head)
            return
        layout, checksum = "XFree86/Linux-x86_64", True
        m = _PATH_RE.match(path)
        if m is None and (m := _TESLA_RE.match(path)) is not None:
            layout, checksum = "tesla", False
        elif m is None and (m := _AARCH64_RE.match(path)) is not None:
            layout = "XFree86/Linux-aarch64"
        if not m or m.group(1) != m.group(2) or m.group(1) not in mirror.versions(layout) or \
                (m.group(3) and not checksum):
            self.send_body(404, b"<html><body><h1>404 Not Found</h1>LAB driver mirror</body></html>\n", "text/html", head)
            return
        version = m.group(1)
        if m.group(3):
            line = sha256sum_line(mirror.run_bytes(version), version)
            if layout == "XFree86/Linux-aarch64":
                line = line.replace("Linux-x86_64", "Linux-aarch64")
            self.send_body(200, line.encode(), "text/plain", head)
            return
        data = mirror.run_bytes(version) if head else mirror.download(version)
        self.send_body(200, data, "application/octet-stream", head)


class DriverFileServer(BackgroundHttpServer):
    """HTTP on loopback; `base_url` is what replaces ``https://download.nvidia.com``."""

    thread_name = "lab-driver-mirror"

    def __init__(self, state: LabState, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.mirror = DriverMirror(state)
        self._httpd = ThreadingHTTPServer((host, port), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.mirror = self.mirror  # type: ignore[attr-defined]


    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, version: str) -> str:
        return f"{self.base_url}{BASE_PATH}/{version}/{run_name(version)}"

