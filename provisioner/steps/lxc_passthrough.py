"""`lxc.gpu_passthrough`: pass every GPU plus nvidiactl/uvm/uvm-tools/modeset into the container (devN or raw lines)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from provisioner import validate
from provisioner.events import Event
from provisioner.exitcodes import ExitCode
from provisioner.facts import catalog, nvidia
from provisioner.facts.models import Gpu
from provisioner.proxmox.lxc_conf import LxcConfig, parse_property_string
from provisioner.steps.base import Params, Plan, StepFailed, StepKind, parse_output, register
from provisioner.steps.context import StepContext
from provisioner.steps.lxc_common import BACKUP_DIR, conf_path, ensure_inventory, read_conf
from provisioner.steps.node_inventory import gather_inventory
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


def raw_lines_for(devices: list[str], inventory: HostInventory) -> list[tuple[str, str]]:
    key = "lxc.cgroup2.devices.allow" if inventory.cgroup_version == 2 else "lxc.cgroup.devices.allow"
    majors = [inventory.nvidia_major or 195]
    if inventory.uvm_major is not None:
        majors.append(inventory.uvm_major)
    if any("nvidia-caps" in d for d in devices) and inventory.caps_major is not None:
        majors.append(inventory.caps_major)
    lines = [(key, f"c {m}:* rwm") for m in majors]
    for dev in devices:
        if dev.startswith("/dev/nvidia-caps/"):
            continue
        lines.append(("lxc.mount.entry", f"{dev} {dev[1:]} none bind,optional,create=file"))
    if any("nvidia-caps" in d for d in devices):
        lines.append(("lxc.mount.entry", "/dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir"))
    return lines


def mode_drifted(conf: LxcConfig, devices: list[str], dev_mode: str) -> list[tuple[int, str]]:
    """(index, path) of the passed devN entries whose mode is no longer `dev_mode`."""
    from provisioner.drift import dev_entries

    return [(index, dev) for dev, (index, props) in dev_entries(conf).items()
            if dev in devices and props.get("mode", "") != dev_mode]


def mode_drift(conf: LxcConfig, devices: list[str], dev_mode: str) -> list[str]:
    from provisioner.drift import dev_entries

    have = dev_entries(conf)
    return [f"dev{index} ({dev}) has mode {have[dev][1].get('mode') or 'unset'}, the playbook wants {dev_mode}"
            for index, dev in mode_drifted(conf, devices, dev_mode)]


@register
class LxcGpuPassthrough(StepKind[PassthroughParams]):
    """Pass every GPU plus nvidiactl/uvm/uvm-tools/modeset into the container (devN or raw lines)."""

    kind = "lxc.gpu_passthrough"
    title = "Pass the GPUs through to the container"
    Params = PassthroughParams
    _selection: DeviceSelection

    def _mode(self, ctx: StepContext, inv: HostInventory) -> str:
        release = tuple(inv.pve_release or (0, 0))
        if self.params.mode == "dev" and release < (8, 1):
            raise StepFailed(f"devN passthrough needs Proxmox VE ≥ 8.1; this node runs {inv.pve_version}",
                             fix="use mode: raw (lxc.* lines) or upgrade Proxmox VE", exit_code=ExitCode.USAGE)
        mode = self.params.mode if self.params.mode != "auto" else ("dev" if release >= (8, 1) else "raw")
        target = ctx.playbook.target
        if not target.local and target.ssh.user != "root":
            raise StepFailed(
                f"{mode} passthrough needs root on the node: devN may only be set by root@pam (`pct set` as root "
                "or a root@pam password ticket; PVE refuses API tokens with 403) and raw lxc.* lines need a root edit "
                f"of /etc/pve/lxc/<vmid>.conf; the playbook logs in as {target.ssh.user!r}",
                fix="set target.ssh.user: root (key authentication) for this step", exit_code=ExitCode.USAGE)
        return mode

    async def _plan(self, ctx: StepContext) -> tuple[str, list[str], LxcConfig, list[str], bool]:
        inv = await ensure_inventory(ctx)
        mode = self._mode(ctx, inv)
        selection = device_selection(inv, self.params)
        self._selection = selection
        ctx.state.selected_gpus = [g.uuid for g in selection.gpus]
        devices = selection.devices
        uvm_missing = "/dev/nvidia-uvm" not in inv.device_nodes or "/dev/nvidia-uvm-tools" not in inv.device_nodes
        conf = await read_conf(ctx, ctx.vmid)
        changes: list[str] = []
        if uvm_missing:
            changes.append("create /dev/nvidia-uvm and /dev/nvidia-uvm-tools on the host (nvidia-modprobe -u -c=0)")
        if "/dev/nvidia-modeset" in devices and "/dev/nvidia-modeset" not in inv.device_nodes:
            changes.append("create /dev/nvidia-modeset on the host (nvidia-modprobe -m; nvidia-modeset is loaded)")
        if mode == "dev":
            have = {parse_property_string(v, "path").get("path") for v in conf.indexed("dev").values()}
            missing = [d for d in devices if d not in have]
            if missing:
                changes.append(f"add devN entries for {', '.join(missing)} (mode {self.params.dev_mode})")
            # day-two drift: its own devN lines edited by hand (provisioner.drift names it the same way)
            changes += [f"drift: {line} → rewrite it" for line in mode_drift(conf, devices, self.params.dev_mode)]
        elif inv.uvm_major is None:
            # nvidia-uvm is not loaded: its dynamic major is only known after nvidia-modprobe loads it.
            changes.append(f"add raw cgroup allow and bind-mount lines for {len(devices)} device nodes to "
                           f"{conf_path(ctx.vmid)} (backup first) once nvidia-uvm is loaded")
        else:
            lines = raw_lines_for(devices, inv)
            have_raw = set(conf.raw_lines())
            missing = [f"{k}: {v}" for k, v in lines if (k, v) not in have_raw]
            if missing:
                changes.append(f"add {len(missing)} raw lines to {conf_path(ctx.vmid)} (backup first): "
                               + "; ".join(missing[:3]) + (" …" if len(missing) > 3 else ""))
        return mode, devices, conf, changes, uvm_missing

    async def check(self, ctx: StepContext) -> Plan:
        mode, devices, _, changes, _ = await self._plan(ctx)
        ctx.state.passthrough_devices = devices
        inv = await ensure_inventory(ctx)
        notes = [f"mode {mode}: {len(devices)} device nodes"]
        sel = self._selection.gpus
        if len(sel) != len(inv.gpus) or any(inv.minor_of(g) != g.index for g in sel):
            notes.append("selected by device minor: " + ", ".join(
                f"GPU {g.index} = /dev/nvidia{inv.minor_of(g)} ({g.uuid})" for g in sel))
        notes += [f"skipped {n}" for n in self._selection.skipped_notes()]
        return Plan(changes=changes, notes=notes) if changes else Plan.no_change(*notes)

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        _, _, _, _, uvm_missing = await self._plan(ctx)
        if uvm_missing or (await ensure_inventory(ctx)).uvm_major is None:
            yield ctx.info("loading nvidia-uvm and creating its device nodes on the host (nvidia-modprobe -u -c=0)")
            await ctx.node.run(["nvidia-modprobe", "-u", "-c=0"], timeout=60, check=True)
            ctx.facts.invalidate(ctx.node.name, "dev_nodes", "proc_devices")
            ctx.state.inventory = await gather_inventory(ctx)
        inv = await ensure_inventory(ctx)
        if "/dev/nvidia-modeset" in device_selection(inv, self.params).devices and \
                "/dev/nvidia-modeset" not in inv.device_nodes:
            yield ctx.info("creating /dev/nvidia-modeset on the host (nvidia-modprobe -m)")
            await ctx.node.run(["nvidia-modprobe", "-m"], timeout=60, check=True)
            ctx.facts.invalidate(ctx.node.name, "dev_nodes", "proc_devices")
            ctx.state.inventory = await gather_inventory(ctx)
        mode, devices, conf, _, _ = await self._plan(ctx)
        vmid = ctx.vmid
        if mode == "dev":
            have = {parse_property_string(v, "path").get("path") for v in conf.indexed("dev").values()}
            for index, dev in mode_drifted(conf, devices, self.params.dev_mode):
                await ctx.node.run(["pct", "set", str(vmid), f"--dev{index}", f"{dev},mode={self.params.dev_mode}"],
                                   timeout=60, check=True)
            used = set(conf.indexed("dev"))
            index = 0
            for dev in devices:
                if dev in have:
                    continue
                while index in used:
                    index += 1
                used.add(index)
                # `pct set` runs as root@pam on the node: the only identity PVE lets set devN
                # (API tokens get 403).
                await ctx.node.run(["pct", "set", str(vmid), f"--dev{index}", f"{dev},mode={self.params.dev_mode}"],
                                   timeout=60, check=True)
        else:
            inv = await ensure_inventory(ctx)
            backup_dir = BACKUP_DIR
            stamp = time.strftime("%Y%m%dT%H%M%S")
            await ctx.node.run(["mkdir", "-p", backup_dir], timeout=30, check=True)
            await ctx.node.run(["cp", "-p", conf_path(vmid), f"{backup_dir}/{vmid}.conf.{stamp}"], timeout=30,
                               check=True)
            yield ctx.info(f"backed up {conf_path(vmid)} to {backup_dir}/{vmid}.conf.{stamp}")
            for key, value in raw_lines_for(devices, inv):
                conf.add_raw(key, value)
            await ctx.node.write_file(conf_path(vmid), conf.render().encode(), timeout=30, quiet=False)

    async def verify(self, ctx: StepContext) -> None:
        _, _, _, changes, _ = await self._plan(ctx)
        if changes:
            raise StepFailed("passthrough configuration incomplete after apply: " + "; ".join(changes))


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
        seen = [uuid for _, _, uuid in nvidia.parse_smi_list(result.output)]
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
    result = await ct.run(["sh", "-c", "ls -l /dev/nvidia* 2>&1; true"], timeout=60, quiet=True)
    inside = parse_output(result, nvidia.parse_ls_dev, what="the device nodes in the container").by_path()
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
