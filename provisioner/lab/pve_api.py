"""The lab's Proxmox VE API: request handling shared by the HTTPS server and the lab's ``pvesh``.

`LabApi.call(method, path, params, identity)` validates the request against the PVE schema of
the lab's version (``provisioner.proxmox.schema``) and then runs the handler, answering like
PVE (pve-manager HTTPServer.pm, pve-http-server, pve-container API2/LXC.pm):

* 400 ``Parameter verification failed.`` with ``errors`` for unknown/mistyped parameters;
* 401 (empty body) for missing or bad credentials;
* 403 ``Permission check failed (<path>, <privilege>)`` when the caller lacks a privilege
  pve-container checks (``create_vm``, ``update_vm`` → ``check_ct_modify_config_perm``, power,
  audit; the rules are `provisioner.proxmox.privileges`), evaluated over the lab token's ACL
  (`LabSettings.token_acl`, with privilege separation) or root@pam's everything; ``Permission check
  failed (configuring device passthrough is only allowed for root@pam)`` when anyone but root@pam
  sets ``devN`` (an API token ``root@pam!lab`` included);
* changes to a running container go to ``[pve:pending]`` as pve-container's ``update_pct_config``
  + ``vmconfig_hotplug_pending`` leave them (see `_put_config`); ``vm_start`` and the poststop
  hook apply them;
* 500 with the handler's ``die`` text (``CT 200 already exists on node 'pve'``);
* 501 ``Method 'GET /x' not implemented`` for paths the lab does not serve;
* POST create/start/stop/... return a UPID; the task runs in a worker thread (HTTPS) or inline
  (``pvesh``) and ends with ``TASK OK`` or ``TASK ERROR: <text>`` in its log.

`LabApiServer(state)` serves it over HTTPS on 127.0.0.1 with the lab's own certificate
(`cafile` to trust it, `fingerprint` to pin it). Every request is appended to
``<lab>/api-requests.jsonl`` (method, path, params without secrets, status, validated).
Everything here is LAB; nothing is used on a real target.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

from provisioner.lab import oci_template, safe_fs
from provisioner.lab.httpd import BackgroundHttpServer
from provisioner.lab.node_network import bridge_names, network_index
from provisioner.lab.profiles import VERSIONS, get_profile
from provisioner.lab.state import TEMPLATE_SIZES, ConfigLockTimeout, CtNotFound, LabState, StorageSpec
from provisioner.lab.tls import LabTls, ensure_lab_tls
from provisioner.proxmox import privileges
from provisioner.proxmox.lxc_conf import LxcConfig, format_property_string, parse_property_string
from provisioner.proxmox.schema import PARAM_FAILED, MethodSchema, Wire, load_schema, lookup_property
from provisioner.proxmox.tasks import decode_upid

API_PREFIX = "/api2/json"
TICKET_LIFETIME = 7200
DEVN_PERM = "configuring device passthrough is only allowed for root@pam"
SECRET_PARAMS = {"password", "otp", "tfa-challenge", "ticket", "CSRFPreventionToken"}

HOST_CPUS = 128
HOST_MEM = 1_082_331_758_592

OS_RELEASE = {
    "ubuntu-24.04": 'PRETTY_NAME="Ubuntu 24.04.1 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\n'
    'VERSION="24.04.1 LTS (Noble Numbat)"\nVERSION_CODENAME=noble\nID=ubuntu\nID_LIKE=debian\n',
    "ubuntu-22.04": 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
    'VERSION="22.04.5 LTS (Jammy Jellyfish)"\nVERSION_CODENAME=jammy\nID=ubuntu\nID_LIKE=debian\n',
    "debian-12": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\n'
    'VERSION="12 (bookworm)"\nVERSION_CODENAME=bookworm\nID=debian\n',
    "debian-13": 'PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\nNAME="Debian GNU/Linux"\nVERSION_ID="13"\n'
    'VERSION="13 (trixie)"\nVERSION_CODENAME=trixie\nID=debian\n',
}

# create parameters that are not written into the config file
_CREATE_NON_CONFIG = {
    "node", "vmid", "ostemplate", "password", "ssh-public-keys", "storage", "start", "force", "restore",
    "unique", "ignore-unpack-errors", "bwlimit", "pool", "debug", "ha-managed", "lock",
}


@dataclass(frozen=True)
class Identity:
    """Who is calling: a password ticket, an API token (``root@pam!lab``) or the CLI (root@pam)."""

    kind: Literal["ticket", "token", "cli"]
    user: str

    @property
    def is_root_pam(self) -> bool:
        return self.user == "root@pam"


CLI_IDENTITY = Identity("cli", "root@pam")


class ApiError(Exception):
    """An error answer: HTTP status, PVE message (first line = reason phrase), per-param errors."""

    def __init__(self, status: int, message: str, errors: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = dict(errors) if errors else None


def param_error(errors: Mapping[str, str]) -> ApiError:
    return ApiError(400, PARAM_FAILED, errors)


class TaskError(Exception):
    """Raised inside a task's work function: the task stops with this exit status."""


@dataclass
class ApiResult:
    status: int
    data: Any = None
    message: str | None = None
    errors: dict[str, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    upid: str | None = None

    @property
    def reason(self) -> str:
        if self.message:
            return self.message.split("\n", 1)[0]
        try:
            return HTTPStatus(self.status).phrase
        except ValueError:
            return "Error"

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"data": self.data}
        out.update(self.extra)
        if self.status >= 400:
            out["data"] = None
            if self.message is not None:
                out["message"] = self.message
            if self.errors:
                out["errors"] = self.errors
        return out


def redact(params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: ("<redacted>" if k in SECRET_PARAMS else v) for k, v in params.items()}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode().rstrip("=")


def _os_of_template(volid: str) -> str:
    name = volid.rsplit("/", 1)[-1]
    m = re.match(r"^([a-z]+)-(\d+(?:\.\d+)?)-", name)
    return f"{m.group(1)}-{m.group(2)}" if m else "unknown"


def _size_text(size: str) -> int:
    m = re.match(r"^(\d+(?:\.\d+)?)([KMGT])?$", size)
    if not m:
        return 0
    mult = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, None: 1}[m.group(2)]
    return int(float(m.group(1)) * mult)


TaskWork = Callable[[list[str]], None]


class LabApi:
    """The lab's API handlers over a `LabState`."""

    def __init__(self, state: LabState, *, sync_tasks: bool = False) -> None:
        self.state = state
        self.sync_tasks = sync_tasks
        self._threads: list[threading.Thread] = []
        self._routes: dict[tuple[str, str], Callable[[dict[str, Any], Identity], Any]] = {
            ("GET", "/version"): self._version,
            ("GET", "/access/permissions"): self._permissions,
            ("GET", "/access/ticket"): lambda p, i: None,
            ("POST", "/access/ticket"): self._ticket,
            ("GET", "/cluster/nextid"): self._nextid,
            ("GET", "/cluster/resources"): self._resources,
            ("GET", "/nodes"): self._nodes,
            ("GET", "/nodes/{node}/lxc"): self._vmlist,
            ("POST", "/nodes/{node}/lxc"): self._create,
            ("GET", "/nodes/{node}/lxc/{vmid}"): self._vmdiridx,
            ("DELETE", "/nodes/{node}/lxc/{vmid}"): self._destroy,
            ("GET", "/nodes/{node}/lxc/{vmid}/config"): self._get_config,
            ("PUT", "/nodes/{node}/lxc/{vmid}/config"): self._put_config,
            ("PUT", "/nodes/{node}/lxc/{vmid}/resize"): self._resize,
            ("GET", "/nodes/{node}/lxc/{vmid}/pending"): self._pending,
            ("GET", "/nodes/{node}/lxc/{vmid}/status"): self._status_idx,
            ("GET", "/nodes/{node}/lxc/{vmid}/status/current"): self._status_current,
            ("POST", "/nodes/{node}/lxc/{vmid}/status/start"): self._start,
            ("POST", "/nodes/{node}/lxc/{vmid}/status/stop"): self._stop,
            ("POST", "/nodes/{node}/lxc/{vmid}/status/shutdown"): self._shutdown,
            ("POST", "/nodes/{node}/lxc/{vmid}/status/reboot"): self._reboot,
            ("GET", "/nodes/{node}/network"): self._network,
            ("GET", "/nodes/{node}/storage"): self._storage_index,
            ("GET", "/nodes/{node}/storage/{storage}/content"): self._storage_content,
            ("GET", "/nodes/{node}/aplinfo"): self._aplinfo,
            ("POST", "/nodes/{node}/aplinfo"): self._apl_download,
            ("GET", "/nodes/{node}/tasks"): self._task_list,
            ("GET", "/nodes/{node}/tasks/{upid}"): lambda p, i: [{"name": "log"}, {"name": "status"}],
            ("GET", "/nodes/{node}/tasks/{upid}/status"): self._task_status,
            ("GET", "/nodes/{node}/tasks/{upid}/log"): self._task_log,
            ("DELETE", "/nodes/{node}/tasks/{upid}"): self._task_stop,
        }

    # -- tickets ---------------------------------------------------------------------------
    def _sign(self, data: str) -> str:
        secret = self.state.credentials().ticket_secret.encode()
        return _b64(hmac.new(secret, data.encode(), hashlib.sha256).digest())

    def make_ticket(self, user: str, now: float | None = None) -> str:
        plain = f"PVE:{user}:{int(now or time.time()):08X}"
        return f"{plain}::{self._sign(plain)}"

    def verify_ticket(self, ticket: str) -> str | None:
        m = re.match(r"^(PVE:([^:\s]+):([0-9A-F]{8}))::(\S+)$", ticket)
        if not m or not hmac.compare_digest(self._sign(m.group(1)), m.group(4)):
            return None
        age = time.time() - int(m.group(3), 16)
        return m.group(2) if -300 < age < TICKET_LIFETIME else None

    def make_csrf(self, user: str, now: float | None = None) -> str:
        stamp = f"{int(now or time.time()):08X}"
        return f"{stamp}:{self._sign(f'{stamp}:{user}')}"

    def verify_csrf(self, user: str, token: str) -> bool:
        m = re.match(r"^([0-9A-F]{8}):(\S+)$", token)
        if not m or not hmac.compare_digest(self._sign(f"{m.group(1)}:{user}"), m.group(2)):
            return False
        return -300 < time.time() - int(m.group(1), 16) < TICKET_LIFETIME

    # -- entry point -----------------------------------------------------------------------
    def call(self, method: str, path: str, params: Mapping[str, Any], identity: Identity,
             wire: Wire = "form") -> ApiResult:
        """Validate and run one request; never raises for API errors (they become the result)."""
        method = method.upper()
        path = "/" + path.strip("/") if path.strip("/") else "/"
        settings = self.state.settings()
        schema = load_schema(settings.pve_version)
        validation = schema.validate(method, path, params, wire)
        result: ApiResult
        if validation.method is None:
            result = ApiResult(501, message=f"Method '{method} {path}' not implemented")
        elif validation.errors:
            result = ApiResult(400, message=PARAM_FAILED, errors=validation.errors)
        else:
            handler = self._routes.get((method, validation.method.path))
            if handler is None:
                result = ApiResult(501, message=f"Method '{method} {path}' not implemented")
            else:
                result = self._run(handler, validation.method, validation.params, identity)
        self.log_request(method, path, params, identity, result, validation.schema_path,
                         validation.ok, wire)
        return result

    def _run(self, handler: Callable[[dict[str, Any], Identity], Any], ms: MethodSchema,
             params: dict[str, Any], identity: Identity) -> ApiResult:
        try:
            if identity.kind == "token" and not ms.allowtoken:
                raise ApiError(403, f"Permission check failed (URI '{ms.path}' not available with API token, "
                                    "need proper ticket.)\n")
            node = params.get("node")
            if node is not None and node != self.state.settings().node:
                raise ApiError(500, f"hostname lookup '{node}' failed - failed to get address info for: "
                                    f"{node}: Name or service not known\n")
            data = handler(params, identity)
        except ApiError as exc:
            return ApiResult(exc.status, message=exc.message, errors=exc.errors)
        except ConfigLockTimeout as exc:
            return ApiResult(500, message=f"{exc}\n")
        except CtNotFound as exc:
            vmid = exc.args[0]
            return ApiResult(500, message=f"Configuration file 'nodes/{self.state.settings().node}/lxc/{vmid}.conf' "
                                          "does not exist\n")
        extra: dict[str, Any] = {}
        if isinstance(data, _WithExtra):
            extra, data = data.extra, data.data
        is_task = isinstance(data, str) and data.startswith("UPID:") and ms.returns.get("type") == "string"
        upid = data if is_task else None
        return ApiResult(200, data=data, extra=extra, upid=upid)

    def log_request(self, method: str, path: str, params: Mapping[str, Any], identity: Identity | None,
                    result: ApiResult, schema_path: str | None, validated: bool, wire: str) -> None:
        self.state.log_request({
            "time": round(time.time(), 3),
            "method": method,
            "path": path,
            "schema_path": schema_path,
            "params": redact(params),
            "status": result.status,
            "validated": validated,
            "errors": result.errors,
            "auth": identity.kind if identity and identity.user else None,
            "user": identity.user if identity and identity.user else None,
            "wire": wire,
        })

    # -- tasks -----------------------------------------------------------------------------
    def start_task(self, type_: str, id_: str, identity: Identity, work: TaskWork) -> str:
        upid = self.state.new_task(type_, id_, identity.user)
        if self.state.has_scenario("api-timeout"):
            return upid  # LAB fault: the worker hangs, the task never stops
        if self.sync_tasks:
            self._finish(upid, work)
        else:
            delay = self.state.settings().task_delay
            thread = threading.Thread(target=self._delayed, args=(upid, work, delay), daemon=True,
                                      name=f"lab-task-{type_}-{id_}")
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
            thread.start()
        return upid

    def _delayed(self, upid: str, work: TaskWork, delay: float) -> None:
        time.sleep(delay)
        self._finish(upid, work)

    def _finish(self, upid: str, work: TaskWork) -> None:
        log: list[str] = []
        try:
            work(log)
        except TaskError as exc:
            self.state.finish_task(upid, str(exc), log)
            return
        except Exception as exc:  # a lab bug must still end the task
            self.state.finish_task(upid, f"LAB internal error: {exc}", log)
            return
        self.state.finish_task(upid, "OK", log)

    def join_tasks(self, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        for t in list(self._threads):
            t.join(max(0.0, deadline - time.monotonic()))

    # -- simple endpoints ------------------------------------------------------------------
    def _version(self, p: dict[str, Any], ident: Identity) -> dict[str, Any]:
        version, release, repoid = VERSIONS[self.state.settings().pve_version]
        return {"version": version, "release": release, "repoid": repoid, "console": "html5"}

    def _ticket(self, p: dict[str, Any], ident: Identity) -> dict[str, Any]:
        username = str(p["username"])
        if "@" not in username and p.get("realm"):
            username = f"{username}@{p['realm']}"
        password = str(p["password"])
        ok = self.state.check_password(username, password) or self.verify_ticket(password) == username
        if not ok:
            raise ApiError(401, "authentication failure\n")
        return {"username": username, "ticket": self.make_ticket(username),
                "CSRFPreventionToken": self.make_csrf(username)}

    def _nextid(self, p: dict[str, Any], ident: Identity) -> int:
        used = set(self.state.list_cts())
        if "vmid" in p:
            vmid = int(p["vmid"])
            if vmid in used:
                raise param_error({"vmid": f"VM {vmid} already exists"})
            return vmid
        vmid = 100
        while vmid in used:
            vmid += 1
        return vmid

    def _nodes(self, p: dict[str, Any], ident: Identity) -> list[dict[str, Any]]:
        s = self.state.settings()
        return [{
            "node": s.node, "status": "online", "type": "node", "id": f"node/{s.node}", "level": "",
            "maxcpu": HOST_CPUS, "cpu": 0.0123, "maxmem": HOST_MEM, "mem": 41_873_408_000,
            "maxdisk": 100_861_726_720, "disk": 11_794_362_368, "uptime": 1_234_567,
        }]

    def _ct_summary(self, vmid: int) -> dict[str, Any]:
        conf = self.state.read_conf(vmid)
        st = self.state.get_status(vmid)
        rootfs = parse_property_string(conf.get("rootfs") or "", "volume")
        out: dict[str, Any] = {
            "vmid": vmid, "type": "lxc", "status": st.status,
            "name": conf.get("hostname") or f"CT{vmid}",
            "maxmem": int(conf.get("memory") or 512) * 1024**2,
            "maxswap": int(conf.get("swap") or 512) * 1024**2,
            "maxdisk": _size_text(rootfs.get("size", "0")),
            "cpus": int(conf.get("cores") or HOST_CPUS),
            "uptime": int(time.time() - st.started) if st.status == "running" and st.started else 0,
            "mem": 52_428_800 if st.status == "running" else 0, "swap": 0, "disk": 0, "cpu": 0,
            "netin": 0, "netout": 0, "diskread": 0, "diskwrite": 0,
        }
        if st.status == "running" and st.pid:
            out["pid"] = st.pid
        if lock := conf.get("lock"):
            out["lock"] = lock
        if tags := conf.get("tags"):
            out["tags"] = tags
        if conf.get("template") == "1":
            out["template"] = 1
        return out

    def _vmlist(self, p: dict[str, Any], ident: Identity) -> list[dict[str, Any]]:
        # vmlist: "Only list CTs where you have VM.Audit permissons on /vms/<vmid>."
        return [self._ct_summary(v) for v in self.state.list_cts() if self._can(ident, "VM.Audit", f"/vms/{v}")]

    def _resources(self, p: dict[str, Any], ident: Identity) -> list[dict[str, Any]]:
        s = self.state.settings()
        want = p.get("type")
        out: list[dict[str, Any]] = []
        if want in (None, "vm"):
            for vmid in self.state.list_cts():
                item = self._ct_summary(vmid)
                item.update({"id": f"lxc/{vmid}", "node": s.node})
                out.append(item)
        if want in (None, "node"):
            out.extend(self._nodes(p, ident))
        if want in (None, "storage"):
            for st in s.storages:
                out.append({"id": f"storage/{s.node}/{st.id}", "type": "storage", "storage": st.id,
                            "node": s.node, "status": "available", "content": ",".join(sorted(st.content)),
                            "plugintype": st.type, "maxdisk": st.total, "disk": st.used, "shared": 0})
        return out

    # -- permissions -----------------------------------------------------------------------
    def _acl(self, ident: Identity) -> list[tuple[str, list[str], bool]] | None:
        """The caller's ACL entries; None = root@pam's privileges (all, everywhere)."""
        s = self.state.settings()
        if ident.kind == "token" and s.token_privsep:
            # PVE::RPCEnvironment::permissions: a privsep token gets its own ACLs ∩ its user's (root@pam: all)
            return [(e.path, list(e.privs), e.propagate) for e in s.token_acl]
        return None

    def effective_permissions(self, ident: Identity, paths: list[str] | None = None) -> dict[str, dict[str, int]]:
        acl = self._acl(ident)
        if acl is None:
            acl = [("/", list(privileges.ALL_PRIVILEGES), True)]
        return privileges.effective_permissions(acl, paths or [])

    def _check_perm(self, ident: Identity, needs: list[privileges.Need]) -> None:
        """Raise PVE's 403 for the first need the caller lacks (RPCEnvironment ``check``/``check_any``)."""
        if ident.is_root_pam:
            return
        for need in needs:
            if need.root_only:
                raise ApiError(403, f"Permission check failed ({need.why})\n")
            perms = self.effective_permissions(ident, [need.path]).get(need.path, {})
            if not any(p in perms for p in need.privileges):
                raise ApiError(403, f"Permission check failed ({need.path}, {'|'.join(need.privileges)})\n")

    def _can(self, ident: Identity, privilege: str, path: str) -> bool:
        try:
            self._check_perm(ident, [privileges.Need((privilege,), path, "")])
        except ApiError:
            return False
        return True

    def _permissions(self, p: dict[str, Any], ident: Identity) -> dict[str, dict[str, int]]:
        """``GET /access/permissions`` (pve-access-control API2/AccessControl.pm ``permissions`` →
        RPCEnvironment ``get_effective_permissions``): {path: {privilege: propagate}}."""
        userid = p.get("userid")
        if userid and userid != ident.user and not (ident.is_root_pam or userid.startswith(ident.user + "!")):
            raise ApiError(403, "Permission check failed (/access, Sys.Audit)\n")
        who = ident if not userid or userid == ident.user else Identity("token" if "!" in userid else "ticket",
                                                                        str(userid))
        path = p.get("path")
        perms = self.effective_permissions(who, [str(path)] if path else [])
        if path:
            return {str(path): perms.get(str(path), {})}
        return perms

    # -- containers ------------------------------------------------------------------------

    def _missing_devices(self, values: Mapping[str, str]) -> list[str]:
        devices = self.state.host_devices()
        missing = []
        for key, value in values.items():
            if re.match(r"^dev\d+$", key):
                path = parse_property_string(str(value), "path").get("path", "")
                if path not in devices:
                    missing.append(path)
        return missing

    def _storage(self, storage_id: str) -> StorageSpec:
        for st in self.state.settings().storages:
            if st.id == storage_id:
                return st
        raise ApiError(500, f"storage '{storage_id}' does not exist\n")

    def _alloc_rootfs(self, vmid: int, value: str, default_storage: str) -> str:
        if re.match(r"^\d+(\.\d+)?$", value):
            value = f"{default_storage}:{value}"
        prop = parse_property_string(value, "volume")
        volume = prop.get("volume", "")
        m = re.match(r"^([^:]+):(\d+(?:\.\d+)?)$", volume)
        if not m:
            return value  # an existing volume / path; kept as given
        store = self._storage(m.group(1))
        if "rootdir" not in store.content:
            raise ApiError(500, f"storage '{store.id}' does not support container directories\n")
        size = m.group(2)
        prop["volume"] = f"{store.id}:vm-{vmid}-disk-0"
        new = {"volume": prop["volume"], **{k: v for k, v in prop.items() if k not in ("volume", "size")}}
        new["size"] = f"{size}G"
        return format_property_string(new, "volume")

    def _create(self, p: dict[str, Any], ident: Identity) -> str:
        s = self.state.settings()
        vmid = int(p["vmid"])
        if self.state.has_ct(vmid):  # PVE checks check_vmid_unused first
            raise ApiError(500, f"CT {vmid} already exists on node '{s.node}'\n")
        unpriv = p.get("unprivileged", s.pve_version == "9")
        self._check_perm(ident, privileges.create_needs({**p, "unprivileged": 1 if unpriv else 0}))
        ostemplate = str(p["ostemplate"])
        m = re.match(r"^([^:]+):(.+)$", ostemplate)
        if not m:
            raise ApiError(500, f"unable to parse volume ID '{ostemplate}'\n")
        oci = self._oci_template(self._storage(m.group(1)), m.group(2))  # PVE 9.1: an uploaded/pulled .tar
        if oci is None and ostemplate not in s.templates:
            raise ApiError(500, f"volume '{ostemplate}' does not exist\n")
        storage = str(p.get("storage", "local"))
        rootfs = self._alloc_rootfs(vmid, str(p.get("rootfs", "4")), storage)
        options: dict[str, str] = {}
        for key, value in p.items():
            if key in _CREATE_NON_CONFIG or key == "description":
                continue
            options[key] = ("1" if value else "0") if isinstance(value, bool) else str(value)
        options["rootfs"] = rootfs
        options.setdefault("arch", "amd64")
        options.setdefault("hostname", f"CT{vmid}")
        options.setdefault("memory", "512")
        options.setdefault("swap", "512")
        os_name = _os_of_template(ostemplate)
        options.setdefault("ostype", os_name.split("-")[0] if os_name.split("-")[0] in ("ubuntu", "debian")
                           else "unmanaged")
        if unpriv:
            options["unprivileged"] = "1"
        else:
            options.pop("unprivileged", None)
        with self.state.config_lock(vmid), self.state.lock():  # create_vm writes under lock_config
            if self.state.has_ct(vmid):
                raise ApiError(500, f"CT {vmid} already exists on node '{s.node}'\n")
            self.state.write_conf(vmid, LxcConfig.from_options({"lock": "create"}))
        description = p.get("description")
        start = bool(p.get("start", False))

        def work(log: list[str]) -> None:
            try:
                self._create_work(vmid, ostemplate, options, description, start, log)
            except TaskError as exc:
                if not (start and self.state.has_ct(vmid) and "startup for container" in str(exc)):
                    self.state.delete_ct(vmid)
                    raise TaskError(f"unable to create CT {vmid} - {exc}") from None
                raise

        return self.start_task("vzcreate", str(vmid), ident, work)

    def _create_work(self, vmid: int, ostemplate: str, options: dict[str, str], description: Any,
                     start: bool, log: list[str]) -> None:
        rootfs = parse_property_string(options["rootfs"], "volume")
        volname = rootfs["volume"].split(":", 1)[-1]
        size_g = rootfs.get("size", "4G").rstrip("G")
        log.append(f'  Logical volume "{volname}" created.')
        if self.state.has_scenario("task-fails"):
            raise TaskError(f"lvcreate 'pve/{volname}' error:   Volume group \"pve\" has insufficient free space "
                            f"(1023 extents): {int(float(size_g) * 256)} required.")
        if missing := self._missing_devices(options):
            raise TaskError(f"Device {missing[0]} does not exist")
        blocks = int(float(size_g) * 262144)
        template_file = ostemplate.split("/", 1)[-1]
        st = self._storage(ostemplate.split(":", 1)[0])
        if (oci := self._oci_template(st, ostemplate.split(":", 1)[1])) is not None:
            self._create_oci(vmid, oci, options, description, int(float(size_g) * 2**30), log)
            if start:
                self._start_work(vmid, log)
            return
        log.extend([
            f"Creating filesystem with {blocks} 4k blocks and {blocks // 4} inodes",
            "Allocating group tables: done",
            "Writing inode tables: done",
            "Creating journal (65536 blocks): done",
            "Writing superblocks and filesystem accounting information: done",
            "",
            f"extracting archive '/var/lib/vz/template/cache/{template_file}'",
            f"Total bytes read: {TEMPLATE_SIZES.get(template_file, 130_000_000) * 4} "
            f"({TEMPLATE_SIZES.get(template_file, 130_000_000) * 4 // 1024**2}MiB, 312MiB/s)",
            f"Detected container architecture: {options.get('arch', 'amd64')}",
            "Creating SSH host key 'ssh_host_ed25519_key' - this may take some time ...",
            f"done: SHA256:{_b64(hashlib.sha256(f'{vmid}-ed25519'.encode()).digest())} root@{options['hostname']}",
            "Creating SSH host key 'ssh_host_rsa_key' - this may take some time ...",
            f"done: SHA256:{_b64(hashlib.sha256(f'{vmid}-rsa'.encode()).digest())} root@{options['hostname']}",
        ])
        conf = LxcConfig.from_options(options, description=str(description) if description else None)
        with self.state.lock():
            self.state.write_conf(vmid, conf)
            self.state.set_status(vmid, "stopped")
            root = self.state.ct_root(vmid)
            os_name = _os_of_template(ostemplate)
            # the node can write under ct/: never through a link (provisioner.lab.safe_fs)
            lab = self.state.root
            safe_fs.write_bytes(lab, root / "etc" / "os-release",
                                OS_RELEASE.get(os_name, f'ID=unknown\nNAME="{os_name}"\n').encode())
            safe_fs.write_bytes(lab, root / "etc" / "hostname", (options["hostname"] + "\n").encode())
        if start:
            self._start_work(vmid, log)

    def _oci_template(self, st: StorageSpec, volname: str) -> Path | None:
        """The file of ``vztmpl/<name>.tar`` on a dir storage (provisioner.lab.oci_template), None for another
        volume; a PVE 8 node does not know the name (pve-storage Plugin.pm parse_volname before 0d392b2)."""
        name = volname.removeprefix("vztmpl/")
        if not volname.startswith("vztmpl/") or "/" in name or not name.lower().endswith(".tar"):
            return None
        if self.state.settings().pve_version != "9":
            raise ApiError(500, f"unable to parse directory volume name '{volname}'\n")
        path = oci_template.node_template_path(self.state.root, st.path, name)
        if not safe_fs.exists(self.state.root, path):
            raise ApiError(500, f"volume '{st.id}:{volname}' does not exist\n")
        return path

    def _create_oci(self, vmid: int, archive: Path, options: dict[str, str], description: Any, limit: int,
                    log: list[str]) -> None:
        """pve-container API2/LXC.pm create_vm: ``Detected OCI archive``, Create.pm ``restore_oci_archive``
        (layers into the rootfs, the image config mapped to config lines), then the config is written."""
        if not oci_template.archive_is_oci_format(archive):  # a plain .tar template: not modelled by the lab
            raise TaskError(f"unable to restore '{archive.name}': not an OCI archive the lab can extract")
        log.append("Detected OCI archive")
        root = self.state.ct_root(vmid)
        nets = {k: v for k, v in options.items() if re.fullmatch(r"net\d+", k)}
        try:
            image = oci_template.restore_oci_archive(archive, self.state.root, root, arch=options.get("arch", "amd64"),
                                                     limit=limit, nets=nets)
        except (oci_template.OciRefused, oci_template.LayerRefused, OSError) as exc:
            raise TaskError(str(exc)) from None
        log.append(f"extracted {image.layers} layers ({image.files} files) into the rootfs")
        options = {**options, **image.options}
        conf = LxcConfig.from_options(options, description=str(description) if description else None)
        for key, value in [*(("lxc.environment.runtime", v) for v in image.env), *image.lxc]:
            conf.add_raw(key, value)  # Config.pm write_pct_config: env as lxc.environment.runtime lines
        with self.state.lock():
            self.state.write_conf(vmid, conf)
            self.state.set_status(vmid, "stopped")
            safe_fs.write_bytes(self.state.root, root / "etc" / "hostname", (options["hostname"] + "\n").encode())

    def _vmdiridx(self, p: dict[str, Any], ident: Identity) -> list[dict[str, str]]:
        self.state.read_conf(int(p["vmid"]))
        return [{"subdir": d} for d in ("config", "pending", "status", "snapshot", "firewall", "rrd", "rrddata",
                                        "vncproxy", "termproxy", "vncwebsocket", "spiceproxy", "migrate",
                                        "clone", "template", "resize", "move_volume", "feature", "interfaces")]

    def _typed_config(self, conf: LxcConfig, returns: Mapping[str, Any]) -> dict[str, Any]:
        props = returns.get("properties") or {}
        out: dict[str, Any] = {}
        for key, value in conf.to_api_dict().items():
            sub = lookup_property(props, key) if isinstance(value, str) else None
            if sub is None or not isinstance(value, str):
                out[key] = value
            elif sub.get("type") in ("integer", "boolean") and re.match(r"^-?\d+$", value):
                out[key] = int(value)
            elif sub.get("type") == "number" and re.match(r"^-?\d+(\.\d+)?$", value):
                num = float(value)
                out[key] = int(num) if num.is_integer() else num
            else:
                out[key] = value
        return out

    def _get_config(self, p: dict[str, Any], ident: Identity) -> dict[str, Any]:
        vmid = int(p["vmid"])
        self._check_perm(ident, privileges.audit_needs(vmid))
        conf = self.state.read_conf(vmid)
        if snap := p.get("snapshot"):
            raise ApiError(500, f"snapshot '{snap}' does not exist\n")
        if not p.get("current") and conf.pending():
            # vm_config: "current: Get current values (instead of pending values)" -- by default the
            # pending values and deletes are applied to the answer
            view = LxcConfig.parse(conf.render())
            for key in conf.pending_deletes():
                view.delete(key)
            for key, value in conf.pending().items():
                if key == "description":
                    view.description = value
                elif key != "delete":
                    view.set(key, value)
            view.set_pending({})
            conf = view
        ms = load_schema(self.state.settings().pve_version).method("GET", f"/nodes/x/lxc/{vmid}/config")
        returns = ms[0].returns if ms else {}
        return self._typed_config(conf, returns)

    #: pve-container src/PVE/LXC/Config.pm ``$LXC_FASTPLUG_OPTIONS``: applied at once on a running CT
    FASTPLUG = frozenset({"description", "onboot", "startup", "protection", "hostname", "hookscript", "cores",
                          "tags", "lock"})

    def _hotpluggable(self, key: str, conf: LxcConfig) -> bool:
        """Whether ``vmconfig_hotplug_pending`` applies `key` to a running container (else it stays in
        ``[pve:pending]`` until the container stops or starts): the fast-plug options; cpulimit, cpuunits,
        memory, swap and netN through the cgroup/veth; a *new* mpN; a *new* devN only since pve-container
        6.0.4 (PVE 9; commit c702167 "implement device hotplug") -- an existing devN or mpN never
        (``die "skip\n"``)."""
        if key in self.FASTPLUG or key in ("cpulimit", "cpuunits", "memory", "swap") or re.fullmatch(r"net\d+", key):
            return True
        if re.fullmatch(r"mp\d+", key):
            return key not in conf
        if re.fullmatch(r"dev\d+", key):
            return key not in conf and self.state.settings().pve_version == "9"
        return False

    def _put_config(self, p: dict[str, Any], ident: Identity) -> None:
        """``update_vm`` under ``lock_config``: every change goes through ``[pve:pending]``
        (``update_pct_config``); a stopped CT gets it applied at once (``vmconfig_apply_pending``), a running
        one only what ``vmconfig_hotplug_pending`` can hot-plug; ``cleanup_pending`` drops pending values
        equal to the current ones."""
        vmid = int(p["vmid"])
        delete = [k for k in re.split(r"[,;\s]+", str(p.get("delete", ""))) if k]
        skip = {"node", "vmid", "delete", "digest", "revert"}
        changes = {k: (("1" if v else "0") if isinstance(v, bool) else str(v)) for k, v in p.items() if k not in skip}
        current = self.state.read_conf(vmid)
        unpriv = current.get("unprivileged") == "1"
        needs = privileges.update_needs(vmid, changes, unprivileged=unpriv, old=current.options())
        for key in delete:
            needs += privileges.config_needs(key, None, vmid=vmid, unprivileged=unpriv, old=current.get(key))
        self._check_perm(ident, needs)
        with self.state.config_lock(vmid), self.state.lock():
            conf = self.state.read_conf(vmid)
            if (digest := p.get("digest")) and digest != conf.digest():
                raise ApiError(500, "detected modified configuration - file changed by other user? Try again.\n")
            if lock := conf.get("lock"):
                raise ApiError(500, f"CT is locked ({lock})\n")
            if missing := self._missing_devices(changes):
                raise ApiError(500, f"Device {missing[0]} does not exist\n")
            running = self.state.get_status(vmid).status == "running"
            pending = conf.pending()
            pending_deletes = conf.pending_deletes()
            pending.pop("delete", None)
            for key in delete:
                pending.pop(key, None)
                hot = key in self.FASTPLUG or key in ("swap", "cpulimit", "cpuunits") or \
                    bool(re.fullmatch(r"net\d+|unused\d+", key))
                if not running or hot:
                    if key == "description":
                        conf.description = None
                    else:
                        conf.delete(key)
                    pending_deletes = [k for k in pending_deletes if k != key]
                elif key not in pending_deletes:
                    pending_deletes.append(key)
            for key, value in changes.items():
                pending_deletes = [k for k in pending_deletes if k != key]
                if running and not self._hotpluggable(key, conf):
                    pending[key] = value
                    continue
                pending.pop(key, None)
                if key == "description":
                    conf.description = value
                else:
                    conf.set(key, value)
            # AbstractConfig::cleanup_pending: a pending value equal to the current one is no change
            pending = {k: v for k, v in pending.items() if conf.get(k) != v}
            if pending_deletes:
                pending["delete"] = ",".join(pending_deletes)
            conf.set_pending(pending)
            self.state.write_conf(vmid, conf)
        return None

    def apply_pending(self, vmid: int) -> None:
        """``vmconfig_apply_pending`` (``vm_start``, and the poststop hook after a stop)."""
        with self.state.config_lock(vmid), self.state.lock():
            conf = self.state.read_conf(vmid)
            pending = conf.pending()
            if not pending:
                return
            for key in conf.pending_deletes():
                conf.delete(key)
            for key, value in pending.items():
                if key == "description":
                    conf.description = value
                elif key != "delete":
                    conf.set(key, value)
            conf.set_pending({})
            self.state.write_conf(vmid, conf)

    def _resize(self, p: dict[str, Any], ident: Identity) -> str:
        """`resize_vm` of pve-container (src/PVE/API2/LXC.pm): `+` adds to the volume's size, a smaller size
        is refused ("unable to shrink disk size"), the same size too ("disk is already at specified size",
        PVE 8.1+); the config's `size=` follows in a `resize` task."""
        vmid, disk, size = int(p["vmid"]), str(p["disk"]), str(p["size"])
        with self.state.lock():
            conf = self.state.read_conf(vmid)
            self._check_unlocked(conf)
            if not conf.get(disk):
                raise ApiError(500, f"disk '{disk}' does not exist\n")
            mp = parse_property_string(str(conf.get(disk)), "volume")
            current = _size_text(mp.get("size", "0"))
            wanted = _size_text(size.lstrip("+"))
            new = current + wanted if size.startswith("+") else wanted
            if new < current:
                raise ApiError(500, "unable to shrink disk size\n")
            if new == current:
                raise ApiError(500, "disk is already at specified size\n")

        def work(log: list[str]) -> None:
            with self.state.lock():
                conf = self.state.read_conf(vmid)
                mp = parse_property_string(str(conf.get(disk)), "volume")
                mp["size"] = f"{new // 1024**3}G" if new % 1024**3 == 0 else f"{new // 1024**2}M"
                conf.set(disk, format_property_string(mp, "volume"))
                self.state.write_conf(vmid, conf)
            log.append(f'  Size of logical volume pve/vm-{vmid}-disk-0 changed to {new / 1024**3:g} GiB.')
            log.append(f"  Logical volume pve/vm-{vmid}-disk-0 successfully resized.")

        return self.start_task("resize", str(vmid), ident, work)

    def _pending(self, p: dict[str, Any], ident: Identity) -> list[dict[str, Any]]:
        """``vm_pending``: PVE::GuestHelpers::config_with_pending_array (current value, pending value,
        ``delete: 1`` for a pending delete)."""
        vmid = int(p["vmid"])
        self._check_perm(ident, privileges.audit_needs(vmid))
        conf = self.state.read_conf(vmid)
        pending = conf.pending()
        deletes = set(conf.pending_deletes())
        out: list[dict[str, Any]] = []
        current = conf.options()
        if (descr := conf.description) is not None:
            current["description"] = descr + "\n"
        current["digest"] = conf.digest()
        for key, value in current.items():
            item: dict[str, Any] = {"key": key, "value": value}
            if key in pending:
                item["pending"] = pending[key]
            if key in deletes:
                item["delete"] = 1
            out.append(item)
        out += [{"key": k, "pending": v} for k, v in pending.items() if k != "delete" and k not in current]
        out += [{"key": k, "delete": 1} for k in deletes if k not in current]
        return out

    def _status_idx(self, p: dict[str, Any], ident: Identity) -> list[dict[str, str]]:
        self.state.read_conf(int(p["vmid"]))
        return [{"subdir": d} for d in ("current", "start", "stop", "shutdown", "reboot", "suspend", "resume")]

    def _status_current(self, p: dict[str, Any], ident: Identity) -> dict[str, Any]:
        self._check_perm(ident, privileges.audit_needs(int(p["vmid"])))
        out = self._ct_summary(int(p["vmid"]))
        out["ha"] = {"managed": 0}
        return out

    def _check_unlocked(self, conf: LxcConfig) -> None:
        if lock := conf.get("lock"):
            raise ApiError(500, f"CT is locked ({lock})\n")

    def _start_work(self, vmid: int, log: list[str]) -> None:
        self.apply_pending(vmid)  # PVE::LXC::vm_start: "apply pending changes while starting"
        conf = self.state.read_conf(vmid)
        hook_failed = [
            "run_buffer: 571 Script exited with status 255",
            f'lxc_init: 845 Failed to run lxc.hook.pre-start for container "{vmid}"',
            f'__lxc_start: 2034 Failed to initialize container "{vmid}"',
        ]
        if missing := self._missing_devices(conf.options()):
            # PVE::LXC::vm_start calls update_lxc_config before lxc-start, and it stats every devN path
            # (PVE::LXC::Tools::get_device_mode_and_rdev): the task dies there, before the prestart hook
            raise TaskError(f"Device {missing[0]} does not exist")
        if self._unknown_bridges(conf.options()):
            # lxc-start runs pve-container's network hook (src/lxcnetaddbr) for each netN: it reads
            # /sys/class/net/<bridge>/mtu and dies "bridge '<bridge>' does not exist" (exit 2: ENOENT) when the
            # bridge is not on the node; the hook's words are not in the task log, only lxc's. The lines are
            # a real node's without vmbr0 (tteck/Proxmox#181, 2022-04-20, LXC 4.0: their line numbers)
            log.extend(["run_buffer: 321 Script exited with status 2",
                        "lxc_create_network_priv: 3413 No such device - Failed to create network device",
                        "lxc_spawn: 1843 Failed to create the network",
                        f'__lxc_start: 2074 Failed to spawn container "{vmid}"'])
            raise TaskError(f"startup for container '{vmid}' failed")
        if self.state.has_scenario("start-fails"):
            log.append(f"lxc-start: {vmid}: ../src/lxc/cgroups/cgfsng.c: cgfsng_setup_limits: 3270 "
                       "No such file or directory - Failed to setup limits for the \"devices\" controller")
            log.extend(hook_failed[1:])
            raise TaskError(f"startup for container '{vmid}' failed")
        self.state.set_status(vmid, "running")

    def _unknown_bridges(self, options: Mapping[str, Any]) -> list[str]:
        """The bridges the container's netN entries name that the node does not have, in netN order."""
        have = bridge_names(get_profile(self.state.settings().profile).network)
        out = []
        for key in sorted((k for k in options if re.fullmatch(r"net\d+", k)), key=lambda k: int(k[3:])):
            bridge = parse_property_string(str(options[key]), "name").get("bridge")
            if bridge and bridge not in have:
                out.append(bridge)
        return out

    def _start(self, p: dict[str, Any], ident: Identity) -> str:
        vmid = int(p["vmid"])
        self._check_perm(ident, privileges.power_needs(vmid))
        conf = self.state.read_conf(vmid)
        if not p.get("skiplock"):
            self._check_unlocked(conf)
        if self.state.get_status(vmid).status == "running":
            raise ApiError(500, f"CT {vmid} already running\n")
        return self.start_task("vzstart", str(vmid), ident, lambda log: self._start_work(vmid, log))

    def _running_ct(self, p: dict[str, Any], ident: Identity) -> int:
        """The vmid of a stop, shutdown or reboot: the caller may power it, its config exists, it runs."""
        vmid = int(p["vmid"])
        self._check_perm(ident, privileges.power_needs(vmid))
        self.state.read_conf(vmid)
        if self.state.get_status(vmid).status != "running":
            raise ApiError(500, f"CT {vmid} not running\n")
        return vmid

    def _stop_common(self, p: dict[str, Any], ident: Identity, type_: str) -> str:
        vmid = self._running_ct(p, ident)

        def work(log: list[str]) -> None:
            self.state.set_status(vmid, "stopped")
            self.apply_pending(vmid)  # src/lxc-pve-poststop-hook: vmconfig_apply_pending

        return self.start_task(type_, str(vmid), ident, work)

    def _stop(self, p: dict[str, Any], ident: Identity) -> str:
        return self._stop_common(p, ident, "vzstop")

    def _shutdown(self, p: dict[str, Any], ident: Identity) -> str:
        return self._stop_common(p, ident, "vzshutdown")

    def _reboot(self, p: dict[str, Any], ident: Identity) -> str:
        vmid = self._running_ct(p, ident)

        def work(log: list[str]) -> None:
            self.state.set_status(vmid, "stopped")
            self._start_work(vmid, log)

        return self.start_task("vzreboot", str(vmid), ident, work)

    def _destroy(self, p: dict[str, Any], ident: Identity) -> str:
        vmid = int(p["vmid"])
        self._check_perm(ident, [privileges.Need(("VM.Allocate",), f"/vms/{vmid}", "destroy")])
        conf = self.state.read_conf(vmid)
        if self.state.get_status(vmid).status == "running":
            raise ApiError(500, f"CT {vmid} is running - destroy failed\n")
        self._check_unlocked(conf)
        rootfs = parse_property_string(conf.get("rootfs") or "", "volume").get("volume", "")

        def work(log: list[str]) -> None:
            if rootfs:
                log.append(f'  Logical volume "{rootfs.split(":", 1)[-1]}" successfully removed.')
            self.state.delete_ct(vmid)

        return self.start_task("vzdestroy", str(vmid), ident, work)

    # -- network -----------------------------------------------------------------------------
    def _network(self, p: dict[str, Any], ident: Identity) -> list[dict[str, Any]]:
        """``GET /nodes/{node}/network`` (pve-manager PVE::API2::Network ``index``: `node_network`)."""
        def may_use(bridge: str) -> bool:  # check_sdn_bridge(user, 'localnetwork', bridge, [SDN.Audit, SDN.Use])
            path = f"/sdn/zones/localnetwork/{bridge}"
            return ident.is_root_pam or self._can(ident, "SDN.Audit", path) or self._can(ident, "SDN.Use", path)

        type_filter = p.get("type")
        return network_index(get_profile(self.state.settings().profile).network,
                             None if type_filter is None else str(type_filter), may_use)

    # -- storage / templates ---------------------------------------------------------------
    def _storage_index(self, p: dict[str, Any], ident: Identity) -> list[dict[str, Any]]:
        want = [c for c in re.split(r"[,;\s]+", str(p.get("content", ""))) if c]
        out = []
        for st in self.state.settings().storages:
            if p.get("storage") and p["storage"] != st.id:
                continue
            if want and not all(c in st.content for c in want):
                continue
            out.append({
                "storage": st.id, "type": st.type, "content": ",".join(sorted(st.content)),
                "active": 1, "enabled": 1, "shared": 0, "total": st.total, "used": st.used,
                "avail": st.total - st.used, "used_fraction": round(st.used / st.total, 6) if st.total else 0,
            })
        return out

    def _storage_content(self, p: dict[str, Any], ident: Identity) -> list[dict[str, Any]]:
        s = self.state.settings()
        st = self._storage(str(p["storage"]))
        self._check_perm(ident, privileges.storage_read_needs(st.id))
        content = p.get("content")
        out: list[dict[str, Any]] = []
        if "vztmpl" in st.content and content in (None, "vztmpl"):
            for volid in s.templates:
                if volid.startswith(f"{st.id}:"):
                    name = volid.split("/", 1)[-1]
                    fmt = "tzst" if name.endswith(".tar.zst") else "tgz" if name.endswith(".tar.gz") else "txz"
                    out.append({"volid": volid, "format": fmt, "size": TEMPLATE_SIZES.get(name, 130_000_000),
                                "ctime": int(s.created), "content": "vztmpl"})
            if s.pve_version == "9":  # Plugin.pm get_subdir_files: the files of the vztmpl dir, PVE 9.1's names
                out += oci_template.listed_templates(self.state.root, st.id, st.path)
        if "rootdir" in st.content and content in (None, "rootdir", "images"):
            for vmid in self.state.list_cts():
                if p.get("vmid") and int(p["vmid"]) != vmid:
                    continue
                rootfs = parse_property_string(self.state.read_conf(vmid).get("rootfs") or "", "volume")
                if rootfs.get("volume", "").startswith(f"{st.id}:"):
                    out.append({"volid": rootfs["volume"], "format": "raw", "vmid": vmid, "content": "rootdir",
                                "size": _size_text(rootfs.get("size", "0")), "ctime": int(time.time())})
        return out

    def _aplinfo(self, p: dict[str, Any], ident: Identity) -> list[dict[str, str]]:
        return list(self.state.settings().aplinfo)

    def _apl_download(self, p: dict[str, Any], ident: Identity) -> str:
        s = self.state.settings()
        template = str(p["template"])
        entry = next((e for e in s.aplinfo if e.get("template") == template), None)
        if entry is None:
            raise param_error({"template": "no such template"})
        st = self._storage(str(p["storage"]))
        self._check_perm(ident, privileges.template_download_needs(st.id))
        if "vztmpl" not in st.content:
            raise ApiError(500, f"storage '{st.id}' does not support templates\n")
        volid = f"{st.id}:vztmpl/{template}"

        def work(log: list[str]) -> None:
            path = f"{st.path or '/var/lib/vz'}/template/cache/{template}"
            size = TEMPLATE_SIZES.get(template, 130_000_000)
            log.extend([
                f"downloading {entry['location']} to {path}",
                f"--{time.strftime('%Y-%m-%d %H:%M:%S')}--  {entry['location']}",
                "Resolving download.proxmox.com (download.proxmox.com)... 212.224.123.70",
                "Connecting to download.proxmox.com (download.proxmox.com)|212.224.123.70|:80... connected.",
                "HTTP request sent, awaiting response... 200 OK",
                f"Length: {size} ({size / 1024**2:.0f}M) [application/octet-stream]",
                f"Saving to: '{path}.tmp.{_b64(template.encode())[:6]}'",
                "calculating checksum...OK, checksum verified",
                f"download of '{entry['location']}' to '{path}' finished",
            ])
            with self.state.lock():
                current = self.state.settings().templates
                if volid not in current:
                    self.state.update_settings(templates=[*current, volid])

        return self.start_task("download", template, ident, work)

    # -- tasks -----------------------------------------------------------------------------
    def _task_record(self, upid: str) -> dict[str, Any]:
        try:
            decode_upid(upid)
        except ValueError:
            raise param_error({"upid": "unable to parse worker upid"}) from None
        rec = self.state.get_task(upid)
        if rec is None:
            raise param_error({"upid": "no such task"})
        out = rec.model_dump(exclude_none=True)
        if "!" in rec.user:
            out["user"], out["tokenid"] = rec.user.split("!", 1)
        return out

    def _task_status(self, p: dict[str, Any], ident: Identity) -> dict[str, Any]:
        out = self._task_record(str(p["upid"]))
        out.pop("endtime", None)
        return out

    def _task_log(self, p: dict[str, Any], ident: Identity) -> _WithExtra:
        upid = str(p["upid"])
        self._task_record(upid)
        lines = self.state.task_log(upid)
        start = int(p.get("start", 0))
        limit = int(p.get("limit", 50))
        chunk = lines[start:start + limit] if limit else lines[start:]
        data = [{"n": start + i + 1, "t": t} for i, t in enumerate(chunk)]
        if not lines:
            data = [{"n": 1, "t": "no content"}]
        return _WithExtra(data, {"total": len(lines) or 1})

    def _task_list(self, p: dict[str, Any], ident: Identity) -> list[dict[str, Any]]:
        out = []
        for rec in self.state.list_tasks():
            if p.get("vmid") and rec.id != str(p["vmid"]):
                continue
            if p.get("typefilter") and rec.type != p["typefilter"]:
                continue
            if p.get("source") == "active" and rec.status != "running":
                continue
            item = rec.model_dump(exclude_none=True)
            item.pop("exitstatus", None)
            if rec.exitstatus is not None:
                item["status"] = rec.exitstatus
            else:
                item.pop("status", None)
            out.append(item)
        start, limit = int(p.get("start", 0)), int(p.get("limit", 50))
        return out[start:start + limit]

    def _task_stop(self, p: dict[str, Any], ident: Identity) -> None:
        upid = str(p["upid"])
        rec = self._task_record(upid)
        if rec["status"] == "running":
            self.state.finish_task(upid, "interrupted by signal")
        return None


@dataclass
class _WithExtra:
    data: Any
    extra: dict[str, Any]


# ------------------------------------------------------------------------------------------
# HTTPS server
# ------------------------------------------------------------------------------------------
_TOKEN_RE = re.compile(r"(?:^|\s)PVEAPIToken(?:=| )([^;]*)")
_COOKIE_AUTH_RE = re.compile(r"(?:^|\s)PVEAuthCookie=([^;\s]*)")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "pve-api-daemon/3.0"
    sys_version = ""
    server: _LabHttpServer

    def setup(self) -> None:
        self.request.settimeout(30)
        try:
            self.request.do_handshake()
        except (ssl.SSLError, OSError):
            self._handshake_failed = True
        else:
            self._handshake_failed = False
        super().setup()

    def handle(self) -> None:
        if self._handshake_failed:
            self.close_connection = True
            return
        try:
            super().handle()
        except (ssl.SSLError, ConnectionError, TimeoutError):
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _send(self, status: int, reason: str, body: bytes) -> None:
        self.send_response(status, reason)
        if body:
            self.send_header("Content-Type", "application/json;charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=0")
        self.send_header("Pragma", "no-cache")
        self.send_header("Expires", self.date_time_string())
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _read_params(self) -> tuple[dict[str, Any], Wire]:
        split = urlsplit(self.path)
        params: dict[str, Any] = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        wire: Wire = "form"
        if raw:
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            if ctype == "application/json":
                body = json.loads(raw.decode())
                if not isinstance(body, dict):
                    raise ValueError("JSON body must be an object")
                params.update(body)
                wire = "json"
            else:
                params.update({k: v[-1] for k, v in parse_qs(raw.decode(), keep_blank_values=True).items()})
        return params, wire

    def _authenticate(self, method: str, rel: str) -> Identity | str:
        api = self.server.api
        authz = self.headers.get("Authorization") or ""
        if m := _TOKEN_RE.search(authz):
            value = m.group(1)
            if "=" not in value:
                return "Authentication failed!"
            tokenid, secret = value.rsplit("=", 1)
            if not api.state.check_token(tokenid, secret):
                return "Authentication failed!"
            return Identity("token", tokenid)
        ticket = None
        if m := _COOKIE_AUTH_RE.search(self.headers.get("Cookie") or ""):
            ticket = unquote(m.group(1))
        elif m := _COOKIE_AUTH_RE.search(authz):
            ticket = unquote(m.group(1))
        if not ticket:
            return "No ticket"
        user = api.verify_ticket(ticket)
        if user is None:
            return "Authentication failed!"
        if method != "GET" and not api.verify_csrf(user, self.headers.get("CSRFPreventionToken") or ""):
            return "Permission denied - invalid csrf token"
        return Identity("ticket", user)

    def _dispatch(self, method: str) -> None:
        api = self.server.api
        path = urlsplit(self.path).path
        if not (path == API_PREFIX or path.startswith(API_PREFIX + "/")):
            self._send(404, "Not Found", b"")
            return
        rel = unquote(path[len(API_PREFIX):]) or "/"
        try:
            params, wire = self._read_params()
        except (ValueError, UnicodeDecodeError) as exc:
            res = ApiResult(400, message=f"unable to parse request body - {exc}\n")
            self._send(res.status, res.reason, json.dumps(res.body()).encode())
            return
        public = rel.rstrip("/") == "/access/ticket"
        identity: Identity | None = None
        if not public:
            auth = self._authenticate(method, rel)
            if isinstance(auth, str):
                res = ApiResult(401, message=auth)
                api.log_request(method, rel, params, None, res, None, False, wire)
                if self.server.auth_fail_delay:
                    time.sleep(self.server.auth_fail_delay)
                self._send(401, auth, b"")
                return
            identity = auth
        result = api.call(method, rel, params, identity or Identity("ticket", ""), wire)
        if result.status == 401:
            if self.server.auth_fail_delay:
                time.sleep(self.server.auth_fail_delay)
            self._send(401, result.reason, b"")
            return
        self._send(result.status, result.reason, json.dumps(result.body()).encode())


class _LabHttpServer(ThreadingHTTPServer):
    daemon_threads = True
    api: LabApi
    auth_fail_delay: float

    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # clients that reject our certificate or hang up are not server errors


class LabApiServer(BackgroundHttpServer):
    """The lab's PVE API over HTTPS on loopback (port 0 = a free port)."""

    thread_name = "lab-pve-api"

    def __init__(self, state: LabState, host: str = "127.0.0.1", port: int = 0, *,
                 auth_fail_delay: float = 0.0) -> None:
        self.state = state
        self.api = LabApi(state)
        self.host = host
        self.tls: LabTls = ensure_lab_tls(state.tls_dir, state.settings().node)
        self._httpd = _LabHttpServer((host, port), _Handler, bind_and_activate=True)
        self._httpd.api = self.api
        self._httpd.auth_fail_delay = auth_fail_delay
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.tls.cert, self.tls.key)
        self._httpd.socket = ctx.wrap_socket(self._httpd.socket, server_side=True, do_handshake_on_connect=False)


    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}{API_PREFIX}"

    @property
    def fingerprint(self) -> str:
        """SHA-256 fingerprint of the server certificate (``AB:CD:...``)."""
        return self.tls.fingerprint

    @property
    def cafile(self) -> Path:
        """PEM file to trust (pass as ``verify=``)."""
        return self.tls.ca_cert

    def stop(self) -> None:
        super().stop()
        self.api.join_tasks(2.0)
        self.api.join_tasks(2.0)

    def __enter__(self) -> LabApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
