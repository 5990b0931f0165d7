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
