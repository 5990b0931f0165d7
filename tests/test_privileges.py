"""Privileges known before any change (issue 24 item 1).

The rule table (`provisioner.proxmox.privileges`, read from pve-container ``create_vm`` /
``check_ct_modify_config_perm`` and pve-access-control's permission model) is what the lab's API
enforces and what `plan`/`replay` check up front against ``GET /access/permissions``; the README's
least-privilege table is rendered from it. The engine runs against the lab's HTTPS API with its API
token (privilege separation on, the ACLs under test) and the lab's SSH endpoint (root shell: devN).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.events import Bus, Event, Message, StepFinished
from provisioner.exitcodes import ExitCode
from provisioner.playbook import ApiSettings, Playbook, SshSettings, StepSpec, Target
from provisioner.proxmox import privileges
from provisioner.runner import HostResult, run_host
from provisioner.session import pve_factory
from provisioner.steps.lxc_create import CreateParams
from provisioner.transport.ssh import SshTarget, SshTransport
from tests.support.lab import ssh_node, start_api
from tests.support.require import require

pytestmark = pytest.mark.timeout(600)

README = Path(__file__).resolve().parents[1] / "README.md"
VMID = 200
TODAY = ["VM.Allocate", "VM.PowerMgmt", "Datastore.AllocateSpace"]  # the README's set before issue 24


def test_readme_table_is_rendered_from_the_rule_table() -> None:
    text = README.read_text()
    start = text.index("<!-- privileges-table:start -->\n") + len("<!-- privileges-table:start -->\n")
    end = text.index("<!-- privileges-table:end -->")
    assert text[start:end] == privileges.render_table()


def test_the_shipped_create_needs_every_config_privilege() -> None:
    needs = privileges.create_needs(CreateParams().api_params(VMID))
    got = {(p, n.path) for n in needs for p in n.privileges}
    for priv in ("VM.Allocate", "VM.Config.CPU", "VM.Config.Memory", "VM.Config.Disk", "VM.Config.Network",
                 "VM.Config.Options"):
        assert (priv, f"/vms/{VMID}") in got, priv
    assert ("Datastore.AllocateSpace", "/storage/local-lvm") in got  # rootfs: a new volume
    assert ("SDN.Use", "/sdn/zones/localnetwork/vmbr0") in got  # net0's bridge (check_vnet_access)
    # devN is root@pam's alone; a privileged container needs Sys.Modify on /
    (dev,) = privileges.config_needs("dev0", "/dev/nvidia0", vmid=VMID)
    assert dev.root_only and "only allowed for root@pam" in dev.why
    privileged = privileges.create_needs({**CreateParams().api_params(VMID), "unprivileged": 0})
    assert any(n.privileges == ("Sys.Modify",) and n.path == "/" for n in privileged)


def test_effective_permissions_follow_propagate_and_the_most_specific_path() -> None:
    perms = privileges.effective_permissions([("/vms", ["VM.Audit"], True), ("/vms/200", ["VM.PowerMgmt"], False)],
                                             ["/vms/200", "/vms/201"])
    assert perms["/vms/200"] == {"VM.PowerMgmt": 0}  # the more specific entry replaces the inherited one
    assert perms["/vms/201"] == {"VM.Audit": 1}
    assert privileges.has_privilege(perms, "VM.Audit", "/vms/300")
    assert not privileges.has_privilege(perms, "VM.PowerMgmt", "/vms/200/x")  # not propagated


# --- the engine against the lab's API ----------------------------------------------------------------


def full_acl() -> list[dict[str, Any]]:
    return [{"path": path, "privs": privs, "propagate": True}
            for path, privs in privileges.full_token_privileges().items()]


def without(priv: str) -> list[dict[str, Any]]:
    return [{**e, "privs": [p for p in e["privs"] if p != priv]} for e in full_acl()]


@pytest.fixture
async def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[dict[str, Any]]:
    monkeypatch.setenv("PROVISIONER_FILE_REF_DIRS", str(tmp_path / "secrets"))  # file: secrets only from there
    require(os.geteuid() == 0, "the lab node sandbox needs root (mount namespaces, mknod)")
    require(shutil.which("unshare") is not None, "util-linux unshare is not installed")
    from provisioner.lab.commands import write_node_bin
    from provisioner.lab.lab import Lab
    from provisioner.lab.sandbox import record_host_ns

    state = Lab(tmp_path / "lab").create_state()
    write_node_bin(state.root)
    record_host_ns(state.root)
    (tmp_path / "secrets").mkdir()
    token_file = tmp_path / "secrets" / "token"
    token_file.write_text(state.credentials().token_value)
    token_file.chmod(0o600)
    api = start_api(state)
    try:
        async with ssh_node(state) as ssh:
            yield {"state": state, "api": api, "ssh": ssh, "token_file": token_file}
    finally:
        api.stop()


def _playbook(lab: dict[str, Any], kinds: list[str]) -> Playbook:
    ssh, api = lab["ssh"], lab["api"]
    target = Target(host="127.0.0.1", node="pve", container=VMID,
                    ssh=SshSettings(user="root", port=ssh.port, key_file=str(ssh.client_key_path),
                                    known_hosts=str(ssh.known_hosts)),
                    api=ApiSettings(port=api.port, user="root@pam", token_name="lab",
                                    token_value=f"file:{lab['token_file']}", ca_file=str(api.cafile)))
    steps = [StepSpec(kind=k, params={"cores": 2, "memory": 2048, "rootfs_size_gb": 4} if k == "lxc.create" else {})
             for k in kinds]
    return Playbook(schema_version=1, name="least-privilege", target=target, steps=steps)


async def _run(lab: dict[str, Any], playbook: Playbook, mode: str) -> tuple[HostResult, list[Event]]:
    events: list[Event] = []
    bus = Bus(events.append)
    ssh = playbook.target.ssh
    node = SshTransport(SshTarget(host="127.0.0.1", port=ssh.port, user="root", key_file=str(ssh.key_file),
                                  known_hosts=str(ssh.known_hosts)), bus)
    result = await run_host(playbook, bus, node, mode=mode, host="lab",  # type: ignore[arg-type]
                            pve_factory=pve_factory(playbook.target))
    return result, events


def _failed_steps(events: list[Event]) -> dict[str, str]:
    return {e.step: e.message for e in events if isinstance(e, StepFinished) and e.status == "failed"}


def _writes(state: Any) -> list[str]:
    return [f"{r['method']} {r['path']}" for r in state.read_request_log() if r["method"] != "GET"]


async def test_todays_readme_token_is_told_what_it_lacks_before_any_change(lab: dict[str, Any]) -> None:
    state = lab["state"]
    state.update_settings(token_privsep=True, token_acl=[{"path": "/", "privs": TODAY, "propagate": True}])
    playbook = _playbook(lab, ["lxc.create", "lxc.start"])
    planned, events = await _run(lab, playbook, "plan")
    assert planned.exit_code == ExitCode.PERMISSION_DENIED
    failed = _failed_steps(events)
    for text in (f"VM.Config.CPU on /vms/{VMID} (cores)", f"VM.Config.Memory on /vms/{VMID} (memory, swap)",
                 f"VM.Config.Disk on /vms/{VMID} (rootfs)", f"VM.Config.Network on /vms/{VMID} (hostname, net0)",
                 "SDN.Use on /sdn/zones/localnetwork/vmbr0 (net0: bridge vmbr0)",
                 f"VM.Config.Options on /vms/{VMID} (onboot, tags)", f"VM.Audit on /vms/{VMID}"):
        assert text in failed["lxc.create"], failed
    assert failed["lxc.start"] == f"missing privileges: VM.Audit on /vms/{VMID} (read the container's status)", failed
    replayed, events = await _run(lab, playbook, "apply")
    assert replayed.exit_code == ExitCode.PERMISSION_DENIED
    errors = [e.text for e in events if isinstance(e, Message) and e.level == "error"]
    assert errors and "step 1 lxc.create:" in errors[0] and "VM.Config.CPU" in errors[0], errors
    assert _writes(state) == [] and not state.has_ct(VMID)  # nothing changed


async def test_each_privilege_of_the_table_is_needed_and_the_full_set_provisions(lab: dict[str, Any]) -> None:
    state = lab["state"]
    playbook = _playbook(lab, ["lxc.create", "lxc.gpu_passthrough", "lxc.start"])
    for path, privs in privileges.full_token_privileges().items():
        for priv in privs:
            state.update_settings(token_privsep=True, token_acl=without(priv))
            planned, events = await _run(lab, playbook, "plan")
            assert planned.exit_code == ExitCode.PERMISSION_DENIED, priv
            messages = " | ".join(_failed_steps(events).values())
            assert f"{priv} on {path}" in messages or f"{priv} or Datastore.Audit on {path}" in messages, \
                (priv, messages)
            replayed, _ = await _run(lab, playbook, "apply")
            assert replayed.exit_code == ExitCode.PERMISSION_DENIED, priv
            assert _writes(state) == [] and not state.has_ct(VMID), priv
    state.update_settings(token_privsep=True, token_acl=full_acl())
    replayed, events = await _run(lab, playbook, "apply")
    assert replayed.exit_code == ExitCode.OK, _failed_steps(events)
    assert state.get_status(VMID).status == "running"
    assert any(k.startswith("dev") for k in state.read_conf(VMID).options())  # devN through the root shell


def test_lab_api_checks_each_parameter_for_a_privsep_token(tmp_path: Path) -> None:
    """The lab's handlers (pve_api.LabApi) answer a token with PVE's 403 per missing privilege, and
    ``GET /access/permissions`` with the token's effective privileges (get_effective_permissions)."""
    from provisioner.lab.pve_api import CLI_IDENTITY, Identity, LabApi
    from provisioner.lab.state import LabState

    state = LabState.create(tmp_path / "lab")
    api = LabApi(state, sync_tasks=True)
    token = Identity("token", "root@pam!lab")
    params = {**CreateParams().api_params(300), "node": "pve"}
    state.update_settings(token_privsep=True, token_acl=[{"path": "/", "privs": TODAY, "propagate": True}])
    denied = api.call("POST", "/nodes/pve/lxc", params, token)
    assert denied.status == 403
    assert denied.message == "Permission check failed (/vms/300, VM.Config.Network)\n"  # hostname: the first key
    perms = api.call("GET", "/access/permissions", {}, token)
    assert perms.status == 200 and perms.data["/"] == dict.fromkeys(TODAY, 1)
    assert perms.data["/vms"] == dict.fromkeys(TODAY, 1)  # propagated to the default paths
    assert api.call("GET", "/access/permissions", {"path": "/vms/300"}, token).data == {
        "/vms/300": dict.fromkeys(TODAY, 1)}
    state.update_settings(token_acl=full_acl())
    created = api.call("POST", "/nodes/pve/lxc", params, token)
    assert created.status == 200, created.message
    # devN stays root@pam's: a token (even with every privilege) gets check_ct_modify_config_perm's 403
    state.update_settings(token_privsep=False)
    dev = api.call("PUT", "/nodes/pve/lxc/300/config", {"node": "pve", "vmid": 300, "dev0": "/dev/nvidia0"}, token)
    assert (dev.status, dev.message) == (403, "Permission check failed (configuring device passthrough is only "
                                              "allowed for root@pam)\n")
    assert api.call("PUT", "/nodes/pve/lxc/300/config", {"node": "pve", "vmid": 300, "dev0": "/dev/nvidia0"},
                    CLI_IDENTITY).status == 200
