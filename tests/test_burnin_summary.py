"""The burn-in step's summary of a real result document (issue #12 item 4: no JSON blob in the demo's
output): a world of 2 on CPU with gloo through the real CLI, then `summary_lines` of its document."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from provisioner.burnin.config import COLLECTIVES
from provisioner.payloads import BurninReport
from provisioner.steps.burnin_run import summary_lines
from tests.support.require import require_gloo


def test_summary_of_a_real_result(tmp_path: Path) -> None:
    require_gloo()
    from provisioner.cli import main

    res = CliRunner().invoke(main, ["burnin", "--backend", "gloo", "--world-size", "2", "--sizes", "1KiB:4KiB",
                                    "--iters", "2", "--gemm-seconds", "0.1", "--duration", "0.2", "--json",
                                    "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output[-2000:]
    line = res.output.strip().splitlines()[-1]
    doc = json.loads(line)
    report = BurninReport.model_validate(doc)
    assert report.dump() == doc, "the model keeps every key of the rank's document"
    lines = summary_lines(report)
    text = "\n".join(lines)
    assert lines[0] == "burn-in: pass; world size 2, backend gloo, sizes 1KiB..4KiB (3), soak 0.2s"
    rows = doc["phases"]["collectives"]["rows"]
    for name in COLLECTIVES:
        row = next(r for r in rows if r["collective"] == name and r["size"] == 4096 and not r["inplace"])
        assert f"{name} 4KiB {float(row['busbw']):.3g} GB/s" in lines[1]
    assert lines[2] == f"summary: {doc['summary']}"
    assert len(text) < 1000 < len(line), "a summary, not the document"
