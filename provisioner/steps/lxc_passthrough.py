"""`lxc.gpu_passthrough`: pass every GPU plus nvidiactl/uvm/uvm-tools/modeset into the container (devN or raw lines)."""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from provisioner.drift import dev_entries
from provisioner.events import Event
from provisioner.exitcodes import ExitCode
from provisioner.facts import catalog
from provisioner.proxmox.lxc_conf import LxcConfig, format_property_string, parse_property_string
from provisioner.steps.base import Plan, StepFailed, StepKind, register
from provisioner.steps.context import StepContext
from provisioner.steps.gpu_common import (
    DeviceSelection,
    PassthroughParams,
    device_selection,
)
from provisioner.steps.host_inventory import gather_inventory
from provisioner.steps.lxc_common import BACKUP_DIR, conf_path, ensure_inventory, read_conf, read_conf_text
from provisioner.steps.state import HostInventory

#: flock's exit status when PVE's config lock stays taken (util-linux flock -E)
LOCK_TIMEOUT_EXIT = 73


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
    """(index, path) of the passed devN entries whose mode is no longer `dev_mode` -- in the config the
    container gets at its next start (the main section with ``[pve:pending]`` applied)."""
    return [(index, dev) for dev, (index, props) in dev_entries(conf, effective=True).items()
            if dev in devices and props.get("mode", "") != dev_mode]


def mode_drift(conf: LxcConfig, devices: list[str], dev_mode: str) -> list[str]:
    have = dev_entries(conf, effective=True)
    pending = conf.pending()
    return [f"dev{index} ({dev}) has mode {have[dev][1].get('mode') or 'unset'}"
            + (" pending in [pve:pending]" if f"dev{index}" in pending else "")
            + f", the playbook wants {dev_mode}"
            for index, dev in mode_drifted(conf, devices, dev_mode)]


def dev_value(dev: str, dev_mode: str) -> str:
    return format_property_string({"path": dev, "mode": dev_mode}, "path")


def dev_sets(conf: LxcConfig, devices: list[str], dev_mode: str) -> list[tuple[str, str]]:
    """The ``pct set --devN`` calls that make the next-start config pass `devices` with `dev_mode`:
    drifted entries rewritten at their index, missing ones at the lowest free index."""
    from provisioner.drift import dev_entries

    have = dev_entries(conf, effective=True)
    out = [(f"dev{index}", dev_value(dev, dev_mode)) for index, dev in mode_drifted(conf, devices, dev_mode)]
    used = {int(k[3:]) for k in {**conf.options(), **conf.pending()} if re.fullmatch(r"dev\d+", k)}
    index = 0
    for dev in devices:
        if dev in have:
            continue
        while index in used:
            index += 1
        used.add(index)
        out.append((f"dev{index}", dev_value(dev, dev_mode)))
    return out


def our_pending(conf: LxcConfig, devices: list[str]) -> dict[str, str]:
    """The ``[pve:pending]`` devN values that pass one of `devices` (a foreign pending devN is not ours)."""
    return {k: v for k, v in conf.pending().items()
            if re.fullmatch(r"dev\d+", k) and parse_property_string(v, "path").get("path") in devices}


def pending_after(conf: LxcConfig, sets: list[tuple[str, str]], *, running: bool, hotplug_new: bool,
                  devices: list[str]) -> dict[str, str]:
    """The devN entries left in ``[pve:pending]`` after `sets` on this container (pve-container
    ``update_pct_config`` → ``vmconfig_hotplug_pending`` → ``cleanup_pending``): nothing when it is
    stopped (applied at once); when it runs, a changed existing devN always, a new one unless the node
    hot-plugs devices (pve-container ≥ 6.0.4, PVE 9); a value equal to the current one is no change."""
    if not running:
        return {}
    main = conf.options()
    pending = our_pending(conf, devices)
    for key, value in sets:
        if key in main:
            pending[key] = value
        elif not hotplug_new:
            pending[key] = value
        else:
            pending.pop(key, None)
    return {k: v for k, v in pending.items() if main.get(k) != v}


def restart_text(vmid: int, pending: dict[str, str]) -> str:
    return (f"restart CT {vmid} to apply its pending devN change(s): "
            + ", ".join(f"{k} = {v}" for k, v in sorted(pending.items()))
            + " (PVE keeps a changed devN of a running container in [pve:pending] until it restarts)")


def stale_allow_majors(conf: LxcConfig, char_majors: set[int]) -> list[int]:
    from provisioner.drift import stale_allow_majors as stale

    return stale(conf, char_majors)


@register
class LxcGpuPassthrough(StepKind[PassthroughParams]):
    """Pass every GPU plus nvidiactl/uvm/uvm-tools/modeset into the container (devN or raw lines)."""

    kind = "lxc.gpu_passthrough"
    title = "Pass the GPUs through to the container"
    Params = PassthroughParams
    _selection: DeviceSelection
    #: raw mode: how long to wait for PVE's config lock (/run/lock/lxc/pve-config-<vmid>.lock); PVE's own
    #: writers wait 10 s (AbstractConfig lock_config), a backup or migration holds it longer
    lock_wait_s: int = 60

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

    async def _running(self, ctx: StepContext) -> bool:
        result = await ctx.node.run(["pct", "status", str(ctx.vmid)], timeout=60, quiet=True)
        return result.ok and "status: running" in result.output

    async def _plan(self, ctx: StepContext) -> _Planned:
        inv = await ensure_inventory(ctx)
        mode = self._mode(ctx, inv)
        selection = device_selection(inv, self.params)
        self._selection = selection
        ctx.state.selected_gpus = [g.uuid for g in selection.gpus]
        devices = selection.devices
        uvm_missing = "/dev/nvidia-uvm" not in inv.device_nodes or "/dev/nvidia-uvm-tools" not in inv.device_nodes
        conf = await read_conf(ctx, ctx.vmid)
        out = _Planned(mode, devices, conf, uvm_missing)
        changes = out.changes
        if uvm_missing:
            changes.append("create /dev/nvidia-uvm and /dev/nvidia-uvm-tools on the host (nvidia-modprobe -u -c=0)")
        if "/dev/nvidia-modeset" in devices and "/dev/nvidia-modeset" not in inv.device_nodes:
            changes.append("create /dev/nvidia-modeset on the host (nvidia-modprobe -m; nvidia-modeset is loaded)")
        if mode == "dev":
            have = dev_paths(conf)
            missing = [d for d in devices if d not in have]
            if missing:
                changes.append(f"add devN entries for {', '.join(missing)} (mode {self.params.dev_mode})")
            # day-two drift: its own devN lines edited by hand (provisioner.drift names it the same way)
            changes += [f"drift: {line} → rewrite it" for line in mode_drift(conf, devices, self.params.dev_mode)]
            out.sets = dev_sets(conf, devices, self.params.dev_mode)
            out.running = await self._running(ctx)
            hotplug_new = tuple(inv.pve_release or (0, 0)) >= (9, 0)
            out.restart = pending_after(conf, out.sets, running=out.running, hotplug_new=hotplug_new,
                                        devices=devices)
            if out.restart:
                changes.append(restart_text(ctx.vmid, out.restart))
        elif inv.uvm_major is None:
            # nvidia-uvm is not loaded: its dynamic major is only known after nvidia-modprobe loads it.
            changes.append(f"add raw cgroup allow and bind-mount lines for {len(devices)} device nodes to "
                           f"{conf_path(ctx.vmid)} (backup first) once nvidia-uvm is loaded")
        else:
            lines = raw_lines_for(devices, inv)
            have_raw = set(conf.raw_lines())
            missing_raw = [f"{k}: {v}" for k, v in lines if (k, v) not in have_raw]
            stale = stale_allow_majors(conf, await self._char_majors(ctx))
            if stale:
                changes.append(f"drift: {conf_path(ctx.vmid)} allows stale device major(s) "
                               f"{', '.join(map(str, stale))} that no driver registers now (nvidia-uvm is "
                               f"{inv.uvm_major}) → remove them")
            if missing_raw:
                changes.append(f"add {len(missing_raw)} raw lines to {conf_path(ctx.vmid)} under PVE's config lock "
                               "(backup first; nvidia-uvm's major read again when applying): "
                               + "; ".join(missing_raw[:3]) + (" …" if len(missing_raw) > 3 else ""))
        return out

    async def _char_majors(self, ctx: StepContext) -> set[int]:
        ctx.facts.invalidate(ctx.node.name, "proc_devices")
        return set((await ctx.fact(ctx.node, catalog.PROC_DEVICES)).char.values())

    async def check(self, ctx: StepContext) -> Plan:
        planned = await self._plan(ctx)
        ctx.state.passthrough_devices = planned.devices
        inv = await ensure_inventory(ctx)
        notes = [f"mode {planned.mode}: {len(planned.devices)} device nodes"]
        sel = self._selection.gpus
        if len(sel) != len(inv.gpus) or any(inv.minor_of(g) != g.index for g in sel):
            notes.append("selected by device minor: " + ", ".join(
                f"GPU {g.index} = /dev/nvidia{inv.minor_of(g)} ({g.uuid})" for g in sel))
        notes += [f"skipped {n}" for n in self._selection.skipped_notes()]
        changes = planned.changes
        return Plan(changes=changes, notes=notes) if changes else Plan.no_change(*notes)

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        planned = await self._plan(ctx)
        if planned.uvm_missing or (await ensure_inventory(ctx)).uvm_major is None:
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
        planned = await self._plan(ctx)
        vmid = ctx.vmid
        if planned.mode == "dev":
            for key, value in planned.sets:
                # `pct set` runs as root@pam on the node: the only identity PVE lets set devN
                # (API tokens get 403). PVE writes it under its own config lock.
                await ctx.node.run(["pct", "set", str(vmid), f"--{key}", value], timeout=60, check=True)
            conf = await read_conf(ctx, vmid)
            pending = our_pending(conf, planned.devices)
            if pending and await self._running(ctx):
                yield ctx.info(restart_text(vmid, pending))
                await ctx.node.run(["pct", "reboot", str(vmid)], timeout=600, check=True)
        else:
            async for event in self._apply_raw(ctx):
                yield event

    async def _apply_raw(self, ctx: StepContext) -> AsyncIterator[Event]:
        """Raw lines under PVE's config lock (``PVE::LXC::Config->lock_config``: flock on
        /run/lock/lxc/pve-config-<vmid>.lock), so the GUI, the API and ``pct`` never interleave with this
        edit. nvidia-uvm's major is read now (not at plan time: it is dynamic), and the locked script writes
        only when the file and the major are still what this edit was computed from (else it retries)."""
        vmid = ctx.vmid
        path = conf_path(vmid)
        lock = f"/run/lock/lxc/pve-config-{vmid}.lock"
        # PVE::LXC::Config creates /run/lock/lxc when it loads (`mkdir $lockdir`); a fresh boot may not have it yet
        await ctx.node.run(["mkdir", "-p", "/run/lock/lxc"], timeout=30, check=True, quiet=True)
        for _attempt in range(3):
            ctx.facts.invalidate(ctx.node.name, "dev_nodes", "proc_devices")
            ctx.state.inventory = await gather_inventory(ctx)
            inv = await ensure_inventory(ctx)
            if inv.uvm_major is None:
                raise StepFailed("nvidia-uvm is not loaded on the host (/proc/devices has no nvidia-uvm)",
                                 fix="run `nvidia-modprobe -u -c=0` on the node, then replay")
            before = await read_conf_text(ctx, vmid)
            conf = LxcConfig.parse(before)
            for major in stale_allow_majors(conf, await self._char_majors(ctx)):
                conf.remove_raw("lxc.cgroup2.devices.allow", f"c {major}:* rwm")
                conf.remove_raw("lxc.cgroup.devices.allow", f"c {major}:* rwm")
            for key, value in raw_lines_for(device_selection(inv, self.params).devices, inv):
                conf.add_raw(key, value)
            stamp = time.strftime("%Y%m%dT%H%M%S")
            backup = f"{BACKUP_DIR}/{vmid}.conf.{stamp}"
            script = (
                'set -e; conf=$1; backup=$2; want_sha=$3; want_uvm=$4; tmp="$conf.tmp-provisioner.$$"\n'
                'have_sha=$(sha1sum "$conf" | cut -d" " -f1)\n'
                "have_uvm=$(awk '$2==\"nvidia-uvm\"{print $1; exit}' /proc/devices)\n"
                'if [ "$have_sha" != "$want_sha" ] || [ "$have_uvm" != "$want_uvm" ]; then exit 75; fi\n'
                'mkdir -p "$(dirname "$backup")"; cp -p "$conf" "$backup"\n'
                'cat > "$tmp" || { rm -f "$tmp"; exit 1; }\n'
                'mv -f "$tmp" "$conf"\n')
            digest = hashlib.sha1(before.encode()).hexdigest()  # noqa: S324 - PVE's config digest is SHA-1
            result = await ctx.node.run(
                ["flock", "-w", str(self.lock_wait_s), "-E", str(LOCK_TIMEOUT_EXIT), lock, "sh", "-c", script, "raw-edit", path, backup,
                 digest, str(inv.uvm_major)], stdin=conf.render().encode(), timeout=self.lock_wait_s + 60,
                quiet=False)
            if result.exit_status == 75:
                yield ctx.info(f"{path} or nvidia-uvm's major changed while this edit was prepared; again")
                continue
            if result.exit_status == LOCK_TIMEOUT_EXIT:
                raise StepFailed(f"PVE's config lock {lock} stayed taken for {self.lock_wait_s} s "
                                 f"(another edit of CT {vmid} runs: the GUI, the API, pct or a backup); "
                                 "nothing was written", result=result,
                                 fix="wait for the other task to finish, then replay")
            if not result.ok:
                raise StepFailed(f"writing {path} under PVE's config lock failed (exit {result.exit_status}): "
                                 + " ".join(result.tail(3)), result=result)
            yield ctx.info(f"backed up {path} to {backup}; wrote the raw lines under {lock} "
                           f"(nvidia-uvm major {inv.uvm_major})")
            return
        raise StepFailed(f"{path} kept changing while the raw lines were written (3 tries)",
                         fix="find what edits the config meanwhile, then replay")

    async def verify(self, ctx: StepContext) -> None:
        planned = await self._plan(ctx)
        if planned.changes:
            raise StepFailed("passthrough configuration incomplete after apply: " + "; ".join(planned.changes))


@dataclass
class _Planned:
    """What `_plan` found: the mode, the device nodes, the config read, the changes to list; in dev mode
    the `pct set` calls, whether the CT runs, and the devN values that would stay pending."""

    mode: str
    devices: list[str]
    conf: LxcConfig
    uvm_missing: bool
    changes: list[str] = field(default_factory=list)
    sets: list[tuple[str, str]] = field(default_factory=list)
    running: bool = False
    restart: dict[str, str] = field(default_factory=dict)


def dev_paths(conf: LxcConfig) -> set[str]:
    """Device paths of the devN entries the container gets at its next start."""
    return set(dev_entries(conf, effective=True))
