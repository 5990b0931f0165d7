"""How `provisioner diagnose` shows a finding on the console (the human face of `--json`'s findings).

Every evidence line is shown as `L<n>: <text>`, `<n>` its 1-based number in the log the user has (the
`line` of the JSON's `evidence_lines`), in the order of the JSON's `evidence`; a line that is not a log
line (a live fact, a probe's output) is shown without a number (`provisioner.diagnose.numbered`: the TUI's
diagnose screen shows the same form). Each line is cut to `CONSOLE_LINE_CHARS` and redacted again here (the
engine redacts its findings; a finding merged from another source, or a secret only this run knows, is masked
at this boundary too). "Also possible" explanations come after,
each with the lines it reads that the finding above does not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rich.console import Group
from rich.panel import Panel
from rich.text import Text

from provisioner.diagnose import Finding
from provisioner.diagnose.numbered import CONSOLE_LINE_CHARS, cut_line, numbered
from provisioner.redaction import REDACTOR

__all__ = ["finding_panel", "redacted", "typed_evidence_rows"]


def finding_panel(finding: Finding, secrets: Iterable[str] = ()) -> Panel:
    """One finding: root cause, fix, numbered evidence, the "also possible" runners-up, the deciding rule."""
    secrets = tuple(secrets)
    colour = "red" if finding.confidence >= 0.7 else "yellow"
    body: list[Text] = [
        Text.assemble(("Root cause: ", "bold"), finding.root_cause),
        Text.assemble(("Fix: ", "bold green"), finding.fix),
    ]
    if finding.evidence:
        body.append(Text("Evidence:", style="bold"))
        body.extend(Text.assemble(("  │ ", "dim"), line)
                    for line in numbered(finding.evidence, finding.evidence_lines, secrets))
    for alt in finding.also_possible:
        body.append(Text.assemble(("Also possible: ", "bold"), (alt.category, "bold"),
                                  f" ({alt.confidence:.2f}) {alt.root_cause}"))
        differing = numbered([e.text for e in alt.differing], alt.differing, secrets)
        body.extend(Text.assemble(("  │ ", "dim"), line) for line in differing)
        if not differing:
            body.append(Text("  │ (the same lines as above)", style="dim"))
    body.append(Text(f"rule: {finding.rule}", style="dim"))
    title = Text.assemble((finding.category, f"bold {colour}"), f"  confidence {finding.confidence:.2f}")
    return Panel(Group(*body), title=title, title_align="left", border_style=colour)


def typed_evidence_rows(evidence: Mapping[str, object]) -> list[str]:
    """`--evidence` on the console: each fact as `key: value`, then the lines that showed them as
    `L<n> key: text` (bounded, in log order); `evidence` is already redacted (`redacted`)."""
    rows = [f"  {key}: {value}" for key, value in evidence.items() if key not in ("lines", "line_no")]
    lines = evidence.get("lines")
    numbers = evidence.get("line_no")
    if isinstance(lines, dict) and lines:
        nos = numbers if isinstance(numbers, dict) else {}
        ordered = sorted(lines.items(), key=lambda kv: (nos.get(kv[0]) is None, nos.get(kv[0]) or 0, kv[0]))
        rows.append("  lines:")
        for key, text in ordered:
            n = nos.get(key)
            head = f"    L{n} {key}: " if isinstance(n, int) else f"    {key}: "
            rows.append(head + cut_line(str(text), max(CONSOLE_LINE_CHARS - len(head), 40)))
    return rows


def redacted(value: dict[str, object], secrets: Iterable[str] = ()) -> dict[str, object]:
    """A JSON-like output with every secret masked: the typed evidence of `--evidence` (its `lines` are raw log
    lines), and the whole `--json` object (a finding merged from another source is masked like the engine's)."""
    out: dict[str, object] = REDACTOR.with_values(secrets).obj(value)
    return out
