"""One assembly of a run — id, JSON Lines run log, bus, renderer, recorders — for a single host,
a fleet and the wizard alike. Every face opens a run with `open_run`, runs its hosts, and ends
it with `Run.finish(results)`, which emits the true `run.finished` recap and closes the log.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from provisioner.events import Bus, Event, Sink
from provisioner.playbook import Playbook, StepSpec
from provisioner.runlog import JsonlRunLog, Recorder
from provisioner.runner import HostResult, Mode, finish_event, new_run_id, start_event


@dataclass
class Run:
    run_id: str
    mode: Mode
    bus: Bus
    runlog: JsonlRunLog
    recorders: dict[str, Recorder] = field(default_factory=dict)
    finished: bool = False

    @property
    def log_path(self) -> Path:
        return self.runlog.path

    def record(self, host: str, playbook: Playbook, spec_of: Callable[[int], StepSpec] | None = None) -> Recorder:
        """A recorder of what succeeded on `host`, fed by the bus (events of other hosts ignored)."""
        recorder = Recorder(playbook, spec_of)
        self.recorders[host] = recorder

        def sink(event: Event) -> None:
            if event.host == host:
                recorder(event)

        self.bus.subscribe(sink)
        return recorder

    def finish(self, results: list[HostResult]) -> None:
        """Emit `run.finished` with the hosts' counts and close the run log (once)."""
        if self.finished:
            return
        self.finished = True
        self.bus.emit(finish_event(self.run_id, results))
        self.runlog.close()


def open_run(playbook_path: str, mode: Mode, hosts: list[str], *, sinks: Sequence[Sink] = (),
             runs_dir: Path | None = None) -> Run:
    """A new run: its id, its run log (first sink), the given sinks (renderer, trackers), and
    the `run.started` event already emitted."""
    run_id = new_run_id()
    runlog = JsonlRunLog(run_id, runs_dir)
    run = Run(run_id=run_id, mode=mode, bus=Bus(runlog, *sinks), runlog=runlog)
    run.bus.emit(start_event(run_id, playbook_path, mode, hosts))
    return run
