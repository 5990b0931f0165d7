"""Diagnose rules against real logs: the public corpus, the held-out style set, rule examples, clean logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provisioner.diagnose import CATEGORIES, RULES, diagnose
from provisioner.diagnose.engine import match_rules
from provisioner.diagnose.normalize import clean_log

LOGS = Path(__file__).parent / "fixtures" / "logs"


def _rows(name: str) -> list[dict[str, str]]:
    return [json.loads(line) for line in (LOGS / name).read_text(encoding="utf-8").splitlines() if line.strip()]


PUBLIC = _rows("failures-public.jsonl")
HELDOUT = _rows("heldout.jsonl")
CLEAN = sorted(LOGS.glob("clean-*.log"))


@pytest.mark.parametrize("row", PUBLIC, ids=[r["id"] for r in PUBLIC])
def test_public_corpus_top_category(row: dict[str, str]) -> None:
    findings = diagnose(row["log"])
    assert findings, "no finding"
    top = findings[0]
    assert top.category == row["category"], [(f.category, f.confidence, f.rule) for f in findings]
    # the evidence is made of lines that really are in the log
    log_lines = row["log"].splitlines()
    assert top.evidence and all(any(e.rstrip("…") in line for line in log_lines) for e in top.evidence)


@pytest.mark.parametrize("row", HELDOUT, ids=[r["id"] for r in HELDOUT])
def test_heldout_style_top_category(row: dict[str, str]) -> None:
    findings = diagnose(row["log"])
    assert findings and findings[0].category == row["category"], [(f.category, f.rule) for f in findings]


def test_corpora_cover_every_category_twice() -> None:
    for rows in (PUBLIC, HELDOUT):
        counts = {c: sum(r["category"] == c for r in rows) for c in CATEGORIES}
        assert min(counts.values()) >= 2, counts


@pytest.mark.parametrize("path", CLEAN, ids=[p.name for p in CLEAN])
def test_clean_logs_give_no_finding(path: Path) -> None:
    assert diagnose(path.read_text(encoding="utf-8")) == []


def test_clean_logs_are_the_three_required_kinds() -> None:
    text = {p.name: p.read_text(encoding="utf-8") for p in CLEAN}
    assert len(text) == 3
    joined = "\n".join(text.values())
    assert joined.count("NVIDIA RTX PRO 6000 Blac") >= 8
    assert "Installation of the NVIDIA Accelerated Graphics Driver" in joined
    assert "cuda available True devices 8" in joined
    assert "# Out of bounds values : 0 OK" in joined


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_every_rule_matches_its_real_examples(rule: object) -> None:
    from provisioner.diagnose.model import Rule

    assert isinstance(rule, Rule)
    assert rule.examples, f"{rule.name} has no example"
    for example in rule.examples:
        hits = [h.rule.name for h in match_rules(clean_log(example))]
        assert rule.name in hits, (rule.name, example)
        findings = diagnose(example)
        if rule.supporting:  # context only: never a finding alone
            assert findings == []
            continue
        assert findings, f"{rule.name}: nothing for {example!r}"
        names = [n for f in findings for n in f.rules]
        assert rule.name in names, (rule.name, [(f.category, f.rules) for f in findings])
        assert findings[0].category == rule.category, (rule.name, [(f.category, f.rule) for f in findings])


def test_rule_names_unique_and_confidences_sane() -> None:
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))
    for r in RULES:
        assert 0 < r.confidence < 1
        assert r.category in CATEGORIES
        assert r.supporting or (r.root_cause and r.fix)
        assert r.name.split(".")[0], r.name


def test_each_category_has_rules() -> None:
    assert {r.category for r in RULES} == set(CATEGORIES)


def test_specific_cause_beats_generic_symptom() -> None:
    # brief: "sm_120 is not compatible" and a later generic "no kernel image" -> arch_unsupported
    log = (
        "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.\n"
        "...\nRuntimeError: CUDA error: no kernel image is available for execution on the device\n"
    )
    findings = diagnose(log)
    assert [f.category for f in findings] == ["arch_unsupported"]
    assert "sm_120" in findings[0].root_cause
    assert "cu128" in findings[0].fix
    # "CUDA driver version is insufficient" -> driver_too_old even if "no CUDA GPUs" also appears
    log = (
        "RuntimeError: No CUDA GPUs are available\n"
        "cudaGetDeviceCount returned 35\n-> CUDA driver version is insufficient for CUDA runtime version\n"
    )
    findings = diagnose(log)
    assert findings[0].category == "driver_too_old"
    assert "no_driver_loaded" not in [f.category for f in findings]  # the generic symptom is dropped


def test_several_findings_best_first() -> None:
    log = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
        "pytorch-gpu:991:1002 [0] NCCL WARN Call to connect returned Connection refused, retrying\n"
    )
    findings = diagnose(log)
    assert [f.category for f in findings] == ["oom_or_hw", "nccl_failure"]
    assert findings[0].confidence > findings[1].confidence


def test_generic_symptom_alone_still_reported() -> None:
    findings = diagnose("RuntimeError: No CUDA GPUs are available")
    assert [f.category for f in findings] == ["no_driver_loaded"]
    assert findings[0].confidence < 0.5


def test_templates_filled_from_log_values() -> None:
    f = diagnose(
        "root@truenas[/]# nvidia-smi\nFailed to initialize NVML: Driver/library version mismatch\n"
        "NVML library version: 580.178\n"
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  Tue Jun 23 08:38:17 UTC 2026\n"
    )[0]
    assert "580.178" in f.root_cause and "580.173.02" in f.root_cause
    f = diagnose("UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 12080).")[0]
    assert f.category == "driver_too_old" and "12.8" in f.root_cause
    assert "{" not in f.root_cause and "[" not in f.root_cause


def test_docs_list_every_rule() -> None:
    from provisioner.diagnose.live_rules import CHECKS

    doc = (Path(__file__).parent.parent / "docs" / "diagnose-rules.md").read_text(encoding="utf-8")
    missing = [r.name for r in RULES if f"`{r.name}`" not in doc]
    assert not missing, f"regenerate the rule table in docs/diagnose-rules.md: {missing}"
    assert len(CHECKS) >= 8 and "facts.torch_arch_vs_gpu" in doc
