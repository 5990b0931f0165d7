"""The lab's PVE API server in-process, for tests of the API and of our client."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.lab.pve_api import LabApiServer
from provisioner.lab.state import LabState

UBUNTU = "local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst"
NOT_DEFINED = "property is not defined in schema and the schema does not allow additional properties"

Lab = tuple[LabState, LabApiServer]


@pytest.fixture
def make_lab(tmp_path: Path) -> Iterator[Callable[..., Lab]]:
    """Factory of (state, started server) pairs; tasks finish after 50 ms; all stopped at teardown."""
    servers: list[LabApiServer] = []

    def make(**settings: Any) -> Lab:
        settings.setdefault("task_delay", 0.05)
        state = LabState.create(tmp_path / f"lab{len(servers)}", **settings)
        server = LabApiServer(state).start()
        servers.append(server)
        return state, server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def lab(make_lab: Callable[..., Lab]) -> Lab:
    return make_lab()
