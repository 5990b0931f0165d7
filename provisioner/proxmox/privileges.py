"""Which Proxmox VE privileges the engine's API calls need, on which ACL path: one rule table.

Read from the real sources (cite by function; snapshots in ../shared/reference/proxmox.md):

* pve-container ``src/PVE/API2/LXC.pm`` ``create_vm``: ``VM.Allocate`` on ``/vms/{vmid}``;
  ``Sys.Modify`` on ``/`` for a privileged container; the template through
  ``PVE::Storage::check_volume_access`` (a ``vztmpl`` volume: ``Datastore.AllocateSpace`` or
  ``Datastore.Audit`` on ``/storage/{sid}``); the default storage's ``Datastore.AllocateSpace``
  (``$check_and_activate_storage``); then every remaining parameter through
* pve-container ``src/PVE/LXC.pm`` ``check_ct_modify_config_perm`` (``PUT .../config`` runs it
  too): ``cores``/``cpulimit``/``cpuunits`` → ``VM.Config.CPU``; ``rootfs``/``mpN`` →
  ``VM.Config.Disk`` + ``Datastore.AllocateSpace`` on the storage of a new volume; ``memory``/
  ``swap`` → ``VM.Config.Memory``; ``netN`` → ``VM.Config.Network`` + ``check_bridge_access``
  (pve-guest-common ``PVE::GuestHelpers::check_vnet_access``: ``SDN.Use`` on
  ``/sdn/zones/localnetwork/{bridge}`` for a plain bridge; since pve-container 5.0, PVE 8.0);
  ``nameserver``/``searchdomain``/``hostname`` → ``VM.Config.Network``; ``devN`` and
  ``hookscript`` → only ``root@pam``; ``features`` → only ``root@pam`` on a privileged container,
  else ``nesting`` alone → ``VM.Allocate`` (other flags root@pam); ``tags`` →
  ``assert_tag_permissions`` (``VM.Config.Options``; ``Sys.Modify`` on ``/`` for tags a
  datacenter's ``user-tag-access`` does not allow); anything else → ``VM.Config.Options``.
  ``root@pam`` itself passes every check; a token ``root@pam!x`` is not ``root@pam``.
* power: ``VM.PowerMgmt`` on ``/vms/{vmid}`` (API2/LXC/Status.pm); listing and status:
  ``VM.Audit`` on ``/vms/{vmid}`` (``vmlist`` leaves out the containers one may not audit);
  template download: ``Datastore.AllocateTemplate`` on ``/storage/{sid}`` (pve-manager
  API2/Nodes.pm ``apl_download``); storage content: ``Datastore.Audit`` or
  ``Datastore.AllocateSpace`` on ``/storage/{sid}``.
* effective permissions (pve-access-control ``PVE::RPCEnvironment::permissions``,
  ``PVE::AccessControl::roles``): ``root@pam`` has every privilege; an ACL on a path applies
  there and, with ``propagate``, below it, and a more specific path replaces what an upper one
  gave; a token without privilege separation has its user's privileges, with it the token's own
  ACLs intersected with its user's. ``GET /access/permissions`` answers ``{path: {priv: propagate}}``
  (``get_effective_permissions``) for the default top paths and every path named in an ACL.

`README.md`'s least-privilege table is `render_table()` (tests/test_privileges.py compares them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from provisioner.proxmox.lxc_conf import parse_property_string

#: the pseudo-privilege of what only ``root@pam`` may do (a root shell on the node: ``pct set``)
ROOT_PAM = "root@pam"

#: every privilege of PVE 8/9 (pve-access-control src/PVE/AccessControl.pm ``$privgroups``)
ALL_PRIVILEGES: tuple[str, ...] = (
    "VM.Config.Disk", "VM.Config.CPU", "VM.Config.Memory", "VM.Config.Network", "VM.Config.HWType",
    "VM.Config.Options", "VM.Allocate", "VM.Clone", "VM.GuestAgent.Unrestricted", "VM.Migrate", "VM.Replicate",
    "VM.Snapshot", "VM.Snapshot.Rollback", "VM.Config.CDROM", "VM.Config.Cloudinit", "VM.Console", "VM.Backup",
    "VM.GuestAgent.FileRead", "VM.GuestAgent.FileSystemMgmt", "VM.GuestAgent.FileWrite", "VM.PowerMgmt",
    "VM.Audit", "VM.GuestAgent.Audit", "Sys.PowerMgmt", "Sys.Modify", "Sys.Incoming", "Sys.AccessNetwork",
    "Sys.Console", "Sys.Syslog", "Sys.Audit", "Datastore.Allocate", "Datastore.AllocateTemplate",
    "Datastore.AllocateSpace", "Datastore.Audit", "SDN.Allocate", "SDN.Audit", "SDN.Use", "Realm.Allocate",
    "User.Modify", "Group.Allocate", "Realm.AllocateUser", "Pool.Allocate", "Pool.Audit", "Mapping.Modify",
    "Mapping.Use", "Mapping.Audit",
)

#: the top paths `get_effective_permissions` always lists
DEFAULT_PATHS = ("/", "/access", "/access/groups", "/nodes", "/pool", "/sdn", "/storage", "/vms")


@dataclass(frozen=True)
class Need:
    """One privilege check: any of `privileges` on `path` (``root@pam``: only that user)."""

    privileges: tuple[str, ...]
    path: str
    why: str

    @property
    def root_only(self) -> bool:
        return self.privileges == (ROOT_PAM,)

    def text(self) -> str:
        if self.root_only:
            return f"root@pam: {self.why}"
        return f"{' or '.join(self.privileges)} on {self.path} ({self.why})"


@dataclass(frozen=True)
class ConfigRule:
    """One branch of ``check_ct_modify_config_perm``: the keys it matches and what it checks."""

    keys: str  # regex over the config key
    label: str  # README column
    privileges: tuple[str, ...]
    path: str
    also: str = ""  # README: further checks of the branch


CONFIG_RULES: tuple[ConfigRule, ...] = (
    ConfigRule(r"cores|cpulimit|cpuunits", "`cores`, `cpulimit`, `cpuunits`", ("VM.Config.CPU",), "/vms/{vmid}"),
    ConfigRule(r"rootfs|mp\d+", "`rootfs`, `mpN`", ("VM.Config.Disk",), "/vms/{vmid}",
               "+ `Datastore.AllocateSpace` on `/storage/{storage}` of a new volume"),
    ConfigRule(r"memory|swap", "`memory`, `swap`", ("VM.Config.Memory",), "/vms/{vmid}"),
    ConfigRule(r"net\d+", "`netN`", ("VM.Config.Network",), "/vms/{vmid}",
               "+ `SDN.Use` on `/sdn/zones/localnetwork/{bridge}`"),
    ConfigRule(r"nameserver|searchdomain|hostname", "`hostname`, `nameserver`, `searchdomain`",
               ("VM.Config.Network",), "/vms/{vmid}"),
    ConfigRule(r"dev\d+", "`devN` (GPU passthrough)", (ROOT_PAM,), "/", "a root shell: `pct set` (tokens get 403)"),
    ConfigRule(r"hookscript", "`hookscript`", (ROOT_PAM,), "/"),
    ConfigRule(r"features", "`features: nesting=…` (unprivileged CT)", ("VM.Allocate",), "/vms/{vmid}",
               "other flags, or any on a privileged CT: root@pam"),
    ConfigRule(r"tags", "`tags`", ("VM.Config.Options",), "/vms/{vmid}",
               "+ `Sys.Modify` on `/` where `user-tag-access` does not allow the tag"),
    ConfigRule(r".*", "anything else (`onboot`, `ostype`, `arch`, `description`, …)", ("VM.Config.Options",),
               "/vms/{vmid}"),
)


def _fill(path: str, **values: object) -> str:
    return path.format(**{k: v for k, v in values.items()})


def config_needs(key: str, value: str | None, *, vmid: int, unprivileged: bool = True,
                 old: str | None = None) -> list[Need]:
    """What ``check_ct_modify_config_perm`` checks for one parameter (`value` None = a delete)."""
    rule = next(r for r in CONFIG_RULES if re.fullmatch(r.keys, key))
    why = f"{key}"
    if rule.privileges == (ROOT_PAM,):  # raise_perm_exc texts of check_ct_modify_config_perm
        text = "configuring device passthrough is only allowed for root@pam" if key.startswith("dev") else \
            "changing the hookscript is only allowed for root@pam"
        return [Need((ROOT_PAM,), "/", text)]
    if key == "features":
        flags = parse_property_string(value or old or "")
        if not unprivileged:
            return [Need((ROOT_PAM,), "/", "changing feature flags for privileged container is only allowed for "
                                           "root@pam")]
        if set(flags) - {"nesting"}:
            return [Need((ROOT_PAM,), "/", "changing feature flags (except nesting) is only allowed for root@pam")]
        if flags and (flags.get("nesting") or "") != (parse_property_string(old or "").get("nesting") or ""):
            return [Need(("VM.Allocate",), f"/vms/{vmid}", "features: nesting")]
        return []
    needs = [Need(rule.privileges, _fill(rule.path, vmid=vmid), why)]
    if value is None:
        return needs
    if re.fullmatch(r"rootfs|mp\d+", key):
        volume = parse_property_string(value, "volume").get("volume", "")
        if m := re.fullmatch(r"([a-z][a-z0-9\-_.]*[a-z0-9]):(\d+(\.\d+)?)", volume):  # $NEW_DISK_RE
            needs.append(Need(("Datastore.AllocateSpace",), f"/storage/{m.group(1)}", f"{key}: a new volume"))
    elif re.fullmatch(r"net\d+", key):
        net = parse_property_string(value)
        if bridge := net.get("bridge"):
            zone = f"/sdn/zones/localnetwork/{bridge}"
            tag = net.get("tag")
            needs.append(Need(("SDN.Use",), f"{zone}/{tag}" if tag else zone, f"{key}: bridge {bridge}"))
    return needs


#: create parameters ``create_vm`` extracts before ``check_ct_modify_config_perm``
_CREATE_EXTRACTED = {
    "node", "vmid", "ignore-unpack-errors", "bwlimit", "start", "ha-managed", "unprivileged", "restore", "unique",
    "force", "password", "ssh-public-keys", "pool", "ostemplate", "storage",
}


def create_needs(params: Mapping[str, Any]) -> list[Need]:
    """Every check of ``POST /nodes/{node}/lxc`` (``create_vm``) for these parameters."""
    vmid = int(params["vmid"])
    unprivileged = str(params.get("unprivileged", "0")) in ("1", "True", "true")
    needs = [Need(("VM.Allocate",), f"/vms/{vmid}", "create the container")]
    if not unprivileged:
        needs.append(Need(("Sys.Modify",), "/", "a privileged container"))
    template_storage = str(params.get("ostemplate", "")).partition(":")[0]
    if template_storage:
        needs.append(Need(("Datastore.AllocateSpace", "Datastore.Audit"), f"/storage/{template_storage}",
                          "read the template (check_volume_access)"))
    for key, value in params.items():
        if key in _CREATE_EXTRACTED:
            continue
        needs += config_needs(key, str(value), vmid=vmid, unprivileged=unprivileged)
    return needs


def update_needs(vmid: int, changes: Mapping[str, str], *, unprivileged: bool = True,
                 old: Mapping[str, str] | None = None) -> list[Need]:
    """``PUT /nodes/{node}/lxc/{vmid}/config`` with `changes` (``update_vm``)."""
    old = old or {}
    out: list[Need] = []
    for key, value in changes.items():
        if key in ("digest", "delete", "revert"):
            continue
        out += config_needs(key, value, vmid=vmid, unprivileged=unprivileged, old=old.get(key))
    return out


def power_needs(vmid: int, what: str = "start/stop") -> list[Need]:
    return [Need(("VM.PowerMgmt",), f"/vms/{vmid}", f"{what} the container")]


def audit_needs(vmid: int) -> list[Need]:
    return [Need(("VM.Audit",), f"/vms/{vmid}", "see the container (list, status, config)")]


def storage_read_needs(storage: str) -> list[Need]:
    return [Need(("Datastore.Audit", "Datastore.AllocateSpace"), f"/storage/{storage}", "list its templates")]


def template_download_needs(storage: str) -> list[Need]:
    return [Need(("Datastore.AllocateTemplate",), f"/storage/{storage}", "download the template")]


# --- effective permissions --------------------------------------------------------------------------

Permissions = Mapping[str, Mapping[str, Any]]  # GET /access/permissions: {path: {priv: propagate}}


def _parents(path: str) -> Iterable[str]:
    parts = [p for p in path.split("/") if p]
    for i in range(len(parts), -1, -1):
        yield "/" + "/".join(parts[:i])


def has_privilege(perms: Permissions, privilege: str, path: str) -> bool:
    """Whether `perms` (``GET /access/permissions``) grant `privilege` on `path`: the path itself when it
    is listed, else the nearest listed parent's privileges that propagate (value 1)."""
    for parent in _parents(path):
        if parent in perms:
            privs = perms[parent]
            if parent == path:
                return privilege in privs
            return bool(privs.get(privilege))
    return False


def missing(needs: Iterable[Need], perms: Permissions, *, user: str) -> list[Need]:
    """The needs `perms` do not satisfy for `user` (root@pam satisfies all; a token never is root@pam); the
    same privilege on the same path once, its reasons joined."""
    if user == ROOT_PAM:
        return []
    merged: dict[tuple[tuple[str, ...], str], Need] = {}
    for need in needs:
        if not need.root_only and any(has_privilege(perms, p, need.path) for p in need.privileges):
            continue
        key = (need.privileges, need.path if not need.root_only else need.why)
        if key in merged:
            first = merged[key]
            if need.why not in first.why.split(", "):
                merged[key] = Need(first.privileges, first.path, f"{first.why}, {need.why}")
        else:
            merged[key] = need
    return list(merged.values())


def effective_permissions(acl: Iterable[tuple[str, Iterable[str], bool]], paths: Iterable[str] = ()
                          ) -> dict[str, dict[str, int]]:
    """``get_effective_permissions`` over one identity's ACL entries (path, privileges, propagate): for
    every default path, ACL path and given path, the privileges that apply there (``roles``: the most
    specific entry on the way down replaces the upper ones; an upper one counts only if it propagates)."""
    entries: dict[str, dict[str, int]] = {}
    for path, privs, propagate in acl:
        slot = entries.setdefault(path.rstrip("/") or "/", {})
        for priv in privs:
            slot[priv] = max(slot.get(priv, 0), int(propagate))
    out: dict[str, dict[str, int]] = {}
    for path in {*DEFAULT_PATHS, *entries, *paths}:
        current: dict[str, int] = {}
        for parent in reversed(list(_parents(path))):
            entry = entries.get(parent)
            if entry is None:
                continue
            applied = {p: v for p, v in entry.items() if parent == path or v}
            if applied:
                current = applied
        if current:
            out[path] = current
    return out


# --- the README table ---------------------------------------------------------------------------------

#: what each step asks of the API besides the config keys (step kind, need, source)
STEP_RULES: tuple[tuple[str, str, str], ...] = (
    ("lxc.create", "`VM.Allocate` on `/vms/{vmid}`", "create_vm"),
    ("lxc.create", "`VM.Audit` on `/vms/{vmid}` (adopting an existing container: list, config)", "vmlist"),
    ("lxc.create", "`Datastore.AllocateSpace` or `Datastore.Audit` on `/storage/{template storage}`",
     "check_volume_access"),
    ("lxc.create", "`Datastore.AllocateTemplate` on `/storage/{template storage}` (only with "
                   "`download_template`)", "apl_download"),
    ("lxc.create", "`Sys.Modify` on `/` (only a privileged container)", "create_vm"),
    ("lxc.start", "`VM.PowerMgmt` on `/vms/{vmid}`; `VM.Audit` to read its status", "vm_start"),
    ("lxc.gpu_passthrough", "a root shell on the node (`pct set --devN` runs as root@pam; raw `lxc.*` lines "
                            "need a root edit of `/etc/pve/lxc/<vmid>.conf`)", "check_ct_modify_config_perm"),
)


def render_table() -> str:
    """The README's least-privilege table (Markdown), derived from `CONFIG_RULES` and `STEP_RULES`."""
    rows = ["| step / parameter | needs | checked in |", "|---|---|---|"]
    for kind, need, source in STEP_RULES:
        rows.append(f"| `{kind}` | {need} | `{source}` |")
    for rule in CONFIG_RULES:
        if rule.privileges == (ROOT_PAM,):
            need = "root@pam only" + (f" — {rule.also}" if rule.also else "")
        else:
            need = " or ".join(f"`{p}`" for p in rule.privileges) + f" on `{rule.path}`"
            if rule.also:
                need += f" {rule.also}" if rule.also.startswith("+") else f" ({rule.also})"
        rows.append(f"| parameter {rule.label} | {need} | `check_ct_modify_config_perm` |")
    return "\n".join(rows) + "\n"


def full_token_privileges() -> dict[str, list[str]]:
    """The least set a token needs for the shipped steps, by path (what the README tells to grant)."""
    return {
        "/vms": ["VM.Allocate", "VM.Audit", "VM.Config.CPU", "VM.Config.Disk", "VM.Config.Memory",
                 "VM.Config.Network", "VM.Config.Options", "VM.PowerMgmt"],
        "/storage": ["Datastore.AllocateSpace"],  # also reads the template (AllocateSpace or Audit)
        "/sdn/zones/localnetwork": ["SDN.Use"],
    }
