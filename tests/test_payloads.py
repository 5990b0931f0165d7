"""The typed payloads (provisioner/payloads.py): what the burn-in's own producers write parses, unknown keys
survive a round trip, an older result file still gives its verdict, a hand-edited `resolved` section is left
out rather than crashing a run, and the Burn-in page renders the model."""

from __future__ import annotations

import json

from provisioner.burnin.config import BurninConfig
from provisioner.burnin.report import failure_result, json_line
from provisioner.payloads import BurninReport, MultinodeReport, Resolved, VenvLock
from provisioner.steps.burnin_common import last_report
from screens.pages.burnin import verdict_text


def test_the_burnin_failure_document_parses_with_its_reasons() -> None:
    cfg = BurninConfig(backend="gloo", world_size=2, sizes=(1024,))
    doc = failure_result(cfg, ["rank 0 exited with signal 9"])
    report = last_report(["torchrun: agent noise", json_line(doc)], BurninReport, "provisioner.burnin")
    assert report is not None
    assert report.overall == "fail" and report.verdict.reasons == ["rank 0 exited with signal 9"]
    assert report.world_size == 2 and report.rows == []
    assert report.dump() == json.loads(json_line(doc)), "every key of the producer's document is kept"


def test_an_older_result_file_still_gives_its_verdict() -> None:
    assert BurninReport.model_validate({"passed": True}).overall == "pass"
    assert BurninReport.model_validate({"verdict": "fail"}).overall == "fail"
    assert BurninReport.model_validate({"status": "pass"}).overall == "pass"


def test_unknown_phases_and_keys_round_trip() -> None:
    doc = {"status": "pass", "world_size": 4, "verdict": {"status": "pass", "overall": "pass", "phases": {}},
           "phases": {"fabric": {"status": "pass", "nodes": [{"node": "a", "status": "pass", "ranks": [0, 1]}]},
                      "future_phase": {"status": "warn", "data": [1]}},
           "new_top_level": {"x": 1}}
    report = MultinodeReport.model_validate(doc)
    assert [n.node for n in report.fabric_nodes] == ["a"]
    assert report.dump() == doc


def test_a_hand_edited_resolved_section_is_left_out_not_fatal() -> None:
    recorded = {"vmid": 120, "venv_lock": "edited by hand", "torch": {"variant": "cu128"}, "host_driver": "580.95.05"}
    res = Resolved.from_recorded(recorded)
    assert res.vmid == 120 and res.torch == {"variant": "cu128"}
    assert res.venv_lock is None, "an unparsable lock is resolved afresh, as if none was recorded"
    assert res.dump()["host_driver"] == "580.95.05", "sections without a type stay as recorded"
    lock = {"groups": {"torch": {"requirements": ["torch==2.11.0"], "index_url": "https://download.pytorch.org/whl/cu128",
                                 "torch_index_url": None, "python": "3.12", "text": "torch==2.11.0 --hash=sha256:00"}}}
    merged = res.merged({"venv_lock": lock, "vmid": 121})
    assert merged.vmid == 121 and isinstance(merged.venv_lock, VenvLock)
    assert merged.venv_lock.groups["torch"].text.startswith("torch==2.11.0")
    assert merged.torch == {"variant": "cu128"}


def test_the_burnin_page_renders_the_model() -> None:
    assert verdict_text(None).plain == "verdict: not run yet"
    report = BurninReport.model_validate({"verdict": {"status": "fail", "overall": "fail",
                                                      "phases": {"gemm": "pass", "collectives": "fail"}}})
    assert verdict_text(report).plain == "verdict: FAIL   (gemm: pass, collectives: fail)"
