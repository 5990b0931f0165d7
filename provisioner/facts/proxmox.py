"""Pure parsers for Proxmox VE facts (``pveversion``, ``pveversion -v``)."""

from __future__ import annotations

import re

from provisioner.facts.models import ParseError, PveVersion

_SHORT_RE = re.compile(
    r"^pve-manager/(?P<ver>\d+\.\d+(?:[-.][0-9A-Za-z.~+-]+?)?)/(?P<repoid>[0-9a-f]+)\s+"
    r"\(running kernel: (?P<kernel>\S+)\)\s*$"
)
_MANAGER_RE = re.compile(r"^(?P<ver>\d+\.\d+\S*) \(running version: (?P=ver)/(?P<repoid>[0-9a-f]+)\)$")
_RUNNING_KERNEL_RE = re.compile(r"\(running kernel: (?P<kernel>\S+)\)")
_PKG_RE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9.+_-]*):\s+(?P<rest>\S.*)$")


def parse_pveversion(text: str) -> PveVersion:
    """Parse ``pveversion`` (one line) or ``pveversion -v`` (``package: version`` lines).

    ``pveversion``: ``pve-manager/8.4.1/2a5fa54a8503f96d (running kernel: 6.8.12-10-pve)``.
    ``pveversion -v``: ``proxmox-ve: 8.4.0 (running kernel: ...)``, ``pve-manager: 8.4.1
    (running version: 8.4.1/2a5fa54a8503f96d)``, then one line per package (``packages`` maps
    each name to its first word: a version, or e.g. ``not`` for "not correctly installed").
    """
    lines = [ln.strip() for ln in text.replace("\r\n", "\n").split("\n") if ln.strip()]
    if not lines:
        raise ParseError("pveversion: empty output")
    m = _SHORT_RE.match(lines[0])
    if m:
        return PveVersion(
            manager_version=m.group("ver"), repoid=m.group("repoid"), running_kernel=m.group("kernel")
        )
    packages: dict[str, str] = {}
    kernel: str | None = None
    manager: str | None = None
    repoid: str | None = None
    for lineno, line in enumerate(lines, start=1):
        pm = _PKG_RE.match(line)
        if pm is None:
            raise ParseError(f"pveversion line {lineno}: expected 'package: version', got {line[:100]!r}")
        name, rest = pm.group("name"), pm.group("rest")
        packages[name] = rest.split()[0]
        km = _RUNNING_KERNEL_RE.search(rest)
        if km and kernel is None:
            kernel = km.group("kernel")
        if name == "pve-manager":
            mm = _MANAGER_RE.match(rest)
            manager = mm.group("ver") if mm else rest.split()[0]
            repoid = mm.group("repoid") if mm else None
    if manager is None or not re.match(r"^\d+\.\d+", manager):
        raise ParseError("pveversion -v: no 'pve-manager: X.Y.Z' line")
    if kernel is None:
        raise ParseError("pveversion -v: no '(running kernel: ...)' in the proxmox-ve line")
    return PveVersion(manager_version=manager, repoid=repoid, running_kernel=kernel, packages=packages)
