"""Which node to collect from: an SSH host, this machine, or the running lab."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from provisioner import secrets
from provisioner.events import Bus
from provisioner.session import lab_connection
from provisioner.transport.base import Transport, host_label
from provisioner.transport.local import LocalTransport
from provisioner.transport.ssh import SshTarget, SshTransport
from provisioner.validate import host_address


@dataclass(frozen=True)
class NodeSpec:
    host: str = "localhost"
    user: str = "root"
    port: int = 22
    key_file: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    trust_new_host: bool = False
    local: bool = False  # run the node probes on this machine (the tool runs on the node itself)

    @property
    def label(self) -> str:
        if self.local:
            return "localhost"
        return host_label(self.host, self.port, self.user)


def node_transport(spec: NodeSpec, bus: Bus | None = None) -> Transport:
    if spec.local:
        return LocalTransport(bus, spec.label)
    return SshTransport(SshTarget(host=host_address(spec.host), port=spec.port, user=spec.user,
                                  key_file=spec.key_file, known_hosts=spec.known_hosts,
                                  trust_new_host=spec.trust_new_host), bus)


def lab_spec(root: Path | None = None) -> tuple[NodeSpec, list[str]]:
    """The running lab's SSH endpoint, and its credentials (to redact) resolved from their references.

    Raises `provisioner.session.LabNotRunning` when no lab is up.
    """
    conn = lab_connection(root)
    ssh = conn["ssh"]
    spec = NodeSpec(host=str(ssh["host"]), user=str(ssh.get("user", "root")), port=int(ssh["port"]),
                    key_file=ssh.get("key_file"), known_hosts=str(ssh.get("known_hosts", "~/.ssh/known_hosts")))
    known: list[str] = []
    api = conn.get("api") or {}
    for key in ("password", "token_value"):
        value = api.get(key)
        if isinstance(value, str) and value.startswith("file:"):  # the lab's own secrets directory
            secrets.allow_dir(Path(value[len("file:"):]).parent)
        if isinstance(value, str) and value:
            try:
                known.append(secrets.resolve(value) if secrets.is_ref(value) else value)
            except secrets.SecretError:
                pass
    return spec, known
