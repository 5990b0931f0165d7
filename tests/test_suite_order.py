"""The lab tier's order (tests/support/tiers.py): modules longest first by their measured seconds, each
module's tests together and in their order; and the durations file is what scripts/suite_durations.py makes
of a suite report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

from tests.support import tiers
from tests.support.suite_report import _Peaks, fs_type, memory_in_use

REPO = Path(__file__).resolve().parents[1]


def _items(*nodeids: str) -> list[Any]:
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_lab_modules_run_longest_first_and_stay_together(monkeypatch: Any, tmp_path: Path) -> None:
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({"tests/test_a.py": 5, "tests/test_b.py": 400, "tests/test_c.py": 90}))
    monkeypatch.setattr(tiers, "DURATIONS", durations)
    items = _items("tests/test_a.py::t1", "tests/test_b.py::t1", "tests/test_a.py::t2", "tests/test_new.py::t1",
                   "tests/test_c.py::t1", "tests/test_b.py::t2")
    order = [i.nodeid for i in tiers.longest_first(items)]
    # b (400 s), the unknown module (UNKNOWN_S = 60 ...) after c (90 s), a (5 s) last
    assert tiers.UNKNOWN_S < 90
    assert order == ["tests/test_b.py::t1", "tests/test_b.py::t2", "tests/test_c.py::t1", "tests/test_new.py::t1",
                     "tests/test_a.py::t1", "tests/test_a.py::t2"]
    monkeypatch.setattr(tiers, "DURATIONS", tmp_path / "missing.json")  # no file: the order is kept
    assert [i.nodeid for i in tiers.longest_first(items)] == [
        "tests/test_a.py::t1", "tests/test_a.py::t2", "tests/test_b.py::t1", "tests/test_b.py::t2",
        "tests/test_new.py::t1", "tests/test_c.py::t1"]


def test_durations_file_is_made_from_a_suite_report(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"wall_s": 10, "workers": 2, "tests": {
        "tests/test_x.py::a": {"setup": 1.0, "call": 10.2, "teardown": 0.4, "outcome": "passed", "worker": "gw0"},
        "tests/test_x.py::b": {"setup": 0.0, "call": 2.0, "teardown": 0.0, "outcome": "passed", "worker": "gw1"},
        "tests/test_y.py::c": {"setup": 0.0, "call": 0.01, "teardown": 0.0, "outcome": "passed", "worker": "gw1"}}}))
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "suite_durations.py"), str(report)],
                         capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(out.stdout) == {"tests/test_x.py": 14, "tests/test_y.py": 1}
    # a later report (a run of the modules changed since) gives the modules it ran their new seconds
    later = tmp_path / "later.json"
    later.write_text(json.dumps({"wall_s": 5, "workers": 2, "tests": {
        "tests/test_y.py::c": {"setup": 0.0, "call": 40.4, "teardown": 0.0, "outcome": "passed", "worker": "gw0"}}}))
    both = subprocess.run([sys.executable, str(REPO / "scripts" / "suite_durations.py"), str(report), str(later)],
                          capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(both.stdout) == {"tests/test_x.py": 14, "tests/test_y.py": 40}
    shipped = json.loads((REPO / "tests" / "support" / "durations.json").read_text())
    assert shipped and all(k.startswith("tests/test_") and isinstance(v, int) and v >= 1 for k, v in shipped.items())


def test_lab_script_pools_leave_the_cores_to_the_xdist_workers() -> None:
    from tests.support.concurrent import threads_for

    assert threads_for(2, {"PYTEST_XDIST_WORKER_COUNT": "2"}, cores=2) == 1
    assert threads_for(2, {}, cores=2) == 2  # no xdist: the pool has the machine
    assert threads_for(4, {"PYTEST_XDIST_WORKER_COUNT": "2"}, cores=8) == 4
    assert threads_for(2, {"PYTEST_XDIST_WORKER_COUNT": "4"}, cores=2) == 1


def test_machine_cpu_reads_proc_stat() -> None:
    from tests.support.suite_report import machine_cpu

    busy0, all0 = machine_cpu()
    assert 0 < busy0 <= all0
    deadline = time.monotonic() + 30
    while machine_cpu()[1] <= all0:  # the clock ticks: wait for the next one (no elapsed-time assertion)
        assert time.monotonic() < deadline, "/proc/stat never moved"
        sum(range(10000))
    busy1, all1 = machine_cpu()
    assert busy1 >= busy0 and all1 > all0 and busy1 - busy0 <= all1 - all0 + 0.05


def test_the_report_names_the_tests_running_when_the_disk_peaked() -> None:
    from types import SimpleNamespace

    from tests.support.suite_report import SuiteReport

    report = SuiteReport.__new__(SuiteReport)
    report.t0 = 0.0
    report.tests = {}
    for nodeid, when, duration, now in [("t::a", "setup", 2.0, 5.0), ("t::a", "teardown", 0.5, 40.0),
                                        ("t::b", "setup", 0.0, 30.0), ("t::b", "teardown", 0.1, 31.0),
                                        ("t::c", "setup", 1.0, 45.0)]:
        rep = SimpleNamespace(nodeid=nodeid, when=when, duration=duration, failed=False, skipped=False)
        with mock.patch("time.monotonic", return_value=now):
            report.pytest_runtest_logreport(rep)  # type: ignore[arg-type]
    assert report.tests["t::a"]["start_s"] == 3.0 and report.tests["t::a"]["end_s"] == 40.0
    assert report.running_at(30.5) == ["t::a", "t::b"]
    assert report.running_at(44.5) == []  # c has not ended: never counted as holding the peak


def test_the_tests_that_start_a_lab_another_way_are_in_the_lab_tier() -> None:
    """The fast tier (`-m "not lab"`) holds no test that starts a lab: the wizard-in-tmux test runs a script that
    starts one (it landed in the fast tier at 123-134 s before that script's name counted as a lab word)."""
    import importlib

    for name in ("tests.test_tui_tmux", "tests.test_real_hosts_e2e", "tests.test_demo_bare"):
        assert tiers._module_uses_lab(importlib.import_module(name)), name
    assert not tiers._module_uses_lab(importlib.import_module("tests.test_playbook"))


def test_the_report_reads_the_scratch_file_system_and_the_memory_in_use() -> None:
    """What the report prints beside the wall: the type of the scratch's file system (a tmpfs under `.ci/run`)
    and the machine's memory in use, from /proc."""
    assert fs_type(Path("/proc/self")) == "proc"
    assert fs_type(Path("/")) not in ("", "proc")
    used = memory_in_use()
    assert 0 < used < os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_a_scratch_on_another_file_system_gets_the_root_disk_watched_too() -> None:
    """A tmpfs scratch (`.ci/run`'s): the report watches it, the machine's root disk and the memory; a scratch on
    the root file system is watched once."""
    other = Path("/proc")  # a file system of its own on every Linux machine, as the tmpfs is
    assert os.stat(other).st_dev != os.stat("/").st_dev
    peaks = _Peaks(other)
    assert peaks.fs == "proc"  # the scratch's type, read when it starts (pytest may remove its base at the end)
    got = peaks.stop()
    assert set(got) == {"scratch", "root disk", "memory"} and got["memory"] > 0 and got["scratch"] >= 0
    same = _Peaks(Path("/")).stop()
    assert set(same) == {"scratch", "memory"}
