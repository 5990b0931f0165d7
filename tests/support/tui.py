"""Helpers shared by the wizard's tests (no tests here)."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Input

from provisioner.facts.smi_csv import parse_gpu_query_csv
from provisioner.lab.render import reference_host, render_query_csv
from provisioner.payloads import BurninReport
from provisioner.playbook import load
from provisioner.resolver import Resolution, ResolveRequest, resolve
from provisioner.steps.state import GpuDetection, HostInventory, TorchChoice
from screens.app import ProvisionerApp
from screens.step_page import StepPage
from screens.wizard_session import WizardSession

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "playbooks" / "blackwell-8gpu-lxc.yaml"


async def wait_idle(app: Any, pilot: Any, timeout: float = 60.0) -> None:
    """Wait until the engine worker is done and the UI has processed its messages."""
    deadline = time.monotonic() + timeout
    await pilot.pause()
    while app.busy:
        if time.monotonic() > deadline:
            raise AssertionError(f"the engine is still busy after {timeout}s")
        await asyncio.sleep(0.02)
    await pilot.pause()


async def wait_for(pilot: Any, predicate: Any, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.02)


def screen_text(app: Any) -> str:
    """What the terminal shows, as plain text (one line per row)."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(segment.text for segment in strip) for strip in strips)


def burst(app: Any, keys: list[str]) -> None:
    """Post `keys` to the app at once, as the terminal driver does for a burst of input bytes
    (fast typing, a paste, a loaded machine): no pause and no wait between two keys."""
    from textual import events
    from textual.keys import _character_to_key

    for key in keys:
        char = key if len(key) == 1 else None
        name = _character_to_key(key) if char is not None and not key.isalnum() else key
        if key == "space":
            name, char = "space", " "
        event = events.Key(name, char)
        event.set_sender(app)
        app._driver.send_message(event)


def make_app(tmp_path: Path, page: str) -> ProvisionerApp:
    session = WizardSession(load(PLAYBOOK), playbook_path="playbooks/blackwell-8gpu-lxc.yaml", runs_dir=tmp_path,
                            record_to="/nonexistent/recorded.yaml")
    session.run.runlog.path = Path("/nonexistent/runs/run-snapshot.jsonl")  # shown on the Summary (run ids vary)
    return ProvisionerApp(session, start_page=page)


async def show(pilot: Pilot[Any], name: str) -> None:
    app = pilot.app
    assert isinstance(app, ProvisionerApp)
    await pilot.pause()
    ctx = app.session.context()
    for field, value in page_data(name).items():
        setattr(app.session.state, field, value)
    page = app.screen
    assert isinstance(page, StepPage)
    if name == "burnin":
        from provisioner.steps.burnin_run import _metric_from_line

        app.active_page = page
        for line in (LOGS / "clean-nccl-tests-all-reduce.log").read_text().splitlines():
            _metric_from_line(ctx, line)
        app.flush_events()
    if name == "summary":
        for run in app.session.runs:
            run.status, run.message = "ok", "no change"
    page.refresh_view()
    page.refresh_controls()
    await pilot.pause()


async def type_into(app: Any, pilot: Any, selector: str, keys: list[str], expected: str) -> Input:
    field = app.screen.query_one(selector, Input)
    field.focus()
    await pilot.pause()
    burst(app, keys)
    await wait_for(pilot, lambda: field.value == expected, timeout=60,
                   what=f"{selector} to read back what was typed (now {field.value!r})")
    for _ in range(3):  # nothing arrives late and changes it again
        await pilot.pause()
    assert field.value == expected
    return field


LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def reference_inventory() -> HostInventory:
    host = reference_host()
    gpus = parse_gpu_query_csv(render_query_csv(host))
    return HostInventory(gpus=gpus, driver_version="595.71.05", module_flavour="open", uvm_major=None,
                         caps_major=None, device_nodes=[f"/dev/nvidia{g.index}" for g in gpus], pve_version="8.4.1",
                         pve_release=(8, 4), kernel="6.8.12-9-pve", cgroup_version=2,
                         warnings=["/dev/nvidia-uvm does not exist on the host yet "
                                   "(nvidia-modprobe -u -c=0 creates it)"])


def torch_choice() -> TorchChoice:
    res = resolve(ResolveRequest(cc=["12.0"] * 8, driver="595.71.05", python="3.12", arch="x86_64", glibc=None,
                                 torch="==2.11.0", prefer="lowest-cuda"))
    assert isinstance(res, Resolution) and res.variant == "cu128"
    return TorchChoice(resolution=res, python="3.12", request={})


def freeze() -> list[str]:
    lines = (LOGS / "clean-uv-torch-install.log").read_text().splitlines()
    return ["Using Python 3.12.3 environment at: /opt/torch-venv",
            *[m.group(1) for line in lines if (m := re.match(r"^ \+ (\S+==\S+)$", line))]]


def page_data(name: str) -> dict[str, Any]:
    """What the steps would have learnt before page `name` (RunState fields)."""
    inventory = reference_inventory()
    devices = [f"/dev/nvidia{i}" for i in range(8)] + ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                                       "/dev/nvidia-modeset"]
    data: dict[str, dict[str, Any]] = {
        "inventory": {"inventory": inventory},
        "passthrough": {"inventory": inventory, "passthrough_devices": devices},
        "driver": {"inventory": inventory, "host_driver": "595.71.05",
                   "detection": GpuDetection(gpus=list(inventory.gpus))},
        "pytorch": {"torch": torch_choice()},
        "venv": {"torch": torch_choice(), "venv_freeze": freeze()},
        # the report as burnin.run parses it from the rank's JSON line (its `verdict` object, phase -> status)
        "burnin": {"burnin": BurninReport.model_validate({"status": "pass", "verdict": {
            "status": "pass", "overall": "pass",
            "phases": {"preflight": "pass", "gemm": "pass", "collectives": "pass"}}})},
    }
    return data.get(name, {})
