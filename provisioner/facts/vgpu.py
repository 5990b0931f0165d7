"""Pure parsers for NVIDIA vGPU host facts: is this node's driver NVIDIA's vGPU manager?

A vGPU host (NVIDIA vGPU software for Linux KVM) loads the Virtual GPU Manager's kernel module
``nvidia-vgpu-vfio`` (``nvidia_vgpu_vfio`` in ``lsmod`` and ``/sys/module``; NVIDIA Virtual GPU Software
User Guide, "Installing and Configuring the NVIDIA Virtual GPU Manager for Red Hat Enterprise Linux KVM":
``lsmod | grep vfio``, https://docs.nvidia.com/vgpu/18.0/grid-vgpu-user-guide/index.html) and answers
``nvidia-smi vgpu`` with a table of its GPUs and their vGPUs. Its driver is not the public one: the host
package and the guest driver of one vGPU release carry different versions (vGPU 18.2: host 570.148.06,
guest 570.148.08, https://github.com/nvidiavgpuarchive/index/issues/1), both from NVIDIA's licensing portal,
and the host driver reports no CUDA (``CUDA Version: N/A`` in its ``nvidia-smi``; the host outputs in
https://github.com/akb486/vgpu README and https://github.com/DualCoder/vgpu_unlock/issues/51).
"""

from __future__ import annotations

import re

from provisioner.facts.models import ParseError, _Model
from provisioner.facts.nvidia_text import strip_ansi

#: the vGPU manager's kernel module as /sys/module and lsmod name it (the file is nvidia-vgpu-vfio.ko)
VGPU_MANAGER_MODULE = "nvidia_vgpu_vfio"

VGPU_COMMAND: tuple[str, ...] = (
    "sh", "-c", f'[ -d /sys/module/{VGPU_MANAGER_MODULE} ] && echo "module: {VGPU_MANAGER_MODULE}"; '
                'nvidia-smi vgpu 2>/dev/null | sed "s/^/vgpu: /"; true')

#: vGPU software releases: host (vGPU manager) driver -> (release, guest driver), from NVIDIA's packages
#: ("NVIDIA-GRID-Linux-KVM-<host>-<linux guest>-<windows guest>"), https://github.com/nvidiavgpuarchive/index
VGPU_RELEASES: dict[str, tuple[str, str]] = {
    "570.148.06": ("18.2", "570.148.08"),  # NVIDIA-GRID-Linux-KVM-570.148.06-570.148.08-573.07 (index#1)
}


class VgpuGpu(_Model):
    """One GPU row of ``nvidia-smi vgpu`` and the vGPUs (by name) running on it."""

    index: int
    name: str
    bus_id: str
    vgpus: tuple[str, ...] = ()


class VgpuFacts(_Model):
    """What :data:`VGPU_COMMAND` found: the vGPU manager's module, and ``nvidia-smi vgpu``'s table."""

    manager_module: str | None = None
    driver_version: str | None = None
    gpus: tuple[VgpuGpu, ...] = ()

    @property
    def is_vgpu_host(self) -> bool:
        return self.manager_module is not None or bool(self.gpus)

    @property
    def evidence(self) -> str:
        parts = []
        if self.manager_module:
            parts.append(f"kernel module {self.manager_module} loaded")
        if self.gpus:
            parts.append(f"`nvidia-smi vgpu` lists {len(self.gpus)} GPU(s) in vGPU mode")
        return " and ".join(parts)


_TITLE_RE = re.compile(r"NVIDIA-SMI\s+\S+\s+(?:Driver|KMD) Version:\s+(?P<driver>\d+\.\d+(?:\.\d+)?)")
_GPU_ROW_RE = re.compile(r"^\|\s+(?P<index>\d+)\s+(?P<name>.+?)\s+\|\s+(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
                         r"[0-9A-Fa-f]{2}\.[0-7])\s+\|")
_VGPU_ROW_RE = re.compile(r"^\|\s+(?P<id>\d{6,})\s+(?P<name>.+?)\s+\|")


def parse_smi_vgpu(text: str) -> tuple[str | None, tuple[VgpuGpu, ...]]:
    """Parse ``nvidia-smi vgpu`` (the host's table): (driver version, GPUs with their vGPUs).

    Anything without the table (``No supported devices in vGPU mode``, a driver without the subcommand)
    is no vGPU GPU: (None, ()).
    """
    plain = strip_ansi(text)
    if "vGPU ID" not in plain:
        return None, ()
    title = _TITLE_RE.search(plain)
    gpus: list[VgpuGpu] = []
    for raw in plain.splitlines():
        line = raw.rstrip()
        m = _GPU_ROW_RE.match(line)
        if m:
            gpus.append(VgpuGpu(index=int(m.group("index")), name=m.group("name"), bus_id=m.group("bus")))
            continue
        v = _VGPU_ROW_RE.match(line)
        if v and gpus:
            last = gpus[-1]
            gpus[-1] = last.model_copy(update={"vgpus": (*last.vgpus, v.group("name"))})
    if not gpus:
        raise ParseError("nvidia-smi vgpu: a vGPU table without GPU rows")
    return (title.group("driver") if title else None), tuple(gpus)


def parse_vgpu(text: str) -> VgpuFacts:
    """Parse the output of :data:`VGPU_COMMAND` (``module: <name>`` and ``vgpu: <nvidia-smi vgpu line>``)."""
    module = None
    table: list[str] = []
    for raw in strip_ansi(text).splitlines():
        if raw.startswith("module: ") and raw[8:].strip() == VGPU_MANAGER_MODULE:
            module = VGPU_MANAGER_MODULE
        elif raw.startswith("vgpu: "):
            table.append(raw[6:])
    driver, gpus = parse_smi_vgpu("\n".join(table))
    return VgpuFacts(manager_module=module, driver_version=driver, gpus=gpus)


def vgpu_host_problem(facts: VgpuFacts, host_driver: str) -> tuple[str, str] | None:
    """(message, fix) for a vGPU host whose driver has no public .run; None on any other host."""
    if not facts.is_vgpu_host:
        return None
    release = VGPU_RELEASES.get(host_driver)
    named = f" (vGPU {release[0]}: host {host_driver}, guest {release[1]})" if release else ""
    guest = release[1] if release else "the guest driver of the same vGPU release"
    message = (
        f"this node runs NVIDIA's vGPU manager ({facts.evidence}): its driver {host_driver} is the vGPU host "
        f"package, for which NVIDIA publishes no public .run; a vGPU guest driver is not the host's version"
        f"{named} — in a container, which shares the host's kernel module, it fails 'NVRM: API mismatch: the "
        f"client has the version {guest if release else '<guest>'}, but this kernel module has the version "
        f"{host_driver}' (nvidiavgpuarchive/index#1)"
    )
    fix = (
        f"the container's userspace must be exactly {host_driver}: install it from the host's own vGPU-KVM "
        f"package (NVIDIA-Linux-x86_64-{host_driver}-vgpu-kvm.run from the NVIDIA Licensing Portal; set "
        f"driver.userspace driver_run and sha256), not the public .run and not the guest driver ({guest}, "
        "for VMs); the vGPU manager provides no CUDA on the host (its nvidia-smi shows 'CUDA Version: N/A'), "
        f"so for CUDA give the GPU to a VM with a vGPU profile and the grid guest driver {guest}, or run "
        "NVIDIA's standard data-center driver on this node instead of the vGPU manager"
    )
    return message, fix
