"""NVML monitoring thread: samples every interval, collects XID/ECC events, judged at the end."""

from __future__ import annotations

import threading
import time

from provisioner.burnin.nvml_eval import evaluate_monitor
from provisioner.burnin.nvml_reader import NvmlReader, XidWatcher
from provisioner.burnin.shapes import NvmlEvent, NvmlRecord, NvmlSample
from provisioner.burnin.verdict import PhaseResult

MAX_SAMPLES = 20000  # ~5.5 h at 1 s; older samples are thinned beyond that


class Monitor:
    """`start()` after preflight; `set_phase()` labels samples (PCIe is judged only under load)."""

    def __init__(self, reader: NvmlReader, baseline: NvmlRecord, interval: float = 1.0) -> None:
        self.reader = reader
        self.baseline = baseline
        self.interval = max(0.05, interval)
        self.samples: list[NvmlSample] = []
        self.events: list[NvmlEvent] = []
        self.phase = "idle"
        self.error: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()

    def start(self) -> None:
        if self.reader.error is not None:
            return
        self._thread = threading.Thread(target=self._run, name="burnin-nvml-monitor", daemon=True)
        self._thread.start()

    def set_phase(self, phase: str) -> None:
        with self._lock:
            self.phase = phase

    def _run(self) -> None:
        watcher = XidWatcher(self.reader)
        try:
            while not self._stop.is_set():
                events = watcher.wait(int(self.interval * 1000), self._t0)
                with self._lock:
                    phase = self.phase
                sample = self.reader.sample(phase, time.monotonic() - self._t0)
                with self._lock:
                    self.events.extend(events)
                    self.samples.append(sample)
                    if len(self.samples) > MAX_SAMPLES:
                        self.samples = self.samples[::2]
        except Exception as exc:  # never let monitoring kill the burn-in
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            watcher.close()

    def stop(self, used_buses: list[str] | None = None) -> PhaseResult:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5)
        with self._lock:
            samples, events = list(self.samples), list(self.events)
        res = evaluate_monitor(self.baseline, samples, events, used_buses)
        if self.error:
            res.warn(f"monitor stopped early: {self.error}")
        return res
