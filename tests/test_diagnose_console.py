"""`provisioner diagnose` on the console: every evidence line with its log line number, as `--json` gives it.

Inputs are real logs: tests/fixtures/logs/failures-public.jsonl (24 public issue-thread logs, each row's `source`)
and tests/fixtures/diagnose/real-logs.jsonl's `gpu-driver-container-secure-boot-load-fail`
(https://github.com/NVIDIA/gpu-driver-container/issues/44: a finding with two numbered lines and a runner-up).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from provisioner.cli import main
from provisioner.diagnose.numbered import CONSOLE_LINE_CHARS
from provisioner.exitcodes import ExitCode

FIXTURES = Path(__file__).parent / "fixtures"
PUBLIC = [json.loads(line) for line in (FIXTURES / "logs" / "failures-public.jsonl").read_text(encoding="utf-8")
          .splitlines() if line.strip()]
REAL = {r["id"]: r for r in (json.loads(line) for line in (FIXTURES / "diagnose" / "real-logs.jsonl")
                             .read_text(encoding="utf-8").splitlines() if line.strip())}
SECURE_BOOT = REAL["gpu-driver-container-secure-boot-load-fail"]
WIDE = {"COLUMNS": "400"}  # evidence lines (<= CONSOLE_LINE_CHARS) are not wrapped by the panel
# a panel's evidence row: "│   │ L7: text … │" (the rule is drawn by rich; the text is the evidence line)
ROW = re.compile(r"^│\s+│ (?:L(\d+): )?(.*?)\s*│$")


def _run(args: list[str], stdin: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["diagnose", *args], input=stdin, env=WIDE)
    return result.exit_code, result.stdout


def _console_rows(out: str) -> list[tuple[int | None, str]]:
    rows = []
    for line in out.splitlines():
        m = ROW.match(line.strip())
        if m and m.group(2) != "(the same lines as above)":
            rows.append((int(m.group(1)) if m.group(1) else None, m.group(2)))
    return rows


def _json_rows(findings: list[dict[str, Any]]) -> list[tuple[int | None, str]]:
    """What the console must show, in order: each finding's evidence_lines, then each runner-up's differing lines."""
    rows: list[tuple[int | None, str]] = []
    for f in findings:
        assert [e["text"] for e in f["evidence_lines"]] == f["evidence"]  # the JSON's two lists agree
        rows += [(e["line"], e["text"]) for e in f["evidence_lines"]]
        for alt in f["also_possible"]:
            rows += [(e["line"], e["text"]) for e in alt["differing_evidence"]]
    return rows


def _same(console: list[tuple[int | None, str]], expected: list[tuple[int | None, str]]) -> None:
    assert [n for n, _ in console] == [n for n, _ in expected]
    for (_, shown), (_, text) in zip(console, expected, strict=True):
        flat = " ".join(text.split())
        assert flat.startswith(shown.removesuffix("…")), (shown, text)
        assert len(shown) <= CONSOLE_LINE_CHARS


def test_console_shows_the_json_line_numbers_of_a_real_log() -> None:
    code, out = _run(["--log", "-"], SECURE_BOOT["log"])
    jcode, jout = _run(["--log", "-", "--json"], SECURE_BOOT["log"])
    assert code == jcode == ExitCode.FAILED
    findings = json.loads(jout.strip().splitlines()[-1])["findings"]
    console = _console_rows(out)
    assert [n for n, _ in console] == [1, 7]  # "Secure boot - Unable to load …" and the installer's ERROR line
    _same(console, _json_rows(findings))
    assert "Also possible: installer_failure" in out


@pytest.mark.parametrize("row", PUBLIC, ids=[r["id"] for r in PUBLIC])
def test_console_and_json_cite_the_same_lines(row: dict[str, str]) -> None:
    code, out = _run(["--log", "-"], row["log"])
    jcode, jout = _run(["--log", "-", "--json"], row["log"])
    assert code == jcode
    findings = json.loads(jout.strip().splitlines()[-1])["findings"]
    expected = _json_rows(findings)
    assert expected and all(n is not None for n, _ in expected)  # a log finding cites numbered lines
    lines = row["log"].splitlines()
    for n, text in expected:  # the number is the line the user finds the text on
        assert n is not None and " ".join(text.rstrip("…").split())[:40] in " ".join(lines[n - 1].split())
    _same(_console_rows(out), expected)


def test_a_fact_is_shown_without_a_line_number() -> None:
    facts = (FIXTURES / "logs" / "facts-broken-ct102.json").read_text(encoding="utf-8")
    code, out = _run(["--facts", "-"], facts)
    _, jout = _run(["--facts", "-", "--json"], facts)
    findings = json.loads(jout.strip().splitlines()[-1])["findings"]
    expected = _json_rows(findings)
    assert code == ExitCode.FAILED
    assert (None, "host kernel module version: 595.71.05") in expected  # a fact the facts rules compared
    _same(_console_rows(out), expected)
    assert re.search(r"│ host kernel module version: 595\.71\.05 +│", out)


def test_console_evidence_is_redacted_and_bounded() -> None:
    secret = "Hunter2Secret99"
    log = (f"root@pve:~# pct start 101 --password={secret}\n"
           f"Failed to initialize NVML: Driver/library version mismatch token={secret} {'x' * 3000}\n"
           f"NVRM: loaded kernel module 550.54.14 password={secret}\n")
    code, out = _run(["--log", "-", "--evidence"], log)
    jcode, jout = _run(["--log", "-", "--evidence", "--json"], log)
    assert code == jcode == ExitCode.FAILED
    assert secret not in out and secret not in jout  # the typed evidence's raw lines too (`--evidence`)
    assert "<redacted>" in out and "<redacted>" in jout
    rows = _console_rows(out)
    assert rows[0][0] == 2 and rows[0][1].startswith("Failed to initialize NVML") and rows[0][1].endswith("…")
    assert all(len(f"L{n}: {t}") <= CONSOLE_LINE_CHARS for n, t in rows)
    data = json.loads(jout.strip().splitlines()[-1])
    assert data["evidence"]["line_no"]["module_version"] == 3
    assert re.search(r"^\s+L3 module_version: NVRM: loaded kernel module 550\.54\.14 password=<redacted>$", out, re.M)


# --- a log and live facts together: a fact's text is not the log (tests/fixtures/logs/facts-broken-ct102.json,
# whose `nvidia_smi` output's line 1 is the NVML mismatch, beside the secure-boot log, whose line 1 is its cause)


def _log_and_facts(tmp_path: Path, facts: dict[str, Any]) -> tuple[str, str, list[dict[str, Any]]]:
    log = tmp_path / "install.log"
    log.write_text(SECURE_BOOT["log"], encoding="utf-8")
    facts_file = tmp_path / "facts.json"
    facts_file.write_text(json.dumps(facts), encoding="utf-8")
    args = ["--log", str(log), "--facts", str(facts_file)]
    code, out = _run(args, "")
    jcode, jout = _run([*args, "--json"], "")
    assert code == jcode == ExitCode.FAILED
    return SECURE_BOOT["log"], out, json.loads(jout.strip().splitlines()[-1])["findings"]


def test_a_facts_text_line_is_never_numbered_as_a_log_line(tmp_path: Path) -> None:
    facts = json.loads((FIXTURES / "logs" / "facts-broken-ct102.json").read_text(encoding="utf-8"))
    log, out, findings = _log_and_facts(tmp_path, facts)
    lines = log.splitlines()
    expected = _json_rows(findings)
    for n, text in expected:  # every number is the log line the text is on (a fact's line has none)
        if n is not None:
            assert " ".join(text.rstrip("…").split())[:40] in " ".join(lines[n - 1].split()), (n, text)
    nvml = "Failed to initialize NVML: Driver/library version mismatch"  # the fact `nvidia_smi`'s line 1
    assert (None, nvml) in expected and (None, "NVML library version: 590.48") in expected
    assert (1, lines[0]) in expected  # the log's own line 1 keeps its number
    _same(_console_rows(out), expected)
    assert re.search(r"│ Failed to initialize NVML: Driver/library version mismatch +│", out)
    assert "L1: Failed to initialize NVML" not in out


def test_a_facts_text_finding_is_not_folded_into_a_log_finding_by_a_shared_number(tmp_path: Path) -> None:
    """`nvidia_smi` alone (the fixture's, its line 1 the NVML mismatch) beside the secure-boot log: the two
    causes read different lines, so both are findings of their own (before, both "read line 1" and the log's
    cause was folded into the mismatch as an "also possible", its line 1 hidden)."""
    facts = json.loads((FIXTURES / "logs" / "facts-broken-ct102.json").read_text(encoding="utf-8"))
    _, out, findings = _log_and_facts(tmp_path, {"nvidia_smi": facts["nvidia_smi"]})
    by_category = {f["category"]: f for f in findings}
    assert {"driver_lib_mismatch", "no_driver_loaded"} <= set(by_category)
    assert [e["line"] for e in by_category["no_driver_loaded"]["evidence_lines"]] == [1, 7]
    assert all(e["line"] is None for e in by_category["driver_lib_mismatch"]["evidence_lines"])
    _same(_console_rows(out), _json_rows(findings))
    assert re.search(r"│ L1: Secure boot - Unable to load the kernel module", out)
