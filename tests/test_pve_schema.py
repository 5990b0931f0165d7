"""provisioner.proxmox.schema: PVE's saved API schemas and PVE-exact validation messages."""

from __future__ import annotations

import pytest

from provisioner.proxmox.schema import (
    MSG_MISSING,
    MSG_NOT_DEFINED,
    load_schema,
    parse_boolean,
    schema_version_for,
)

TEMPLATE = "local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst"
CREATE = "/nodes/pve/lxc"


def create_errors(version: str = "8.4", wire: str = "form", **params: object) -> dict[str, str]:
    base: dict[str, object] = {"vmid": "200", "ostemplate": TEMPLATE}
    base.update(params)
    return load_schema(version).validate("POST", CREATE, base, wire).errors  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("path", "template", "params"),
    [
        ("/nodes/pve/lxc/200/status/start", "/nodes/{node}/lxc/{vmid}/status/start", {"node": "pve", "vmid": "200"}),
        ("/nodes/pve/lxc/200/status/current", "/nodes/{node}/lxc/{vmid}/status/current",
         {"node": "pve", "vmid": "200"}),
        ("/nodes/pve/lxc", "/nodes/{node}/lxc", {"node": "pve"}),
        ("/nodes/pve/tasks/UPID:pve:0001E240:0A2B3C4D:6788A1B2:vzcreate:200:root@pam:/status",
         "/nodes/{node}/tasks/{upid}/status",
         {"node": "pve", "upid": "UPID:pve:0001E240:0A2B3C4D:6788A1B2:vzcreate:200:root@pam:"}),
        ("/nodes/pve/storage/local/content", "/nodes/{node}/storage/{storage}/content",
         {"node": "pve", "storage": "local"}),
        ("/version", "/version", {}),
        ("/cluster/nextid/", "/cluster/nextid", {}),
    ],
)
def test_match_concrete_paths(path: str, template: str, params: dict[str, str]) -> None:
    assert load_schema("8.4").match(path) == (template, params)


def test_unknown_path_and_method() -> None:
    schema = load_schema("9")
    assert schema.match("/nodes/pve/qemu/100/config") is None
    assert schema.method("PATCH", "/version") is None
    v = schema.validate("POST", "/version", {})
    assert not v.found and not v.ok


def test_valid_create_is_typed() -> None:
    v = load_schema("8.4").validate("POST", CREATE, {
        "vmid": "200", "ostemplate": TEMPLATE, "unprivileged": "1", "memory": "8192", "cpulimit": "2.5",
        "net0": "name=eth0,bridge=vmbr0,ip=dhcp,firewall=1", "dev0": "/dev/nvidia0,mode=0666",
        "rootfs": "local-lvm:8", "features": "nesting=1,keyctl=1", "hostname": "gpu-01.lab",
    })
    assert v.ok, v.errors
    assert v.params["vmid"] == 200 and v.params["unprivileged"] is True and v.params["cpulimit"] == 2.5
    assert v.params["node"] == "pve" and v.path_params == {"node": "pve"}


def test_required_property_missing() -> None:
    v = load_schema("8.4").validate("POST", CREATE, {"vmid": "200"})
    assert v.errors == {"ostemplate": MSG_MISSING}


def test_additional_property_refused() -> None:
    assert create_errors(foo="1") == {"foo": MSG_NOT_DEFINED}
    assert create_errors(**{"lxc.cgroup2.devices.allow": "c 195:* rwm"}) == {
        "lxc.cgroup2.devices.allow": MSG_NOT_DEFINED}
    assert MSG_NOT_DEFINED == ("property is not defined in schema and the schema does not allow "
                               "additional properties")


def test_integer_number_boolean_type_checks() -> None:
    assert create_errors(vmid="abc") == {"vmid": "type check ('integer') failed - got 'abc'"}
    assert create_errors(cores="1.5") == {"cores": "type check ('integer') failed - got '1.5'"}
    assert create_errors(cpulimit="x") == {"cpulimit": "type check ('number') failed - got 'x'"}
    assert create_errors(unprivileged="True") == {"unprivileged": "type check ('boolean') failed - got 'True'"}
    assert create_errors(unprivileged="yes") == {"unprivileged": "type check ('boolean') failed - got 'yes'"}


def test_boolean_wire_rules() -> None:
    assert create_errors(wire="json", unprivileged=True, vmid=200) == {}
    assert create_errors(wire="json", vmid=True) == {"vmid": "type check ('integer') failed - got JSON::PP::Boolean"}
    assert create_errors(wire="cli", unprivileged="yes") == {}
    assert create_errors(wire="cli", unprivileged="maybe") == {
        "unprivileged": "type check ('boolean') failed - got 'maybe'"}
    assert parse_boolean("ON") == 1 and parse_boolean("off") == 0 and parse_boolean("2") is None


def test_enum() -> None:
    assert create_errors(arch="x86_64") == {
        "arch": "value 'x86_64' does not have a value in the enumeration 'amd64, i386, arm64, armhf, riscv32, riscv64'"}


def test_minimum_maximum() -> None:
    assert create_errors(memory="8") == {"memory": "value must have a minimum value of 16"}
    assert create_errors(swap="-1") == {"swap": "value must have a minimum value of 0"}
    # vmid's format (pve-vmid) is checked before its minimum, as in PVE's check_prop
    assert create_errors(vmid="99") == {"vmid": "invalid format - value does not look like a valid VM ID\n"}
    assert load_schema("8.4").validate("GET", "/nodes/pve/tasks/UPID:x/log", {"limit": "-5"}).errors == {
        "limit": "value must have a minimum value of 0"}
    assert create_errors(cores="9000") == {"cores": "value must have a maximum value of 8192"}
    assert create_errors(tty="7") == {"tty": "value must have a maximum value of 6"}


def test_length_limits() -> None:
    assert create_errors(ostemplate="local:vztmpl/" + "a" * 250) == {
        "ostemplate": "value may only be 255 characters long"}
    assert create_errors(password="abc") == {"password": "value must be at least 5 characters long"}


def test_named_formats() -> None:
    assert create_errors(vmid="0100") == {"vmid": "invalid format - value does not look like a valid VM ID\n"}
    assert create_errors(hostname="gpu_01") == {
        "hostname": "invalid format - value does not look like a valid DNS name\n"}
    assert create_errors(storage="1-bad") == {
        "storage": "invalid format - storage ID '1-bad' contains illegal characters\n"}
    assert create_errors(hookscript="hook.sh") == {
        "hookscript": "invalid format - unable to parse volume ID 'hook.sh'\n"}
    v = load_schema("8.4").validate("GET", "/nodes/pve_1/lxc", {})
    assert v.errors == {"node": "invalid format - value does not look like a valid node name\n"}


@pytest.mark.parametrize("path", ["/dev/../etc/shadow", "/dev/./nvidia0", "/tmp/nvidia0", "/dev/nvidia0/.."])
def test_lxc_dev_string_format(path: str) -> None:
    assert create_errors(dev0=path) == {
        "dev0": f"invalid format - format error\ndev0.path: invalid format - {path} is not a valid device path\n"}


def test_property_string_sub_keys() -> None:
    assert create_errors(dev0="/dev/nvidia0,mode=666") == {
        "dev0": "invalid format - format error\ndev0.mode: value does not match the regex pattern\n"}
    assert create_errors(dev0="/dev/nvidia0,uid=-1") == {
        "dev0": "invalid format - format error\ndev0.uid: value must have a minimum value of 0\n"}
    assert create_errors(net0="bridge=vmbr0,ip=dhcp") == {
        "net0": f"invalid format - format error\nnet0.name: {MSG_MISSING}\n"}
    assert create_errors(net0="name=eth0,fwgroup=x") == {
        "net0": f"invalid format - format error\nnet0.fwgroup: {MSG_NOT_DEFINED}\n"}
    assert create_errors(net0="name=eth0,ip=10.0.0.5") == {
        "net0": "invalid format - format error\nnet0.ip: invalid format - value does not look like a valid "
                "IPv4 network configuration\n"}
    assert create_errors(net0="name=eth0,name=eth1") == {
        "net0": "invalid format - duplicate key in comma-separated list property: name\n"}
    assert create_errors(features="nesting=true,keyctl=1") == {}  # booleans in property strings: parse_boolean
    assert create_errors(rootfs="local-lvm:8,size=8Q") == {
        "rootfs": "invalid format - format error\nrootfs.size: invalid format - value does not look like a valid "
                  "disk size\n"}


def test_indexed_keys_and_limits() -> None:
    assert create_errors(net31="name=eth31") == {}
    assert create_errors(net32="name=eth32") == {"net32": MSG_NOT_DEFINED}
    assert create_errors(dev255="/dev/nvidia0") == {}
    assert create_errors(dev256="/dev/nvidia0") == {"dev256": MSG_NOT_DEFINED}
    assert create_errors(mp0="local-lvm:8,mp=/data") == {}
    assert create_errors(dev01="/dev/nvidia0") == {"dev01": MSG_NOT_DEFINED}


def test_requires() -> None:
    assert create_errors(unique="1") == {"restore": "missing property - 'unique' requires this property"}


def test_uri_params_are_validated_and_must_not_conflict() -> None:
    schema = load_schema("8.4")
    assert schema.validate("GET", "/nodes/pve/lxc/abc/config", {}).errors == {
        "vmid": "type check ('integer') failed - got 'abc'"}
    assert schema.validate("PUT", "/nodes/pve/lxc/200/config", {"vmid": "201"}).errors == {
        "vmid": "duplicate parameter (already defined in URI) with conflicting values!"}


def test_version_differences() -> None:
    # 9.x adds entrypoint/env/ha-managed to create; 8.4 refuses them
    assert create_errors("8.4", entrypoint="/sbin/init") == {"entrypoint": MSG_NOT_DEFINED}
    assert create_errors("9", entrypoint="/sbin/init") == {}
    # deny-write on devN appeared in 8.3
    assert create_errors("8.1", dev0="/dev/nvidia0,deny-write=1") == {
        "dev0": f"invalid format - format error\ndev0.deny-write: {MSG_NOT_DEFINED}\n"}
    assert create_errors("8.4", dev0="/dev/nvidia0,deny-write=1") == {}
    # overrule-shutdown on stop appeared in 8.2
    stop = "/nodes/pve/lxc/200/status/stop"
    assert load_schema("8.1").validate("POST", stop, {"overrule-shutdown": "1"}).errors == {
        "overrule-shutdown": MSG_NOT_DEFINED}
    assert load_schema("8.4").validate("POST", stop, {"overrule-shutdown": "1"}).errors == {}


@pytest.mark.parametrize(
    ("release", "expected"),
    [("8.1", "8.1"), ("8.2", "8.4"), ("8.3", "8.4"), ("8.4", "8.4"), ("9", "9"), ("9.1", "9"), ("10.0", "9")],
)
def test_schema_version_for(release: str, expected: str) -> None:
    assert schema_version_for(release) == expected


def test_schema_version_for_too_old() -> None:
    with pytest.raises(ValueError):
        schema_version_for("7.4")


def test_schema_files_carry_their_source() -> None:
    for version, commit in [("8.1", "a5a80fe8"), ("8.4", "46601a32"), ("9", "a8736b6d")]:
        schema = load_schema(version)
        assert str(schema.source["commit"]).startswith(commit)
        assert "/nodes/{node}/lxc/{vmid}/config" in schema.endpoints
