"""`diagnose --host` as a doctor: what it checked (✓/✗ per probe, the facts the steps read) and its
findings merged by root cause, best first (issue 27 item 2)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from provisioner.diagnose import Finding
from provisioner.support.evidence import Evidence, ProbeRecord
from provisioner.support.probes import BY_NAME

DETAIL_CHARS = 100


@dataclass(frozen=True)
class Check:
    """One probe of the collection: passed (True), failed (False) or not applicable here (None)."""

    name: str
    ok: bool | None
    detail: str

    @property
    def mark(self) -> str:
        return "✓" if self.ok else ("✗" if self.ok is False else "–")

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = " ".join(line.split())
        if line:
            return line if len(line) <= DETAIL_CHARS else line[: DETAIL_CHARS - 1] + "…"
    return ""


def check_of(record: ProbeRecord) -> Check:
    """A probe record as a check: its first output line when it passed, why when it did not."""
    probe = BY_NAME.get(record.name)
    about = probe.description if probe is not None and probe.description else ""
    if record.status == "ok":
        return Check(record.name, True, _first_line(record.output) or about)
    if record.status == "absent":
        return Check(record.name, None, f"not present{': ' + record.error if record.error else ''}")
    if record.status == "skipped":
        return Check(record.name, None, record.error or "skipped")
    why = record.error or (f"exit status {record.exit_status}" if record.exit_status is not None else record.status)
    return Check(record.name, False, f"{record.status}: {_first_line(why)}")


def checks_of(evidence: Evidence) -> list[Check]:
    """Every probe the collection ran, in probe order."""
    return [check_of(r) for r in evidence.records]


def merge_by_cause(findings: list[Finding]) -> list[Finding]:
    """One finding per root cause, best first: a drift finding (rule `drift.*`) and a finding of the same
    category from the facts or a log name the same cause; the surer one keeps the lead, the other's rule
    and evidence join it. Other findings stay distinct (two drift findings too: each names its own repair).
    Stable order for equal confidence."""
    out: list[Finding] = []
    for f in findings:
        # exactly one side from drift: two drift findings (the boot unit, the nodes it makes) stay two repairs
        same = next((i for i, o in enumerate(out) if o.category == f.category and _drift(o) != _drift(f)), None)
        if same is None:
            out.append(f)
            continue
        o = out[same]
        top, other = (o, f) if o.confidence >= f.confidence else (f, o)
        rules = tuple(dict.fromkeys((*(top.rules or (top.rule,)), *(other.rules or (other.rule,)))))
        evidence = tuple(dict.fromkeys((*top.evidence, *other.evidence)))
        out[same] = dataclasses.replace(top, rules=rules, evidence=evidence)
    return sorted(out, key=lambda f: -f.confidence)


def _drift(f: Finding) -> bool:
    return any(r.startswith("drift.") for r in (f.rules or (f.rule,)))
