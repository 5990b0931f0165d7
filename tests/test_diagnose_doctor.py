"""`diagnose --host` as a doctor: checks per probe and findings merged by root cause (issue 27 item 2);
never a ✓ for a broken host, one verdict, one exit-code rule for every source (issue 35 item 4)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from provisioner.diagnose import Finding
from provisioner.support.diagnose_sources import live_report
from provisioner.support.doctor import Check, check_of, is_fault, merge_by_cause, verdict
from provisioner.support.evidence import Evidence, ProbeRecord
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
    from provisioner.lab.commands.installer import install_userspace
    from provisioner.lab.day2 import upgrade_driver
    from provisioner.lab.lab import Lab
    from provisioner.proxmox.lxc_conf import LxcConfig
    from tests.support.lab import start_services

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
    install_userspace(state.ct_root(200), host, state.root)  # as the installer leaves it: .so.1 links too
    services = start_services(state)
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



def _ok(name: str, output: str) -> ProbeRecord:
    return ProbeRecord(name=name, target="node", where="local", command="x", status="ok", exit_status=0, output=output)


def test_a_probe_whose_output_carries_an_error_is_not_ticked() -> None:
    """Exit status 0 is not enough. Lines as the tools print them: grep on a kernel without /proc/modules
    (this project's lab VM), PyTorch's warning from torch/cuda/__init__.py when cuInit fails, nvidia-smi's
    infoROM warning (printed above the table, exit 0); a kernel log probe keeps its content's words."""
    modules = check_of(_ok("node.nvidia_modules", "grep: /proc/modules: No such file or directory\n"
                                                  "no nvidia module loaded\n"))
    assert modules.ok is None and modules.detail.startswith("not checked: grep: /proc/modules")
    warn = ("/opt/torch-venv/lib/python3.12/site-packages/torch/cuda/__init__.py:129: UserWarning: CUDA "
            "initialization: CUDA unknown error - this may be due to an incorrectly set up environment, e.g. "
            "changing env variable CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be "
            "zero. (Triggered internally at ../c10/cuda/CUDAFunctions.cpp:108.)\n")
    report = json.dumps({"torch": "2.8.0+cu128", "cuda": "12.8", "available": False, "count": 0})
    torch = check_of(_ok("ct.torch", warn + report + "\n"))
    assert torch.ok is False and "CUDA initialization" in torch.detail
    quiet = check_of(_ok("ct.torch", report + "\n"))  # no warning printed, but a CUDA build sees no GPU
    assert quiet.ok is False and "is_available() is False" in quiet.detail
    smi = check_of(_ok("ct.nvidia_smi", "WARNING: infoROM is corrupted at gpu 0000:01:00.0\n+-----+\n"))
    assert smi.ok is False and "infoROM" in smi.detail
    dmesg = check_of(_ok("node.dmesg", "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.\n"
                                       "nvidia: module verification failed: signature and/or required key missing\n"))
    assert dmesg.ok is True, dmesg  # the rules read these lines; the probe itself worked
    good = check_of(_ok("ct.torch", json.dumps({"torch": "2.8.0+cu128", "cuda": "12.8", "available": True}) + "\n"))
    assert good.ok is True


def test_a_probe_that_may_not_look_is_not_checked_not_failed() -> None:
    """dmesg under kernel.dmesg_restrict (or the lab's user namespace): the host was not looked at."""
    denied = ProbeRecord(name="node.dmesg", target="node", where="local", command="dmesg", status="failed",
                         exit_status=1, output="dmesg: read kernel buffer failed: Operation not permitted\n",
                         error="exit status 1: dmesg: read kernel buffer failed: Operation not permitted")
    check = check_of(denied)
    assert check.ok is None and check.mark == "–" and "no permission" in check.detail


# The ct.cuda_loader probe's output, as it ran in a lab container (installer stand-in, then libcuda.so.1
# removed) and, for ldd's "not found", in ldd(1)'s own shape.
_LOADER_OK = """ldconfig: libcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1
ldconfig: libnvidia-ml.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1
resolved: libcuda.so.1 => /usr/lib/x86_64-linux-gnu/libcuda.so.1 (/usr/lib/x86_64-linux-gnu/libcuda.so.595.71.05)
needs: linux-vdso.so.1 (0x00007ffd00000000)
needs: libm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f0000000000)
needs: libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0000000000)
"""
_LOADER_GONE = """ldconfig: libnvidia-ml.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1
libcuda.so.1: not found by the loader (no ldconfig entry, not in LD_LIBRARY_PATH or the default library directories)
"""
_LOADER_NEEDS = _LOADER_OK + "needs: librt.so.1 => not found\n"


def test_libcuda_as_the_loader_sees_it() -> None:
    from provisioner.diagnose import diagnose_facts

    assert diagnose_facts({"cuda_loader": _LOADER_OK, "host_driver_version": "595.71.05"}) == []
    gone = diagnose_facts({"cuda_loader": _LOADER_GONE, "host_driver_version": "595.71.05"})
    assert [f.rule for f in gone] == ["facts.libcuda_not_loadable"]
    assert gone[0].category == "missing_shared_lib" and any("libcuda.so.1" in e for e in gone[0].evidence)
    assert "595.71.05" in gone[0].fix
    needs = diagnose_facts({"cuda_loader": _LOADER_NEEDS})
    assert [f.rule for f in needs] == ["facts.libcuda_needs_unresolved"] and "librt.so.1" in needs[0].root_cause


def test_one_exit_rule_and_one_verdict() -> None:
    ok = [Check("node.uname", True, "Linux"), Check("node.dmesg", None, "not checked (no permission): …")]
    assert not is_fault([], ok) and verdict([], ok).startswith("healthy: 1 checks passed")
    bad = [*ok, Check("ct.cuda_loader", False, "failed (exit status 1): libcuda.so.1: not found by the loader")]
    assert is_fault([], bad) and "ct.cuda_loader" in verdict([], bad)
    found = [_f("driver_lib_mismatch", 0.95, "facts.x", "x")]
    assert is_fault(found, []) and verdict(found, ok).startswith("not healthy: 1 finding")


def _diagnose_cli(args: list[str], env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    from click.testing import CliRunner

    from provisioner.cli import main

    res = CliRunner().invoke(main, ["diagnose", *args], env=env)
    last = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else "{}"
    doc = json.loads(last) if "--json" in args else {}
    return res.exit_code, doc, res.stdout


def test_lab_doctor_verdicts_and_one_exit_code_per_root_cause(tmp_path: Path) -> None:
    """The acceptance of issue 35 item 4 on a lab node with CT 200 provisioned as the installer leaves it:
    `diagnose --lab --container 200` says healthy and exits 0; with libcuda.so.1 removed from the
    container it exits 1 with a finding naming the file; after a driver upgrade on the host (the container
    keeps its userspace) the mismatch exits 1 from --lab, from a bundle of that host and from a log."""
    from provisioner.lab.commands.installer import LIBDIR, install_userspace
    from provisioner.lab.day2 import upgrade_driver
    from provisioner.lab.lab import Lab, connection_path
    from provisioner.lab.sandbox import held_ct_argv
    from provisioner.proxmox.lxc_conf import LxcConfig
    from provisioner.support.bundle import write_bundle
    from provisioner.support.collect import collect
    from tests.support.lab import start_services

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
    install_userspace(state.ct_root(200), host, state.root)
    services = start_services(state)
    env = {"PROVISIONER_LAB_ROOT": str(state.root), "NO_COLOR": "1", "COLUMNS": "200"}
    lab = ["--lab", "--container", "200"]

    def in_ct(*argv: str) -> None:
        subprocess.run(held_ct_argv(state, 200, list(argv)), check=True, capture_output=True, timeout=60)

    try:
        conn = services.connection()
        connection_path(state.root).write_text(json.dumps(conn))
        code, doc, _ = _diagnose_cli([*lab, "--json"], env)
        assert code == 0 and doc["verdict"] == "healthy" and doc["findings"] == [], doc
        checks = {c["name"]: c for c in doc["checks"]}
        assert checks["ct.cuda_loader"]["ok"] is True, checks["ct.cuda_loader"]
        assert not [c for c in checks.values() if c["ok"] is False], checks
        code, _, text = _diagnose_cli(lab, env)
        assert code == 0 and text.strip().splitlines()[-1].startswith("Healthy:"), text[-2000:]
        assert "No known failure signature" not in text

        link = state.ct_root(200) / LIBDIR / "libcuda.so.1"
        target = os.readlink(link)
        in_ct("rm", f"/{LIBDIR}/libcuda.so.1")  # in the container, as a user would (its overlay is mounted)
        code, doc, _ = _diagnose_cli([*lab, "--json"], env)
        assert code == 1 and doc["verdict"] == "fault", doc
        top = doc["findings"][0]
        assert top["rule"] == "facts.libcuda_not_loadable" and "libcuda.so.1" in " ".join(top["evidence"])
        assert {c["name"]: c["ok"] for c in doc["checks"]}["ct.cuda_loader"] is False
        in_ct("ln", "-s", target, f"/{LIBDIR}/libcuda.so.1")

        upgrade_driver(state, "595.82.01")
        live_code, live_doc, _ = _diagnose_cli([*lab, "--json"], env)
        spec_ssh = conn["ssh"]
        node = SshTransport(SshTarget(host=spec_ssh["host"], port=spec_ssh["port"], user=spec_ssh["user"],
                                      key_file=spec_ssh["key_file"], known_hosts=spec_ssh["known_hosts"]))
        import asyncio

        async def gather() -> Evidence:
            try:
                return await collect(node, 200)
            finally:
                await node.close()

        evidence = asyncio.run(gather())
        bundle = tmp_path / "after-upgrade.tar.gz"
        write_bundle(evidence, bundle, include_runs=False)
    finally:
        services.stop()
    bundle_code, bundle_doc, _ = _diagnose_cli(["--bundle", str(bundle), "--json"])
    log = tmp_path / "torch.log"  # what the container's programs print for that mismatch (NVML's own string)
    log.write_text("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 595.71\n")
    log_code, log_doc, _ = _diagnose_cli(["--log", str(log), "--json"])
    for doc in (live_doc, bundle_doc, log_doc):
        assert doc["findings"][0]["category"] == "driver_lib_mismatch", doc
    assert live_code == bundle_code == log_code == 1
