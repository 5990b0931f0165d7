"""uv invoked by path (`$UV`), not on PATH: the lab finds it (issue 22 item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.executables import copy_executable


def test_the_lab_finds_a_uv_invoked_by_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`/somewhere/uv run provisioner demo` with no uv on PATH: uv names itself in $UV, the lab binds that one."""
    import shutil

    from provisioner.lab.sandbox import find_uv

    real = shutil.which("uv")
    if real is None:
        pytest.skip("uv is not installed")
    own = tmp_path / "opt" / "uv"
    own.parent.mkdir()
    copy_executable(Path(real).resolve(), own)
    monkeypatch.delenv("PROVISIONER_LAB_UV", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("UV", str(own))
    monkeypatch.setattr("sys.prefix", str(tmp_path / "no-venv"))
    monkeypatch.setattr("sys.base_prefix", str(tmp_path / "no-base"))
    assert find_uv() == own.resolve()
