"""The evidence probes: what `provisioner bundle` and `diagnose --host` run, where, and what they feed.

Each probe is data: a name, a target (`node` = the Proxmox host, `container` = `pct exec <vmid>`
on it; without a container the container probes run on the node, which is then where the
workload runs), the fact it reads (one of `facts.catalog`, the steps' facts, or `facts.evidence`),
the live-fact keys of `provisioner.diagnose.live_rules` it feeds (see docs/diagnose-rules.md,
"Live facts"), and the bundle member its raw output is written to. Probes run no command of
their own: the command is the fact's, run through a `FactCache` by `support.collect`.

A missing thing is "absent", distinct from a failure: exit status 3 by the evidence facts'
convention (`facts.evidence.ABSENT`), 127 "command not found". A missing installer log is absent,
a `pct exec` that cannot enter the container is a failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from provisioner.facts import catalog, evidence
from provisioner.facts.base import Fact
from provisioner.facts.evidence import (
    ABSENT,
    BUG_REPORT_BOUND_S,
    DEFAULT_VENV,
    INSTALLER_LOG,
    PACKAGES_SCRIPT,
    TIMED_OUT,
    TORCH_SCRIPT,
)

Target = Literal["node", "container"]

NOT_FOUND = 127  # shell: command not found
__all__ = ["ABSENT", "BUG_REPORT", "BUG_REPORT_BOUND_S", "BUNDLE_PROBES", "BY_NAME", "DEFAULT_VENV", "INSTALLER_LOG", "NOT_FOUND", "PACKAGES_SCRIPT", "PROBES",
           "TORCH_SCRIPT", "Probe", "argv_for", "bundle_probes", "fact_for", "selected"]


@dataclass(frozen=True)
class Probe:
    name: str
    target: Target
    fact: Fact[Any]  # the fact this probe reads: its command runs, its parser reads the output
    file: str  # bundle member, relative to the bundle root
    feeds: tuple[str, ...] = ()  # live-fact keys (docs/diagnose-rules.md)
    description: str = ""
    absent_statuses: tuple[int, ...] = (ABSENT, NOT_FOUND)
    timeout_statuses: tuple[int, ...] = ()  # exit statuses that mean "the command's own bound stopped it"
    #: its output is text read for the rules (a kernel log, a config, a report): words like "error" in it
    #: are content, and only the reading tool's own complaint ("dmesg: ... Operation not permitted") is
    #: the probe's (`support.doctor.check_of`)
    reads_content: bool = False

    @property
    def argv(self) -> tuple[str, ...]:
        """The fact's command (with `{vmid}`/`{venv}` placeholders where it takes them)."""
        return tuple(self.fact.argv)

    @property
    def timeout(self) -> float:
        return self.fact.timeout

    @property
    def needs_container(self) -> bool:
        """Only meaningful with a container (its config, its status)."""
        return evidence.needs_container(self.fact)

    @property
    def needs_venv(self) -> bool:
        return evidence.needs_venv(self.fact)

    @property
    def parsed(self) -> bool:
        """Whether the bundle keeps a parsed value beside the raw output (not for text read as text)."""
        return self.fact.parse is not evidence.raw_text


def _p(name: str, target: Target, fact: Fact[Any], file: str, feeds: tuple[str, ...] = (),
       description: str = "", *, reads_content: bool = False) -> Probe:
    return Probe(name, target, fact, file, feeds, description, reads_content=reads_content)


E = evidence
PROBES: tuple[Probe, ...] = (
    # --- node (the Proxmox host) ---------------------------------------------------------------
    _p("node.uname", "node", E.UNAME, "node/uname.txt",
       description="kernel and architecture (also the reachability check)", reads_content=True),
    _p("node.os_release", "node", catalog.OS_RELEASE, "node/os-release.txt", reads_content=True),
    _p("node.pveversion", "node", E.PVEVERSION_VERBOSE, "node/pveversion.txt",
       description="Proxmox VE and package versions", reads_content=True),
    _p("node.module_version", "node", E.MODULE_VERSION_FILE, "node/sys-module-nvidia-version.txt",
       ("host_driver_version",), "version of the loaded nvidia kernel module"),
    _p("node.proc_driver_version", "node", E.PROC_DRIVER_VERSION_FILE, "node/proc-driver-nvidia-version.txt",
       ("host_driver_version",), "NVRM banner of the loaded module"),
    _p("node.gpu_list", "node", E.SMI_LIST, "node/nvidia-smi-L.txt", ("host_gpu_count", "nvidia_smi")),
    _p("node.gpu_query", "node", catalog.GPUS, "node/nvidia-smi-query-gpu.csv",
       ("gpu_compute_caps", "host_driver_version"), "index, name, uuid, bus id, compute capability, driver, memory"),
    _p("node.nvidia_smi_q", "node", E.SMI_QUERY, "node/nvidia-smi-q.txt",
       description="full per-GPU report (clocks, ECC, throttle reasons, PCIe)", reads_content=True),
    _p("node.proc_devices", "node", catalog.PROC_DEVICES, "node/proc-devices.txt", ("host_proc_devices",),
       "character device majors (nvidia-uvm's is dynamic)"),
    _p("node.dev_nodes", "node", catalog.DEV_NODES, "node/dev-nvidia.txt", ("host_dev_nodes",)),
    _p("node.cgroup_fs", "node", catalog.CGROUP, "node/cgroup-fs.txt", ("cgroup_fs",), "cgroup2fs (v2) or tmpfs (v1)"),
    _p("node.nvidia_modules", "node", E.NVIDIA_MODULES, "node/nvidia-modules.txt"),
    _p("node.dmesg", "node", E.DMESG_NVIDIA, "node/dmesg-nvidia.txt", ("dmesg",),
       "kernel log lines of the NVIDIA driver (NVRM, Xid)", reads_content=True),
    _p("node.lxc_config", "node", E.LXC_CONFIG_FILE, "node/lxc-config.conf", ("lxc_config",),
       "/etc/pve/lxc/<vmid>.conf", reads_content=True),
    _p("node.pct_status", "node", E.PCT_STATUS, "node/pct-status.txt", reads_content=True),
    # --- container (pct exec), or the node itself when there is no container -------------------
    _p("ct.uname", "container", E.UNAME, "container/uname.txt",
       description="also the check that commands run in the container at all"),
    _p("ct.os_release", "container", catalog.OS_RELEASE, "container/os-release.txt", reads_content=True),
    _p("ct.libc", "container", E.LIBC_BANNER, "container/ldd-version.txt"),
    _p("ct.userspace", "container", catalog.USERSPACE_LIBS, "container/nvidia-userspace-libs.txt",
       ("container_driver_version",), "installed userspace driver libraries (their version must equal the host module)"),
    _p("ct.gpu_list", "container", E.SMI_LIST, "container/nvidia-smi-L.txt", ("container_gpu_count",)),
    _p("ct.nvidia_smi", "container", E.SMI, "container/nvidia-smi.txt", ("nvidia_smi",)),
    _p("ct.dev_nodes", "container", catalog.DEV_NODES, "container/dev-nvidia.txt", ("container_dev_nodes",)),
    _p("ct.shm", "container", catalog.SHM, "container/df-shm.txt", ("shm",)),
    _p("ct.ldconfig", "container", E.LDCONFIG_NVIDIA, "container/ldconfig-nvidia.txt"),
    _p("ct.cuda_loader", "container", E.CUDA_LOADER, "container/cuda-loader.txt", ("cuda_loader",),
       "libcuda.so.1 as the dynamic loader finds it (ldconfig -p, the file) and what it needs (ldd)"),
    _p("ct.gpu_env", "container", E.GPU_ENV, "container/gpu-env.txt", ("nccl_env",),
       "NCCL/CUDA environment of a login shell (other variables are never read)", reads_content=True),
    _p("ct.installer_log", "container", E.INSTALLER_LOG_TAIL, "container/nvidia-installer.log", ("install_log",),
       reads_content=True),
    _p("ct.torch", "container", E.TORCH_SUMMARY, "container/torch.txt",
       ("torch_version", "torch_cuda_version", "torch_arch_list", "torch_check", "gpu_compute_caps"),
       "torch build, CUDA version, arch list and device capabilities in the venv"),
    _p("ct.packages", "container", E.VENV_PACKAGES, "container/packages.txt",
       description="installed distributions in the venv (name==version)", reads_content=True),
)

#: NVIDIA's own report, for the bundle only (`diagnose --host` does not run it: it can take minutes)
BUG_REPORT = Probe("node.nvidia_bug_report", "node", E.NVIDIA_BUG_REPORT, "node/nvidia-bug-report.log",
                   description="nvidia-bug-report.sh --safe-mode (NVIDIA support's file), bounded in time",
                   timeout_statuses=(TIMED_OUT,), reads_content=True)
BUNDLE_PROBES: tuple[Probe, ...] = (*PROBES, BUG_REPORT)

BY_NAME: dict[str, Probe] = {p.name: p for p in BUNDLE_PROBES}


def bundle_probes(bug_report_bound_s: int = BUG_REPORT_BOUND_S) -> tuple[Probe, ...]:
    """What `provisioner bundle` runs: every probe plus nvidia-bug-report.sh bounded to `bug_report_bound_s`."""
    if bug_report_bound_s == BUG_REPORT_BOUND_S:
        return BUNDLE_PROBES
    return (*PROBES, replace(BUG_REPORT, fact=E.bug_report_fact(bug_report_bound_s)))


def fact_for(probe: Probe, vmid: int | None, venv: str | None) -> Fact[Any]:
    """The probe's fact bound to the container id and venv (`facts.evidence.bind`)."""
    return evidence.bind(probe.fact, vmid, venv)


def argv_for(probe: Probe, vmid: int | None, venv: str | None) -> list[str]:
    """The probe's argv with `{vmid}` and `{venv}` filled in (each stays one argv element)."""
    return list(fact_for(probe, vmid, venv).argv)


def selected(vmid: int | None, probes: Sequence[Probe] = PROBES) -> list[Probe]:
    """The probes that apply: container-only ones are dropped when there is no container."""
    return [p for p in probes if vmid is not None or not p.needs_container]
