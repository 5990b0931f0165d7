"""What the GPU steps share: which device nodes and GPUs pass into the container (`lxc.gpu_passthrough`,
`lxc.boot_persistence`), and the checks that the container sees exactly them (`lxc.start`,
`driver.userspace`, `gpu.detect`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from provisioner import validate
from provisioner.exitcodes import ExitCode
from provisioner.facts import catalog, smi_csv, smi_failure
from provisioner.facts.models import Gpu
from provisioner.steps.base import Params, StepFailed, parse_output
from provisioner.steps.context import StepContext
from provisioner.steps.lxc_common import ensure_inventory
from provisioner.steps.state import HostInventory


class PassthroughParams(Params):
    mode: Literal["auto", "dev", "raw"] = Field("auto", description="dev: PVE ≥ 8.1 devN entries; raw: lxc.* lines")
    gpus: Annotated[Literal["all"] | list[Annotated[int, Field(ge=0, le=1023)]], BeforeValidator(validate.index_ranges)] \
        = Field("all", description="'all' or GPU indices: a list, or ranges like 0-3 or 0,2-3")
    modeset: bool = Field(True, description="Also pass /dev/nvidia-modeset")
    caps: bool = Field(False, description="Also pass /dev/nvidia-caps (MIG management)")
    dev_mode: str = Field("0666", pattern=r"^0[0-7]{3}$", description="Access mode of devN nodes in the container")


@dataclass(frozen=True)
class DeviceSelection:
    """What the step passes: the device nodes, the selected GPUs, and each node left out with why."""

    devices: list[str]
    gpus: list[Gpu]
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def skipped_notes(self) -> list[str]:
        return [f"{path}: {why}" for path, why in self.skipped]


#: nodes the step creates itself when missing (nvidia-modprobe -u -c=0)
CREATED_BY_STEP = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


def device_selection(inventory: HostInventory, params: PassthroughParams) -> DeviceSelection:
    """The device nodes for the selected GPUs: `/dev/nvidia<minor>` (the `Device Minor` of
    /proc/driver/nvidia/gpus/<bus>/information, not nvidia-smi's PCI-order index), nvidiactl, the UVM
    nodes, and nvidia-modeset / nvidia-caps only where they exist on the host (pve-container checks every
    devN path at `pct set`: "Device /dev/nvidia-modeset does not exist")."""
    gpus = inventory.gpus
    indices = [g.index for g in gpus] if params.gpus == "all" else list(params.gpus)
    unknown = [i for i in indices if i not in {g.index for g in gpus}]
    if unknown:
        raise StepFailed(f"GPU indices {unknown} are not on the node (it has {[g.index for g in gpus]})", exit_code=ExitCode.USAGE)
    selected = [g for g in gpus if g.index in set(indices)]
    present = set(inventory.device_nodes)
    gpu_nodes = [f"/dev/nvidia{inventory.minor_of(g)}" for g in sorted(selected, key=inventory.minor_of)]
    absent_gpus = [n for n in gpu_nodes if n not in present]
    if absent_gpus:
        raise StepFailed(f"GPU device nodes missing on the host: {', '.join(absent_gpus)}",
                         fix="run `nvidia-smi` on the node once (NVML creates /dev/nvidiactl and the GPU nodes) or "
                             "`nvidia-modprobe -c=<minor>`, then replay")
    devices = [*gpu_nodes, "/dev/nvidiactl", *CREATED_BY_STEP]
    skipped: list[tuple[str, str]] = []
    if "/dev/nvidiactl" not in present:
        raise StepFailed("/dev/nvidiactl does not exist on the host",
                         fix="run `nvidia-smi` on the node once (it creates /dev/nvidiactl), then replay")
    if params.modeset:
        if "/dev/nvidia-modeset" in present or inventory.modeset_loaded:
            devices.append("/dev/nvidia-modeset")  # created by the step (nvidia-modprobe -m) when missing
        else:
            skipped.append(("/dev/nvidia-modeset", "not present on this host (nvidia-modeset not loaded; headless "
                                                   "node) — CUDA does not need it"))
    if params.caps:
        for cap in ("/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"):
            if cap in present and inventory.caps_major is not None:
                devices.append(cap)
            else:
                skipped.append((cap, "not present on this host (no MIG capability nodes; "
                                     "`nvidia-modprobe -f` creates them)"))
    return DeviceSelection(devices=devices, gpus=selected, skipped=skipped)


def wanted_devices(inventory: HostInventory, params: PassthroughParams) -> list[str]:
    return device_selection(inventory, params).devices


def visible_gpu_problem(selected: list[str], seen: list[str], vmid: int) -> str | None:
    """Why the container's GPUs (by UUID) are not exactly the selected ones, or None."""
    extra = [u for u in seen if u not in selected]
    missing = [u for u in selected if u not in seen]
    if not extra and not missing:
        return None
    parts = []
    if extra:
        parts.append(f"GPUs not selected are visible: {', '.join(extra)}")
    if missing:
        parts.append(f"selected GPUs are missing: {', '.join(missing)}")
    return f"CT {vmid} does not see exactly the selected GPUs ({len(seen)} seen, {len(selected)} selected): " + \
        "; ".join(parts)


async def verify_gpus_by_uuid(ctx: StepContext) -> list[str] | None:
    """`nvidia-smi -L` in the container lists exactly the selected GPUs (by UUID). None when the container
    has no working nvidia-smi yet (driver.userspace installs it and verifies again)."""
    selected = ctx.state.selected_gpus
    if selected is None:
        return None
    result = await ctx.container().for_facts().run(
        ["sh", "-c", "command -v nvidia-smi >/dev/null || exit 127; nvidia-smi -L"], timeout=120, quiet=True)
    if result.exit_status == 127:
        return None
    try:
        seen = [uuid for _, _, uuid in smi_csv.parse_smi_list(result.output)]
    except ValueError:
        # the userspace cannot report yet (e.g. another version than the host module): driver.userspace
        # replaces it and checks the UUIDs again
        return None
    problem = visible_gpu_problem(selected, seen, ctx.vmid)
    if problem:
        raise StepFailed(problem, result=result,
                         fix="the container's devN/lxc.* entries must name /dev/nvidia<Device Minor> of the selected "
                             "GPUs: remove the wrong entries and replay lxc.gpu_passthrough, then `pct reboot`")
    return seen


async def verify_devices_in_container(ctx: StepContext) -> None:
    """Every passed node exists in the container with the host's major:minor."""
    devices = ctx.state.passthrough_devices
    if not devices:
        return
    inv = await ensure_inventory(ctx)
    ct = ctx.container()
    # the node's own probe (`catalog.DEV_NODES`), in the container, afresh: its nodes change with each start
    ctx.facts.invalidate(ct.name, catalog.DEV_NODES.name)
    result = await ctx.facts.result(ct, catalog.DEV_NODES)
    inside = parse_output(result, catalog.DEV_NODES.parse, what="the device nodes in the container").by_path()
    host_nodes = (await ctx.fact(ctx.node, catalog.DEV_NODES)).by_path()
    problems = []
    for dev in devices:
        if dev.startswith("/dev/nvidia-caps/"):
            continue
        node = inside.get(dev)
        if node is None:
            problems.append(f"{dev} missing")
        elif dev in host_nodes and (node.major, node.minor) != (host_nodes[dev].major, host_nodes[dev].minor):
            problems.append(f"{dev} is {node.major}:{node.minor}, host has "
                            f"{host_nodes[dev].major}:{host_nodes[dev].minor}")
    if problems:
        raise StepFailed(f"device nodes in CT {ctx.vmid}: " + "; ".join(problems),
                         fix="check the passthrough lines and restart the container (`pct reboot`)",
                         evidence=result.lines[-20:])
    _ = inv


async def verify_smi(ctx: StepContext, host: str) -> list[Gpu]:
    """nvidia-smi inside the container lists every passed GPU at the host's driver version."""
    result = await ctx.container().for_facts().run(list(smi_csv.QUERY_GPU_COMMAND), timeout=120, quiet=True)
    failure = smi_failure.classify_smi_failure(result.output)
    if failure is not None or not result.ok:
        raise StepFailed(f"nvidia-smi in CT {ctx.vmid} failed: {failure.kind if failure else result.exit_status}",
                         result=result,
                         fix="container userspace and host module must be the same version; replay this step")
    gpus = parse_output(result, smi_csv.parse_gpu_query_csv, what="nvidia-smi in the container")
    versions = {g.driver_version for g in gpus}
    selected = ctx.state.selected_gpus
    if selected is not None:
        # exactly the GPUs lxc.gpu_passthrough selected (by device minor), compared by UUID
        problem = visible_gpu_problem(selected, [g.uuid for g in gpus], ctx.vmid)
        if problem:
            raise StepFailed(problem, result=result,
                             fix="the container's devN/lxc.* entries must name /dev/nvidia<Device Minor> of the "
                                 "selected GPUs: remove the wrong entries, replay lxc.gpu_passthrough, `pct reboot`")
    else:
        expected = len([d for d in ctx.state.passthrough_devices or [] if re.fullmatch(r"/dev/nvidia\d+", d)]) or \
            len((await ensure_inventory(ctx)).gpus)
        if len(gpus) != expected:
            raise StepFailed(f"nvidia-smi in CT {ctx.vmid} lists {len(gpus)} GPUs, expected {expected}", result=result)
    if versions != {host}:
        raise StepFailed(f"container driver {', '.join(sorted(versions))} differs from the host module {host}",
                         result=result)
    return gpus
