"""A known_hosts file --trust-new-host may write to in a test: under a configuration directory of the test's
own (XDG_CONFIG_HOME), the one place besides ~/.ssh/known_hosts a new host key is written
(`provisioner.transport.known_hosts_file`)."""

from __future__ import annotations

from pathlib import Path

import pytest


def config_dir(tmp_path: Path) -> Path:
    """The XDG_CONFIG_HOME a test (or the CLI it runs) uses."""
    return tmp_path / "config"


def config_known_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point this process's configuration directory into `tmp_path`; the known_hosts path inside it (its
    directory made, the file not)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_dir(tmp_path)))
    path = config_dir(tmp_path) / "gpu-provisioner" / "known_hosts"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
