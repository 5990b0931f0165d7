"""Evidence first (issue #27 item 1): the typed evidence a log yields, and the decisions made from it.

The logs are the real public ones of tests/fixtures/diagnose/real-logs.jsonl (each with its URL); the
decision tests build `LogEvidence` directly, so they test the decision on the facts, not a phrasing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
    assert hit.category == "proxmox_lxc" and hit.demotes == ("no_driver_loaded",)  # an LXC setup fault


def test_after_a_kernel_upgrade_on_proxmox_the_container_userspace_is_named() -> None:
    """nvidia-smi gone in a Proxmox LXC after the host's kernel upgrade: the decision reads the facts."""
    ev = LogEvidence(places=["lxc"], proxmox=True, userspace_missing=True, kernel_upgraded=True)
    (hit,) = decide(ev)
    assert hit.category == "proxmox_lxc" and hit.confidence >= 0.9  # an LXC setup fault
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
    assert res.exit_code == 1, res.output  # a finding: exit 1 (one rule for every source, issue 35)
    doc = json.loads(res.output.strip().splitlines()[-1])
    assert doc["evidence"]["driver_loaded"] is True and doc["evidence"]["nodes_missing"] == ["/dev/nvidiactl"]
    plain = CliRunner().invoke(command, ["--log", str(log), "--json"])
    assert "evidence" not in json.loads(plain.output.strip().splitlines()[-1])


# nvidia-smi absent, as real tools word it (each line from the public thread named beside it)
_SMI_ABSENT = (
    ('nvidia-docker: Error response from daemon: oci runtime error: exec: "nvidia-smi": executable file not '
     "found in $PATH.", "https://github.com/NVIDIA/nvidia-docker/issues/250"),
    ("docker: Error response from daemon: Container command 'nvidia-smi' not found or does not exist..",
     "https://github.com/NVIDIA/nvidia-docker/issues/314"),
    ('"nvidia-smi": executable file not found in $PATH: unknown', "https://github.com/NVIDIA/k8s-device-plugin/issues/346"),
    ("nvidia-smi: not found", "https://github.com/kata-containers/kata-containers/issues/8282"),
)


def test_nvidia_smi_absent_is_one_fact_in_every_wording() -> None:
    for line, source in _SMI_ABSENT:
        assert extract_evidence(line).userspace_missing, (line, source)
    for line in ("nvidia-smi found at /usr/bin/nvidia-smi", "NVIDIA-SMI 595.71.05  Driver Version: 595.71.05"):
        assert not extract_evidence(line).userspace_missing, line


def _diagnose_file(tmp_path: Path, text: str) -> Any:
    """The scorer's call shape: `provisioner diagnose --log FILE --json` (here with --evidence), last line."""
    from click.testing import CliRunner

    from provisioner.cli.diagnose import command

    log = tmp_path / "pasted.log"
    log.write_text(text + "\n", encoding="utf-8")
    res = CliRunner().invoke(command, ["--log", str(log), "--json", "--evidence"])
    assert res.exit_code == 1, res.output  # a finding: exit 1 (one rule for every source, issue 35)
    doc = json.loads(res.output.strip().splitlines()[-1])
    assert isinstance(doc, dict) and doc["findings"]
    return doc


def test_nvidia_smi_gone_from_a_container_after_the_host_changed_end_to_end(tmp_path: Path) -> None:
    """A real report (NVIDIA/nvidia-docker#250): after the host's OS restart new containers have no nvidia-smi
    ('executable file not found in $PATH'), older ones still work. From the raw text through the CLI: the
    container's userspace, not "no driver" (nothing says the host's module is missing)."""
    doc = _diagnose_file(tmp_path, _log("nvidia-docker-smi-not-in-path-after-restart"))
    top = doc["findings"][0]
    assert top["category"] == "container_device_missing" and top["rule"] == "evidence.container_userspace_missing"
    assert any('"nvidia-smi": executable file not found' in e for e in top["evidence"])
    ev = doc["evidence"]
    assert ev["userspace_missing"] is True and "docker" in ev["places"]
    assert not [f for f in doc["findings"] if f["category"] == "no_driver_loaded"]


def test_proxmox_lxc_userspace_missing_end_to_end(tmp_path: Path) -> None:
    """A real Proxmox VE 9.1 report (saihgupr/frigate-proxmox-script#30): docker in an LXC, libnvidia-ml.so.1
    absent. The Proxmox/LXC context steers to the container's userspace, ahead of "no driver", as an LXC setup
    fault (proxmox_lxc: the regression corpus labels the same report so)."""
    doc = _diagnose_file(tmp_path, _log("pve912-frigate-lxc-docker-libnvidia-ml-missing"))
    top = doc["findings"][0]
    assert top["category"] == "proxmox_lxc" and "LXC" in top["root_cause"]
    assert any("libnvidia-ml.so.1" in e for e in top["evidence"])
    assert doc["evidence"]["proxmox"] is True and doc["evidence"]["userspace_missing"] is True
