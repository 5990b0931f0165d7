"""Parse and edit ``/etc/pve/lxc/<vmid>.conf`` (PVE's container config format), keeping bytes intact.

Format (pve-container src/PVE/LXC/Config.pm ``parse_pct_config``/``write_pct_config``):

* leading ``#`` lines are the description, each line passed through PVE's ``encode_text``
  (control characters, non-ASCII and ``:`` become ``%XX``; ``%`` itself is not escaped);
* ``key: value`` option lines (``arch``, ``memory``, ``net0``, ``dev0`` ...);
* raw LXC lines ``lxc.<key>: <value>`` (or ``lxc.<key> = <value>``); the same key may repeat
  and the order is significant;
* ``[snapshot]`` / ``[pve:pending]`` sections after the main section (kept verbatim here, except the
  pending section, which `pending`/`set_pending` read and rewrite as ``write_pct_config`` writes it:
  ``\n[pve:pending]\n`` + sorted ``key: value`` lines, before the snapshots; a pending delete is the
  ``delete: a,b`` line).

`LxcConfig.parse(text).render() == text` for any file that was not modified; edits only touch
the lines they concern.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import unquote

_SECTION_RE = re.compile(r"^\[[^\]\s]+\]\s*$")
_RAW_RE = re.compile(r"^(lxc\.[a-z0-9_\-.]+)(:|\s*=)\s*(.*?)\s*$")
_OPTION_RE = re.compile(r"^([a-z][a-z_\-]*\d*):\s*(.*\S)\s*$")
_INDEXED_RE = re.compile(r"^([a-z]+)(\d+)$")
_ALLOW_RE = re.compile(r"([abc*])(?:\s+([\d*]+):([\d*]+))?")
PENDING_SECTION = "pve:pending"

#: highest index + 1 for PVE's indexed keys (Config.pm $MAX_LXC_NETWORKS, $MAX_MOUNT_POINTS, $MAX_DEVICES)
INDEX_LIMITS: dict[str, int] = {"net": 32, "mp": 256, "unused": 256, "dev": 256}


def encode_text(text: str) -> str:
    """PVE::Tools::encode_text: %-escape control chars, ``:`` and non-ASCII (UTF-8 bytes)."""
    out: list[str] = []
    for byte in text.encode("utf-8"):
        if 0x20 <= byte <= 0x39 or 0x3B <= byte <= 0x7E:
            out.append(chr(byte))
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def decode_text(text: str) -> str:
    """PVE::Tools::decode_text: undo `encode_text` (any ``%XX`` is decoded)."""
    return unquote(text, encoding="utf-8", errors="replace")


def parse_property_string(value: str, default_key: str | None = None) -> dict[str, str]:
    """Split ``a=1,b=2`` (a bare first part goes to `default_key`); order is kept."""
    out: dict[str, str] = {}
    for part in value.split(","):
        if not part.strip():
            continue
        if "=" in part:
            k, v = part.split("=", 1)
            out[k] = v
        elif default_key is not None:
            out[default_key] = part
        else:
            raise ValueError(f"value without key, but no default key: {part!r}")
    return out


def format_property_string(values: Mapping[str, str | int], default_key: str | None = None) -> str:
    """Inverse of `parse_property_string`; the default key's value is written bare and first."""
    parts: list[str] = []
    if default_key is not None and default_key in values:
        parts.append(str(values[default_key]))
    parts.extend(f"{k}={v}" for k, v in values.items() if k != default_key)
    return ",".join(parts)


@dataclass
class _Line:
    kind: str  # "comment" | "option" | "raw" | "blank" | "other"
    text: str  # exact original text including its line ending ("" ending on a last line)
    key: str = ""
    value: str = ""


def _ending(text: str) -> str:
    for end in ("\r\n", "\n"):
        if text.endswith(end):
            return end
    return ""


def _classify(text: str) -> _Line:
    body = text[: len(text) - len(_ending(text))]
    if body.startswith("#"):
        return _Line("comment", text, value=body[1:])
    if not body.strip():
        return _Line("blank", text)
    if m := _RAW_RE.match(body):
        return _Line("raw", text, m.group(1), m.group(3))
    if m := _OPTION_RE.match(body):
        return _Line("option", text, m.group(1), m.group(2))
    return _Line("other", text)


class LxcConfig:
    """One container config file: main-section lines plus the verbatim snapshot/pending tail."""

    def __init__(self, lines: list[_Line], tail: str) -> None:
        self._lines = lines
        self._tail = tail

    # -- parse / render -------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> LxcConfig:
        lines: list[_Line] = []
        chunks = re.findall(r"[^\n]*\n|[^\n]+$", text)  # PVE splits on "\n" only
        for i, chunk in enumerate(chunks):
            body = chunk.rstrip("\r\n")
            if _SECTION_RE.match(body):
                return cls(lines, "".join(chunks[i:]))
            lines.append(_classify(chunk))
        return cls(lines, "")

    @classmethod
    def from_options(
        cls,
        options: Mapping[str, str | int],
        raw: list[tuple[str, str]] | None = None,
        description: str | None = None,
    ) -> LxcConfig:
        """Build a fresh file the way PVE writes one (description, sorted options, raw lines)."""
        conf = cls([], "")
        if description:
            conf.description = description
        for key in sorted(options):
            conf.set(key, str(options[key]))
        for key, value in raw or []:
            conf.add_raw(key, value)
        return conf

    def render(self) -> str:
        return "".join(line.text for line in self._lines) + self._tail

    def digest(self) -> str:
        """SHA-1 of the file, as PVE reports in ``digest``."""
        return hashlib.sha1(self.render().encode()).hexdigest()  # noqa: S324 - PVE's digest is SHA-1

    @property
    def tail(self) -> str:
        """The ``[snapshot]``/``[pve:pending]`` sections, verbatim."""
        return self._tail

    # -- the [pve:pending] section ------------------------------------------------------------
    def _sections(self) -> list[tuple[str, str]]:
        """The tail as (section name, its text from the header line on)."""
        out: list[tuple[str, str]] = []
        for chunk in re.findall(r"[^\n]*\n|[^\n]+$", self._tail):
            header = chunk.rstrip("\r\n")
            if _SECTION_RE.match(header):
                out.append((header.strip()[1:-1], chunk))
            elif out:
                out[-1] = (out[-1][0], out[-1][1] + chunk)
        return out

    def pending(self) -> dict[str, str]:
        """``key -> value`` of the ``[pve:pending]`` section (``delete`` = comma list of pending deletes)."""
        for name, text in self._sections():
            if name == PENDING_SECTION:
                return {line.key: line.value for line in map(_classify, text.splitlines(keepends=True)[1:])
                        if line.kind == "option"}
        return {}

    def pending_deletes(self) -> list[str]:
        return [k for k in re.split(r"[,;\s]+", self.pending().get("delete", "")) if k and not k.startswith("!")]

    def set_pending(self, values: Mapping[str, str]) -> None:
        """Replace the ``[pve:pending]`` section (empty `values` removes it), as write_pct_config writes it."""
        rest = [text for name, text in self._sections() if name != PENDING_SECTION]
        for key, value in values.items():
            if not _OPTION_RE.match(f"{key}: {value}") or "\n" in value:
                raise ValueError(f"invalid pending option {key!r}: {value!r}")
        chunks: list[str] = []
        if values:
            chunks.append(f"[{PENDING_SECTION}]\n" + "".join(f"{k}: {values[k]}\n" for k in sorted(values)))
        for text in rest:
            if chunks and not chunks[-1].endswith("\n\n"):
                chunks[-1] += "\n"
            chunks.append(text)
        while self._lines and self._lines[-1].kind == "blank":
            self._lines.pop()
        if self._lines and not _ending(self._lines[-1].text):
            self._lines[-1].text += "\n"
        if chunks:
            self._lines.append(_Line("blank", "\n"))
        self._tail = "".join(chunks)

    def effective(self) -> dict[str, str]:
        """The options the container gets at its next start: the main section with the pending values
        and deletes applied (PVE::LXC::Config->vmconfig_apply_pending)."""
        out = self.options()
        pending = self.pending()
        for key in self.pending_deletes():
            out.pop(key, None)
        out.update({k: v for k, v in pending.items() if k != "delete"})
        return out

    # -- options ---------------------------------------------------------------------------
    def keys(self) -> list[str]:
        return [line.key for line in self._lines if line.kind == "option"]

    def options(self) -> dict[str, str]:
        """``key -> value`` of the option lines (not the description nor raw lxc lines)."""
        return {line.key: line.value for line in self._lines if line.kind == "option"}

    def get(self, key: str) -> str | None:
        return self.options().get(key)

    def __contains__(self, key: object) -> bool:
        return key in self.options()

    def set(self, key: str, value: str | int) -> None:
        """Set an option, replacing its line in place or inserting it in sorted position."""
        if key.startswith("lxc.") or not _OPTION_RE.match(f"{key}: x"):
            raise ValueError(f"not a config option key: {key!r}")
        value = str(value)
        if "\n" in value or not value.strip():
            raise ValueError(f"invalid value for {key}: {value!r}")
        for line in self._lines:
            if line.kind == "option" and line.key == key:
                if line.value != value:
                    line.text = f"{key}: {value}" + _ending(line.text)
                    line.value = value
                return
        new = _Line("option", f"{key}: {value}\n", key, value)
        options = [i for i, line in enumerate(self._lines) if line.kind == "option"]
        later = [i for i in options if self._lines[i].key > key]
        if later:
            pos = later[0]
        elif options:
            pos = options[-1] + 1
        else:
            comments = [i for i, line in enumerate(self._lines) if line.kind == "comment"]
            pos = comments[-1] + 1 if comments else 0
        self._insert(pos, new)

    def delete(self, key: str) -> bool:
        before = len(self._lines)
        self._lines = [ln for ln in self._lines if not (ln.kind == "option" and ln.key == key)]
        return len(self._lines) != before

    def indexed(self, prefix: str) -> dict[int, str]:
        """Indexed options of one family, e.g. ``indexed("dev") -> {0: "/dev/nvidia0,mode=0666"}``."""
        out: dict[int, str] = {}
        for key, value in self.options().items():
            m = _INDEXED_RE.match(key)
            if m and m.group(1) == prefix:
                out[int(m.group(2))] = value
        return dict(sorted(out.items()))

    def free_index(self, prefix: str) -> int:
        """Lowest unused index of an indexed family (``dev`` -> 0..255)."""
        used = self.indexed(prefix)
        limit = INDEX_LIMITS.get(prefix, 256)
        for i in range(limit):
            if i not in used:
                return i
        raise ValueError(f"no free {prefix}N slot (limit {limit})")

    # -- description -----------------------------------------------------------------------
    @property
    def description(self) -> str | None:
        lines = [decode_text(line.value) for line in self._lines if line.kind == "comment"]
        return "\n".join(lines) if lines else None

    @description.setter
    def description(self, text: str | None) -> None:
        self._lines = [ln for ln in self._lines if ln.kind != "comment"]
        if text:
            new = [_Line("comment", f"#{encode_text(part)}\n", value=encode_text(part)) for part in text.split("\n")]
            self._lines[0:0] = new

    # -- raw lxc.* lines -------------------------------------------------------------------
    def raw_lines(self, key: str | None = None) -> list[tuple[str, str]]:
        return [
            (line.key, line.value)
            for line in self._lines
            if line.kind == "raw" and (key is None or line.key == key)
        ]

    def add_raw(self, key: str, value: str) -> bool:
        """Append ``key: value`` unless that exact pair exists already; returns True if added."""
        if not _RAW_RE.match(f"{key}: {value}") or "\n" in value:
            raise ValueError(f"invalid raw lxc line {key!r}: {value!r}")
        if (key, value) in self.raw_lines():
            return False
        content = [i for i, line in enumerate(self._lines) if line.kind != "blank"]
        pos = content[-1] + 1 if content else 0
        self._insert(pos, _Line("raw", f"{key}: {value}\n", key, value))
        return True

    def remove_raw(self, key: str, value: str | None = None) -> int:
        """Remove raw lines with `key` (and `value`, if given); returns how many were removed."""
        keep: list[_Line] = []
        removed = 0
        for line in self._lines:
            if line.kind == "raw" and line.key == key and (value is None or line.value == value):
                removed += 1
            else:
                keep.append(line)
        self._lines = keep
        return removed

    # -- what it passes through (read by the diagnosis) --------------------------------------
    def raw_text(self, key: str) -> list[str]:
        """The ``key: value`` lines of one raw lxc key, in file order (as evidence quotes them)."""
        return [f"{k}: {v}" for k, v in self.raw_lines(key)]

    def device_allow_rules(self) -> list[tuple[str, str, str]]:
        """(type, major|``*``, minor|``*``) of each ``lxc.cgroup2.devices.allow`` line, in file order
        (a bare type such as ``a`` covers every major and minor)."""
        out: list[tuple[str, str, str]] = []
        for _, value in self.raw_lines("lxc.cgroup2.devices.allow"):
            if m := _ALLOW_RE.match(value.strip()):
                out.append((m.group(1), m.group(2) or "*", m.group(3) or "*"))
        return out

    def allows_char_major(self, major: int) -> bool:
        """Whether an allow line covers character devices of `major` (``a``, ``c MAJOR:*``, ``c *:*``)."""
        return any(kind == "a" or (kind in ("c", "*") and maj in ("*", str(major)))
                   for kind, maj, _ in self.device_allow_rules())

    def mount_sources(self) -> list[str]:
        """Source paths under /dev of the ``lxc.mount.entry`` lines (device nodes bind-mounted in)."""
        sources = [value.split()[0] for _, value in self.raw_lines("lxc.mount.entry") if value.split()]
        return [src for src in sources if src.startswith("/dev/")]

    def dev_paths(self) -> list[str]:
        """Paths of the main section's devN entries, by index (``""`` for an entry without one)."""
        return [parse_property_string(value, "path").get("path", "") for value in self.indexed("dev").values()]

    # -- views -----------------------------------------------------------------------------
    def to_api_dict(self) -> dict[str, object]:
        """The shape of ``GET /nodes/{node}/lxc/{vmid}/config`` (values as strings, plus digest)."""
        out: dict[str, object] = dict(self.options())
        if (descr := self.description) is not None:
            out["description"] = descr + "\n"
        raw = self.raw_lines()
        if raw:
            out["lxc"] = [[k, v] for k, v in raw]
        out["digest"] = self.digest()
        return out

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.options().items())

    # -- internals -------------------------------------------------------------------------
    def _insert(self, pos: int, line: _Line) -> None:
        if pos > 0 and not _ending(self._lines[pos - 1].text):
            self._lines[pos - 1].text += "\n"
        self._lines.insert(pos, line)
