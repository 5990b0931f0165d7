"""Builds what a run needs for one target: the node transport, the Proxmox API client, lab overrides."""

from __future__ import annotations

import contextlib
import importlib
import json
import threading
from pathlib import Path
from typing import Any

from provisioner import secrets
from provisioner.events import Bus
from provisioner.paths import lab_dir
from provisioner.playbook import ApiSettings, Playbook, SshSettings, Target
from provisioner.transport.base import Transport
from provisioner.transport.base import host_label as transport_host_label
from provisioner.transport.local import LocalTransport
from provisioner.transport.ssh import SshTarget, SshTransport


class LabNotRunning(RuntimeError):
    pass


def lab_connection(root: Path | None = None) -> dict[str, Any]:
    path = (root or lab_dir()) / "private" / "connection.json"  # provisioner.lab.lab.connection_path
    if not path.exists():
        raise LabNotRunning(f"the lab is not running (no {path}); start it with `provisioner lab up`")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def point_at_lab(playbook: Playbook, root: Path | None = None) -> Playbook:
    """The same playbook with its target replaced by the running lab's endpoints and the lab's settings
    (`lab_settings`) in its steps."""
    conn = lab_connection(root)
    ssh = SshSettings(user=conn["ssh"]["user"], port=conn["ssh"]["port"], key_file=conn["ssh"]["key_file"],
                      known_hosts=conn["ssh"]["known_hosts"])
    api = ApiSettings(port=conn["api"]["port"], user=conn["api"]["user"], password=conn["api"]["password"],
                      ca_file=conn["api"]["ca_file"], verify_tls=True)
    target = playbook.target.model_copy(update={"host": conn["ssh"]["host"], "node": conn["node"], "ssh": ssh,
                                                "api": api, "local": False})
    return with_settings(playbook.model_copy(update={"target": target}), lab_settings(root))


def host_label(target: Target) -> str:
    """The label of a playbook's target (`transport.base.host_label`, without the user)."""
    return transport_host_label(target.host, target.ssh.port)


def node_transport(target: Target, bus: Bus, *, trust_new_host: bool = False) -> Transport:
    label = host_label(target)
    if target.local:
        return LocalTransport(bus, label)
    return SshTransport(SshTarget(host=target.host, port=target.ssh.port, user=target.ssh.user,
                                  key_file=target.ssh.key_file, known_hosts=target.ssh.known_hosts,
                                  trust_new_host=trust_new_host), bus)


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


def lab_settings(root: Path | None = None) -> dict[str, dict[str, Any]]:
    """What the running lab hands out as ordinary step parameters, by step kind: the mirrors a
    real site would configure (driver server, PyTorch wheel index, PyPI) and the burn-in's
    settings for a node with no NVML and two CPU cores. The steps never learn that it is a lab."""
    conn = lab_connection(root)
    out: dict[str, dict[str, Any]] = {"driver.userspace": {"apt_lock_backoff_max_s": 2.0},
                                      "burnin.run": {"sizes": "1KiB:256KiB", "duration_s": 2, "gemm_seconds": 1,
                                                     "nvml_gpu_count_check": False},
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
                             **({"pypi_url": pypi.rstrip("/")} if pypi else {"extras_from_torch_index": True})}
    python = _torch_python()
    if python:
        out["burnin.run"]["fallback_python"] = python
        out["burnin.multinode"]["fallback_python"] = python
    return out


def with_settings(playbook: Playbook, settings: dict[str, dict[str, Any]]) -> Playbook:
    """The playbook with `settings` (kind -> parameters) as defaults of each step of that kind: what the
    playbook sets itself wins, as a site's own mirror or sizes win over what the lab hands out."""
    steps = [spec.model_copy(update={"params": {**settings[spec.kind], **spec.params}})
             if spec.kind in settings else spec for spec in playbook.steps]
    return playbook.model_copy(update={"steps": steps})


def _torch_python() -> str | None:
    """An interpreter of this machine with a real (CPU) torch: the burn-in's fallback when the venv's
    torch has no torch.distributed (the lab's wheels carry a real torch for one Python only)."""
    import importlib.util
    import sys

    return sys.executable if importlib.util.find_spec("torch") is not None else None
