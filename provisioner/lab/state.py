"""LabState: the single source of truth of the lab's simulated Proxmox VE node, kept on disk.

Everything the lab's faces show (the HTTPS API, ``pvesh``, ``pct``, ``nvidia-smi``, the SSH
endpoint) reads and writes this directory, so several processes can share one lab:

    <root>/lab.json                    LabSettings (node, PVE version, scenarios, GPUs, storage,
                                       templates, aplinfo catalogue, host_uvm_nodes, task_delay)
    <root>/private/                    the lab's secrets, outside every view of the lab (0700):
      credentials.json                 root@pam password, API token root@pam!lab, ticket secret (0600)
      tls/                             the API server's CA, certificate and key
      ssh/, client_key, known_hosts    the SSH endpoint's host key, the client key and its known_hosts
      connection.json, api-password    what `lab up` publishes for `--lab` runs
    <root>/etc/pve/lxc/<vmid>.conf     container configs (provisioner.proxmox.lxc_conf format)
    <root>/ct/<vmid>/status.json       {"status": "running"|"stopped", "pid": ..., "started": ...}
    <root>/ct/<vmid>/rootfs/           the container's root directory
    <root>/tasks/<upid>.json|.log      task status and log lines
    <root>/api-requests.jsonl          one line per API request (secrets removed)
    <root>/.lock                       fcntl lock file

API (all paths derive from `root`)::

    LabState.create(root, **settings) -> LabState       # new lab (random credentials)
    LabState.load(root) -> LabState                     # existing lab (any process)
    state.settings() -> LabSettings                     # fresh read of lab.json
    state.update_settings(**changes) -> LabSettings     # e.g. host_uvm_nodes=True (nvidia-modprobe)
    LabState.create(root, profile="h200-hgx-8x")         # a host profile (provisioner.lab.profiles)
    state.has_scenario("no-uvm") -> bool
    state.credentials() -> LabCredentials; state.credentials_path
    state.check_password(user, password) / state.check_token(tokenid, secret) -> bool
    with state.lock(): ...                              # exclusive across processes; re-entrant per thread
    state.list_cts() -> [vmid]; state.has_ct(vmid)
    state.read_conf(vmid) -> LxcConfig (CtNotFound); state.write_conf(vmid, conf); state.conf_path(vmid)
    state.get_status(vmid) -> CtStatus; state.set_status(vmid, "running"|"stopped")
    state.ct_root(vmid) -> Path; state.delete_ct(vmid)
    state.host_devices() -> {"/dev/nvidia0": (195, 0), ...}   # what exists on the lab host now
    state.new_task(type, id, user) -> upid; state.append_task_log(upid, *lines)
    state.finish_task(upid, exitstatus, log=()); state.get_task(upid) -> TaskRecord | None
    state.task_log(upid) -> [lines]; state.list_tasks() -> [TaskRecord]
    state.log_request({...})

Read-modify-write sequences must hold `lock()`; single writes are atomic (write + rename). The lab's
node and containers can write under the root (not under ``private/``), so every write here goes through
`provisioner.lab.safe_fs` (no link below the root is followed).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from provisioner.lab import safe_fs
from provisioner.lab.profiles import host_devices, profile_settings
from provisioner.lab.settings import TEMPLATE_SIZES as TEMPLATE_SIZES
from provisioner.lab.settings import LabSettings as LabSettings
from provisioner.lab.settings import StorageSpec as StorageSpec
from provisioner.proxmox.lxc_conf import LxcConfig
from provisioner.proxmox.tasks import decode_upid, encode_upid, final_log_line

LAB_ROOT_ENV = "PROVISIONER_LAB_ROOT"

KNOWN_SCENARIOS = (
    "driver-mismatch", "no-uvm", "ssh-drop", "task-fails", "start-fails", "api-timeout", "disk-full", "shm-small",
    "apt-lock", "corrupt-download", "installer-killed", "fabricmanager-down",
)

NVIDIA_MAJOR = 195


class CtNotFound(KeyError):
    """No config file for this vmid."""


class ConfigLockTimeout(Exception):
    """PVE's config lock stayed taken past the timeout (the message is PVE's)."""


class LabCredentials(BaseModel):
    """credentials.json (mode 0600). Never print these; print `LabState.credentials_path` instead."""

    model_config = ConfigDict(extra="forbid")
    user: str = "root@pam"
    password: str
    token_id: str = "root@pam!lab"  # noqa: S105 - an identity, not a secret
    token_value: str
    ticket_secret: str

    @property
    def token_name(self) -> str:
        return self.token_id.split("!", 1)[1]


class CtStatus(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status: Literal["running", "stopped"] = "stopped"
    pid: int | None = None
    started: float | None = None


class TaskRecord(BaseModel):
    """A task's status file (fields as in ``GET /nodes/{node}/tasks/{upid}/status``)."""

    model_config = ConfigDict(extra="forbid")
    upid: str
    node: str
    pid: int
    pstart: int
    starttime: int
    type: str
    id: str
    user: str
    status: Literal["running", "stopped"] = "running"
    exitstatus: str | None = None
    endtime: int | None = None


def _atomic_write(root: Path, path: Path, data: str, mode: int = 0o644) -> None:
    safe_fs.write_bytes(root, path, data.encode(), mode)


#: the directory of the lab's secrets under its root (never bound into a view: `provisioner.lab.sandbox`)
PRIVATE_DIR = "private"


def private_dir(root: Path) -> Path:
    return root / PRIVATE_DIR


def bin_dir(root: Path) -> Path:
    """The lab's stand-in commands (first on the node view's PATH)."""
    return root / "bin"


def make_private_dir(root: Path) -> Path:
    d = private_dir(root)
    safe_fs.make_dirs(root, d, 0o700)
    fd = safe_fs.open_dir(root, d)
    try:
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return d


def _task_stem(upid: str) -> str:
    return upid.strip(":").replace(":", "_").replace("!", "+").replace("/", "_")


class LabState:
    """Handle on a lab directory; cheap to construct, safe to use from several processes."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).resolve()
        self._rlock = threading.RLock()
        self._local = threading.local()

    # -- creation / loading ----------------------------------------------------------------
    @classmethod
    def create(cls, root: Path | str, *, overwrite: bool = False, **settings: Any) -> LabState:
        """Create a lab at `root` with `settings` (LabSettings fields) and fresh random credentials."""
        state = cls(root)
        if state.settings_path.exists() and not overwrite:
            raise FileExistsError(f"a lab already exists at {state.root}")
        if "profile" in settings:
            settings = {**profile_settings(str(settings["profile"])), **settings}
        parsed = LabSettings(**settings)
        if "fabricmanager-down" in parsed.scenarios and "fabricmanager_active" not in settings:
            parsed.fabricmanager_active = False
        if "host_uvm_nodes" not in settings:
            parsed.host_uvm_nodes = "no-uvm" not in parsed.scenarios
        state.root.mkdir(parents=True, exist_ok=True)
        make_private_dir(state.root)
        for sub in ("etc/pve/lxc", "ct", "tasks"):
            (state.root / sub).mkdir(parents=True, exist_ok=True)
        creds = LabCredentials(
            password=secrets.token_urlsafe(18),
            token_value=str(uuid.uuid4()),
            ticket_secret=secrets.token_hex(32),
        )
        _atomic_write(state.root, state.credentials_path, creds.model_dump_json(indent=2), 0o600)
        _atomic_write(state.root, state.settings_path, parsed.model_dump_json(indent=2))
        return state

    @classmethod
    def load(cls, root: Path | str | None = None) -> LabState:
        """Open an existing lab (`root` defaults to $PROVISIONER_LAB_ROOT)."""
        if root is None:
            env = os.environ.get(LAB_ROOT_ENV)
            if not env:
                raise FileNotFoundError(f"no lab root given and ${LAB_ROOT_ENV} is not set")
            root = env
        state = cls(root)
        if not state.settings_path.exists():
            raise FileNotFoundError(f"no lab at {state.root} (missing lab.json)")
        return state

    # -- paths -----------------------------------------------------------------------------
    @property
    def settings_path(self) -> Path:
        return self.root / "lab.json"

    @property
    def credentials_path(self) -> Path:
        return private_dir(self.root) / "credentials.json"

    @property
    def tls_dir(self) -> Path:
        return private_dir(self.root) / "tls"

    @property
    def requests_log_path(self) -> Path:
        return self.root / "api-requests.jsonl"

    def config_lock_path(self, vmid: int) -> Path:
        """The node's ``/run/lock/lxc/pve-config-<vmid>.lock`` (pve-container src/PVE/LXC/Config.pm
        ``config_file_lock``: ``$lockdir = "/run/lock/lxc"``), in the node view's ``/run``."""
        return self.root / "node" / "fs" / "run" / "lock" / "lxc" / f"pve-config-{int(vmid)}.lock"

    @contextmanager
    def config_lock(self, vmid: int, timeout: float = 10.0) -> Iterator[None]:
        """PVE's ``lock_config``: flock on `config_lock_path` (AbstractConfig ``lock_config_full``, default
        timeout 10 s; on timeout PVE dies ``can't lock file '<path>' - got timeout``). A raw editor of the
        config on the node (``flock`` on the same path) and the lab's API writers exclude each other."""
        path = self.config_lock_path(vmid)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise ConfigLockTimeout(f"can't lock file '/run/lock/lxc/pve-config-{int(vmid)}.lock' "
                                                "- got timeout") from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)

    def conf_path(self, vmid: int) -> Path:
        return self.root / "etc" / "pve" / "lxc" / f"{int(vmid)}.conf"

    def ct_dir(self, vmid: int) -> Path:
        return self.root / "ct" / str(int(vmid))

    # -- locking ---------------------------------------------------------------------------
    @contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive lock over the lab (fcntl.flock on <root>/.lock); re-entrant within a thread."""
        with self._rlock:
            depth = getattr(self._local, "depth", 0)
            if depth == 0:
                fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._local.fd = fd
            self._local.depth = depth + 1
            try:
                yield
            finally:
                self._local.depth -= 1
                if self._local.depth == 0:
                    fcntl.flock(self._local.fd, fcntl.LOCK_UN)
                    os.close(self._local.fd)

    # -- settings / credentials ------------------------------------------------------------
    def settings(self) -> LabSettings:
        return LabSettings.model_validate_json(safe_fs.read_bytes(self.root, self.settings_path))

    def update_settings(self, **changes: Any) -> LabSettings:
        with self.lock():
            current = self.settings().model_dump()
            current.update(changes)
            new = LabSettings.model_validate(current)
            _atomic_write(self.root, self.settings_path, new.model_dump_json(indent=2))
            return new

    def has_scenario(self, name: str) -> bool:
        return name in self.settings().scenarios

    def credentials(self) -> LabCredentials:
        return LabCredentials.model_validate_json(self.credentials_path.read_text())

    def check_password(self, username: str, password: str) -> bool:
        creds = self.credentials()
        return username == creds.user and secrets.compare_digest(password.encode(), creds.password.encode())

    def check_token(self, token_id: str, secret: str) -> bool:
        creds = self.credentials()
        return token_id == creds.token_id and secrets.compare_digest(secret.encode(), creds.token_value.encode())

    # -- host devices ----------------------------------------------------------------------
    def host_devices(self) -> dict[str, tuple[int, int]]:
        """Character devices that exist on the lab host now: path -> (major, minor) (see
        `provisioner.lab.profiles.host_devices`: the profile plus which nodes were created since boot)."""
        return host_devices(self.settings())

    # -- containers ------------------------------------------------------------------------
    def list_cts(self) -> list[int]:
        d = self.root / "etc" / "pve" / "lxc"
        if not d.is_dir():
            return []
        return sorted(int(p.stem) for p in d.glob("*.conf") if p.stem.isdigit())

    def has_ct(self, vmid: int) -> bool:
        return self.conf_path(vmid).exists()

    def read_conf(self, vmid: int) -> LxcConfig:
        try:
            return LxcConfig.parse(safe_fs.read_bytes(self.root, self.conf_path(vmid)).decode())
        except FileNotFoundError:
            raise CtNotFound(vmid) from None

    def write_conf(self, vmid: int, conf: LxcConfig) -> None:
        _atomic_write(self.root, self.conf_path(vmid), conf.render(), 0o640)

    def get_status(self, vmid: int) -> CtStatus:
        path = self.ct_dir(vmid) / "status.json"
        if not path.exists():
            if not self.has_ct(vmid):
                raise CtNotFound(vmid)
            return CtStatus()
        return CtStatus.model_validate_json(safe_fs.read_bytes(self.root, path))

    def set_status(self, vmid: int, status: Literal["running", "stopped"], pid: int | None = None) -> CtStatus:
        if status == "running":
            new = CtStatus(status="running", pid=pid or 100000 + secrets.randbelow(3_000_000), started=time.time())
        else:
            new = CtStatus(status="stopped")
        _atomic_write(self.root, self.ct_dir(vmid) / "status.json", new.model_dump_json())
        return new

    def ct_root(self, vmid: int) -> Path:
        root = self.ct_dir(vmid) / "rootfs"
        safe_fs.make_dirs(self.root, root)
        return root

    def delete_ct(self, vmid: int) -> None:
        with self.lock():
            safe_fs.remove_tree(self.root, self.conf_path(vmid))
            safe_fs.remove_tree(self.root, self.ct_dir(vmid))

    # -- tasks -----------------------------------------------------------------------------
    def _task_paths(self, upid: str) -> tuple[Path, Path]:
        stem = _task_stem(upid)
        return self.root / "tasks" / f"{stem}.json", self.root / "tasks" / f"{stem}.log"

    def new_task(self, type_: str, id_: str, user: str) -> str:
        """Register a running task and return its UPID (PVE format, trailing colon)."""
        node = self.settings().node
        with self.lock():
            while True:
                pid = 1000 + secrets.randbelow(4_000_000)
                pstart = 100_000 + secrets.randbelow(90_000_000)
                upid = encode_upid(node, pid, pstart, int(time.time()), type_, id_, user)
                status_path, log_path = self._task_paths(upid)
                if not status_path.exists():
                    break
            rec = TaskRecord(upid=upid, node=node, pid=pid, pstart=pstart, starttime=int(time.time()),
                             type=type_, id=id_, user=user)
            _atomic_write(self.root, status_path, rec.model_dump_json())
            safe_fs.write_bytes(self.root, log_path, b"")
        return upid

    def append_task_log(self, upid: str, *lines: str) -> None:
        _, log_path = self._task_paths(upid)
        with self.lock():
            safe_fs.append_bytes(self.root, log_path, "".join(line.rstrip("\n") + "\n" for line in lines).encode())

    def finish_task(self, upid: str, exitstatus: str, log: Sequence[str] = ()) -> TaskRecord:
        """Append `log` and PVE's final line (TASK OK / TASK ERROR: ... / TASK WARNINGS: n); mark stopped."""
        status_path, _ = self._task_paths(upid)
        with self.lock():
            rec = self.get_task(upid)
            if rec is None:
                raise KeyError(upid)
            lines = list(log)
            if exitstatus != "OK" and lines and lines[-1] != "":
                lines.append("")  # PVE starts TASK ERROR/WARNINGS on a new line
            self.append_task_log(upid, *lines, final_log_line(exitstatus))
            rec = rec.model_copy(update={"status": "stopped", "exitstatus": exitstatus, "endtime": int(time.time())})
            _atomic_write(self.root, status_path, rec.model_dump_json())
            return rec

    def get_task(self, upid: str) -> TaskRecord | None:
        try:
            decode_upid(upid)
        except ValueError:
            return None
        status_path, _ = self._task_paths(upid)
        try:
            rec = TaskRecord.model_validate_json(safe_fs.read_bytes(self.root, status_path))
        except FileNotFoundError:
            return None
        return rec if rec.upid == upid else None

    def task_log(self, upid: str) -> list[str]:
        _, log_path = self._task_paths(upid)
        try:
            return safe_fs.read_bytes(self.root, log_path).decode(errors="replace").splitlines()
        except FileNotFoundError:
            return []

    def list_tasks(self) -> list[TaskRecord]:
        out = []
        for p in sorted((self.root / "tasks").glob("*.json")):
            try:
                out.append(TaskRecord.model_validate_json(p.read_text()))
            except (OSError, ValueError):
                continue
        return sorted(out, key=lambda r: r.starttime, reverse=True)

    # -- request log -----------------------------------------------------------------------
    def log_request(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, sort_keys=True, default=str)
        with self.lock():
            safe_fs.append_bytes(self.root, self.requests_log_path, (line + "\n").encode())

    def read_request_log(self) -> list[dict[str, Any]]:
        if not self.requests_log_path.exists():
            return []
        return [json.loads(line) for line in self.requests_log_path.read_text().splitlines() if line.strip()]
