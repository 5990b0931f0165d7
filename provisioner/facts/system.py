"""Pure parsers for generic Linux facts: cgroup version, os-release, libc, df, pip freeze."""

from __future__ import annotations

import re
import shlex
from urllib.parse import unquote, urlparse

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)

from provisioner.facts.models import CgroupInfo, DfEntry, Libc, OsRelease, ParseError, PipFreeze

CGROUP_COMMAND: tuple[str, ...] = ("stat", "-fc", "%T", "/sys/fs/cgroup")


def parse_cgroup_fs(text: str) -> CgroupInfo:
    """Parse ``stat -fc %T /sys/fs/cgroup``: ``cgroup2fs`` -> v2; ``tmpfs`` -> v1 (or hybrid)."""
    fs_type = text.strip()
    if fs_type == "cgroup2fs":
        return CgroupInfo(fs_type=fs_type, version=2)
    if fs_type == "tmpfs":
        return CgroupInfo(fs_type=fs_type, version=1)
    raise ParseError(
        f"stat -fc %T /sys/fs/cgroup: unexpected filesystem type {fs_type[:80]!r} "
        "(expected 'cgroup2fs' or 'tmpfs')"
    )


# --- /etc/os-release --------------------------------------------------------------------------


def parse_os_release(text: str) -> OsRelease:
    """Parse ``/etc/os-release`` (shell-quoted ``KEY=value`` lines; ``ID`` defaults to ``linux``)."""
    fields: dict[str, str] = {}
    for lineno, raw in enumerate(text.replace("\r\n", "\n").split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not re.match(r"^[A-Z][A-Z0-9_]*$", key):
            raise ParseError(f"os-release line {lineno}: expected KEY=value, got {line[:100]!r}")
        try:
            parts = shlex.split(value, posix=True)
        except ValueError as exc:
            raise ParseError(f"os-release line {lineno}: bad quoting in {line[:100]!r}") from exc
        fields[key] = " ".join(parts)
    if not fields:
        raise ParseError("os-release: no KEY=value lines")
    return OsRelease(
        id=fields.get("ID", "linux"),
        version_id=fields.get("VERSION_ID"),
        pretty_name=fields.get("PRETTY_NAME"),
        name=fields.get("NAME"),
        version_codename=fields.get("VERSION_CODENAME"),
        id_like=tuple(fields.get("ID_LIKE", "").split()),
        fields=fields,
    )


# --- ldd --version ----------------------------------------------------------------------------

_LDD_GLIBC_RE = re.compile(r"^ldd \((?P<inside>[^)]*)\) (?P<ver>\d+\.\d+(?:\.\d+)?)\s*$")
_MUSL_RE = re.compile(r"^musl libc \((?P<arch>[^)]+)\)\s*$")
_MUSL_VERSION_RE = re.compile(r"^Version (?P<ver>\d+\.\d+(?:\.\d+)?)\s*$", re.M)


def parse_ldd_version(text: str) -> Libc:
    """Parse ``ldd --version`` (stdout+stderr): glibc first line, or musl's banner.

    ``ldd (Debian GLIBC 2.36-9+deb12u10) 2.36`` -> glibc 2.36, vendor Debian, package
    2.36-9+deb12u10; ``ldd (GNU libc) 2.34`` -> glibc 2.34; musl prints ``musl libc (x86_64)``
    and ``Version 1.2.5``.
    """
    lines = [ln.strip() for ln in text.replace("\r\n", "\n").split("\n") if ln.strip()]
    if not lines:
        raise ParseError("ldd --version: empty output")
    m = _LDD_GLIBC_RE.match(lines[0])
    if m:
        inside = m.group("inside")
        vm = re.match(r"^(?P<vendor>\S+) (?:GLIBC|EGLIBC) (?P<pkg>\S+)$", inside)
        if vm:
            return Libc(
                family="glibc",
                version=m.group("ver"),
                vendor=vm.group("vendor"),
                package_version=vm.group("pkg"),
            )
        vendor = "GNU" if inside == "GNU libc" else inside or None
        return Libc(family="glibc", version=m.group("ver"), vendor=vendor)
    if _MUSL_RE.match(lines[0]):
        vm2 = _MUSL_VERSION_RE.search(text)
        if vm2 is None:
            raise ParseError("ldd --version: musl banner without a 'Version x.y.z' line")
        return Libc(family="musl", version=vm2.group("ver"), vendor="musl")
    raise ParseError(f"ldd --version: unrecognised first line {lines[0][:100]!r}")


# --- df -----------------------------------------------------------------------------------------

_BLOCKS_RE = re.compile(r"^(?P<n>\d+)(?P<unit>[BKMG]?)-blocks$")
_UNIT = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def parse_df_entries(text: str) -> list[DfEntry]:
    """Parse ``df -B1 PATH`` / ``df -k PATH`` / ``df -P PATH`` (coreutils or busybox) into entries."""
    lines = [ln for ln in text.replace("\r\n", "\n").split("\n") if ln.strip()]
    if not lines:
        raise ParseError("df: empty output")
    header = lines[0].split()
    if not header or header[0] != "Filesystem" or len(header) < 2:
        raise ParseError(f"df: expected a 'Filesystem ...' header, got {lines[0][:100]!r}")
    bm = _BLOCKS_RE.match(header[1])
    if bm is None:
        raise ParseError(f"df: size column {header[1]!r} is not exact (use 'df -B1' or 'df -k', not -h)")
    block = int(bm.group("n")) * _UNIT[bm.group("unit")]
    entries: list[DfEntry] = []
    pending: str | None = None
    for lineno, line in enumerate(lines[1:], start=2):
        tokens = line.split()
        if len(tokens) == 1 and pending is None:  # long filesystem name wrapped onto its own line
            pending = tokens[0]
            continue
        if pending is not None:
            tokens, pending = [pending, *tokens], None
        if len(tokens) < 6 or not all(t.isdigit() for t in tokens[1:4]) or not tokens[4].endswith("%"):
            raise ParseError(
                f"df line {lineno}: expected 'fs size used avail use% mount', got {line[:100]!r}"
            )
        entries.append(
            DfEntry(
                filesystem=tokens[0],
                size_bytes=int(tokens[1]) * block,
                used_bytes=int(tokens[2]) * block,
                available_bytes=int(tokens[3]) * block,
                mountpoint=" ".join(tokens[5:]),
            )
        )
    if not entries:
        raise ParseError("df: no filesystem lines after the header")
    return entries


def parse_df(text: str) -> DfEntry:
    """Parse ``df -B1 /dev/shm`` (or ``-k``): the one filesystem line, sizes in bytes."""
    entries = parse_df_entries(text)
    if len(entries) != 1:
        raise ParseError(f"df: expected one filesystem line, got {len(entries)}")
    return entries[0]


# --- pip freeze / uv pip freeze -----------------------------------------------------------------

_REQ_PIN_RE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*===?\s*(?P<ver>\S+)$")
_REQ_URL_RE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s+@\s+(?P<url>\S+)$")
_EGG_RE = re.compile(r"[#&]egg=(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)")


def _version_from_url(url: str) -> str | None:
    filename = unquote(urlparse(url).path.rsplit("/", 1)[-1])
    try:
        if filename.endswith(".whl"):
            return str(parse_wheel_filename(filename)[1])
        if filename.endswith((".tar.gz", ".zip")):
            return str(parse_sdist_filename(filename)[1])
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return None


def parse_pip_freeze(text: str) -> PipFreeze:
    """Parse ``pip freeze`` / ``uv pip freeze``: canonical name -> version.

    ``torch==2.11.0+cu128`` keeps its local label; ``pkg @ file:///.../pkg-1.0-py3-none-any.whl``
    takes its version from the wheel (or sdist) file name and records the URL in ``urls``;
    ``-e`` lines are listed in ``editable``. An empty environment prints nothing: that parses.
    """
    versions: dict[str, str] = {}
    urls: dict[str, str] = {}
    editable: list[str] = []
    for lineno, raw in enumerate(text.replace("\r\n", "\n").split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("-e ", "--editable ")):
            target = line.split(None, 1)[1]
            egg = _EGG_RE.search(target)
            editable.append(canonicalize_name(egg.group("name")) if egg else target)
            continue
        m = _REQ_PIN_RE.match(line)
        if m:
            versions[canonicalize_name(m.group("name"))] = m.group("ver")
            continue
        m = _REQ_URL_RE.match(line)
        if m:
            name = canonicalize_name(m.group("name"))
            urls[name] = m.group("url")
            version = _version_from_url(m.group("url"))
            if version is not None:
                versions[name] = version
            continue
        raise ParseError(
            f"pip freeze line {lineno}: expected 'name==version' or 'name @ url', got {line[:100]!r}"
        )
    return PipFreeze(versions=versions, urls=urls, editable=tuple(editable))
