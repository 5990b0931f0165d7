"""The vocabulary of a diagnosis: categories, rules and findings (ARCHITECTURE §7)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

Category = Literal[
    "arch_unsupported",
    "driver_too_old",
    "driver_lib_mismatch",
    "no_driver_loaded",
    "container_device_missing",
    "cpu_only_wheel",
    "missing_shared_lib",
    "nccl_failure",
    "installer_failure",
    "resolver_failure",
    "oom_or_hw",
    "proxmox_lxc",
]

CATEGORIES: tuple[Category, ...] = get_args(Category)


@dataclass(frozen=True)
class Rule:
    """One log rule: regex signatures over the cleaned log, plus how to explain a match.

    `patterns` are case-insensitive regexes searched over the whole cleaned log (after
    `normalize.clean_log`). A literal space in a pattern matches any run of whitespace, line
    breaks included, so a message wrapped over several lines still matches.

    - `confidence`: the base confidence of a finding this rule alone produces (0..1).
    - `generic`: a symptom shared by several causes (e.g. "No CUDA GPUs are available"). A
      category backed only by generic rules is dropped when a specific finding of at least
      `STRONG` confidence explains the log.
    - `supporting`: context that never makes a finding alone; it only adds weight and
      evidence to a category that a non-supporting rule already found.
    - `context`: a regex that must also occur somewhere in the log for the rule to fire.
    - `unless`: a regex that, if it occurs anywhere in the log, stops the rule.
    - `requires`: regexes that must all occur somewhere in the log too: a rule that joins facts
      (e.g. "nvidia-smi works" and "is_available() is False" in one container log -> the uvm nodes).
    - `root_cause` / `fix`: templates with `{field}` slots filled from named groups of the
      match and from what `extract.log_fields` read elsewhere in the log.
    - `examples`: real log lines (corpus, reference docs, public issue threads) the rule must
      classify; the test suite replays every one.
    - `messages`: the message-catalogue entries (provisioner/diagnose/catalogue.json) the rule reads: each
      entry's wordings, every version's, are matched through `normalize.format_regex` beside `patterns`
      (which then hold only what no program prints verbatim: codes, tables, user prose).
    - `demotes`: categories whose finding this rule explains when both fire (the rule names the
      root cause, the other matched a louder symptom line): they are ranked below this rule's
      finding and shown as its "also possible" runner-ups.
    """

    name: str
    category: Category
    patterns: tuple[str, ...]
    confidence: float
    root_cause: str
    fix: str
    examples: tuple[str, ...]
    generic: bool = False
    supporting: bool = False
    context: str | None = None
    unless: str | None = None
    demotes: tuple[Category, ...] = ()
    requires: tuple[str, ...] = ()
    messages: tuple[str, ...] = ()
    fix_lxc: str | None = None  # the fix in LXC's words (`{lxc_words}`: Proxmox devN, LXD/Incus devices, lxc.* lines)


@dataclass(frozen=True)
class EvidenceLine:
    """One evidence line with its number in the log the user has (1-based; None: not a log line, e.g. a fact)."""

    line: int | None
    text: str

    def to_dict(self) -> dict[str, object]:
        return {"line": self.line, "text": self.text}


@dataclass(frozen=True)
class Finding:
    """A diagnosed cause: what category, how sure, why, what to do, and the lines that show it."""

    category: Category
    confidence: float
    root_cause: str
    fix: str
    evidence: tuple[str, ...]
    rule: str
    rules: tuple[str, ...] = field(default=())
    also_possible: tuple[RunnerUp, ...] = field(default=())
    evidence_lines: tuple[EvidenceLine, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        """The JSON shape of ARCHITECTURE §8, plus `rule`/`rules` (the deciding rule and every rule that
        agreed), `evidence_lines` (each evidence line with its line number) and `also_possible` (competing
        explanations of the same lines, each with the evidence that differs)."""
        return {
            "category": self.category,
            "confidence": self.confidence,
            "root_cause": self.root_cause,
            "fix": self.fix,
            "evidence": list(self.evidence),
            "evidence_lines": [e.to_dict() for e in self.evidence_lines],
            "rule": self.rule,
            "rules": list(self.rules or (self.rule,)),
            "also_possible": [r.to_dict() for r in self.also_possible],
        }


@dataclass(frozen=True)
class RunnerUp:
    """Another category the same log supports less well, with the lines that support it."""

    category: Category
    confidence: float
    root_cause: str
    evidence: tuple[str, ...]
    rule: str
    evidence_lines: tuple[EvidenceLine, ...] = field(default=())
    differing: tuple[EvidenceLine, ...] = field(default=())  # its lines the finding above it does not cite

    def to_dict(self) -> dict[str, object]:
        return {
            "category": self.category,
            "confidence": self.confidence,
            "root_cause": self.root_cause,
            "evidence": list(self.evidence),
            "evidence_lines": [e.to_dict() for e in self.evidence_lines],
            "differing_evidence": [e.to_dict() for e in self.differing],
            "rule": self.rule,
        }
