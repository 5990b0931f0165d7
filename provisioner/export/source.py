"""What a run proved: the merged `resolved` facts of a run log (or a recorded playbook) and its burn-in.

`provisioner export` names a run (its id or its `.jsonl`) or a playbook. For a playbook, a recorded
`resolved` section with a passing burn-in is the proof; otherwise the newest apply run of that playbook
in the run logs is (the demo replays a copy, so a run of a playbook with the same file name counts, and the
export says which run it took). A run whose burn-in did not pass is refused with the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from provisioner.paths import runs_dir
from provisioner.payloads import object_at
from provisioner.playbook import Playbook


class ExportRefused(Exception):
    """The source cannot be exported (no such run, no venv, no passing burn-in); the message says why."""


@dataclass
class Proof:
    """The facts of one proven run."""

    resolved: dict[str, Any]
    run_id: str
    at: float
    host: str
    playbook: str
    burnin_status: str = "not run"  # ok/changed/failed/skipped of the burnin.run step, or "not run"
    burnin_message: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def when(self) -> str:
        return datetime.fromtimestamp(self.at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_run(path: Path) -> Proof:
    """The resolved facts of one run log: StepFinished(apply, ok/changed) merged in order, as the recorder does."""
    resolved: dict[str, Any] = {}
    run_id, at, host, playbook, status, message = path.stem, 0.0, "", "", "not run", ""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a crash
            kind = event.get("kind")
            if kind == "run.started":
                run_id, at, playbook = str(event.get("run_id", run_id)), float(event.get("ts", 0.0)), \
                    str(event.get("playbook", ""))
                if event.get("mode") != "apply":
                    raise ExportRefused(f"run {run_id} was a plan, not an apply: nothing was proven")
                hosts = event.get("hosts") or [""]
                host = str(hosts[0])
            elif kind == "step.finished" and event.get("mode", "apply") == "apply":
                if event.get("status") in ("ok", "changed"):
                    resolved.update(event.get("resolved") or {})
                if event.get("step") == "burnin.run":
                    status, message = str(event.get("status")), str(event.get("message") or "")
    return Proof(resolved=resolved, run_id=run_id, at=at, host=host, playbook=playbook,
                 burnin_status=status, burnin_message=message)


def _run_playbook(path: Path) -> str:
    with open(path, encoding="utf-8") as fh:
        first = fh.readline()
    try:
        event = json.loads(first)
    except json.JSONDecodeError:
        return ""
    if event.get("kind") != "run.started" or event.get("mode") != "apply":
        return ""
    return str(event.get("playbook", ""))


def runs_of(playbook: Path, directory: Path | None = None) -> list[Path]:
    """Apply runs of `playbook`, newest first: the same path, else the same file name (a replayed copy)."""
    logs = sorted((directory or runs_dir()).glob("*.jsonl"), reverse=True)  # run ids sort by time
    want = str(playbook.resolve())
    same = [p for p in logs if _run_playbook(p) == want]
    return same or [p for p in logs if Path(_run_playbook(p)).name == playbook.name]


def find_proof(source: str, playbook: Playbook | None, directory: Path | None = None) -> Proof:
    """The proof named by `source`: a run log path, a run id, or a playbook (loaded as `playbook`)."""
    path = Path(source)
    if path.suffix == ".jsonl" and path.is_file():
        return read_run(path)
    by_id = (directory or runs_dir()) / f"{source}.jsonl"
    if playbook is None:
        if by_id.is_file():
            return read_run(by_id)
        raise ExportRefused(f"{source}: neither a playbook, a run log nor a run id in {by_id.parent}")
    rec = playbook.resolved
    burnin = object_at(rec, "burnin")
    if rec.get("venv_lock") and burnin:
        return Proof(resolved=dict(rec), run_id="recorded", at=path.stat().st_mtime, host=playbook.target.host,
                     playbook=str(path.resolve()), burnin_status="ok" if burnin.get("verdict") == "pass" else "failed",
                     burnin_message=str(burnin.get("summary") or ""), notes=[f"proof: the resolved section of {path}"])
    runs = runs_of(path, directory)
    if not runs:
        raise ExportRefused(f"{source} has no recorded resolved section and no apply run in {by_id.parent}: "
                            "replay it first (the export takes what a run proved)")
    proof = read_run(runs[0])
    proof.notes.append(f"proof: run {proof.run_id} of {proof.playbook}")
    return proof


def require_proven(proof: Proof) -> None:
    """Refuse a run without a built venv or without a passing burn-in, saying which."""
    res = proof.resolved
    burnin = object_at(res, "burnin")
    if proof.burnin_status == "failed":
        raise ExportRefused(f"run {proof.run_id}: the burn-in failed ({proof.burnin_message or 'see its run log'}); "
                            "only a runtime with a passing burn-in is exported")
    if proof.burnin_status == "not run" or not burnin:
        raise ExportRefused(f"run {proof.run_id}: no burn-in ran (the run stopped before burnin.run or the playbook "
                            "has none); only a runtime with a passing burn-in is exported")
    if burnin.get("verdict") != "pass":
        raise ExportRefused(f"run {proof.run_id}: the burn-in verdict is {burnin.get('verdict')!r}, not 'pass'")
    if not isinstance(res.get("venv_lock"), dict) or not res["venv_lock"].get("groups"):
        raise ExportRefused(f"run {proof.run_id}: no venv lock was recorded (venv.build did not run)")
    if not isinstance(res.get("torch"), dict) and not isinstance(res.get("runtime"), dict):
        raise ExportRefused(f"run {proof.run_id}: neither torch.resolve nor venv.build recorded the torch build")
