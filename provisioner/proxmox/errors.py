"""Errors raised by our Proxmox client (and shared with the lab's API handlers).

Hierarchy::

    ProxmoxError
    ├── PveError(status, message, errors)      an HTTP-style error answered by PVE
    │   ├── AuthFailed                          401 / bad credentials / missing ticket
    │   ├── PermissionDenied                    403 "Permission check failed (...)"
    │   └── InvalidRequest                      400 "Parameter verification failed." (+ errors dict)
    ├── TaskFailed(upid, exitstatus, log)       a task stopped with an error exit status
    ├── TaskTimeout(upid, timeout, status)      a task did not stop in time
    ├── TlsRejected                             server certificate / pinned fingerprint refused
    ├── HostKeyRejected                         SSH host key unknown or changed
    └── Unreachable                             connection refused, DNS, timeouts
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class ProxmoxError(Exception):
    """Base of every error of the Proxmox client."""


class PveError(ProxmoxError):
    """An error status answered by Proxmox VE (HTTP status, first-line message, per-parameter errors)."""

    def __init__(self, status: int, message: str, errors: Mapping[str, str] | None = None) -> None:
        self.status = status
        self.message = message.rstrip("\n")
        self.errors: dict[str, str] = dict(errors or {})
        detail = "; ".join(f"{k}: {v.strip()}" for k, v in sorted(self.errors.items()))
        super().__init__(f"{status} {self.message}" + (f" ({detail})" if detail else ""))


class AuthFailed(PveError):
    """Authentication failed (wrong password/token, missing or expired ticket)."""


class PermissionDenied(PveError):
    """The authenticated identity may not do this (e.g. devN with an API token)."""


class InvalidRequest(PveError):
    """Parameters rejected by PVE's schema validation; `sent` is False when we refused it locally."""

    def __init__(
        self, message: str, errors: Mapping[str, str] | None = None, *, status: int = 400, sent: bool = True
    ) -> None:
        super().__init__(status, message, errors)
        self.sent = sent


class TaskFailed(ProxmoxError):
    """A PVE task stopped with an error exit status; carries the tail of its log."""

    def __init__(self, upid: str, exitstatus: str, log: Sequence[str]) -> None:
        self.upid = upid
        self.exitstatus = exitstatus
        self.log = list(log)
        tail = "\n".join(self.log[-10:])
        super().__init__(f"task {upid} failed: {exitstatus}" + (f"\n{tail}" if tail else ""))


class TaskTimeout(ProxmoxError):
    """A PVE task was still running when our timeout expired."""

    def __init__(self, upid: str, timeout: float, status: str = "running") -> None:
        self.upid = upid
        self.timeout = timeout
        self.status = status
        super().__init__(f"task {upid} did not finish within {timeout:g} s (last status: {status})")


class TlsRejected(ProxmoxError):
    """The server's TLS certificate was refused (untrusted CA, wrong host, or wrong pinned fingerprint)."""


class HostKeyRejected(ProxmoxError):
    """The SSH server's host key is not in known_hosts or does not match it."""


class Unreachable(ProxmoxError):
    """The server could not be reached (refused, unresolvable, timed out)."""
