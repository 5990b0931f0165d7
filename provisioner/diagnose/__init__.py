"""Diagnose failed installs from logs and live facts (ARCHITECTURE §7).

    from provisioner.diagnose import diagnose
    findings = diagnose(log_text)                     # pure: rules over a pasted log
    findings = diagnose(log_text, facts=facts_dict)   # plus predicates over live facts

Findings come best first; each names a category of the fixed vocabulary, a confidence, the
root cause, the fix, the evidence lines and the rule that decided it. A text fact (a probe's output such as
`nvidia_smi`, `dmesg`) is read by the log rules too, but its lines are not the log's: they carry no line number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from provisioner.diagnose.engine import Candidate, fact_text_candidates, log_candidates, rank
from provisioner.diagnose.extract import add_derived
from provisioner.diagnose.live_rules import TEXT_FACT_KEYS, facts_candidates, facts_fields
from provisioner.diagnose.model import CATEGORIES, Category, Finding, Rule
from provisioner.diagnose.redact import redact
from provisioner.diagnose.rules import RULES

__all__ = ["CATEGORIES", "RULES", "Category", "Finding", "Rule", "diagnose", "diagnose_facts", "redact"]


def diagnose(
    text: str = "", facts: Mapping[str, object] | None = None, known_secrets: Iterable[str] = ()
) -> list[Finding]:
    """Findings for a log text and/or a live-facts dict, best first ([] when nothing matches)."""
    fields = facts_fields(facts) if facts else {}
    if fields:
        add_derived(fields)
    candidates: list[Candidate] = []
    if text.strip():
        candidates += log_candidates(text, fields)
    if facts:
        for key in TEXT_FACT_KEYS:
            value = facts.get(key)
            if isinstance(value, str) and value.strip():
                candidates += fact_text_candidates(value, fields)  # a probe's lines: no log line numbers
        candidates += facts_candidates(facts)
    return rank(candidates, known_secrets)


def diagnose_facts(facts: Mapping[str, object], known_secrets: Iterable[str] = ()) -> list[Finding]:
    """Findings for live facts only."""
    return diagnose("", facts, known_secrets)
