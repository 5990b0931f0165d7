"""The one atomic writer (provisioner/atomic.py): all or nothing, the mode asked for, no temporary file left."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from provisioner import atomic


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_replaces_the_old_file_with_the_default_mode_of_open(tmp_path: Path) -> None:
    target = tmp_path / "playbook.yaml"
    target.write_text("old\n")
    old_umask = os.umask(0o027)
    try:
        atomic.write_text(target, "new\n")
    finally:
        os.umask(old_umask)
    assert target.read_text() == "new\n"
    assert _mode(target) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["playbook.yaml"]


def test_secret_mode_holds_and_an_error_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "bundle.tar.gz"
    atomic.write_bytes(target, b"first", mode=0o600)
    assert _mode(target) == 0o600
    with pytest.raises(RuntimeError, match="disk full"), atomic.AtomicWriter(target, mode=0o644) as fh:
        fh.write(b"half")
        raise RuntimeError("disk full")
    assert target.read_bytes() == b"first" and _mode(target) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle.tar.gz"]


def test_a_target_named_late_lands_under_that_name(tmp_path: Path) -> None:
    writer = atomic.AtomicWriter(tmp_path / "layer", mode=0o644)
    with writer as fh:
        fh.write(b"blob")
        writer.path = tmp_path / "sha256-of-blob"
    assert (tmp_path / "sha256-of-blob").read_bytes() == b"blob"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sha256-of-blob"]
    writer = atomic.AtomicWriter(tmp_path / "layer")
    with pytest.raises(ValueError, match="would not be atomic"), writer as fh:
        fh.write(b"x")
        writer.path = tmp_path.parent / "elsewhere"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sha256-of-blob"]
