"""PVE task identifiers (UPID) and task exit statuses — pure functions.

UPID format (pve-common src/PVE/UPID.pm): ``UPID:$node:$pid:$pstart:$starttime:$type:$id:$user:``
printed with ``"UPID:%s:%08X:%08X:%08X:%s:%s:%s:"`` (note the trailing colon).
A task is successful when its ``exitstatus`` is ``OK`` or ``WARNINGS: <n>`` (``status_is_error``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

UPID_RE = re.compile(
    r"^UPID:([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?):([0-9A-Fa-f]{8}):([0-9A-Fa-f]{8,9}):"
    r"([0-9A-Fa-f]{8}):([^:\s/]+):([^:\s/]*):([^:\s/]+):$"
)
_WARNINGS_RE = re.compile(r"^WARNINGS: (\d+)$")


@dataclass(frozen=True)
class Upid:
    """A decoded UPID. `user` is the full identity (``root@pam`` or ``root@pam!token``)."""

    node: str
    pid: int
    pstart: int
    starttime: int
    type: str
    id: str
    user: str

    def encode(self) -> str:
        return encode_upid(self.node, self.pid, self.pstart, self.starttime, self.type, self.id, self.user)

    @property
    def tokenid(self) -> str | None:
        """The token name when the task was started with an API token."""
        return self.user.split("!", 1)[1] if "!" in self.user else None

    @property
    def userid(self) -> str:
        return self.user.split("!", 1)[0]


def encode_upid(node: str, pid: int, pstart: int, starttime: int, type_: str, id_: str, user: str) -> str:
    """Encode a UPID exactly like PVE's ``upid_encode``."""
    return f"UPID:{node}:{pid:08X}:{pstart:08X}:{starttime:08X}:{type_}:{id_}:{user}:"


def decode_upid(upid: str) -> Upid:
    """Decode a UPID; raises ValueError("unable to parse worker upid") like PVE."""
    m = UPID_RE.match(upid)
    if not m:
        raise ValueError("unable to parse worker upid")
    return Upid(
        node=m.group(1),
        pid=int(m.group(3), 16),
        pstart=int(m.group(4), 16),
        starttime=int(m.group(5), 16),
        type=m.group(6),
        id=m.group(7),
        user=m.group(8),
    )


def exitstatus_is_ok(exitstatus: str) -> bool:
    """PVE's ``status_is_error`` negated: ``OK`` and ``WARNINGS: n`` are success."""
    return exitstatus == "OK" or bool(_WARNINGS_RE.match(exitstatus))


def exitstatus_warnings(exitstatus: str) -> int:
    m = _WARNINGS_RE.match(exitstatus)
    return int(m.group(1)) if m else 0


def final_log_line(exitstatus: str) -> str:
    """The last line PVE writes into a task log for a given exit status."""
    if exitstatus == "OK":
        return "TASK OK"
    if m := _WARNINGS_RE.match(exitstatus):
        return f"TASK WARNINGS: {m.group(1)}"
    return f"TASK ERROR: {exitstatus}"


@dataclass(frozen=True)
class TaskResult:
    """A task that stopped successfully (errors raise TaskFailed instead)."""

    upid: str
    exitstatus: str
    warnings: int = 0
    log: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return exitstatus_is_ok(self.exitstatus)


@dataclass(frozen=True)
class WaitPolicy:
    """How long and how often to poll a task: most end within a second, so poll soon, then back off
    to `max_poll_s`; report progress every `progress_every_s`; give up after `timeout_s`."""

    timeout_s: float
    first_poll_s: float = 0.1
    max_poll_s: float = 2.0
    progress_every_s: float = 5.0

    def intervals(self) -> Iterator[float]:
        interval = self.first_poll_s
        while True:
            yield interval
            interval = min(interval * 2, self.max_poll_s)
