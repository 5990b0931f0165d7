"""What a step sees while it runs: transports to the node and container, facts, the event bus."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from provisioner.events import Bus, Message, Progress
from provisioner.facts.base import Fact, FactCache
from provisioner.payloads import Resolved
from provisioner.playbook import Playbook
from provisioner.steps.state import RunState
from provisioner.transport.base import Transport
from provisioner.transport.container import ContainerTransport
from provisioner.words import Words

T = TypeVar("T")


@dataclass(frozen=True)
class ChecksumConfirmation:
    """A download whose publisher gives no checksum: the operator confirms `sha256` (computed here) once;
    the step then records it in `resolved`, and every later replay verifies the file against it."""

    host: str
    step: str
    url: str
    filename: str
    sha256: str
    size: int


#: the front end's hook: show the request, return True when the operator confirms the sha256
ConfirmChecksum = Callable[[ChecksumConfirmation], Awaitable[bool]]


@dataclass
class StepContext:
    playbook: Playbook
    host: str
    bus: Bus
    node: Transport
    mode: str = "apply"  # "plan" or "apply"
    facts: FactCache = field(default_factory=FactCache)
    # What steps learn and hand to later steps (typed), and the playbook's recorded `resolved` facts.
    state: RunState = field(default_factory=RunState)
    resolved: Resolved = field(default_factory=Resolved)
    pve_factory: Any = None  # callable returning a PveClient, set by the runner
    # Set by an interactive front end (the TUI): asked before an unpublished checksum is trusted.
    # Headless (None) the playbook must pin it (`sha256:`) or have it in `resolved`.
    confirm_checksum: ConfirmChecksum | None = None
    words: Words = field(default_factory=Words)  # fixes in the words of the face in use (provisioner/words.py)
    _pve: Any = None
    _containers: dict[int, ContainerTransport] = field(default_factory=dict)

    @property
    def vmid(self) -> int:
        """The playbook's container: `target.container`, else the id lxc.create took from /cluster/nextid
        (recorded in `resolved.vmid`, so a replay finds the same container)."""
        ct = self.playbook.target.container or self.state.vmid or self.resolved.vmid
        if ct is None:
            raise ValueError("the playbook's target has no container id and lxc.create has not chosen one")
        return int(ct)

    def container(self, vmid: int | None = None) -> ContainerTransport:
        vmid = self.vmid if vmid is None else vmid
        if vmid not in self._containers:
            self._containers[vmid] = ContainerTransport(self.node, vmid)
        return self._containers[vmid]

    def pve(self) -> Any:
        if self._pve is None:
            if self.pve_factory is None:
                raise RuntimeError("no Proxmox API configured for this target")
            self._pve = self.pve_factory()
        return self._pve

    async def fact(self, transport: Transport, fact: Fact[T]) -> T:
        return await self.facts.get(transport, fact)

    def progress(self, task: str, completed: float, total: float | None = None, unit: str = "") -> Progress:
        return Progress(host=self.host, task=task, completed=completed, total=total, unit=unit)

    def info(self, text: str) -> Message:
        return Message(host=self.host, level="info", text=text)

    def warning(self, text: str) -> Message:
        return Message(host=self.host, level="warning", text=text)
