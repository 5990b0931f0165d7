"""`diagnose --host` as a doctor: what it checked (✓/✗ per probe, the facts the steps read) and its
findings merged by root cause, best first (issue 27 item 2)."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass

from provisioner.diagnose import Finding
from provisioner.diagnose.model import EvidenceLine
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


#: the reading tool could not look: no permission (dmesg_restrict, a non-root user) -> not checked
_NO_ACCESS_RE = re.compile(r"\b(?:permission denied|operation not permitted)\b", re.IGNORECASE)
#: the tool's own complaint, "prog: what: No such file or directory": the thing it reads is not there
_TOOL_MISSING_RE = re.compile(r"^[\w./-]+: .*\bno such file or directory\b", re.IGNORECASE)
#: an error or warning printed beside a probe's result (not by a probe that reads text for the rules)
_ERROR_RE = re.compile(
    r"^(?:[\w./\[\]-]+: )*(?:error|fatal|failed|warning)\b"  # "ERROR: ...", "nvidia-smi: error: ..."
    r"|traceback \(most recent call last\)"
    r"|\b[A-Z]\w*(?:Error|Warning|Exception): "  # "UserWarning: CUDA initialization: ...", "RuntimeError: ..."
    r"|nvidia-smi has failed|failed to initialize nvml|couldn't communicate with the nvidia driver",
    re.IGNORECASE)


def _error_line(record: ProbeRecord, content: bool) -> tuple[str, bool] | None:
    """The first line of a probe's output that says it went wrong, and whether it only says the probe
    could not look (no permission, the file it reads not there) rather than that something is broken."""
    for raw in record.output.splitlines():
        line = " ".join(raw.split())
        if not line:
            continue
        if _NO_ACCESS_RE.search(line) and (not content or re.match(r"^[\w./-]+: ", line)):
            return line, True
        if _TOOL_MISSING_RE.search(line):
            return line, True
        if not content and (m := _ERROR_RE.search(line)):
            return line[m.start():], False  # from what it says ("UserWarning: CUDA initialization: ..."), not the path
    return None


def _torch_problem(output: str) -> str | None:
    """What the torch probe's JSON report says is wrong: an import or CUDA error, or no GPU visible."""
    for line in reversed(output.splitlines()):
        s = line.strip()
        if not (s.startswith("{") and s.endswith("}")):
            continue
        try:
            report = json.loads(s)
        except json.JSONDecodeError:
            return None
        if not isinstance(report, dict):
            return None
        for key in ("error", "cuda_error"):
            if report.get(key):
                return str(report[key])
        if report.get("cuda") and report.get("available") is False:
            return f"torch {report.get('torch')} (CUDA {report.get('cuda')}): torch.cuda.is_available() is False"
        return None
    return None


def _cut(text: str) -> str:
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 1] + "…"


def check_of(record: ProbeRecord) -> Check:
    """A probe record as a check: its first output line when it passed, why when it did not.

    A probe that exited 0 is not ✓ when its output carries an error: an error or warning line (the
    torch probe: an error in its report, or no GPU visible to a CUDA build) makes it ✗; a line saying it
    could not look (permission denied, the file it reads absent) makes it – (not checked). A failed
    probe whose failure is only "no permission" is – as well: the host was not looked at, not found broken."""
    probe = BY_NAME.get(record.name)
    about = probe.description if probe is not None and probe.description else ""
    content = probe.reads_content if probe is not None else False
    if record.status == "ok":
        said = _error_line(record, content)
        if said is not None:
            line, unchecked = said
            return Check(record.name, None if unchecked else False,
                         _cut(("not checked: " if unchecked else "error in output: ") + line))
        if record.name == "ct.torch" and (problem := _torch_problem(record.output)):
            return Check(record.name, False, _cut(f"error in output: {problem}"))
        return Check(record.name, True, _first_line(record.output) or about)
    if record.status == "failed" and (said := _error_line(record, content)) is not None and said[1] \
            and _NO_ACCESS_RE.search(said[0]):
        return Check(record.name, None, _cut(f"not checked (no permission): {said[0]}"))
    if record.status == "absent":
        return Check(record.name, None, f"not present{': ' + record.error if record.error else ''}")
    if record.status == "skipped":
        return Check(record.name, None, record.error or "skipped")
    said_last = [ln for ln in record.output.splitlines() if ln.strip()]
    if record.status == "failed" and said_last and record.exit_status is not None:
        # the probe's own last words name what is wrong ("libcuda.so.1: not found by the loader ...")
        return Check(record.name, False, _cut(f"failed (exit status {record.exit_status}): "
                                              + " ".join(said_last[-1].split())))
    why = record.error or (f"exit status {record.exit_status}" if record.exit_status is not None else record.status)
    return Check(record.name, False, f"{record.status}: {_first_line(why)}")


def checks_of(evidence: Evidence) -> list[Check]:
    """Every probe the collection ran, in probe order."""
    return [check_of(r) for r in evidence.records]


def merge_by_cause(findings: list[Finding]) -> list[Finding]:
    """One finding per root cause, best first: a drift finding (rule `drift.*`) and a finding of the same
    category from the facts or a log name the same cause; the surer one keeps the lead, the other's rule
    and evidence join it (`evidence` and `evidence_lines` alike, with their line numbers). Other findings stay distinct (two drift findings too: each names its own repair).
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
        lines = _merged_lines(top, other)
        out[same] = dataclasses.replace(top, rules=rules, evidence=tuple(e.text for e in lines),
                                        evidence_lines=lines)
    return sorted(out, key=lambda f: -f.confidence)


def _numbered(f: Finding) -> list[EvidenceLine]:
    """Each of `f.evidence` with its number from `f.evidence_lines` (None where it has none: a drift finding's
    line, a fact)."""
    line_of: dict[str, int] = {}
    for e in f.evidence_lines:
        if e.line is not None:
            line_of.setdefault(e.text, e.line)
    return [EvidenceLine(line_of.get(text), text) for text in f.evidence]


def _merged_lines(top: Finding, other: Finding) -> tuple[EvidenceLine, ...]:
    """`top`'s evidence lines then `other`'s, each text once (at its first place), with the number either
    finding gives it: `evidence` and `evidence_lines` stay one list, in the same order."""
    merged: dict[str, int | None] = {}
    for e in (*_numbered(top), *_numbered(other)):
        if merged.get(e.text) is None:  # a text seen without a number takes the other finding's number
            merged[e.text] = e.line
    return tuple(EvidenceLine(line, text) for text, line in merged.items())


def _drift(f: Finding) -> bool:
    return any(r.startswith("drift.") for r in (f.rules or (f.rule,)))


def is_fault(findings: list[Finding], checks: list[Check]) -> bool:
    """The one rule for every source (`diagnose --log/--facts/--bundle/--host/--local/--lab`): a fault is a
    finding (a root cause named), or a check that failed (✗). A check that could not look (–) is none."""
    return bool(findings) or any(c.ok is False for c in checks)


def verdict(findings: list[Finding], checks: list[Check]) -> str:
    """One closing line for a host or bundle check: "healthy: …" or what is wrong, in a few words."""
    passed = sum(1 for c in checks if c.ok)
    unchecked = [c.name for c in checks if c.ok is None]
    failed = [c.name for c in checks if c.ok is False]
    if not is_fault(findings, checks):
        rest = f"; {len(unchecked)} not checked here ({', '.join(unchecked[:4])}{', …' if len(unchecked) > 4 else ''})" \
            if unchecked else ""
        return f"healthy: {passed} checks passed, no fault found{rest}"
    parts = []
    if findings:
        parts.append(f"{len(findings)} finding{'s' if len(findings) != 1 else ''} (first: {findings[0].category})")
    if failed:
        parts.append(f"{len(failed)} check{'s' if len(failed) != 1 else ''} failed ({', '.join(failed[:4])}"
                     f"{', …' if len(failed) > 4 else ''})")
    tail = "" if findings else "; no known failure signature names the cause"
    return "not healthy: " + ", ".join(parts) + tail
