"""The suite measures itself: every test's setup, call and teardown seconds, the run's peak disk and memory.

Loaded by tests/conftest.py as a plugin. It runs in the process that sees every report (pytest's own, or
the xdist controller) and writes ``suite-report.json`` — per test: phase durations and outcome; for the run:
its wall seconds, the space it used at most above what the file system of its scratch held when it started
(and the machine's root disk, where the scratch is another file system: a tmpfs, `.ci/run`), the memory in
use at its peak, and the worker count, and when each test started and ended and when the scratch peaked (the
tests running then are printed) — to ``$PROVISIONER_SUITE_REPORT`` or the run's base temporary directory's parent. It prints
the file's path and the 15 slowest tests (setup + call + teardown) at the end.

These are measurements printed for people (bench-like), never assertions: no test depends on them.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SLOWEST = 15
_SAMPLE_S = 2.0


def memory_in_use() -> int:
    """Bytes of memory in use on the machine (MemTotal - MemAvailable from /proc/meminfo; a tmpfs's files count,
    they cannot be reclaimed); 0 where /proc/meminfo cannot be read."""
    fields: dict[str, int] = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, rest = line.partition(":")
            fields[name] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return max(0, fields.get("MemTotal", 0) - fields.get("MemAvailable", 0))


def fs_type(path: Path) -> str:
    """The type of the file system holding `path`: the /proc/self/mountinfo entry whose device (major:minor) is
    `path`'s, so that no mount point's path has to be parsed or unescaped; '' if unknown."""
    try:
        dev = os.stat(path).st_dev
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return ""
    want = f"{os.major(dev)}:{os.minor(dev)}"
    for line in lines:
        fields, _, rest = line.partition(" - ")
        if fields.split()[2:3] == [want] and rest.split():
            return rest.split()[0]
    return ""


class _Peaks:
    """Samples, until stopped, the used bytes of the file system holding the run's scratch, of the machine's
    root file system where that is another one (a tmpfs scratch: `.ci/run`), and the memory in use."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fs = fs_type(path)  # read while the path exists: pytest may remove its base directory at the end
        self.gauges: dict[str, Callable[[], int]] = {"scratch": lambda: shutil.disk_usage(self.path).used}
        if os.stat(path).st_dev != os.stat("/").st_dev:
            self.gauges["root disk"] = lambda: shutil.disk_usage("/").used
        self.gauges["memory"] = memory_in_use
        self.start = {name: gauge() for name, gauge in self.gauges.items()}
        self.peak = dict(self.start)
        self.peak_at = dict.fromkeys(self.gauges, time.monotonic())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="suite-disk-peak", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        for name, gauge in self.gauges.items():
            try:
                used = gauge()
            except OSError:
                continue
            if used > self.peak[name]:
                self.peak[name], self.peak_at[name] = used, time.monotonic()

    def _run(self) -> None:
        while not self._stop.wait(_SAMPLE_S):
            self._sample()

    def stop(self) -> dict[str, int]:
        """Each gauge's peak above its start, in bytes (memory: the peak in use itself)."""
        self._stop.set()
        self._thread.join(timeout=10)
        self._sample()
        return {name: self.peak[name] - (0 if name == "memory" else self.start[name]) for name in self.gauges}


class SuiteReport:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.tests: dict[str, dict[str, Any]] = {}
        self.t0 = time.monotonic()
        self.disk: _Peaks | None = None
        self.cpu0 = machine_cpu()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        base = Path(self.config._tmp_path_factory.getbasetemp())  # type: ignore[attr-defined]
        self.disk = _Peaks(base)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.tests.setdefault(report.nodeid, {"setup": 0.0, "call": 0.0, "teardown": 0.0, "outcome": "passed"})
        entry[report.when] = round(entry[report.when] + report.duration, 3)
        now = time.monotonic() - self.t0  # (reports reach the xdist controller as each phase ends)
        if report.when == "setup":
            entry["start_s"] = round(now - report.duration, 1)
        elif report.when == "teardown":
            entry["end_s"] = round(now, 1)
        if report.failed:
            entry["outcome"] = "failed"
        elif report.skipped and entry["outcome"] == "passed":
            entry["outcome"] = "skipped"
        worker = getattr(report, "node", None)
        if worker is not None:
            entry["worker"] = getattr(worker, "gateway", None) and worker.gateway.id

    def report_path(self) -> Path:
        named = os.environ.get("PROVISIONER_SUITE_REPORT")
        if named:
            return Path(named)
        base = Path(self.config._tmp_path_factory.getbasetemp())  # type: ignore[attr-defined]
        return base.parent / "suite-report.json"

    def slowest(self) -> list[tuple[float, str, dict[str, Any]]]:
        rows = [(e["setup"] + e["call"] + e["teardown"], nodeid, e) for nodeid, e in self.tests.items()]
        return sorted(rows, key=lambda r: r[0], reverse=True)[:SLOWEST]

    def running_at(self, at: float) -> list[str]:
        """The tests whose setup..teardown spans `at` seconds into the run."""
        return [nodeid for nodeid, e in self.tests.items()
                if e.get("start_s", float("inf")) <= at <= e.get("end_s", float("-inf"))]

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        peaks = self.disk.stop() if self.disk is not None else {}
        peak = peaks.get("scratch", 0)
        if not self.tests:
            return  # (collection only)
        wall = time.monotonic() - self.t0
        workers = getattr(self.config.option, "numprocesses", None) or 0
        path = self.report_path()
        busy, total = (a - b for a, b in zip(machine_cpu(), self.cpu0, strict=True))
        cores = os.cpu_count() or 1
        peak_s = round(self.disk.peak_at["scratch"] - self.t0, 1) if self.disk is not None else 0.0
        scratch_fs = self.disk.fs if self.disk is not None else ""
        data = {"wall_s": round(wall, 1), "peak_disk_bytes": peak, "peak_disk_at_s": peak_s, "workers": workers,
                "scratch_fs": scratch_fs, "peak_root_disk_bytes": peaks.get("root disk", peak),
                "peak_memory_bytes": peaks.get("memory", 0),
                "tests": self.tests, "load_average_at_end": list(os.getloadavg()),
                "machine_cpu": {"busy_s": round(busy, 1), "all_s": round(total, 1), "cores": cores}}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        except OSError as exc:
            terminalreporter.write_line(f"suite report: could not write {path}: {exc.strerror}")
            return
        tr = terminalreporter
        tr.section("suite report")
        where = f"on a {scratch_fs} scratch" if scratch_fs else "scratch"
        tr.write_line(f"wall {wall:.0f} s, peak {where} {peak / 2**30:.2f} GiB above the start, "
                      f"workers {workers or 1}; per-test durations: {path}")
        if "root disk" in peaks:
            tr.write_line(f"the machine's root disk: peak {peaks['root disk'] / 2**30:.2f} GiB above the start")
        if peaks.get("memory"):
            tr.write_line(f"memory in use (tmpfs files included) peaked at {peaks['memory'] / 2**30:.2f} GiB of "
                          f"{(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')) / 2**30:.1f}")
        holding = self.running_at(peak_s)
        tr.write_line(f"the scratch peaked {peak_s:.0f} s into the run, during: {', '.join(holding) or 'no test'}")
        if total > 0:
            tr.write_line(f"machine CPU busy {busy:.0f} of {total:.0f} core-seconds ({100 * busy / total:.0f}%, "
                          f"{cores} cores; every process of the machine, not only the suite's)")
        tr.write_line(f"the {SLOWEST} slowest tests (setup + call + teardown):")
        for total, nodeid, e in self.slowest():
            tr.write_line(f"{total:8.1f} s  (setup {e['setup']:.1f}, call {e['call']:.1f}, "
                          f"teardown {e['teardown']:.1f})  {nodeid}")


def machine_cpu() -> tuple[float, float]:
    """(busy, all) core-seconds the machine has spent since boot, from /proc/stat's first line (Linux; (0, 0)
    elsewhere): busy is user, nice, system, irq, softirq and steal; all adds idle and iowait."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return 0.0, 0.0
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    hz = os.sysconf("SC_CLK_TCK")
    busy = user + nice + system + irq + softirq + steal
    return busy / hz, (busy + idle + iowait) / hz


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the controller sees every worker's reports
    config.pluginmanager.register(SuiteReport(config), "suite-report")
