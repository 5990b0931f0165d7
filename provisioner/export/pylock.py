"""pylock.toml (PEP 751) from the venv's hashed locks, made by uv in the container, read and written with
`packaging.pylock` (validation) and `tomllib`/`tomli_w` (TOML): no hand-written TOML.

Each lock group of `resolved.venv_lock` (the torch group from the PyTorch index, the extras from PyPI) is
compiled again with `uv pip compile --format pylock.toml` against the same index, in the container and with
the venv's Python, by the uv the engine chose (`collect.engine_uv`), so the URLs are the real index's. uv
writes no `size` for a PEP 503 HTML index (the PyTorch index is one); the size is then read from the index
with a HEAD request (Content-Length), also from the container. What uv answers is a stranger's word: every
package must be one the engine locked (name, version, a locked sha256: `check_against_locks`), and every
wheel's file name, URL host and size pass `trust`. Groups are merged by package name (the first group's entry
wins: torch's own index), each package names its `index`, sdists are dropped (the venv was built from wheels),
`environments` and `requires-python` state the machine and Python the runtime was proven on, and
`[tool.gpu-provisioner]` records the indexes, the hosts the wheels may come from and the torch variant.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import tomli_w
from packaging.pylock import Package, PackageWheel, Pylock, PylockValidationError
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from provisioner.export import trust

PYLOCK = "pylock.toml"
CREATED_BY = "gpu-provisioner"
TOOL = "gpu-provisioner"
SEP = "@@pylock "
_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_(x86_64|aarch64)")
_LOCK_LINE = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
_LOCK_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")

#: in the container: sizes of wheel URLs by HEAD (Content-Length), else by reading the body
SIZE_SCRIPT = r"""
import json, sys, urllib.request
out = {}
for url in sys.argv[1:]:
    size = None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60) as r:
            size = int(r.headers.get("Content-Length") or -1)
    except Exception:
        size = -1
    if size is None or size < 0:
        n = 0
        with urllib.request.urlopen(url, timeout=600) as r:
            while True:
                chunk = r.read(1 << 20)
                if not chunk:
                    break
                n += len(chunk)
        size = n
    out[url] = size
print(json.dumps(out))
"""


class PylockError(ValueError):
    """A pylock document that is not PEP 751, or holds what the export refuses; the message names the field."""


class LockPart(TypedDict, total=False):
    """A lock to compile to pylock: the `uv pip compile --generate-hashes` text and the index it came from
    (a `resolved.venv_lock` group, or the torch or PyPI part of one; `collect.compile_groups`)."""

    text: str
    index_url: str | None
    torch_index_url: str | None
    extra_index_url: str | None  # an older record's name for torch_index_url
    requirements: list[str]
    python: str | None


@dataclass(frozen=True)
class Wheel:
    """One wheel of the lock, checked (`wheels`): its file name is safe to use as a path's last part."""

    name: str
    version: str
    url: str
    sha256: str
    size: int
    filename: str


def compile_script(uv: str, venv: str, groups: Mapping[str, LockPart], workdir: str) -> str:
    """Shell script: each group's lock text compiled to pylock.<group>.toml, printed after a separator line."""
    from provisioner import quoting

    lines = [f"set -e; w={quoting.join([workdir])}; mkdir -p \"$w\""]
    for name, group in groups.items():
        if not re.fullmatch(r"[a-z]+", name):
            raise ValueError(f"lock group name {name!r}")
        idx = ["--index-url", str(group["index_url"])]
        if group.get("extra_index_url"):
            idx += ["--extra-index-url", str(group["extra_index_url"])]
        cmd = [uv, "pip", "compile", f"{workdir}/{name}.txt", "--format", "pylock.toml", "--python",
               f"{venv}/bin/python", "--no-progress", "--quiet", "--no-config", *idx, "-o",
               f"{workdir}/pylock.{name}.toml"]
        lines.append(quoting.join(cmd))
        lines.append(f"echo {quoting.join([SEP + name])}; cat \"$w/pylock.{name}.toml\"")
    return "\n".join(lines)


def split_output(text: str) -> dict[str, str]:
    """The compile script's output → {group: pylock text}."""
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(SEP):
            current = line[len(SEP):].strip()
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return {k: "\n".join(v) + "\n" for k, v in out.items()}


def parse(data: Mapping[str, Any], where: str = PYLOCK) -> Pylock:
    """A TOML table as a validated PEP 751 lock (packaging's reader)."""
    try:
        return Pylock.from_dict(data)
    except PylockValidationError as exc:
        raise PylockError(f"{where}: {exc}") from None


def load(text: str, where: str = PYLOCK) -> Pylock:
    """A pylock.toml document (PEP 751; uv's or ours), read with tomllib and validated by packaging."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PylockError(f"{where} is not TOML: {exc}") from None
    return parse(data, where)


def dumps(lock: Pylock) -> str:
    """The lock as TOML (tomli_w), validated first: what `load` reads back as the same lock."""
    try:
        lock.validate()
    except PylockValidationError as exc:
        raise PylockError(f"{PYLOCK}: {exc}") from None
    return tomli_w.dumps(dict(lock.to_dict()))


def tool(lock: Pylock) -> dict[str, Any]:
    """`[tool.gpu-provisioner]` of the lock ({} when absent)."""
    table = (lock.tool or {}).get(TOOL)
    return dict(table) if isinstance(table, Mapping) else {}


def merge(pylocks: Mapping[str, str], groups: Mapping[str, LockPart], *, variant: str, torch_index: str,
          python: str, hosts: frozenset[str] = frozenset()) -> Pylock:
    """One lock from the groups' (torch group first), each package with its index, without sdists."""
    packages: dict[str, Package] = {}
    for name, text in pylocks.items():
        for pkg in load(text, f"uv's pylock of lock group {name}").packages:
            key = canonicalize_name(pkg.name)
            if key in packages:
                continue
            packages[key] = dataclasses.replace(pkg, sdist=None, index=pkg.index or str(groups[name]["index_url"]))
    pypi = next((str(g["index_url"]) for n, g in groups.items() if not n.endswith("torch")), None)
    indexes: list[str] = []
    for g in groups.values():
        for url in (g.get("index_url"), g.get("extra_index_url")):
            if url and url not in indexes:
                indexes.append(str(url))
    table: dict[str, Any] = {"torch-variant": variant, "torch-index": torch_index, "indexes": indexes}
    if pypi:
        table["pypi-index"] = pypi
    if hosts:
        table["hosts"] = sorted(hosts)
    lock = Pylock(lock_version=Version("1.0"), created_by=CREATED_BY, packages=[packages[k] for k in sorted(packages)],
                  tool={TOOL: table})
    return for_runtime(lock, python=python, machine=machine_of(lock))


def for_runtime(lock: Pylock, *, python: str, machine: str) -> Pylock:
    """The lock with `requires-python` and `environments` of the Python and machine it was proven on."""
    minor = ".".join(python.split(".")[:2])
    if not re.fullmatch(r"3\.\d{1,2}", minor) or machine not in ("x86_64", "aarch64"):
        raise PylockError(f"{PYLOCK}: no environment for Python {trust.shown(python)} on {trust.shown(machine)}")
    from packaging.markers import Marker
    from packaging.specifiers import SpecifierSet

    env = Marker(f"sys_platform == 'linux' and platform_machine == '{machine}' and python_version == '{minor}'")
    return dataclasses.replace(lock, requires_python=SpecifierSet(f"=={minor}.*"), environments=[env])


def machine_of(lock: Pylock) -> str:
    """x86_64 or aarch64 from the wheels' manylinux tags (x86_64 when every wheel is pure)."""
    arches = {m.group(3) for p in lock.packages for w in p.wheels or [] if (m := _MANYLINUX.search(w.filename))}
    if len(arches) > 1:
        raise PylockError(f"{PYLOCK}: the lock mixes machine types {sorted(arches)}")
    return arches.pop() if arches else "x86_64"


def missing_sizes(lock: Pylock) -> list[str]:
    return [str(w.url) for p in lock.packages for w in p.wheels or [] if w.size is None and w.url]


def set_sizes(lock: Pylock, sizes: Mapping[str, object]) -> Pylock:
    """The lock with the wheels' sizes read from the index (each checked: a positive int, bounded)."""
    def sized(i: int, j: int, w: PackageWheel) -> PackageWheel:
        if w.size is not None or str(w.url) not in sizes:
            return w
        return dataclasses.replace(w, size=trust.size(sizes[str(w.url)], field=f"packages[{i}].wheels[{j}].size"))

    packages = [dataclasses.replace(p, wheels=[sized(i, j, w) for j, w in enumerate(p.wheels or [])])
                for i, p in enumerate(lock.packages)]
    return dataclasses.replace(lock, packages=packages)


def wheels(lock: Pylock, allowed: frozenset[str] | None = None) -> list[Wheel]:
    """Every wheel of the lock, each checked (`trust`): a package without a wheel, an https URL on an allowed
    host (`allowed`; None: the hosts the lock's `[tool.gpu-provisioner] hosts` names, else https only), a
    wheel file name of that package and version, a sha256 or a size is refused, naming the field."""
    if allowed is None:
        declared = tool(lock).get("hosts")
        allowed = frozenset(str(h) for h in declared) if isinstance(declared, list) else None
    out = []
    for i, pkg in enumerate(lock.packages):
        where = f"{PYLOCK}: packages[{i}] ({trust.shown(pkg.name)})"
        if not pkg.wheels:
            raise PylockError(f"{where}: no wheel in the lock (sdists are not exported)")
        if pkg.version is None:
            raise PylockError(f"{where}: no version")
        for j, w in enumerate(pkg.wheels):
            field = f"{where}.wheels[{j}]"
            if not w.url:
                raise PylockError(f"{field}.url: a wheel without a URL")
            if w.size is None:
                raise PylockError(f"{field}.size: a wheel without a size")
            try:
                sha = trust.sha256(w.hashes.get("sha256"), field=f"{field}.hashes.sha256")
                size = trust.size(w.size, field=f"{field}.size")
                filename = trust.wheel_from_url(w.url, package=pkg.name, version=str(pkg.version), allowed=allowed,
                                                field=f"{field}.url", listed_name=w.name)
            except trust.Untrusted as exc:
                raise PylockError(str(exc)) from None
            out.append(Wheel(pkg.name, str(pkg.version), w.url, sha, size, filename))
    return out


def locked_hashes(text: str) -> dict[str, tuple[str, set[str]]]:
    """A `uv pip compile --generate-hashes` lock: {normalized name: (version, {sha256})}."""
    out: dict[str, tuple[str, set[str]]] = {}
    current: str | None = None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            m = _LOCK_LINE.match(line)
            current = canonicalize_name(m.group(1)) if m else None
            if m and current is not None:
                out[current] = (m.group(2), set(_LOCK_HASH.findall(line)))
            continue
        if current is not None:
            out[current][1].update(_LOCK_HASH.findall(line))
    return out


def _same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def check_against_locks(lock: Pylock, groups: Mapping[str, LockPart]) -> None:
    """Every package of `lock` is one the engine locked (recorded by venv.build): the same version, every
    wheel's sha256 among the locked hashes; every locked package is in the lock. A forged or altered answer
    from the container's uv is refused here, naming the package."""
    locked: dict[str, tuple[str, set[str]]] = {}
    for group in groups.values():
        for name, (version, hashes) in locked_hashes(str(group.get("text") or "")).items():
            have = locked.setdefault(name, (version, set()))
            have[1].update(hashes)
    seen = set()
    for i, pkg in enumerate(lock.packages):
        where = f"{PYLOCK}: packages[{i}] ({trust.shown(pkg.name)})"
        key = canonicalize_name(pkg.name)
        if key not in locked:
            raise PylockError(f"{where}: not in the venv's recorded lock (uv's answer adds a package)")
        version, hashes = locked[key]
        if pkg.version is None or not _same_version(str(pkg.version), version):
            raise PylockError(f"{where}.version: {trust.shown(str(pkg.version))} is not the locked {version}")
        for j, w in enumerate(pkg.wheels or []):
            if w.hashes.get("sha256") not in hashes:
                raise PylockError(f"{where}.wheels[{j}].hashes.sha256: not a hash of the venv's recorded lock")
        seen.add(key)
    missing = sorted(set(locked) - seen)
    if missing:
        raise PylockError(f"{PYLOCK}: the venv's lock has {', '.join(missing)}, uv's pylock does not")
