"""Validators for parameters that end up on a command line or in an API call."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import AfterValidator

HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
IPV4_RE = re.compile(r"^(25[0-5]|2[0-4]\d|1?\d?\d)(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}$")
STORAGE_RE = re.compile(r"^[a-z][a-z0-9\-_.]*[a-z0-9]$", re.IGNORECASE)
ABS_PATH_RE = re.compile(r"^/[A-Za-z0-9._+\-/]*$")
PKG_SPEC_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*(\[[A-Za-z0-9,._\-]+\])?\s*((==|>=|<=|~=|!=|>|<|===)\s*[A-Za-z0-9.*+!_\-]+\s*,?\s*)*$")
VERSION_RE = re.compile(r"^\d+\.\d+(\.\d+)?$")


def hostname(value: str) -> str:
    if not HOSTNAME_RE.match(value):
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
    if HOSTNAME_RE.match(value) and not value.rstrip(".").rsplit(".", 1)[-1].isdigit():
        return value
    raise ValueError(f"{value!r} is not an IPv4 address (like 192.0.2.10), an IPv6 address (like fd00::10) "
                     "or a host name (like pve1.example.org)")


def vmid(value: int) -> int:
    if not 100 <= value <= 999_999_999:
        raise ValueError(f"vmid must be between 100 and 999999999, got {value}")
    return value


def storage(value: str) -> str:
    if not STORAGE_RE.match(value):
        raise ValueError(f"not a valid Proxmox storage id: {value!r}")
    return value


def abs_path(value: str) -> str:
    if not ABS_PATH_RE.match(value) or "/../" in value + "/" or value.endswith("/.."):
        raise ValueError(f"must be an absolute path of plain characters without '..': {value!r}")
    return value


def package_spec(value: str) -> str:
    if not PKG_SPEC_RE.match(value):
        raise ValueError(f"not a plain package requirement (name[extras] and version clauses): {value!r}")
    return value


def driver_version(value: str) -> str:
    if not VERSION_RE.match(value):
        raise ValueError(f"not a driver version like 595.71.05: {value!r}")
    return value


def user_name(value: str) -> str:
    if not value or not all(c.isalnum() or c in "._-" for c in value):
        raise ValueError(f"not a valid user name: {value!r}")
    return value


# Field types for pydantic models: the playbook, step parameters and the TUI's forms share them.
HostName = Annotated[str, AfterValidator(hostname)]
HostAddress = Annotated[str, AfterValidator(host_address)]
StorageId = Annotated[str, AfterValidator(storage)]
UserName = Annotated[str, AfterValidator(user_name)]
