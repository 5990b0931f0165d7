"""Our Proxmox VE client over proxmoxer's HTTPS backend: verified TLS (CA file or pinned fingerprint).

    PveClient.https(host, port=8006, user="root@pam", password=... | token_name=..., token_value=...,
                    verify=True | "/path/ca.pem", fingerprint=None | "sha256:AB:CD:...")

Every request is converted (bool -> 1/0, None dropped) and pre-validated against the PVE schema of
the server's version (`provisioner.proxmox.schema`): an invalid request raises `InvalidRequest`
(``sent=False``) before anything is sent. Errors from proxmoxer and requests are mapped
to `provisioner.proxmox.errors`. Tasks are awaited with `wait_task`, which returns a `TaskResult`
(``OK`` / ``WARNINGS: n``) or raises `TaskFailed` (with the log tail) / `TaskTimeout` — never None.

Notes on proxmoxer internals we rely on (2.2/2.3): `ProxmoxResource(base_url=, session=,
serializer=)` is the call-chaining object; the https backend's password auth posts
``/access/ticket`` with a bare ``requests.post`` (we override it to go through our verified
transport). (The API over SSH, proxmoxer's ssh_paramiko backend, is not offered: the engine's one SSH stack
is asyncssh, with its host-key policy; issue #25.)
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import requests
from proxmoxer import AuthenticationError, ResourceException
from proxmoxer.backends.https import (
    JsonSerializer,
    ProxmoxHTTPApiTokenAuth,
    ProxmoxHTTPAuth,
    ProxmoxHttpSession,
)
from proxmoxer.core import ProxmoxResource
from requests.adapters import HTTPAdapter

from provisioner.proxmox.errors import (
    AuthFailed,
    InvalidRequest,
    PermissionDenied,
    ProxmoxError,
    PveError,
    TaskFailed,
    TaskTimeout,
    TlsRejected,
    Unreachable,
)
from provisioner.proxmox.schema import PARAM_FAILED, ApiSchema, load_schema, schema_version_for
from provisioner.proxmox.tasks import TaskResult, exitstatus_is_ok, exitstatus_warnings
from provisioner.transport.plain_errors import connect_error

AuthKind = Literal["ticket", "token"]


def normalize_fingerprint(fingerprint: str) -> str:
    """``sha256:AB:CD:..`` / ``AB:CD:..`` / ``abcd..`` -> 64 lower-case hex digits (ValueError otherwise)."""
    value = fingerprint.strip()
    if value.lower().startswith("sha256:"):
        value = value[7:]
    value = value.replace(":", "").lower()
    if not re.fullmatch(r"[0-9a-f]{64}", value):
        raise ValueError("fingerprint must be a SHA-256 digest like 'sha256:AB:CD:...' (32 bytes)")
    return value


def wire_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """What goes on the wire: None dropped, booleans as 1/0 (PVE rejects 'True')."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if value is None:
            continue
        out[key] = int(value) if isinstance(value, bool) else value
    return out


@dataclass(frozen=True)
class PveVersion:
    """``GET /version``: release (``8.4``), full version (``8.4.1``) and feature flags."""

    release: str
    version: str
    repoid: str | None = None

    @property
    def major_minor(self) -> tuple[int, int]:
        m = re.match(r"^(\d+)\.(\d+)", self.release) or re.match(r"^(\d+)\.(\d+)", self.version)
        if not m:
            raise ValueError(f"unparsable PVE release {self.release!r}")
        return int(m.group(1)), int(m.group(2))

    @property
    def supports_devn(self) -> bool:
        """``devN`` passthrough exists from PVE 8.1 (pve-container 5.0.7)."""
        return self.major_minor >= (8, 1)

    @property
    def supports_deny_write(self) -> bool:
        """``devN: ...,deny-write=1`` from PVE 8.3 (pve-container 5.2.0)."""
        return self.major_minor >= (8, 3)

    @property
    def schema_version(self) -> str:
        return schema_version_for(self.release)


class _PinnedAdapter(HTTPAdapter):
    """Accept exactly the certificate with this SHA-256 digest (urllib3 ``assert_fingerprint``)."""

    def __init__(self, fingerprint_hex: str) -> None:
        self._fingerprint = fingerprint_hex
        super().__init__()

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any) -> None:
        pool_kwargs["assert_fingerprint"] = self._fingerprint
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)


class _TicketAuth(ProxmoxHTTPAuth):  # type: ignore[misc]
    """proxmoxer's ticket auth, but the ticket request goes through our verified transport."""

    def __init__(self, transport: requests.Session, *args: Any, **kwargs: Any) -> None:
        self._transport = transport
        super().__init__(*args, **kwargs)

    def _get_new_tokens(self, password: str | None = None, otp: str | None = None, otptype: str | None = None) -> None:
        if password is None:
            password = str(getattr(self, "pve_auth_ticket", ""))  # renewal with the current ticket
        response = self._transport.post(
            self.base_url + "/access/ticket",
            data={"username": self.username, "password": password},
            verify=self.verify_ssl,
            timeout=self.timeout,
        )
        if response.status_code != 200:
            raise AuthenticationError(
                f"Couldn't authenticate user: {self.username} to {self.base_url}/access/ticket "
                f"code: {response.status_code}"
            )
        data = response.json()["data"]
        if not data or data.get("NeedTFA") is not None:
            raise AuthenticationError("Couldn't authenticate user: two-factor authentication is not supported")
        self.birth_time = time.monotonic()
        self.pve_auth_ticket = data["ticket"]
        self.csrf_prevention_token = data["CSRFPreventionToken"]


class PveClient:
    """A Proxmox VE API client (https ticket/token, or ``pvesh`` over SSH)."""

    def __init__(self, api: Any, *, auth_kind: AuthKind, user: str, target: str,
                 node: str | None = None, closer: Any = None) -> None:
        self._api = api
        self.auth_kind: AuthKind = auth_kind
        self.user = user
        self.target = target
        self._node = node
        self._closer = closer
        self._version: PveVersion | None = None
        self._schema: ApiSchema | None = None

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def https(
        cls,
        host: str,
        port: int = 8006,
        user: str = "root@pam",
        password: str | None = None,
        token_name: str | None = None,
        token_value: str | None = None,
        verify: bool | str | Path = True,
        fingerprint: str | None = None,
        timeout: float = 10.0,
        node: str | None = None,
    ) -> PveClient:
        """Connect over HTTPS. TLS is verified (system CAs, or `verify` = CA file); `fingerprint`
        pins the server certificate instead. `verify=False` without a fingerprint is refused."""
        if verify is False and fingerprint is None:
            raise ValueError("refusing an unverified TLS connection: pass verify=<CA file> or fingerprint=")
        host_part = f"[{host}]" if ":" in host and not host.startswith("[") else host
        base_url = f"https://{host_part}:{int(port)}/api2/json"
        if fingerprint is not None:
            adapter_fp = normalize_fingerprint(fingerprint)
            verify_ssl: bool | str = False
            transport_adapter: HTTPAdapter = _PinnedAdapter(adapter_fp)
            session_adapter: HTTPAdapter = _PinnedAdapter(adapter_fp)
        else:
            verify_ssl = str(verify) if isinstance(verify, (str, Path)) else True
            transport_adapter, session_adapter = HTTPAdapter(), HTTPAdapter()
        transport = requests.Session()
        transport.mount("https://", transport_adapter)
        try:
            if token_name is not None:
                if token_value is None:
                    raise ValueError("token_name needs token_value")
                auth = ProxmoxHTTPApiTokenAuth(user, token_name, token_value, verify_ssl=verify_ssl,
                                               timeout=timeout, service="PVE")
                kind: AuthKind = "token"
                identity = f"{user}!{token_name}"
            elif password is not None:
                auth = _TicketAuth(transport, user, password, base_url=base_url, verify_ssl=verify_ssl,
                                   timeout=timeout, service="PVE")
                kind = "ticket"
                identity = user
            else:
                raise ValueError("give password= or token_name=/token_value=")
        except Exception as exc:
            transport.close()
            if isinstance(exc, (ProxmoxError, ValueError)):
                raise
            raise _map_error(exc, base_url) from exc
        session = ProxmoxHttpSession()
        session.auth = auth
        session.mount("https://", session_adapter)
        session.headers["Connection"] = "keep-alive"
        session.headers["accept"] = JsonSerializer().get_accept_types()
        api = ProxmoxResource(base_url=base_url, session=session, serializer=JsonSerializer())

        def close() -> None:
            session.close()
            transport.close()  # kept open until now: ticket renewal posts through it

        return cls(api, auth_kind=kind, user=identity, target=base_url, node=node, closer=close)

    def close(self) -> None:
        if self._closer is not None:
            self._closer()
            self._closer = None

    def __enter__(self) -> PveClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- identity --------------------------------------------------------------------------
    @property
    def is_root_pam(self) -> bool:
        """True when PVE sees us as exactly ``root@pam`` (a ticket, not a token) — needed for devN."""
        return self.user == "root@pam" and self.auth_kind == "ticket"

    # -- plumbing --------------------------------------------------------------------------
    def schema(self) -> ApiSchema:
        if self._schema is None:
            self._schema = load_schema(self.version().schema_version)
        return self._schema

    def validate(self, method: str, path: str, params: Mapping[str, Any]) -> None:
        """Raise InvalidRequest(sent=False) when PVE would reject this request."""
        wire = {k: str(v) for k, v in wire_params(params).items()}
        result = self.schema().validate(method, "/" + path.strip("/"), wire, "form")
        if not result.found:
            raise InvalidRequest(f"Method '{method} /{path.strip('/')}' not in the PVE {self.schema().version} schema",
                                 status=501, sent=False)
        if result.errors:
            raise InvalidRequest(PARAM_FAILED, result.errors, sent=False)

    def request(self, method: str, path: str, params: Mapping[str, Any] | None = None,
                *, prevalidate: bool = True) -> Any:
        """One API call: converts and pre-validates params, maps every error."""
        clean = wire_params(params or {})
        if prevalidate:
            self.validate(method, path, clean)
        resource = self._api(path.strip("/"))
        try:
            if method == "GET":
                return resource.get(**clean)
            if method == "POST":
                return resource.post(**clean)
            if method == "PUT":
                return resource.put(**clean)
            if method == "DELETE":
                return resource.delete(**clean)
        except ProxmoxError:
            raise
        except Exception as exc:
            raise _map_error(exc, self.target) from exc
        raise ValueError(f"unsupported method {method}")

    @property
    def node(self) -> str:
        """The node to address (given, or the first of ``GET /nodes``)."""
        if self._node is None:
            nodes = self.request("GET", "nodes")
            if not nodes:
                raise PveError(500, "no nodes reported by GET /nodes")
            self._node = str(nodes[0]["node"])
        return self._node

    # -- API -------------------------------------------------------------------------------
    def version(self) -> PveVersion:
        if self._version is None:
            data = self.request("GET", "version", prevalidate=False)
            if not isinstance(data, dict) or "release" not in data:
                raise PveError(500, f"unexpected /version answer: {data!r}")
            self._version = PveVersion(str(data["release"]), str(data.get("version", "")), data.get("repoid"))
        return self._version

    def nextid(self) -> int:
        return int(self.request("GET", "cluster/nextid"))

    def nodes(self) -> list[dict[str, Any]]:
        return list(self.request("GET", "nodes"))

    def permissions(self, path: str | None = None) -> dict[str, dict[str, Any]]:
        """``GET /access/permissions``: the caller's effective privileges, {path: {privilege: propagate}}."""
        params = {"path": path} if path else {}
        data = self.request("GET", "/access/permissions", params)
        return dict(data or {})

    def list_cts(self, node: str | None = None) -> list[dict[str, Any]]:
        return list(self.request("GET", f"nodes/{node or self.node}/lxc"))

    def ct_config(self, vmid: int, node: str | None = None) -> dict[str, Any]:
        return dict(self.request("GET", f"nodes/{node or self.node}/lxc/{int(vmid)}/config"))

    def ct_status(self, vmid: int, node: str | None = None) -> dict[str, Any]:
        return dict(self.request("GET", f"nodes/{node or self.node}/lxc/{int(vmid)}/status/current"))

    def create_ct(self, node: str, params: Mapping[str, Any] | None = None, /, **kw: Any) -> str:
        """``POST /nodes/{node}/lxc`` -> UPID. Keys with dashes go in `params`."""
        return str(self.request("POST", f"nodes/{node}/lxc", {**(params or {}), **kw}))

    def set_config(self, vmid: int, params: Mapping[str, Any] | None = None, /, *, node: str | None = None,
                   **kw: Any) -> None:
        """``PUT .../config`` (synchronous in PVE)."""
        self.request("PUT", f"nodes/{node or self.node}/lxc/{int(vmid)}/config", {**(params or {}), **kw})

    def resize_ct(self, vmid: int, disk: str, size: str, node: str | None = None) -> str:
        """``PUT .../resize`` (`pct resize`): grow a volume to `size` (`64G`, or `+8G`) -> UPID."""
        return str(self.request("PUT", f"nodes/{node or self.node}/lxc/{int(vmid)}/resize",
                                {"disk": disk, "size": size}))

    def start_ct(self, vmid: int, node: str | None = None) -> str:
        return str(self.request("POST", f"nodes/{node or self.node}/lxc/{int(vmid)}/status/start"))

    def stop_ct(self, vmid: int, node: str | None = None) -> str:
        return str(self.request("POST", f"nodes/{node or self.node}/lxc/{int(vmid)}/status/stop"))

    def shutdown_ct(self, vmid: int, node: str | None = None, timeout: int | None = None) -> str:
        return str(self.request("POST", f"nodes/{node or self.node}/lxc/{int(vmid)}/status/shutdown",
                                {"timeout": timeout}))

    def delete_ct(self, vmid: int, node: str | None = None, purge: bool | None = None) -> str:
        return str(self.request("DELETE", f"nodes/{node or self.node}/lxc/{int(vmid)}", {"purge": purge}))

    def storages(self, node: str | None = None, content: str | None = None) -> list[dict[str, Any]]:
        return list(self.request("GET", f"nodes/{node or self.node}/storage", {"content": content}))

    def storage_content(
        self, storage: str, content: str | None = None, node: str | None = None
    ) -> list[dict[str, Any]]:
        path = f"nodes/{node or self.node}/storage/{storage}/content"
        return list(self.request("GET", path, {"content": content}))

    def aplinfo(self, node: str | None = None) -> list[dict[str, Any]]:
        return list(self.request("GET", f"nodes/{node or self.node}/aplinfo"))

    def download_template(self, storage: str, template: str, node: str | None = None) -> str:
        return str(self.request("POST", f"nodes/{node or self.node}/aplinfo",
                                {"storage": storage, "template": template}))

    def list_tasks(self, node: str, *, vmid: int | None = None, typefilter: str | None = None,
                   source: str = "all", limit: int = 50) -> list[dict[str, Any]]:
        """``GET /nodes/{node}/tasks`` (newest first), e.g. the vzcreate tasks of one container."""
        return list(self.request("GET", f"nodes/{node}/tasks", {"vmid": vmid, "typefilter": typefilter,
                                                                "source": source, "limit": limit}))

    def task_status(self, node: str, upid: str) -> dict[str, Any]:
        return dict(self.request("GET", f"nodes/{node}/tasks/{upid}/status"))

    def task_log(self, node: str, upid: str, limit: int = 5000) -> list[str]:
        lines = self.request("GET", f"nodes/{node}/tasks/{upid}/log", {"start": 0, "limit": limit})
        return [str(item.get("t", "")) for item in lines or [] if isinstance(item, dict)]

    def wait_task(self, node: str, upid: str, timeout: float = 300.0, poll: float = 1.0) -> TaskResult:
        """Poll until the task stops: OK / WARNINGS -> TaskResult; error -> TaskFailed; else TaskTimeout."""
        deadline = time.monotonic() + timeout
        interval = min(0.1, poll)  # most tasks end within a second: poll soon, then back off to `poll`
        while True:
            status = self.task_status(node, upid)
            if status.get("status") == "stopped":
                exitstatus = str(status.get("exitstatus") or "unexpected status")
                log = self.task_log(node, upid)
                if exitstatus_is_ok(exitstatus):
                    return TaskResult(upid, exitstatus, exitstatus_warnings(exitstatus), log)
                raise TaskFailed(upid, exitstatus, log[-50:])
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TaskTimeout(upid, timeout, str(status.get("status", "unknown")))
            time.sleep(min(interval, remaining))
            interval = min(interval * 2, poll)


def _plain_connect_error(exc: BaseException, target: str) -> str:
    """requests' `HTTPSConnectionPool(…): Max retries exceeded … [Errno 111] …` in plain words: the socket
    error at its root (urllib3's `reason`, the exception chain), said by `transport.plain_errors`."""
    parts = urlsplit(target if "://" in target else f"https://{target}")
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        cur = stack.pop()
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        if isinstance(cur, OSError) and (cur.errno is not None or isinstance(cur, TimeoutError)) and parts.hostname:
            return connect_error(cur, parts.hostname, parts.port or 8006)
        stack.extend(e for e in (getattr(cur, "reason", None), cur.__cause__, cur.__context__, *cur.args)
                     if isinstance(e, BaseException))
    if isinstance(exc, requests.exceptions.Timeout) and parts.hostname:
        return connect_error(TimeoutError(), parts.hostname, parts.port or 8006)
    return str(exc)


def _map_error(exc: BaseException, target: str) -> ProxmoxError:
    """Translate proxmoxer / requests exceptions into our errors."""
    if isinstance(exc, ProxmoxError):
        return exc
    if isinstance(exc, AuthenticationError):
        return AuthFailed(401, f"authentication failure at {target}")
    if isinstance(exc, ResourceException):
        status = int(exc.status_code)
        content = str(exc.content or "")
        errors = exc.errors if isinstance(exc.errors, dict) else {}
        message = content
        if status == 401:
            return AuthFailed(401, message or "authentication failure")
        if status == 403:
            return PermissionDenied(403, message)
        if status == 400:
            return InvalidRequest(message, errors, sent=True)
        return PveError(status, message, errors)
    if isinstance(exc, requests.exceptions.SSLError):
        detail = str(exc)
        if "Fingerprints did not match" in detail:
            return TlsRejected(f"TLS certificate of {target} does not match the pinned fingerprint")
        return TlsRejected(f"TLS certificate of {target} was not accepted: {detail}")
    if isinstance(exc, (requests.exceptions.ConnectionError, requests.exceptions.Timeout)):
        return Unreachable(f"cannot reach {target}: {_plain_connect_error(exc, target)}")
    if isinstance(exc, (OSError, socket.timeout)):
        return Unreachable(f"cannot reach {target}: {exc}")
    return ProxmoxError(f"{target}: {exc}")
