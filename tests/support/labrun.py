"""Run the shipped playbook against private labs, headless, and compare what it leaves behind.

Used by tests/test_faults.py: one lab per fault scenario (its own root, state and download
cache), `provisioner replay --lab` as a user runs it (a subprocess, env PROVISIONER_LAB_ROOT /
PROVISIONER_STATE_DIR / PROVISIONER_CACHE_DIR), the run log read back event by event, and a
normalized snapshot of the final state (container config, userspace driver files, the venv's
packages and records) so that a run that survived a fault can be compared with a clean one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from provisioner.environ import copy_environ
from tests.support.streams import streamed

REPO = Path(__file__).resolve().parents[2]
SHIPPED_PLAYBOOK = REPO / "playbooks" / "blackwell-8gpu-lxc.yaml"
VMID = 200
#: another team's container on the same node: no fault and no replay may touch it
FOREIGN_VMID = 101
FOREIGN_CONF = """\
arch: amd64
cores: 4
features: nesting=1
hostname: inference-team
memory: 8192
net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:5E:0A:01,ip=dhcp,type=veth
ostype: debian
rootfs: local-lvm:vm-101-disk-0,size=32G
swap: 512
tags: inference
unprivileged: 1
"""
REPLAY_TIMEOUT_S = 300
_PORT_RE = re.compile(r"127\.0\.0\.1:\d+")


def lab_importable() -> bool:
    try:
        import provisioner.lab.lab  # noqa: F401
    except ImportError:
        return False
    return True


def write_test_playbook(dest: Path, *, drop_kinds: Sequence[str] = ("burnin.run",),
                        params: dict[str, dict[str, Any]] | None = None, upto: str | None = None) -> Path:
    """The shipped playbook with step kinds removed, parameters overridden per kind, optionally
    cut after the step of kind `upto`."""
    doc = yaml.safe_load(SHIPPED_PLAYBOOK.read_text())
    steps = []
    for step in doc["steps"]:
        if step["kind"] in drop_kinds:
            continue
        if params and step["kind"] in params:
            step["params"] = {**step.get("params", {}), **params[step["kind"]]}
        steps.append(step)
        if upto is not None and step["kind"] == upto:
            break
    doc["steps"] = steps
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


@dataclass
class Replay:
    """One `provisioner replay` as it ended: exit code, output, recap, and its run log's events."""

    rc: int
    stdout: str
    stderr: str
    seconds: float
    recap: dict[str, Any] | None
    log_path: Path | None
    events: list[dict[str, Any]] = field(default_factory=list)

    def steps(self) -> dict[str, dict[str, Any]]:
        """step kind -> its step.finished event (the last one of that kind)."""
        return {e["step"]: e for e in self.events if e["kind"] == "step.finished"}

    def status_of(self, kind: str) -> str | None:
        ev = self.steps().get(kind)
        return ev["status"] if ev else None

    def message_of(self, kind: str) -> str:
        ev = self.steps().get(kind)
        return str(ev["message"]) if ev else ""

    def texts(self) -> list[str]:
        """Every message and output line the run logged (for assertions on warnings)."""
        return [e.get("text") or e.get("line") or "" for e in self.events if e["kind"] in ("message", "output")]

    def describe(self) -> str:
        return f"exit {self.rc} after {self.seconds:.1f}s; stderr tail:\n{self.stderr[-4000:]}"


def read_run_log(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSONL run log, each validated as a typed event (raises if one is not)."""
    from provisioner.events import EVENT_ADAPTER

    events = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            event = EVENT_ADAPTER.validate_json(line)
        except ValueError as exc:
            raise AssertionError(f"{path}:{n} is not a valid event: {exc}\n{line[:300]}") from None
        events.append(event.model_dump(mode="json"))
    return events


class LabRun:
    """A private lab at `base/lab` with the tool's state and download cache under `base`.

    `lab_cache` is where the lab daemon builds its wheel index (shared between labs: building it
    is the slow part of `lab up`); the replays get their own download cache, so a driver
    download in one lab is never served from another lab's cache.
    """

    def __init__(self, base: Path, lab_cache: Path, scenarios: Sequence[str] = (), *,
                 keep_state: bool = False, profile: str = "rtxpro6000-8x") -> None:
        self.base = base
        self.root = base / "lab"
        self.state_dir = base / "state"
        self.cache_dir = base / "cache"
        self.lab_cache = lab_cache
        self.scenarios = list(scenarios)
        #: the host profile the lab plays (provisioner.lab.profiles; docs/lab-hosts.md)
        self.profile = profile
        #: `up()` starts the lab on the node and containers already on disk (a stopped lab, a golden copy)
        self.keep_state = keep_state

    def env(self) -> dict[str, str]:
        env = copy_environ()  # labs run from worker threads while pytest changes os.environ
        env.update(PROVISIONER_LAB_ROOT=str(self.root), PROVISIONER_STATE_DIR=str(self.state_dir),
                   PROVISIONER_CACHE_DIR=str(self.cache_dir), NO_COLOR="1", COLUMNS="200")
        env.pop("PVE_PASSWORD", None)
        return env

    # -- lab lifecycle -----------------------------------------------------------------------
    def up(self) -> dict[str, Any]:
        from tests.support.lab import up_daemon  # the one module that starts labs (it imports this one)

        # the lab daemon's environment is passed, never set in os.environ (which every thread shares)
        env = copy_environ() | {"PROVISIONER_CACHE_DIR": str(self.lab_cache)}
        return up_daemon(self.root, self.scenarios, env=env, keep_state=self.keep_state, profile=self.profile)

    def down(self) -> None:
        from tests.support.lab import down_daemon

        down_daemon(self.root)

    @contextlib.contextmanager
    def running(self) -> Iterator[LabRun]:
        self.up()
        try:
            yield self
        finally:
            self.down()

    def state(self) -> Any:
        from provisioner.lab.state import LabState

        return LabState.load(self.root)

    def set_scenarios(self, *names: str) -> None:
        """What the operator's fix amounts to in the lab: the persistent fault is gone (or another is on)."""
        self.state().update_settings(scenarios=list(names))

    def arm_once(self, name: str) -> None:
        """(Re-)arm a fire-once scenario (its marker in <root>/run/once/, as `Lab.create_state` writes it)."""
        state = self.state()
        scenarios = state.settings().scenarios
        if name not in scenarios:
            state.update_settings(scenarios=[*scenarios, name])
        once = self.root / "run" / "once"
        once.mkdir(parents=True, exist_ok=True)
        (once / name).write_text("LAB: fires once\n")

    def add_foreign_container(self) -> None:
        """Another team's running container on the node, with a file of theirs in it."""
        from provisioner.proxmox.lxc_conf import LxcConfig

        state = self.state()
        state.write_conf(FOREIGN_VMID, LxcConfig.parse(FOREIGN_CONF))
        state.set_status(FOREIGN_VMID, "running")
        data = state.ct_root(FOREIGN_VMID) / "srv" / "model.bin"
        data.parent.mkdir(parents=True, exist_ok=True)
        data.write_bytes(b"weights of another team\n" * 64)

    def foreign_fingerprint(self) -> dict[str, str]:
        """Config and every file of the foreign container, hashed (its status too)."""
        state = self.state()
        out = {"conf": state.conf_path(FOREIGN_VMID).read_text(), "status": state.get_status(FOREIGN_VMID).status}
        root = state.ct_dir(FOREIGN_VMID) / "rootfs"
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
        return out

    # -- runs ---------------------------------------------------------------------------------
    def replay(self, playbook: Path, *, timeout: float = REPLAY_TIMEOUT_S,
               after_step: tuple[str, Callable[[], None]] | None = None, extra: Sequence[str] = ()) -> Replay:
        """`provisioner replay PLAYBOOK --lab --json`; `after_step=(kind, fn)` calls fn() as soon as
        the run log records that step as finished (to change the lab while the run goes on)."""
        argv = [sys.executable, "-m", "provisioner", *streamed(["replay", str(playbook), "--lab", "--json", *extra])]
        runs = self.state_dir / "runs"
        before = set(runs.glob("*.jsonl")) if runs.is_dir() else set()
        started = time.monotonic()
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, env=self.env(), cwd=REPO)
            try:
                if after_step is not None:
                    _call_after_step(proc, runs, before, *after_step)
                proc.wait(timeout=max(1.0, timeout - (time.monotonic() - started)))
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        seconds = time.monotonic() - started
        recap = None
        lines = stdout.strip().splitlines()
        if lines:
            with contextlib.suppress(ValueError):
                recap = json.loads(lines[-1])
        m = re.search(r"run log: (\S+\.jsonl)", stderr)
        log_path = Path(m.group(1)) if m else None
        events = read_run_log(log_path) if log_path is not None else []
        return Replay(proc.returncode, stdout, stderr, seconds, recap, log_path, events)


def _call_after_step(proc: subprocess.Popen[str], runs: Path, before: set[Path], kind: str,
                     fn: Callable[[], None]) -> None:
    """Tail the run's new JSONL log until `kind` finishes, then call fn (raises if the run ends first)."""
    log: Path | None = None
    seen = 0
    while True:
        if log is None and runs.is_dir():
            new = [p for p in runs.glob("*.jsonl") if p not in before]
            log = new[0] if new else None
        if log is not None:
            text = log.read_text()
            complete = text[: text.rfind("\n") + 1]
            for line in complete[seen:].splitlines():
                event = json.loads(line)
                if event.get("kind") == "step.finished" and event.get("step") == kind:
                    fn()
                    return
            seen = len(complete)
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before step {kind} finished")
        time.sleep(0.05)


# -- the final state ------------------------------------------------------------------------

def _norm(text: str) -> str:
    return _PORT_RE.sub("127.0.0.1:PORT", text)


def snapshot(root: Path, vmid: int = VMID) -> dict[str, Any]:
    """What the playbook provisions, read from the lab's disk and normalized (lab ports, run times).

    - the container's config (its lines, as Proxmox stores them) and status
    - the NVIDIA userspace in the container: library versions, nvidia-smi, the installer log's
      verdict, no installer left behind in /root
    - the venv: the installed distributions (name==version, from the dist-info metadata),
      every record gpu-provisioner wrote (.provisioner/*, runtime.json), no build marker left,
      the Python it runs
    """
    from provisioner.lab.state import LabState

    state = LabState.load(root)
    rootfs = state.ct_dir(vmid) / "rootfs"
    libdir = rootfs / "usr/lib/x86_64-linux-gnu"
    snap: dict[str, Any] = {
        "conf": state.conf_path(vmid).read_text().splitlines() if state.has_ct(vmid) else None,
        "status": state.get_status(vmid).status if state.has_ct(vmid) else None,
        "nvml_libs": sorted(p.name for p in libdir.glob("libnvidia-ml.so.*")),
        "cuda_libs": sorted(p.name for p in libdir.glob("libcuda.so.*")),
        "nvidia_smi": (rootfs / "usr/bin/nvidia-smi").exists(),
        "installer_done": [ln for ln in _read(rootfs / "var/log/nvidia-installer.log").splitlines()
                           if "is now complete" in ln],
        "root_leftovers": sorted(p.name for p in (rootfs / "root").glob("NVIDIA-*")),
    }
    venv = rootfs / "opt/torch-venv"
    site = sorted(venv.glob("lib/python3*/site-packages"))
    dists = []
    for meta in sorted(site[0].glob("*.dist-info/METADATA")) if site else []:
        fields = dict(ln.split(": ", 1) for ln in meta.read_text().splitlines()[:10] if ": " in ln)
        dists.append(f"{fields.get('Name')}=={fields.get('Version')}")
    snap["venv"] = {
        "exists": venv.is_dir(),
        "python": [p.name for p in site],
        "dists": dists,
        "broken_files": broken_files(site[0]) if site else [],
        "building_marker": (venv / ".provisioner-building").exists(),
        "records": {p.name: _norm(p.read_text()) for p in sorted((venv / ".provisioner").glob("*")) if p.is_file()},
        "runtime": json.loads(_norm(_read(venv / "runtime.json")) or "null"),
    }
    return snap


def broken_files(site: Path) -> list[str]:
    """Files that a distribution's RECORD lists but that are missing or differ (size, sha256): what a
    half-finished install leaves behind while its dist-info already says "installed"."""
    import base64
    import csv

    out = []
    for record in sorted(site.glob("*.dist-info/RECORD")):
        for row in csv.reader(record.read_text().splitlines()):
            if not row or not row[0] or row[0].startswith("/"):
                continue  # (absolute paths would name the container's files, not these)
            rel, digest, size = [*row, "", ""][:3]
            path = site / rel
            if not path.is_file():
                out.append(f"{record.parent.name}: {rel} missing")
            elif size and path.stat().st_size != int(size):
                out.append(f"{record.parent.name}: {rel} has {path.stat().st_size} bytes, RECORD says {size}")
            elif digest.startswith("sha256="):
                actual = base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).decode().rstrip("=")
                if actual != digest[7:]:
                    out.append(f"{record.parent.name}: {rel} differs from its RECORD hash")
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def diff_snapshots(want: dict[str, Any], got: dict[str, Any], prefix: str = "") -> list[str]:
    """Human-readable differences between two snapshots (empty when identical)."""
    out: list[str] = []
    for key in sorted(set(want) | set(got)):
        a, b = want.get(key), got.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += diff_snapshots(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: clean run {str(a)[:400]!s} != this run {str(b)[:400]!s}")
    return out


# -- a flaky mirror in front of the lab's driver server ---------------------------------------

class FlakyMirror:
    """An HTTP mirror of the lab's driver server (the download.nvidia.com layout) that honours
    ``Range`` requests like a real CDN and cuts the first full download of the ``.run`` off after
    `cut_fraction` of its bytes (the connection closes mid-body, Content-Length promised in full).

    `requests` records (path, Range header or None, status) for every request.
    """

    def __init__(self, upstream: str, *, cut_fraction: float | None = 0.5) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.upstream = upstream.rstrip("/")
        self.cut_fraction = cut_fraction
        self.requests: list[tuple[str, str | None, int]] = []
        self._lock = threading.Lock()
        mirror = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                mirror._serve(self)

            def do_HEAD(self) -> None:  # a CDN answers HEAD (the driver step probes where a .run is published)
                req = urllib.request.Request(mirror.upstream + self.path, method="HEAD")
                try:
                    with urllib.request.urlopen(req, timeout=30) as resp:
                        status, length = int(resp.status), resp.headers.get("Content-Length", "0")
                except urllib.error.HTTPError as exc:
                    status, length = exc.code, "0"
                self.send_response(status)
                self.send_header("Content-Length", length)
                self.end_headers()

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> FlakyMirror:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def _fetch(self, path: str) -> tuple[int, bytes]:
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(self.upstream + path, timeout=30) as resp:
                return int(resp.status), resp.read()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read()

    def _serve(self, handler: Any) -> None:
        path = handler.path.split("?", 1)[0]
        rng = handler.headers.get("Range")
        status, body = self._fetch(path)
        start = 0
        if status == 200 and rng:
            m = re.fullmatch(r"bytes=(\d+)-", rng.strip())
            if m is None:
                status, body = 416, b""
            else:
                start = int(m.group(1))
                status = 206 if start < len(body) else 416
        cut = None
        with self._lock:
            if (status == 200 and path.endswith(".run") and self.cut_fraction is not None
                    and not any(p == path and s == 200 for p, _, s in self.requests)):
                cut = int(len(body) * self.cut_fraction)
            self.requests.append((path, rng, status))
        if status == 416:
            handler.send_response(416)
            handler.send_header("Content-Range", f"bytes */{len(body)}")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        payload = body[start:]
        handler.send_response(status)
        handler.send_header("Content-Type", "application/octet-stream" if path.endswith(".run") else "text/plain")
        handler.send_header("Content-Length", str(len(payload)))
        handler.send_header("Accept-Ranges", "bytes")
        if status == 206:
            handler.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        if cut is not None:
            handler.send_header("Connection", "close")
        handler.end_headers()
        if cut is None:
            handler.wfile.write(payload)
            return
        handler.wfile.write(payload[:cut])
        handler.wfile.flush()
        handler.close_connection = True
        import socket

        with contextlib.suppress(OSError):
            handler.connection.shutdown(socket.SHUT_RDWR)
