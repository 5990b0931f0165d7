"""Pure: probe records -> the live-facts dict `provisioner.diagnose` reads (docs/diagnose-rules.md).

Only probes that ran successfully feed a fact (a failed `nvidia-smi -L` says nothing about the
GPU count); failure texts of `nvidia-smi` and the torch check feed the text keys the log rules
read (`nvidia_smi`, `torch_check`). Values stay raw command output wherever the diagnose parsers
accept it, so a bundle re-derives exactly the facts the live collection saw.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from provisioner.facts.smi_csv import parse_gpu_query_csv
from provisioner.support.evidence import ProbeRecord

_NVML_LIB_RE = re.compile(r"^NVML library version: *\S+", re.MULTILINE)


def torch_report(output: str) -> tuple[dict[str, Any] | None, list[str]]:
    """Split the torch probe's output into its JSON report (last JSON line) and the other lines."""
    report: dict[str, Any] | None = None
    other: list[str] = []
    for line in output.splitlines():
        s = line.strip()
        if report is None and s.startswith("{") and s.endswith("}"):
            try:
                value = json.loads(s)
            except json.JSONDecodeError:
                value = None
            if isinstance(value, dict):
                report = value
                continue
        if s:
            other.append(line)
    return report, other


def _compute_caps(output: str) -> list[str]:
    try:
        gpus = parse_gpu_query_csv(output)
    except ValueError:
        return []
    return [str(g.compute_cap) for g in gpus if g.compute_cap is not None]


def _query_driver(output: str) -> str | None:
    try:
        gpus = parse_gpu_query_csv(output)
    except ValueError:
        return None
    return gpus[0].driver_version if gpus else None


def facts_from_records(records: Iterable[ProbeRecord], *, container: bool) -> dict[str, object]:
    """The facts dict for `diagnose(facts=...)`. `container`: whether the ct.* probes ran in a container."""
    by: Mapping[str, ProbeRecord] = {r.name: r for r in records}

    def ok(name: str) -> str | None:
        r = by.get(name)
        return r.output if r is not None and r.status == "ok" else None

    facts: dict[str, object] = {}
    # Host kernel module: /sys/module first, then the NVRM banner, then what nvidia-smi reports.
    for name in ("node.module_version", "node.proc_driver_version"):
        text = ok(name)
        if text and text.strip():
            facts["host_driver_version"] = text
            break
    else:
        query = ok("node.gpu_query")
        driver = _query_driver(query) if query else None
        if driver:
            facts["host_driver_version"] = driver
    if (text := ok("node.gpu_list")) is not None:
        facts["host_gpu_count"] = text
    if (text := ok("node.gpu_query")) is not None and (caps := _compute_caps(text)):
        facts["gpu_compute_caps"] = "\n".join(caps) + "\n"
    if (text := ok("node.proc_devices")) is not None:
        facts["host_proc_devices"] = text
    if (text := ok("node.dev_nodes")) is not None:
        facts["host_dev_nodes"] = text
    if (text := ok("node.cgroup_fs")) is not None and text.strip():
        facts["cgroup_fs"] = text.strip()
    if (text := ok("node.dmesg")) is not None and text.strip():
        facts["dmesg"] = text
    if (text := ok("node.lxc_config")) is not None:
        facts["lxc_config"] = text

    if (text := ok("ct.userspace")) is not None and text.strip():
        facts["container_driver_version"] = text
    elif (smi := by.get("ct.nvidia_smi")) is not None and (m := _NVML_LIB_RE.search(smi.output)):
        facts["container_driver_version"] = m.group(0)  # libraries outside the usual dirs
    if (text := ok("ct.gpu_list")) is not None:
        facts["container_gpu_count"] = text
    if container and (text := ok("ct.dev_nodes")) is not None:
        # Without a container these are the node's own nodes; the node creates uvm nodes on demand.
        facts["container_dev_nodes"] = text
    if (text := ok("ct.shm")) is not None:
        facts["shm"] = text
    if (text := ok("ct.gpu_env")) is not None and text.strip():
        facts["nccl_env"] = text
    if (text := ok("ct.installer_log")) is not None and text.strip():
        facts["install_log"] = text
    loader = by.get("ct.cuda_loader")
    if loader is not None and loader.status in ("ok", "failed") and loader.output.strip():
        facts["cuda_loader"] = loader.output  # a failed look is the finding: libcuda.so.1 does not resolve

    smi_errors: list[str] = []
    for name in ("node.gpu_list", "ct.nvidia_smi"):
        r = by.get(name)
        if r is not None and r.status == "failed" and r.output.strip() and r.output not in smi_errors:
            smi_errors.append(r.output)
    if smi_errors:
        facts["nvidia_smi"] = "".join(t if t.endswith("\n") else t + "\n" for t in smi_errors)

    torch = by.get("ct.torch")
    if torch is not None and torch.ran:
        report, other = torch_report(torch.output)
        check = list(other)
        if report is not None:
            for key in ("error", "cuda_error"):
                if report.get(key):
                    check.append(str(report[key]))
            if report.get("torch"):
                facts["torch_version"] = str(report["torch"])
                facts["torch_cuda_version"] = str(report["cuda"]) if report.get("cuda") else "None"
                arch = report.get("arch_list") or report.get("arch_flags") or []
                if arch:
                    facts["torch_arch_list"] = [str(a) for a in arch]
                caps = report.get("capabilities") or []
                if caps and "gpu_compute_caps" not in facts:
                    facts["gpu_compute_caps"] = "\n".join(map(str, caps)) + "\n"
        if check and torch.status != "absent":
            facts["torch_check"] = "\n".join(check) + "\n"
    return facts
