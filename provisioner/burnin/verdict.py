"""Per-phase verdicts and the overall one. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from provisioner.burnin.shapes import PhaseData, PhaseDoc, Verdict

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"
_RANK = {SKIP: 0, PASS: 1, WARN: 2, FAIL: 3}


@dataclass
class PhaseResult:
    """One phase: a status, the reasons behind it (human sentences) and its data."""

    name: str
    status: str = PASS
    reasons: list[str] = field(default_factory=list)
    data: PhaseData = field(default_factory=lambda: PhaseData())
    notes: list[str] = field(default_factory=list)  # context that does not change the status

    def fail(self, reason: str) -> None:
        self.reasons.append(reason)
        self.status = FAIL

    def warn(self, reason: str) -> None:
        self.reasons.append(reason)
        if _RANK[self.status] < _RANK[WARN]:
            self.status = WARN

    def skip(self, reason: str) -> None:
        self.reasons.append(reason)
        self.status = SKIP

    def note(self, text: str) -> None:
        self.notes.append(text)

    def to_dict(self) -> PhaseDoc:
        return {"status": self.status, "reasons": list(self.reasons), "notes": list(self.notes), **self.data}


def worst(statuses: list[str]) -> str:
    """The most severe status; an empty list or all-skip is 'skip'."""
    if not statuses:
        return SKIP
    return max(statuses, key=lambda s: _RANK[s])


def overall(phases: dict[str, PhaseResult]) -> Verdict:
    """'fail' if any phase failed, else 'pass' (warnings are reported, not fatal)."""
    failed = [name for name, p in phases.items() if p.status == FAIL]
    warned = [name for name, p in phases.items() if p.status == WARN]
    reasons = [f"{name}: {r}" for name in failed for r in phases[name].reasons]
    return {
        "status": FAIL if failed else PASS,
        "failed_phases": failed,
        "warned_phases": warned,
        "reasons": reasons,
    }
