"""One test group per resolver rule (torch-matrix.md §0), through the pure API."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from provisioner.resolver import Resolution, ResolveError, ResolveRequest, load_data, resolve
from provisioner.resolver.compat import gpu_coverage, gpu_driver_findings, sass_runs_on
from provisioner.resolver.data import Variant
from provisioner.resolver.others import light_the_torch, pypi_default, uv_auto
from provisioner.resolver.versions import (
    CC,
    driver_at_least,
    normalize_python,
    parse_arch_entry,
    parse_cc,
    parse_driver,
)

DATA = load_data()


def ok(**kw: object) -> Resolution:
    result = resolve(ResolveRequest.model_validate(kw))
    assert isinstance(result, Resolution), result
    return result


def err(**kw: object) -> ResolveError:
    result = resolve(ResolveRequest.model_validate(kw))
    assert isinstance(result, ResolveError), result
    return result


def build(release: str, variant: str, platform: str = "x86_64") -> Variant:
    rel = next(r for r in DATA.releases if r.version == release)
    return next(v for v in rel.variants if v.variant == variant and v.platform == platform)


# --- parsers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cc"), [("12.0", CC(12, 0)), ("8.6", CC(8, 6)), (" 9.0 ", CC(9, 0)), ("sm_120", CC(12, 0))]
)
def test_parse_cc(text: str, cc: CC) -> None:
    assert parse_cc(text) == cc


@pytest.mark.parametrize("text", ["abc", "12", "", "12.0.1", "sm_90a", "1.2.3"])
def test_parse_cc_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="compute capability"):
        parse_cc(text)


def test_cc_orders_numerically_not_as_text() -> None:
    assert CC(9, 0) < CC(10, 0) < CC(12, 0)
    assert sorted([parse_cc("12.0"), parse_cc("9.0"), parse_cc("10.3")]) == [CC(9, 0), CC(10, 3), CC(12, 0)]


def test_parse_driver_and_floors() -> None:
    assert parse_driver("595.71.05") == (595, 71, 5)
    assert parse_driver("470.86") == (470, 86)
    assert driver_at_least(parse_driver("580.95.05"), "580")
    assert driver_at_least(parse_driver("525.60.13"), "525.60.13")
    assert not driver_at_least(parse_driver("525.60.12"), "525.60.13")
    assert not driver_at_least(parse_driver("450.80"), "450.80.02")
    assert parse_driver("570.148.08") == (570, 148, 8)  # leading zeros: packaging.version reads them as numbers
    assert driver_at_least((570, 26), "570.26.0") and not driver_at_least((570, 26), "570.26.1")  # zero padding
    for bad in ("59x", "abc", "", "595.71.05.1", "-1"):
        with pytest.raises(ValueError, match="driver"):
            parse_driver(bad)


def test_normalize_python() -> None:
    assert normalize_python("3.12") == "3.12"
    assert normalize_python("3.12.4") == "3.12"
    assert normalize_python("cp313") == "3.13"
    assert normalize_python("3.13t") == "3.13t"
    with pytest.raises(ValueError):
        normalize_python("python")


def test_request_validation_rejects_bad_input() -> None:
    with pytest.raises(ValidationError, match="compute capability"):
        ResolveRequest(cc=["abc"], driver="595.71.05", python="3.12")
    with pytest.raises(ValidationError, match="driver"):
        ResolveRequest(cc=["12.0"], driver="latest", python="3.12")
    with pytest.raises(ValidationError, match="PEP 440"):
        ResolveRequest(cc=["12.0"], driver="595.71.05", python="3.12", torch="==banana")
    with pytest.raises(ValidationError):
        ResolveRequest(cc=[], driver="595.71.05", python="3.12")
    bare = ResolveRequest(cc=["12.0"], driver="595.71.05", python="3.12", torch="2.11.0")
    assert bare.torch == "==2.11.0"


# --- rule 1: SASS same major, minor >=, exceptions; arch-specific exact --------------------------


@pytest.mark.parametrize(
    ("entry", "device", "runs"),
    [
        ("sm_86", "8.9", True),  # Ada runs sm_86 (no sm_89 in wheels)
        ("sm_80", "8.6", True),
        ("sm_120", "12.1", True),  # GB10 runs sm_120
        ("sm_100", "10.3", True),  # B300 runs sm_100
        ("sm_90", "10.0", False),  # never across majors
        ("sm_100", "12.0", False),
        ("sm_90", "8.9", False),  # newer than the device
        ("sm_80", "8.7", False),  # Jetson Orin excluded (DEVICE_REQUIREMENT)
        ("sm_100", "10.1", False),  # 10.1 (old Thor numbering) excluded
        ("sm_60", "6.1", True),
        ("sm_37", "3.7", True),  # not in the table: general rule
        ("sm_90a", "9.0", True),  # arch-specific: exact CC only
        ("sm_100a", "10.3", False),  # FBGEMM sm_100a fails on B300
    ],
)
def test_sass_compatibility(entry: str, device: str, runs: bool) -> None:
    assert sass_runs_on(parse_arch_entry(entry), parse_cc(device), DATA.sass_compat) is runs


def test_ptx_only_where_shipped_and_only_forward() -> None:
    drv = parse_driver("595.71.05")
    cu128_27 = build("2.7", "cu128")  # ships compute_120
    # a hypothetical CC 13.0 GPU has no SASS in it but can JIT compute_120
    cov = gpu_coverage(cu128_27, "2.7.1", CC(13, 0), drv, DATA.sass_compat)
    assert cov.ok and cov.jit and cov.via == "compute_120 (PTX JIT)"
    # PTX never runs backwards: sm_61 is not helped by compute_120
    assert not gpu_coverage(cu128_27, "2.7.1", CC(6, 1), drv, DATA.sass_compat).ok
    # release builds without +PTX give nothing to a newer GPU
    assert not gpu_coverage(build("2.8", "cu128"), "2.8.0", CC(13, 0), drv, DATA.sass_compat).ok
    # JIT needs a driver at least as new as the PTX toolchain (CUDA 12.8 -> 570.26)
    old = gpu_coverage(cu128_27, "2.7.1", CC(13, 0), parse_driver("565.57.01"), DATA.sass_compat)
    assert not old.ok and old.jit_needs_driver == "570.26"


def test_ptx_of_a_single_patch() -> None:
    cu130 = build("2.13", "cu130")
    drv = parse_driver("595.71.05")
    assert gpu_coverage(cu130, "2.13.0", CC(13, 0), drv, DATA.sass_compat).jit
    assert not gpu_coverage(cu130, "2.13.1", CC(13, 0), drv, DATA.sass_compat).ok


def test_pascal_never_gets_a_cu128_build_even_with_ptx() -> None:
    r = ok(cc=["6.1"], driver="570.133.07", python="3.12", torch="==2.7.1", prefer="newest-cuda")
    assert r.variant == "cu126"
    why = next(x.reason for x in r.rejected if x.variant == "cu128" and x.torch == "2.7.1")
    assert "no kernels for CC 6.1" in why


# --- rule 3: CUDA minor-version compatibility floors ----------------------------------------------


def test_cuda_major_floors() -> None:
    assert ok(cc=["8.6"], driver="470.86", python="3.10").variant == "cu118"  # 11.x only
    at_floor = ok(cc=["9.0"], driver="525.60.13", python="3.12")
    assert at_floor.variant.startswith("cu12") and at_floor.torch == "2.14.0"
    assert ok(cc=["9.0"], driver="525.60.12", python="3.12").variant == "cu118"
    r = ok(cc=["9.0"], driver="579.99", python="3.12", prefer="newest-cuda")
    assert r.variant == "cu126" and r.torch == "2.14.0"  # 2.14 has no cu12x beyond cu126
    assert ok(cc=["9.0"], driver="580.65.06", python="3.12", prefer="newest-cuda").variant.startswith("cu13")


def test_compressed_fatbin_floor_is_applied_but_subsumed_by_the_cuda13_floor() -> None:
    r = ok(cc=["9.0"], driver="580.95.05", python="3.12", torch="==2.14.0", prefer="newest-cuda")
    assert r.variant == "cu132"
    assert any("≥ 580" in x for x in r.reasons)


# --- rule 4: GPU-imposed driver floors and ceilings -------------------------------------------------


def test_blackwell_needs_r570() -> None:
    e = err(cc=["12.0"], driver="565.57.01", python="3.12")
    assert e.code == "driver_too_old"
    assert "upgrade the driver to ≥ 570" in e.fix
    findings = gpu_driver_findings([CC(12, 0)], parse_driver("550.54.15"), DATA.gpu_driver_constraints)
    assert [f.constraint.id for f in findings] == ["blackwell-needs-r570"]


def test_pascal_on_r595_is_an_error_naming_r580() -> None:
    e = err(cc=["6.1"], driver="595.71.05", python="3.12")
    assert e.code == "driver_too_new"
    assert "580" in e.fix
    assert ok(cc=["6.1"], driver="580.95.05", python="3.12").variant == "cu126"


def test_volta_on_r595_is_an_error_naming_r580() -> None:
    """One branch end-of-life rule (provisioner.driver_eol, also driver.userspace's): R580 is Volta's last."""
    e = err(cc=["7.0"], driver="595.71.05", python="3.12")
    assert e.code == "driver_too_new"
    assert "R580" in e.fix and "Volta" in e.message
    assert ok(cc=["7.0"], driver="580.95.05", python="3.12").variant == "cu126"


# --- rule 5/6: platform, Python, glibc ---------------------------------------------------------------


def test_aarch64_cuda_wheels_start_with_27() -> None:
    e = err(cc=["9.0"], driver="580.95.05", python="3.12", arch="aarch64", torch="==2.6.0")
    assert e.code == "pin_unsatisfiable"
    assert "x86_64-only" in e.message
    assert ok(cc=["9.0"], driver="570.133.20", python="3.12", arch="aarch64", torch="==2.7.1").variant == "cu128"
    # 2.8 on aarch64 is cu129 only
    assert ok(cc=["12.1"], driver="580.95.05", python="3.12", arch="aarch64", torch="==2.8.0").variant == "cu129"


def test_no_sm86_on_aarch64_but_sm80_runs_ampere_and_ada() -> None:
    r = ok(cc=["8.9"], driver="580.95.05", python="3.12", arch="aarch64", torch="==2.14.0")
    assert r.variant == "cu126"
    assert any("sm_80" in x for x in r.reasons)


def test_python_window() -> None:
    assert ok(cc=["9.0"], driver="535.104.05", python="3.8").torch == "2.4.1"  # 3.8 last in 2.4
    assert ok(cc=["9.0"], driver="535.104.05", python="3.9").torch == "2.8.0"  # 3.9 last in 2.8
    e = err(cc=["12.0"], driver="580.95.05", python="3.8")
    assert e.code == "python_unsupported"
    assert "3.10" in e.fix


def test_experimental_python_is_flagged() -> None:
    r = ok(cc=["9.0"], driver="535.104.05", python="3.15")
    assert r.torch == "2.14.0"
    assert any("experimental" in w for w in r.warnings)


def test_glibc_217_is_capped_at_25() -> None:
    r = ok(cc=["8.0"], driver="535.104.05", python="3.10", glibc="2.17")
    assert r.torch == "2.5.1"
    assert any("glibc 2.17" in x for x in r.reasons)
    e = err(cc=["12.0"], driver="580.95.05", python="3.12", glibc="2.17")
    assert e.code == "glibc_too_old" and "2.28" in e.fix


# --- mixed GPUs ---------------------------------------------------------------------------------------


def test_mixed_gpus_take_the_intersection() -> None:
    # sm_70 and sm_120 live together only in cu128/cu129 of 2.8-2.10
    r = ok(cc=["7.0", "12.0"], driver="570.133.07", python="3.12")
    assert (r.variant, r.torch) == ("cu128", "2.10.0")
    assert ok(cc=["9.0", "12.0", "8.9"], driver="580.95.05", python="3.12").variant in ("cu130", "cu132")


def test_mixed_gpus_no_build_covers_all_means_split() -> None:
    e = err(cc=["12.0", "6.1"], driver="580.95.05", python="3.12")
    assert e.code == "mixed_gpus"
    assert "split GPUs into separate venvs" in e.fix
    assert "CC 6.1 → 2.14.0+cu126" in e.fix


# --- policy -------------------------------------------------------------------------------------------


def test_seed_host() -> None:
    r = ok(cc=["12.0"] * 8, driver="595.71.05", python="3.12", torch="==2.11.0")
    assert (r.variant, r.torch, r.torchvision) == ("cu128", "2.11.0", "0.26.0")
    assert r.index_url == "https://download.pytorch.org/whl/cu128"
    assert r.verified
    assert any("also compatible: cu129, cu130" in x for x in r.reasons)
    assert {(x.variant, x.torch) for x in r.rejected} >= {("cu126", "2.11.0"), ("cu130", "2.11.0")}


def test_prefer_newest_cuda_flips_only_the_variant() -> None:
    r = ok(cc=["12.0"] * 8, driver="595.71.05", python="3.12", torch="==2.11.0", prefer="newest-cuda")
    assert (r.variant, r.torch) == ("cu130", "2.11.0")


def test_newest_torch_beats_newest_cuda() -> None:
    # uv would take cu129 (2.13.0); 2.14.0 exists on cu126 and runs here
    r = ok(cc=["9.0"], driver="535.104.05", python="3.12")
    assert (r.variant, r.torch) == ("cu126", "2.14.0")
    assert any(line.startswith("not torch 2.15") for line in r.reasons)


def test_local_version_pin_selects_the_variant() -> None:
    r = ok(cc=["12.0"], driver="595.71.05", python="3.12", torch="==2.11.0+cu130")
    assert (r.variant, r.torch) == ("cu130", "2.11.0")


def test_pin_that_excludes_the_gpu_names_the_first_release() -> None:
    e = err(cc=["12.0"], driver="595.71.05", python="3.12", torch="<2.7")
    assert e.code == "pin_unsatisfiable"
    assert "CC 12.0 first appears in 2.7" in e.message
    assert "relax the torch requirement '<2.7'" in e.fix


def test_unknown_release_and_unlisted_patch() -> None:
    assert err(cc=["8.6"], driver="570.133.07", python="3.12", torch="==1.13.1").code == "unknown_torch_version"
    r = ok(cc=["8.6"], driver="570.133.07", python="3.12", torch="==2.10.1")
    assert r.torch == "2.10.1" and not r.verified
    assert any("UNVERIFIED" in x for x in r.reasons)


def test_unverified_choice_says_so() -> None:
    r = ok(cc=["12.1"], driver="580.95.05", python="3.12", arch="aarch64")
    assert r.torch == "2.15.0" and not r.verified
    assert any(x.startswith("UNVERIFIED") for x in r.reasons)
    pinned = ok(cc=["12.1"], driver="580.95.05", python="3.12", arch="aarch64", torch="<2.15")
    assert pinned.verified and pinned.torch == "2.14.0"


def test_verified_build_preferred_within_a_release() -> None:
    r = ok(cc=["8.6"], driver="580.95.05", python="3.12")
    assert (r.variant, r.torch, r.verified) == ("cu132", "2.15.0", True)  # cu130 2.15 is unverified


def test_unsupported_gpu() -> None:
    e = err(cc=["8.7"], driver="595.71.05", python="3.12", arch="aarch64")
    assert e.code == "gpu_unsupported"
    assert "TORCH_CUDA_ARCH_LIST=8.7" in e.fix


# --- other tools (torch-matrix §3-4) -------------------------------------------------------------------


def test_uv_and_ltt_on_the_seed_host() -> None:
    req = ResolveRequest(cc=["12.0"] * 8, driver="595.71.05", python="3.12", torch="==2.11.0")
    assert uv_auto(DATA, req)[:2] == ("cu130", "2.11.0")
    assert light_the_torch(DATA, req)[:2] == ("cu126", "2.11.0")
    r = ok(**req.model_dump())
    by_tool = {o.tool.split(" ")[0]: o for o in r.others}
    assert by_tool["light-the-torch"].works is False
    assert by_tool["uv"].works is True


def test_uv_maximises_cuda_and_ltt_compares_versions_as_text() -> None:
    req = ResolveRequest(cc=["9.0"], driver="535.104.05", python="3.12")
    assert uv_auto(DATA, req)[:2] == ("cu129", "2.13.0")
    assert light_the_torch(DATA, req)[:2] == ("cu126", "2.9.1")  # "2.9.1" > "2.14.0" as strings


def test_uv_gives_pascal_a_build_without_its_kernels() -> None:
    r = ok(cc=["6.1"], driver="580.95.05", python="3.12")
    uv = next(o for o in r.others if o.tool.startswith("uv"))
    assert (uv.variant, uv.torch, uv.works) == ("cu132", "2.15.0", False)
    assert "CC 6.1" in uv.note


def test_pypi_default_on_aarch64_was_cpu() -> None:
    req = ResolveRequest(cc=["9.0"], driver="570.133.20", python="3.12", arch="aarch64", torch="<2.11")
    assert pypi_default(DATA, req)[:2] == ("cpu", "2.10.0")


def test_engine_package_does_not_import_the_ui() -> None:
    code = "import sys, provisioner.resolver, provisioner.cli.resolve; print('textual' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_dict_api_used_by_the_torch_resolve_step() -> None:
    from provisioner.resolver import resolve_dict

    out = resolve_dict(ccs=["12.0"] * 8, driver="595.71.05", python="3.12", torch="==2.11.0")
    assert (out["variant"], out["torch"], out["torchvision"]) == ("cu128", "2.11.0", "0.26.0")
    # most relevant rejections first: the other variants of the pinned release
    assert [(r["variant"], r["torch"]) for r in out["rejected"][:3]] == [
        ("cu126", "2.11.0"),
        ("cu129", "2.11.0"),
        ("cu130", "2.11.0"),
    ]
    split = resolve_dict(ccs=["12.0", "6.1"], driver="580.95.05", python="3.12")
    assert split["error"]["code"] == "mixed_gpus"
    bad = resolve_dict(ccs=["abc"], driver="595.71.05", python="3.12")
    assert bad["error"]["code"] == "invalid_input"
