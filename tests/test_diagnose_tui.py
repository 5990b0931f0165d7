"""The TUI's diagnose screen (F5) shows each evidence line with its number in the pasted log, as the console and
`--json`'s `evidence_lines` give it (`provisioner.diagnose.numbered`); a fact's line has no number.

Inputs: tests/fixtures/diagnose/real-logs.jsonl's `gpu-driver-container-secure-boot-load-fail`
(https://github.com/NVIDIA/gpu-driver-container/issues/44: evidence on lines 1 and 7) and
tests/fixtures/logs/facts-broken-ct102.json (facts findings: no log lines).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from textual.widgets import TextArea

from provisioner.diagnose import diagnose
from screens.diagnose import DiagnoseScreen, findings_text
from tests.support.tui import make_app, screen_text, wait_for

FIXTURES = Path(__file__).parent / "fixtures"
REAL = {r["id"]: r for r in (json.loads(line) for line in (FIXTURES / "diagnose" / "real-logs.jsonl")
                             .read_text(encoding="utf-8").splitlines() if line.strip())}
SECURE_BOOT = REAL["gpu-driver-container-secure-boot-load-fail"]["log"]


def _evidence_rows(findings: list[dict[str, Any]]) -> list[str]:
    return [ln.strip() for ln in findings_text(findings).plain.splitlines() if ln.strip().startswith("evidence:")]


def test_findings_text_numbers_each_log_line_as_the_json_does() -> None:
    findings: list[dict[str, Any]] = json.loads(json.dumps([f.to_dict() for f in diagnose(SECURE_BOOT)]))
    rows = _evidence_rows(findings[:1])
    lines = SECURE_BOOT.splitlines()
    assert [e["line"] for e in findings[0]["evidence_lines"]] == [1, 7]
    assert rows[0] == f"evidence: L1: {lines[0]}"
    assert rows[1].startswith("evidence: L7: ERROR: Unable to load the kernel module 'nvidia.ko'.")
    assert rows[1].endswith("…") and len(rows[1]) <= len("evidence: ") + 200  # cut as the console cuts it


def test_a_fact_is_shown_without_a_number_and_a_bad_line_field_is_ignored() -> None:
    facts = json.loads((FIXTURES / "logs" / "facts-broken-ct102.json").read_text(encoding="utf-8"))
    findings = [f.to_dict() for f in diagnose("", facts)]
    rows = _evidence_rows(findings[:1])
    assert "evidence: host kernel module version: 595.71.05" in rows
    assert not any(r.startswith("evidence: L") for r in rows)  # `nvidia_smi`'s lines are a fact's, not a log's
    hostile = [{"category": "driver_lib_mismatch", "evidence": ["a", "b", "c"],
                "evidence_lines": [{"line": True, "text": "a"}, {"line": "7", "text": "b"}, {"line": -3, "text": "c"},
                                   "junk", {"line": 4}]}]
    assert _evidence_rows(hostile) == ["evidence: a", "evidence: b", "evidence: c"]
    assert _evidence_rows([{"category": "x", "evidence": ["a"], "evidence_lines": "L9"}]) == ["evidence: a"]


async def test_the_diagnose_screen_shows_the_line_numbers(tmp_path: Path) -> None:
    app = make_app(tmp_path, "connect")
    async with app.run_test(size=(220, 50)) as pilot:
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, DiagnoseScreen), what="the diagnose screen")
        app.screen.query_one(TextArea).text = SECURE_BOOT
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: "evidence: L7: ERROR: Unable to load" in screen_text(app),
                       what="the findings with their line numbers")
        assert "evidence: L1: Secure boot - Unable to load the kernel module" in screen_text(app)
