"""Builds what a run needs for one target: the node transport, the Proxmox API client, lab overrides."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from provisioner import secrets
from provisioner.events import Bus
from provisioner.paths import lab_dir
from provisioner.playbook import ApiSettings, Playbook, SshSettings, Target
from provisioner.transport.base import Transport
from provisioner.transport.local import LocalTransport
from provisioner.transport.ssh import SshTarget, SshTransport


class LabNotRunning(RuntimeError):
    pass


def lab_connection(root: Path | None = None) -> dict[str, Any]:
    path = (root or lab_dir()) / "connection.json"
    if not path.exists():
        raise LabNotRunning(f"the lab is not running (no {path}); start it with `provisioner lab up`")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def point_at_lab(playbook: Playbook, root: Path | None = None) -> Playbook:
    """The same playbook with its target replaced by the running lab's endpoints."""
    conn = lab_connection(root)
    ssh = SshSettings(user=conn["ssh"]["user"], port=conn["ssh"]["port"], key_file=conn["ssh"]["key_file"],
                      known_hosts=conn["ssh"]["known_hosts"])
    api = ApiSettings(port=conn["api"]["port"], user=conn["api"]["user"], password=conn["api"]["password"],
                      ca_file=conn["api"]["ca_file"], verify_tls=True)
    target = playbook.target.model_copy(update={"host": conn["ssh"]["host"], "node": conn["node"], "ssh": ssh,
                                                "api": api, "local": False})
    return playbook.model_copy(update={"target": target})


def host_label(target: Target) -> str:
    return target.host if target.ssh.port == 22 else f"{target.host}:{target.ssh.port}"


def node_transport(target: Target, bus: Bus, *, trust_new_host: bool = False) -> Transport:
    label = host_label(target)
    if target.local:
        return LocalTransport(bus, label)
    return SshTransport(SshTarget(host=target.host, port=target.ssh.port, user=target.ssh.user,
                                  key_file=target.ssh.key_file, known_hosts=target.ssh.known_hosts,
                                  trust_new_host=trust_new_host), bus)


def pve_factory(target: Target) -> Callable[[], Any] | None:
    """A callable that logs in to the Proxmox API on first use (None when no API is configured)."""
    api = target.api
    if api is None:
        return None

    def make() -> Any:
        from provisioner.proxmox.client import PveClient

        password = secrets.resolve(api.password) if api.password else None
        token_value = secrets.resolve(api.token_value) if api.token_value else None
        verify: bool | str = api.ca_file if (api.verify_tls and api.ca_file) else api.verify_tls
        return PveClient.https(target.host, port=api.port, user=api.user, password=password,
                               token_name=api.token_name, token_value=token_value, verify=verify,
                               fingerprint=api.fingerprint)

    return make


def lab_shared(root: Path | None = None) -> dict[str, Any]:
    """Endpoints of the lab that steps use instead of the internet (wheel index, driver server)."""
    conn = lab_connection(root)
    mirror = conn.get("driver_mirror")
    if mirror and not mirror.rstrip("/").endswith("/XFree86"):
        mirror = mirror.rstrip("/") + "/XFree86"  # the layout of download.nvidia.com
    return {"lab_index_url": conn.get("index_url"), "lab_driver_mirror": mirror,
            "lab_torch_python": _torch_python(),
            "lab_pypi_url": conn.get("pypi_url"),
            # LAB: node-side locks in the lab's own root (see provisioner/node_lock.py)
            "lab_node_lock_dir": f"{conn['root']}/run/lock/gpu-provisioner" if conn.get("root") else None}


def _torch_python() -> str | None:
    """LAB: an interpreter of this machine with a real (CPU) torch, for the burn-in's gloo run."""
    import importlib.util
    import sys

    return sys.executable if importlib.util.find_spec("torch") is not None else None
