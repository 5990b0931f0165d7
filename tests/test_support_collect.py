"""Evidence collection over real transports: this machine (LocalTransport), a real sshd, the lab.

Where a test needs a GPU node's commands it puts stand-ins on the PATH (like the lab does) that
answer from the recorded outputs in tests/fixtures/outputs; the transports are never faked.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from provisioner.diagnose import diagnose
from provisioner.facts.base import Fact
from provisioner.facts.evidence import raw_text
from provisioner.support import collect
from provisioner.support.collect import run_probe
from provisioner.support.derive import facts_from_records
from provisioner.support.diagnose_sources import HostUnreachable, evidence_findings, live_findings
from provisioner.support.evidence import ProbeRecord
from provisioner.support.probes import BUNDLE_PROBES, BY_NAME, PROBES, Probe, argv_for, selected
from provisioner.transport.local import LocalTransport
from provisioner.transport.ssh import SshTarget, SshTransport
from tests.support.require import require, require_torch
from tests.support.sshd import Sshd
from tests.support.standin_tools import HAS_NVIDIA_MODULE, HAS_NVIDIA_SMI, OUTPUTS, VENV, standin_bin, standin_transport

# --- pure: the probe list and the facts it derives ------------------------------------------------


def test_probe_names_files_and_fact_keys_are_consistent() -> None:
    assert len(BY_NAME) == len(BUNDLE_PROBES)  # the bundle's probes: every probe plus nvidia-bug-report.sh
    assert len({p.file for p in BUNDLE_PROBES}) == len(BUNDLE_PROBES)
    live_keys = {"host_driver_version", "container_driver_version", "host_gpu_count", "container_gpu_count",
                 "host_proc_devices", "host_dev_nodes", "container_dev_nodes", "lxc_config", "cgroup_fs", "shm",
                 "gpu_compute_caps", "torch_arch_list", "torch_cuda_version", "torch_version", "nccl_env",
                 "nvidia_smi", "dmesg", "torch_check", "install_log", "cuda_loader"}
    fed = {k for p in PROBES for k in p.feeds}
    assert fed <= live_keys, fed - live_keys
    # Every fact a live rule compares is fed by some probe.
    assert live_keys - fed == set()


def test_placeholders_stay_single_argv_elements() -> None:
    venv = "/opt/my venv; rm -rf /"
    argv = argv_for(BY_NAME["ct.torch"], 200, venv)
    assert venv in argv and all(venv not in a for a in argv if a != venv)
    assert argv_for(BY_NAME["node.lxc_config"], 200, None)[-1] == "/etc/pve/lxc/200.conf"
    assert argv_for(BY_NAME["ct.packages"], None, None)[-2] == "/opt/torch-venv"
    assert {p.name for p in selected(None)} == {p.name for p in PROBES if not p.needs_container}
    with pytest.raises(ValueError):
        argv_for(BY_NAME["node.lxc_config"], None, None)


def _rec(name: str, output: str, status: str = "ok", exit_status: int = 0) -> ProbeRecord:
    p = BY_NAME[name]
    return ProbeRecord(name=name, target=p.target, where="recorded", command=" ".join(p.argv), status=status,  # type: ignore[arg-type]
                       exit_status=exit_status, output=output, file=p.file, feeds=p.feeds)


def test_facts_from_recorded_outputs_feed_the_live_rules() -> None:
    records = [
        _rec("node.proc_driver_version", (OUTPUTS / "proc_driver_version_open_590.txt").read_text()),
        _rec("node.gpu_query", (OUTPUTS / "smi_query_csv_rtxpro6000_x2_580.txt").read_text()),
        _rec("node.proc_devices", (OUTPUTS / "proc_devices_595_open.txt").read_text()),
        _rec("node.dev_nodes", (OUTPUTS / "ls_dev_nvidia_host_x2.txt").read_text()),
        _rec("ct.dev_nodes", (OUTPUTS / "ls_dev_nvidia_ct_unpriv.txt").read_text()),
        _rec("ct.shm", (OUTPUTS / "df_k_shm_ct.txt").read_text()),
        _rec("ct.userspace", "/usr/lib/x86_64-linux-gnu/libcuda.so.1\n/usr/lib/x86_64-linux-gnu/libcuda.so.570.124.06\n"),
        _rec("ct.nvidia_smi", (OUTPUTS / "smi_mismatch.txt").read_text(), "failed", 18),
        _rec("ct.installer_log", (OUTPUTS / "nvidia_installer_success_userspace.log").read_text()),
    ]
    facts = facts_from_records(records, container=True)
    assert facts["gpu_compute_caps"] == "12.0\n12.0\n"
    assert "590." in str(facts["host_driver_version"])
    assert facts["nvidia_smi"] == (OUTPUTS / "smi_mismatch.txt").read_text()
    assert "container_dev_nodes" in facts and "install_log" in facts
    top = diagnose("", facts)
    assert top and top[0].category == "driver_lib_mismatch"
    # Userspace libraries not where we look: the NVML version nvidia-smi printed stands in.
    no_libs = [r if r.name != "ct.userspace" else _rec("ct.userspace", "") for r in records]
    assert facts_from_records(no_libs, container=True)["container_driver_version"] == "NVML library version: 570.124"
    # Without a container the ct.* device listing is the node's own: not a container fact.
    assert "container_dev_nodes" not in facts_from_records(records, container=False)


def test_torch_report_feeds_arch_facts_and_keeps_warnings_as_log_text() -> None:
    # What TORCH_SCRIPT prints with a cu124 build on Blackwell: torch's own warning, then one JSON line.
    report = {"python": "/opt/torch-venv/bin/python", "python_version": "3.12.3", "torch": "2.5.1+cu124",
              "cuda": "12.4", "available": True, "count": 2, "capabilities": ["12.0", "12.0"],
              "arch_list": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"], "nccl": "2.21.5"}
    output = (
        "/opt/torch-venv/lib/python3.12/site-packages/torch/cuda/__init__.py:235: UserWarning: \n"
        "NVIDIA RTX PRO 6000 Blackwell Server Edition with CUDA capability sm_120 is not compatible with the "
        "current PyTorch installation.\n"
        "The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.\n"
        + json.dumps(report) + "\n")
    facts = facts_from_records([_rec("ct.torch", output)], container=True)
    assert facts["torch_version"] == "2.5.1+cu124" and facts["torch_cuda_version"] == "12.4"
    assert facts["torch_arch_list"] == report["arch_list"]
    assert facts["gpu_compute_caps"] == "12.0\n12.0\n"  # from torch when the node's nvidia-smi gave none
    assert "sm_120 is not compatible" in str(facts["torch_check"]) and "{" not in str(facts["torch_check"])
    top = diagnose("", facts)[0]
    assert top.category == "arch_unsupported"


def test_failed_probes_feed_no_value_facts() -> None:
    records = [_rec("node.gpu_list", (OUTPUTS / "smi_no_driver.txt").read_text(), "failed", 9),
               _rec("ct.shm", "df: /dev/shm: No such file or directory\n", "failed", 1)]
    facts = facts_from_records(records, container=True)
    assert "host_gpu_count" not in facts and "shm" not in facts
    assert facts["nvidia_smi"] == (OUTPUTS / "smi_no_driver.txt").read_text()


# --- run_probe: every outcome is a record ------------------------------------------------------------


async def test_failing_and_hanging_probes_are_recorded_not_raised() -> None:
    local = LocalTransport()
    boom = Probe("t.boom", "node", Fact("t.boom", ("sh", "-c", "echo first; echo boom >&2; exit 5"), raw_text),
                 "t/boom.txt")
    rec = await run_probe(local, boom)
    assert (rec.status, rec.exit_status) == ("failed", 5)
    assert rec.output == "first\nboom\n" and "boom" in (rec.error or "")
    hang = Probe("t.hang", "node", Fact("t.hang", ("sh", "-c", "echo started; sleep 30"), raw_text, timeout=0.5),
                 "t/hang.txt")
    rec = await run_probe(local, hang)
    assert rec.status == "timeout" and rec.output.startswith("started\n")
    missing = Probe("t.missing", "node", Fact("t.missing", ("no-such-command-xyz",), raw_text), "t/missing.txt")
    rec = await run_probe(local, missing)
    assert rec.status == "absent" and "no-such-command-xyz" in (rec.error or "")
    absent = Probe("t.absent", "node", Fact("t.absent", ("sh", "-c", "echo not here; exit 3"), raw_text), "t/absent.txt")
    assert (await run_probe(local, absent)).status == "absent"


# --- this machine -------------------------------------------------------------------------------------


async def test_collect_local_machine_records_every_probe() -> None:
    require_torch()
    import torch

    ev = await collect(LocalTransport(), None, VENV)
    assert [r.name for r in ev.records] == [p.name for p in selected(None)]
    assert ev.unreachable is None and ev.container_unreachable is None
    uname = ev.record("node.uname")
    assert uname is not None and uname.status == "ok" and platform.machine() in uname.output
    gpu_list = ev.record("node.gpu_list")
    assert gpu_list is not None
    if not HAS_NVIDIA_SMI:  # the usual CI machine: recorded as absent, not fatal
        assert gpu_list.status == "absent" and "nvidia-smi" in (gpu_list.error or "")
        assert "host_gpu_count" not in ev.facts
    if not HAS_NVIDIA_MODULE:
        mod = ev.record("node.module_version")
        assert mod is not None and mod.status == "absent" and mod.exit_status == 3
    assert ev.facts["torch_version"] == torch.__version__
    assert ev.facts["torch_cuda_version"] == (torch.version.cuda or "None")
    assert ev.facts["host_proc_devices"] == Path("/proc/devices").read_text()
    packages = ev.record("ct.packages")
    assert packages is not None and f"torch=={torch.__version__}" in packages.output.splitlines()
    findings = evidence_findings(ev)
    if torch.version.cuda is None:
        assert findings and findings[0].category == "cpu_only_wheel"
        assert any(torch.__version__ in line for line in findings[0].evidence)


async def test_collect_with_unreachable_container_skips_its_probes() -> None:
    require(shutil.which("pct") is None, "this machine is a Proxmox node (pct exists): CT 999 might exist")
    ev = await collect(LocalTransport(), 999, VENV)
    assert ev.unreachable is None and ev.container_unreachable is not None
    first = ev.record("ct.uname")
    assert first is not None and first.status == "absent" and "pct" in (first.error or "")
    others = [r for r in ev.records if r.target == "container" and r.name != "ct.uname"]
    assert others and all(r.status == "skipped" for r in others)
    assert all(r.where == "ct999@local" for r in others)
    conf = ev.record("node.lxc_config")
    assert conf is not None and conf.status == "absent" and "/etc/pve/lxc/999.conf" in conf.command


async def test_collect_through_pct_standins_reads_the_container(tmp_path: Path) -> None:
    bindir = standin_bin(tmp_path)
    ev = await collect(standin_transport(bindir), 200, "/nonexistent/venv")
    assert ev.container_unreachable is None
    by = {r.name: r for r in ev.records}
    assert (by["ct.uname"].where, by["ct.uname"].command) == ("ct200@local", "uname -a")
    assert by["ct.nvidia_smi"].status == "failed" and by["ct.nvidia_smi"].exit_status == 18
    assert by["ct.torch"].status == "absent" and "no python at /nonexistent/venv" in by["ct.torch"].output
    assert by["node.pct_status"].output.startswith("status: running")
    assert ev.facts["gpu_compute_caps"] == "12.0\n12.0\n"
    assert str(ev.facts["host_gpu_count"]).count("GPU ") == 2
    assert "NVRM: Xid (PCI:0000:16:00): 79" in str(ev.facts["dmesg"])
    assert "EXT4-fs" not in str(ev.facts["dmesg"])
    assert "Driver/library version mismatch" in str(ev.facts["nvidia_smi"])
    categories = [f.category for f in evidence_findings(ev)]
    assert "driver_lib_mismatch" in categories


# --- a real sshd ----------------------------------------------------------------------------------


def _ssh(sshd: Sshd, known_hosts: Path | None = None) -> SshTransport:
    return SshTransport(SshTarget(host=sshd.host, port=sshd.port, user=sshd.user, key_file=str(sshd.client_key),
                                  known_hosts=str(known_hosts or sshd.known_hosts)))


async def test_collect_over_ssh(sshd: Sshd) -> None:
    require_torch()
    import torch

    node = _ssh(sshd)
    try:
        ev = await collect(node, 999, VENV)
    finally:
        await node.close()
    assert ev.unreachable is None
    assert ev.host == f"root@127.0.0.1:{sshd.port}"
    uname = ev.record("node.uname")
    local_uname = subprocess.run(["uname", "-a"], capture_output=True, text=True, check=True).stdout
    assert uname is not None and uname.output == local_uname and uname.where.startswith("ssh:")
    assert ev.facts["host_proc_devices"] == Path("/proc/devices").read_text()
    cg = subprocess.run(["stat", "-fc", "%T", "/sys/fs/cgroup"], capture_output=True, text=True).stdout.strip()
    assert ev.facts["cgroup_fs"] == cg
    if shutil.which("pct") is None:  # no Proxmox here: the container probes fail gracefully over SSH too
        assert ev.container_unreachable is not None
        assert all(r.status == "skipped" for r in ev.records if r.target == "container" and r.name != "ct.uname")
    statuses = {r.status for r in ev.records}
    assert statuses <= {"ok", "absent", "failed", "skipped"}
    # Without a container the workload probes (torch) run on the node over SSH.
    node = _ssh(sshd)
    findings = await live_findings(node, None, VENV)
    if torch.version.cuda is None:
        assert findings[0].category == "cpu_only_wheel"


async def test_unknown_host_key_makes_the_node_unreachable(sshd: Sshd, tmp_path: Path) -> None:
    node = _ssh(sshd, known_hosts=tmp_path / "empty_known_hosts")
    ev = await collect(node, 200, VENV)
    await node.close()
    assert ev.unreachable is not None and "unknown host" in ev.unreachable
    first = ev.record("node.uname")
    assert first is not None and first.status == "unreachable"
    assert all(r.status == "skipped" for r in ev.records if r.name != "node.uname")
    with pytest.raises(HostUnreachable, match="unknown host"):
        await live_findings(_ssh(sshd, known_hosts=tmp_path / "empty_known_hosts"))


# --- the lab: its SSH endpoint as the node, CT 200 through its pct -------------------------------------

# Skipped only while the lab runner module does not exist (it is written in parallel); once it
# exists, missing root/unshare is a `require` (a failure under CI=true).


@pytest.mark.timeout(240)
async def test_collect_from_lab_node_and_ct200(tmp_path: Path) -> None:
    from provisioner.lab.lab import Lab
    from provisioner.proxmox.lxc_conf import LxcConfig
    from tests.support.lab import start_services

    require(os.geteuid() == 0, "the lab sandboxes need root (mount namespaces, mknod)")
    require(shutil.which("unshare") is not None, "util-linux unshare is not installed")
    state = Lab(tmp_path / "lab", ["shm-small"]).create_state()
    opts: dict[str, str | int] = {"arch": "amd64", "hostname": "ml-burn", "ostype": "ubuntu", "memory": 65536,
                                  "cores": 16, "rootfs": "local-lvm:vm-200-disk-0,size=64G"}
    for i in range(8):
        opts[f"dev{i}"] = f"/dev/nvidia{i},mode=0666"
    opts |= {"dev8": "/dev/nvidiactl,mode=0666", "dev9": "/dev/nvidia-uvm,mode=0666",
             "dev10": "/dev/nvidia-uvm-tools,mode=0666"}
    state.write_conf(200, LxcConfig.from_options(opts))
    state.set_status(200, "running")
    services = start_services(state)
    try:
        ssh = services.connection()["ssh"]
        node = SshTransport(SshTarget(host=ssh["host"], port=ssh["port"], user=ssh["user"], key_file=ssh["key_file"],
                                      known_hosts=ssh["known_hosts"]))
        try:
            ev = await collect(node, 200, "/opt/torch-venv")
        finally:
            await node.close()
    finally:
        services.stop()
    assert ev.unreachable is None and ev.container_unreachable is None, (ev.unreachable, ev.container_unreachable)
    by = {r.name: r for r in ev.records}
    assert by["node.module_version"].output == "595.71.05\n"
    assert ev.facts["gpu_compute_caps"] == "12.0\n" * 8
    assert str(ev.facts["host_gpu_count"]).count("GPU ") == 8
    assert "dev0: /dev/nvidia0" in str(ev.facts["lxc_config"])
    assert by["ct.uname"].where.startswith("ct200@ssh:") and by["ct.dev_nodes"].status == "ok"
    ct_nodes = str(ev.facts["container_dev_nodes"])
    assert all(f"/dev/nvidia{i}" in ct_nodes for i in range(8)) and "/dev/nvidia-uvm" in ct_nodes
    # No userspace driver and no venv in a fresh CT: recorded, not fatal.
    assert by["ct.torch"].status == "absent"
    assert by["node.pveversion"].status == "ok" and "proxmox-ve" in by["node.pveversion"].output
    # Scenario shm-small: 64M /dev/shm for 8 GPUs is diagnosed.
    findings = evidence_findings(ev)
    assert any(f.category == "nccl_failure" and f.rule == "facts.shm_too_small" for f in findings), findings


def test_probes_that_are_facts_run_the_facts_command() -> None:
    """One fact system: a probe the steps also read runs the same argv and is read by the same parser."""
    from provisioner.facts import catalog

    same = {"node.proc_devices": catalog.PROC_DEVICES, "node.dev_nodes": catalog.DEV_NODES,
            "node.cgroup_fs": catalog.CGROUP, "node.os_release": catalog.OS_RELEASE, "node.gpu_query": catalog.GPUS,
            "ct.dev_nodes": catalog.DEV_NODES, "ct.shm": catalog.SHM, "ct.os_release": catalog.OS_RELEASE}
    for name, fact in same.items():
        assert BY_NAME[name].fact is fact and list(BY_NAME[name].argv) == list(fact.argv), name


async def test_a_fact_probe_keeps_its_parsed_value_beside_the_raw_output(tmp_path: Path) -> None:
    from provisioner.facts import system
    from provisioner.support import read_bundle, write_bundle

    ev = await collect(LocalTransport(), None, VENV)
    osr = ev.record("node.os_release")
    assert osr is not None and osr.status == "ok"
    assert osr.parsed == system.parse_os_release(Path("/etc/os-release").read_text()).model_dump(mode="json")
    proc = ev.record("node.proc_devices")
    assert proc is not None and proc.parsed is not None and proc.parsed["char"]["mem"] == 1  # Linux: mem is 1
    out = tmp_path / "b.tar.gz"
    write_bundle(ev, out, runs_dir=tmp_path / "no-runs")
    import tarfile

    with tarfile.open(out) as tar:
        names = tar.getnames()
        member = next(n for n in names if n.endswith("parsed/node.os_release.json"))
        extracted = tar.extractfile(member)
        assert extracted is not None
        assert json.loads(extracted.read())["id"] == osr.parsed["id"]
        assert any(n.endswith("node/os-release.txt") for n in names)
    assert read_bundle(out).record("node.os_release") is not None
