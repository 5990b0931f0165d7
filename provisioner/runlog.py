"""Sinks that persist a run: the JSON Lines run log and the recorder."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import IO

from provisioner.events import Event, StepFinished
from provisioner.paths import runs_dir
from provisioner.playbook import Playbook, StepSpec, Target
from provisioner.site import origin_of, site_of, strip_step


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
    """Turns what ran into a playbook: the steps that succeeded in apply mode (in playbook order,
    with their parameters as run), plus the resolved facts that make the run reproducible. A sink
    like any other: it learns everything from `StepFinished` events; `spec_of(index)` gives the
    step as it ran (the wizard edits parameters between steps). Secrets stay references (the
    playbook model refuses literals)."""

    def __init__(self, base: Playbook, spec_of: Callable[[int], StepSpec] | None = None) -> None:
        self.base = base
        self.spec_of = spec_of or (lambda index: base.steps[index])
        self.steps: dict[int, StepSpec] = {}
        self.resolved: dict[str, object] = dict(base.resolved)

    def __call__(self, event: Event) -> None:
        if not isinstance(event, StepFinished) or event.mode != "apply":
            return
        if event.status in ("ok", "changed"):
            spec = self.spec_of(event.index)
            self.steps[event.index] = spec.model_copy(update={"pending": None}) if spec.pending else spec
            self.resolved.update(event.resolved)
        else:
            self.steps.pop(event.index, None)

    def playbook(self, target: Target | None = None) -> Playbook:
        """What ran, as the user wrote it: a site profile's values (mirrors, sizes, switches) and a target the
        run was pointed at (`--lab`) are the site's, never the playbook's (`provisioner.site`)."""
        site, origin = site_of(self.base), origin_of(self.base)
        written = dict(enumerate(origin.steps)) if len(origin.steps) == len(self.base.steps) else {}
        steps = [strip_step(self.steps[i], site, written.get(i)) for i in sorted(self.steps)]
        update: dict[str, object] = {"steps": steps, "resolved": json.loads(json.dumps(self.resolved, default=str))}
        if target is not None and target != self.base.target:
            update["target"] = target  # edited during the run (the wizard's connect page)
        else:
            update["target"] = origin.target
        return origin.model_copy(update=update)
