"""Fields checked against the node (issue 36 item 3): the wizard reads the node's storages (with their content
types), bridges, templates, cores and memory from the Proxmox API, refuses a value the node does not have as it
is typed (offering what it has), and turns an API error at apply that names a value of the node into a finding
naming the field and the fix.

Real HTTPS to the lab's PVE API server in-process (tests/support/lab.py: its storages are the lab's defaults,
`local` (dir: vztmpl, iso, backup) and `local-lvm` (lvmthin: rootdir, images), its one bridge `vmbr0` (`GET
/nodes/pve/network`), 128 cores); the error at apply is the server's own answer to `POST /nodes/pve/lxc` read
through our client. What a node answers is hostile input: `gather` is also fed answers no PVE gives.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from textual.widgets import Button, Input, Static

from provisioner.node_resources import MAX_ITEMS, api_error_finding, field_problems, gather
from provisioner.playbook import load
from provisioner.proxmox.client import PveClient
from provisioner.proxmox.errors import ProxmoxError
from provisioner.steps.lxc_create import CreateParams
from provisioner.steps.pve_ops import as_step_failed
from provisioner.words import Words
from screens.app import ProvisionerApp
from screens.step_page import StepPage
from screens.wizard_session import PAGES, WizardSession
from tests.support.lab import UBUNTU
from tests.support.lab import ApiLab as Lab
from tests.support.tui import PLAYBOOK, wait_for

WIZARD_WORDS = Words("wizard", {kind: page.title for page in PAGES for kind in page.kinds})


def lab_session(lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WizardSession:
    state, server = lab
    monkeypatch.setenv("PVE_LAB_PW", state.credentials().password)
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    book = load(PLAYBOOK)
    api = book.target.api.model_copy(update={"port": server.port, "password": "env:PVE_LAB_PW",  # type: ignore[union-attr]
                                             "ca_file": str(server.cafile), "verify_tls": True})
    target = book.target.model_copy(update={"host": "127.0.0.1", "local": True, "node": "pve", "api": api})
    return WizardSession(book.model_copy(update={"target": target}), playbook_path=str(PLAYBOOK), runs_dir=tmp_path,
                         record_to=str(tmp_path / "rec.yaml"))


async def test_the_node_is_read_and_the_container_form_refuses_what_it_lacks(
        make_lab: Callable[..., Lab], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session = lab_session(make_lab(), tmp_path, monkeypatch)
    res = await session.read_resources()
    assert res is not None and res.node == "pve"
    assert res.storages_for("rootdir") == ["local-lvm"] and res.storages_for("vztmpl") == ["local"]
    assert res.templates is not None and UBUNTU in res.templates
    assert res.cores == 128 and res.memory_mib is not None and res.memory_mib > 0
    assert res.bridges == ("vmbr0",)  # GET /nodes/pve/network?type=any_bridge, the lab node's one bridge

    app = ProvisionerApp(session, start_page="container")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: getattr(app.screen, "body_ready", False), what="the container page")
        page = app.screen
        assert isinstance(page, StepPage)
        index = page.indices[0]

        async def typed(field: str, value: str) -> str:
            page.query_one(f"#s{index}--{field}", Input).value = value
            await pilot.pause()
            page.flush_forms()
            await pilot.pause()
            return str(page.query_one(f"#s{index}--{field}--error", Static).render())

        said = await typed("rootfs_storage", "local-lvmm")
        assert "storage 'local-lvmm' does not exist on pve" in said and "local-lvm" in said, said
        assert page.form_valid[index] is False and page.query_one("#run", Button).disabled
        assert session.runs[index].spec.params.get("rootfs_storage") != "local-lvmm"  # the refused value is not kept
        said = await typed("rootfs_storage", "local")
        assert "does not hold rootdir" in said and "local-lvm" in said, said
        said = await typed("rootfs_storage", "local-lvm")
        assert "✗" not in said and page.form_valid[index] is True

        said = await typed("net", "bridge=vmbr9,ip=dhcp")
        assert "bridge 'vmbr9' does not exist on pve; bridges: vmbr0" in said, said
        assert page.form_valid[index] is False and page.query_one("#run", Button).disabled
        said = await typed("net", "bridge=vmbr0,ip=dhcp")
        assert "✗" not in said and page.form_valid[index] is True, said

        said = await typed("cores", "999")
        assert "pve has 128 cores" in said, said
        await typed("cores", "64")
        said = await typed("template", "local-lvm:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst")
        assert "does not hold templates" in said and "local" in said, said
        said = await typed("template", "local:vztmpl/debian-99-standard_99.0-1_amd64.tar.zst")
        assert "not on local" in said and "ubuntu-24.04" in said, said
        await typed("template", UBUNTU)
        assert page.form_valid[index] is True and not page.query_one("#run", Button).disabled


async def test_an_api_error_at_apply_names_the_field_and_the_fix(lab: Lab) -> None:
    state, server = lab
    client = PveClient.https("127.0.0.1", server.port, password=state.credentials().password, verify=server.cafile)
    params = CreateParams(rootfs_storage="local-lvmm")
    with pytest.raises(ProxmoxError) as caught:
        client.create_ct("pve", params.api_params(200))
    message = as_step_failed("create CT 200", caught.value).message
    assert "storage 'local-lvmm' does not exist" in message  # the server's words, read through our client

    finding = api_error_finding("lxc.create", message, params.model_dump(), WIZARD_WORDS)
    assert finding is not None, message
    assert finding["root_cause"] == "storage 'local-lvmm' does not exist on the node"
    assert "field 'rootfs storage' on the Container page" in str(finding["fix"])
    assert "then Retry" in str(finding["fix"])
    headless = api_error_finding("lxc.create", message, params.model_dump(), Words())
    assert headless is not None and "playbook key lxc.create params: rootfs_storage" in str(headless["fix"])
    # an error that names no value of the node is left to the diagnoser
    assert api_error_finding("lxc.create", "create CT 200: connection reset", params.model_dump(), Words()) is None


class HostileNode:
    """A Proxmox API client whose node answers what no PVE does: wrong types, ids outside their syntax,
    endless lists, numbers as text or out of range (the shapes `gather` reads, `PveClient`'s methods)."""

    def storages(self, node: str) -> object:
        return [{"storage": "ok-store", "type": "dir", "content": "rootdir,vztmpl"}, {"storage": 7},
                {"storage": "bad id; rm -rf /", "content": "rootdir"}, {"storage": ["local"]}, "local-lvm",
                {"storage": "ok2", "content": {"rootdir": 1}}, {"storage": "x" * 300, "content": "rootdir"}]

    def storage_content(self, storage: str, content: str, node: str) -> object:
        return [{"volid": "ok-store:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"},
                {"volid": "ok-store:vztmpl/../../etc/shadow"}, {"volid": 12}, None]

    def request(self, method: str, path: str, params: dict[str, str]) -> object:
        assert (method, path, params) == ("GET", "nodes/pve/network", {"type": "any_bridge"})
        many = [{"iface": f"vmbr{n}", "type": "bridge"} for n in range(MAX_ITEMS * 3)]
        return [{"iface": "eno1", "type": "eth"}, {"iface": "vmbr0; reboot", "type": "bridge"},
                {"iface": 5, "type": "bridge"}, {"iface": "vnet1", "type": "vnet"}, {"iface": "br-x" * 10,
                                                                                   "type": "bridge"}, *many]

    def nodes(self) -> object:
        return [{"node": "other", "maxcpu": 4}, {"node": "pve", "maxcpu": "64", "maxmem": True}]


async def test_what_the_node_answers_is_read_as_hostile_input() -> None:
    res = await gather(HostileNode(), "pve")
    assert res.storages is not None and [(s.id, sorted(s.content)) for s in res.storages] == [
        ("ok-store", ["rootdir", "vztmpl"]), ("ok2", [])]
    assert res.templates == ("ok-store:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",)
    assert res.bridges is not None and "eno1" not in res.bridges and "vnet1" in res.bridges
    assert len(res.bridges) <= MAX_ITEMS and all(b.startswith(("vmbr", "vnet")) and ";" not in b for b in res.bridges)
    assert (res.cores, res.memory_mib) == (None, None)  # text and a bool are not numbers: nothing is checked


class SilentNode(HostileNode):
    """A node that answers nothing readable: every list is an error or not a list."""

    def storages(self, node: str) -> object:
        raise PermissionError("403 Permission check failed (/storage, Datastore.Audit)")

    def request(self, method: str, path: str, params: dict[str, str]) -> object:
        return {"data": "not a list"}


async def test_an_unreadable_answer_checks_nothing() -> None:
    res = await gather(SilentNode(), "pve")
    assert (res.storages, res.templates, res.bridges) == (None, None, None)
    assert field_problems("lxc.create", {"rootfs_storage": "nope", "net": {"bridge": "vmbr9"}}, res) == {}
