"""What a diagnosis of a text says, in the shapes the emitter tests assert on."""

from __future__ import annotations

from provisioner.diagnose import diagnose
from provisioner.diagnose.evidence import log_evidence
from provisioner.diagnose.layers import LayerGuess, guess_layer
from provisioner.diagnose.normalize import clean_log


def top_and_rules(text: str) -> tuple[str | None, set[str]]:
    """The first finding's category and every rule it names ((None, set()) when nothing is found)."""
    found = diagnose(text)
    if not found:
        return None, set()
    return found[0].category, {found[0].rule, *found[0].rules}


def all_rules(text: str) -> set[str]:
    """Every rule any finding of `text` names."""
    return {r for f in diagnose(text) for r in (f.rule, *f.rules)}


def layer_guess(text: str) -> LayerGuess | None:
    """The layer guess alone on a log, as `diagnose` makes it where no rule matched."""
    return guess_layer(clean_log(text).lines, log_evidence(text))
