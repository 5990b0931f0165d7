"""Real /etc/pve/lxc/<vmid>.conf files from public reports (tests/fixtures/pve-conf/SOURCES.md) round-trip
through provisioner.proxmox.lxc_conf byte for byte, and read back the options and raw lines they hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.lab.day2 import start_order
from provisioner.lab.state import LabState
from provisioner.proxmox.lxc_conf import LxcConfig

FIXTURES = Path(__file__).parent / "fixtures" / "pve-conf"
CONFS = sorted(FIXTURES.glob("*.conf"))


def test_fixtures_are_present_and_sourced() -> None:
    sources = (FIXTURES / "SOURCES.md").read_text()
    assert len(CONFS) >= 2
    assert all(f"`{p.name}`" in sources for p in CONFS)


@pytest.mark.parametrize("path", CONFS, ids=lambda p: p.name)
def test_round_trip_byte_for_byte(path: Path) -> None:
    text = path.read_bytes().decode()
    assert LxcConfig.parse(text).render() == text


def test_frigate_conf_reads_back() -> None:
    conf = LxcConfig.parse((FIXTURES / "frigate-2051.conf").read_text())
    assert conf.options()["startup"] == "order=1,up=5" and conf.options()["onboot"] == "1"
    allows = [v for k, v in conf.raw_lines() if k == "lxc.cgroup2.devices.allow"]
    assert allows == ["c 120:0 rwm", "c 120:1 rwm", "c 195:0 rwm", "c 195:1 rwm"]
    assert len([1 for k, _ in conf.raw_lines() if k == "lxc.idmap"]) == 6


def test_edit_keeps_every_other_byte(tmp_path: Path) -> None:
    text = (FIXTURES / "frigate-2051.conf").read_text()
    conf = LxcConfig.parse(text)
    conf.set("memory", "32768")
    assert conf.render() == text.replace("memory: 16384\n", "memory: 32768\n")


def test_real_startup_order_feeds_the_boot_order(tmp_path: Path) -> None:
    state = LabState.create(tmp_path / "lab")
    state.conf_path(2051).write_text((FIXTURES / "frigate-2051.conf").read_text())
    state.conf_path(200).write_text("arch: amd64\nhostname: a\nonboot: 1\n")
    assert start_order(state) == [2051, 200]  # order=1 before unset (LONG_MAX)


def test_snapshot_sections_stay_out_of_the_main_section() -> None:
    text = (FIXTURES / "tteck-2230-100.conf").read_text()
    conf = LxcConfig.parse(text)
    assert conf.options()["parent"] == "tailscale" and "snaptime" not in conf.options()
    assert conf.raw_lines() == []  # the raw lines belong to the [fresh] snapshot
    conf.set("cores", "4")
    out = conf.render()
    main, _, tail = out.partition("\n[fresh]\n")
    assert "cores: 4\n" in main and tail == text.partition("\n[fresh]\n")[2]


def test_devn_entries_of_a_real_conf() -> None:
    conf = LxcConfig.parse((FIXTURES / "i915-308-110.conf").read_text())
    assert conf.indexed("dev") == {0: "/dev/dri/card0,gid=44", 1: "/dev/dri/renderD128,gid=104"}
    assert conf.options()["startup"] == "order=9,up=5"
