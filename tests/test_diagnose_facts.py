"""Live-facts predicates, on realistic probe outputs (reference/proxmox.md §2-4, burnin.md §6.5)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from provisioner.diagnose import diagnose, diagnose_facts, probes

LOGS = Path(__file__).parent / "fixtures" / "logs"
HEALTHY: dict[str, Any] = json.loads((LOGS / "facts-healthy-8x-blackwell.json").read_text())
BROKEN: dict[str, Any] = json.loads((LOGS / "facts-broken-ct102.json").read_text())


def _with(**changes: Any) -> dict[str, Any]:
    facts = copy.deepcopy(HEALTHY)
    for key, value in changes.items():
        if value is ...:
            facts.pop(key, None)
        else:
            facts[key] = value
    return facts


def _rules(facts: dict[str, Any]) -> list[str]:
    return [r for f in diagnose_facts(facts) for r in f.rules]


def test_healthy_host_has_no_finding() -> None:
    assert diagnose_facts(HEALTHY) == []


def test_broken_container_findings_best_first() -> None:
    findings = diagnose_facts(BROKEN)
    cats = [f.category for f in findings]
    assert cats[0] == "driver_lib_mismatch"
    assert {"arch_unsupported", "container_device_missing", "nccl_failure"} <= set(cats)
    assert [f.confidence for f in findings] == sorted((f.confidence for f in findings), reverse=True)
    mismatch = findings[0]
    assert "590.48.01" in mismatch.root_cause and "595.71.05" in mismatch.root_cause
    assert "NVIDIA-Linux-x86_64-595.71.05.run --no-kernel-modules" in mismatch.fix
    assert "mismatch.nvml" in mismatch.rules  # the nvidia_smi text fact corroborates it


def test_host_module_vs_container_userspace() -> None:
    nvml = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 590.48\n"
    assert "facts.host_module_vs_container_userspace" in _rules(_with(container_driver_version=nvml))
    # NVML prints a truncated version: 595.71 is the same driver as 595.71.05
    assert _rules(_with(container_driver_version="NVML library version: 595.71")) == []


def test_device_nodes_vs_gpu_count() -> None:
    ls = "\n".join(HEALTHY["container_dev_nodes"].splitlines()[i] for i in (0, 1, 8, 10, 11))
    findings = diagnose_facts(_with(container_dev_nodes=ls))
    assert findings[0].category == "container_device_missing"
    assert "/dev/nvidia7" in findings[0].root_cause and "2 GPU device node(s) for 8" in findings[0].root_cause


def test_missing_uvm_nodes_on_host_and_container() -> None:
    no_uvm = "\n".join(ln for ln in HEALTHY["container_dev_nodes"].splitlines() if "uvm" not in ln)
    rules = _rules(_with(container_dev_nodes=no_uvm))
    assert rules == ["facts.uvm_nodes_missing"]
    f = diagnose_facts(_with(container_dev_nodes=no_uvm, host_dev_nodes=no_uvm))[0]
    assert "nvidia-modprobe -u -c=0" in f.fix


def test_stale_uvm_major_in_container() -> None:
    stale = HEALTHY["container_dev_nodes"].replace("510,   0", "509,   0")
    assert "facts.uvm_major_stale" in _rules(_with(container_dev_nodes=stale))


def test_container_sees_fewer_gpus() -> None:
    two = "\n".join(HEALTHY["container_gpu_count"].splitlines()[:2])
    assert _rules(_with(container_gpu_count=two)) == ["facts.container_gpu_count"]


def test_cgroup_allow_lines_vs_device_majors() -> None:
    findings = [f for f in diagnose_facts(BROKEN) if "facts.cgroup_allow_vs_majors" in f.rules]
    assert findings and "c 510:* rwm" in findings[0].fix
    assert "lxc.cgroup2.devices.allow: c 509:* rwm" in findings[0].evidence
    fixed = BROKEN["lxc_config"].replace("c 509:* rwm", "c 510:* rwm")
    broken = dict(BROKEN, lxc_config=fixed)
    assert "facts.cgroup_allow_vs_majors" not in _rules(broken)


def test_no_passthrough_at_all() -> None:
    conf = "\n".join(ln for ln in HEALTHY["lxc_config"].splitlines() if not ln.startswith("dev"))
    assert "facts.no_gpu_passthrough" in _rules(_with(lxc_config=conf))


def test_cgroup_v1_keys_on_cgroup2_host() -> None:
    conf = HEALTHY["lxc_config"] + "lxc.cgroup.devices.allow: c 195:* rwm\n"
    assert "facts.cgroup_v1_keys_on_v2" in _rules(_with(lxc_config=conf))
    assert "facts.cgroup_v1_keys_on_v2" not in _rules(_with(lxc_config=conf, cgroup_fs="tmpfs\n"))


def test_idmap_without_uid_line() -> None:
    # the mapping from the public corpus case pve-lxc-gpu-idmap-missing-uid-line
    conf = HEALTHY["lxc_config"] + (
        "lxc.idmap: g 0 100000 44\nlxc.idmap: g 44 44 1\nlxc.idmap: g 45 100045 61\n"
        "lxc.idmap: g 106 104 1\nlxc.idmap: g 107 100107 65429\n"
    )
    f = diagnose_facts(_with(lxc_config=conf))[0]
    assert f.category == "proxmox_lxc" and "lxc.idmap: u 0 100000 65536" in f.fix
    conf += "lxc.idmap: u 0 100000 65536\n"
    assert diagnose_facts(_with(lxc_config=conf)) == []


def test_snapshot_sections_are_ignored() -> None:
    conf = HEALTHY["lxc_config"] + "\n[before-gpu]\narch: amd64\nlxc.cgroup.devices.allow: c 195:* rwm\n"
    assert diagnose_facts(_with(lxc_config=conf)) == []


@pytest.mark.parametrize(
    ("shm", "finding"),
    [
        ("Filesystem     1K-blocks  Used Available Use% Mounted on\ntmpfs              65536     0     65536   0% /dev/shm", True),
        ("Filesystem      Size  Used Avail Use% Mounted on\nshm              64M     0   64M   0% /dev/shm", True),
        ("Filesystem     1B-blocks  Used   Available Use% Mounted on\ntmpfs  536870912  0  536870912   0% /dev/shm", True),
        (67108864, True),
        ("Filesystem      Size  Used Avail Use% Mounted on\ntmpfs           126G     0  126G   0% /dev/shm", False),
        (8 << 30, False),
    ],
)
def test_shm_size_with_nccl(shm: object, finding: bool) -> None:
    assert ("facts.shm_too_small" in _rules(_with(shm=shm))) is finding


def test_small_shm_without_multi_gpu_is_fine() -> None:
    one = HEALTHY["host_gpu_count"].splitlines()[0]
    facts = _with(shm=65536 * 1024, host_gpu_count=one, container_gpu_count=one, nccl_env=...)
    assert diagnose_facts(facts) == []


@pytest.mark.parametrize(
    ("archs", "caps", "ok"),
    [
        ("['sm_75', 'sm_80', 'sm_86', 'sm_90', 'sm_100', 'sm_120']", "12.0", True),
        ("['sm_75', 'sm_80', 'sm_86', 'sm_90', 'sm_100', 'sm_120']", "12.1", True),  # GB10 runs sm_120
        ("['sm_75', 'sm_80', 'sm_86', 'sm_90', 'sm_100', 'sm_120']", "10.3", True),  # B300 runs sm_100
        ("['sm_90a', 'sm_100a']", "10.3", False),  # arch-specific targets run only on their exact CC
        ("['sm_50', 'sm_60', 'sm_70', 'sm_75', 'sm_80', 'sm_86', 'sm_90']", "12.0", False),
        ("['sm_50', 'sm_60', 'sm_70', 'sm_75', 'sm_80', 'sm_86', 'sm_90']", "6.1", True),
        ("['sm_50', 'sm_60', 'sm_70', 'sm_75', 'sm_80', 'sm_86', 'sm_90']", "8.9", True),
        ("['sm_75', 'sm_80', 'sm_86', 'sm_90', 'sm_100', 'sm_120']", "6.1", False),
        ("['sm_80', 'sm_90', 'compute_90']", "12.0", True),  # PTX JIT forward
        ("sm_75 sm_80 sm_86 sm_90 sm_100 sm_120", "7.0\n8.0", False),  # mixed GPUs: the V100 is not served
    ],
)
def test_torch_arch_list_vs_gpu_capability(archs: str, caps: str, ok: bool) -> None:
    rules = _rules(_with(torch_arch_list=archs, gpu_compute_caps=caps))
    assert ("facts.torch_arch_vs_gpu" not in rules) is ok


@pytest.mark.parametrize(
    ("cuda", "driver", "too_old"),
    [
        ("13.0", "570.172.08", True),
        ("13.0", "580.95.05", False),
        ("12.8", "535.230.02", False),  # minor-version compatibility
        ("12.8", "470.256.02", True),
        ("11.8", "450.80.02", False),
    ],
)
def test_torch_cuda_vs_driver(cuda: str, driver: str, too_old: bool) -> None:
    facts = _with(torch_cuda_version=cuda, torch_version=f"2.9.0+cu{cuda.replace('.', '')}",
                  host_driver_version=driver, container_driver_version=driver, gpu_compute_caps="8.6")
    assert ("facts.torch_cuda_vs_driver" in _rules(facts)) is too_old


def test_blackwell_needs_r570() -> None:
    facts = _with(host_driver_version="550.144.03", container_driver_version="550.144.03")
    assert "facts.blackwell_driver_floor" in _rules(facts)


@pytest.mark.parametrize(
    ("version", "cuda", "cpu"),
    [("2.5.1+cpu", "None", True), ("2.5.1", None, True), ("2.11.0+cu128", "12.8", False), ("2.11.0", "12.8", False)],
)
def test_cpu_only_wheel(version: str, cuda: str | None, cpu: bool) -> None:
    rules = _rules(_with(torch_version=version, torch_cuda_version=cuda))
    assert ("facts.torch_cpu_build" in rules) is cpu


def test_nccl_debug_env() -> None:
    f = diagnose_facts(_with(nccl_env="NCCL_P2P_DISABLE=1\nNCCL_DEBUG=INFO\nPATH=/usr/bin\n"))
    assert [x.rule for x in f] == ["facts.nccl_debug_env"]
    assert f[0].evidence == ("NCCL_P2P_DISABLE=1",)
    assert diagnose_facts(_with(nccl_env={"NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "eth0"})) == []


def test_text_facts_go_through_log_rules() -> None:
    dmesg = "[  5.1] NVRM: Xid (PCI:0000:41:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    assert diagnose_facts(_with(dmesg=dmesg))[0].category == "oom_or_hw"


def test_log_and_facts_combined() -> None:
    findings = diagnose("RuntimeError: CUDA error: no kernel image is available for execution on the device",
                        facts=_with(torch_arch_list="['sm_50', 'sm_60', 'sm_70', 'sm_75', 'sm_80', 'sm_86', 'sm_90']"))
    assert len(findings) == 1
    assert set(findings[0].rules) == {"facts.torch_arch_vs_gpu", "arch.no_kernel_image"}


# --- parsers on realistic outputs -------------------------------------------------------------


def test_driver_version_sources() -> None:
    assert probes.driver_version("580.126.09\n") == "580.126.09"
    assert probes.driver_version(BROKEN["host_driver_version"]) == "595.71.05"
    assert probes.driver_version(BROKEN["container_driver_version"]) == "590.48.01"
    assert probes.driver_version("NVML library version: 570.124") == "570.124"
    assert probes.driver_version("no driver") is None


def test_device_nodes_parser() -> None:
    nodes = probes.device_nodes(HEALTHY["container_dev_nodes"])
    assert nodes["/dev/nvidia-uvm"].major == 510 and nodes["/dev/nvidiactl"].minor == 255
    assert nodes["/dev/nvidia-caps/nvidia-cap1"].major == 236
    assert probes.gpu_nodes(nodes) == [f"/dev/nvidia{i}" for i in range(8)]
    plain = probes.device_nodes("/dev/nvidia0  /dev/nvidiactl  /dev/nvidia-modeset")
    assert set(plain) == {"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-modeset"}


def test_proc_devices_parser() -> None:
    majors = probes.char_majors(HEALTHY["host_proc_devices"])
    assert majors["nvidia-uvm"] == 510 and majors["nvidia"] == 195 and majors["nvidia-caps"] == 236
    assert "loop" not in majors  # block devices are not character majors
