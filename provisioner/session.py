"""Builds what a run needs for one target: the node transport, the Proxmox API client, lab overrides."""

from __future__ import annotations

import contextlib
import importlib
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

from provisioner import secrets
from provisioner.events import Bus
from provisioner.paths import lab_dir
from provisioner.playbook import ApiSettings, Playbook, SshSettings, Target
from provisioner.site import SiteProfile, apply_site
from provisioner.transport.base import Transport
from provisioner.transport.base import host_label as transport_host_label
from provisioner.transport.local import LocalTransport
from provisioner.transport.ssh import SshTarget, SshTransport


class LabNotRunning(RuntimeError):
    pass


class LabSsh(TypedDict, total=False):
    host: str
    port: int
    user: str
    key_file: str
    known_hosts: str


class LabApi(TypedDict, total=False):
    port: int
    user: str
    password: str  # a secret reference (`file:<root>/private/api-password`), never the value
    token_value: str
    ca_file: str
    fingerprint: str


class LabConnection(TypedDict, total=False):
    """The running lab's `private/connection.json` (written by `provisioner.lab.lab.LabServices.connection`)."""

    lab: str
    node: str
    root: str
    ssh: LabSsh
    api: LabApi
    index_url: str
    pypi_url: str | None
    torch_python: str
    driver_mirror: str
    scenarios: list[str]
    pve: str
    pid: int


def lab_connection(root: Path | None = None) -> LabConnection:
    path = (root or lab_dir()) / "private" / "connection.json"  # provisioner.lab.lab.connection_path
    if not path.exists():
        raise LabNotRunning(f"the lab is not running (no {path}); start it with `provisioner lab up`")
    data: LabConnection = json.loads(path.read_text())
    return data


def allow_lab_secrets(root: Path | None = None) -> LabConnection:
    """A `--lab` run: the running lab names the directory of its own password file as a secrets directory
    for this process (`secrets.allow_dir`), before the playbook loads (a recording of a lab run refers
    to that file). Returns the lab's connection (LabNotRunning when none is up)."""
    conn = lab_connection(root)
    password = str((conn.get("api") or {}).get("password", ""))
    if password.startswith("file:"):
        secrets.allow_dir(Path(password[len("file:"):]).parent)
    return conn


def point_at_lab(playbook: Playbook, root: Path | None = None) -> Playbook:
    """The same playbook with its target replaced by the running lab's endpoints and the lab's site profile
    (`lab_site`) applied; the recorder writes back the playbook's own target and parameters."""
    conn = allow_lab_secrets(root)
    ssh = SshSettings(user=conn["ssh"]["user"], port=conn["ssh"]["port"], key_file=conn["ssh"]["key_file"],
                      known_hosts=conn["ssh"]["known_hosts"])
    api = ApiSettings(port=conn["api"]["port"], user=conn["api"]["user"], password=conn["api"]["password"],
                      ca_file=conn["api"]["ca_file"], verify_tls=True)
    target = playbook.target.model_copy(update={"host": conn["ssh"]["host"], "node": conn["node"], "ssh": ssh,
                                                "api": api, "local": False})
    return apply_site(playbook.model_copy(update={"target": target}), lab_site(root), target_from=playbook)


def lab_site(root: Path | None = None) -> SiteProfile:
    """The running lab as a site: its mirrors and the sizes of its CPU-only node (`lab_settings`), and the one
    Python its wheel index serves a real torch for, forced (and given back to the playbook's own on record)."""
    conn = lab_connection(root)
    python = str(conn.get("torch_python") or "")
    force = {kind: {"python": python} for kind in PYTHON_STEPS} if python else {}
    return SiteProfile(name="lab", steps=lab_settings(root), force=force)


#: the steps whose `python` chooses the venv's interpreter
PYTHON_STEPS = ("torch.resolve", "venv.build")


def python_notice(before: Playbook, after: Playbook) -> str | None:
    """One line when the lab's site profile changed the Python a step asked for."""
    asked = {str(a.params.get("python", "3.12" if a.kind == "torch.resolve" else ""))
             for a in before.steps if a.kind in PYTHON_STEPS} - {""}
    given = {str(b.params["python"]) for b in after.steps if b.kind in PYTHON_STEPS and "python" in b.params}
    if len(given) != 1 or asked <= given:
        return None
    (python,) = given
    return (f"LAB: the lab's wheel index serves torch for Python {python} only (its CPU PyTorch's cp tag): "
            f"the venv uses {python} (the playbook asks {', '.join(sorted(asked - given))}; not recorded)")


def host_label(target: Target) -> str:
    """The label of a playbook's target (`transport.base.host_label`, without the user)."""
    return transport_host_label(target.host, target.ssh.port)


def node_transport(target: Target, bus: Bus, *, trust_new_host: bool = False,
                   confirmed_fingerprint: str | None = None) -> Transport:
    """`confirmed_fingerprint`: the host key fingerprint the user confirmed (the wizard's dialog); with
    `trust_new_host` only that key is written to known_hosts."""
    label = host_label(target)
    if target.local:
        return LocalTransport(bus, label)
    return SshTransport(SshTarget(host=target.host, port=target.ssh.port, user=target.ssh.user,
                                  key_file=target.ssh.key_file, known_hosts=target.ssh.known_hosts,
                                  trust_new_host=trust_new_host, confirmed_fingerprint=confirmed_fingerprint), bus)


#: the Proxmox API client and what it pulls in (requests, urllib3, proxmoxer): ~0.3 s of imports, ~1 s at load
API_CLIENT_MODULE = "provisioner.proxmox.client"
_warm_lock = threading.Lock()
_warm_thread: threading.Thread | None = None


def _import_quietly(module: str) -> None:
    # a failed import is left to the real one (`PveFactory.__call__`), which raises it where it belongs
    with contextlib.suppress(Exception):
        importlib.import_module(module)


def warm_api_client() -> None:
    """Import the Proxmox API client in a background thread (once per process), so that the first
    step that logs in finds it loaded: the import runs while the controller waits on the node's
    commands instead of after them. Nothing is connected or logged in; `PveFactory.__call__` waits
    for the import before it uses the module, so no module is ever imported by two threads at once."""
    global _warm_thread
    with _warm_lock:
        if _warm_thread is None:
            # not a daemon: a run that ends first lets the import finish instead of killing it mid-way
            _warm_thread = threading.Thread(target=_import_quietly, args=(API_CLIENT_MODULE,),
                                            name="warm-api-client")
            _warm_thread.start()


def _wait_for_warm_import() -> None:
    with _warm_lock:
        thread = _warm_thread
    if thread is not None and thread is not threading.current_thread():
        thread.join()


class PveFactory:
    """Logs in to the target's Proxmox API on first use (`__call__`); `warm()` imports the client early."""

    def __init__(self, target: Target) -> None:
        if target.api is None:
            raise ValueError("the target has no Proxmox API configured")
        self.target = target
        self.api: ApiSettings = target.api

    def warm(self) -> None:
        warm_api_client()

    def __call__(self) -> Any:
        _wait_for_warm_import()
        from provisioner.proxmox.client import PveClient

        api, target = self.api, self.target
        password = secrets.resolve(api.password) if api.password else None
        token_value = secrets.resolve(api.token_value) if api.token_value else None
        verify: bool | str = api.ca_file if (api.verify_tls and api.ca_file) else api.verify_tls
        return PveClient.https(target.host, port=api.port, user=api.user, password=password,
                               token_name=api.token_name, token_value=token_value, verify=verify,
                               fingerprint=api.fingerprint)


def pve_factory(target: Target) -> PveFactory | None:
    """A callable that logs in to the Proxmox API on first use (None when no API is configured)."""
    return PveFactory(target) if target.api is not None else None


#: The burn-in the lab hands out for its CPU stand-in (gloo ranks sharing two cores): every phase runs on every
#: rank and is validated, at sizes that prove the plumbing rather than measure the machine's load. Three sizes
#: (1, 2, 4 KiB), a 1 s soak and 0.5 s of GEMM per rank cost about half the CPU of 1KiB:256KiB with a 2 s soak
#: (27 against 50 CPU-seconds for 8 ranks, measured on the 2-core machine). The demo and the tests use this one value.
LAB_BURNIN: dict[str, str | float] = {"sizes": "1KiB:4KiB", "duration_s": 1, "gemm_seconds": 0.5}


def lab_settings(root: Path | None = None) -> dict[str, dict[str, object]]:
    """What the running lab hands out as ordinary step parameters, by step kind: the mirrors a
    real site would configure (driver server, PyTorch wheel index, PyPI) and the burn-in's
    settings for a node with no NVML and two CPU cores. The steps never learn that it is a lab."""
    conn = lab_connection(root)
    out: dict[str, dict[str, object]] = {"driver.userspace": {"apt_lock_backoff_max_s": 2.0},
                                      "burnin.run": {**LAB_BURNIN, "nvml_gpu_count_check": False},
                                      # two CPU cores: two gloo ranks per node prove the plumbing
                                      "burnin.multinode": {"sizes": "16KiB:256KiB", "duration_s": 1,
                                                           "gemm_seconds": 0.5, "nvml_gpu_count_check": False,
                                                           "nproc_per_node": 2}}
    mirror = conn.get("driver_mirror")
    if mirror:
        if not mirror.rstrip("/").endswith("/XFree86"):
            mirror = mirror.rstrip("/") + "/XFree86"  # the layout of download.nvidia.com
        out["driver.userspace"]["driver_mirror"] = mirror
    index = conn.get("index_url")
    if index:
        # No network in the lab: without a lab PyPI its wheel index (which carries nvidia-ml-py) stands in.
        pypi = conn.get("pypi_url")
        out["venv.build"] = {"index_mirror": index.rstrip("/"),
                             **({"pypi_mirror": pypi.rstrip("/")} if pypi else {"extras_from_torch_index": True})}
    return out


def with_settings(playbook: Playbook, settings: Mapping[str, Mapping[str, object]]) -> Playbook:
    """The playbook with `settings` (kind -> parameters) as defaults of each step of that kind: what the
    playbook sets itself wins, as a site's own mirror or sizes win over what the lab hands out."""
    steps = [spec.model_copy(update={"params": {**settings[spec.kind], **spec.params}})
             if spec.kind in settings else spec for spec in playbook.steps]
    return playbook.model_copy(update={"steps": steps})
