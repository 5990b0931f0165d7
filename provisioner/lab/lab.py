"""The whole lab: state + PVE API (HTTPS) + node SSH endpoint + driver mirror + wheel index.

``Lab(root, scenarios, pve).up()`` starts everything in one background daemon process
(``python -m provisioner.lab.serve --root ROOT``), waits until every service answers, and returns
the connection info it wrote to ``<root>/private/connection.json`` (``private/`` is in no view of the
lab: a lab container or the lab node cannot read or rewrite what `--lab` runs trust)::

    {"lab": "LAB", "node": "pve", "root": "...",
     "ssh": {"host": "127.0.0.1", "port": P, "user": "root", "key_file": "<root>/private/client_key",
             "known_hosts": "<root>/private/known_hosts"},
     "api": {"port": P, "user": "root@pam", "password": "file:<root>/private/api-password",
             "ca_file": "<root>/private/tls/...", "fingerprint": "AB:CD:..."},
     "index_url": "http://127.0.0.1:P/whl/", "driver_mirror": "http://127.0.0.1:P",
     "scenarios": [...], "pve": "8.4", "pid": N}

``down()`` stops the daemon and removes connection.json; ``status()`` reports. `LabServices`
runs the same services inside the current process (tests use it directly).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from provisioner.environ import copy_environ
from provisioner.lab import safe_fs
from provisioner.lab.commands import write_node_bin
from provisioner.lab.state import KNOWN_SCENARIOS, LabState, private_dir

#: scenarios implemented on the node side (the API-side ones are in `provisioner.lab.state.KNOWN_SCENARIOS`)
NODE_SCENARIOS = ("apt-lock", "corrupt-download", "installer-killed", "bug-report-hangs")
#: scenarios of the package indexes (`provisioner.lab.index_shape`)
INDEX_SCENARIOS = ("hashless-links", "changed-bytes")
ALL_SCENARIOS = tuple(dict.fromkeys((*KNOWN_SCENARIOS, *NODE_SCENARIOS, *INDEX_SCENARIOS)))
#: scenarios that fire once; their markers live in <root>/run/once/
ONCE_SCENARIOS = ("ssh-drop", "installer-killed", "corrupt-download")
PVE_CHOICES = ("8.1", "8.4", "9")
UP_TIMEOUT_S = 180.0
#: written into a lab root the lab made: only such a directory (or the default lab directory) is ever wiped
LAB_MARKER = ".gpu-provisioner-lab"


class LabError(RuntimeError):
    """The lab could not be started or stopped."""


def connection_path(root: Path) -> Path:
    return private_dir(root) / "connection.json"


#: a directory every lab on this machine may share for its wheel index and side packages (built once per
#: builder version and supplied torch, under a file lock: `provisioner.lab.build_once`); default: the cache's ``lab/``
WHEEL_CACHE_ENV = "PROVISIONER_LAB_WHEEL_CACHE"


def wheel_cache(environ: Mapping[str, str] | None = None) -> Path:
    """Where the lab builds (or finds) the wheel index it serves (`environ`: default this process's)."""
    from provisioner.paths import cache_dir

    shared = (os.environ if environ is None else environ).get(WHEEL_CACHE_ENV)
    return Path(shared) if shared else cache_dir(environ) / "lab"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _write_secret(root: Path, path: Path, value: str) -> None:
    safe_fs.write_bytes(root, path, (value + "\n").encode(), 0o600)


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


class LabServices:
    """All the lab's servers in this process (an asyncio loop in a thread runs the SSH endpoint)."""

    def __init__(self, state: LabState, host: str = "127.0.0.1") -> None:
        self.state = state
        self.host = host
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.api: Any = None
        self.ssh: Any = None
        self.drivers: Any = None
        self.wheels: Any = None
        self.torch_python = ""

    def start(self) -> LabServices:
        from provisioner.lab.driver_files import DriverFileServer
        from provisioner.lab.index_shape import ShapedIndexServer, build_side
        from provisioner.lab.node_ssh import LabSshServer
        from provisioner.lab.pve_api import LabApiServer
        from provisioner.lab.sandbox import discover_pythons, make_device_nodes, record_host_ns, unshare_prefix
        from provisioner.lab.torch_supply import supply
        from provisioner.lab.wheels import build_index, served_python

        root = self.state.root
        unshare_prefix()  # SandboxUnavailable: say so up front, never simulate a broken host
        write_node_bin(root)
        record_host_ns(root)
        make_device_nodes(self.state)
        wheel_root = build_index(wheel_cache(), supply(discover_pythons(), progress=False))
        self.torch_python = served_python(wheel_root)
        self.api = LabApiServer(self.state, self.host).start()
        self.drivers = DriverFileServer(self.state, self.host).start()
        # the PyTorch index and the PyPI mirror shaped like the real ones, files on a second host
        self.wheels = ShapedIndexServer(wheel_root, build_side(wheel_cache()),
                                        lambda: self.state.settings().scenarios, self.host).start()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="lab-ssh")
        self._thread.start()
        self.ssh = asyncio.run_coroutine_threadsafe(LabSshServer(self.state, self.host).start(), self._loop).result(30)
        return self

    def connection(self) -> dict[str, Any]:
        settings = self.state.settings()
        creds = self.state.credentials()
        password_file = private_dir(self.state.root) / "api-password"
        _write_secret(self.state.root, password_file, creds.password)
        return {
            "lab": "LAB",
            "node": settings.node,
            "root": str(self.state.root),
            "ssh": {"host": self.host, "port": self.ssh.port, "user": "root",
                    "key_file": str(self.ssh.client_key_path), "known_hosts": str(self.ssh.known_hosts)},
            "api": {"port": self.api.port, "user": creds.user, "password": f"file:{password_file}",
                    "ca_file": str(self.api.cafile), "fingerprint": self.api.fingerprint},
            "index_url": self.wheels.base_url,
            "pypi_url": self.wheels.pypi_url,
            "files_url": self.wheels.files.base_url,
            # the one CPython the index serves torch for (the supplied CPU build's): containers get it
            "torch_python": self.torch_python,
            "driver_mirror": self.drivers.base_url,
            "scenarios": list(settings.scenarios),
            "pve": settings.pve_version,
            "pid": os.getpid(),
        }

    def stop(self) -> None:
        from provisioner.lab.sandbox import release_mounts

        if self._loop is not None and self.ssh is not None:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self.ssh.stop(), self._loop).result(10)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(5)
            self._loop.close()
            self._loop = None
        for server in (self.wheels, self.drivers, self.api):
            if server is not None:
                with contextlib.suppress(Exception):
                    server.stop()
        release_mounts(self.state.root)


class Lab:
    """A lab at `root` (default `provisioner.paths.lab_dir()`)."""

    def __init__(self, root: Path | str | None = None, scenarios: list[str] | tuple[str, ...] = (),
                 pve: str | None = None, profile: str = "rtxpro6000-8x") -> None:
        from provisioner.lab.profiles import get_profile
        from provisioner.paths import lab_dir

        self.root = Path(root).resolve() if root else lab_dir().resolve()
        unknown = [s for s in scenarios if s not in ALL_SCENARIOS]
        if unknown:
            raise ValueError(f"unknown scenario {unknown[0]!r}; known: {', '.join(ALL_SCENARIOS)}")
        self.profile = get_profile(profile).name
        pve = pve or get_profile(profile).pve
        if pve not in PVE_CHOICES:
            raise ValueError(f"unknown PVE version {pve!r}; choose one of {', '.join(PVE_CHOICES)}")
        self.scenarios = list(dict.fromkeys(scenarios))
        self.pve = pve

    # -- state -----------------------------------------------------------------------------
    def connection(self) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(connection_path(self.root).read_text())
        except (OSError, ValueError):
            return None
        return data

    def running_pid(self) -> int | None:
        conn = self.connection()
        pid = conn.get("pid") if conn else None
        if pid is None:
            try:
                pid = int((self.root / "run" / "serve.pid").read_text())
            except (OSError, ValueError):
                return None
        return int(pid) if _pid_alive(int(pid)) else None

    def create_state(self) -> LabState:
        """A fresh lab at `root`. An earlier, stopped lab there is wiped only where the lab made that
        directory (its marker, `LAB_MARKER`) or it is the tool's own default lab directory; any other
        directory that is not empty is refused (LabError), never deleted."""
        from provisioner.lab.sandbox import release_mounts
        from provisioner.paths import lab_dir

        if self.root.exists() and any(self.root.iterdir()):
            ours = (self.root / LAB_MARKER).is_file() or (
                self.root == lab_dir().resolve() and (self.root / "lab.json").is_file())
            if not ours:
                raise LabError(f"LAB: {self.root} is not empty and was not made by the lab; the lab wipes only "
                               "directories it made: name a new or empty directory with --root")
            release_mounts(self.root)
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / LAB_MARKER).write_text("LAB: made by `provisioner lab`; `lab up` may wipe this directory\n")
        state = LabState.create(self.root, profile=self.profile, pve_version=self.pve, scenarios=self.scenarios)
        once = self.root / "run" / "once"
        once.mkdir(parents=True, exist_ok=True)
        for name in ONCE_SCENARIOS:
            if name in self.scenarios:
                (once / name).write_text("LAB: fires once\n")
        write_node_bin(self.root)
        return state

    # -- up / down / status ----------------------------------------------------------------
    def up(self, timeout: float = UP_TIMEOUT_S, *,
           env: Mapping[str, str] | None = None) -> tuple[dict[str, Any], bool]:
        """Start the lab daemon unless it runs; returns (connection info, started now?).

        `env` is the environment the lab starts in (its caches, where torch is supplied from); default a
        snapshot of this process's. Starting labs from several threads passes it rather than changing
        ``os.environ``, which every thread shares."""
        if self.running_pid() is not None:
            conn = self.connection()
            if conn is not None:
                return conn, False
        env = dict(copy_environ() if env is None else env, PROVISIONER_LAB_ROOT=str(self.root))
        self.create_state()
        self.supply_torch(env)
        log = open(self.root / "lab.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", "provisioner.lab.serve", "--root", str(self.root)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, cwd="/")
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            conn = self.connection()
            if conn is not None and conn.get("pid") == proc.pid and self._all_answer(conn):
                return conn, True
            if proc.poll() is not None:
                tail = (self.root / "lab.log").read_text(errors="replace")[-2000:]
                raise LabError(f"LAB: the lab daemon exited with status {proc.returncode}:\n{tail}")
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        raise LabError(f"LAB: the lab did not come up within {timeout:.0f}s (see {self.root / 'lab.log'})")

    @staticmethod
    def supply_torch(env: Mapping[str, str] | None = None) -> None:
        """Build the wheel index the daemon serves, here in the foreground: its real CPU torch is fetched
        (with a progress bar) when nothing configured or cached has one."""
        from provisioner.lab.sandbox import discover_pythons
        from provisioner.lab.torch_supply import TorchSupplyError, supply
        from provisioner.lab.wheels import LabWheelError, build_index

        try:
            build_index(wheel_cache(env), supply(discover_pythons(), env))
        except (TorchSupplyError, LabWheelError) as exc:
            raise LabError(str(exc)) from None

    @staticmethod
    def _all_answer(conn: dict[str, Any]) -> bool:
        host = conn["ssh"]["host"]
        ports = [conn["ssh"]["port"], conn["api"]["port"], int(conn["index_url"].rsplit(":", 1)[1].split("/")[0]),
                 int(conn["driver_mirror"].rsplit(":", 1)[1])]
        return all(_answers(host, p) for p in ports)

    def down(self, timeout: float = 15.0) -> bool:
        """Stop the daemon; returns False when it was not running."""
        pid = self.running_pid()
        if pid is None:
            connection_path(self.root).unlink(missing_ok=True)
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _pid_alive(pid):
            time.sleep(0.05)
        if _pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        connection_path(self.root).unlink(missing_ok=True)
        return True

    def status(self) -> dict[str, Any]:
        pid = self.running_pid()
        out: dict[str, Any] = {"lab": "LAB", "running": pid is not None, "root": str(self.root), "pid": pid}
        if pid is not None:
            out["connection"] = self.connection()
        if (self.root / "lab.json").exists():
            state = LabState.load(self.root)
            settings = state.settings()
            out["scenarios"] = settings.scenarios
            out["pve"] = settings.pve_version
            out["containers"] = [{"vmid": v, "status": state.get_status(v).status} for v in state.list_cts()]
        return out


def site_profile_path(root: Path) -> Path:
    """Beside connection.json, outside every view: a node could otherwise rewrite the mirrors an inventory uses."""
    return private_dir(root) / "site.yaml"


def write_site_profile(root: Path) -> Path:
    """The lab as a site profile file (`provisioner.site`): its mirrors and the sizes of its CPU-only node,
    for an inventory entry's `site:` (`inventory_entry`)."""
    import yaml

    from provisioner.session import lab_site

    site = lab_site(root)
    path = site_profile_path(root)
    safe_fs.write_bytes(root, path, yaml.safe_dump(site.model_dump(mode="json"), sort_keys=False).encode(), 0o600)
    return path


def inventory_entry(root: Path, name: str | None = None, container: int | None = None) -> dict[str, Any]:
    """An inventory entry for the lab running at `root`: its endpoints like any host's, and its site
    profile (`site:`). The inventory format knows no lab."""
    conn = Lab(root).connection()
    if conn is None:
        raise LabError(f"the lab is not running (no {connection_path(Path(root))})")
    ssh, api = conn["ssh"], conn["api"]
    entry: dict[str, Any] = {
        "name": name or Path(root).name, "host": ssh["host"], "node": conn["node"],
        "ssh": {"user": ssh["user"], "port": ssh["port"], "key_file": ssh["key_file"],
                "known_hosts": ssh["known_hosts"]},
        "api": {"port": api["port"], "user": api["user"], "password": api["password"], "ca_file": api["ca_file"],
                "verify_tls": True},
        "site": str(site_profile_path(Path(root))),
    }
    if container is not None:
        entry["container"] = container
    return entry


def serve_forever(root: Path) -> int:
    """Body of the lab daemon: start the services, publish connection.json, wait for SIGTERM."""
    state = LabState.load(root)
    safe_fs.write_bytes(root, root / "run" / "serve.pid", f"{os.getpid()}\n".encode())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    services = LabServices(state).start()
    try:
        conn = services.connection()
        safe_fs.write_bytes(root, connection_path(root), (json.dumps(conn, indent=2) + "\n").encode(), 0o600)
        write_site_profile(root)
        print(f"LAB: serving {root} (pid {os.getpid()})", flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        services.stop()
        conn_now = Lab(root).connection()
        if conn_now is not None and conn_now.get("pid") == os.getpid():
            connection_path(root).unlink(missing_ok=True)
        safe_fs.remove_tree(root, root / "run" / "serve.pid")
        print("LAB: stopped", flush=True)
    return 0
