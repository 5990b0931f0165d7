"""SVG snapshots of key pages at 80×24 and 120×40 (update with `pytest --snapshot-update`).

The page data comes from the same pipelines the steps use: the lab's reference host rendered as
`nvidia-smi --query-gpu` CSV and parsed by the engine's parser, and the real resolver's answer
for 8 × CC 12.0 with driver 595.71.05 and Python 3.12.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from provisioner.facts.nvidia import parse_gpu_query_csv
from provisioner.lab.render import reference_host, render_query_csv
from provisioner.playbook import load
from provisioner.resolver import Resolution, ResolveRequest, resolve
from provisioner.steps.state import HostInventory, TorchChoice
from screens.app import ProvisionerApp
from screens.wizard_session import WizardSession
from tests.test_tui_support import PLAYBOOK

pytestmark = pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="snapshots are generated on Python 3.11")


@pytest.fixture(autouse=True)
def _steady(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(Input, "_toggle_cursor", lambda self: None)  # no cursor blink in snapshots
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))


def reference_inventory() -> HostInventory:
    host = reference_host()
    gpus = parse_gpu_query_csv(render_query_csv(host))
    return HostInventory(gpus=gpus, driver_version="595.71.05", module_flavour="open", uvm_major=None,
                         caps_major=None, device_nodes=[f"/dev/nvidia{g.index}" for g in gpus], pve_version="8.4.1",
                         pve_release=(8, 4), kernel="6.8.12-9-pve", cgroup_version=2,
                         warnings=["/dev/nvidia-uvm does not exist on the host yet "
                                   "(nvidia-modprobe -u -c=0 creates it)"])


def make_app(tmp_path: Path, page: str) -> ProvisionerApp:
    session = WizardSession(load(PLAYBOOK), playbook_path="playbooks/blackwell-8gpu-lxc.yaml", runs_dir=tmp_path)
    return ProvisionerApp(session, start_page=page)


async def show(pilot: Pilot[Any], **known: Any) -> None:
    """Put what the steps would have learnt (RunState fields) into the session, then redraw."""
    app = pilot.app
    assert isinstance(app, ProvisionerApp)
    for name, value in known.items():
        setattr(app.session.state, name, value)
    app.screen.refresh_view()  # type: ignore[attr-defined]
    app.screen.refresh_controls()  # type: ignore[attr-defined]
    await pilot.pause()


def test_connect_page_80x24(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(make_app(tmp_path, "connect"), terminal_size=(80, 24))


def test_container_page_80x24(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(make_app(tmp_path, "container"), terminal_size=(80, 24))


def test_inventory_page_120x40(snap_compare: Any, tmp_path: Path) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await show(pilot, inventory=reference_inventory())

    assert snap_compare(make_app(tmp_path, "inventory"), terminal_size=(120, 40), run_before=run_before)


def test_pytorch_page_120x40(snap_compare: Any, tmp_path: Path) -> None:
    resolution = resolve(ResolveRequest(cc=["12.0"] * 8, driver="595.71.05", python="3.12", arch="x86_64",
                                        glibc=None, torch="==2.11.0", prefer="lowest-cuda"))
    assert isinstance(resolution, Resolution) and resolution.variant == "cu128"
    choice = TorchChoice(resolution=resolution, python="3.12", request={})

    async def run_before(pilot: Pilot[Any]) -> None:
        await show(pilot, torch=choice)

    assert snap_compare(make_app(tmp_path, "pytorch"), terminal_size=(120, 40), run_before=run_before)
