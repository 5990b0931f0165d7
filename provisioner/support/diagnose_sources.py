"""Evidence sources for `provisioner diagnose`: a live host (`--host`) or a support bundle (`--bundle`).

    findings = await live_findings(node_transport, vmid=200, venv="/opt/torch-venv")
    findings = bundle_findings("support.tar.gz")

Both collect (or read) the probes of `provisioner.support.probes`, derive the live facts and run
`provisioner.diagnose.diagnose(log_text, facts=...)`; findings come best first, with their
evidence lines redacted. A node that cannot be reached raises `HostUnreachable` (exit code 4);
an unreadable bundle raises `BundleError` (exit code 2).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from provisioner import drift
from provisioner.diagnose import Category, Finding, diagnose
from provisioner.support.bundle import BundleError, read_bundle
from provisioner.support.collect import collect
from provisioner.support.doctor import Check, checks_of, merge_by_cause
from provisioner.support.evidence import Evidence
from provisioner.support.scrub import Scrubber
from provisioner.transport.base import Transport, TransportError

__all__ = ["BundleError", "Check", "HostUnreachable", "bundle_findings", "bundle_report", "evidence_findings",
           "live_findings", "live_report"]


class HostUnreachable(TransportError):
    """The node could not be reached (connection refused, host key refused, authentication failed)."""


def evidence_findings(evidence: Evidence, log_text: str = "", known_secrets: Iterable[str] = ()) -> list[Finding]:
    """Findings from collected evidence (plus an optional log text), best first."""
    return diagnose(log_text, evidence.facts, Scrubber(known_secrets).secrets)


async def live_findings(
    node: Transport,
    vmid: int | None = None,
    venv: str | None = None,
    *,
    log_text: str = "",
    known_secrets: Iterable[str] = (),
) -> list[Finding]:
    """Probe the node (and container `vmid`, torch in `venv`) now and diagnose what is found."""
    findings, _ = await live_report(node, vmid, venv, log_text=log_text, known_secrets=known_secrets)
    return findings


async def live_report(
    node: Transport,
    vmid: int | None = None,
    venv: str | None = None,
    *,
    log_text: str = "",
    known_secrets: Iterable[str] = (),
) -> tuple[list[Finding], list[Check]]:
    """`live_findings` plus what was checked (one ✓/✗ per probe); findings merged by root cause, best first."""
    drifted: list[Finding] = []
    try:
        evidence = await collect(node, vmid, venv)
        if evidence.unreachable is None and vmid is not None:
            drifted = drift_findings(await drift.gather(node, vmid))
    finally:
        await node.close()
    if evidence.unreachable is not None:
        raise HostUnreachable(evidence.unreachable)
    findings = merge_by_cause(drifted + evidence_findings(evidence, log_text, known_secrets))
    return findings, checks_of(evidence)


#: drift kind -> the diagnosis category it belongs to (provisioner.drift names the finding itself)
DRIFT_CATEGORIES: dict[str, Category] = {
    "driver": "driver_lib_mismatch", "nodes": "container_device_missing", "boot_unit": "container_device_missing",
    "config": "proxmox_lxc", "gpus": "oom_or_hw", "container": "proxmox_lxc",
}


def drift_findings(report: drift.DriftReport) -> list[Finding]:
    """The drift report as diagnosis findings (rule ``drift.<kind>``): the same findings `plan --check`
    names and the wizard's Summary shows."""
    out = []
    for f in report.findings:
        fix = (f"replay the playbook: step {f.repair} repairs it (`provisioner plan PLAYBOOK --check` shows the plan)"
               if f.repair else "not repairable from the playbook: check the node's hardware (`nvidia-smi -L`, dmesg)")
        out.append(Finding(category=DRIFT_CATEGORIES[f.kind], confidence=0.95, root_cause=f"drift: {f.text}", fix=fix,
                           evidence=(f.text,), rule=f"drift.{f.kind}"))
    return out


def bundle_findings(path: str | Path, log_text: str = "") -> list[Finding]:
    """Diagnose the evidence stored in a support bundle written by `provisioner bundle`."""
    findings, _ = bundle_report(path, log_text)
    return findings


def bundle_report(path: str | Path, log_text: str = "") -> tuple[list[Finding], list[Check]]:
    """`bundle_findings` plus the bundle's probes as checks (✓/✗/– as `live_report` gives them), so a bundle
    and the live host it was taken from get the same verdict and exit code."""
    evidence = read_bundle(path)
    if evidence.unreachable is not None and not any(r.ran for r in evidence.records):
        raise BundleError(f"{path}: the bundle holds no evidence (node was unreachable: {evidence.unreachable})")
    report = evidence.report_text()  # nvidia-bug-report.log: read as a log beside the facts
    findings = merge_by_cause(evidence_findings(evidence, "\n".join(t for t in (log_text, report) if t)))
    return findings, checks_of(evidence)
