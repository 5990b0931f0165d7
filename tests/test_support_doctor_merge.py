"""`support.doctor.merge_by_cause` keeps every evidence line's number: a merged finding's `evidence` and
`evidence_lines` are one list, in order, each line once.

Inputs: tests/fixtures/logs/failures-public.jsonl's `debian-nvml-mismatch-520-vs-525`
(https://github.com/illinois-scicomp/machine-shop-maintenance/issues/70: the NVML mismatch on line 2, module
520.56.06, userspace 525.85.12) and the drift finding `drift.driver_drift` names for that host's versions.
"""

from __future__ import annotations

import json
from pathlib import Path

from provisioner.diagnose import Finding, diagnose
from provisioner.diagnose.model import EvidenceLine
from provisioner.diagnose.numbered import numbered
from provisioner.drift import DriftReport, driver_drift
from provisioner.support.diagnose_sources import drift_findings
from provisioner.support.doctor import merge_by_cause

PUBLIC = {r["id"]: r for r in (json.loads(line) for line in (Path(__file__).parent / "fixtures" / "logs" /
                                                             "failures-public.jsonl").read_text(encoding="utf-8")
                               .splitlines() if line.strip())}
NVML = "Failed to initialize NVML: Driver/library version mismatch"


def test_a_drift_finding_merged_with_a_log_finding_keeps_the_logs_line_numbers() -> None:
    log = PUBLIC["debian-nvml-mismatch-520-vs-525"]["log"]
    from_log = [f for f in diagnose(log) if f.category == "driver_lib_mismatch"]
    assert from_log and EvidenceLine(2, NVML) in from_log[0].evidence_lines
    drift = drift_findings(DriftReport("pve", 102, driver_drift("520.56.06", ["525.85.12"], 102)))
    merged = merge_by_cause([*drift, *from_log])
    assert len(merged) == 1
    top = merged[0]
    assert set(top.rules) == {"drift.driver", "mismatch.nvml"}
    assert [e.text for e in top.evidence_lines] == list(top.evidence)  # one list, in the same order
    assert top.evidence[0] == drift[0].evidence[0] and top.evidence_lines[0].line is None  # the surer one first
    assert EvidenceLine(2, NVML) in top.evidence_lines
    data = json.loads(json.dumps(top.to_dict()))  # the JSON face: the two lists agree there too
    assert [e["text"] for e in data["evidence_lines"]] == data["evidence"]
    assert f"L2: {NVML}" in numbered(top.evidence, top.evidence_lines)  # the console's form has its number


def test_merged_evidence_is_each_line_once_with_the_number_either_side_gives() -> None:
    """The surer finding lists a line without a number that the other numbers: it keeps its place and takes
    the number; a line both list is there once; the other's own lines follow in its order."""
    top = Finding(category="driver_lib_mismatch", confidence=0.95, root_cause="drift", fix="replay",
                  evidence=("CT 102 userspace 525.85.12 ≠ host kernel module 520.56.06", NVML), rule="drift.driver")
    other = Finding(category="driver_lib_mismatch", confidence=0.93, root_cause="nvml", fix="reinstall",
                    evidence=(NVML, "NVRM version: NVIDIA UNIX x86_64 Kernel Module  520.56.06"),
                    evidence_lines=(EvidenceLine(2, NVML),
                                    EvidenceLine(7, "NVRM version: NVIDIA UNIX x86_64 Kernel Module  520.56.06")),
                    rule="mismatch.nvml")
    for findings in ([top, other], [other, top]):
        (merged,) = merge_by_cause(findings)
        assert merged.rule == "drift.driver"
        assert merged.evidence_lines == (
            EvidenceLine(None, "CT 102 userspace 525.85.12 ≠ host kernel module 520.56.06"),
            EvidenceLine(2, NVML),
            EvidenceLine(7, "NVRM version: NVIDIA UNIX x86_64 Kernel Module  520.56.06"),
        )
        assert merged.evidence == tuple(e.text for e in merged.evidence_lines)
