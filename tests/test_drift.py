"""The pure checks of `provisioner.drift` (issue #15) and the boot unit `lxc.boot_persistence` writes.

Container configs are in the format pve-container writes (`pct set --devN <path>,mode=0666` gives
``devN: <path>,mode=0666``; tests/fixtures/pve-conf/i915-308-110.conf is a real one with foreign devN
entries, source in tests/fixtures/pve-conf/SOURCES.md). The systemd semantics the unit relies on are
checked against what it says (Before=pve-guests.service, Type=oneshot, RemainAfterExit, WantedBy).
"""

from __future__ import annotations

from pathlib import Path

from provisioner import drift
from provisioner.drift import render_unit
from provisioner.proxmox.lxc_conf import LxcConfig

FIXTURES = Path(__file__).parent / "fixtures" / "pve-conf"
DEVICES = [*(f"/dev/nvidia{i}" for i in range(8)), "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
           "/dev/nvidia-modeset"]


def provisioned_conf(**changes: str | None) -> LxcConfig:
    lines = {"arch": "amd64", "cores": "64", "hostname": "blackwell-torch", "memory": "491520", "onboot": "1",
             "ostype": "ubuntu", "unprivileged": "1"}
    lines.update({f"dev{i}": f"{d},mode=0666" for i, d in enumerate(DEVICES)})
    for key, value in changes.items():
        if value is None:
            lines.pop(key, None)
        else:
            lines[key] = value
    return LxcConfig.parse("".join(f"{k}: {v}\n" for k, v in sorted(lines.items())))


def manifest(**kw: object) -> drift.Manifest:
    base: dict[str, object] = {"vmid": 200, "devices": DEVICES, "dev_mode": "0666", "onboot": True,
                               "gpus": [{"index": i, "uuid": f"GPU-{i:08d}"} for i in range(8)]}
    base.update(kw)
    return drift.Manifest.model_validate(base)


def test_driver_mismatch_at_patch_level_names_both_versions() -> None:
    (f,) = drift.driver_drift("570.148.08", ["570.148.06"], 200)
    assert f.kind == "driver" and f.repair == "driver.userspace"
    assert "570.148.06" in f.text and "570.148.08" in f.text
    assert drift.driver_drift("570.148.08", ["570.148.08"], 200) == []
    assert drift.driver_drift("595.82.01", [], 200) == []  # no userspace yet: not drift, a first install


def test_lib_versions_from_ls() -> None:
    from provisioner.facts import catalog

    out = ("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1\n/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.595.71.05\n"
           "/usr/lib/x86_64-linux-gnu/libcuda.so.595.71.05\n")
    libs = catalog.USERSPACE_LIBS.parse(out)
    assert libs.versions == ("595.71.05",)
    assert len(libs.files) == 3
    assert catalog.USERSPACE_LIBS.parse("").versions == ()


def test_missing_nodes_after_reboot() -> None:
    present = {d for d in DEVICES if "uvm" not in d}
    (f,) = drift.nodes_drift(DEVICES, present)
    assert f.text == "device nodes missing on the host: /dev/nvidia-uvm, /dev/nvidia-uvm-tools"
    assert drift.nodes_drift(DEVICES, set(DEVICES)) == []


def test_hand_edited_config_is_named_line_by_line() -> None:
    assert drift.config_drift(provisioned_conf(), manifest()) == []
    edited = provisioned_conf(dev3="/dev/nvidia3,mode=0600", dev9=None, onboot="0")
    texts = [f.text for f in drift.config_drift(edited, manifest())]
    assert texts == ["CT 200 config: devN entries for /dev/nvidia-uvm were removed",
                     "CT 200 config: dev3 (/dev/nvidia3) has mode 0600, the playbook wrote 0666",
                     "CT 200 config: onboot is 0, the playbook wrote 1"]


def test_foreign_devn_entries_are_not_ours() -> None:
    conf = LxcConfig.parse((FIXTURES / "i915-308-110.conf").read_text())
    ours = drift.Manifest(vmid=110, devices=["/dev/dri/card0"], dev_mode="0666", onboot=None)
    (f,) = drift.config_drift(conf, ours)  # the entry exists (gid=44) but not with the mode we would write
    assert "dev0 (/dev/dri/card0) has mode unset" in f.text
    # entries outside the record (dev1 renderD128) are never reported
    assert all("renderD128" not in x.text for x in drift.config_drift(conf, ours))


def test_vanished_gpus_by_count_and_uuid() -> None:
    recorded = manifest().gpus
    now = [(i, f"GPU-{i:08d}") for i in range(8)]
    assert drift.gpus_drift(recorded, now) == []
    (f,) = drift.gpus_drift(recorded, now[:7])
    assert "provisioned 8, the node lists 7" in f.text and "GPU 7 GPU-00000007" in f.text
    swapped = [*now[:7], (7, "GPU-ffffffff")]
    (f,) = drift.gpus_drift(recorded, swapped)
    assert "gone: GPU 7 GPU-00000007" in f.text and f.repair == ""


def test_boot_unit_is_ordered_before_guests_and_creates_every_node_kind() -> None:
    unit = render_unit(DEVICES)
    assert "Before=pve-guests.service" in unit.splitlines()
    assert unit.index("ExecStart=/usr/bin/nvidia-modprobe -u -c=0") < unit.index("ExecStart=/usr/bin/nvidia-smi\n")
    assert "ExecStart=/usr/bin/nvidia-modprobe -m" in unit  # nvidia-modeset is passed
    assert "ExecStart=/usr/bin/nvidia-smi -pm 1" in unit
    assert "Type=oneshot" in unit and "RemainAfterExit=yes" in unit and "WantedBy=multi-user.target" in unit
    assert "nvidia-modprobe -m" not in render_unit([d for d in DEVICES if d != "/dev/nvidia-modeset"])
    assert "-pm 1" not in render_unit(DEVICES, persistence_mode=False)
    assert drift.boot_unit_drift(unit, unit, True) == []
    assert [f.kind for f in drift.boot_unit_drift(None, unit, False)] == ["boot_unit"]
    changed = drift.boot_unit_drift(unit.replace("-pm 1", "-pm 0"), unit, False)
    assert [f.text for f in changed] == [f"boot unit {drift.UNIT_PATH} was changed by hand",
                                         f"boot unit {drift.UNIT_NAME} is not enabled"]


def test_manifest_round_trip() -> None:
    m = manifest()
    assert drift.parse_manifest(m.render()) == m
    assert drift.parse_manifest("") is None and drift.parse_manifest("not json") is None


def test_summary_page_renders_the_engine_findings() -> None:
    from screens.pages.summary import drift_text

    conf = provisioned_conf(dev3="/dev/nvidia3,mode=0600")
    report = drift.DriftReport(host="pve1", vmid=200,
                               findings=[*drift.driver_drift("595.82.01", ["595.71.05"], 200),
                                         *drift.config_drift(conf, manifest()),
                                         *drift.gpus_drift(manifest().gpus, [(i, f"GPU-{i:08d}") for i in range(7)])])
    text = drift_text(report).plain
    assert "CT 200 userspace 595.71.05 ≠ host kernel module 595.82.01" in text
    assert "replay repairs it (driver.userspace)" in text and "replay repairs it (lxc.gpu_passthrough)" in text
    assert "provisioned 8, the node lists 7" in text and "not repairable by replay" in text
    assert "none on pve1 for CT 200" in drift_text(drift.DriftReport(host="pve1", vmid=200)).plain
    assert "not checked (OSError: unreachable)" in drift_text(None, "OSError: unreachable").plain
