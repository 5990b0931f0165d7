"""Fields that speak Proxmox in the running wizard (issue #28 item 3): what is typed stays what was typed
(an "integer" input used to turn 1.5 into 15), the error says why under the field, ranges and PVE's net0
syntax are accepted, and each fact has one field (no `vmid` beside the container id, one `onboot`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input, Static

from provisioner.playbook import load
from screens.app import ProvisionerApp
from screens.wizard_session import WizardSession
from tests.support.tui import PLAYBOOK, type_into


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ProvisionerApp:
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    session = WizardSession(load(PLAYBOOK), playbook_path=str(PLAYBOOK), runs_dir=tmp_path,
                            record_to=str(tmp_path / "recorded.yaml"))
    return ProvisionerApp(session)


async def test_fields_keep_what_was_typed_and_say_what_is_wrong(app: ProvisionerApp) -> None:
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        app.goto("container")
        await pilot.pause()
        page = app.screen
        assert not page.query("#s2--vmid"), "the container id is the page's own field; no second vmid field"
        field = await type_into(app, pilot, "#s2--cores", ["backspace"] * 10 + list("1.5"), "1.5")
        assert field.value == "1.5"
        page.flush_forms()  # type: ignore[attr-defined]
        error = str(page.query_one("#s2--cores--error", Static).render())
        assert "'1.5' is not a whole number" in error
        assert app.session.runs[2].spec.params["cores"] == 64  # the invalid value never reached the step
        # blank: the message names the playbook's value (64), not the model's default (8)
        await type_into(app, pilot, "#s2--cores", ["backspace"] * 10, "")
        page.flush_forms()  # type: ignore[attr-defined]
        assert "the playbook has 64" in str(page.query_one("#s2--cores--error", Static).render())
        # net in PVE's syntax, as the plan prints it
        net = page.query_one("#s2--net", Input)
        assert net.value == "bridge=vmbr0,ip=192.0.2.200/24,gw=192.0.2.1"
        await type_into(app, pilot, "#s2--net", ["backspace"] * 60 + list("bridge=vmbr1,ip=dhcp"),
                        "bridge=vmbr1,ip=dhcp")
        await type_into(app, pilot, "#s2--cores", list("32"), "32")
        page.flush_forms()  # type: ignore[attr-defined]
        params = app.session.runs[2].spec.params
        assert params["cores"] == 32 and params["net"]["bridge"] == "vmbr1" and params["net"]["ip"] == "dhcp"

        app.goto("passthrough")
        await pilot.pause()
        index = app.session.indices(("lxc.gpu_passthrough",))[0]
        await type_into(app, pilot, f"#s{index}--gpus", ["backspace"] * 10 + list("0-3"), "0-3")
        app.screen.flush_forms()  # type: ignore[attr-defined]
        assert app.session.runs[index].spec.params["gpus"] == [0, 1, 2, 3]
        boot = app.session.indices(("lxc.boot_persistence",))
        for i in boot:
            assert not app.screen.query(f"#s{i}--onboot"), "onboot is the Container page's field"
