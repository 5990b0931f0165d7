"""Evidence first (issue #27 item 1): the typed evidence a log yields, and the decisions made from it.

The logs are the real public ones of tests/fixtures/diagnose/real-logs.jsonl (each with its URL); the
decision tests build `LogEvidence` directly, so they test the decision on the facts, not a phrasing.
"""

from __future__ import annotations

import json
from pathlib import Path

from provisioner.diagnose import diagnose
from provisioner.diagnose.evidence import LogEvidence, decide, extract_evidence

REAL = {r["id"]: r for r in map(json.loads, (Path(__file__).parent / "fixtures/diagnose/real-logs.jsonl")
                                 .read_text(encoding="utf-8").splitlines()) if r}


def _log(row_id: str) -> str:
    return str(REAL[row_id]["log"])


def test_strace_in_a_container_module_loaded_nodes_missing_is_not_no_driver() -> None:
    """canonical/lxd#5433 (strace, no word naming the container): /proc/driver/nvidia/params opens (fd 3), the
    /dev/nvidiactl stat and open are ENOENT, mknod is EACCES -> nodes not passed, ranked above 'no driver'."""
    ev = extract_evidence(_log("lxd-strace-proc-readable-nvidiactl-enoent"))
    assert ev.driver_loaded is True and ev.nodes_missing == ["/dev/nvidiactl"] and ev.smi_cannot_communicate
    findings = diagnose(_log("lxd-strace-proc-readable-nvidiactl-enoent"))
    assert findings[0].category == "container_device_missing" and findings[0].rule == "evidence.module_loaded_nodes_missing"
    assert "/dev/nvidiactl" in findings[0].root_cause
    assert [r.category for r in findings[0].also_possible] == ["no_driver_loaded"]


def test_a_failed_resolution_beats_plus_cpu_in_the_requirement() -> None:
    for row in ("uv-torch-cpu-local-version-unsatisfiable", "uv-vllm-cpu-split-unsatisfiable"):
        ev = extract_evidence(_log(row))
        assert ev.resolution_failed and not ev.cpu_build_installed
        top = diagnose(_log(row))[0]
        assert top.category == "resolver_failure" and "evidence.resolution_failed_first" in top.rules


def test_a_cpu_build_that_ran_is_still_a_cpu_build() -> None:
    ev = LogEvidence(resolution_failed=True, cpu_build_installed=True)
    assert not [h for h in decide(ev) if h.category == "resolver_failure"]


def test_userspace_missing_in_a_container_steers_to_the_container() -> None:
    ev = extract_evidence(_log("lxd-smi-cannot-find-libnvidia-ml"))
    assert ev.places == ["lxc"] and ev.userspace_missing and ev.in_container
    (hit,) = decide(ev)
    assert hit.category == "container_device_missing" and hit.demotes == ("no_driver_loaded",)


def test_after_a_kernel_upgrade_on_proxmox_the_container_userspace_is_named() -> None:
    """nvidia-smi gone in a Proxmox LXC after the host's kernel upgrade: the decision reads the facts."""
    ev = LogEvidence(places=["lxc"], proxmox=True, userspace_missing=True, kernel_upgraded=True)
    (hit,) = decide(ev)
    assert hit.category == "container_device_missing" and hit.confidence >= 0.9
    assert "LXC container after the host's kernel upgrade" in hit.root_cause
    # the same facts on a host (no container seen) decide nothing: there "not found" is not the container's
    assert decide(LogEvidence(userspace_missing=True, kernel_upgraded=True)) == []
    # a host whose module is seen not loaded is not a container userspace problem
    assert decide(LogEvidence(places=["lxc"], userspace_missing=True, driver_loaded=False)) == []


def test_extractors_are_tolerant_of_the_wording() -> None:
    """One fact, the wordings of real tools: case, quotes, strace/ls/bash forms, relative or absolute paths."""
    text = "\n".join((
        'openat(AT_FDCWD, "/proc/driver/nvidia/version", O_RDONLY) = 3',
        "lstat /dev/nvidia-uvm: no such file or directory",  # NVIDIA/nvidia-docker#139
        "crw-rw-rw- 1 root root 195, 255 Jan  1 00:00 /dev/nvidiactl",
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build",
        "ERROR: An error occurred while performing the step: \"Building kernel modules\".",
        "NCCL WARN ... ncclUnhandledCudaError: Call to CUDA function failed.",
        "root@pve:~# pct exec 101 -- nvidia-smi",
    ))
    ev = extract_evidence(text, {"xid": "79", "torch_version": "2.9.1+cu128"})
    assert ev.driver_loaded and ev.driver_version == "580.95.05"
    assert ev.nodes_missing == ["/dev/nvidia-uvm"] and ev.nodes_seen == ["/dev/nvidiactl"]
    assert ev.installer_phase == "build" and ev.nccl_errors == ["ncclUnhandledCudaError"]
    assert ev.proxmox and "lxc" in ev.places and ev.xids == [79] and ev.torch_version == "2.9.1+cu128"
    assert LogEvidence.model_validate(ev.model_dump()) == ev  # typed and serialisable (diagnose --json)


def test_healthy_outputs_yield_no_decision() -> None:
    rows = [json.loads(x) for x in (Path(__file__).parent / "fixtures/diagnose/healthy.jsonl")
            .read_text(encoding="utf-8").splitlines() if x.strip()]
    assert rows
    for row in rows:
        assert decide(extract_evidence(row["log"])) == [], row["id"]


def test_cli_prints_the_evidence_on_request(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from provisioner.cli.diagnose import command

    log = tmp_path / "strace.log"
    log.write_text(_log("lxd-strace-proc-readable-nvidiactl-enoent"))
    res = CliRunner().invoke(command, ["--log", str(log), "--json", "--evidence"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output.strip().splitlines()[-1])
    assert doc["evidence"]["driver_loaded"] is True and doc["evidence"]["nodes_missing"] == ["/dev/nvidiactl"]
    plain = CliRunner().invoke(command, ["--log", str(log), "--json"])
    assert "evidence" not in json.loads(plain.output.strip().splitlines()[-1])
