"""Sinks that persist a run: the JSON Lines run log and the recorder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

from provisioner.events import Event, StepFinished
from provisioner.paths import runs_dir
from provisioner.playbook import Playbook, StepSpec


class JsonlRunLog:
    """One JSON object per event, one file per run, flushed line by line (survives a crash)."""

    def __init__(self, run_id: str, directory: Path | None = None) -> None:
        self.path = (directory or runs_dir()) / f"{run_id}.jsonl"
        self._fh: IO[str] = open(self.path, "a", encoding="utf-8")

    def __call__(self, event: Event) -> None:
        self._fh.write(event.model_dump_json() + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


class Recorder:
    """Turns what ran into a playbook: the steps that succeeded, with their parameters, plus the
    resolved facts that make the run reproducible. Secrets stay references (the playbook model
    refuses literals)."""

    def __init__(self, base: Playbook) -> None:
        self.base = base
        self.steps: list[StepSpec] = []
        self.resolved: dict[str, Any] = dict(base.resolved)
        self._pending: dict[int, StepSpec] = {}

    def step_started(self, index: int, spec: StepSpec) -> None:
        self._pending[index] = spec

    def step_resolved(self, data: dict[str, Any]) -> None:
        self.resolved.update(data)

    def __call__(self, event: Event) -> None:
        if isinstance(event, StepFinished) and event.status in ("ok", "changed"):
            spec = self._pending.pop(event.index, None)
            if spec is not None:
                self.steps.append(spec)

    def playbook(self) -> Playbook:
        return self.base.model_copy(update={"steps": list(self.steps), "resolved": json.loads(
            json.dumps(self.resolved, default=str))})
