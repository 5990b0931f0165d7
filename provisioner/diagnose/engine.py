"""Match rules against a cleaned log and turn the hits into ranked findings."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from provisioner.diagnose.catalogue import message_patterns
from provisioner.diagnose.evidence import (
    EXTRACTOR_REGEXES,
    PLUGIN_ASKED,
    LogEvidence,
    decide,
    extract_evidence,
    lxc_words,
    negated_mention,
    places_of,
    probe_line,
)
from provisioner.diagnose.extract import log_fields
from provisioner.diagnose.layers import LayerGuess, gpu_failure, guess_layer
from provisioner.diagnose.layers import numbered as layer_evidence
from provisioner.diagnose.model import CATEGORIES, Category, EvidenceLine, Finding, Rule, RunnerUp
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


@lru_cache(maxsize=4096)
def compile_pattern(pattern: str) -> Regex:
    """A rule pattern as a linear-time RE2 regex (case-insensitive, `^`/`$` per line). Cached: every
    `diagnose` call looks up ~600 of them, and rewriting each (`to_regex`) was most of a short log's cost."""
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


def _rule_applies(rule: Rule, texts: tuple[str, ...]) -> bool:
    """`context`, each of `requires` and `unless` are each looked for in every text (the line-by-line view and the
    unwrapped one): a requirement a terminal's wrap split over two lines is still met, a stop still stops."""
    def found(pattern: str) -> bool:
        rx = compile_pattern(pattern)
        return any(rx.search(t) is not None for t in texts)

    if rule.context is not None and not found(rule.context):
        return False
    if not all(found(r) for r in rule.requires):
        return False
    return not (rule.unless is not None and found(rule.unless))


def match_rules(log: CleanLog, rules: Iterable[Rule] = RULES, context_text: str | None = None) -> list[RuleHit]:
    """Every rule that matches the log, with the visible lines it matched. `context_text` (default: the
    log's own text) is where `context`/`unless` are looked for: the whole log when `log` holds only the
    prefilter's windows of it."""
    hits: list[RuleHit] = []
    # NCCL's plugin probe lines are read only where the log shows a network plugin was asked for (looked up once,
    # at the first probe line a pattern meets: most logs have none)
    plugin_asked: bool | None = None
    # a long log's rules run on the prefilter's windows: the whole log, and the windows' unwrapped view
    texts = tuple(v.text for v in log.views) if context_text is None else (context_text, *(v.text for v in log.views[1:]))
    for rule in rules:
        lines: list[int] = []
        for pattern in rule_patterns(rule):
            rx = compile_pattern(pattern)
            for view in log.views:
                n = 0
                for m in rx.finditer(view.text):
                    if n >= HITS_PER_PATTERN:
                        break
                    if negated_mention(view.text, m.start()):
                        continue  # "* No `GPU has fallen off the bus`": the reporter did not see it
                    if probe_line(view.text, m.start()):
                        if plugin_asked is None:
                            plugin_asked = PLUGIN_ASKED.search(
                                log.full_text if context_text is None else context_text) is not None
                        if not plugin_asked:
                            continue  # NCCL's plugin loader at INFO: an optional library it did not find
                    n += 1
                    for idx in view.lines_for_span(m.start(), m.end()):
                        if idx not in lines:
                            lines.append(idx)
                if lines:
                    break  # the plain view matched; the unwrapped view would repeat it
        if lines and _rule_applies(rule, texts):
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
    line_of: dict[str, int] = field(default_factory=dict)  # evidence line -> its number in the log (1-based)
    needs_symptom: bool = False  # kept only where some other candidate shows the log failed

    def add_evidence(self, text: str, number: int | None) -> None:
        """One evidence line once: the same text, or the same log line read twice (a rule's visible line and
        a fact's prefix-stripped one), is not repeated."""
        if text in self.evidence or (number is not None and number in self.line_of.values()):
            return
        self.evidence.append(text)
        if number is not None:
            self.line_of[text] = number

    def numbers(self) -> set[int]:
        return set(self.line_of.values())


def _numbered_evidence(log: CleanLog, indices: list[int], number: Callable[[int], int]) -> list[tuple[str, int]]:
    """`CleanLog.evidence`, each line with its number in the log the user has."""
    out: list[tuple[str, int]] = []
    for i in indices:
        for text in log.evidence([i]):
            out.append((text, number(i)))
    return out


def _candidates_from_hits(hits: list[RuleHit], log: CleanLog, fields: Mapping[str, str],
                          number: Callable[[int], int] | None = None, lxc: bool = False) -> list[Candidate]:
    """One candidate per category from the rules that matched. `lxc`: the log shows an LXC context (Proxmox,
    LXD, Incus, plain LXC), so a rule's `fix_lxc` (the fix in that tool's words) replaces its `fix`."""
    to_no: Callable[[int], int] = number if number is not None else (lambda i: i + 1)
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
        conf = min(MAX_CONFIDENCE, best.confidence + AGREEMENT_BONUS * (len(mine) - 1))
        fix = best.fix_lxc if lxc and best.fix_lxc else best.fix
        cand = Candidate(
            category=category,
            confidence=conf,
            best=best.name,
            root_cause=render(best.root_cause, fields),
            fix=render(fix, fields),
            rules=[h.rule.name for h in ordered],
            evidence=[],
            generic_only=all(h.rule.generic for h in primaries),
            demotes=frozenset(c for h in primaries for c in h.rule.demotes if c != category),
        )
        for hit in ordered:
            for text, n in _numbered_evidence(log, hit.lines[:1] if hit.rule.supporting else hit.lines, to_no):
                cand.add_evidence(text, n)
        out.append(cand)
    return out


def _merge(a: Candidate, b: Candidate) -> Candidate:
    """Fold two candidates of one category into the surer one (agreement adds a little)."""
    top, other = (a, b) if a.confidence >= b.confidence else (b, a)
    top.confidence = min(MAX_CONFIDENCE, top.confidence + AGREEMENT_BONUS * len(other.rules))
    top.rules += [r for r in other.rules if r not in top.rules]
    for e in other.evidence:
        top.add_evidence(e, other.line_of.get(e))
    top.needs_symptom = top.needs_symptom and other.needs_symptom
    top.generic_only = top.generic_only and other.generic_only
    top.from_facts = top.from_facts or other.from_facts
    top.demotes = top.demotes | other.demotes
    return top


def _apply_demotions(cands: list[Candidate]) -> None:
    """A category some finding explains (its rule `demotes` it) ranks below that finding. Two findings that each
    claim to explain the other: the claim of the more confident one stands (the other's would only undo it)."""
    first = {id(c): c.confidence for c in cands}

    def overruled(c: Candidate, o: Candidate) -> bool:
        return c.category in o.demotes and first[id(o)] > first[id(c)]

    for _ in range(len(cands)):  # demotions can chain; a fixed point is reached quickly
        changed = False
        for c in cands:
            for o in cands:
                if o is not c and o.category in c.demotes and o.confidence >= c.confidence and not overruled(c, o):
                    o.confidence = max(0.05, c.confidence - DEMOTE_MARGIN)
                    changed = True
        if not changed:
            return


def _lines_of(c: Candidate, texts: Iterable[str], secrets: tuple[str, ...]) -> tuple[EvidenceLine, ...]:
    return tuple(EvidenceLine(c.line_of.get(t), redact(t, secrets)) for t in texts)


def _runner_up(c: Candidate, shown: Candidate | None, secrets: tuple[str, ...]) -> RunnerUp:
    """`c` as an "also possible" beside `shown`: its evidence, and the lines of it `shown` does not cite."""
    evidence = c.evidence[:RUNNER_UP_EVIDENCE]
    if shown is None:
        differing = evidence
    else:
        theirs = shown.numbers()
        differing = [e for e in c.evidence if e not in shown.evidence and c.line_of.get(e) not in theirs]
        differing = differing[:RUNNER_UP_EVIDENCE]
    return RunnerUp(
        category=c.category,
        confidence=round(c.confidence, 2),
        root_cause=c.root_cause,
        evidence=tuple(redact(e, secrets) for e in evidence),
        rule=c.best,
        evidence_lines=_lines_of(c, evidence, secrets),
        differing=_lines_of(c, differing, secrets),
    )


def _same_cause(finding: Candidate, other: Candidate) -> bool:
    """`other` explains the same lines as `finding` (it reads one of its numbered lines, or `finding` names
    `other`'s category as a louder symptom of its cause): one root cause, shown once."""
    if other.from_facts or finding.from_facts:
        return False
    return other.category in finding.demotes or bool(finding.numbers() & other.numbers())


def rank(candidates: list[Candidate], known_secrets: Iterable[str] = ()) -> list[Finding]:
    """Merge candidates per category, drop redundant generic ones, fold the ones that read the same lines into
    the surer one's "also possible" (one finding per root cause), order best first."""
    if candidates and all(c.needs_symptom for c in candidates):
        return []  # a fact that is a cause only beside a failure, and the log shows none
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
    # one finding per root cause: a candidate reading a line an earlier finding reads is one of its alternatives
    shown: list[Candidate] = []
    folded: dict[int, list[Candidate]] = {}
    for c in kept:
        home = next((i for i, f in enumerate(shown) if _same_cause(f, c)), None)
        if home is None:
            shown.append(c)
        else:
            folded.setdefault(home, []).append(c)
    for d in dropped:  # a generic symptom the specific finding explains
        home = next((i for i, f in enumerate(shown) if _same_cause(f, d)), 0)
        folded.setdefault(home, []).append(d)
    secrets = tuple(known_secrets)
    findings: list[Finding] = []
    for i, c in enumerate(shown):
        alts = sorted(folded.get(i, []), key=lambda o: (-o.confidence, order[o.category]))
        if i == 0:  # the first finding also lists the other findings as competitors
            alts += [o for o in shown[1:] if o.category != c.category]
        alts = [o for o in alts if o.category != c.category]
        runners = tuple(_runner_up(o, c, secrets) for o in alts[:MAX_RUNNERS_UP])
        evidence = c.evidence[:MAX_EVIDENCE]
        findings.append(
            Finding(
                category=c.category,
                confidence=round(c.confidence, 2),
                root_cause=c.root_cause,
                fix=c.fix,
                evidence=tuple(redact(e, secrets) for e in evidence),
                rule=c.best,
                rules=tuple(c.rules),
                also_possible=runners,
                evidence_lines=_lines_of(c, evidence, secrets),
            )
        )
    return findings


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
    return select_windows_numbered(text, rules)[0]


def select_windows_numbered(text: str, rules: tuple[Rule, ...] = RULES) -> tuple[str, list[tuple[int, int]]]:
    """`select_windows`, and for each window kept (first line's index in the windows' text, that line's index
    in `text`): what turns a windows' line back into the log's line number."""
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
    windows: list[tuple[bytes, int]] = [(data[: max(head_end, 0)], 0)]
    seen: set[bytes] = set()
    line, counted = 0, 0
    for start, end in sorted(spans):
        window = data[start:end]
        if window not in seen:
            seen.add(window)
            line += data.count(b"\n", counted, start)
            counted = start
            windows.append((window, line))
    kept = _cap_windows([w for w, _ in windows])
    out: list[tuple[int, int]] = []
    at = 0
    for k in kept:
        window, first = windows[k]
        out.append((at, first))
        at += window.count(b"\n") + 1
    return b"\n".join(windows[k][0] for k in kept).decode("utf-8", errors="replace"), out


def _cap_windows(windows: list[bytes]) -> list[int]:
    """The windows kept (indices, in order): all of them, or when they exceed MAX_WINDOW_CHARS, the first eighth
    and the last seven."""
    total = sum(len(w) + 1 for w in windows)
    if total <= MAX_WINDOW_CHARS:
        return list(range(len(windows)))
    head: list[int] = []
    size = 0
    for i, w in enumerate(windows):
        if size + len(w) > MAX_WINDOW_CHARS // 8:
            break
        head.append(i)
        size += len(w) + 1
    tail: list[int] = []
    size = 0
    for i in range(len(windows) - 1, len(head) - 1, -1):
        w = windows[i]
        if size + len(w) > MAX_WINDOW_CHARS - MAX_WINDOW_CHARS // 8:
            break
        tail.append(i)
        size += len(w) + 1
    return [*head, *reversed(tail)]


def line_numbering(text: str, windows: list[tuple[int, int]] | None = None) -> Callable[[int], int]:
    """A visible line's index in `clean_log(text)` -> its number (1-based) in the log the user has: a bare `\r`
    (a progress bar) splits a line in `clean_log`, not in the user's editor; `windows` map the prefilter's
    windows back to the whole log."""
    raw_of: list[int] | None = None
    if "\r" in text:
        raw_of = []
        for n, raw in enumerate(text.replace("\r\n", "\n").split("\n")):
            parts = sum(1 for p in raw.split("\r") if p.strip()) if "\r" in raw else 1
            raw_of.extend([n] * max(parts, 1))
    starts = [w[0] for w in windows] if windows else []

    def number(i: int) -> int:
        raw = raw_of[i] if raw_of is not None and i < len(raw_of) else i
        if windows:
            k = max(bisect.bisect_right(starts, raw) - 1, 0)
            return windows[k][1] + (raw - windows[k][0]) + 1
        return raw + 1

    return number


def log_candidates(text: str, extra_fields: Mapping[str, str] | None = None, guess: bool = True) -> list[Candidate]:
    """Candidates from a log text (no ranking). A long log is first reduced to the windows around the
    literals some rule or field needs (the rules then run on those windows only; `context`/`unless` still
    look at the whole log). Facts are read first (`evidence.extract_evidence`): where it ran steers the fixes
    (`Rule.fix_lxc`), and the facts' own conclusions (versions compared, a hardware fault beside a generic
    line) are candidates beside the rules'. `guess`: where neither found anything, the layer the failing lines
    point at (`diagnose.layers`) is a low-confidence candidate."""
    rules: tuple[Rule, ...] = RULES
    context_text: str | None = None
    windows: list[tuple[int, int]] | None = None
    if len(text) > FAST_PATH_CHARS:
        context_text = text
        text, windows = select_windows_numbered(text)
    number = line_numbering(text, windows)
    log = clean_log(text)
    fields = dict(extra_fields or {})
    for view in reversed(log.views):  # the line-by-line view wins; unwrapped fills gaps
        fields.update(log_fields(view.text))
    ev = extract_evidence(log.full_text, fields, number)
    if context_text is not None:
        places_of(context_text, ev)
    fields.setdefault("lxc_words", lxc_words(ev))
    out = _candidates_from_hits(match_rules(log, rules, context_text), log, fields, number, ev.lxc_context)
    out += evidence_candidates(ev)
    if guess and all(c.needs_symptom for c in out):  # nothing found, or only a cause that needs a failure beside it
        if out:
            # a cause that needs a failure beside it (two versions compared) is shown by a failing line about the GPU
            # stack, not by any failing line (a `curl` 404)
            shown = gpu_failure(log.lines) is not None
            for c in out:
                c.needs_symptom = not shown
        out = [c for c in out if not c.needs_symptom] + layer_candidates(guess_layer(log.lines, ev), number)
    return out


def layer_candidates(g: LayerGuess | None, number: Callable[[int], int]) -> list[Candidate]:
    """The layer the log's failing lines point at (`diagnose.layers.guess_layer`), as one low-confidence candidate,
    or none."""
    if g is None:
        return []
    cand = Candidate(category=g.category, confidence=g.confidence, best=f"layer.{g.category}",
                     root_cause=g.root_cause, fix=g.fix, rules=[f"layer.{g.category}"], evidence=[],
                     generic_only=True)
    for text, n in layer_evidence(g, number):
        cand.add_evidence(text, n)
    return [cand]


def fact_text_candidates(text: str, extra_fields: Mapping[str, str] | None = None) -> list[Candidate]:
    """Candidates from a live fact's text (a probe's output: `nvidia_smi`, `dmesg`, ...) read by the log rules.
    Its lines are not lines of the log the user has, so no evidence line keeps a number (`line: null` in
    `--json`, no `L<n>:` on the console): a fact's first line never reads as the log's line 1, never hides a
    log line that has the same number, and never makes a log finding look like "the same cause"."""
    out = log_candidates(text, extra_fields, guess=False)  # a probe's failing line is the probe's, not a layer's
    for cand in out:
        cand.line_of = {}
    return out


def evidence_candidates(ev: LogEvidence) -> list[Candidate]:
    """The conclusions the log's typed evidence supports (`diagnose.evidence.decide`), as candidates."""
    return [Candidate(category=h.category, confidence=h.confidence, best=h.name, root_cause=h.root_cause, fix=h.fix,
                      rules=[h.name], evidence=list(h.evidence), generic_only=False, demotes=frozenset(h.demotes),
                      line_of=dict(h.line_of), needs_symptom=h.needs_symptom)
            for h in decide(ev)]
