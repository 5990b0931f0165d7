"""The probes the steps use: each is a fixed command plus a pure parser from the `facts` module named for
what it reads (`smi_csv`, `driver_module`, `device_nodes`, `system`, `proxmox`, ...)."""

from __future__ import annotations

from provisioner.facts import (
    device_nodes,
    driver_module,
    installer_log,
    pci,
    proxmox,
    smi_csv,
    smi_failure,
    smi_q,
    system,
    userspace,
    vgpu,
)
from provisioner.facts.base import Fact
from provisioner.facts.models import (
    CgroupInfo,
    DevNodes,
    DfEntry,
    DriverVersionInfo,
    Gpu,
    GpuProcInfo,
    InstallerRecord,
    Libc,
    NvSwitchFacts,
    OsRelease,
    PciDevice,
    ProcDevices,
    PveVersion,
    SmiStatus,
    UnitState,
    UserspaceLibs,
)


def _module_version_or_none(text: str) -> str | None:
    return driver_module.parse_module_version(text) if text.strip() else None


def _proc_version_or_none(text: str) -> DriverVersionInfo | None:
    return driver_module.parse_proc_driver_version(text) if text.strip() else None


def _gpus(text: str) -> list[Gpu]:
    return smi_csv.parse_gpu_query_csv(text)


# Node (Proxmox host) facts
GPUS: Fact[list[Gpu]] = Fact("gpus", list(smi_csv.QUERY_GPU_COMMAND), _gpus)
MODULE_VERSION: Fact[str | None] = Fact(
    "module_version", ["sh", "-c", "cat /sys/module/nvidia/version 2>/dev/null || true"], _module_version_or_none)
PROC_DRIVER_VERSION: Fact[DriverVersionInfo | None] = Fact(
    "proc_driver_version", ["sh", "-c", "cat /proc/driver/nvidia/version 2>/dev/null || true"], _proc_version_or_none)
PROC_DEVICES: Fact[ProcDevices] = Fact("proc_devices", ["cat", "/proc/devices"], device_nodes.parse_proc_devices)
DEV_NODES: Fact[DevNodes] = Fact(
    "dev_nodes", ["sh", "-c", "ls -l /dev/nvidia* 2>&1; ls -l /dev/nvidia-caps 2>/dev/null; true"],
    device_nodes.parse_ls_dev)
PVEVERSION: Fact[PveVersion] = Fact("pveversion", ["pveversion"], proxmox.parse_pveversion)
CGROUP: Fact[CgroupInfo] = Fact("cgroup", ["stat", "-fc", "%T", "/sys/fs/cgroup"], system.parse_cgroup_fs)
OS_RELEASE: Fact[OsRelease] = Fact("os_release", ["cat", "/etc/os-release"], system.parse_os_release)
LIBC: Fact[Libc] = Fact("libc", ["ldd", "--version"], system.parse_ldd_version)
SHM: Fact[DfEntry] = Fact("shm", ["df", "-B1", "/dev/shm"], system.parse_df)
ARCH: Fact[str] = Fact("arch", ["uname", "-m"], lambda t: t.strip())
GPU_INFORMATION: Fact[list[GpuProcInfo]] = Fact(
    "gpu_information", list(driver_module.GPU_INFORMATION_COMMAND), driver_module.parse_gpu_information)
NVSWITCH: Fact[NvSwitchFacts] = Fact("nvswitch", list(pci.NVSWITCH_COMMAND), pci.parse_nvswitch)
#: `nvidia-smi -q` Fabric State per GPU; empty where nvidia-smi cannot report (the preflight reads the rest)
FABRIC_STATES: Fact[dict[str, str]] = Fact(
    "fabric_states", ["sh", "-c", "nvidia-smi -q 2>/dev/null || true"],
    lambda t: smi_q.parse_fabric_states(t) if "NVSMI LOG" in t else {})
PCI_NVIDIA: Fact[list[PciDevice]] = Fact(
    "pci_nvidia", ["sh", "-c", "lspci -nn -d 10de: 2>/dev/null; true"], pci.parse_lspci_nn)
FABRICMANAGER: Fact[UnitState] = Fact(
    "fabricmanager", ["systemctl", "is-active", "nvidia-fabricmanager"],
    lambda t: UnitState(unit="nvidia-fabricmanager", state=(t.strip().splitlines() or ["unknown"])[-1].strip()),
    ok_statuses=tuple(range(256)))

#: NVIDIA's vGPU manager on the node (its kernel module, `nvidia-smi vgpu`): its driver has no public .run
VGPU: Fact[vgpu.VgpuFacts] = Fact("vgpu", list(vgpu.VGPU_COMMAND), vgpu.parse_vgpu)

# Container facts (same probes, other target) — the container's nvidia-smi may legitimately fail.
SMI_STATUS: Fact[SmiStatus] = Fact(
    "smi_status", ["sh", "-c", "command -v nvidia-smi >/dev/null || { echo 'nvidia-smi: command not found'; exit 127; };"
                   " nvidia-smi --query-gpu=driver_version --format=csv,noheader"],
    smi_failure.parse_smi_status, ok_statuses=tuple(range(256)))
USERSPACE_LIBS: Fact[UserspaceLibs] = Fact(
    "userspace_libs",
    ["sh", "-c", "ls -1 " + " ".join(f"{d}/libcuda.so.* {d}/libnvidia-ml.so.*" for d in userspace.LIB_DIRS)
     + " 2>/dev/null; true"],
    userspace.parse_userspace_libs)
#: what the last `.run` install left: installers still in /root and /var/log/nvidia-installer.log
INSTALLER_RECORD: Fact[InstallerRecord] = Fact(
    "installer_record",
    ["sh", "-c", "ls -1 /root/NVIDIA-Linux-*.run 2>/dev/null; echo '" + installer_log.INSTALLER_RECORD_SEPARATOR + "'; "
     "tail -n 400 /var/log/nvidia-installer.log 2>/dev/null; true"],
    installer_log.parse_installer_record)
