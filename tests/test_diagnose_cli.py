"""`provisioner diagnose` contract (ARCHITECTURE §8): last stdout line is the findings JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from provisioner.cli import main
from provisioner.exitcodes import ExitCode
from tests.support.require import require

LOGS = Path(__file__).parent / "fixtures" / "logs"
ROW = json.loads((LOGS / "failures-public.jsonl").read_text(encoding="utf-8").splitlines()[0])


def _invoke(args: list[str], stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["diagnose", *args], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def _last_json(stdout: str) -> dict[str, Any]:
    data = json.loads(stdout.strip().splitlines()[-1])
    assert isinstance(data, dict)
    return data


def test_json_contract(tmp_path: Path) -> None:
    log = tmp_path / "install.log"
    log.write_text(ROW["log"] + "\n")
    code, out, _ = _invoke(["--log", str(log), "--json"])
    assert code == ExitCode.FAILED  # a root cause found: 1, from a log as from a host (issue 35)
    findings = _last_json(out)["findings"]
    assert isinstance(findings, list) and findings
    top = findings[0]
    assert set(top) >= {"category", "confidence", "root_cause", "fix", "evidence", "rule"}
    assert top["category"] == ROW["category"]
    assert 0 <= top["confidence"] <= 1
    assert isinstance(top["evidence"], list) and all(isinstance(e, str) for e in top["evidence"])


def test_no_finding_is_empty_list_exit_0() -> None:
    clean = (LOGS / "clean-uv-torch-install.log").read_text()
    code, out, _ = _invoke(["--log", "-", "--json"], stdin=clean)
    assert code == ExitCode.OK
    assert _last_json(out) == {"findings": []}


def test_facts_file(tmp_path: Path) -> None:
    code, out, _ = _invoke(["--facts", str(LOGS / "facts-broken-ct102.json"), "--json"])
    assert code == ExitCode.FAILED
    cats = [f["category"] for f in _last_json(out)["findings"]]
    assert cats[0] == "driver_lib_mismatch" and "container_device_missing" in cats


def test_usage_errors(tmp_path: Path) -> None:
    assert _invoke([])[0] == ExitCode.USAGE
    assert _invoke(["--log", str(tmp_path / "missing.log")])[0] == ExitCode.USAGE
    bad = tmp_path / "facts.json"
    bad.write_text("[1, 2]")
    assert _invoke(["--facts", str(bad)])[0] == ExitCode.USAGE
    bad.write_text("{not json")
    assert _invoke(["--facts", str(bad)])[0] == ExitCode.USAGE


def test_rich_output_never_interprets_log_markup() -> None:
    log = "[bold red]x[/] [link=http://evil]y[/link] ImportError: libcudart.so.12: cannot open shared object file\n"
    code, out, _ = _invoke(["--log", "-"], stdin=log)
    assert code == ExitCode.FAILED
    assert "missing_shared_lib" in out
    assert "[bold red]x[/]" in out and "[link=http://evil]" in out


def test_rich_output_no_finding() -> None:
    code, out, _ = _invoke(["--log", "-"], stdin="all good\n")
    assert code == ExitCode.OK and "No known failure signature" in out


def test_installed_entry_point_last_line_is_json(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "provisioner"
    require(exe.exists(), f"console script not installed at {exe}")
    log = tmp_path / "x.log"
    log.write_text("Failed to initialize NVML: Driver/library version mismatch\r\nNVML library version: 580.178\r\n")
    proc = subprocess.run([str(exe), "diagnose", "--log", str(log), "--json"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == ExitCode.FAILED, proc.stderr
    assert _last_json(proc.stdout)["findings"][0]["category"] == "driver_lib_mismatch"
