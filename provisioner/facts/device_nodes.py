"""Character devices: ``/proc/devices`` majors, ``ls -l /dev/nvidia*`` and ``stat`` of the nodes."""

from __future__ import annotations

import re
import stat

from provisioner.facts.models import DevNode, DevNodes, ParseError, ProcDevices
from provisioner.facts.nvidia_text import require_text, split_lines

# --- /proc/devices ----------------------------------------------------------------------------


def parse_proc_devices(text: str) -> ProcDevices:
    """Parse ``/proc/devices`` into name -> major maps (first major wins for a repeated name)."""
    require_text(text, "/proc/devices")
    section: dict[str, int] | None = None
    char: dict[str, int] = {}
    block: dict[str, int] = {}
    seen_header = False
    for lineno, raw in enumerate(split_lines(text), start=1):
        line = raw.strip()
        if not line:
            continue
        if line == "Character devices:":
            section, seen_header = char, True
            continue
        if line == "Block devices:":
            section, seen_header = block, True
            continue
        m = re.match(r"^(\d+)\s+(\S.*)$", line)
        if m is None or section is None:
            raise ParseError(f"/proc/devices line {lineno}: unexpected {line!r}")
        section.setdefault(m.group(2), int(m.group(1)))
    if not seen_header:
        raise ParseError("/proc/devices: no 'Character devices:' section")
    return ProcDevices(char=char, block=block)


# --- ls -l /dev/nvidia* and stat ---------------------------------------------------------------

_LS_RE = re.compile(
    r"^(?P<type>[-bcdlps])(?P<perm>[-rwxsStT]{9})[.+@]?\s+\d+\s+(?P<owner>\S+)\s+(?P<group>\S+)\s+"
    r"(?:(?P<major>\d+),\s*(?P<minor>\d+)|\d+)\s+(?P<rest>.+)$"
)
_LS_MISSING_RE = re.compile(r"^ls: cannot access '?(?P<path>[^':]+)'?: No such file or directory")


def _perm_bits(perm: str) -> int:
    mode = 0
    bits = (
        stat.S_IRUSR,
        stat.S_IWUSR,
        stat.S_IXUSR,
        stat.S_IRGRP,
        stat.S_IWGRP,
        stat.S_IXGRP,
        stat.S_IROTH,
        stat.S_IWOTH,
        stat.S_IXOTH,
    )
    for ch, bit in zip(perm, bits, strict=True):
        if ch in "rwxst":
            mode |= bit
    special = ((2, "sS", stat.S_ISUID), (5, "sS", stat.S_ISGID), (8, "tT", stat.S_ISVTX))
    for idx, chars, bit in special:
        if perm[idx] in chars:
            mode |= bit
    return mode


def _join(directory: str | None, name: str) -> str:
    if name.startswith("/") or not directory:
        return name
    return directory.rstrip("/") + "/" + name


def parse_ls_dev(text: str, directory: str | None = None) -> DevNodes:
    """Parse ``ls -l /dev/nvidia*`` (and ``ls -l /dev/nvidia-caps``) into device nodes.

    ``directory`` names the directory listed when ``ls`` was given a single directory (its
    entries are printed without a ``dir:`` header). Non-device entries are skipped; paths ``ls``
    could not access are reported in ``missing``.
    """
    current = directory
    nodes: list[DevNode] = []
    missing: list[str] = []
    recognised = False
    for lineno, raw in enumerate(split_lines(text), start=1):
        line = raw.rstrip()
        if not line.strip():
            continue
        if re.match(r"^total \d+$", line):
            recognised = True
            continue
        m_dir = re.match(r"^(/\S*):$", line)
        if m_dir:
            current, recognised = m_dir.group(1), True
            continue
        m_miss = _LS_MISSING_RE.match(line)
        if m_miss:
            missing.append(m_miss.group("path"))
            recognised = True
            continue
        m = _LS_RE.match(line)
        if m is None:
            raise ParseError(f"ls -l line {lineno}: not a long-listing entry: {line!r}")
        recognised = True
        if m.group("type") not in "cb" or m.group("major") is None:
            continue
        name = m.group("rest").split()[-1]
        nodes.append(
            DevNode(
                path=_join(current, name),
                type="c" if m.group("type") == "c" else "b",
                major=int(m.group("major")),
                minor=int(m.group("minor")),
                mode=_perm_bits(m.group("perm")),
                owner=m.group("owner"),
                group=m.group("group"),
            )
        )
    if not recognised:
        raise ParseError("ls -l: empty output")
    return DevNodes(nodes=tuple(nodes), missing=tuple(missing))


STAT_DEV_FORMAT = "%n %F %t %T %a"
"""``stat -c`` format understood by :func:`parse_stat_dev` (major/minor in hex)."""

_STAT_RE = re.compile(
    r"^(?P<path>\S+) (?P<ftype>[a-z][a-z ]*?) (?P<major>[0-9a-f]+) (?P<minor>[0-9a-f]+) (?P<mode>[0-7]{1,4})$"
)
_STAT_MISSING_RE = re.compile(r"^stat: cannot (?:stat|statx) '(?P<path>[^']+)': No such file or directory")


def parse_stat_dev(text: str) -> DevNodes:
    """Parse ``stat -c '%n %F %t %T %a' /dev/nvidia*`` (hex major/minor, octal mode)."""
    require_text(text, "stat")
    nodes: list[DevNode] = []
    missing: list[str] = []
    for lineno, raw in enumerate(split_lines(text), start=1):
        line = raw.strip()
        if not line:
            continue
        m_miss = _STAT_MISSING_RE.match(line)
        if m_miss:
            missing.append(m_miss.group("path"))
            continue
        m = _STAT_RE.match(line)
        if m is None:
            raise ParseError(f"stat line {lineno}: expected '{STAT_DEV_FORMAT}' output, got {line!r}")
        ftype = m.group("ftype")
        if ftype not in ("character special file", "block special file"):
            continue
        nodes.append(
            DevNode(
                path=m.group("path"),
                type="c" if ftype.startswith("character") else "b",
                major=int(m.group("major"), 16),
                minor=int(m.group("minor"), 16),
                mode=int(m.group("mode"), 8),
            )
        )
    return DevNodes(nodes=tuple(nodes), missing=tuple(missing))
