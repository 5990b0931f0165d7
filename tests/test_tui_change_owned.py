"""Change what we own (issue 28): a container carrying our tag whose spec differs is updated in place.

In the wizard: edit cores on the done Container page → the plan names `cores 64 → 32`, the confirmed
apply changes CT 200 (read back from the lab's config file), putting a value back restores the step,
a shrinking disk is refused with PVE's reason and a fix naming the wizard's field. Headless: the same
edit from a playbook plans (with its `pct set` command as data) and replays the same.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import Button, Input, Static

from provisioner.playbook import dump, load
from provisioner.steps.lxc_create import CreateParams
from provisioner.steps.lxc_spec import plan_update
from screens.app import ProvisionerApp
from screens.dialogs import QuitDialog
from screens.step_page import StepPage
from tests.support.lab import lab_env, lab_session  # noqa: F401  (fixture)
from tests.support.tui import PLAYBOOK, ROOT, screen_text, wait_for, wait_idle

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def conf_value(lab_root: Path, vmid: int, key: str) -> str:
    text = (lab_root / "etc" / "pve" / "lxc" / f"{vmid}.conf").read_text()
    m = re.search(rf"^{key}: (.*)$", text.split("\n[", 1)[0], re.M)
    return m.group(1) if m else ""


def test_plan_update_diffs_and_refusals() -> None:
    """Pure: what differs becomes `pct set` parameters (net0 keeps its MAC), a grown disk a resize,
    a smaller disk / another privilege / another storage a refusal with PVE's reason."""
    params = CreateParams(hostname="gpu-ct", cores=32, memory=65536, swap=0, rootfs_storage="local-lvm",
                          rootfs_size_gb=300, net={"bridge": "vmbr1", "ip": "dhcp"}, onboot=True)
    config = {"hostname": "gpu-ct", "cores": 64, "memory": 65536, "swap": 0, "unprivileged": 1, "onboot": 1,
              "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp,type=veth",
              "rootfs": "local-lvm:vm-200-disk-0,size=200G", "features": "nesting=1", "tags": "gpu-provisioner"}
    upd = plan_update(params, config, 200)
    assert upd.changes == ["cores 64 → 32", "net0 bridge=vmbr0,ip=dhcp → bridge=vmbr1,ip=dhcp",
                           "rootfs 200G → 300G (grow the disk)"]
    assert upd.config["cores"] == "32" and "hwaddr=BC:24:11:00:00:01" in upd.config["net0"]
    assert upd.resize_gb == 300 and not upd.refused
    assert upd.commands() == ["pct set 200 --cores 32 --net0 " + upd.config["net0"], "pct resize 200 rootfs 300G"]

    shrink = plan_update(params.model_copy(update={"rootfs_size_gb": 100, "unprivileged": False,
                                                   "rootfs_storage": "local"}), config, 200)
    assert any("unable to shrink disk size" in r for r in shrink.refused)
    assert any("unable to modify read-only option: 'unprivileged'" in r for r in shrink.refused)
    assert any("pct move-volume" in r for r in shrink.refused)
    same = plan_update(params.model_copy(update={"cores": 64, "net": params.net.model_copy(update={"bridge": "vmbr0"}),
                                                 "rootfs_size_gb": 200}), config, 200)
    assert same.empty


async def test_edit_cores_on_a_done_container_page_updates_it_in_place(lab_env: Path,
                                                                       tmp_path: Path) -> None:
    session = lab_session(lab_env, tmp_path)
    app = ProvisionerApp(session, start_page="container", lab=True)
    async with app.run_test(size=(100, 30)) as pilot:
        page = app.screen
        assert isinstance(page, StepPage)
        index = page.indices[0]
        run = session.runs[index]
        await pilot.press("ctrl+r")  # plan: create
        await wait_idle(app, pilot)
        await pilot.press("ctrl+r")  # apply
        await wait_idle(app, pilot, 300)
        assert run.status == "changed", run.message
        assert conf_value(lab_env, 200, "cores") == "64"

        page.query_one(f"#s{index}--cores", Input).value = "32"
        await pilot.pause()
        page.flush_forms()
        assert run.status == "edited"
        await pilot.press("ctrl+r")  # plan the update
        await wait_idle(app, pilot)
        assert run.status == "planned" and run.changes == ["update CT 200 in place: cores 64 → 32"], run.message
        plan_text = str(page.query_one("#plan", Static).render())
        assert "cores 64 → 32" in plan_text and "cores 64 → 32" in screen_text(app)
        assert str(page.query_one("#run", Button).label) == "Apply (1)"
        assert conf_value(lab_env, 200, "cores") == "64"  # nothing changed before the confirmation
        # The page says one thing: no "does not exist yet" above an in-place update.
        assert "does not exist yet" not in screen_text(app)
        assert "CT 200 exists; this plan updates it in place" in screen_text(app)
        # ctrl+q with the planned update asks (Stay keeps it on screen)
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: isinstance(app.screen, QuitDialog), what="the quit prompt")
        assert "a plan of 1 change(s) waits for Apply" in str(app.screen.query_one("#quit-text").render())
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is page, what="the prompt to close")
        assert app.is_running and run.planned
        await pilot.press("ctrl+r")  # the confirmation
        await wait_idle(app, pilot)
        assert run.status == "changed", run.message
        assert conf_value(lab_env, 200, "cores") == "32"
        recorded = next(s for s in session.recorded_playbook().steps if s.kind == "lxc.create")
        assert recorded.params["cores"] == 32 and not recorded.pending
        assert session.recap()["changed"] == 2  # counted from the events: the create and the update

        # An edit that is put back restores the step: nothing to plan, the Summary still counts it.
        cores = page.query_one(f"#s{index}--cores", Input)
        cores.value = "16"
        await pilot.pause()
        page.flush_forms()
        assert run.status == "edited" and session.recap()["changed"] == 2 and session.recap()["outdated"] == 1
        cores.value = "32"
        await pilot.pause()
        page.flush_forms()
        assert run.status == "changed" and session.recap()["outdated"] == 0
        assert page.query_one("#run", Button).disabled  # Done ✓

        # A smaller disk is refused with PVE's reason; the fix names the wizard's field.
        page.query_one(f"#s{index}--rootfs_size_gb", Input).value = "100"
        await pilot.pause()
        page.flush_forms()
        await pilot.press("ctrl+r")
        await wait_idle(app, pilot)
        assert run.status == "failed"
        assert "unable to shrink disk size" in run.message
        assert "field 'container id' on the Container page" in run.message
        assert "playbook" not in run.message.split("fix:", 1)[1]
        assert conf_value(lab_env, 200, "rootfs").endswith("size=200G")


async def test_the_same_edit_from_a_playbook_plans_and_replays_headless(lab_env: Path,
                                                                        tmp_path: Path) -> None:
    base = load(PLAYBOOK)
    create = next(s for s in base.steps if s.kind == "lxc.create")

    def one_step(cores: int) -> Path:
        spec = create.model_copy(update={"params": {**create.params, "cores": cores}})
        out = tmp_path / f"ct-{cores}.yaml"
        dump(base.model_copy(update={"steps": [spec]}), out)
        return out

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", "from provisioner.cli import main; main()", *args],
                              capture_output=True, text=True, cwd=ROOT, timeout=300, env=dict(os.environ))

    first = cli("replay", str(one_step(64)), "--lab", "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    assert conf_value(lab_env, 200, "cores") == "64"

    plan = cli("plan", str(one_step(32)), "--lab", "--json")
    assert plan.returncode == 0, plan.stderr[-3000:]
    steps = [step for host in json.loads(plan.stdout.strip().splitlines()[-1])["plan"].values() for step in host]
    create_plan = next(step for step in steps if step["changes"])
    assert create_plan["changes"] == ["update CT 200 in place: cores 64 → 32"]
    assert create_plan["commands"] == ["pct set 200 --cores 32"]
    assert conf_value(lab_env, 200, "cores") == "64"  # a plan changes nothing

    replay = cli("replay", str(one_step(32)), "--lab", "--json")
    assert replay.returncode == 0, replay.stderr[-3000:]
    recap = json.loads(replay.stdout.strip().splitlines()[-1])
    assert all(h["changed"] == 1 and h["failed"] == 0 for h in recap["hosts"].values()), recap
    assert conf_value(lab_env, 200, "cores") == "32"
    again = cli("replay", str(one_step(32)), "--lab", "--json")
    assert again.returncode == 0 and all(h["changed"] == 0 for h in
                                         json.loads(again.stdout.strip().splitlines()[-1])["hosts"].values())
