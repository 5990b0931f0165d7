"""`lxc.boot_persistence`: the passed GPUs and the container survive a host reboot.

A Proxmox node boots with nvidia.ko loaded (udev, PCI modalias) but with no ``/dev/nvidia*`` node and
nvidia-uvm not loaded (it loads lazily); ``pve-guests.service`` then starts the ``onboot`` containers,
and a devN entry whose node is missing fails the start (pve-container: ``Device /dev/nvidia-uvm does
not exist``). This step installs a oneshot unit ordered ``Before=pve-guests.service`` that creates
every passed node (``nvidia-modprobe -u -c=0`` for nvidia-uvm/-tools, ``nvidia-modprobe -m`` for
nvidia-modeset when passed, ``nvidia-smi`` for nvidiactl and the GPU nodes) and sets persistence mode
(``nvidia-smi -pm 1``); why a unit rather than udev rules: docs/boot-persistence.md.

It also sets ``onboot`` on the container when the playbook asks, and writes the provisioning record
(`provisioner.drift.Manifest`) that drift checks compare against. A changed unit is backed up before
it is rewritten; ``state: absent`` disables and removes the unit (backup kept). Its plan names the
drift it repairs: a missing/changed/disabled unit, missing device nodes, a changed onboot.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Literal

from pydantic import Field

from provisioner import drift
from provisioner.events import Event
from provisioner.facts import catalog, evidence
from provisioner.facts.base import Fact
from provisioner.facts.models import RawText
from provisioner.steps.base import Params, Plan, StepFailed, StepKind, register
from provisioner.steps.context import StepContext
from provisioner.steps.gpu_common import PassthroughParams, wanted_devices
from provisioner.steps.lxc_common import BACKUP_DIR, conf_path, ensure_inventory
from provisioner.steps.state import HostInventory


class BootParams(Params):
    state: Literal["present", "absent"] = Field("present", description="absent: disable and remove the boot unit")
    persistence_mode: bool = Field(True, description="The unit also runs `nvidia-smi -pm 1` at boot")
    onboot: bool | None = Field(None, description="Start the container at boot (onboot: 1); unset: leave as is")


def passed_devices(ctx: StepContext, inv: HostInventory) -> list[str]:
    """The passthrough step's device nodes (its check ran earlier in this run), else every GPU's."""
    if ctx.state.passthrough_devices:
        return list(ctx.state.passthrough_devices)
    return wanted_devices(inv, PassthroughParams.model_validate(_passthrough_params(ctx)))


def _passthrough_params(ctx: StepContext) -> dict[str, object]:
    for spec in ctx.playbook.steps:
        if spec.kind == "lxc.gpu_passthrough":
            return dict(spec.params)
    return {}


#: the evidence facts the step reads, the same `drift.gather` reads for `plan --check`, the wizard's
#: Summary and `diagnose --host`
OWN_FACTS = (evidence.BOOT_UNIT_FILE, evidence.BOOT_UNIT_ENABLED, evidence.LXC_CONFIG_FILE,
             evidence.PROVISIONING_MANIFEST)


async def _text(ctx: StepContext, fact: Fact[RawText]) -> str | None:
    return await evidence.text(ctx.facts, ctx.node, fact, ctx.vmid)


def _forget(ctx: StepContext, *also: str) -> None:
    """Drop the cached values of the facts this step reads (and the facts named in `also`) on the node,
    so that the next read probes again."""
    names = [evidence.bind(f, ctx.vmid, None).name for f in OWN_FACTS]
    ctx.facts.invalidate(ctx.node.name, *names, *also)


class _Observed:
    """What the check read (unit, enabled, conf, nodes, record), and the plan derived from it."""

    def __init__(self) -> None:
        self.unit_text: str | None = None
        self.enabled = False
        self.missing: list[str] = []
        self.onboot: bool = False
        self.conf_exists = False
        self.record: drift.Manifest | None = None
        self.want_record: drift.Manifest | None = None
        self.vanished: list[drift.DriftFinding] = []


@register
class LxcBootPersistence(StepKind[BootParams]):
    """Install the boot unit that recreates the passed device nodes before pve-guests; onboot; the record."""

    kind = "lxc.boot_persistence"
    title = "Make the GPUs and the container survive a host reboot"
    Params = BootParams
    # what apply changes: the node's device nodes, and the evidence facts it reads (`OWN_FACTS`; those
    # bound to the container id are forgotten by `_forget`, a class-level name cannot carry the id)
    invalidates = ("dev_nodes", "proc_devices", evidence.BOOT_UNIT_FILE.name, evidence.BOOT_UNIT_ENABLED.name)

    async def _observe(self, ctx: StepContext) -> tuple[_Observed, list[str]]:
        obs = _Observed()
        inv = await ensure_inventory(ctx)
        devices = passed_devices(ctx, inv)
        node = ctx.node
        obs.unit_text = await _text(ctx, evidence.BOOT_UNIT_FILE)
        obs.enabled = await _text(ctx, evidence.BOOT_UNIT_ENABLED) is not None
        conf_text = await _text(ctx, evidence.LXC_CONFIG_FILE)
        obs.conf_exists = conf_text is not None
        if conf_text is not None:
            from provisioner.proxmox.lxc_conf import LxcConfig

            conf = LxcConfig.parse(conf_text)
            obs.onboot = str(conf.get("onboot") or "0") in ("1", "yes", "on", "true")
            mode = "dev" if drift.dev_entries(conf) else "raw"
        else:
            mode = "dev"
        obs.record = drift.parse_manifest(await _text(ctx, evidence.PROVISIONING_MANIFEST) or "")
        changes: list[str] = []
        p = self.params
        pt = _passthrough_params(ctx)
        by_index = {f"/dev/nvidia{g.index}": g for g in inv.gpus}
        gpus = [drift.ManifestGpu(index=by_index[d].index, uuid=by_index[d].uuid) for d in devices if d in by_index]
        obs.want_record = drift.Manifest(
            vmid=ctx.vmid, devices=devices, dev_mode=str(pt.get("dev_mode", "0666")),
            passthrough="raw" if mode == "raw" else "dev", gpus=gpus,
            onboot=p.onboot if p.onboot is not None else (obs.record.onboot if obs.record else None),
            unit=drift.UNIT_NAME if p.state == "present" else "", persistence_mode=p.persistence_mode)
        if p.state == "absent":
            if obs.unit_text is not None or obs.enabled:
                changes.append(f"disable and remove boot unit {drift.UNIT_NAME} (backup to {BACKUP_DIR})")
        else:
            # "drift:" once the host was provisioned (its record exists); a first run just installs
            tag = "drift: " if obs.record is not None else ""
            for finding in drift.boot_unit_drift(obs.unit_text, drift.render_unit(devices, p.persistence_mode),
                                                 obs.enabled):
                changes.append(f"{tag}{finding.text} → install it" if obs.unit_text is None else
                               f"{tag}{finding.text} → rewrite/enable it (backup first)")
            present = {n.path for n in (await ctx.fact(node, catalog.DEV_NODES)).nodes}
            obs.missing = drift.missing_nodes(devices, present)
            if obs.missing:
                changes.append(f"{tag}device nodes missing on the host: {', '.join(obs.missing)} → create them "
                               f"now (systemctl restart {drift.UNIT_NAME})")
        if p.onboot and not obs.conf_exists:
            changes.append(f"set onboot 1 on CT {ctx.vmid} once it exists: pct set {ctx.vmid} --onboot 1")
        if p.onboot is not None and obs.conf_exists and obs.onboot != p.onboot:
            changes.append(f"{'drift: ' if obs.record is not None else ''}"
                           f"set onboot {int(p.onboot)} on CT {ctx.vmid} (now {int(obs.onboot)}): "
                           f"pct set {ctx.vmid} --onboot {int(p.onboot)}")
        if obs.record is not None:
            obs.vanished = drift.gpus_drift(obs.record.gpus, [(g.index, g.uuid) for g in inv.gpus])
            changes += [f"drift: {f.text}" for f in obs.vanished]
        if obs.record != obs.want_record:
            changes.append(f"write the provisioning record {drift.manifest_path(ctx.vmid)}")
        if not obs.conf_exists and ctx.mode != "plan":
            raise StepFailed(f"CT {ctx.vmid} config {conf_path(ctx.vmid)} does not exist", fix="run lxc.create first")
        return obs, changes

    async def check(self, ctx: StepContext) -> Plan:
        _forget(ctx)  # earlier steps (lxc.create, lxc.gpu_passthrough) or a person may have changed them
        _, changes = await self._observe(ctx)
        note = (f"boot unit {drift.UNIT_NAME} (Before=pve-guests.service)" if self.params.state == "present"
                else f"no boot unit {drift.UNIT_NAME}")
        return Plan(changes=changes, notes=[note]) if changes else Plan.no_change(note)

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        obs, _ = await self._observe(ctx)
        if obs.vanished:
            raise StepFailed("; ".join(f.text for f in obs.vanished),
                             fix="check the node (`nvidia-smi -L`; a GPU fallen off the bus shows in dmesg as Xid 79);"
                                 f" to accept the new GPU set, remove {drift.manifest_path(ctx.vmid)} and replay")
        node = ctx.node
        p = self.params
        stamp = time.strftime("%Y%m%dT%H%M%S")
        inv = await ensure_inventory(ctx)
        devices = passed_devices(ctx, inv)
        want = drift.render_unit(devices, p.persistence_mode)
        if obs.unit_text is not None and (p.state == "absent" or obs.unit_text != want):
            await node.run(["mkdir", "-p", BACKUP_DIR], timeout=30, check=True)
            backup = f"{BACKUP_DIR}/{drift.UNIT_NAME}.{stamp}"
            await node.run(["cp", "-p", drift.UNIT_PATH, backup], timeout=30, check=True)
            yield ctx.info(f"backed up {drift.UNIT_PATH} to {backup}")
        if p.state == "absent":
            if obs.enabled or obs.unit_text is not None:
                await node.run(["systemctl", "disable", drift.UNIT_NAME], timeout=60, check=False)
                await node.run(["rm", "-f", drift.UNIT_PATH], timeout=30, check=True)
                await node.run(["systemctl", "daemon-reload"], timeout=60, check=True)
                yield ctx.info(f"removed {drift.UNIT_NAME}")
        else:
            if obs.unit_text != want:
                await node.write_file(drift.UNIT_PATH, want.encode(), mode=0o644, timeout=30, quiet=False)
                await node.run(["systemctl", "daemon-reload"], timeout=60, check=True)
                yield ctx.info(f"installed {drift.UNIT_PATH}")
            if not obs.enabled:
                await node.run(["systemctl", "enable", drift.UNIT_NAME], timeout=60, check=True)
            if obs.missing or obs.unit_text != want:
                yield ctx.info(f"running {drift.UNIT_NAME} now (creates the passed device nodes)")
                await node.run(["systemctl", "restart", drift.UNIT_NAME], timeout=300, check=True)
                ctx.facts.invalidate(node.name, "dev_nodes", "proc_devices")
        if p.onboot is not None and obs.conf_exists and obs.onboot != p.onboot:
            await node.run(["pct", "set", str(ctx.vmid), "--onboot", str(int(p.onboot))], timeout=60, check=True)
        if obs.want_record is not None and obs.record != obs.want_record:
            await node.run(["mkdir", "-p", drift.MANIFEST_DIR], timeout=30, check=True)
            await node.write_file(drift.manifest_path(ctx.vmid), obs.want_record.render().encode(), mode=0o644,
                                  timeout=30, quiet=True)
        _forget(ctx)  # what apply wrote (unit, enablement, onboot, record)

    async def verify(self, ctx: StepContext) -> None:
        _forget(ctx, "dev_nodes", "proc_devices")
        _, changes = await self._observe(ctx)
        if changes:
            raise StepFailed("boot persistence incomplete after apply: " + "; ".join(changes),
                             fix=f"check `systemctl status {drift.UNIT_NAME}` on the node")
