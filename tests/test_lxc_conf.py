"""provisioner.proxmox.lxc_conf on realistic /etc/pve/lxc/<vmid>.conf files."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provisioner.proxmox.lxc_conf import (
    LxcConfig,
    decode_text,
    encode_text,
    format_property_string,
    parse_property_string,
)

# A privileged GPU container the classic way (raw lxc.* lines, reference/proxmox.md §2.2), with a
# description written by the PVE GUI, a snapshot section and a pending section.
RAW_GPU_CONF = """\
#GPU worker%3A 8x RTX PRO 6000
#managed by gpu-provisioner 100%
arch: amd64
cores: 32
features: nesting=1
hostname: gpu-worker
memory: 262144
net0: name=eth0,bridge=vmbr0,firewall=1,hwaddr=BC:24:11:5E:7A:01,ip=dhcp,type=veth
onboot: 1
ostype: ubuntu
parent: before-driver
rootfs: local-lvm:vm-200-disk-0,size=64G
swap: 0
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.cgroup2.devices.allow: c 511:* rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file

[before-driver]
arch: amd64
cores: 32
hostname: gpu-worker
memory: 262144
ostype: ubuntu
rootfs: local-lvm:vm-200-disk-0,size=64G
snaptime: 1735732800
swap: 0
lxc.cgroup2.devices.allow: c 195:* rwm

[pve:pending]
memory: 131072
"""

# devN passthrough as community-scripts writes it (reference/proxmox.md §2.5), unprivileged.
DEVN_CONF = """\
arch: amd64
cores: 4
dev0: /dev/nvidia0,gid=44
dev1: /dev/nvidiactl,gid=44
dev2: /dev/nvidia-uvm,gid=44
dev3: /dev/nvidia-uvm-tools,gid=44
hostname: ollama
memory: 8192
net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:2F:03:9C,ip=dhcp,type=veth
ostype: debian
rootfs: local-lvm:vm-105-disk-0,size=35G
swap: 512
tags: community-script;ai
unprivileged: 1
lxc.cgroup2.devices.allow: c 10:200 rwm
lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file
"""


@pytest.mark.parametrize("text", [RAW_GPU_CONF, DEVN_CONF, DEVN_CONF.rstrip("\n"), DEVN_CONF.replace("\n", "\r\n")])
def test_round_trip_is_byte_exact(text: str) -> None:
    assert LxcConfig.parse(text).render() == text


def test_api_dict_view_of_raw_gpu_config() -> None:
    conf = LxcConfig.parse(RAW_GPU_CONF)
    api = conf.to_api_dict()
    assert api["hostname"] == "gpu-worker"
    assert api["rootfs"] == "local-lvm:vm-200-disk-0,size=64G"
    assert api["description"] == "GPU worker: 8x RTX PRO 6000\nmanaged by gpu-provisioner 100%\n"
    assert api["lxc"] == [
        ["lxc.cgroup2.devices.allow", "c 195:* rwm"],
        ["lxc.cgroup2.devices.allow", "c 511:* rwm"],
        ["lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file"],
        ["lxc.mount.entry", "/dev/nvidiactl dev/nvidiactl none bind,optional,create=file"],
        ["lxc.mount.entry", "/dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file"],
        ["lxc.mount.entry", "/dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file"],
    ]
    # snapshot / pending keys stay out of the main view
    assert "snaptime" not in api
    assert api["memory"] == "262144"
    assert len(str(api["digest"])) == 40


def test_indexed_devices_and_free_slot() -> None:
    conf = LxcConfig.parse(DEVN_CONF)
    assert conf.indexed("dev") == {
        0: "/dev/nvidia0,gid=44",
        1: "/dev/nvidiactl,gid=44",
        2: "/dev/nvidia-uvm,gid=44",
        3: "/dev/nvidia-uvm-tools,gid=44",
    }
    assert conf.free_index("dev") == 4
    assert conf.indexed("net") == {0: "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:2F:03:9C,ip=dhcp,type=veth"}
    assert conf.indexed("mp") == {}


def test_add_raw_is_idempotent_and_keeps_other_lines() -> None:
    conf = LxcConfig.parse(DEVN_CONF)
    line = "/dev/nvidia-modeset dev/nvidia-modeset none bind,optional,create=file"
    assert conf.add_raw("lxc.mount.entry", line) is True
    assert conf.add_raw("lxc.mount.entry", line) is False  # second time: no change
    text = conf.render()
    assert text == DEVN_CONF + f"lxc.mount.entry: {line}\n"
    # remove only that value; the TUN entry stays
    assert conf.remove_raw("lxc.mount.entry", line) == 1
    assert conf.render() == DEVN_CONF
    assert conf.remove_raw("lxc.mount.entry", "not there") == 0


def test_add_raw_goes_into_main_section_before_snapshots() -> None:
    conf = LxcConfig.parse(RAW_GPU_CONF)
    assert conf.add_raw("lxc.mount.entry", "/dev/nvidia1 dev/nvidia1 none bind,optional,create=file")
    text = conf.render()
    main, rest = text.split("\n[before-driver]\n", 1)
    assert main.endswith("lxc.mount.entry: /dev/nvidia1 dev/nvidia1 none bind,optional,create=file\n")
    assert "[before-driver]\n" + rest == conf.tail
    assert conf.tail == RAW_GPU_CONF[RAW_GPU_CONF.index("[before-driver]"):]


def test_set_replaces_in_place_and_inserts_sorted() -> None:
    conf = LxcConfig.parse(DEVN_CONF)
    conf.set("memory", 16384)
    conf.set("dev4", "/dev/nvidia-modeset,gid=44")
    conf.set("onboot", "1")
    lines = conf.render().splitlines()
    assert lines[lines.index("dev3: /dev/nvidia-uvm-tools,gid=44") + 1] == "dev4: /dev/nvidia-modeset,gid=44"
    assert "memory: 16384" in lines and "memory: 8192" not in lines
    assert lines.index("onboot: 1") == lines.index("net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:2F:03:9C,"
                                                   "ip=dhcp,type=veth") + 1
    # unrelated lines untouched, raw lines still last
    assert lines[-2:] == ["lxc.cgroup2.devices.allow: c 10:200 rwm",
                          "lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file"]
    assert conf.delete("dev4") is True and conf.delete("dev4") is False


def test_set_rejects_raw_keys_and_newlines() -> None:
    conf = LxcConfig.parse(DEVN_CONF)
    with pytest.raises(ValueError):
        conf.set("lxc.mount.entry", "x")
    with pytest.raises(ValueError):
        conf.set("hostname", "a\nb")
    with pytest.raises(ValueError):
        conf.add_raw("lxc.mount.entry", "a\nlxc.apparmor.profile: unconfined")


def test_description_encoding_like_pve() -> None:
    assert encode_text("GPU: 8x") == "GPU%3A 8x"
    assert encode_text("100% ü") == "100% %C3%BC"  # '%' itself is not escaped
    assert decode_text("GPU%3A 8x") == "GPU: 8x"
    conf = LxcConfig.parse(DEVN_CONF)
    conf.description = "Ollama: LLMs\nsecond line"
    assert conf.render().startswith("#Ollama%3A LLMs\n#second line\narch: amd64\n")
    assert conf.description == "Ollama: LLMs\nsecond line"


def test_lxc_equals_syntax_is_accepted() -> None:
    conf = LxcConfig.parse("arch: amd64\nlxc.apparmor.profile = unconfined\n")
    assert conf.raw_lines() == [("lxc.apparmor.profile", "unconfined")]
    assert conf.render() == "arch: amd64\nlxc.apparmor.profile = unconfined\n"


def test_from_options_writes_like_pve() -> None:
    conf = LxcConfig.from_options(
        {"memory": 512, "hostname": "CT200", "arch": "amd64", "rootfs": "local-lvm:vm-200-disk-0,size=8G"},
        raw=[("lxc.cgroup2.devices.allow", "c 195:* rwm")],
    )
    assert conf.render() == (
        "arch: amd64\nhostname: CT200\nmemory: 512\nrootfs: local-lvm:vm-200-disk-0,size=8G\n"
        "lxc.cgroup2.devices.allow: c 195:* rwm\n"
    )


def test_property_strings() -> None:
    assert parse_property_string("/dev/nvidia0,mode=0666", "path") == {"path": "/dev/nvidia0", "mode": "0666"}
    assert parse_property_string("local-lvm:8,mountoptions=noatime", "volume") == {
        "volume": "local-lvm:8", "mountoptions": "noatime"}
    assert format_property_string({"mode": "0666", "path": "/dev/nvidia-uvm"}, "path") == "/dev/nvidia-uvm,mode=0666"
    with pytest.raises(ValueError):
        parse_property_string("bare", None)


_LINE = st.one_of(
    st.sampled_from(DEVN_CONF.splitlines() + RAW_GPU_CONF.splitlines() + ["", "   ", "#", "garbage line"]),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n"), max_size=40),
)


@given(lines=st.lists(_LINE, max_size=30), ending=st.sampled_from(["\n", "\r\n"]), final=st.booleans())
@settings(max_examples=200, deadline=None)
def test_round_trip_property(lines: list[str], ending: str, final: bool) -> None:
    text = ending.join(lines) + (ending if final and lines else "")
    conf = LxcConfig.parse(text)
    assert conf.render() == text
    # an idempotent no-op edit keeps the bytes too
    for key, value in conf.raw_lines():
        assert conf.add_raw(key, value) is False
    assert conf.render() == text


def test_passthrough_view_of_raw_lines_reads_the_main_section_only() -> None:
    """What the diagnosis reads: allow rules, /dev bind-mount sources; the snapshot's lines are not the container's."""
    conf = LxcConfig.parse(RAW_GPU_CONF)
    assert conf.device_allow_rules() == [("c", "195", "*"), ("c", "511", "*")]
    assert conf.raw_text("lxc.cgroup2.devices.allow") == ["lxc.cgroup2.devices.allow: c 195:* rwm",
                                                          "lxc.cgroup2.devices.allow: c 511:* rwm"]
    assert conf.allows_char_major(195) and conf.allows_char_major(511) and not conf.allows_char_major(510)
    assert conf.mount_sources() == ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert conf.dev_paths() == [] and conf.raw_text("lxc.idmap") == []


def test_passthrough_view_of_devn_entries_and_wildcard_rules() -> None:
    conf = LxcConfig.parse(DEVN_CONF)
    assert conf.dev_paths() == ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert conf.mount_sources() == ["/dev/net/tun"]
    assert conf.device_allow_rules() == [("c", "10", "200")] and conf.allows_char_major(10)
    assert not conf.allows_char_major(195)
    assert LxcConfig.parse("lxc.cgroup2.devices.allow: a\n").allows_char_major(195)
    assert LxcConfig.parse("lxc.cgroup2.devices.allow: c *:* rwm\n").allows_char_major(509)
    assert not LxcConfig.parse("lxc.cgroup.devices.allow: c 195:* rwm\n").allows_char_major(195)  # v1 key
