import os
import shutil
from collections.abc import Iterator

import pytest

from tests.support.pve_lab import lab, make_lab  # noqa: F401  (fixtures: the lab's PVE API in-process)
from tests.support.sshd import sshd  # noqa: F401  (fixture)


@pytest.fixture(autouse=True, scope="session")
def _shared_lab_wheels(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Labs whose cache a test names through `tests.support.labcache.with_shared_wheels` share one wheel index."""
    from tests.support import labcache

    labcache.bind(tmp_path_factory)


@pytest.fixture(autouse=True)
def _node_lock_dir(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """In-process runs take the node-side lock in a directory of the test's own, never in the machine's
    /run/lock (a local target's "node" is this machine; other test processes may run beside this one).
    Subprocesses (`provisioner replay` against a lab) use the real path inside the lab node's own /run."""
    import provisioner.node_lock

    monkeypatch.setattr(provisioner.node_lock, "LOCK_DIR", str(tmp_path_factory.mktemp("node-locks")))


#: what a module's scratch clean-up leaves for the rest of the session (`_shared_lab_wheels`)
_SESSION_SCRATCH = frozenset({"shared-lab-wheels"})


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
        path = base / name
        if path.is_symlink():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=True)
