"""What a collection produced: one record per probe, the derived facts, and where it came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from provisioner.support.probes import Target

# ok: ran and succeeded · absent: ran, the thing is not there (no driver, no log, no venv)
# failed: ran and exited non-zero · timeout: killed after its timeout
# unreachable: the transport could not reach the target · skipped: not run (target unreachable)
ProbeStatus = Literal["ok", "absent", "failed", "timeout", "unreachable", "skipped"]
BUG_REPORT_PROBE = "node.nvidia_bug_report"  # `support.probes.BUG_REPORT`
PROBE_STATUSES: tuple[ProbeStatus, ...] = ("ok", "absent", "failed", "timeout", "unreachable", "skipped")


@dataclass
class ProbeRecord:
    name: str
    target: Target
    where: str  # the transport that ran it, e.g. "ssh:root@pve", "ct200@ssh:root@pve", "local"
    command: str  # the argv as one quoted string, as run on `where`
    status: ProbeStatus
    exit_status: int | None = None
    duration_s: float = 0.0
    output: str = ""
    error: str | None = None  # why it failed / was skipped, in one line
    file: str = ""  # bundle member holding `output`
    feeds: tuple[str, ...] = ()
    truncated: bool = False
    parsed: Any = None  # the fact's parsed value (JSON data) when the probe is a fact and its output parses
    parse_error: str | None = None

    @property
    def ran(self) -> bool:
        """The command ran to an exit status on its target."""
        return self.status in ("ok", "absent", "failed")

    def meta(self) -> dict[str, object]:
        """Everything but the output (the manifest's probe entry)."""
        return {
            "name": self.name, "target": self.target, "where": self.where, "command": self.command,
            "status": self.status, "exit_status": self.exit_status, "duration_s": round(self.duration_s, 3),
            "error": self.error, "file": self.file, "feeds": list(self.feeds), "truncated": self.truncated,
            **({"parse_error": self.parse_error} if self.parse_error else {}),
        }

    @classmethod
    def from_meta(cls, meta: dict[str, Any], output: str) -> ProbeRecord:
        status = meta.get("status")
        target = meta.get("target")
        if status not in PROBE_STATUSES or target not in ("node", "container"):
            raise ValueError(f"probe entry {meta.get('name')!r}: bad status {status!r} or target {target!r}")
        exit_status = meta.get("exit_status")
        return cls(
            name=str(meta["name"]), target=target, where=str(meta.get("where", "")),
            command=str(meta.get("command", "")), status=status,
            exit_status=int(exit_status) if isinstance(exit_status, int) else None,
            duration_s=float(meta.get("duration_s", 0.0)), output=output,
            error=None if meta.get("error") is None else str(meta["error"]), file=str(meta.get("file", "")),
            feeds=tuple(str(f) for f in meta.get("feeds", ())), truncated=bool(meta.get("truncated", False)),
        )


@dataclass
class Evidence:
    """The result of `collect` (live) or `read_bundle` (from a support bundle)."""

    host: str
    vmid: int | None
    venv: str | None
    records: list[ProbeRecord]
    facts: dict[str, object] = field(default_factory=dict)
    started: str = ""
    finished: str = ""
    unreachable: str | None = None  # why the node could not be reached (then every probe is skipped)
    container_unreachable: str | None = None
    run_logs: dict[str, str] = field(default_factory=dict)  # bundle member -> text (bundles only)
    source: Literal["live", "bundle"] = "live"
    notes: list[str] = field(default_factory=list)  # e.g. checksum mismatches found reading a bundle

    def record(self, name: str) -> ProbeRecord | None:
        return next((r for r in self.records if r.name == name), None)

    def report_text(self) -> str:
        """The text of NVIDIA's bug report when one was collected (whole or, timed out, what it had written):
        read as a log by `diagnose --bundle` beside the facts."""
        r = self.record(BUG_REPORT_PROBE)
        return r.output if r is not None and r.output and r.status in ("ok", "timeout", "failed") else ""

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = dict.fromkeys(PROBE_STATUSES, 0)
        for r in self.records:
            out[r.status] += 1
        return out
