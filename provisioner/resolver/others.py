"""How driver-only pickers would decide for the same host (torch-matrix.md §3–4).

- uv `--torch-backend=auto`: every index whose driver floor the driver meets, newest CUDA first,
  then cpu; torch packages use "unsafe first match": the first index that has a usable torch wins,
  newest version on it.
- light-the-torch 0.8: backends up to cu126 whose floor the driver meets, plus cpu; candidates
  sorted by (backend, base_version as a *string*), so the highest backend wins and within it
  "2.9.1" sorts above "2.14.0".
- `pip install torch` from PyPI: the newest release, as the PyPI default variant of that release.
Each pick is then checked with the real rules, so users see where those tools would go wrong.
"""

from __future__ import annotations

from collections.abc import Callable

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from provisioner.resolver.data import Release, ToolTable, Variant, WheelData
from provisioner.resolver.models import OtherTool, ResolveRequest
from provisioner.resolver.versions import driver_at_least, parse_driver, parse_glibc

Works = Callable[[Release, Variant, str], tuple[bool, str]]


def _variant_cuda(name: str) -> tuple[int, int]:
    digits = name[2:]
    return int(digits[:-1]), int(digits[-1])


def _installable(data: WheelData, req: ResolveRequest, name: str) -> list[tuple[Release, Variant, str]]:
    """(release, build, patch) a pip-like installer can install from index `name` on this host."""
    pin = SpecifierSet(req.torch) if req.torch else None
    out: list[tuple[Release, Variant, str]] = []
    for release in data.releases:
        if not any(t.version == req.python for t in release.python):
            continue
        for v in release.variants:
            if v.variant != name or v.platform != req.arch:
                continue
            if req.glibc and parse_glibc(req.glibc) < parse_glibc(v.min_glibc):
                continue
            for patch in v.patches or release.patches:
                if pin is None or pin.contains(Version(f"{patch}+{name}"), prereleases=True):
                    out.append((release, v, patch))
    return out


def _allowed(table: ToolTable, driver: tuple[int, ...]) -> list[str]:
    names = [n for n, floor in table.min_driver.items() if driver_at_least(driver, floor)]
    return sorted(names, key=_variant_cuda, reverse=True)


def _newest_cpu(data: WheelData, req: ResolveRequest) -> str | None:
    pin = SpecifierSet(req.torch) if req.torch else None
    patches = [
        p
        for r in data.releases
        if any(t.version == req.python for t in r.python)
        for p in r.patches
        if pin is None or pin.contains(Version(f"{p}+cpu"), prereleases=True)
    ]
    return max(patches, key=Version) if patches else None


def uv_auto(data: WheelData, req: ResolveRequest) -> tuple[str | None, str | None, Release | None, Variant | None]:
    """(variant, torch, release, build) that uv --torch-backend=auto would install."""
    for name in _allowed(data.uv_torch_backend, parse_driver(req.driver)):
        found = _installable(data, req, name)
        if found:
            release, v, patch = max(found, key=lambda t: Version(t[2]))
            return name, patch, release, v
    return "cpu", _newest_cpu(data, req), None, None


def light_the_torch(
    data: WheelData, req: ResolveRequest
) -> tuple[str | None, str | None, Release | None, Variant | None]:
    """(variant, torch, release, build) that `ltt install torch` would install."""
    for name in _allowed(data.light_the_torch, parse_driver(req.driver)):
        found = _installable(data, req, name)
        if found:
            release, v, patch = max(found, key=lambda t: t[2])  # base_version compared as str
            return name, patch, release, v
    return "cpu", _newest_cpu(data, req), None, None


def pypi_default(data: WheelData, req: ResolveRequest) -> tuple[str | None, str | None, Release | None, Variant | None]:
    """(variant, torch, release, build) that plain `pip install torch` from PyPI would install."""
    pin = SpecifierSet(req.torch) if req.torch else None
    for release in sorted(data.releases, key=lambda r: Version(r.version), reverse=True):
        if not any(t.version == req.python for t in release.python):
            continue
        patches = [p for p in release.patches if pin is None or pin.contains(Version(p), prereleases=True)]
        if not patches:
            continue
        name = release.pypi_default.get(req.arch)
        if name is None:
            return None, None, None, None  # unknown for this release/platform
        patch = max(patches, key=Version)
        build = next((v for v in release.variants if v.variant == name and v.platform == req.arch), None)
        return name, patch, release, build
    return None, None, None, None


def compare(data: WheelData, req: ResolveRequest, chosen: tuple[str, str] | None, works: Works) -> list[OtherTool]:
    """The other tools' picks that differ from `chosen` (variant, torch), each checked with `works`."""
    out: list[OtherTool] = []
    pickers = (
        ("uv --torch-backend=auto", uv_auto, "newest CUDA index the driver allows, newest torch on it"),
        ("light-the-torch 0.8", light_the_torch, "highest backend ≤ cu126, version compared as text"),
        ("pip install torch (PyPI)", pypi_default, "PyPI's default build of the newest release"),
    )
    for tool, pick, how in pickers:
        name, patch, release, build = pick(data, req)
        if name is None or patch is None or (chosen is not None and (name, patch) == chosen):
            continue
        if release is None or build is None:
            ok, why = False, "CPU-only wheel: torch.cuda.is_available() is False"
        else:
            ok, why = works(release, build, patch)
        verdict = "works" if ok else f"fails: {why}"
        out.append(
            OtherTool(
                tool=tool,
                variant=name,
                torch=patch,
                index_url="https://pypi.org/simple" if tool.startswith("pip") else data.index_url(name),
                works=ok,
                note=f"{how}; {verdict}",
            )
        )
    return out


__all__ = ["compare", "light_the_torch", "pypi_default", "uv_auto"]
