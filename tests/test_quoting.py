"""The one quoting layer: hostile strings reach the program byte for byte; NUL is refused."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner import quoting
from provisioner.transport.container import ContainerTransport
from provisioner.transport.local import LocalTransport

HOSTILE = st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=40) | \
    st.sampled_from(["$(id)", "`id`", "'", '"', "\\", "\n", "a b", ";rm -rf /tmp/x", "$((1+1))", "${HOME}", "*", "-e",
                     "--", "!!", "~root", "\r\n", "\t"])


@settings(max_examples=60, deadline=None)
@given(st.lists(HOSTILE, min_size=1, max_size=5))
def test_join_round_trips_through_a_real_shell(args: list[str]) -> None:
    cmd = quoting.join(["printf", "%s\\0", *args])
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, check=True).stdout
    assert out.split(b"\0")[:-1] == [a.encode() for a in args]


@settings(max_examples=40, deadline=None)
@given(st.lists(HOSTILE, min_size=1, max_size=4))
def test_pct_exec_bash_lc_nesting_round_trips(args: list[str]) -> None:
    """The container path quotes twice (node shell, then `bash -lc`): emulate pct with `env --` and check."""
    node_argv = ContainerTransport(LocalTransport(), 200).wrap(["printf", "%s\\0", *args])
    assert node_argv[:4] == ["pct", "exec", "200", "--"]
    emulated = quoting.join(["env", "--", *node_argv[4:]])  # what pct would exec inside the container
    out = subprocess.run(["sh", "-c", emulated], capture_output=True, check=True).stdout
    assert out.split(b"\0")[:-1] == [a.encode() for a in args]


@given(st.text(max_size=10).map(lambda s: s + "\x00"))
def test_nul_is_refused(arg: str) -> None:
    with pytest.raises(quoting.UnsafeArgument):
        quoting.join(["echo", arg])


def test_invalid_vmid_refused() -> None:
    with pytest.raises(ValueError):
        quoting.pct_exec(99, ["true"])
