"""Match rules against a cleaned log and turn the hits into ranked findings."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from provisioner.diagnose.catalogue import message_patterns
from provisioner.diagnose.evidence import EXTRACTOR_REGEXES, LogEvidence, decide, extract_evidence, places_of
from provisioner.diagnose.extract import log_fields
from provisioner.diagnose.model import CATEGORIES, Category, Finding, Rule, RunnerUp
from provisioner.diagnose.normalize import TYPOGRAPHY, CleanLog, clean_log
from provisioner.diagnose.redact import redact
from provisioner.diagnose.rules import RULES
from provisioner.diagnose.rx import Regex, compile_rx, compile_rx_bytes, literal_regex, next_span, required_literals

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


def rule_patterns(rule: Rule) -> tuple[str, ...]:
    """What a rule matches: its cited catalogue messages' matchers (every wording), then its own patterns."""
    return message_patterns(rule.messages) + rule.patterns


def compile_pattern(pattern: str) -> Regex:
    """A rule pattern as a linear-time RE2 regex (case-insensitive, `^`/`$` per line)."""
    return compile_rx(to_regex(pattern))


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
    if not all(compile_pattern(r).search(text) for r in rule.requires):
        return False
    return not (rule.unless is not None and compile_pattern(rule.unless).search(text))


def match_rules(log: CleanLog, rules: Iterable[Rule] = RULES, context_text: str | None = None) -> list[RuleHit]:
    """Every rule that matches the log, with the visible lines it matched. `context_text` (default: the
    log's own text) is where `context`/`unless` are looked for: the whole log when `log` holds only the
    prefilter's windows of it."""
    hits: list[RuleHit] = []
    for rule in rules:
        lines: list[int] = []
        for pattern in rule_patterns(rule):
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
        if lines and _rule_applies(rule, log.full_text if context_text is None else context_text):
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


FAST_PATH_CHARS = 256 * 1024  # a longer log is first cut down to the windows the literal prefilter selects
WINDOW_LINES = 2  # lines kept either side of a prefilter hit (messages wrapped over a few lines)
HEAD_CHARS = 64 * 1024  # the log's head is always kept too: fields (driver, GPU, versions) are read there
MAX_WINDOW_CHARS = 8 << 20  # the windows kept when hits are everywhere: the first ones and the last ones


@dataclass(frozen=True)
class Prefilter:
    """One RE2 alternation of the rules' required literals (lower case), and the patterns without a usable
    literal (each searched once over the whole log)."""

    regex: Regex
    bare: tuple[Regex, ...]


@lru_cache(maxsize=4)
def prefilter(rules: tuple[Rule, ...] = RULES) -> Prefilter:
    literals: set[str] = set()
    bare: list[Regex] = []
    # the rules' patterns and the evidence extractors' (a long log's windows hold the lines either reads)
    for regex in [*(to_regex(p) for rule in rules for p in rule_patterns(rule)), *EXTRACTOR_REGEXES]:
        lits = required_literals(regex)
        if lits is None:
            bare.append(compile_rx_bytes(regex))
        else:
            literals |= lits
    # a typographic quote or space (a paste through a web page) keeps its lines too: `clean_log` folds them to
    # the ASCII the rules' literals hold, which the byte-level prefilter cannot see through
    literals |= set(TYPOGRAPHY)
    alternation = "|".join(literal_regex(x) for x in sorted(literals, key=len, reverse=True))
    return Prefilter(compile_rx_bytes(alternation, exact=True), tuple(bare))


def _window(data: bytes, pos: int, floor: int) -> tuple[int, int]:
    """The lines around offset `pos` (WINDOW_LINES either side), starting after `floor`."""
    start = pos
    for _ in range(WINDOW_LINES + 1):
        start = data.rfind(b"\n", 0, start)
        if start < 0:
            break
    end = pos
    for _ in range(WINDOW_LINES + 1):
        nxt = data.find(b"\n", end + 1)
        if nxt < 0:
            end = len(data)
            break
        end = nxt
    return max(start + 1, floor, 0), end


def select_windows(text: str, rules: tuple[Rule, ...] = RULES) -> str:
    """The log's head and the lines near a prefilter literal (each distinct window once): one linear pass
    over the text (RE2 on the lower-cased bytes) before any rule pattern runs."""
    pf = prefilter(rules)
    data = text.encode("utf-8", errors="replace")
    spans: list[tuple[int, int]] = []
    for rx in pf.bare:
        for n, m in enumerate(rx.finditer(data)):
            if n >= HITS_PER_PATTERN:
                break
            spans.append(_window(data, m.start(), 0))
    low = data.lower()  # ASCII-only: offsets stay those of `data`
    end = -1
    while end + 1 <= len(low):  # (a window may end the log: RE2 refuses a start past the end, noisily)
        hit = next_span(pf.regex, low, end + 1)
        if hit is None:
            break
        start, end = _window(data, hit[0], end + 1)
        spans.append((start, end))
    head_end = data.rfind(b"\n", 0, HEAD_CHARS)
    windows: list[bytes] = [data[: max(head_end, 0)]]
    seen: set[bytes] = set()
    for start, end in sorted(spans):
        window = data[start:end]
        if window not in seen:
            seen.add(window)
            windows.append(window)
    return _cap_windows(windows).decode("utf-8", errors="replace")


def _cap_windows(windows: list[bytes]) -> bytes:
    """The windows joined; when they exceed MAX_WINDOW_CHARS, the first eighth and the last seven."""
    total = sum(len(w) + 1 for w in windows)
    if total <= MAX_WINDOW_CHARS:
        return b"\n".join(windows)
    head: list[bytes] = []
    size = 0
    for w in windows:
        if size + len(w) > MAX_WINDOW_CHARS // 8:
            break
        head.append(w)
        size += len(w) + 1
    tail: list[bytes] = []
    size = 0
    for w in reversed(windows[len(head) :]):
        if size + len(w) > MAX_WINDOW_CHARS - MAX_WINDOW_CHARS // 8:
            break
        tail.append(w)
        size += len(w) + 1
    return b"\n".join([*head, *reversed(tail)])


def log_candidates(text: str, extra_fields: Mapping[str, str] | None = None) -> list[Candidate]:
    """Candidates from a log text (no ranking). A long log is first reduced to the windows around the
    literals some rule or field needs (the rules then run on those windows only; `context`/`unless` still
    look at the whole log)."""
    rules: tuple[Rule, ...] = RULES
    context_text: str | None = None
    if len(text) > FAST_PATH_CHARS:
        context_text, text = text, select_windows(text)
    log = clean_log(text)
    fields = dict(extra_fields or {})
    for view in reversed(log.views):  # the line-by-line view wins; unwrapped fills gaps
        fields.update(log_fields(view.text))
    out = _candidates_from_hits(match_rules(log, rules, context_text), log, fields)
    ev = extract_evidence(log.full_text, fields)
    if context_text is not None:
        places_of(context_text, ev)
    return out + evidence_candidates(ev)


def evidence_candidates(ev: LogEvidence) -> list[Candidate]:
    """The conclusions the log's typed evidence supports (`diagnose.evidence.decide`), as candidates."""
    return [Candidate(category=h.category, confidence=h.confidence, best=h.name, root_cause=h.root_cause, fix=h.fix,
                      rules=[h.name], evidence=list(h.evidence), generic_only=False, demotes=frozenset(h.demotes))
            for h in decide(ev)]
