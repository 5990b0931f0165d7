"""The real CPU torch the lab's wheel index is built from, supplied on demand.

The lab's torch wheels carry a real PyTorch (so the container's venv runs torch.distributed with gloo
on the CPU). That PyTorch comes, in this order, from:

1. what the user's configuration names: a find-links folder or page in ``PROVISIONER_TORCH_FIND_LINKS``,
   ``UV_FIND_LINKS`` (https://docs.astral.sh/uv/reference/environment/#uv_find_links), ``PIP_FIND_LINKS``
   or pip's configuration files (``find-links`` under ``[global]``/``[install]``,
   https://pip.pypa.io/en/stable/topics/configuration/);
2. a wheel fetched before, under the user's cache dir (``<cache>/torch/``);
3. the PyTorch CPU index, https://download.pytorch.org/whl/cpu/torch/ (or the mirror of it named in
   ``PROVISIONER_TORCH_INDEX``), downloaded with a progress bar into that cache.

numpy for the same Python comes the same way, its index being the one the user's configuration names
(``UV_DEFAULT_INDEX``, ``UV_INDEX``, ``PIP_INDEX_URL``, ``PIP_EXTRA_INDEX_URL``, pip's ``index-url``/
``extra-index-url``; http(s) or a local ``file:`` mirror), else PyPI: the real torchvision requires it, and torch.distributed's
``all_gather_object`` (the burn-in's) fails "Numpy is not available" without it.

PyPI is not asked: its Linux x86_64 torch is the CUDA build (several GB with its nvidia-* packages), which
cannot run on a machine without a GPU driver. A CPU build is a wheel ``torch-<v>+cpu-cp3XY-cp3XY-
<linux x86_64 platform>.whl`` for a Python this machine has (the lab's containers run the machine's
Pythons). Offline with nothing configured, `supply` raises `TorchSupplyError` with one line that
names what the lab needs.
"""

from __future__ import annotations

import configparser
import hashlib
import html.parser
import os
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

from packaging.version import InvalidVersion, Version

from provisioner.paths import cache_dir

CPU_INDEX = "https://download.pytorch.org/whl/cpu/"
ENV_FIND_LINKS = "PROVISIONER_TORCH_FIND_LINKS"
ENV_INDEX = "PROVISIONER_TORCH_INDEX"
PYPI = "https://pypi.org/simple/"
#: <project>-<version>-cp3XY-cp3XY-<platform>.whl (a CPython wheel; the platform may be a dotted tag set)
WHEEL_NAME = re.compile(r"^(?P<project>torch|numpy)-(?P<version>[^-]+)-(?P<py>cp3\d+)-(?P=py)-"
                        r"(?P<platform>[A-Za-z0-9_.]+)\.whl$")
TIMEOUT_S = 30.0


class TorchSupplyError(Exception):
    """No CPU torch to be had: the message is one line that says what the lab needs."""


@dataclass(frozen=True)
class SuppliedTorch:
    """A real CPU torch wheel on this machine."""

    path: Path
    version: str
    python: str  # "3.11": the CPython the wheel is built for
    platform: str  # "manylinux_2_28_x86_64"
    source: str  # where it came from, for the one line the lab prints
    numpy: Path | None = None  # numpy for the same Python (torch.distributed's *_object collectives need it)

    @property
    def tag(self) -> str:
        py = "cp" + self.python.replace(".", "")
        return f"{py}-{py}-{self.platform}"


@dataclass(frozen=True)
class _Candidate:
    name: str
    location: str  # a local path or a URL
    version: Version
    python: str
    platform: str
    sha256: str | None


def _candidate(name: str, location: str, pythons: set[str], sha256: str | None = None,
               project: str = "torch") -> _Candidate | None:
    """A `project` wheel for Linux x86_64 and one of `pythons` (for torch: a CPU build), or None."""
    m = WHEEL_NAME.match(name)
    if not m or m["project"] != project or "x86_64" not in m["platform"] or "linux" not in m["platform"]:
        return None
    try:
        version = Version(m["version"])
    except InvalidVersion:
        return None
    python = f"3.{m['py'][3:]}"
    if (project == "torch" and version.local != "cpu") or version.is_prerelease or python not in pythons:
        return None
    return _Candidate(name, location, version, python, m["platform"], sha256)


def _best(cands: Iterable[_Candidate]) -> _Candidate | None:
    """The newest torch; for it, the controller's own Python, else the newest Python."""
    mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
    ranked = sorted(cands, key=lambda c: (c.version, c.python == mine, tuple(int(x) for x in c.python.split("."))))
    return ranked[-1] if ranked else None


# --- what the user's configuration names ---------------------------------------------------------


def _pip_config_files(env: Mapping[str, str]) -> list[Path]:
    """pip's configuration files, lowest priority first (https://pip.pypa.io/en/stable/topics/configuration/)."""
    given = env.get("PIP_CONFIG_FILE")
    if given == os.devnull:
        return []
    home = Path(env.get("HOME") or Path.home())
    xdg = env.get("XDG_CONFIG_HOME") or str(home / ".config")
    files = [Path("/etc/xdg/pip/pip.conf"), Path("/etc/pip.conf"), home / ".pip" / "pip.conf",
             Path(xdg) / "pip" / "pip.conf", Path(sys.prefix) / "pip.conf"]
    if given:
        files.append(Path(given))
    return files


def find_links(env: Mapping[str, str] | None = None) -> list[str]:
    """Every find-links location the user's configuration names, in the order they are asked."""
    env = os.environ if env is None else env
    out: list[str] = []
    for var, split in ((ENV_FIND_LINKS, r"[\s,]+"), ("UV_FIND_LINKS", r"[\s,]+"), ("PIP_FIND_LINKS", r"\s+")):
        out += [v for v in re.split(split, env.get(var, "")) if v]
    for path in reversed(_pip_config_files(env)):  # pip: a later file's value overrides an earlier one's
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(path)
        except (configparser.Error, OSError, UnicodeDecodeError):
            continue
        found = [v for section in ("install", "global") for key in ("find-links", "find_links")
                 if parser.has_option(section, key) for v in parser.get(section, key).split()]
        if found:
            out += found
            break
    return list(dict.fromkeys(out))


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def _request(url: str) -> urllib.request.Request:
    if urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"not an http(s) URL: {url}")
    return urllib.request.Request(url, headers={"User-Agent": "gpu-provisioner (lab torch supply)"})  # noqa: S310


def _local(url: str) -> Path | None:
    """The path of a file: URL (a local mirror), else None."""
    return Path(unquote(urlsplit(url).path)) if url.startswith("file:") else None


def _fetch_text(url: str) -> str:
    local = _local(url)
    if local is not None:  # a local PEP 503 mirror: file:///…/simple/numpy/ is its index.html
        return (local / "index.html" if local.is_dir() else local).read_text(errors="replace")
    with urllib.request.urlopen(_request(url), timeout=TIMEOUT_S) as resp:  # noqa: S310 - http(s) only
        data: bytes = resp.read()
    return data.decode("utf-8", errors="replace")


def _page_candidates(url: str, pythons: set[str], project: str = "torch") -> list[_Candidate]:
    """The `project` wheels a find-links page or PEP 503 project page links to."""
    parser = _Links()
    parser.feed(_fetch_text(url))
    out = []
    for href in parser.hrefs:
        full = urljoin(url, href)
        target, _, fragment = full.partition("#")
        sha = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None
        cand = _candidate(unquote(urlsplit(target).path.rsplit("/", 1)[-1]), target, pythons, sha, project)
        if cand is not None:
            out.append(cand)
    return out


def _location_candidates(location: str, pythons: set[str], project: str = "torch") -> list[_Candidate]:
    if location.startswith(("http://", "https://")):
        try:
            return _page_candidates(location, pythons, project)
        except (OSError, urllib.error.URLError, ValueError):
            return []  # an unreachable page of the user's is no supply; the next source is asked
    folder = Path(unquote(urlsplit(location).path) if location.startswith("file:") else location).expanduser()
    if not folder.is_dir():
        return []
    found = (_candidate(p.name, str(p), pythons, None, project) for p in sorted(folder.glob(f"{project}-*.whl"))
             if p.is_file())
    return [c for c in found if c is not None]


# --- download ------------------------------------------------------------------------------------


def _download(cand: _Candidate, dest_dir: Path, progress: bool) -> Path:
    """Fetch `cand` into `dest_dir` (a progress bar on stderr), checking its sha256 when the index gave one."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / cand.name
    tmp = dest.with_name(f".{cand.name}.{os.getpid()}.part")
    digest = hashlib.sha256()
    req = _request(cand.location)
    columns = (TextColumn("LAB: fetching {task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp, open(tmp, "wb") as out, \
                Progress(*columns, console=Console(stderr=True), disable=not progress, transient=True) as bar:  # noqa: S310
            total = int(resp.headers.get("Content-Length") or 0) or None
            task = bar.add_task(cand.name, total=total)
            while chunk := resp.read(1 << 20):
                out.write(chunk)
                digest.update(chunk)
                bar.advance(task, len(chunk))
        if cand.sha256 and digest.hexdigest() != cand.sha256:
            raise TorchSupplyError(f"LAB: {cand.location} served bytes whose sha256 {digest.hexdigest()} is not the "
                                   f"index's {cand.sha256}; fetch it again or name a folder holding the wheel "
                                   f"with {ENV_FIND_LINKS}")
        tmp.replace(dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


# --- the supply ----------------------------------------------------------------------------------


def needs_line(pythons: Iterable[str], why: str) -> str:
    """The one line that says what the lab needs."""
    pys = "/".join("cp" + p.replace(".", "") for p in sorted(pythons)) or "cp3XY"
    return (f"LAB: the lab needs a CPU build of PyTorch (a torch-<version>+cpu-{pys}-…-linux_x86_64 wheel for a "
            f"Python this machine has) and {why}: name a folder or page holding one with UV_FIND_LINKS "
            f"(or PIP_FIND_LINKS, pip's find-links, {ENV_FIND_LINKS}), or let it reach {CPU_INDEX}")


def supply(pythons: Iterable[str], env: Mapping[str, str] | None = None, progress: bool = True) -> SuppliedTorch:
    """A real CPU torch wheel for one of `pythons` ("3.11", ...) and a numpy wheel for the same Python:
    from the configuration, the cache, or the PyTorch CPU index and PyPI (downloaded once). Raises
    `TorchSupplyError` (one line) when there is none to be had."""
    env = os.environ if env is None else env
    torch = _torch(set(pythons), env, progress)
    return SuppliedTorch(torch.path, torch.version, torch.python, torch.platform, torch.source,
                         _numpy(torch.python, env, progress))


def _numpy(python: str, env: Mapping[str, str], progress: bool) -> Path:
    """numpy for `python`: real torchvision requires it (so every venv.build venv has it), and
    torch.distributed's all_gather_object fails "Numpy is not available" without it."""
    for location in [*find_links(env), str(cache_dir(env) / "torch")]:
        best = _best(_location_candidates(location, {python}, "numpy"))
        if best is not None:
            return _fetched(best, env, progress)
    problems = []
    for index in package_indexes(env):
        try:
            best = _best(_page_candidates(index + "numpy/", {python}, "numpy"))
            if best is not None:
                return _fetched(best, env, progress)
            problems.append(f"{index} has none")
        except (OSError, urllib.error.URLError, ValueError) as exc:
            problems.append(f"cannot reach {index} ({getattr(exc, 'reason', None) or exc})")
    raise TorchSupplyError(f"LAB: the lab needs a numpy wheel for Python {python} (Linux x86_64) beside its torch "
                           f"and {'; '.join(problems)}: name a folder holding one with UV_FIND_LINKS (or "
                           f"PIP_FIND_LINKS, pip's find-links, {ENV_FIND_LINKS})")


def _fetched(cand: _Candidate, env: Mapping[str, str], progress: bool) -> Path:
    """The candidate as a local file: as it is when local, else downloaded into the cache (`env`'s)."""
    local = _local(cand.location)
    if local is not None:
        return local
    if cand.location.startswith(("http://", "https://")):
        return _download(cand, cache_dir(env) / "torch", progress)
    return Path(cand.location)


def package_indexes(env: Mapping[str, str]) -> list[str]:
    """The PEP 503 indexes the user's configuration names (uv's, then pip's, environment and config files),
    then PyPI: where numpy is looked up."""
    out = [env.get(v, "") for v in ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL")]
    for var in ("UV_INDEX", "UV_EXTRA_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        out += re.split(r"\s+", env.get(var, ""))
    for path in reversed(_pip_config_files(env)):
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(path)
        except (configparser.Error, OSError, UnicodeDecodeError):
            continue
        found = [v for section in ("install", "global") for key in ("index-url", "extra-index-url")
                 if parser.has_option(section, key) for v in parser.get(section, key).split()]
        if found:
            out += found
            break
    out = [u.split("=", 1)[1] if "=" in u.split("/", 1)[0] else u for u in out if u]  # UV_INDEX: name=url
    return list(dict.fromkeys(u.rstrip("/") + "/" for u in [*out, PYPI]))


def _torch(wanted: set[str], env: Mapping[str, str], progress: bool) -> SuppliedTorch:
    for location in find_links(env):
        best = _best(_location_candidates(location, wanted))
        if best is not None:
            return SuppliedTorch(_fetched(best, env, progress), str(best.version), best.python, best.platform, location)
    cached = _best(_location_candidates(str(cache_dir(env) / "torch"), wanted))
    if cached is not None:
        return SuppliedTorch(Path(cached.location), str(cached.version), cached.python, cached.platform,
                             "the cache")
    index = (env.get(ENV_INDEX) or CPU_INDEX).rstrip("/") + "/"
    try:
        found = _page_candidates(index + "torch/", wanted)
    except (OSError, urllib.error.URLError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise TorchSupplyError(needs_line(wanted, f"cannot reach {index} ({reason})")) from None
    best = _best(found)
    if best is None:
        raise TorchSupplyError(needs_line(wanted, f"{index} has none for those Pythons"))
    try:
        path = _download(best, cache_dir(env) / "torch", progress)
    except (OSError, urllib.error.URLError) as exc:
        raise TorchSupplyError(needs_line(wanted, f"the download of {best.location} failed ({exc})")) from None
    return SuppliedTorch(path, str(best.version), best.python, best.platform, index)
