"""The lab's PVE API server (HTTPS, real requests/proxmoxer clients), LabState and the lab pvesh."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from proxmoxer import ProxmoxAPI, ResourceException

from provisioner.lab.pve_api import LabApiServer
from provisioner.lab.pvesh import write_pvesh_wrapper
from provisioner.lab.state import LabState
from provisioner.proxmox.lxc_conf import LxcConfig
from provisioner.proxmox.schema import load_schema, validate_params
from provisioner.proxmox.tasks import UPID_RE, decode_upid
from tests.support.lab import NOT_DEFINED, UBUNTU
from tests.support.lab import ApiLab as Lab

PARAM_FAILED = "Parameter verification failed.\n"



def ticket_session(state: LabState, server: LabApiServer) -> requests.Session:
    creds = state.credentials()
    s = requests.Session()
    s.trust_env = False  # else $REQUESTS_CA_BUNDLE overrides Session.verify (requests#3829)
    s.verify = str(server.cafile)
    r = s.post(f"{server.url}/access/ticket", data={"username": "root@pam", "password": creds.password})
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    s.cookies.set("PVEAuthCookie", data["ticket"])
    s.headers["CSRFPreventionToken"] = data["CSRFPreventionToken"]
    return s


def token_session(state: LabState, server: LabApiServer) -> requests.Session:
    creds = state.credentials()
    s = requests.Session()
    s.trust_env = False  # else $REQUESTS_CA_BUNDLE overrides Session.verify (requests#3829)
    s.verify = str(server.cafile)
    s.headers["Authorization"] = f"PVEAPIToken={creds.token_id}={creds.token_value}"
    return s


def wait_stopped(s: requests.Session, server: LabApiServer, upid: str, timeout: float = 5) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = s.get(f"{server.url}/nodes/pve/tasks/{upid}/status").json()["data"]
        if st["status"] == "stopped":
            return dict(st)
        time.sleep(0.02)
    raise AssertionError(f"task {upid} still running")


def task_lines(s: requests.Session, server: LabApiServer, upid: str) -> list[str]:
    body = s.get(f"{server.url}/nodes/pve/tasks/{upid}/log", params={"limit": 1000}).json()
    assert body["total"] == len(body["data"])
    assert [x["n"] for x in body["data"]] == list(range(1, len(body["data"]) + 1))
    return [x["t"] for x in body["data"]]


def create(s: requests.Session, server: LabApiServer, **params: Any) -> requests.Response:
    base = {"vmid": 200, "ostemplate": UBUNTU, "rootfs": "local-lvm:8", "unprivileged": 1}
    base.update(params)
    return s.post(f"{server.url}/nodes/pve/lxc", data=base)


# --------------------------------------------------------------------------------------------
# LabState
# --------------------------------------------------------------------------------------------
def test_state_create_defaults_and_credentials(tmp_path: Path) -> None:
    state = LabState.create(tmp_path / "lab")
    s = state.settings()
    assert (s.node, s.pve_version, s.driver_version, s.gpu_count, s.uvm_major) == ("pve", "8.4", "595.71.05", 8, 511)
    assert s.gpu_name == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert [st.id for st in s.storages] == ["local", "local-lvm"]
    assert UBUNTU in s.templates
    assert stat.S_IMODE(os.stat(state.credentials_path).st_mode) == 0o600
    creds = state.credentials()
    assert creds.token_id == "root@pam!lab" and len(creds.password) >= 20
    assert state.check_password("root@pam", creds.password) and not state.check_password("root@pam", "x")
    assert state.check_token("root@pam!lab", creds.token_value) and not state.check_token("root@pam!x", "y")
    # a second lab gets other secrets
    assert LabState.create(tmp_path / "lab2").credentials().password != creds.password
    with pytest.raises(FileExistsError):
        LabState.create(tmp_path / "lab")
    assert LabState.load(tmp_path / "lab").settings() == s


def test_state_host_devices_and_no_uvm(tmp_path: Path) -> None:
    state = LabState.create(tmp_path / "lab", scenarios=["no-uvm"])
    assert state.has_scenario("no-uvm") and not state.has_scenario("task-fails")
    devs = state.host_devices()
    assert devs["/dev/nvidia7"] == (195, 7) and devs["/dev/nvidiactl"] == (195, 255)
    assert "/dev/nvidia-uvm" not in devs
    state.update_settings(host_uvm_nodes=True)  # what the lab's nvidia-modprobe stand-in does
    assert state.host_devices()["/dev/nvidia-uvm-tools"] == (511, 1)


def test_state_lock_excludes_other_processes(tmp_path: Path) -> None:
    state = LabState.create(tmp_path / "lab")
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys,time; from provisioner.lab.state import LabState\n"
         f"s=LabState.load({str(state.root)!r})\n"
         "with s.lock():\n    print('locked', flush=True); time.sleep(0.5)\n"],
        stdout=subprocess.PIPE, text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    t0 = time.monotonic()
    with state.lock(), state.lock():  # re-entrant in this thread
        waited = time.monotonic() - t0
    holder.wait(5)
    assert waited > 0.2


def test_state_tasks_and_containers(tmp_path: Path) -> None:
    state = LabState.create(tmp_path / "lab")
    upid = state.new_task("vzstart", "200", "root@pam!lab")
    assert UPID_RE.match(upid) and decode_upid(upid).tokenid == "lab"
    rec = state.get_task(upid)
    assert rec is not None and rec.status == "running" and rec.exitstatus is None
    state.finish_task(upid, "startup for container '200' failed", ["some line"])
    rec = state.get_task(upid)
    assert rec is not None and rec.status == "stopped"
    assert state.task_log(upid) == ["some line", "", "TASK ERROR: startup for container '200' failed"]
    assert state.get_task("UPID:bogus") is None
    state.write_conf(200, LxcConfig.from_options({"hostname": "a", "memory": 512}))
    assert state.list_cts() == [200] and state.read_conf(200).get("hostname") == "a"
    assert state.get_status(200).status == "stopped"
    assert state.set_status(200, "running").pid is not None
    assert state.ct_root(200).is_dir()
    state.delete_ct(200)
    assert state.list_cts() == []


# --------------------------------------------------------------------------------------------
# HTTPS API: auth
# --------------------------------------------------------------------------------------------
def test_no_ticket_is_401_with_empty_body(lab: Lab) -> None:
    _, server = lab
    r = requests.get(f"{server.url}/version", verify=str(server.cafile))
    assert (r.status_code, r.reason, r.content) == (401, "No ticket", b"")


def test_bad_password_is_401_empty_body(lab: Lab) -> None:
    _, server = lab
    r = requests.post(f"{server.url}/access/ticket", data={"username": "root@pam", "password": "wrong"},
                      verify=str(server.cafile))
    assert (r.status_code, r.reason, r.content) == (401, "authentication failure", b"")


def test_ticket_login_and_csrf(lab: Lab) -> None:
    state, server = lab
    s = ticket_session(state, server)
    r = s.get(f"{server.url}/version")
    assert r.status_code == 200
    assert r.json() == {"data": {"version": "8.4.1", "release": "8.4", "repoid": "2a5fa54a8503f96d",
                                 "console": "html5"}}
    # POST without the CSRF header is refused, with it accepted
    no_csrf = requests.post(f"{server.url}/nodes/pve/lxc", cookies=s.cookies, verify=str(server.cafile),
                            data={"vmid": 300, "ostemplate": UBUNTU})
    assert (no_csrf.status_code, no_csrf.content) == (401, b"")
    # a forged ticket is refused
    forged = requests.get(f"{server.url}/version", cookies={"PVEAuthCookie": "PVE:root@pam:6788A1B2::AAAA"},
                          verify=str(server.cafile))
    assert forged.status_code == 401


def test_ticket_renewal_with_the_ticket_as_password(lab: Lab) -> None:
    state, server = lab
    first = requests.post(f"{server.url}/access/ticket", verify=str(server.cafile),
                          data={"username": "root@pam", "password": state.credentials().password}).json()["data"]
    renewed = requests.post(f"{server.url}/access/ticket", verify=str(server.cafile),
                            data={"username": "root@pam", "password": first["ticket"]})
    assert renewed.status_code == 200 and renewed.json()["data"]["username"] == "root@pam"
    assert renewed.json()["data"]["ticket"].startswith("PVE:root@pam:")


def test_token_auth_and_bad_token(lab: Lab) -> None:
    state, server = lab
    assert token_session(state, server).get(f"{server.url}/nodes").json()["data"][0]["node"] == "pve"
    bad = requests.get(f"{server.url}/nodes", verify=str(server.cafile),
                       headers={"Authorization": "PVEAPIToken=root@pam!lab=00000000-0000-0000-0000-000000000000"})
    assert bad.status_code == 401


# --------------------------------------------------------------------------------------------
# HTTPS API: validation (raw HTTP and real proxmoxer)
# --------------------------------------------------------------------------------------------
def test_unknown_and_mistyped_params_exact_400(lab: Lab) -> None:
    state, server = lab
    s = ticket_session(state, server)
    r = s.post(f"{server.url}/nodes/pve/lxc", data={"vmid": "abc", "ostemplate": UBUNTU, "unprivileged": "True",
                                                     "gpus": "8"})
    assert r.status_code == 400
    assert r.reason == "Parameter verification failed."
    assert r.json() == {
        "data": None,
        "message": PARAM_FAILED,
        "errors": {
            "vmid": "type check ('integer') failed - got 'abc'",
            "unprivileged": "type check ('boolean') failed - got 'True'",
            "gpus": NOT_DEFINED,
        },
    }


def test_proxmoxer_raw_gets_pve_error_shape(lab: Lab) -> None:
    state, server = lab
    creds = state.credentials()
    px = ProxmoxAPI("127.0.0.1", port=server.port, user="root@pam", password=creds.password,
                    verify_ssl=str(server.cafile))
    assert px.version.get()["release"] == "8.4"
    with pytest.raises(ResourceException) as err:
        px.nodes("pve").lxc.post(vmid="abc", ostemplate=UBUNTU, unprivileged=True)
    exc = err.value
    assert (exc.status_code, exc.status_message, exc.content) == (400, "Bad Request", "Parameter verification failed.")
    assert exc.errors == {"vmid": "type check ('integer') failed - got 'abc'",
                          "unprivileged": "type check ('boolean') failed - got 'True'"}
    with pytest.raises(ResourceException) as err:
        px.nodes("pve").lxc(200).config.put(lxc="lxc.cgroup2.devices.allow: c 195:* rwm")
    assert err.value.status_code == 400 and err.value.errors == {"lxc": NOT_DEFINED}


def test_json_body_booleans(lab: Lab) -> None:
    state, server = lab
    s = ticket_session(state, server)
    r = s.post(f"{server.url}/nodes/pve/lxc", json={"vmid": 210, "ostemplate": UBUNTU, "rootfs": "local-lvm:4",
                                                     "unprivileged": True, "start": False})
    assert r.status_code == 200, r.text
    assert UPID_RE.match(r.json()["data"])


def test_unknown_path_is_501(lab: Lab) -> None:
    state, server = lab
    r = ticket_session(state, server).get(f"{server.url}/nodes/pve/qemu")
    assert r.status_code == 501
    assert r.json()["message"] == "Method 'GET /nodes/pve/qemu' not implemented"


def test_pve9_schema_accepts_entrypoint_84_does_not(make_lab: Callable[..., Lab]) -> None:
    st84, srv84 = make_lab()
    st9, srv9 = make_lab(pve_version="9")
    r84 = create(ticket_session(st84, srv84), srv84, entrypoint="/sbin/init")
    assert r84.status_code == 400 and r84.json()["errors"] == {"entrypoint": NOT_DEFINED}
    s9 = ticket_session(st9, srv9)
    assert s9.get(f"{srv9.url}/version").json()["data"]["release"] == "9.1"
    r9 = s9.post(f"{srv9.url}/nodes/pve/lxc", data={"vmid": 200, "ostemplate": UBUNTU, "rootfs": "local-lvm:8",
                                                    "entrypoint": "/sbin/init"})
    assert r9.status_code == 200
    wait_stopped(s9, srv9, r9.json()["data"])
    conf = s9.get(f"{srv9.url}/nodes/pve/lxc/200/config").json()["data"]
    assert conf["entrypoint"] == "/sbin/init"
    assert conf["unprivileged"] == 1  # PVE 9 creates unprivileged CTs by default


# --------------------------------------------------------------------------------------------
# HTTPS API: containers and tasks
# --------------------------------------------------------------------------------------------
def test_create_task_config_start_status(lab: Lab) -> None:
    state, server = lab
    s = ticket_session(state, server)
    assert s.get(f"{server.url}/cluster/nextid").json() == {"data": 100}
    r = create(s, server, dev0="/dev/nvidia0,mode=0666", net0="name=eth0,bridge=vmbr0,ip=dhcp",
               description="LAB: gpu box")
    assert r.status_code == 200, r.text
    upid = r.json()["data"]
    info = decode_upid(upid)
    assert (info.node, info.type, info.id, info.user) == ("pve", "vzcreate", "200", "root@pam")
    st = wait_stopped(s, server, upid)
    assert st["exitstatus"] == "OK" and st["type"] == "vzcreate" and st["upid"] == upid
    assert task_lines(s, server, upid)[-1] == "TASK OK"
    conf = s.get(f"{server.url}/nodes/pve/lxc/200/config").json()["data"]
    assert conf["hostname"] == "CT200" and conf["memory"] == 512 and conf["swap"] == 512
    assert conf["rootfs"] == "local-lvm:vm-200-disk-0,size=8G"
    assert conf["dev0"] == "/dev/nvidia0,mode=0666" and conf["unprivileged"] == 1
    assert conf["description"] == "LAB: gpu box\n" and len(conf["digest"]) == 40
    assert "#LAB%3A gpu box\n" in state.conf_path(200).read_text()
    assert s.get(f"{server.url}/nodes/pve/lxc/200/status/current").json()["data"]["status"] == "stopped"
    start = s.post(f"{server.url}/nodes/pve/lxc/200/status/start")
    assert wait_stopped(s, server, start.json()["data"])["exitstatus"] == "OK"
    cur = s.get(f"{server.url}/nodes/pve/lxc/200/status/current").json()["data"]
    assert cur["status"] == "running" and cur["vmid"] == 200 and cur["maxmem"] == 512 * 1024**2
    again = s.post(f"{server.url}/nodes/pve/lxc/200/status/start")
    assert (again.status_code, again.json()["message"]) == (500, "CT 200 already running\n")
    assert s.get(f"{server.url}/cluster/resources", params={"type": "vm"}).json()["data"][0]["id"] == "lxc/200"
    assert s.get(f"{server.url}/cluster/nextid").json() == {"data": 100}
    taken = s.get(f"{server.url}/cluster/nextid", params={"vmid": 200})
    assert taken.status_code == 400 and taken.json()["errors"] == {"vmid": "VM 200 already exists"}
    stop = s.post(f"{server.url}/nodes/pve/lxc/200/status/stop")
    wait_stopped(s, server, stop.json()["data"])
    destroy = s.delete(f"{server.url}/nodes/pve/lxc/200")
    wait_stopped(s, server, destroy.json()["data"])
    assert state.list_cts() == []


def test_create_with_start(lab: Lab) -> None:
    state, server = lab
    s = ticket_session(state, server)
    st = wait_stopped(s, server, create(s, server, start=1, hostname="gpu-01").json()["data"])
    assert st["exitstatus"] == "OK"
    assert state.get_status(200).status == "running"
    assert (state.ct_root(200) / "etc" / "hostname").read_text() == "gpu-01\n"
    assert 'VERSION_ID="24.04"' in (state.ct_root(200) / "etc" / "os-release").read_text()


def test_a_bridge_the_node_lacks_is_created_and_fails_at_start_as_lxc_says(lab: Lab) -> None:
    """pve-container creates the config (the bridge is not checked then); at start its network hook dies
    "bridge 'vmbr9' does not exist" and the task log holds lxc's lines (tteck/Proxmox#181: a node without vmbr0)."""
    state, server = lab
    s = ticket_session(state, server)
    made = wait_stopped(s, server, create(s, server, net0="name=eth0,bridge=vmbr9,ip=dhcp").json()["data"])
    assert made["exitstatus"] == "OK"
    start = s.post(f"{server.url}/nodes/pve/lxc/200/status/start")
    upid = start.json()["data"]
    assert wait_stopped(s, server, upid)["exitstatus"] == "startup for container '200' failed"
    lines = task_lines(s, server, upid)
    assert "lxc_create_network_priv: 3413 No such device - Failed to create network device" in lines
    assert lines[-1] == "TASK ERROR: startup for container '200' failed"
    assert state.get_status(200).status == "stopped"
    s.put(f"{server.url}/nodes/pve/lxc/200/config", data={"net0": "name=eth0,bridge=vmbr0,ip=dhcp"})
    again = s.post(f"{server.url}/nodes/pve/lxc/200/status/start")
    assert wait_stopped(s, server, again.json()["data"])["exitstatus"] == "OK"


def test_vmid_clash_is_500(lab: Lab) -> None:
    state, server = lab
    s = ticket_session(state, server)
    wait_stopped(s, server, create(s, server).json()["data"])
    r = create(s, server)
    assert r.status_code == 500
    assert r.reason == "CT 200 already exists on node 'pve'"
    assert r.json() == {"data": None, "message": "CT 200 already exists on node 'pve'\n"}


def test_missing_template_and_storage_errors(lab: Lab) -> None:
    state, server = lab
    s = ticket_session(state, server)
    r = create(s, server, ostemplate="local:vztmpl/rocky-9-default_20240912_amd64.tar.xz")
    assert (r.status_code, r.json()["message"]) == (
        500, "volume 'local:vztmpl/rocky-9-default_20240912_amd64.tar.xz' does not exist\n")
    r = s.post(f"{server.url}/nodes/pve/lxc", data={"vmid": 201, "ostemplate": UBUNTU})  # rootfs on 'local' (dir)
    assert (r.status_code, r.json()["message"]) == (500, "storage 'local' does not support container directories\n")
    assert state.list_cts() == []


def test_devn_with_token_is_403(lab: Lab) -> None:
    state, server = lab
    tok = token_session(state, server)
    r = create(tok, server, dev0="/dev/nvidia0")
    assert r.status_code == 403
    assert r.json()["message"] == ("Permission check failed (configuring device passthrough is only allowed "
                                   "for root@pam)\n")
    # without devN the token may create; the task carries the token id
    ok = create(tok, server)
    upid = ok.json()["data"]
    st = wait_stopped(tok, server, upid)
    assert (st["user"], st["tokenid"]) == ("root@pam", "lab")
    r = tok.put(f"{server.url}/nodes/pve/lxc/200/config", data={"dev0": "/dev/nvidia0"})
    assert r.status_code == 403
    r = tok.put(f"{server.url}/nodes/pve/lxc/200/config", data={"delete": "dev0"})
    assert r.status_code == 403


def test_devices_must_exist_on_host(make_lab: Callable[..., Lab]) -> None:
    state, server = make_lab(scenarios=["no-uvm"])
    s = ticket_session(state, server)
    failed = wait_stopped(s, server, create(s, server, dev0="/dev/nvidia-uvm").json()["data"])
    assert failed["exitstatus"] == "unable to create CT 200 - Device /dev/nvidia-uvm does not exist"
    assert state.list_cts() == []
    wait_stopped(s, server, create(s, server, dev0="/dev/nvidia0").json()["data"])
    r = s.put(f"{server.url}/nodes/pve/lxc/200/config", data={"dev1": "/dev/nvidia-uvm"})
    assert (r.status_code, r.json()["message"]) == (500, "Device /dev/nvidia-uvm does not exist\n")
    state.update_settings(host_uvm_nodes=True)  # nvidia-modprobe -u -c=0 on the lab host
    r = s.put(f"{server.url}/nodes/pve/lxc/200/config", data={"dev1": "/dev/nvidia-uvm"})
    assert r.status_code == 200 and r.json() == {"data": None}
    state.update_settings(host_uvm_nodes=False)  # e.g. after a host reboot
    st = wait_stopped(s, server, s.post(f"{server.url}/nodes/pve/lxc/200/status/start").json()["data"])
    # pve-container PVE::LXC::vm_start -> update_lxc_config -> Tools::get_device_mode_and_rdev
    assert st["exitstatus"] == "Device /dev/nvidia-uvm does not exist"
    assert "TASK ERROR: Device /dev/nvidia-uvm does not exist" in task_lines(s, server, st["upid"])
    assert state.get_status(200).status == "stopped"


def test_config_put_delete_digest(lab: Lab) -> None:
    state, server = lab
    s = ticket_session(state, server)
    wait_stopped(s, server, create(s, server, cores=4).json()["data"])
    state.conf_path(200).write_text(state.conf_path(200).read_text() + "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 "
                                    "none bind,optional,create=file\n")
    digest = s.get(f"{server.url}/nodes/pve/lxc/200/config").json()["data"]["digest"]
    r = s.put(f"{server.url}/nodes/pve/lxc/200/config", data={"memory": 8192, "delete": "cores", "digest": digest})
    assert r.status_code == 200
    conf = s.get(f"{server.url}/nodes/pve/lxc/200/config").json()["data"]
    assert conf["memory"] == 8192 and "cores" not in conf
    assert conf["lxc"] == [["lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file"]]
    stale = s.put(f"{server.url}/nodes/pve/lxc/200/config", data={"memory": 4096, "digest": digest})
    assert stale.status_code == 500 and "file changed by other user" in stale.json()["message"]


def test_task_fails_scenario(make_lab: Callable[..., Lab]) -> None:
    state, server = make_lab(scenarios=["task-fails"])
    s = ticket_session(state, server)
    st = wait_stopped(s, server, create(s, server).json()["data"])
    assert st["exitstatus"].startswith("unable to create CT 200 - lvcreate 'pve/vm-200-disk-0' error:")
    lines = task_lines(s, server, st["upid"])
    assert lines[-1] == f"TASK ERROR: {st['exitstatus']}"
    assert state.list_cts() == []  # a failed create leaves nothing behind


def test_api_timeout_scenario_task_never_stops(make_lab: Callable[..., Lab]) -> None:
    state, server = make_lab(scenarios=["api-timeout"])
    s = ticket_session(state, server)
    upid = create(s, server).json()["data"]
    time.sleep(0.2)
    st = s.get(f"{server.url}/nodes/pve/tasks/{upid}/status").json()["data"]
    assert st["status"] == "running" and "exitstatus" not in st


def test_task_status_errors(lab: Lab) -> None:
    state, server = lab
    s = ticket_session(state, server)
    bad = s.get(f"{server.url}/nodes/pve/tasks/UPID:nope/status")
    assert bad.status_code == 400 and bad.json()["errors"] == {"upid": "unable to parse worker upid"}
    unknown = s.get(f"{server.url}/nodes/pve/tasks/UPID:pve:0001E240:0A2B3C4D:6788A1B2:vzcreate:200:root@pam:/status")
    assert unknown.status_code == 400 and unknown.json()["errors"] == {"upid": "no such task"}


def test_storage_and_templates(lab: Lab) -> None:
    state, server = lab
    s = ticket_session(state, server)
    stores = s.get(f"{server.url}/nodes/pve/storage", params={"content": "rootdir"}).json()["data"]
    assert [x["storage"] for x in stores] == ["local-lvm"]
    content = s.get(f"{server.url}/nodes/pve/storage/local/content", params={"content": "vztmpl"}).json()["data"]
    assert {c["volid"] for c in content} == set(state.settings().templates)
    assert all(c["format"] == "tzst" and c["size"] > 0 for c in content)
    apl = s.get(f"{server.url}/nodes/pve/aplinfo").json()["data"]
    debian13 = next(a for a in apl if a["os"] == "debian-13")
    bad = s.post(f"{server.url}/nodes/pve/aplinfo", data={"storage": "local", "template": "nope.tar.zst"})
    assert bad.status_code == 400 and bad.json()["errors"] == {"template": "no such template"}
    r = s.post(f"{server.url}/nodes/pve/aplinfo", data={"storage": "local", "template": debian13["template"]})
    st = wait_stopped(s, server, r.json()["data"])
    assert st["type"] == "download" and st["exitstatus"] == "OK"
    assert f"local:vztmpl/{debian13['template']}" in state.settings().templates


@pytest.mark.parametrize("pve", ["8.1", "8.4", "9"])
def test_node_network_as_pve_lists_it(make_lab: Callable[..., Lab], pve: str) -> None:
    """GET /nodes/{node}/network (pve-manager PVE::API2::Network `index`): the node's interfaces without lo,
    `type` filters them (any_bridge: Linux and OVS bridges; vnet: SDN only, none in the lab), every object
    type-checks against the returns schema of that PVE version, and a privilege-separated token sees only the
    bridges it holds SDN.Audit/SDN.Use on (/sdn/zones/localnetwork/<bridge>)."""
    state, server = make_lab(pve_version=pve)
    s = token_session(state, server)
    url = f"{server.url}/nodes/pve/network"
    every = s.get(url).json()["data"]
    assert [(i["iface"], i["type"]) for i in every] == [("eno1", "eth"), ("vmbr0", "bridge")]
    vmbr0 = every[1]
    assert (vmbr0["bridge_ports"], vmbr0["active"], vmbr0["autostart"]) == ("eno1", 1, 1), vmbr0
    assert vmbr0["cidr"] == f"{vmbr0['address']}/{vmbr0['netmask']}" and vmbr0["families"] == ["inet"]
    returns = load_schema(pve).method("GET", "/nodes/pve/network")[0].returns  # type: ignore[index]
    for item in every:
        _, errors = validate_params(returns["items"], item, wire="json")
        assert errors == {}, (item, errors)
    assert [i["iface"] for i in s.get(url, params={"type": "any_bridge"}).json()["data"]] == ["vmbr0"]
    assert [i["iface"] for i in s.get(url, params={"type": "eth"}).json()["data"]] == ["eno1"]
    if pve != "8.1":  # `vnet` entered the enum with PVE 8.2's SDN
        assert s.get(url, params={"type": "vnet"}).json()["data"] == []
    bad = s.get(url, params={"type": "bridges"})
    assert bad.status_code == 400 and "does not have a value in the enumeration" in bad.json()["errors"]["type"]

    state.update_settings(token_privsep=True, token_acl=[{"path": "/nodes", "privs": ["Sys.Audit"]}])
    assert [i["iface"] for i in s.get(url).json()["data"]] == ["eno1"]  # the bridge is hidden, not refused
    state.update_settings(token_acl=[{"path": "/sdn/zones/localnetwork/vmbr0", "privs": ["SDN.Use"]}])
    assert [i["iface"] for i in s.get(url, params={"type": "any_bridge"}).json()["data"]] == ["vmbr0"]


def test_every_request_logged_without_secrets(lab: Lab) -> None:
    state, server = lab
    s = ticket_session(state, server)
    create(s, server, vmid="abc")
    s.get(f"{server.url}/version")
    requests.get(f"{server.url}/nodes", verify=str(server.cafile))
    log = state.read_request_log()
    assert [(e["method"], e["path"], e["status"]) for e in log] == [
        ("POST", "/access/ticket", 200), ("POST", "/nodes/pve/lxc", 400), ("GET", "/version", 200),
        ("GET", "/nodes", 401)]
    assert [e["validated"] for e in log] == [True, False, True, False]
    assert log[0]["params"]["password"] == "<redacted>"
    text = state.requests_log_path.read_text()
    creds = state.credentials()
    assert creds.password not in text and creds.token_value not in text


def test_server_exposes_tls_material(lab: Lab) -> None:
    _state, server = lab
    assert server.url == f"https://127.0.0.1:{server.port}/api2/json"
    assert len(server.fingerprint.split(":")) == 32
    assert server.cafile.read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert stat.S_IMODE(os.stat(server.tls.key).st_mode) == 0o600


# --------------------------------------------------------------------------------------------
# the lab's pvesh (subprocess, as proxmoxer's command backends call it)
# --------------------------------------------------------------------------------------------
def pvesh(state: LabState, bindir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bindir / "pvesh"), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PROVISIONER_LAB_ROOT": str(state.root)})


def test_pvesh_cli(tmp_path: Path) -> None:
    state = LabState.create(tmp_path / "lab")
    bindir = tmp_path / "bin"
    write_pvesh_wrapper(bindir, state.root)
    r = pvesh(state, bindir, "get", "/version", "--output-format", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["release"] == "8.4"
    # parameter errors: PVE's stderr shape, exit 255
    r = pvesh(state, bindir, "create", "/nodes/pve/lxc", "-vmid", "abc", "-ostemplate", UBUNTU, "-gpus", "8",
              "--output-format", "json")
    assert r.returncode == 255 and r.stdout == ""
    assert r.stderr == ("400 Parameter verification failed.\n"
                        f"gpus: {NOT_DEFINED}\n"
                        "vmid: type check ('integer') failed - got 'abc'\n"
                        "pvesh create /nodes/pve/lxc [OPTIONS] [FORMAT_OPTIONS]\n")
    # a task runs in the foreground: log on stdout, then the UPID as JSON; root@pam may set devN
    r = pvesh(state, bindir, "create", "/nodes/pve/lxc", "-vmid", "200", "-ostemplate", UBUNTU,
              "-rootfs", "local-lvm:8", "-unprivileged", "1", "-dev0", "/dev/nvidia0", "--output-format", "json")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    upid = json.loads(lines[-1])
    assert UPID_RE.match(upid) and "TASK OK" not in r.stdout
    assert "extracting archive '/var/lib/vz/template/cache/ubuntu-24.04-standard_24.04-2_amd64.tar.zst'" in lines
    rec = state.get_task(upid)
    assert rec is not None and rec.exitstatus == "OK"
    assert state.read_conf(200).get("dev0") == "/dev/nvidia0"
    # a plain die: bare message on stderr (proxmoxer maps it to 500)
    r = pvesh(state, bindir, "create", "/nodes/pve/lxc", "-vmid", "200", "-ostemplate", UBUNTU)
    assert (r.returncode, r.stderr) == (255, "CT 200 already exists on node 'pve'\n")
    # a failing task: exit 0 with the UPID, error text on stderr (PVE's tee_worker)
    state.update_settings(host_uvm_nodes=False)
    pvesh(state, bindir, "set", "/nodes/pve/lxc/200/config", "-dev1", "/dev/nvidia-uvm")
    r = pvesh(state, bindir, "set", "/nodes/pve/lxc/200/config", "-dev1", "/dev/nvidia-uvm")
    assert (r.returncode, r.stderr) == (255, "Device /dev/nvidia-uvm does not exist\n")
    state.update_settings(host_uvm_nodes=True)
    assert pvesh(state, bindir, "set", "/nodes/pve/lxc/200/config", "-dev1", "/dev/nvidia-uvm").returncode == 0
    state.update_settings(host_uvm_nodes=False)
    r = pvesh(state, bindir, "create", "/nodes/pve/lxc/200/status/start", "--output-format", "json")
    assert r.returncode == 0
    assert r.stderr == "Device /dev/nvidia-uvm does not exist\n"
    assert UPID_RE.match(json.loads(r.stdout.splitlines()[-1]))
    r = pvesh(state, bindir, "get", "/nodes/pve/qemu")
    assert (r.returncode, r.stderr) == (1, "No 'get' handler defined for '/nodes/pve/qemu'\n")
    assert all(e["wire"] == "cli" and e["user"] == "root@pam" for e in state.read_request_log())
