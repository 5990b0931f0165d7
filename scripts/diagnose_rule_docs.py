"""Regenerate the "Log rules" and "Xid table" sections of docs/diagnose-rules.md from the code.

    uv run python scripts/diagnose_rule_docs.py
"""

from __future__ import annotations

from pathlib import Path

from provisioner.burnin.xid import CATALOG_URL, XIDS
from provisioner.diagnose import CATEGORIES, RULES, Rule
from provisioner.diagnose.catalogue import entry

DOC = Path(__file__).resolve().parent.parent / "docs" / "diagnose-rules.md"


def _kind(r: Rule) -> str:
    k = ["supporting" if r.supporting else "generic" if r.generic else "specific"]
    if r.context:
        k.append("needs context")
    if r.unless:
        k.append("unless context")
    if r.demotes:
        k.append("demotes " + ", ".join(r.demotes))
    return ", ".join(k)


def sections() -> str:
    out = [
        "## Log rules",
        "",
        "Generated from `RULES` (`provisioner/diagnose/rules/`, one module per family; first signature and the",
        "number of further ones) by `scripts/diagnose_rule_docs.py`. `demotes`: categories this rule explains",
        "when both fire (see Rank).",
        "",
    ]
    for c in CATEGORIES:
        out += [f"**{c}**", "", "| rule | conf | kind | first signature |", "|---|---|---|---|"]
        for r in (r for r in RULES if r.category == c):
            # a rule that reads only catalogue messages shows its first message's format
            first = r.patterns[0] if r.patterns else entry(r.messages[0]).format
            sig = first.replace("|", "\\|")
            sig = sig if len(sig) <= 110 else sig[:107] + "..."
            more = len(r.patterns) - 1 if r.patterns else len(r.messages) - 1
            out.append(f"| `{r.name}` | {r.confidence} | {_kind(r)} | `{sig}` (+{more}) |")
        out.append("")
    out += [
        "## Xid table",
        "",
        f"`provisioner/burnin/xid.py` (stdlib only) holds NVIDIA's Xid catalogue ({CATALOG_URL};",
        "older GPUs: https://docs.nvidia.com/deploy/xid-errors/index.html): number → mnemonic, meaning, likely cause,",
        "action. The burn-in's NVML monitor (`burnin/nvml_eval.py`) fails a run on every Xid event and adds a note",
        "with the cause and action; the diagnose rules `hw.ecc_xid_fallen_off` (GPU/node faults) and `hw.xid_other`",
        "(application faults, unknown numbers) take their Xid numbers from it, and `extract.xid_fields` fills",
        "`{xid}`, `{xid_meaning}`, `{xid_cause}`, `{xid_advice}` with the most telling Xid of the log",
        "(`xid.PRIORITY`: fallen off the bus, then uncorrectable memory errors, then GSP, …).",
        "",
        "Actions: `application` (restart the app / debug it), `reset` (drain + GPU reset), `reboot`, `reseat`",
        "(power, cables, slot; replace if it recurs), `rma`, `driver` (update driver/firmware), `thermal`, `ignore`",
        "(follows another Xid).",
        "",
        "| Xid | mnemonic | meaning | cause | action | GPU fault |",
        "|---|---|---|---|---|---|",
    ]
    for n, x in sorted(XIDS.items()):
        out.append(f"| {n} | `{x.mnemonic}` | {x.meaning} | {x.cause} | {x.action} | {'yes' if x.critical else 'no'} |")
    return "\n".join(out) + "\n\n"


def main() -> None:
    text = DOC.read_text(encoding="utf-8")
    start, end = text.index("## Log rules"), text.index("## Live facts")
    DOC.write_text(text[:start] + sections() + text[end:], encoding="utf-8")


if __name__ == "__main__":
    main()
