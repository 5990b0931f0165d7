"""Match rules against a cleaned log and turn the hits into ranked findings."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from provisioner.diagnose.extract import log_fields
from provisioner.diagnose.model import CATEGORIES, Category, Finding, Rule, RunnerUp
from provisioner.diagnose.normalize import CleanLog, clean_log
from provisioner.diagnose.redact import redact
from provisioner.diagnose.rules import RULES

STRONG = 0.7  # a specific finding this sure makes generic-only findings redundant
AGREEMENT_BONUS = 0.03  # per additional rule agreeing on the same category
MAX_CONFIDENCE = 0.99
MAX_EVIDENCE = 8
HITS_PER_PATTERN = 3
MAX_RUNNERS_UP = 3
RUNNER_UP_EVIDENCE = 4
DEMOTE_MARGIN = 0.05  # a demoted category ends this far below the finding that explains it

# Shown when a template field is unknown and not inside an optional [...] segment.
DEFAULTS: dict[str, str] = {
    "gpu": "the GPU",
    "gpu_arch": "this GPU",
    "gpu_cc": "this GPU",
    "archs": "other architectures",
    "library": "a required library",
    "package": "the requested packages",
    "vmid": "<vmid>",
    "torch_version": "torch",
    "driver_cuda": "the driver's CUDA version",
}

_OPTIONAL_RE = re.compile(r"\[([^\[\]]*)\]")
_FIELD_RE = re.compile(r"\{(\w+)\}")


def to_regex(pattern: str) -> str:
    """A literal space outside a character class matches any whitespace run (line breaks too)."""
    out: list[str] = []
    in_class = False
    escaped = False
    for ch in pattern:
        if escaped:
            out.append(ch)
            escaped = False
        elif ch == "\\":
            out.append(ch)
            escaped = True
        elif in_class:
            out.append(ch)
            if ch == "]":
                in_class = False
        elif ch == "[":
            out.append(ch)
            in_class = True
        elif ch == " ":
            if not (out and out[-1] == r"\s+"):
                out.append(r"\s+")
        else:
            out.append(ch)
    return "".join(out)


@lru_cache(maxsize=1024)
def compile_pattern(pattern: str) -> re.Pattern[str]:
    return re.compile(to_regex(pattern), re.IGNORECASE | re.MULTILINE)


def render(template: str, fields: Mapping[str, str]) -> str:
    """Fill `{field}` slots; `[ ... ]` segments are kept only when all their fields are known."""

    def optional(m: re.Match[str]) -> str:
        names = _FIELD_RE.findall(m.group(1))
        return m.group(1) if all(n in fields for n in names) else ""

    text = _OPTIONAL_RE.sub(optional, template)
    text = _FIELD_RE.sub(lambda m: fields.get(m.group(1)) or DEFAULTS.get(m.group(1), "?"), text)
    return " ".join(text.split())


@dataclass
class RuleHit:
    """The lines one rule matched."""

    rule: Rule
    lines: list[int] = field(default_factory=list)


def _rule_applies(rule: Rule, text: str) -> bool:
    if rule.context is not None and not compile_pattern(rule.context).search(text):
        return False
    return not (rule.unless is not None and compile_pattern(rule.unless).search(text))


def match_rules(log: CleanLog, rules: Iterable[Rule] = RULES) -> list[RuleHit]:
    """Every rule that matches the log, with the visible lines it matched."""
    hits: list[RuleHit] = []
    for rule in rules:
        if not _rule_applies(rule, log.full_text):
            continue
        lines: list[int] = []
        for pattern in rule.patterns:
            rx = compile_pattern(pattern)
            for view in log.views:
                for n, m in enumerate(rx.finditer(view.text)):
                    if n >= HITS_PER_PATTERN:
                        break
                    for idx in view.lines_for_span(m.start(), m.end()):
                        if idx not in lines:
                            lines.append(idx)
                if lines:
                    break  # the plain view matched; the unwrapped view would repeat it
        if lines:
            hits.append(RuleHit(rule, sorted(lines)))
    return hits


@dataclass
class Candidate:
    """Evidence gathered for one category before ranking."""

    category: Category
    confidence: float
    best: str
    root_cause: str
    fix: str
    rules: list[str]
    evidence: list[str]
    generic_only: bool
    from_facts: bool = False  # facts findings are distinct problems: never merged with each other
    demotes: frozenset[Category] = frozenset()


def _candidates_from_hits(hits: list[RuleHit], log: CleanLog, fields: Mapping[str, str]) -> list[Candidate]:
    out: list[Candidate] = []
    categories: tuple[Category, ...] = CATEGORIES
    for category in categories:
        mine = [h for h in hits if h.rule.category == category]
        primaries = [h for h in mine if not h.rule.supporting]
        if not primaries:
            continue
        primaries.sort(key=lambda h: (-h.rule.confidence, h.lines[0]))
        best = primaries[0].rule
        ordered = primaries + [h for h in mine if h.rule.supporting]
        evidence: list[str] = []
        for hit in ordered:
            for line in log.evidence(hit.lines[:1] if hit.rule.supporting else hit.lines):
                if line not in evidence:
                    evidence.append(line)
        conf = min(MAX_CONFIDENCE, best.confidence + AGREEMENT_BONUS * (len(mine) - 1))
        out.append(
            Candidate(
                category=category,
                confidence=conf,
                best=best.name,
                root_cause=render(best.root_cause, fields),
                fix=render(best.fix, fields),
                rules=[h.rule.name for h in ordered],
                evidence=evidence,
                generic_only=all(h.rule.generic for h in primaries),
                demotes=frozenset(c for h in primaries for c in h.rule.demotes if c != category),
            )
        )
    return out


def _merge(a: Candidate, b: Candidate) -> Candidate:
    """Fold two candidates of one category into the surer one (agreement adds a little)."""
    top, other = (a, b) if a.confidence >= b.confidence else (b, a)
    top.confidence = min(MAX_CONFIDENCE, top.confidence + AGREEMENT_BONUS * len(other.rules))
    top.rules += [r for r in other.rules if r not in top.rules]
    top.evidence += [e for e in other.evidence if e not in top.evidence]
    top.generic_only = top.generic_only and other.generic_only
    top.from_facts = top.from_facts or other.from_facts
    top.demotes = top.demotes | other.demotes
    return top


def _apply_demotions(cands: list[Candidate]) -> None:
    """A category some finding explains (its rule `demotes` it) ranks below that finding."""
    for _ in range(len(cands)):  # demotions can chain; a fixed point is reached quickly
        changed = False
        for c in cands:
            for o in cands:
                if o is not c and o.category in c.demotes and o.confidence >= c.confidence:
                    o.confidence = max(0.05, c.confidence - DEMOTE_MARGIN)
                    changed = True
        if not changed:
            return


def _runner_up(c: Candidate) -> RunnerUp:
    return RunnerUp(
        category=c.category,
        confidence=round(c.confidence, 2),
        root_cause=c.root_cause,
        evidence=tuple(c.evidence[:RUNNER_UP_EVIDENCE]),
        rule=c.best,
    )


def rank(candidates: list[Candidate], known_secrets: Iterable[str] = ()) -> list[Finding]:
    """Merge candidates per category, drop redundant generic ones, order best first."""
    facts = sorted((c for c in candidates if c.from_facts), key=lambda c: -c.confidence)
    merged: dict[str, Candidate] = {}
    for c in (c for c in candidates if not c.from_facts):
        prev = merged.get(c.category)
        merged[c.category] = c if prev is None else _merge(prev, c)
    kept_facts: list[Candidate] = []
    for f in facts:
        same = merged.pop(f.category, None)  # a log finding corroborates the best facts finding
        kept_facts.append(f if same is None else _merge(f, same))
    everything = kept_facts + list(merged.values())
    _apply_demotions(everything)
    strong = any(not c.generic_only and c.confidence >= STRONG for c in everything)
    kept = [c for c in everything if not (strong and c.generic_only)]
    dropped = [c for c in everything if strong and c.generic_only]
    order = {cat: i for i, cat in enumerate(CATEGORIES)}
    kept.sort(key=lambda c: (-c.confidence, order[c.category]))
    secrets = tuple(known_secrets)
    findings: list[Finding] = []
    for i, c in enumerate(kept):
        others = sorted(
            (o for o in kept[i + 1 :] + dropped if o.category != c.category),
            key=lambda o: (-o.confidence, order[o.category]),
        )
        # the first finding lists its competitors; later findings are runners-up themselves
        runners = tuple(_redacted(_runner_up(o), secrets) for o in others[:MAX_RUNNERS_UP]) if i == 0 else ()
        findings.append(
            Finding(
                category=c.category,
                confidence=round(c.confidence, 2),
                root_cause=c.root_cause,
                fix=c.fix,
                evidence=tuple(redact(e, secrets) for e in c.evidence[:MAX_EVIDENCE]),
                rule=c.best,
                rules=tuple(c.rules),
                also_possible=runners,
            )
        )
    return findings


def _redacted(r: RunnerUp, secrets: tuple[str, ...]) -> RunnerUp:
    return RunnerUp(r.category, r.confidence, r.root_cause, tuple(redact(e, secrets) for e in r.evidence), r.rule)


def log_candidates(text: str, extra_fields: Mapping[str, str] | None = None) -> list[Candidate]:
    """Candidates from a log text (no ranking)."""
    log = clean_log(text)
    fields = dict(extra_fields or {})
    for view in reversed(log.views):  # the line-by-line view wins; unwrapped fills gaps
        fields.update(log_fields(view.text))
    return _candidates_from_hits(match_rules(log), log, fields)
