"""pylock.toml (PEP 751) from the venv's hashed locks, made by uv in the container, and read back.

Each lock group of `resolved.venv_lock` (the torch group from the PyTorch index, the extras from PyPI) is
compiled again with `uv pip compile --format pylock.toml` against the same index, in the container and with
the venv's Python, so the URLs are the real index's. uv writes no `size` for a PEP 503 HTML index (the
PyTorch index is one); the size is then read from the index with a HEAD request (Content-Length), also from
the container. Groups are merged by package name (the first group's entry wins: torch's own index), each
package names its `index`, and `[tool.gpu-provisioner]` records the indexes and the torch variant.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict

from packaging.utils import canonicalize_name

PYLOCK = "pylock.toml"
SEP = "@@pylock "

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


class LockPart(TypedDict, total=False):
    """A lock to compile to pylock: the `uv pip compile --generate-hashes` text and the index it came from
    (a `resolved.venv_lock` group, or the torch or PyPI part of one; `collect.compile_groups`)."""

    text: str
    index_url: str | None
    torch_index_url: str | None
    extra_index_url: str | None  # an older record's name for torch_index_url
    requirements: list[str]
    python: str | None


class PylockHashes(TypedDict, total=False):
    sha256: str


class PylockWheel(TypedDict, total=False):
    """A `[[packages.wheels]]` entry of PEP 751 (the keys this engine reads; others kept as read)."""

    name: str
    url: str
    size: int
    hashes: PylockHashes
    upload_time: str


# PEP 751's keys have dashes: the functional form
PylockPackage = TypedDict("PylockPackage", {
    "name": str,
    "version": str,
    "index": str,
    "marker": str,
    "requires-python": str,
    "wheels": list[PylockWheel],
}, total=False)

PylockTool = TypedDict("PylockTool", {
    "torch-variant": str,
    "torch-index": str,
    "indexes": list[str],
    "pypi-index": str,
}, total=False)

PylockDoc = TypedDict("PylockDoc", {
    "lock-version": str,
    "created-by": str,
    "requires-python": str,
    "packages": list[PylockPackage],
    "tool": dict[str, PylockTool],
}, total=False)


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    url: str
    sha256: str
    size: int

    @property
    def filename(self) -> str:
        from urllib.parse import unquote

        return unquote(self.url.rsplit("/", 1)[-1])


def compile_script(uv: str, venv: str, groups: dict[str, LockPart], workdir: str) -> str:
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
               f"{venv}/bin/python", "--no-progress", "--quiet", *idx, "-o", f"{workdir}/pylock.{name}.toml"]
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


def merge(pylocks: dict[str, str], groups: dict[str, LockPart], *, variant: str, torch_index: str,
          python: str) -> PylockDoc:
    """One pylock document from the groups' (torch group first), each package with its index."""
    packages: dict[str, PylockPackage] = {}
    requires = None
    for name, text in pylocks.items():
        doc = load(text)
        requires = requires or doc.get("requires-python")
        for pkg in doc.get("packages", []):
            key = canonicalize_name(str(pkg["name"]))
            if key in packages:
                continue
            entry = PylockPackage(**pkg)  # a copy
            entry.setdefault("index", str(groups[name]["index_url"]))
            packages[key] = entry
    pypi = next((str(g["index_url"]) for n, g in groups.items() if not n.endswith("torch")), None)
    indexes: list[str] = []
    for g in groups.values():
        for url in (g.get("index_url"), g.get("extra_index_url")):
            if url and url not in indexes:
                indexes.append(str(url))
    tool: PylockTool = {"torch-variant": variant, "torch-index": torch_index, "indexes": indexes}
    if pypi:
        tool["pypi-index"] = pypi
    return {"lock-version": "1.0", "created-by": "gpu-provisioner (uv pip compile --format pylock.toml)",
            "requires-python": requires or f"=={python}.*",
            "packages": [packages[k] for k in sorted(packages)],
            "tool": {"gpu-provisioner": tool}}


def missing_sizes(doc: PylockDoc) -> list[str]:
    return [str(w["url"]) for p in doc["packages"] for w in p.get("wheels", []) if "size" not in w]


def set_sizes(doc: PylockDoc, sizes: dict[str, int]) -> None:
    for pkg in doc["packages"]:
        for w in pkg.get("wheels", []):
            if "size" not in w and str(w["url"]) in sizes:
                w["size"] = int(sizes[str(w["url"])])


def wheels(doc: PylockDoc) -> list[Wheel]:
    """Every wheel of a pylock document; a package without a wheel, a hash or a size is an error."""
    out = []
    for pkg in doc.get("packages", []):
        ws = pkg.get("wheels") or []
        if not ws:
            raise ValueError(f"{pkg.get('name')}: no wheel in the lock (sdists are not exported)")
        for w in ws:
            sha = (w.get("hashes") or {}).get("sha256")
            if not sha or "size" not in w or "url" not in w:
                raise ValueError(f"{pkg.get('name')}: a wheel without url, sha256 or size")
            out.append(Wheel(str(pkg["name"]), str(pkg["version"]), str(w["url"]), str(sha), int(w["size"])))
    return out


def load(text: str) -> PylockDoc:
    """A pylock.toml document (PEP 751; uv's or ours): the keys this engine reads are typed, others kept."""
    doc: PylockDoc = tomllib.loads(text)  # type: ignore[assignment]  # tomllib is untyped: the shape PEP 751 states
    return doc


# --- a small TOML writer for the pylock shape (tomllib only reads) ------------------------------------

def toml_value(v: object) -> str:
    """`v` (bool, int, str, list, dict of those) as a TOML value: the pylock writer's and the Flox manifest's."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a JSON string is a valid TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def _table(prefix: str, table: Mapping[str, object]) -> list[str]:
    scalars = [f"{_key(k)} = {toml_value(v)}" for k, v in table.items()
               if not isinstance(v, dict) and not (isinstance(v, list) and v and all(isinstance(x, dict) for x in v)
                                                  and k == "packages")]
    out = ([f"[{prefix}]"] if prefix else []) + scalars
    for k, v in table.items():
        if isinstance(v, dict):
            out += ["", *_table(f"{prefix}.{_key(k)}" if prefix else _key(k), v)]
    for k, v in table.items():
        if k == "packages" and isinstance(v, list):
            for item in v:
                out += ["", f"[[{_key(k)}]]", *[f"{_key(a)} = {toml_value(b)}" for a, b in item.items()]]
    return out


def dumps(doc: PylockDoc) -> str:
    return "\n".join(_table("", doc)) + "\n"
