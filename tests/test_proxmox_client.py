"""PveClient against the lab: real proxmoxer over HTTPS (the API over SSH is not offered: issue #25)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from provisioner.lab.pve_api import LabApiServer
from provisioner.lab.state import LabState
from provisioner.lab.tls import generate_lab_tls
from provisioner.proxmox.client import PveClient, PveVersion, normalize_fingerprint, wire_params
from provisioner.proxmox.errors import (
    AuthFailed,
    InvalidRequest,
    PermissionDenied,
    PveError,
    TaskFailed,
    TaskTimeout,
    TlsRejected,
    Unreachable,
)
from provisioner.proxmox.tasks import UPID_RE
from tests.support.lab import NOT_DEFINED, UBUNTU
from tests.support.lab import ApiLab as Lab


def password_client(state: LabState, server: LabApiServer, **kw: Any) -> PveClient:
    kw.setdefault("verify", server.cafile)
    return PveClient.https("127.0.0.1", server.port, password=state.credentials().password, **kw)


def token_client(state: LabState, server: LabApiServer) -> PveClient:
    creds = state.credentials()
    return PveClient.https("127.0.0.1", server.port, token_name=creds.token_name, token_value=creds.token_value,
                           verify=server.cafile)


def new_ct(client: PveClient, vmid: int = 200, **extra: Any) -> str:
    params: dict[str, Any] = {"vmid": vmid, "ostemplate": UBUNTU, "rootfs": "local-lvm:8", "unprivileged": True,
                              "net0": "name=eth0,bridge=vmbr0,ip=dhcp"}
    params.update(extra)
    return client.create_ct("pve", params)


# --------------------------------------------------------------------------------------------
# pure helpers
# --------------------------------------------------------------------------------------------
def test_wire_params_and_fingerprints() -> None:
    assert wire_params({"a": True, "b": False, "c": None, "d": 5, "e": "x"}) == {"a": 1, "b": 0, "d": 5, "e": "x"}
    fp = ":".join(["AB"] * 32)
    assert normalize_fingerprint(f"sha256:{fp}") == "ab" * 32 == normalize_fingerprint(fp.lower())
    with pytest.raises(ValueError):
        normalize_fingerprint("sha1:AB:CD")


@pytest.mark.parametrize(
    ("release", "devn", "deny_write"), [("7.4", False, False), ("8.1", True, False), ("8.3", True, True),
                                        ("9.1", True, True)])
def test_version_feature_flags(release: str, devn: bool, deny_write: bool) -> None:
    v = PveVersion(release, f"{release}.2")
    assert (v.supports_devn, v.supports_deny_write) == (devn, deny_write)


# --------------------------------------------------------------------------------------------
# HTTPS
# --------------------------------------------------------------------------------------------
def test_password_and_token_auth(lab: Lab) -> None:
    state, server = lab
    with password_client(state, server) as c:
        assert c.version() == PveVersion("8.4", "8.4.1", "2a5fa54a8503f96d")
        assert (c.auth_kind, c.user, c.is_root_pam, c.node) == ("ticket", "root@pam", True, "pve")
    with token_client(state, server) as t:
        assert t.version().supports_devn
        assert (t.auth_kind, t.user, t.is_root_pam) == ("token", "root@pam!lab", False)


def test_bad_credentials_raise_auth_failed(lab: Lab) -> None:
    _state, server = lab
    with pytest.raises(AuthFailed):
        PveClient.https("127.0.0.1", server.port, password="wrong", verify=server.cafile)
    bad_token = PveClient.https("127.0.0.1", server.port, token_name="lab",
                                token_value="00000000-0000-0000-0000-000000000000", verify=server.cafile)
    with pytest.raises(AuthFailed):
        bad_token.version()


def test_invalid_request_refused_before_sending(lab: Lab) -> None:
    state, server = lab
    c = password_client(state, server)
    c.version()
    before = len(state.read_request_log())
    with pytest.raises(InvalidRequest) as err:
        c.create_ct("pve", {"vmid": "abc", "ostemplate": UBUNTU, "gpus": 8})
    assert err.value.sent is False and err.value.status == 400
    assert err.value.errors == {"vmid": "type check ('integer') failed - got 'abc'", "gpus": NOT_DEFINED}
    assert len(state.read_request_log()) == before  # nothing reached the server
    # server-side validation errors map to the same exception (sent=True)
    with pytest.raises(InvalidRequest) as err:
        c.request("POST", "nodes/pve/lxc", {"vmid": 200, "ostemplate": UBUNTU, "unprivileged": "True"},
                  prevalidate=False)
    assert err.value.sent is True
    assert err.value.errors == {"unprivileged": "type check ('boolean') failed - got 'True'"}


def test_create_task_config_start_status(lab: Lab) -> None:
    state, server = lab
    c = password_client(state, server)
    assert c.nextid() == 100
    upid = new_ct(c, dev0="/dev/nvidia0,mode=0666", start=False)
    assert UPID_RE.match(upid)
    result = c.wait_task("pve", upid, timeout=10, poll=0.02)
    assert result.ok and result.exitstatus == "OK" and result.log[-1] == "TASK OK"
    conf = c.ct_config(200)
    assert conf["unprivileged"] == 1 and conf["dev0"] == "/dev/nvidia0,mode=0666"  # True went as 1
    assert conf["rootfs"] == "local-lvm:vm-200-disk-0,size=8G"
    c.set_config(200, dev1="/dev/nvidia-uvm", memory=4096)
    assert c.ct_config(200)["memory"] == 4096
    assert c.ct_status(200)["status"] == "stopped"
    c.wait_task("pve", c.start_ct(200), timeout=10, poll=0.02)
    assert c.ct_status(200)["status"] == "running"
    assert [ct["vmid"] for ct in c.list_cts()] == [200]
    c.wait_task("pve", c.stop_ct(200), timeout=10, poll=0.02)
    assert c.ct_status(200)["status"] == "stopped"
    log = state.read_request_log()
    assert log and all(e["validated"] for e in log)  # every request of the flow passed the schema


def test_devn_via_token_is_permission_denied(lab: Lab) -> None:
    state, server = lab
    t = token_client(state, server)
    with pytest.raises(PermissionDenied) as err:
        new_ct(t, dev0="/dev/nvidia0")
    assert err.value.status == 403
    assert err.value.message == "Permission check failed (configuring device passthrough is only allowed for root@pam)"


def test_vmid_clash_and_missing_template(lab: Lab) -> None:
    state, server = lab
    c = password_client(state, server)
    c.wait_task("pve", new_ct(c), timeout=10, poll=0.02)
    with pytest.raises(PveError) as err:
        new_ct(c)
    assert (err.value.status, err.value.message) == (500, "CT 200 already exists on node 'pve'")
    with pytest.raises(PveError) as err:
        new_ct(c, vmid=201, ostemplate="local:vztmpl/debian-11-standard_11.7-1_amd64.tar.zst")
    assert err.value.message == "volume 'local:vztmpl/debian-11-standard_11.7-1_amd64.tar.zst' does not exist"


def test_task_fails_raises_with_log(make_lab: Callable[..., Lab]) -> None:
    state, server = make_lab(scenarios=["task-fails"])
    c = password_client(state, server)
    with pytest.raises(TaskFailed) as err:
        c.wait_task("pve", new_ct(c), timeout=10, poll=0.02)
    assert err.value.exitstatus.startswith("unable to create CT 200 - lvcreate")
    assert err.value.log[0] == '  Logical volume "vm-200-disk-0" created.'
    assert err.value.log[-1] == f"TASK ERROR: {err.value.exitstatus}"


def test_start_fails_raises(make_lab: Callable[..., Lab]) -> None:
    state, server = make_lab(scenarios=["start-fails"])
    c = password_client(state, server)
    c.wait_task("pve", new_ct(c), timeout=10, poll=0.02)
    with pytest.raises(TaskFailed) as err:
        c.wait_task("pve", c.start_ct(200), timeout=10, poll=0.02)
    assert err.value.exitstatus == "startup for container '200' failed"


def test_api_timeout_raises_task_timeout(make_lab: Callable[..., Lab]) -> None:
    state, server = make_lab(scenarios=["api-timeout"])
    c = password_client(state, server)
    upid = new_ct(c)
    with pytest.raises(TaskTimeout) as err:
        c.wait_task("pve", upid, timeout=0.3, poll=0.05)
    assert (err.value.upid, err.value.status) == (upid, "running")


def test_pve9_accepts_entrypoint_84_rejects_it(make_lab: Callable[..., Lab]) -> None:
    st84, srv84 = make_lab()
    st9, srv9 = make_lab(pve_version="9")
    with pytest.raises(InvalidRequest) as err:
        new_ct(password_client(st84, srv84), entrypoint="/sbin/init")
    assert err.value.errors == {"entrypoint": NOT_DEFINED} and err.value.sent is False
    c9 = password_client(st9, srv9)
    assert c9.schema().version == "9"
    c9.wait_task("pve", new_ct(c9, entrypoint="/sbin/init"), timeout=10, poll=0.02)
    assert c9.ct_config(200)["entrypoint"] == "/sbin/init"


def test_templates(lab: Lab) -> None:
    state, server = lab
    c = password_client(state, server)
    assert UBUNTU in {x["volid"] for x in c.storage_content("local", content="vztmpl")}
    debian13 = next(a["template"] for a in c.aplinfo() if a["os"] == "debian-13")
    c.wait_task("pve", c.download_template("local", debian13), timeout=10, poll=0.02)
    assert f"local:vztmpl/{debian13}" in {x["volid"] for x in c.storage_content("local")}


# --------------------------------------------------------------------------------------------
# TLS: CA file, pinned fingerprint
# --------------------------------------------------------------------------------------------
def test_wrong_ca_is_refused(lab: Lab, tmp_path: Path) -> None:
    state, server = lab
    other = generate_lab_tls(tmp_path / "other-ca")
    with pytest.raises(TlsRejected):
        password_client(state, server, verify=other.ca_cert)
    with pytest.raises(TlsRejected):
        password_client(state, server, verify=True)  # system CAs do not know the lab
    assert not any(e["path"] == "/access/ticket" for e in state.read_request_log())  # password never sent


def test_pinned_fingerprint(lab: Lab, tmp_path: Path) -> None:
    state, server = lab
    wrong = generate_lab_tls(tmp_path / "other").fingerprint
    with pytest.raises(TlsRejected, match="pinned fingerprint"):
        password_client(state, server, verify=False, fingerprint=f"sha256:{wrong}")
    assert state.read_request_log() == []  # the password was not sent to the unpinned server
    c = password_client(state, server, verify=False, fingerprint=f"sha256:{server.fingerprint}")
    assert c.version().release == "8.4"
    with pytest.raises(ValueError):
        PveClient.https("127.0.0.1", server.port, password="x", verify=False)


def test_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(Unreachable):
        PveClient.https("127.0.0.1", port, password="x", timeout=2)
