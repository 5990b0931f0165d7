"""`provisioner bundle` runs NVIDIA's nvidia-bug-report.sh, bounded (issue #27, deliverable 3).

The fact's own shell script runs for real (this machine's sh, mktemp, timeout, gzip) against the lab's
`nvidia-bug-report.sh` stand-in (`provisioner.lab.commands.nvidia_bug_report`, its wrapper written by
`write_node_bin` for a lab root): healthy, it writes `nvidia-bug-report.log.gz` section by section; under
scenario `bug-report-hangs` it blocks like the real script on a GPU that stopped responding. The bound is
small here (the `--bug-report-timeout` option); the tests wait for the state the probe records, never on
seconds. The full path (the lab's sshd, `provisioner bundle --lab`, `diagnose --bundle`) is the last test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from provisioner.facts.evidence import ABSENT, TIMED_OUT, bug_report_fact
from provisioner.lab.lab import Lab
from provisioner.support.bundle import read_bundle, write_bundle
from provisioner.support.collect import run_probe
from provisioner.support.diagnose_sources import bundle_findings
from provisioner.support.evidence import Evidence
from provisioner.support.probes import BUG_REPORT, BUNDLE_PROBES, PROBES, bundle_probes, fact_for
from provisioner.transport.local import LocalTransport
from tests.support.lab import lab_down, lab_up
from tests.support.require import require


def _lab_bin(tmp: Path, *scenarios: str) -> LocalTransport:
    """This machine with a lab root's node stand-ins first on the PATH (no lab services: the stand-in runs
    itself, as its wrapper does when the resident server is not there)."""
    root = tmp / "lab"
    Lab(root, list(scenarios)).create_state()
    return LocalTransport(env={"PATH": f"{root / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"})


def test_the_bound_is_one_argv_element_and_checked() -> None:
    fact = bug_report_fact(7)
    assert fact.argv[-1] == "7" and fact.timeout > 7  # the transport's timeout is a backstop beyond the bound
    assert "$1" in fact.argv[2] and fact.argv[2] == bug_report_fact(9).argv[2]  # the script never varies
    with pytest.raises(ValueError):
        bug_report_fact(0)
    probes = bundle_probes(7)
    assert [p.name for p in probes] == [p.name for p in BUNDLE_PROBES]
    assert probes[-1].fact.argv[-1] == "7" and BUG_REPORT.fact.argv[-1] == "120"
    # `diagnose --host` does not run it (it can take minutes); the bundle does
    assert BUG_REPORT.name not in {p.name for p in PROBES}


async def test_absent_when_the_driver_did_not_install_it(tmp_path: Path) -> None:
    require(shutil.which("nvidia-bug-report.sh") is None, "this machine has NVIDIA's script installed")
    rec = await run_probe(LocalTransport(env={"PATH": "/usr/bin:/bin"}), BUG_REPORT, fact_for(BUG_REPORT, None, None))
    assert (rec.status, rec.exit_status) == ("absent", ABSENT) and "not installed" in (rec.error or "")


async def test_healthy_report_is_read_uncompressed(tmp_path: Path) -> None:
    node = _lab_bin(tmp_path)
    rec = await run_probe(node, BUG_REPORT, bundle_probes(60)[-1].fact)
    assert rec.status == "ok", (rec.error, rec.output)
    assert "Start of NVIDIA bug report log file." in rec.output and "End of NVIDIA bug report log file." in rec.output
    assert "Driver Version                            : 595.71.05" in rec.output


async def test_hanging_report_is_stopped_at_its_bound_and_says_so(tmp_path: Path) -> None:
    node = _lab_bin(tmp_path, "bug-report-hangs")
    probe = bundle_probes(2)[-1]
    rec = await run_probe(node, probe, probe.fact)
    assert (rec.status, rec.exit_status) == ("timeout", TIMED_OUT), (rec.error, rec.output)
    assert rec.error is not None and "timed out after 2 s" in rec.error
    # what the script wrote before it hung is kept (its sections are gzip members of their own)
    assert "Start of NVIDIA bug report log file." in rec.output and "/proc/driver/nvidia/version" in rec.output
    assert "End of NVIDIA bug report log file." not in rec.output
    # the bundle's manifest says so, and its text names the failed probe
    ev = Evidence(host="local", vmid=None, venv=None, records=[rec], started="s", finished="f")
    out = write_bundle(ev, tmp_path / "b.tar.gz", include_runs=False)
    (entry,) = [p for p in out.manifest["probes"] if p["name"] == BUG_REPORT.name]
    assert entry["status"] == "timeout" and "timed out" in entry["error"]
    assert entry["file"] == "node/nvidia-bug-report.log"
    back = read_bundle(out.path)
    assert "timed out after 2 s" in back.report_text()


async def test_diagnose_bundle_reads_the_report(tmp_path: Path) -> None:
    """An Xid line in the report (NVIDIA's kernel log section) is diagnosed from the bundle."""
    rec = await run_probe(_lab_bin(tmp_path), BUG_REPORT, bundle_probes(60)[-1].fact)
    rec.output += "[ 8123.456789] NVRM: Xid (PCI:0000:16:00): 79, pid=2231, name=python3, GPU has fallen off the bus.\n"
    ev = Evidence(host="local", vmid=None, venv=None, records=[rec], started="s", finished="f")
    out = write_bundle(ev, tmp_path / "b.tar.gz", include_runs=False)
    findings = bundle_findings(out.path)
    assert findings and "79" in " ".join(findings[0].evidence), findings


# --- the lab, as a user runs it -------------------------------------------------------------------------


def _cli(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provisioner", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_lab_bundle_with_a_hanging_bug_report(tmp_path: Path) -> None:
    require(os.geteuid() == 0, "the lab needs root (mount namespaces, device nodes)")
    root = tmp_path / "lab"
    env = dict(os.environ, PROVISIONER_LAB_ROOT=str(root), PROVISIONER_STATE_DIR=str(root / "state"),
               NO_COLOR="1", COLUMNS="240")
    up = lab_up(env, root, scenarios=["bug-report-hangs"])
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        out = tmp_path / "b.tar.gz"
        res = _cli(env, "bundle", "--lab", "--container", "200", "-o", str(out), "--bug-report-timeout", "3",
                   "--json", "--no-runs")
        assert res.returncode == 0, res.stdout + res.stderr
        doc = json.loads(res.stdout.strip().splitlines()[-1])
        failed = {f["name"]: f for f in doc["failed_probes"]}
        assert failed[BUG_REPORT.name]["status"] == "timeout" and "timed out" in failed[BUG_REPORT.name]["why"]
        with tarfile.open(out) as tar:
            fh = tar.extractfile("provisioner-bundle/manifest.json")
            assert fh is not None
            manifest = json.load(fh)
        probes = {p["name"]: p for p in manifest["probes"]}
        assert probes[BUG_REPORT.name]["status"] == "timeout"
        # every failed probe the manifest holds is named in the output, and only those
        assert set(failed) == {n for n, p in probes.items() if p["status"] in ("failed", "timeout", "unreachable")}
        text = _cli(env, "bundle", "--lab", "--container", "200", "-o", str(tmp_path / "c.tar.gz"),
                    "--bug-report-timeout", "3", "--no-runs")
        assert f"✗ {BUG_REPORT.name}" in text.stdout, text.stdout
        diag = _cli(env, "diagnose", "--bundle", str(out), "--json")
        # the timed-out bug report is a ✗ check: a fault, exit 1 (as `diagnose --lab` on that host)
        assert diag.returncode == 1 and json.loads(diag.stdout.strip().splitlines()[-1])["verdict"] == "fault", \
            diag.stderr
    finally:
        lab_down(env, root)
