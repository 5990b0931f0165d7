"""Readers of the facts dict a live diagnosis gets: each accepts the raw output of a probe (parsed
by the fact's own parser in `provisioner.facts` / `provisioner.proxmox`) or an already parsed
value (a facts JSON written by hand), and answers None/empty for what it cannot read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from provisioner.facts import system
from provisioner.facts.device_nodes import parse_ls_dev, parse_proc_devices
from provisioner.facts.models import ParseError
from provisioner.proxmox.lxc_conf import LxcConfig
from provisioner.resolver.compat import arch_list_covers
from provisioner.resolver.versions import CC

_DRIVER_VERSION_RE = re.compile(r"(?<!\d)(?<!\d\.)(\d{3}\.\d{1,3}(?:\.\d{1,3})?)(?![\d.]*\d)")
_ARCH_RE = re.compile(r"\b(sm|compute)_(\d{2,3})([af]?)\b")
_CC_RE = re.compile(r"\b(\d{1,2})\.(\d)\b")
_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def driver_version(raw: object) -> str | None:
    """'595.71.05' from /sys/module/nvidia/version, /proc/driver/nvidia/version, nvidia-smi or `ls libcuda.so.*`."""
    if raw is None:
        return None
    m = _DRIVER_VERSION_RE.search(str(raw))
    return m.group(1) if m else None


def version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split(".") if p.isdigit())


def same_driver_version(a: str, b: str) -> bool:
    """Equal, allowing one to be a truncation of the other (NVML prints '570.124' for 570.124.06)."""
    ta, tb = version_tuple(a), version_tuple(b)
    n = min(len(ta), len(tb))
    return n >= 2 and ta[:n] == tb[:n]


def gpu_count(raw: object) -> int | None:
    """From an int, a list, a number as text, or `nvidia-smi -L` output ('GPU 0: ...' lines)."""
    if raw is None or isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, list | tuple):
        return len(raw)
    text = str(raw).strip()
    if text.isdigit():
        return int(text)
    lines = re.findall(r"^\s*GPU \d+:", text, re.MULTILINE)
    return len(lines) if lines or text == "" else None


@dataclass(frozen=True)
class DeviceNode:
    path: str
    major: int | None = None
    minor: int | None = None


def device_nodes(raw: object) -> dict[str, DeviceNode]:
    """`ls -l /dev/nvidia* /dev/nvidia-caps` output (`facts.device_nodes.parse_ls_dev`), or a list of paths."""
    if raw is None:
        return {}
    if isinstance(raw, list | tuple):
        return {str(p): DeviceNode(str(p)) for p in raw}
    try:
        listed = parse_ls_dev(str(raw), "/dev")
    except ParseError:  # not a long listing: the /dev paths it names, majors unknown
        return {tok: DeviceNode(tok) for tok in str(raw).split() if tok.startswith("/dev/") and not tok.endswith(":")}
    return {n.path: DeviceNode(n.path, n.major, n.minor) for n in listed.nodes if n.type == "c"}


def gpu_nodes(nodes: Mapping[str, DeviceNode]) -> list[str]:
    return sorted((p for p in nodes if re.fullmatch(r"/dev/nvidia\d+", p)), key=lambda p: int(p[11:]))


def char_majors(raw: object) -> dict[str, int]:
    """/proc/devices -> {name: major} for character devices (`facts.device_nodes.parse_proc_devices`)."""
    if isinstance(raw, Mapping):
        return {str(k): int(v) for k, v in raw.items()}
    if raw is None:
        return {}
    try:
        return dict(parse_proc_devices(str(raw)).char)
    except ParseError:
        return {}


def lxc_config(raw: object) -> LxcConfig:
    """/etc/pve/lxc/<vmid>.conf (main section; snapshots and pending ignored) as the one container-config
    parser reads it, `proxmox.lxc_conf.LxcConfig` (it keeps any line it does not know); None reads as empty."""
    return LxcConfig.parse("" if raw is None else str(raw))


def shm_bytes(raw: object) -> int | None:
    """Size of /dev/shm from bytes, or `df -k` / `df -B1` / `df -h` output."""
    if raw is None or isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return int(raw)
    try:
        return system.parse_df(str(raw)).size_bytes  # the fact's own parser (df -B1 / df -k)
    except ParseError:
        pass  # df -h and other hand-made forms below
    lines = [ln for ln in str(raw).splitlines() if ln.strip()]
    if len(lines) == 1 and re.fullmatch(r"\s*\d+\s*", lines[0]):
        return int(lines[0])
    if len(lines) < 2:
        return None
    header = lines[0]
    unit = 1024  # df default is 1K blocks
    hm = re.search(r"\b(\d+)([KMGT]?)B?-blocks", header, re.IGNORECASE)
    if hm:
        unit = int(hm.group(1)) * _UNITS[hm.group(2).upper()]
    row = next((ln for ln in lines[1:] if "/dev/shm" in ln or "shm" in ln.split()[0]), lines[1])
    cols = row.split()
    if len(cols) < 2:
        return None
    size = cols[1]
    sm = re.fullmatch(r"(\d+(?:[.,]\d+)?)([KMGT]?)i?", size, re.IGNORECASE)
    if not sm:
        return None
    number = float(sm.group(1).replace(",", "."))
    if sm.group(2) or "Size" in header:
        return int(number * _UNITS[sm.group(2).upper()])
    return int(number * unit)


def arch_list(raw: object) -> list[tuple[str, int, str]]:
    """torch.cuda.get_arch_list() / _cuda_getArchFlags() output -> [(kind, number, suffix)]."""
    if raw is None:
        return []
    text = " ".join(map(str, raw)) if isinstance(raw, list | tuple) else str(raw)
    return [(k, int(n), s) for k, n, s in _ARCH_RE.findall(text)]


def compute_caps(raw: object) -> list[tuple[int, int]]:
    """`nvidia-smi --query-gpu=compute_cap --format=csv,noheader` (or a list) -> [(major, minor)] per GPU."""
    if raw is None:
        return []
    text = "\n".join(map(str, raw)) if isinstance(raw, list | tuple) else str(raw)
    return [(int(a), int(b)) for a, b in _CC_RE.findall(text)]


def arch_runs_on(kind: str, number: int, suffix: str, cc: tuple[int, int]) -> bool:
    """Can code for this target run on a GPU of compute capability `cc`? (`resolver.compat.arch_list_covers`)."""
    return arch_list_covers([f"{kind}_{number}{suffix}"], CC(*cc))


def torch_is_cpu_only(version: object, cuda: object) -> bool | None:
    """True for '+cpu' builds or torch.version.cuda None; None if unknown."""
    if version is not None and "+cpu" in str(version):
        return True
    if cuda is None:
        return None
    text = str(cuda).strip()
    if text.lower() in ("none", "", "null", "could not collect"):
        return True
    return False


def cuda_version(raw: object) -> tuple[int, int] | None:
    """'12.8' -> (12, 8)."""
    if raw is None:
        return None
    m = re.search(r"(\d{1,2})\.(\d{1,2})", str(raw))
    return (int(m.group(1)), int(m.group(2))) if m else None


def env_vars(raw: object, prefix: str = "NCCL_") -> dict[str, str]:
    """`env` output (or a dict) -> the variables starting with `prefix`."""
    if isinstance(raw, Mapping):
        return {str(k): str(v) for k, v in raw.items() if str(k).startswith(prefix)}
    out: dict[str, str] = {}
    if raw is None:
        return out
    for line in str(raw).splitlines():
        m = re.match(rf"\s*(?:export\s+)?({re.escape(prefix)}\w+)=(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip().strip("'\"")
    return out


@dataclass(frozen=True)
class LoaderView:
    """What the container's dynamic loader makes of libcuda.so.1 (`facts.evidence.CUDA_LOADER`'s output)."""

    resolved: str | None  # the path libcuda.so.1 resolves to, None when it does not
    cache_lines: tuple[str, ...]  # the `ldconfig -p` entries for libcuda.so.1 / libnvidia-ml.so.1
    unresolved: tuple[str, ...]  # what the file needs that the loader cannot find or load (ldd's lines)
    not_found_line: str | None  # the probe's own "libcuda.so.1: not found by the loader ..." line

    @property
    def broken(self) -> bool:
        return self.resolved is None or bool(self.unresolved)


_LOADER_NOT_LOADABLE_RE = re.compile(r"not found|not a dynamic executable|wrong ELF class|cannot open|"
                                     r"version `[^']*' not found", re.IGNORECASE)


def cuda_loader(raw: object) -> LoaderView | None:
    """The `ct.cuda_loader` probe's output read back; None when there is none (the probe did not run)."""
    if raw is None or not str(raw).strip():
        return None
    resolved: str | None = None
    cache: list[str] = []
    unresolved: list[str] = []
    not_found: str | None = None
    for line in str(raw).splitlines():
        line = line.strip()
        if line.startswith("ldconfig: ") and "=>" in line:
            cache.append(line[len("ldconfig: "):])
        elif line.startswith("resolved: libcuda.so.1 => "):
            resolved = line[len("resolved: libcuda.so.1 => "):].split(" (", 1)[0] or None
        elif line.startswith("libcuda.so.1: not found by the loader"):
            not_found = line
        elif line.startswith("needs: ") and _LOADER_NOT_LOADABLE_RE.search(line):
            unresolved.append(line[len("needs: "):])
    if resolved is None and not_found is None:
        return None  # not this probe's output (nothing to judge)
    return LoaderView(resolved, tuple(cache), tuple(unresolved), not_found)
