"""provisioner.environ.copy_environ: a copy of the environment that a change from another thread cannot break.

The CI run of 39ce828 failed so: a lab started in a worker thread copied ``os.environ`` with ``dict()``
while pytest's main thread removed ``PYTEST_CURRENT_TEST`` (KeyError). The race is modelled here
deterministically: the mapping loses a key between listing its keys and looking them up, exactly the
window ``os._Environ`` has (``__iter__`` lists ``_data``'s keys, each lookup is separate).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, MutableMapping

import pytest

from provisioner.environ import copy_environ


class _LosesAKeyMidCopy(MutableMapping[str, str]):
    """An environment from which another thread removes `gone` right after the keys are listed."""

    def __init__(self, data: dict[str, str], gone: str) -> None:
        self.data = dict(data)
        self.gone = gone

    def __iter__(self) -> Iterator[str]:
        keys = list(self.data)  # what os._Environ.__iter__ does
        self.data.pop(self.gone, None)  # the other thread's `del os.environ[...]`
        yield from keys

    def __getitem__(self, key: str) -> str:
        return self.data[key]

    def __setitem__(self, key: str, value: str) -> None:
        self.data[key] = value

    def __delitem__(self, key: str) -> None:
        del self.data[key]

    def __len__(self) -> int:
        return len(self.data)


def test_a_key_removed_while_copying_is_left_out_and_the_rest_copied(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"PATH": "/usr/bin", "PYTEST_CURRENT_TEST": "t (call)", "HOME": "/root"}
    with pytest.raises(KeyError):  # the copy the lab made before
        dict(_LosesAKeyMidCopy(env, "PYTEST_CURRENT_TEST"))
    monkeypatch.setattr(os, "environ", _LosesAKeyMidCopy(env, "PYTEST_CURRENT_TEST"))
    assert copy_environ() == {"PATH": "/usr/bin", "HOME": "/root"}


def test_the_real_environment_is_copied_whole_and_detached(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISIONER_ENVIRON_PROBE", "a b=c")
    copy = copy_environ()
    assert copy == dict(os.environ) and copy["PROVISIONER_ENVIRON_PROBE"] == "a b=c"
    copy["PROVISIONER_ENVIRON_PROBE"] = "changed"
    assert os.environ["PROVISIONER_ENVIRON_PROBE"] == "a b=c"
