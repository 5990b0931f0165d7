"""Validators for parameters that end up on a command line or in an API call.

Every pattern is matched whole (`fullmatch`, `\\Z`): `$` would accept a trailing newline
(`'/opt/torch-venv2\\n'`). Character classes are ASCII: `str.isalnum()`/`isdigit()` accept Unicode
digits ('١', '²') that a shell, the kernel or Proxmox read differently. Paths are normalised
(`//etc`, `/./opt`, `a/../b`) before any guard compares them.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import AfterValidator

HOSTNAME_RE = re.compile(r"(?=.{1,253}\Z)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)"
                         r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\Z")
IPV4_RE = re.compile(r"(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){3}\Z")
STORAGE_RE = re.compile(r"[a-z][a-z0-9\-_.]*[a-z0-9]\Z", re.IGNORECASE)
ABS_PATH_RE = re.compile(r"/[A-Za-z0-9._+\-/]*\Z")
_CLAUSE = r"[ ]*(===|==|>=|<=|~=|!=|>|<)[ ]*[A-Za-z0-9.*+!_\-]+"
PKG_SPEC_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*(\[[A-Za-z0-9,._\-]+\])?"
                         rf"({_CLAUSE}([ ]*,{_CLAUSE})*)?\Z")
VERSION_RE = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)?\Z")
USER_RE = re.compile(r"[A-Za-z0-9._-]{1,64}\Z")
# Proxmox VE user and API token ids (pve-access-control PVE/Auth/Plugin.pm: `$realm_regex = qr/[A-Za-z][A-Za-z0-9\.\-_]+/`,
# `$user_regex = qr![^\s:/]+!`, `verify_username`: 3..64 characters as `user@realm`; PVE/AccessControl.pm:
# `$token_subid_regex = $realm_regex`). ASCII only and matched whole: Perl's `$` would accept a final newline.
PVE_REALM_RE = r"[A-Za-z][A-Za-z0-9._-]+"
PVE_USERID_RE = re.compile(rf"[!-~]+@{PVE_REALM_RE}\Z")
PVE_TOKEN_NAME_RE = re.compile(rf"{PVE_REALM_RE}\Z")
# A certificate's SHA-256 as `pvenode cert info` prints it: 32 colon-separated hex bytes (optionally `sha256:`).
TLS_FINGERPRINT_RE = re.compile(r"(sha256:)?[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){31}\Z", re.IGNORECASE)
# Linux interface names: at most 15 bytes (IFNAMSIZ - 1); PVE's pve-bridge-id is [-_.\w\d]+.
BRIDGE_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]{0,14}\Z")

TEMPLATE_FILE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+\-]*\Z")  # the file part of storage:vztmpl/<file>
MAX_MEMORY_MIB = 64 * 1024 * 1024  # 64 TiB: far above any node, far below 1e30

VMID_MIN, VMID_MAX = 100, 999_999_999  # PVE's pve-vmid format (PVE::JSONSchema)

# A venv (or anything we may `rm -rf` with recreate: true) is never one of these directories...
SYSTEM_DIRS = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media", "/mnt", "/opt",
    "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/usr/bin", "/usr/include", "/usr/lib",
    "/usr/lib64", "/usr/libexec", "/usr/local", "/usr/local/bin", "/usr/local/lib", "/usr/sbin", "/usr/share",
    "/usr/src", "/var", "/var/cache", "/var/lib", "/var/log", "/var/tmp", "/var/spool", "/var/mail", "/var/opt",
})
# ...nor anywhere beneath these trees (kernel filesystems, boot files, credentials, system config).
SYSTEM_TREES = ("/dev", "/proc", "/sys", "/boot", "/etc", "/run", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
                "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/include", "/var/lib/dpkg", "/var/lib/apt",
                "/root/.ssh", "/root/.gnupg", "/home/*/.ssh")


def _full(pattern: re.Pattern[str], value: str) -> bool:
    return pattern.fullmatch(value) is not None


def hostname(value: str) -> str:
    if not _full(HOSTNAME_RE, value):
        raise ValueError(f"not a valid DNS host name: {value!r}")
    return value


def host_address(value: str) -> str:
    """An SSH/API address: an IPv4 address, an IPv6 address (without brackets) or a DNS name.

    What `ipaddress` parses is an address; a name made only of digits and dots is never a host name
    (RFC 1123 §2.1: the top-level label is not all-numeric), so `300.1.2.3` is refused."""
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if _full(HOSTNAME_RE, value) and not value.rstrip(".").rsplit(".", 1)[-1].isdigit():
        return value
    raise ValueError(f"{value!r} is not an IPv4 address (like 192.0.2.10), an IPv6 address (like fd00::10) "
                     "or a host name (like pve1.example.org)")


def ipv4(value: str) -> str:
    if not _full(IPV4_RE, value):
        raise ValueError(f"not an IPv4 address: {value!r}")
    return value


def ipv4_cidr(value: str) -> str:
    """`a.b.c.d/n` with ASCII digits and 0 < n <= 32."""
    addr, sep, prefix = value.partition("/")
    if not sep or not _full(IPV4_RE, addr) or not re.fullmatch(r"[0-9]{1,2}", prefix) or not 0 < int(prefix) <= 32:
        raise ValueError(f"not an IPv4 CIDR like 10.0.0.50/24: {value!r}")
    return value


def bridge(value: str) -> str:
    if not _full(BRIDGE_RE, value):
        raise ValueError(f"not a bridge name (ASCII letter first, then letters, digits, '_.-', at most 15): {value!r}")
    return value


def vmid(value: int) -> int:
    if isinstance(value, bool) or not VMID_MIN <= value <= VMID_MAX:
        raise ValueError(f"vmid must be between {VMID_MIN} and {VMID_MAX}, got {value!r}")
    return value


def storage(value: str) -> str:
    if not _full(STORAGE_RE, value):
        raise ValueError(f"not a valid Proxmox storage id: {value!r}")
    return value


def normalize_path(value: str) -> str:
    """`//etc/` → `/etc`, `/./opt` → `/opt`. Refuses `..` outright (it would depend on symlinks)."""
    if not value.startswith("/") or "\x00" in value:
        raise ValueError(f"must be an absolute path: {value!r}")
    parts = [p for p in value.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"must be an absolute path without '..': {value!r}")
    return "/" + "/".join(parts)


def abs_path(value: str) -> str:
    """An absolute path of plain ASCII characters without `..`, returned normalised."""
    if not _full(ABS_PATH_RE, value):
        raise ValueError(f"must be an absolute path of plain characters without '..': {value!r}")
    try:
        return normalize_path(value)
    except ValueError:
        raise ValueError(f"must be an absolute path of plain characters without '..': {value!r}") from None


def _under(path: str, tree: str) -> bool:
    """`path` is `tree` or inside it; a `*` component of `tree` matches any one component."""
    parts, want = path.split("/"), tree.split("/")
    return len(parts) >= len(want) and all(w in ("*", p) for w, p in zip(want, parts, strict=False))


def deletable_path(value: str) -> str:
    """A directory we may create and, when told to, remove: absolute, normalised, not a system directory
    and not inside a kernel filesystem, /boot, /etc or someone's ~/.ssh."""
    path = abs_path(value)
    if path in SYSTEM_DIRS or any(_under(path, tree) for tree in SYSTEM_TREES):
        raise ValueError(f"refusing a system directory as venv path: {value!r} (is {path})")
    return path


def package_spec(value: str) -> str:
    if not _full(PKG_SPEC_RE, value):
        raise ValueError(f"not a plain package requirement (name[extras] and version clauses): {value!r}")
    return value


def driver_version(value: str) -> str:
    if not _full(VERSION_RE, value):
        raise ValueError(f"not a driver version like 595.71.05: {value!r}")
    return value


def user_name(value: str) -> str:
    if not _full(USER_RE, value):
        raise ValueError(f"not a valid user name: {value!r}")
    return value


def pve_userid(value: str) -> str:
    """`name@realm` as Proxmox VE's `pve-userid` format accepts it (no space, ':' or '/' in the name)."""
    name, at, _ = value.rpartition("@")
    if not 3 <= len(value) <= 64 or not _full(PVE_USERID_RE, value) or not at or any(c in name for c in ":/"):
        raise ValueError(f"not a Proxmox VE user id like root@pam or provisioner@pve: {value!r}")
    return value


def pve_token_name(value: str) -> str:
    """The token id part of `user@realm!tokenid` (letters first, then letters, digits, '._-')."""
    if len(value) > 64 or not _full(PVE_TOKEN_NAME_RE, value):
        raise ValueError(f"not a Proxmox VE API token id (a letter, then letters, digits, '.', '-', '_'): {value!r}")
    return value


def tls_fingerprint(value: str) -> str:
    """A certificate SHA-256 fingerprint `AB:CD:...` (32 bytes, as `pvenode cert info` prints it)."""
    if not _full(TLS_FINGERPRINT_RE, value):
        raise ValueError("not a SHA-256 certificate fingerprint (32 colon-separated hex bytes like "
                         f"'AB:CD:...:EF', as `pvenode cert info` prints it): {value[:120]!r}")
    return value


# Field types for pydantic models: the playbook, step parameters and the TUI's forms share them.
PveUserId = Annotated[str, AfterValidator(pve_userid)]
PveTokenName = Annotated[str, AfterValidator(pve_token_name)]
TlsFingerprint = Annotated[str, AfterValidator(tls_fingerprint)]
HostName = Annotated[str, AfterValidator(hostname)]
HostAddress = Annotated[str, AfterValidator(host_address)]
StorageId = Annotated[str, AfterValidator(storage)]
UserName = Annotated[str, AfterValidator(user_name)]
Vmid = Annotated[int, AfterValidator(vmid)]
BridgeName = Annotated[str, AfterValidator(bridge)]
AbsPath = Annotated[str, AfterValidator(abs_path)]
DeletablePath = Annotated[str, AfterValidator(deletable_path)]


def index_ranges(value: object, *, limit: int = 1024) -> object:
    """GPU (or other index) selections as people write them: "0-3", "0,2-3", "1 3", [0, "2-3"] → a sorted
    list of ints; "all" and anything else pass through for the field's own validation. A reversed or
    oversized range is refused (ValueError, said in plain words)."""
    if isinstance(value, int) or value is None:
        return value
    parts: list[object]
    if isinstance(value, str):
        text = value.strip()
        if text.lower() == "all" or not text:
            return text.lower()
        parts = [p for p in re.split(r"[,\s]+", text.strip("[]")) if p]
    elif isinstance(value, list | tuple):
        parts = list(value)
    else:
        return value
    out: set[int] = set()
    for part in parts:
        if isinstance(part, int):
            out.add(part)
            continue
        if not isinstance(part, str):
            return value
        match = re.fullmatch(r"\s*(\d{1,5})\s*(?:-\s*(\d{1,5})\s*)?", part)
        if match is None:
            return value  # not indices: the field's own validation says what is allowed
        low, high = int(match.group(1)), int(match.group(2) or match.group(1))
        if high < low:
            raise ValueError(f"the range {part.strip()} runs backwards (write {high}-{low})")
        if high >= limit:
            raise ValueError(f"{high} is out of range (0-{limit - 1})")
        out.update(range(low, high + 1))
    return sorted(out)


def pve_property_string(value: object, *, allowed: tuple[str, ...]) -> object:
    """PVE's own `key=value,key=value` syntax (as `pct config` prints net0) → a dict of the `allowed` keys;
    a dict or anything else passes through. Unknown keys are refused, naming the allowed ones."""
    if not isinstance(value, str) or "=" not in value:
        return value
    out: dict[str, str] = {}
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, val = part.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"{part!r} is not key=value (e.g. bridge=vmbr0,ip=192.0.2.200/24,gw=192.0.2.1)")
        if key not in allowed:
            raise ValueError(f"unknown key {key!r} (allowed: {', '.join(allowed)})")
        out[key] = val.strip()
    return out
