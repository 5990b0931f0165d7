"""Host preflight checks `node.inventory` runs before any container change: each problem is a diagnosis
`Finding` (so the recap, the run log and the TUI show it like any diagnosis) raised in a `StepFailed`.

- Blackwell (compute capability >= 10.0, or a PCI device id of the Blackwell range when nvidia-smi
  cannot report) needs NVIDIA's open kernel modules; with the proprietary module the GPUs never
  initialise ("RmInitAdapter failed", `nvidia-smi`: "No devices were found"). NVIDIA README "Open
  Linux Kernel Modules" (https://download.nvidia.com/XFree86/Linux-x86_64/580.95.05/README/kernel_open.html):
  Blackwell and later are supported only by the open flavour. `NVreg_OpenRmEnableUnsupportedGpus` is
  about GeForce on the *open* module (R515-R555), not a fix for the proprietary one.
- NVSwitch systems (HGX) need `nvidia-fabricmanager` active; without it CUDA fails with error 802
  "system not yet initialized" (Fabric Manager user guide,
  https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/ ; https://github.com/wilicc/gpu-burn/issues/92).
- A vGPU host (NVIDIA's vGPU manager: `nvidia_vgpu_vfio`, `nvidia-smi vgpu`) has no public .run of its driver
  version (`provisioner.facts.vgpu`): a playbook that would install the public driver userspace stops here,
  before the container is created, with the finding `driver.userspace` would give later. A playbook that
  names the host's own vGPU-KVM package (`driver_run`) goes on.
"""

from __future__ import annotations

from provisioner.diagnose.model import Finding
from provisioner.exitcodes import ExitCode
from provisioner.facts.models import DriverVersionInfo, Gpu, NvSwitchFacts, PciDevice, UnitState
from provisioner.facts.vgpu import VgpuFacts, vgpu_host_problem
from provisioner.steps.base import StepFailed

#: PCI device ids from 0x2900 on are Blackwell or later (GB100 0x29xx, GB202 0x2Bxx, GB203 0x2Cxx, GB205/206/207
#: 0x2Dxx-0x2Fxx; Hopper GH100 is 0x23xx, Ada AD10x 0x26xx-0x28xx): NVIDIA/open-gpu-kernel-modules README,
#: "Compatible GPUs" table (e.g. B200 2901, RTX PRO 6000 Blackwell Server Edition 2BB5, RTX 5090 2B85)
BLACKWELL_FIRST_DEVICE_ID = 0x2900
GPU_PCI_CLASSES = ("0300", "0302")

OPEN_MODULE_FIX = (
    "install the open kernel module flavour of the host driver (.run `-m=kernel-open`, or the distribution's "
    "`nvidia-open` / `*-open` package), reboot or reload nvidia.ko, and check that /proc/driver/nvidia/version says "
    "\"Open Kernel Module\"; NVreg_OpenRmEnableUnsupportedGpus is not the fix (it only concerns GeForce GPUs on the "
    "open module)")
FABRIC_MANAGER_FIX = (
    "install nvidia-fabricmanager of exactly the host driver version and start it on the node: "
    "`systemctl enable --now nvidia-fabricmanager` (check `nvidia-smi -q | grep -A2 Fabric`: State Completed)")


def blackwell_by_cc(gpus: list[Gpu]) -> list[Gpu]:
    out = []
    for g in gpus:
        major = str(g.compute_cap or "").split(".")[0]
        if major.isdigit() and int(major) >= 10:
            out.append(g)
    return out


def blackwell_by_pci(devices: list[PciDevice]) -> list[PciDevice]:
    return [d for d in devices if d.vendor_id == "10de" and d.class_id in GPU_PCI_CLASSES
            and int(d.device_id, 16) >= BLACKWELL_FIRST_DEVICE_ID]


def open_module_failure(host: str, proc: DriverVersionInfo | None, gpus: list[Gpu] | None,
                        pci: list[PciDevice]) -> StepFailed | None:
    """The proprietary kernel module with Blackwell GPUs (by compute capability, else by PCI device id)."""
    if proc is None or proc.flavour != "proprietary":
        return None
    if gpus:
        hits = [f"GPU {g.index} {g.name} (compute capability {g.compute_cap}, {g.pci_bus_id})"
                for g in blackwell_by_cc(gpus)]
    else:
        hits = [f"PCI {d.slot} [{d.vendor_id}:{d.device_id}] {d.description}" for d in blackwell_by_pci(pci)]
    if not hits:
        return None
    banner = f"/proc/driver/nvidia/version: NVIDIA UNIX {proc.arch or ''} Kernel Module {proc.version} (proprietary)"
    message = (f"{host} runs the proprietary NVIDIA kernel module {proc.version} with Blackwell GPUs, which only the "
               f"open kernel module drives (the GPUs never initialise: RmInitAdapter failed, nvidia-smi finds no "
               f"devices); {len(hits)} Blackwell GPU(s)")
    finding = Finding(category="no_driver_loaded", confidence=0.97,
                      root_cause="Blackwell GPUs need NVIDIA's open kernel module; the host loaded the proprietary one",
                      fix=OPEN_MODULE_FIX, evidence=(banner, *hits[:8]), rule="preflight.open_kernel_module")
    return StepFailed(message, fix=OPEN_MODULE_FIX, evidence=[banner, *hits], findings=[finding.to_dict()],
                      exit_code=ExitCode.FAILED)


def fabric_manager_failure(host: str, nvswitch: NvSwitchFacts, fabric: dict[str, str],
                           unit: UnitState | None) -> StepFailed | None:
    """An NVSwitch system whose nvidia-fabricmanager is not active."""
    in_fabric = {bus: state for bus, state in fabric.items() if state.lower() not in ("n/a", "")}
    if not nvswitch.present and not in_fabric:
        return None
    if unit is not None and unit.active:
        return None
    state = unit.state if unit is not None else "unknown"
    evidence = [*nvswitch.evidence[:6], *(f"nvidia-smi -q GPU {b}: Fabric State {s}" for b, s in
                                          list(in_fabric.items())[:4]),
                f"systemctl is-active nvidia-fabricmanager: {state}"]
    message = (f"{host} is an NVSwitch system but nvidia-fabricmanager is not active ({state}): without it CUDA "
               "fails in every container with error 802 'system not yet initialized'")
    finding = Finding(category="no_driver_loaded", confidence=0.95,
                      root_cause="NVSwitch system without a running nvidia-fabricmanager: the NVLink fabric is not "
                                 "set up, so CUDA is not ready",
                      fix=FABRIC_MANAGER_FIX, evidence=tuple(evidence), rule="preflight.fabric_manager")
    return StepFailed(message, fix=FABRIC_MANAGER_FIX, evidence=evidence, findings=[finding.to_dict()], exit_code=ExitCode.FAILED)


def vgpu_failure(facts: VgpuFacts, host_driver: str, *, public_driver: bool) -> StepFailed | None:
    """A vGPU host whose playbook installs the public driver userspace (`public_driver`: a driver.userspace
    step without driver_run): the same finding `driver.userspace` gives, raised before any change."""
    problem = vgpu_host_problem(facts, host_driver) if public_driver else None
    if problem is None:
        return None
    message, fix = problem
    evidence = [facts.evidence] if facts.evidence else []
    finding = Finding(category="driver_lib_mismatch", confidence=0.95, root_cause=message, fix=fix,
                      evidence=tuple(evidence), rule="preflight.vgpu_host")
    return StepFailed(message, fix=fix, evidence=evidence, findings=[finding.to_dict()],
                      exit_code=ExitCode.NO_SOLUTION)
