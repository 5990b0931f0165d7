"""Each toolkit's reach: a build whose CUDA (and so its bundled nvrtc) predates the GPU is partly broken.

The reach table is checked against the CUDA release notes it cites; the resolver never hands a GPU a build
whose nvrtc cannot target it when a newer variant fits, and says what fails when nothing else does.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from provisioner.cli import main
from provisioner.resolver import Resolution, ResolveError, ResolveRequest, resolve
from provisioner.resolver.compat import Coverage
from provisioner.resolver.data import load_data
from provisioner.resolver.solver import nvrtc_limits
from provisioner.resolver.versions import CC, cc_from_text

DATA = load_data()


def reach(cuda: str) -> set[CC]:
    return {cc_from_text(c) for c in DATA.nvrtc_reach[cuda].targets}


def ok(request: ResolveRequest) -> Resolution:
    result = resolve(request)
    assert isinstance(result, Resolution), result
    return result


# --- the data, against the toolkits' own release notes --------------------------------------------


def test_every_cuda_from_11_8_of_every_build_has_a_reach_with_sources() -> None:
    cudas = {v.cuda for r in DATA.releases for v in r.variants}
    checked = {c for c in cudas if tuple(map(int, c.split("."))) >= (11, 8)}
    assert checked <= set(DATA.nvrtc_reach)
    for cuda, row in DATA.nvrtc_reach.items():
        assert row.sources and all(s.startswith("https://") for s in row.sources), cuda
        assert cc_from_text(row.newest) == max(reach(cuda)), cuda


def test_reach_follows_the_cuda_release_notes() -> None:
    # CUDA 11.8 added Ada (sm_89) and Hopper (sm_90); nothing newer until 12.8
    assert {CC(8, 9), CC(9, 0)} <= reach("11.8") and max(reach("12.6")) == CC(9, 0)
    # CUDA 12.8: Blackwell sm_100, sm_101, sm_120 -- but not sm_103 or sm_121
    assert {CC(10, 0), CC(10, 1), CC(12, 0)} <= reach("12.8")
    assert CC(10, 3) not in reach("12.8") and CC(12, 1) not in reach("12.8")
    # CUDA 12.9 "adds compiler target support for SM architecture 10.3 ... and 12.1 (sm_121)"
    assert reach("12.9") - reach("12.8") == {CC(10, 3), CC(12, 1)}
    # CUDA 13.0: "SM101 has been renumbered as SM110"; Turing through Grace Blackwell
    assert CC(11, 0) in reach("13.0") and CC(10, 1) not in reach("13.0")
    assert min(reach("13.0")) == CC(7, 5)
    assert DATA.cc_aliases == {"10.1": "11.0"}


# --- the rule ------------------------------------------------------------------------------------------


def variant(release: str, name: str, platform: str = "x86_64") -> object:
    rel = next(r for r in DATA.releases if r.version == release)
    return next(v for v in rel.variants if v.variant == name and v.platform == platform)


def test_nvrtc_limit_only_for_a_gpu_newer_than_the_toolkit() -> None:
    cu128 = variant("2.10", "cu128")
    runs = Coverage(True, "sm_120")
    (limit,) = nvrtc_limits(cu128, {CC(12, 1): runs}, DATA)  # type: ignore[arg-type]
    assert limit.kind == "nvrtc" and "cannot target sm_121" in limit.message
    assert nvrtc_limits(cu128, {CC(12, 0): runs}, DATA) == []  # type: ignore[arg-type]
    # a GPU the build does not run on is the coverage check's business, not this one's
    assert nvrtc_limits(cu128, {CC(12, 1): Coverage(False, None)}, DATA) == []  # type: ignore[arg-type]
    # Thor under either name is known to 12.8 (sm_101) and 13.0 (sm_110)
    assert nvrtc_limits(cu128, {CC(11, 0): runs}, DATA) == []  # type: ignore[arg-type]
    assert nvrtc_limits(variant("2.10", "cu130"), {CC(10, 1): runs}, DATA) == []  # type: ignore[arg-type]


# --- the resolver ----------------------------------------------------------------------------------------


def test_dgx_spark_gets_cu130_not_cu128_and_the_rejection_names_the_nvrtc_limit() -> None:
    # GB10 (CC 12.1, aarch64): NVIDIA/Isaac-GR00T#474 -- cu128 fails every JIT kernel, cu130 works
    res = ok(ResolveRequest(cc=["12.1"], driver="580.95.05", python="3.12", arch="aarch64", torch="==2.11.0"))
    assert (res.variant, res.torch) == ("cu130", "2.11.0")
    assert not res.warnings
    cu128 = next(r for r in res.rejected if r.variant == "cu128" and r.torch == "2.11.0")
    assert cu128.kinds == ["nvrtc"]
    assert "nvrtc of CUDA 12.8 cannot target sm_121" in cu128.reason
    assert "invalid value for --gpu-architecture" in cu128.reason and "NVIDIA/Isaac-GR00T#474" in cu128.reason


def test_b300_never_gets_cu128_when_cu129_fits() -> None:
    # CC 10.3 arrived with CUDA 12.9: the lowest-CUDA tie-break used to pick cu128 (sm_100 SASS runs)
    res = ok(ResolveRequest(cc=["10.3"], driver="590.44.01", python="3.12", torch="==2.10.0"))
    assert res.variant == "cu129"
    cu128 = next(r for r in res.rejected if r.variant == "cu128" and r.torch == "2.10.0")
    assert "nvrtc of CUDA 12.8 cannot target sm_103" in cu128.reason


@pytest.mark.parametrize("cc", ["10.3", "12.1"])
@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
@pytest.mark.parametrize("driver", ["575.57.08", "580.95.05", "595.71.05"])
@pytest.mark.parametrize("pin", [None, "==2.9.1", "==2.10.0", "==2.11.0", "==2.12.1"])
def test_a_gpu_newer_than_a_toolkit_never_gets_it_when_another_variant_fits(
    cc: str, arch: str, driver: str, pin: str | None
) -> None:
    result = resolve(ResolveRequest(cc=[cc], driver=driver, python="3.12", arch=arch, torch=pin))
    if isinstance(result, ResolveError):
        return
    knows = cc_from_text(cc) in reach(result.cuda)
    whole_alternative = [r for r in result.rejected if r.torch == result.torch and "compatible, not chosen" in r.reason]
    if knows:
        assert not any("partly broken" in w for w in result.warnings)
    else:
        # chosen only because nothing whole fits: said in a warning that names what fails
        assert not whole_alternative
        assert any(f"cannot target sm_{cc.replace('.', '')}" in w and "partly broken" in w for w in result.warnings)


def test_partly_broken_build_chosen_with_a_warning_when_nothing_else_fits() -> None:
    # GB10 on a 575 driver with torch 2.9.1: cu130 needs R580, cu126 has no Blackwell kernels
    res = ok(ResolveRequest(cc=["12.1"], driver="575.57.08", python="3.12", arch="aarch64", torch="==2.9.1"))
    assert res.variant == "cu128"
    (warning,) = [w for w in res.warnings if "partly broken" in w]
    assert "nvrtc of CUDA 12.8 cannot target sm_121" in warning
    assert "upgrade the driver to ≥ 580: then 2.9.1+cu130" in warning


def test_rtx_5090_keeps_cu128_its_toolkit_knows_sm_120() -> None:
    res = ok(ResolveRequest(cc=["12.0"], driver="590.44.01", python="3.12", torch="==2.10.0"))
    assert res.variant == "cu128" and not res.warnings


def test_cli_json_contract_keeps_its_keys_with_an_nvrtc_rejection() -> None:
    out = CliRunner().invoke(
        main, ["resolve", "--cc", "12.1", "--driver", "580.95.05", "--python", "3.12", "--arch", "aarch64",
               "--torch", "==2.11.0", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["variant"] == "cu130"
    assert all(set(r) == {"variant", "torch", "reason"} for r in doc["rejected"])
    assert any("cannot target sm_121" in r["reason"] for r in doc["rejected"])


# --- data doubts checked against the release matrices ---------------------------------------------------


def test_free_threaded_313t_only_in_2_12_0() -> None:
    res = ok(ResolveRequest(cc=["9.0"], driver="590.44.01", python="3.13t", torch=">=2.12,<2.13"))
    assert res.torch == "2.12.0"
    err = resolve(ResolveRequest(cc=["9.0"], driver="590.44.01", python="3.13t", torch="==2.12.1"))
    assert isinstance(err, ResolveError) and "no Python 3.13t wheels (torch 2.12.1" in err.message


def test_checked_gaps_stay_gaps() -> None:
    rel = {r.version: r for r in DATA.releases}
    assert not [v for v in rel["2.9"].variants if v.variant == "cu129" and v.platform == "aarch64"]
    assert not [v for v in rel["2.14"].variants if v.variant == "cu129"]
    assert any("162364" in n for n in rel["2.9"].notes) and any("187834" in n for n in rel["2.14"].notes)
