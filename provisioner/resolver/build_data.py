"""Generate `data/torch-releases.json` from reference/torch-matrix.json plus hand-kept facts.

Usage (from the project root):

    uv run python -m provisioner.resolver.build_data /work/shared/reference/torch-matrix.json \
        [-o provisioner/resolver/data/torch-releases.json] [--check]

`--check` regenerates in memory and exits 1 when the committed file differs. The hand-kept facts
(patch versions, torchvision companions, per-build exceptions, the 2.15 addendum, GPU driver
constraints) are the constants below; each carries its source. To add a torch release: add its
row to the reference JSON (or to `EXTRA_RELEASES`), its patches to `PATCHES`, its torchvision to
`TORCHVISION`, bump `DATA_VERSION`, regenerate, and run tests/test_resolver_data.py.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

from packaging.version import Version

from provisioner import driver_eol
from provisioner.resolver.data import SCHEMA_VERSION, parse_data

DATA_VERSION = "2026.12.03"
DEFAULT_OUT = Path(__file__).parent / "data" / "torch-releases.json"
PYTORCH_INDEX = "https://download.pytorch.org/whl/"  # the PyTorch wheel indexes, one per variant
INDEX_URL_TEMPLATE = "https://download.pytorch.org/whl/{variant}"

# Patch releases known to exist (oldest first). 2.0–2.9 from the PyTorch release history
# (pytorch.org/get-started/previous-versions); 2.10+ from the versions quoted in torch-matrix.md.
PATCHES: dict[str, list[str]] = {
    "2.0": ["2.0.0", "2.0.1"],
    "2.1": ["2.1.0", "2.1.1", "2.1.2"],
    "2.2": ["2.2.0", "2.2.1", "2.2.2"],
    "2.3": ["2.3.0", "2.3.1"],
    "2.4": ["2.4.0", "2.4.1"],
    "2.5": ["2.5.0", "2.5.1"],
    "2.6": ["2.6.0"],
    "2.7": ["2.7.0", "2.7.1"],
    "2.8": ["2.8.0"],
    "2.9": ["2.9.0", "2.9.1"],
    "2.10": ["2.10.0"],
    "2.11": ["2.11.0"],
    "2.12": ["2.12.0", "2.12.1"],
    "2.13": ["2.13.0"],
    "2.14": ["2.14.0"],
    "2.15": ["2.15.0"],
}

# Companion torchvision (pytorch/vision README table for <=2.3; pinned pairs seen in public
# requirement files for later releases, e.g. "torch==2.12.1 torchvision==0.27.1").
TORCHVISION: dict[str, str] = {
    "2.0.0": "0.15.1",
    "2.0.1": "0.15.2",
    "2.1.0": "0.16.0",
    "2.1.1": "0.16.1",
    "2.1.2": "0.16.2",
    "2.2.0": "0.17.0",
    "2.2.1": "0.17.1",
    "2.2.2": "0.17.2",
    "2.3.0": "0.18.0",
    "2.3.1": "0.18.1",
    "2.4.0": "0.19.0",
    "2.4.1": "0.19.1",
    "2.5.0": "0.20.0",
    "2.5.1": "0.20.1",
    "2.6.0": "0.21.0",
    "2.7.0": "0.22.0",
    "2.7.1": "0.22.1",
    "2.8.0": "0.23.0",
    "2.9.0": "0.24.0",
    "2.9.1": "0.24.1",
    "2.10.0": "0.25.0",
    "2.11.0": "0.26.0",
    "2.12.0": "0.27.0",
    "2.12.1": "0.27.1",
    "2.13.0": "0.28.0",
    "2.14.0": "0.29.0",
    "2.15.0": "0.30.0",
}
TORCHVISION_UNVERIFIED = {"2.15"}  # 0.30.0 inferred from the 2.15 nightlies' pairing

# Builds that exist only for some patches of their release.
VARIANT_PATCHES: dict[tuple[str, str], list[str]] = {
    ("2.12", "cu129"): ["2.12.1"],  # cu129 revived in 2.12.1 (pytorch#185269, #186015)
}
# Builds of one patch that carried PTX the series otherwise strips.
EXTRA_ARCH_BY_PATCH: dict[tuple[str, str, str], dict[str, list[str]]] = {
    ("2.13", "x86_64", "cu130"): {"2.13.0": ["compute_120"]},  # pytorch#188914
}

# Python tags only some patches of a release carry (added to the release's list with their patches).
PYTHON_BY_PATCH: dict[tuple[str, str], dict[str, Any]] = {
    # 2.12.0 still shipped cp313t (Linux x86_64 and aarch64); pypa/manylinux dropped 3.13t and
    # pytorch#182951 took it out of the build matrix, so 2.12.1 has none.
    ("2.12", "3.13t"): {
        "patches": ["2.12.0"],
        "sources": [
            "https://github.com/pytorch/pytorch/pull/182951",
            "https://github.com/SHI-Labs/NATTEN/issues/338",
            "https://github.com/mjun0812/flash-attention-prebuild-wheels/pull/142",
        ],
    },
}
# Doubts checked against the release matrices (issue 24): the data was right; the check is recorded.
CHECKED: dict[str, list[str]] = {
    "2.9": ["no aarch64 cu129 build: the 12.9 sbsa build was removed for 2.9 "
            "(https://github.com/pytorch/pytorch/pull/162364); cu129 2.9.x exists for x86_64 only"],
    "2.14": ["no cu129 build in 2.14: test-infra release/2.14 CUDA_ARCHES 12.6/13.0/13.2 "
             "(https://github.com/pytorch/pytorch/issues/187834)"],
}

MINOR_COMPAT_URL = "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html"
CUDA_FLOORS: list[dict[str, Any]] = [
    {"cuda_major": 11, "min_driver": "450.80.02", "source": MINOR_COMPAT_URL},
    {"cuda_major": 12, "min_driver": "525.60.13", "source": MINOR_COMPAT_URL},
    {"cuda_major": 13, "min_driver": "580", "source": MINOR_COMPAT_URL},
]
# --compress-mode=size fatbins: restricted to CUDA 13 builds from the 2.9 cycle (pytorch#161316).
COMPRESSED_FATBIN = {
    "min_driver": "550.54.14",
    "why": "fatbins built with nvcc --compress-mode=size need a CUDA 12.4+ driver",
    "source": "https://github.com/pytorch/pytorch/pull/161316",
}
COMPRESSED_FROM = (2, 9)

GPU_DRIVER_CONSTRAINTS: list[dict[str, Any]] = [
    {
        "id": "blackwell-needs-r570",
        "family": "Blackwell and newer (CC >= 10.0)",
        "cc_min": "10.0",
        "min_driver": "570",
        "severity": "error",
        "message": "Blackwell GPUs are not enumerated by drivers older than R570 (first CUDA 12.8 driver)",
        "fix": "upgrade the driver to >= 570",
        "sources": [
            "https://github.com/oddmario/NVIDIA-Ubuntu-Driver-Guide/issues/10",
            "https://github.com/pdbear/syno_nvidia_gpu_driver/issues/43",
        ],
    },
    # the branch end-of-life ceilings: generated from provisioner.driver_eol.RULES (one source of truth)
    *driver_eol.eol_constraints(),
]

# What each CUDA release's runtime compiler (nvrtc) can target: torch JIT-compiles some kernels at run time
# (jiterator, fused/compiled CUDA code) with the nvrtc bundled in the wheel and passes the device's own
# sm_XY; from nvrtc 11.8 on torch no longer clamps it to what nvrtc knows (aten jit_utils.cpp
# codegenOutputQuery, https://github.com/pytorch/pytorch/pull/87611), so a GPU newer than the build's CUDA
# fails "nvrtc: error: invalid value for --gpu-architecture (-arch)" although its SASS runs
# (https://github.com/NVIDIA/Isaac-GR00T/issues/474, https://github.com/isaac-sim/IsaacLab/issues/5520:
# GB10/sm_121 on a cu128 torch; fixed by the cu130 build). nvrtc < 11.8 is clamped by torch: not listed.
FEATURES = "https://docs.nvidia.com/cuda/cuda-features-archive/index.html"
FEATURES_129 = "https://docs.nvidia.com/cuda/archive/12.9.1/cuda-features-archive/index.html"
CMAKE_CUDA12 = "https://gitlab.kitware.com/cmake/cmake/-/merge_requests/8031"
_CUDA12_BASE = ["5.0", "5.2", "5.3", "6.0", "6.1", "6.2", "7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0"]
_CUDA13_BASE = ["7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1"]
NVRTC_REACH: dict[str, dict[str, Any]] = {
    "11.8": {"targets": ["3.5", "3.7", *_CUDA12_BASE], "sources": [CMAKE_CUDA12],
             "notes": ["CUDA 11.8 added sm_89 (Ada) and sm_90 (Hopper)"]},
    **{v: {"targets": list(_CUDA12_BASE), "sources": [CMAKE_CUDA12, FEATURES],
           "notes": ["CUDA 12.0 removed sm_35/sm_37; no new target until 12.8"]}
       for v in ("12.0", "12.1", "12.4", "12.6")},
    "12.8": {"targets": [*_CUDA12_BASE, "10.0", "10.1", "12.0"],
             "sources": [FEATURES, "https://docs.nvidia.com/cuda/blackwell-compatibility-guide/ (\"Building "
                         "Applications Using CUDA Toolkit 12.8\")"],
             "notes": ["CUDA 12.8 added Blackwell sm_100, sm_101 (Thor) and sm_120; not sm_103 (B300) or sm_121 "
                       "(GB10, DGX Spark)"]},
    "12.9": {"targets": [*_CUDA12_BASE, "10.0", "10.1", "10.3", "12.0", "12.1"], "sources": [FEATURES_129],
             "notes": ["CUDA 12.9 \"adds compiler target support for SM architecture 10.3 (sm_103, sm_103f, "
                       "sm_103a) and 12.1 (sm_121)\""]},
    "13.0": {"targets": list(_CUDA13_BASE), "sources": [FEATURES],
             "notes": ["CUDA 13.0: \"SM101 has been renumbered as SM110\"; supports Turing through Grace Blackwell "
                       "(Maxwell, Pascal, Volta dropped)"]},
    "13.2": {"targets": list(_CUDA13_BASE), "sources": ["https://docs.nvidia.com/cuda/archive/13.2.1/cuda-features-archive/contents.html"],
             "notes": ["no compiler target added in 13.1 or 13.2 (sm_107, Rubin, arrives with CUDA 13.4: "
                       "https://www.mail-archive.com/gcc-patches@gcc.gnu.org/msg419655.html)"]},
}
# Jetson Thor: sm_101 up to CUDA 12.9, sm_110 from CUDA 13.0 (the driver reports the CUDA 13 name).
CC_ALIASES = {"10.1": "11.0"}


def _nvrtc_reach() -> dict[str, dict[str, Any]]:
    def key(cc: str) -> tuple[int, int]:
        major, minor = cc.split(".")
        return int(major), int(minor)

    return {cuda: {**row, "targets": sorted(row["targets"], key=key), "newest": max(row["targets"], key=key)}
            for cuda, row in NVRTC_REACH.items()}


# 2.15.0 (addendum of torch-matrix.md, measured 2026-11-29 from PyPI): only +cu132 was checked.
ADDENDUM_215 = {
    "released": "2026-10-28 (planned date; 2.15.0 seen on PyPI 2026-11-29)",
    "measured": {
        ("x86_64", "cu132"): ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"],
    },
    "pypi_default": {"x86_64": "cu132", "aarch64": None},
    "source": "reference/torch-matrix.md, Addendum (measured 2026-11-29 on PyPI): 2.15.0+cu132 "
    "arch flags sm_75 sm_80 sm_86 sm_90 sm_100 sm_120",
}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cc_code(cc: str) -> str:
    major, minor = cc.split(".")
    return f"{major}{minor}"


def _arch_entries(arch_list: list[str], ptx: object) -> tuple[list[str], list[str]]:
    """torch.cuda.get_arch_list()-style entries; PTX only where the build is known to ship it."""
    entries = [f"sm_{_cc_code(cc)}" for cc in arch_list]
    notes: list[str] = []
    if ptx is True:
        entries.append(f"compute_{_cc_code(arch_list[-1])}")
    elif isinstance(ptx, str):
        notes.append(f"PTX: {ptx} (not counted: release wheels strip +PTX)")
    return entries, notes


def _python_tags(raw: list[str]) -> list[dict[str, Any]]:
    tags: list[dict[str, Any]] = []
    for item in raw:
        experimental = "experimental" in item or "exp." in item
        head = item.split(" ")[0].split("(")[0]
        for tag in head.split("/"):
            if re.fullmatch(r"3\.\d+t?", tag):
                tags.append({"version": tag, "experimental": experimental})
    return tags


def _driver_requirements(cuda: str, release: tuple[int, int]) -> list[dict[str, str]]:
    major = Version(cuda).major
    reqs: list[dict[str, str]] = [
        {
            "min_driver": str(floor["min_driver"]),
            "why": f"CUDA {major}.x minor-version compatibility",
            "source": str(floor["source"]),
        }
        for floor in CUDA_FLOORS
        if floor["cuda_major"] == major
    ]
    if major >= 13 and release >= COMPRESSED_FROM:
        reqs.append(dict(COMPRESSED_FATBIN))
    return reqs


def _sass_range(spec: str) -> dict[str, Any]:
    spec = spec.strip()
    if spec.startswith("{"):
        return {"only": [s.strip() for s in spec.strip("{}").split(",")]}
    out: dict[str, Any] = {}
    main, _, exc = spec.partition(" except ")
    for part in main.split(","):
        if part.startswith(">="):
            out["min"] = part[2:]
        elif part.startswith("<"):
            out["max_excl"] = part[1:]
    if exc:
        out["except"] = [s.strip() for s in exc.split(",")]
    return out


def _variant(
    raw: dict[str, Any],
    platform: str,
    rel: str,
    min_glibc: str,
    ga: dict[str, str],
    *,
    verified: bool | None = None,
    extra_note: str | None = None,
) -> dict[str, Any]:
    entries, notes = _arch_entries(list(raw["arch_list"]), raw.get("ptx", False))
    if raw.get("note"):
        notes.append(str(raw["note"]))
    if extra_note:
        notes.append(extra_note)
    rel_t = Version(rel).release
    confidence = str(raw.get("confidence", "M"))
    out: dict[str, Any] = {
        "variant": raw["variant"],
        "cuda": raw["cuda"],
        "platform": platform,
        "arch_list": entries,
        "min_glibc": min_glibc,
        "driver_requirements": _driver_requirements(str(raw["cuda"]), (rel_t[0], rel_t[1])),
        "confidence": confidence,
        "verified": confidence != "L" if verified is None else verified,
        "notes": notes,
        "sources": list(raw.get("sources", [])),
    }
    extra = EXTRA_ARCH_BY_PATCH.get((rel, platform, str(raw["variant"])))
    if extra:
        out["extra_arch_by_patch"] = extra
    if any(e.startswith("compute_") for e in entries) or extra:
        out["ptx_jit_min_driver"] = ga.get(str(raw["cuda"]))
    patches = VARIANT_PATCHES.get((rel, str(raw["variant"])))
    if patches:
        out["patches"] = patches
    return out


def build(reference: dict[str, Any], ref_path: Path | None = None) -> dict[str, Any]:
    """The data file as a dict, from the parsed reference JSON."""
    ga = {row["cuda"]: row["GA"] for row in reference["cuda_driver"]["toolkit_min_driver_linux_x86_64"] if "GA" in row}
    releases: list[dict[str, Any]] = []
    by_version = {r["version"]: r for r in reference["pytorch_releases"]}
    for raw in reference["pytorch_releases"]:
        rel = str(raw["version"])
        if raw.get("status") == "RFC":
            releases.append(_release_215(raw, by_version, ga))
            continue
        glibc_x86 = str(raw.get("min_glibc_x86_64", "2.28"))
        variants = [_variant(v, "x86_64", rel, glibc_x86, ga) for v in raw.get("linux_x86_64", [])]
        # aarch64 CUDA wheels start with 2.7 and are manylinux_2_28 (inferred: the 2.6 switch).
        variants += [_variant(v, "aarch64", rel, "2.28", ga) for v in raw.get("linux_aarch64", [])]
        pypi = str(raw.get("pypi_default_linux_x86_64", "")).split(" ")[0] or None
        aarch64_pypi = "cpu" if "pypi_aarch64" in raw or Version(rel) <= Version("2.10") else None
        notes = [str(raw[k]) for k in ("aarch64_note", "glibc_note", "release_note_conflict") if k in raw]
        notes += CHECKED.get(rel, [])
        python = _python_tags(raw["python"])
        sources = list(raw.get("sources", []))
        for (prel, tag), extra in PYTHON_BY_PATCH.items():
            if prel == rel and all(t["version"] != tag for t in python):
                like = next((t for r in reversed(reference["pytorch_releases"]) for t in _python_tags(r.get("python", []))
                             if t["version"] == tag), {"experimental": False})
                python.append({"version": tag, "experimental": like["experimental"], "patches": extra["patches"]})
                notes.append(f"Python {tag} wheels only in {', '.join(extra['patches'])}")
                sources += extra["sources"]
        releases.append(
            {
                "version": rel,
                "released": raw["released"],
                "patches": PATCHES[rel],
                "torchvision": {p: TORCHVISION[p] for p in PATCHES[rel] if p in TORCHVISION},
                "torchvision_verified": rel not in TORCHVISION_UNVERIFIED,
                "python": python,
                "pypi_default": {"x86_64": pypi, "aarch64": aarch64_pypi},
                "variants": variants,
                "notes": notes,
                "sources": sources,
            }
        )
    sass = {
        code: _sass_range(spec)
        for code, spec in reference["sass_ptx_compatibility"]["code_sm_to_runnable_device_cc"].items()
    }
    uv = reference["uv_torch_backend"]
    ltt = reference["light_the_torch"]
    ltt_table: dict[str, str] = {}
    for key, drv in ltt["linux_min_driver"].items():
        lo, _, hi = key.partition("-")
        lo_t, hi_t = (Version(v).release for v in (lo, hi or lo))
        major = lo_t[0]
        for minor in range(lo_t[1], hi_t[1] + 1):
            ltt_table[f"cu{major}{minor}"] = drv
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "data_version": DATA_VERSION,
        "generated_from": {
            "reference": "reference/torch-matrix.json",
            "as_of": str(reference["meta"]["as_of"]),
            "sha256": _sha256(ref_path) if ref_path else "",
            "addendum": "reference/torch-matrix.md Addendum (2026-11-29): torch 2.15.0 on PyPI",
        },
        "sources": [
            "reference/torch-matrix.json + torch-matrix.md (research notes with per-row sources)",
            MINOR_COMPAT_URL,
            "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html",
            str(reference["sass_ptx_compatibility"]["source"]),
        ],
        "index_url_template": INDEX_URL_TEMPLATE,
        "cuda_minor_compat_floors": CUDA_FLOORS,
        "cuda_toolkit_ga_driver": ga,
        "sass_compat": sass,
        "gpu_driver_constraints": GPU_DRIVER_CONSTRAINTS,
        "uv_torch_backend": {
            "name": "uv pip install --torch-backend=auto",
            "version": f"uv @{str(uv['commit'])[:8]} ({uv['date']})",
            "min_driver": dict(uv["linux_min_driver"]),
            "notes": [str(uv["selection"]), "detects only the driver version (first nvidia-smi line)"],
            "sources": [f"https://github.com/{uv['repo']}/blob/{uv['commit']}/{f}" for f in uv["files"][:2]],
        },
        "light_the_torch": {
            "name": "light-the-torch (ltt install)",
            "version": f"{ltt['version']} @{str(ltt['commit'])[:8]} ({ltt['date']})",
            "min_driver": ltt_table,
            "notes": [str(ltt["sort_key"]), str(ltt["detection"])],
            "sources": [f"https://github.com/{ltt['repo']}/blob/{ltt['commit']}/light_the_torch/_cb.py"],
        },
        "releases": releases,
        "nvrtc_reach": _nvrtc_reach(),
        "cc_aliases": CC_ALIASES,
    }
    parse_data(json.dumps(data))  # validate against the schema before anyone writes it
    return data


def _release_215(raw: dict[str, Any], by_version: dict[str, Any], ga: dict[str, str]) -> dict[str, Any]:
    """2.15: measured +cu132 from the addendum; other planned builds copied from 2.14, unverified."""
    rel = str(raw["version"])
    prev = by_version["2.14"]
    measured: dict[tuple[str, str], list[str]] = ADDENDUM_215["measured"]  # type: ignore[assignment]
    source = str(ADDENDUM_215["source"])
    variants: list[dict[str, Any]] = []
    for platform, key in (("x86_64", "linux_x86_64"), ("aarch64", "linux_aarch64")):
        planned = raw.get("linux_x86_64_planned", []) if platform == "x86_64" else ["cu130", "cu132"]
        for name in planned:
            base = next((v for v in prev[key] if v["variant"] == name), None)
            if base is None:
                continue
            if (platform, name) in measured:
                row = dict(
                    base, arch_list=measured[(platform, name)], ptx=False, confidence="H", sources=[source], note=None
                )
                variants.append(_variant(row, platform, rel, "2.28", ga, verified=True))
            else:
                row = dict(base, confidence="L", sources=list(raw.get("sources", [])), note=None)
                variants.append(
                    _variant(
                        row,
                        platform,
                        rel,
                        "2.28",
                        ga,
                        verified=False,
                        extra_note=f"unverified: planned {rel} build, arch list assumed equal to 2.14 "
                        f"{name} ({platform})",
                    )
                )
    pypi: dict[str, str | None] = ADDENDUM_215["pypi_default"]  # type: ignore[assignment]
    return {
        "version": rel,
        "released": str(ADDENDUM_215["released"]),
        "patches": PATCHES[rel],
        "torchvision": {p: TORCHVISION[p] for p in PATCHES[rel] if p in TORCHVISION},
        "torchvision_verified": rel not in TORCHVISION_UNVERIFIED,
        "python": _python_tags(prev["python"]),
        "python_verified": False,
        "pypi_default": pypi,
        "variants": variants,
        "notes": [str(raw.get("note", "")), "Python list assumed equal to 2.14 (unverified)"],
        "sources": [*raw.get("sources", []), source],
    }


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("reference", type=Path, help="path to reference/torch-matrix.json")
    parser.add_argument("-o", "--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="exit 1 if --out is not up to date")
    args = parser.parse_args(argv)
    ref_path: Path = args.reference
    text = render(build(json.loads(ref_path.read_text(encoding="utf-8")), ref_path))
    out: Path = args.out
    if args.check:
        current = out.read_text(encoding="utf-8") if out.exists() else ""
        if current != text:
            print(f"{out} is out of date; regenerate with build_data", file=sys.stderr)
            return 1
        print(f"{out} is up to date")
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
