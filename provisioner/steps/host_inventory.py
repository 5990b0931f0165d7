"""The node's inventory as the steps need it (GPUs, driver module, device majors and nodes, PVE, cgroup):
gathered from the facts of `facts.catalog` by `node.inventory`, and by any later step of a run that starts
after it (`lxc_common.ensure_inventory`)."""

from __future__ import annotations

from provisioner.facts import catalog
from provisioner.facts.base import FactUnavailable
from provisioner.facts.models import PciDevice, UnitState
from provisioner.steps.base import StepFailed
from provisioner.steps.context import StepContext
from provisioner.steps.host_preflight import open_module_failure
from provisioner.steps.state import HostInventory


async def gather_inventory(ctx: StepContext) -> HostInventory:
    """Node facts the later steps need (also what the TUI's inventory page shows)."""
    node = ctx.node
    warnings: list[str] = []
    # independent probes run concurrently; their outcomes are checked in the order they always were
    first = await ctx.facts.gather(node, catalog.MODULE_VERSION, catalog.PROC_DRIVER_VERSION, catalog.GPUS)
    module_version = first.value(catalog.MODULE_VERSION)
    proc_version = first.value(catalog.PROC_DRIVER_VERSION)
    no_module = StepFailed(
        f"no NVIDIA kernel module is loaded on {ctx.host} (/sys/module/nvidia/version and "
        "/proc/driver/nvidia/version are absent)",
        fix="install the NVIDIA driver on the Proxmox host (kernel module, open flavour for Blackwell) and "
            "load it (`modprobe nvidia`); check `dmesg | grep -i nvrm` for why it did not load")
    try:
        gpus = first.value(catalog.GPUS)
    except FactUnavailable as exc:
        if module_version is None and proc_version is None:
            raise no_module from None
        # nvidia-smi cannot report: a proprietary module with Blackwell GPUs (by PCI id) explains it
        flavour_failure = open_module_failure(ctx.host, proc_version, None, await _pci(ctx))
        if flavour_failure is not None:
            flavour_failure.evidence += exc.result.tail(3) if exc.result else []
            raise flavour_failure from None
        raise StepFailed(f"nvidia-smi on the node failed: {exc.reason}",
                         fix="fix the host driver first: nvidia-smi must list the GPUs on the node",
                         result=exc.result) from None
    # Host version: /sys/module/nvidia/version, else /proc/driver/nvidia/version, else nvidia-smi.
    driver = module_version or (proc_version.version if proc_version else "") or \
        (gpus[0].driver_version if gpus else "")
    if not driver:
        raise no_module
    flavour = proc_version.flavour if proc_version else "unknown"
    flavour_failure = open_module_failure(ctx.host, proc_version, list(gpus), [])
    if flavour_failure is not None:
        raise flavour_failure
    rest = await ctx.facts.gather(node, catalog.GPU_INFORMATION, catalog.NVSWITCH, catalog.FABRIC_STATES,
                                  catalog.PROC_DEVICES, catalog.DEV_NODES, catalog.PVEVERSION, catalog.CGROUP)
    # Device minors: /dev/nvidiaN is numbered by minor, not by nvidia-smi's (PCI order) index.
    try:
        info = rest.value(catalog.GPU_INFORMATION)
    except FactUnavailable:
        info = []
    minors = {i.bus_id: i.minor for i in info}
    if gpus and not minors:
        warnings.append("no /proc/driver/nvidia/gpus/*/information: device minors assumed equal to the GPU index")
    nvswitch = rest.value(catalog.NVSWITCH)
    fabric = rest.value(catalog.FABRIC_STATES)
    in_fabric = any(s.lower() != "n/a" for s in fabric.values())
    unit: UnitState | None = None
    if nvswitch.present or in_fabric:
        unit = await ctx.fact(node, catalog.FABRICMANAGER)
    devices = rest.value(catalog.PROC_DEVICES)
    nodes = rest.value(catalog.DEV_NODES)
    present = {n.path for n in nodes.nodes}
    if devices.uvm_major is None:
        warnings.append("nvidia-uvm is not loaded on the host (no 'nvidia-uvm' in /proc/devices); CUDA needs it")
    if "/dev/nvidia-uvm" not in present:
        warnings.append("/dev/nvidia-uvm does not exist on the host yet (nvidia-modprobe -u -c=0 creates it)")
    missing = [f"/dev/nvidia{minors.get(g.pci_bus_id.upper(), g.index)}" for g in gpus
               if f"/dev/nvidia{minors.get(g.pci_bus_id.upper(), g.index)}" not in present]
    if missing:
        warnings.append(f"device nodes missing on the host: {', '.join(missing)}")
    for g in gpus:
        if g.driver_version != driver:
            warnings.append(f"GPU {g.index} reports driver {g.driver_version} but the module is {driver}")
            break
    pve = rest.value(catalog.PVEVERSION)
    cgroup = rest.value(catalog.CGROUP)
    return HostInventory(gpus=list(gpus), driver_version=driver, module_flavour=str(flavour),
                         uvm_major=devices.uvm_major, caps_major=devices.caps_major,
                         nvidia_major=devices.nvidia_major or 195, device_nodes=sorted(present),
                         modeset_loaded=devices.char_major("nvidia-modeset") is not None,
                         pve_version=pve.manager_version, pve_release=tuple(pve.release),
                         kernel=pve.running_kernel, cgroup_version=cgroup.version, warnings=warnings,
                         gpu_minors=minors, nvswitch=nvswitch.evidence + [f"GPU {b}: Fabric State {s}" for b, s in
                                                                          fabric.items() if s.lower() != "n/a"],
                         fabricmanager=unit.state if unit is not None else None)


async def _pci(ctx: StepContext) -> list[PciDevice]:
    try:
        return await ctx.fact(ctx.node, catalog.PCI_NVIDIA)
    except FactUnavailable:
        return []
