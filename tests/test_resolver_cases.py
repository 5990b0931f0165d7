"""Resolver cases: the public corpus (pure API and CLI), own held-out-style hosts, and the scoring script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from packaging.version import Version

from provisioner.cli import main
from provisioner.resolver import Resolution, ResolveError, ResolveRequest, resolve
from tests.support.require import require
from tests.support.shared import shared_path

CORPUS = shared_path("corpus/resolver-public.json")
SCORER = shared_path("checks/resolver_cases.py")
ROOT = Path(__file__).resolve().parents[1]

# Hosts invented from torch-matrix.md facts, in the corpus format (expect = acceptable outcomes).
OWN_CASES: list[dict[str, Any]] = [
    # GTX 1080 Ti on R580: only cu126 carries sm_60; uv would take cu132
    {
        "id": "O01",
        "cc": ["6.1"],
        "driver": "580.95.05",
        "python": "3.12",
        "arch": "x86_64",
        "glibc": None,
        "torch": None,
        "expect": {"variants": ["cu126"], "torch_min": "2.14.0"},
    },
    # V100 on R580: no cu13x build has sm_70
    {
        "id": "O02",
        "cc": ["7.0"],
        "driver": "580.95.05",
        "python": "3.12",
        "arch": "x86_64",
        "glibc": None,
        "torch": None,
        "expect": {"variants": ["cu126"], "torch_min": "2.14.0"},
    },
    # V100 pinned to 2.11: Volta dropped from cu128 in 2.11
    {
        "id": "O03",
        "cc": ["7.0"],
        "driver": "570.133.07",
        "python": "3.11",
        "arch": "x86_64",
        "glibc": None,
        "torch": "==2.11.0",
        "expect": {"variants": ["cu126"]},
    },
    # V100 pinned to 2.10: cu128 still had sm_70
    {
        "id": "O04",
        "cc": ["7.0"],
        "driver": "570.133.07",
        "python": "3.11",
        "arch": "x86_64",
        "glibc": None,
        "torch": "==2.10.0",
        "expect": {"variants": ["cu126", "cu128", "cu129"]},
    },
    # K80 on R470 with Python 3.8: sm_37 only in cu11x, Python 3.8 last in 2.4
    {
        "id": "O05",
        "cc": ["3.7"],
        "driver": "470.256.02",
        "python": "3.8",
        "arch": "x86_64",
        "glibc": None,
        "torch": None,
        "expect": {"variants": ["cu118"], "torch_min": "2.4.0", "torch_max_excl": "2.5"},
    },
    # CentOS 7 (glibc 2.17): manylinux_2_28 from 2.6
    {
        "id": "O06",
        "cc": ["8.0"],
        "driver": "535.104.05",
        "python": "3.10",
        "arch": "x86_64",
        "glibc": "2.17",
        "torch": None,
        "expect": {"variants": ["cu118", "cu121", "cu124"], "torch_max_excl": "2.6"},
    },
    # GH200 on R535: aarch64 cu12x builds with sm_90
    {
        "id": "O07",
        "cc": ["9.0"],
        "driver": "535.104.05",
        "python": "3.12",
        "arch": "aarch64",
        "glibc": None,
        "torch": None,
        "expect": {"variants": ["cu126", "cu128", "cu129"], "torch_min": "2.13.0"},
    },
    # RTX 5090 on R565: Blackwell needs R570+
    {
        "id": "O08",
        "cc": ["12.0"],
        "driver": "565.57.01",
        "python": "3.12",
        "arch": "x86_64",
        "glibc": None,
        "torch": None,
        "expect": {"error": True},
    },
    # RTX 5090 with torch<2.7: no build below 2.7 has sm_120
    {
        "id": "O09",
        "cc": ["12.0"],
        "driver": "575.57.08",
        "python": "3.12",
        "arch": "x86_64",
        "glibc": None,
        "torch": "<2.7",
        "expect": {"error": True},
    },
    # B300 (10.3) runs sm_100
    {
        "id": "O10",
        "cc": ["10.3"] * 8,
        "driver": "580.95.05",
        "python": "3.12",
        "arch": "x86_64",
        "glibc": None,
        "torch": "==2.11.0",
        "expect": {"variants": ["cu128", "cu129", "cu130"]},
    },
    # V100 + RTX PRO 6000 together: only cu128/cu129 of 2.8-2.10 carry sm_70 and sm_120
    {
        "id": "O11",
        "cc": ["7.0", "12.0"],
        "driver": "575.57.08",
        "python": "3.12",
        "arch": "x86_64",
        "glibc": None,
        "torch": None,
        "expect": {"variants": ["cu128", "cu129"], "torch_min": "2.10.0", "torch_max_excl": "2.11"},
    },
    # Pascal on R595: the driver ignores it
    {
        "id": "O12",
        "cc": ["6.1", "6.1"],
        "driver": "595.71.05",
        "python": "3.12",
        "arch": "x86_64",
        "glibc": None,
        "torch": None,
        "expect": {"error": True},
    },
    # Jetson Orin: iGPU CC 8.7 is not served by sbsa wheels
    {
        "id": "O13",
        "cc": ["8.7"],
        "driver": "580.95.05",
        "python": "3.10",
        "arch": "aarch64",
        "glibc": None,
        "torch": None,
        "expect": {"error": True},
    },
    # L40S on R535 with Python 3.14: 3.14 from 2.9, cu12x only
    {
        "id": "O14",
        "cc": ["8.9"],
        "driver": "535.104.05",
        "python": "3.14",
        "arch": "x86_64",
        "glibc": None,
        "torch": None,
        "expect": {"variants": ["cu126", "cu128", "cu129"], "torch_min": "2.14.0"},
    },
    # GB200 on R570, torch 2.7.1 pinned: aarch64 2.7 is cu128 only
    {
        "id": "O15",
        "cc": ["10.0"] * 4,
        "driver": "570.133.20",
        "python": "3.12",
        "arch": "aarch64",
        "glibc": None,
        "torch": "==2.7.1",
        "expect": {"variants": ["cu128"]},
    },
    # A100 on the CUDA 11.8 driver: cu118 is the only path
    {
        "id": "O16",
        "cc": ["8.0"],
        "driver": "520.61.05",
        "python": "3.11",
        "arch": "x86_64",
        "glibc": None,
        "torch": None,
        "expect": {"variants": ["cu118"], "torch_min": "2.7.0"},
    },
]


def _corpus() -> list[dict[str, Any]]:
    if not CORPUS.exists():
        return []
    cases: list[dict[str, Any]] = json.loads(CORPUS.read_text(encoding="utf-8"))
    return cases


def _request(case: dict[str, Any]) -> ResolveRequest:
    return ResolveRequest(
        cc=case["cc"],
        driver=case["driver"],
        python=case["python"],
        arch=case["arch"],
        glibc=case.get("glibc"),
        torch=case.get("torch"),
    )


def _check(case: dict[str, Any], variant: str | None, torch: str | None, is_error: bool) -> None:
    exp = case["expect"]
    if exp.get("error"):
        assert is_error, f"{case['id']}: expected no solution, got {variant} {torch}"
        return
    assert not is_error and variant in exp["variants"], f"{case['id']}: got {variant} {torch}"
    assert torch is not None
    if exp.get("torch_min"):
        assert Version(torch) >= Version(exp["torch_min"]), case["id"]
    if exp.get("torch_max_excl"):
        assert Version(torch) < Version(exp["torch_max_excl"]), case["id"]


def test_public_corpus_is_present() -> None:
    require(CORPUS.exists(), f"public resolver corpus {CORPUS} is not present")
    assert len(_corpus()) >= 13


@pytest.mark.parametrize("case", _corpus() + OWN_CASES, ids=lambda c: str(c["id"]))
def test_case_through_the_api(case: dict[str, Any]) -> None:
    result = resolve(_request(case))
    if isinstance(result, Resolution):
        _check(case, result.variant, result.torch, False)
        assert result.reasons and result.rejected
        assert result.index_url == f"https://download.pytorch.org/whl/{result.variant}"
    else:
        assert isinstance(result, ResolveError)
        _check(case, None, None, True)
        assert result.fix and result.message


def _cli_args(case: dict[str, Any]) -> list[str]:
    args = ["resolve", "--json", "--driver", case["driver"], "--python", case["python"], "--arch", case["arch"]]
    for cc in case["cc"]:
        args += ["--cc", cc]
    if case.get("glibc"):
        args += ["--glibc", case["glibc"]]
    if case.get("torch"):
        args += ["--torch", case["torch"]]
    return args


CLI_IDS = {"SEED", "E20", "E36", "E39", "O09", "O11"}


@pytest.mark.parametrize("case", [c for c in _corpus() + OWN_CASES if c["id"] in CLI_IDS], ids=lambda c: str(c["id"]))
def test_case_through_the_cli(case: dict[str, Any]) -> None:
    result = CliRunner().invoke(main, _cli_args(case))
    out = json.loads(result.output.strip().splitlines()[-1])
    if case["expect"].get("error"):
        assert result.exit_code == 3
        assert set(out["error"]) == {"code", "message", "fix"}
        _check(case, None, None, True)
    else:
        assert result.exit_code == 0, result.output
        assert {"variant", "index_url", "torch", "torchvision", "reasons", "rejected", "verified"} <= set(out)
        assert all(set(r) == {"variant", "torch", "reason"} for r in out["rejected"])
        _check(case, out["variant"], out["torch"], False)


def test_seed_host_cli_contract() -> None:
    args = [
        "resolve",
        *[a for _ in range(8) for a in ("--cc", "12.0")],
        "--driver",
        "595.71.05",
        "--python",
        "3.12",
        "--torch",
        "==2.11.0",
        "--json",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0
    out = json.loads(result.output.strip().splitlines()[-1])
    assert out["variant"] == "cu128"
    assert out["index_url"] == "https://download.pytorch.org/whl/cu128"
    assert out["torch"] == "2.11.0" and out["torchvision"] == "0.26.0" and out["verified"] is True
    assert any(o["tool"].startswith("light-the-torch") and o["works"] is False for o in out["others"])


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [("--cc", "abc", "compute capability"), ("--driver", "59x", "driver"), ("--torch", "==banana", "PEP 440")],
)
def test_invalid_input_exits_2(flag: str, value: str, needle: str) -> None:
    base = {"--cc": "12.0", "--driver": "595.71.05", "--python": "3.12"}
    base[flag] = value
    args = ["resolve", "--json", *[x for kv in base.items() for x in kv]]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert needle in result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["error"]["code"] == "invalid_input"


def test_missing_required_option_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["resolve", "--driver", "595.71.05", "--python", "3.12"])
    assert result.exit_code == 2


def test_rich_rendering_without_json() -> None:
    ok = CliRunner().invoke(main, ["resolve", "--cc", "6.1", "--driver", "580.95.05", "--python", "3.12"])
    assert ok.exit_code == 0
    assert "2.14.0" in ok.output and "download.pytorch.org/whl/cu126" in ok.output
    assert "Rejected candidates" in ok.output and "uv --torch-backend=auto" in ok.output
    bad = CliRunner().invoke(
        main, ["resolve", "--cc", "12.0", "--cc", "6.1", "--driver", "580.95.05", "--python", "3.12"]
    )
    assert bad.exit_code == 3
    assert "split GPUs into separate venvs" in bad.output


def test_alternative_data_file(tmp_path: Path) -> None:
    from provisioner.resolver.data import load_data

    raw = json.loads(load_data().model_dump_json(by_alias=True))
    raw["releases"] = [r for r in raw["releases"] if r["version"] != "2.15"]  # e.g. an older data file
    path = tmp_path / "old.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    args = ["resolve", "--cc", "8.6", "--driver", "580.95.05", "--python", "3.12", "--json", "--data", str(path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0
    assert json.loads(result.output.strip().splitlines()[-1])["torch"] == "2.14.0"


def test_scoring_script_passes_on_the_public_corpus() -> None:
    require(SCORER.exists() and CORPUS.exists(), "shared scoring script / public corpus not present")
    require(shutil.which("uv") is not None, "uv is not on PATH")
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    proc = subprocess.run(
        [sys.executable, str(SCORER), str(CORPUS), "1.0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == f"resolver: {len(_corpus())}/{len(_corpus())}"
