import os
import re
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.support import scratch
from tests.support.lab import golden_copy, golden_node, lab, make_lab  # noqa: F401  (fixtures)
from tests.support.sshd import sshd  # noqa: F401  (fixture)

pytest_plugins = ["tests.support.suite_report", "tests.support.tiers"]

@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report: pytest.TestReport = yield
    item.stash.setdefault(scratch.PHASES, {})[report.when] = report.passed
    return report


@pytest.fixture
def tmp_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """pytest's tmp_path (same naming), but a passed test's directory is moved to the run's trash and removed in
    the background (`tests.support.scratch`) instead of in the test's teardown; a failed test's stays."""
    name = re.sub(r"[\W]", "_", request.node.name)[:30]
    path = tmp_path_factory.mktemp(name, numbered=True)
    yield path
    if scratch.passed(request.node):
        scratch.discard(path, scratch.trash_dir(tmp_path_factory))


def pytest_sessionfinish(session: pytest.Session) -> None:
    scratch.drain()  # the run ends once what it discarded is gone


def run_shared_dir(factory: pytest.TempPathFactory, name: str) -> Path:
    """A directory shared by the whole run: under xdist, beside the workers' own base directories."""
    base = factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(autouse=True, scope="session")
def _shared_lab_wheels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One lab wheel index per run: every lab the tests start (in this process or as a subprocess) builds it
    once under a file lock and serves it (`provisioner.lab.lab.wheel_cache`); tests of the newcomer's first
    run remove the variable to build their own."""
    from provisioner.lab.lab import WHEEL_CACHE_ENV
    from tests.support import labcache

    shared = run_shared_dir(tmp_path_factory, "shared-lab-wheels")
    labcache.bind(shared)
    before = os.environ.get(WHEEL_CACHE_ENV)
    os.environ[WHEEL_CACHE_ENV] = str(shared)
    yield
    if before is None:
        os.environ.pop(WHEEL_CACHE_ENV, None)
    else:
        os.environ[WHEEL_CACHE_ENV] = before


@pytest.fixture(autouse=True)
def _node_lock_dir(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """In-process runs take the node-side lock in a directory of the test's own, never in the machine's
    /run/lock (a local target's "node" is this machine; other test processes may run beside this one).
    Subprocesses (`provisioner replay` against a lab) use the real path inside the lab node's own /run."""
    import provisioner.node_lock

    monkeypatch.setattr(provisioner.node_lock, "LOCK_DIR", str(tmp_path_factory.mktemp("node-locks")))


#: what a module's scratch clean-up leaves for the rest of the session (`_shared_lab_wheels`)
_SESSION_SCRATCH = frozenset({"shared-lab-wheels", ".trash", "golden-node"})


@pytest.fixture(autouse=True, scope="module")
def _module_scratch(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A lab on disk is 1-7 GB (a container's venv with a real torch, its uv cache): what a module's fixtures
    made under the session's base directory goes once the module is done, so the suite's disk stays that of
    a few labs, not of all of them. A module with a failed test keeps its directories to be read
    (`tmp_path_retention_policy = "failed"` does the same for each test's own tmp_path)."""
    base = tmp_path_factory.getbasetemp()
    before = set(os.listdir(base))
    failed = request.session.testsfailed
    yield
    if request.session.testsfailed != failed:
        return
    for name in set(os.listdir(base)) - before - _SESSION_SCRATCH:
        scratch.discard(base / name, scratch.trash_dir(tmp_path_factory))
