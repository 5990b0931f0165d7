"""The packaged wheel data file against reference/torch-matrix.json (its source) and its own schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from provisioner.resolver import build_data
from provisioner.resolver.data import DATA_FILE, SCHEMA_VERSION, WheelData, load_data, parse_data
from tests.support.require import require
from tests.support.shared import shared_path

REFERENCE = shared_path("reference/torch-matrix.json")
PACKAGED = Path(build_data.__file__).parent / "data" / DATA_FILE


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    require(REFERENCE.exists(), f"reference data {REFERENCE} is not present on this machine")
    data: dict[str, Any] = json.loads(REFERENCE.read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="module")
def data() -> WheelData:
    return load_data()


def _sm(arch: list[str]) -> list[str]:
    return [a for a in arch if a.startswith("sm_")]


def test_header_is_versioned_and_sourced(data: WheelData) -> None:
    assert data.schema_version == SCHEMA_VERSION
    assert data.data_version and data.data_version[0].isdigit()
    assert any("torch-matrix" in s for s in data.sources)
    assert data.index_url("cu128") == "https://download.pytorch.org/whl/cu128"
    assert [r.version for r in data.releases] == [f"2.{n}" for n in range(16)]


def test_every_reference_build_is_in_the_data_with_its_arch_list(reference: dict[str, Any], data: WheelData) -> None:
    by_version = {r.version: r for r in data.releases}
    checked = 0
    for raw in reference["pytorch_releases"]:
        if raw.get("status") == "RFC":
            continue
        rel = by_version[raw["version"]]
        for key, platform in (("linux_x86_64", "x86_64"), ("linux_aarch64", "aarch64")):
            mine = {v.variant: v for v in rel.variants if v.platform == platform}
            assert sorted(mine) == sorted(v["variant"] for v in raw.get(key, [])), (raw["version"], platform)
            for v in raw.get(key, []):
                got = mine[v["variant"]]
                want = [f"sm_{cc.replace('.', '')}" for cc in v["arch_list"]]
                assert _sm(got.arch_list) == want, (raw["version"], platform, v["variant"])
                ptx = [a for a in got.arch_list if a.startswith("compute_")]
                assert bool(ptx) == (v.get("ptx") is True), (raw["version"], v["variant"], v.get("ptx"))
                assert got.cuda == v["cuda"]
                assert got.verified == (v.get("confidence") != "L")
                checked += 1
        assert rel.pypi_default["x86_64"] == raw["pypi_default_linux_x86_64"].split(" ")[0]
        want_py = [tag for p in raw["python"] for tag in p.split(" ")[0].split("/")]
        assert [t.version for t in rel.python if t.patches is None] == want_py
    assert checked >= 50


def test_glibc_floors_follow_the_manylinux_switch(reference: dict[str, Any], data: WheelData) -> None:
    floors = {r["version"]: r["min_glibc_x86_64"] for r in reference["pytorch_releases"] if "min_glibc_x86_64" in r}
    for rel in data.releases:
        for v in rel.variants:
            if v.platform == "x86_64" and rel.version in floors:
                assert v.min_glibc == floors[rel.version]
    two_five = next(r for r in data.releases if r.version == "2.5")
    assert {v.min_glibc for v in two_five.variants} == {"2.17"}


def test_driver_tables_match_the_reference(reference: dict[str, Any], data: WheelData) -> None:
    floors = {f.cuda_major: f.min_driver for f in data.cuda_minor_compat_floors}
    assert floors == {11: "450.80.02", 12: "525.60.13", 13: "580"}
    ga = {row["cuda"]: row["GA"] for row in reference["cuda_driver"]["toolkit_min_driver_linux_x86_64"] if "GA" in row}
    assert data.cuda_toolkit_ga_driver == ga
    assert data.uv_torch_backend.min_driver == reference["uv_torch_backend"]["linux_min_driver"]
    assert data.light_the_torch.min_driver["cu126"] == "525.60.13"
    assert "cu128" not in data.light_the_torch.min_driver  # ltt stops at 12.6


def test_sass_table_is_pytorchs_device_requirement(reference: dict[str, Any], data: WheelData) -> None:
    raw = reference["sass_ptx_compatibility"]["code_sm_to_runnable_device_cc"]
    assert set(data.sass_compat) == set(raw)
    assert data.sass_compat["100"].except_ == ["10.1"]
    assert data.sass_compat["101"].only == ["10.1", "11.0"]
    assert data.sass_compat["120"].min == "12.0" and data.sass_compat["120"].max_excl == "13.0"


def test_per_build_exceptions_are_recorded(data: WheelData) -> None:
    rel = {r.version: r for r in data.releases}
    cu130 = next(v for v in rel["2.13"].variants if v.variant == "cu130" and v.platform == "x86_64")
    assert cu130.extra_arch_by_patch == {"2.13.0": ["compute_120"]}  # PTX shipped by mistake (#188914)
    assert cu130.ptx_jit_min_driver == "580.65.06"
    assert any(r.min_driver == "550.54.14" for r in cu130.driver_requirements)  # compressed fatbins
    cu129 = next(v for v in rel["2.12"].variants if v.variant == "cu129" and v.platform == "x86_64")
    assert cu129.patches == ["2.12.1"]
    cu128_27 = next(v for v in rel["2.7"].variants if v.variant == "cu128" and v.platform == "x86_64")
    assert cu128_27.arch_list[-1] == "compute_120" and cu128_27.ptx_jit_min_driver == "570.26"


def test_torch_215_addendum_marks_unmeasured_builds_unverified(data: WheelData) -> None:
    rel = next(r for r in data.releases if r.version == "2.15")
    flags = {(v.platform, v.variant): v.verified for v in rel.variants}
    assert flags == {
        ("x86_64", "cu130"): False,
        ("x86_64", "cu132"): True,
        ("aarch64", "cu130"): False,
        ("aarch64", "cu132"): False,
    }
    measured = next(v for v in rel.variants if v.platform == "x86_64" and v.variant == "cu132")
    assert measured.arch_list == ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    assert rel.pypi_default["x86_64"] == "cu132"
    assert "cu126" not in {v.variant for v in rel.variants}  # the 2.15 plan drops cu126
    assert rel.python_verified is False


def test_torchvision_companions_follow_the_release_line(data: WheelData) -> None:
    for rel in data.releases:
        minor = int(rel.version.split(".")[1])
        for patch, tv in rel.torchvision.items():
            assert patch in rel.patches
            assert tv.startswith(f"0.{minor + 15}."), (patch, tv)


def test_packaged_file_is_what_the_generator_produces(reference: dict[str, Any]) -> None:
    text = build_data.render(build_data.build(reference, REFERENCE))
    assert text == PACKAGED.read_text(encoding="utf-8"), "regenerate: python -m provisioner.resolver.build_data"


def test_generator_check_mode_flags_a_stale_file(reference: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "torch-releases.json"
    assert build_data.main([str(REFERENCE), "-o", str(out)]) == 0
    assert build_data.main([str(REFERENCE), "-o", str(out), "--check"]) == 0
    out.write_text(out.read_text(encoding="utf-8").replace('"2.14.0"', '"2.14.9"'), encoding="utf-8")
    assert build_data.main([str(REFERENCE), "-o", str(out), "--check"]) == 1


def test_parse_data_refuses_another_schema_version() -> None:
    raw = json.loads(PACKAGED.read_text(encoding="utf-8"))
    raw["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(ValueError, match="schema_version"):
        parse_data(json.dumps(raw))
