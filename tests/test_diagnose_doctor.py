"""`diagnose --host` as a doctor: checks per probe and findings merged by root cause (issue 27 item 2)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from provisioner.diagnose import Finding
from provisioner.support.diagnose_sources import live_report
from provisioner.support.doctor import check_of, merge_by_cause
from provisioner.support.evidence import ProbeRecord
from provisioner.transport.ssh import SshTarget, SshTransport
from tests.support.require import require


def _f(category: str, conf: float, rule: str, ev: str) -> Finding:
    return Finding(category=category, confidence=conf, root_cause=rule, fix="fix", evidence=(ev,), rule=rule)  # type: ignore[arg-type]


def test_drift_and_facts_of_one_cause_become_one_finding_best_first() -> None:
    """After a driver upgrade: drift.driver (0.95) and the NVML mismatch from a log (0.98) name one cause;
    one finding comes out, the surer first, carrying both rules and both evidence lines."""
    drift = _f("driver_lib_mismatch", 0.95, "drift.driver", "container userspace 580.1 != host 595.2")
    log = _f("driver_lib_mismatch", 0.98, "mismatch.nvml", "Failed to initialize NVML: Driver/library version mismatch")
    other = _f("container_device_missing", 0.9, "facts.uvm", "/dev/nvidia-uvm missing")
    merged = merge_by_cause([drift, other, log])
    assert [f.category for f in merged] == ["driver_lib_mismatch", "container_device_missing"]
    top = merged[0]
    assert top.confidence == 0.98 and top.rule == "mismatch.nvml"
    assert set(top.rules) == {"mismatch.nvml", "drift.driver"}
    assert set(top.evidence) == {drift.evidence[0], log.evidence[0]}


def test_distinct_facts_findings_of_one_category_stay_distinct() -> None:
    a = _f("container_device_missing", 0.9, "facts.uvm", "uvm")
    b = _f("container_device_missing", 0.85, "facts.cgroup", "cgroup")
    assert merge_by_cause([b, a]) == [a, b]


def test_two_drift_findings_of_one_category_stay_two_repairs() -> None:
    """The boot unit gone and the nodes it makes missing: two repairs `plan --check` names; a facts finding
    of their category joins the first of them, not both."""
    unit = _f("container_device_missing", 0.95, "drift.boot_unit", "boot unit not installed")
    nodes = _f("container_device_missing", 0.95, "drift.nodes", "/dev/nvidia-uvm missing on the host")
    facts = _f("container_device_missing", 0.9, "facts.uvm", "uvm")
    merged = merge_by_cause([unit, nodes, facts])
    assert [f.rule for f in merged] == ["drift.boot_unit", "drift.nodes"]
    assert set(merged[0].rules) == {"drift.boot_unit", "facts.uvm"} and merged[1].rules == ()


def test_checks_name_each_probe_and_why_it_failed() -> None:
    ok = ProbeRecord(name="node.module_version", target="node", where="local", command="cat", status="ok",
                     exit_status=0, output="595.71.05\n")
    bad = ProbeRecord(name="ct.gpu_list", target="container", where="local", command="nvidia-smi -L",
                      status="failed", exit_status=9, error="NVIDIA-SMI has failed because it couldn't communicate")
    gone = ProbeRecord(name="ct.installer_log", target="container", where="local", command="tail", status="absent")
    late = ProbeRecord(name="node.nvidia_smi_q", target="node", where="local", command="nvidia-smi -q",
                       status="timeout", error="timed out after 20 s")
    checks = [check_of(r) for r in (ok, bad, gone, late)]
    assert [c.mark for c in checks] == ["✓", "✗", "–", "✗"]
    assert checks[0].detail == "595.71.05"
    assert "failed" in checks[1].detail and "communicate" in checks[1].detail
    assert checks[3].detail.startswith("timeout") and checks[3].to_dict()["ok"] is False


async def test_lab_doctor_healthy_then_after_driver_upgrade(tmp_path: Path) -> None:
    """The lab's node and CT 200 (userspace installed at the host's version): at least ten probes pass and
    nothing is found; after `lab upgrade-driver` (lab/day2.upgrade_driver: the module changes, the container
    keeps its userspace, as a real host upgrade does) one finding names the mismatch, first."""
    from provisioner.facts.userspace import LIB_DIRS
    from provisioner.lab.day2 import upgrade_driver
    from provisioner.lab.lab import Lab, LabServices
    from provisioner.proxmox.lxc_conf import LxcConfig

    require(os.geteuid() == 0, "the lab sandboxes need root (mount namespaces, mknod)")
    require(shutil.which("unshare") is not None, "util-linux unshare is not installed")
    state = Lab(tmp_path / "lab", []).create_state()
    opts: dict[str, str | int] = {"arch": "amd64", "hostname": "ml", "ostype": "ubuntu", "memory": 65536,
                                  "cores": 16, "rootfs": "local-lvm:vm-200-disk-0,size=64G"}
    for i in range(8):
        opts[f"dev{i}"] = f"/dev/nvidia{i},mode=0666"
    opts |= {"dev8": "/dev/nvidiactl,mode=0666", "dev9": "/dev/nvidia-uvm,mode=0666",
             "dev10": "/dev/nvidia-uvm-tools,mode=0666"}
    state.write_conf(200, LxcConfig.from_options(opts))
    state.set_status(200, "running")
    host = state.settings().driver_version
    libdir = state.ct_root(200) / LIB_DIRS[0].lstrip("/")
    libdir.mkdir(parents=True, exist_ok=True)
    for lib in ("libcuda.so", "libnvidia-ml.so"):
        (libdir / f"{lib}.{host}").write_bytes(b"")
    services = LabServices(state).start()
    try:
        ssh = services.connection()["ssh"]

        def node() -> SshTransport:
            return SshTransport(SshTarget(host=ssh["host"], port=ssh["port"], user=ssh["user"],
                                          key_file=ssh["key_file"], known_hosts=ssh["known_hosts"]))

        healthy, checks = await live_report(node(), 200)
        upgrade_driver(state, "595.82.01")
        after, _ = await live_report(node(), 200)
    finally:
        services.stop()
    assert sum(1 for c in checks if c.ok) >= 10, [(c.name, c.mark, c.detail) for c in checks]
    assert healthy == [], [(f.category, f.rule, f.evidence) for f in healthy]
    assert after, "the upgrade left the container's userspace behind: a fault"
    assert after[0].category == "driver_lib_mismatch", [(f.category, f.rule) for f in after]
    assert [f.category for f in after].count("driver_lib_mismatch") == 1
    assert after == sorted(after, key=lambda f: -f.confidence)
