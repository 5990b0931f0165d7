"""Day-two drift: what changed on a provisioned host since the playbook ran (issue #15).

One module, used by `plan --check` (the steps that repair a finding name it in their plan), by
`diagnose --host` and by the wizard's Summary page, so all three report the same findings from the
same facts:

* ``driver``  — container userspace (``libnvidia-ml.so.<v>``) differs from the host kernel module,
  at patch level too (NVML: "Driver/library version mismatch"); repaired by ``driver.userspace``;
* ``nodes``   — passed device nodes missing on the host (after a reboot ``nvidia-uvm`` is loaded
  lazily and no ``/dev/nvidia*`` exists until nvidia-modprobe/nvidia-smi run); repaired by
  ``lxc.boot_persistence`` (it starts its unit, which creates them);
* ``boot_unit`` — the boot unit that recreates them is missing, changed or disabled
  (``lxc.boot_persistence``);
* ``config``  — the container config changed by hand away from what the playbook wrote: a passed
  devN entry removed or its mode changed, ``onboot`` changed (``lxc.gpu_passthrough`` /
  ``lxc.boot_persistence`` rewrite their own lines);
* ``gpus``    — GPUs that vanished since provisioning (count or UUIDs), against the record the
  provisioning left on the node (`MANIFEST_DIR`); nothing can repair that remotely;
* ``container`` — the container is not running (e.g. its start at boot failed).

Facts are gathered by `gather` (a command plus a pure parser each); every check below is pure.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from provisioner.facts import evidence
from provisioner.proxmox.lxc_conf import LxcConfig, parse_property_string

DriftKind = Literal["driver", "nodes", "boot_unit", "config", "gpus", "container"]

UNIT_NAME = evidence.BOOT_UNIT_NAME
UNIT_PATH = evidence.BOOT_UNIT_PATH

UNIT_HEADER = (
    "# Managed by gpu-provisioner (step lxc.boot_persistence): creates the NVIDIA device nodes passed to\n"
    "# containers before pve-guests.service starts them. Remove: replay the step with `state: absent`, or\n"
    f"#   systemctl disable --now {UNIT_NAME} && rm {UNIT_PATH}\n"
)


def render_unit(devices: list[str], persistence_mode: bool = True) -> str:
    """The unit for the passed `devices` (systemd.unit(5): Before= orders this unit's start before
    pve-guests.service when both are started in one transaction, i.e. at boot)."""
    lines = [UNIT_HEADER.rstrip("\n"), "[Unit]",
             "Description=NVIDIA device nodes for GPU containers (gpu-provisioner)",
             "After=systemd-modules-load.service", "Before=pve-guests.service", "",
             "[Service]", "Type=oneshot", "RemainAfterExit=yes",
             "ExecStart=/usr/bin/nvidia-modprobe -u -c=0"]
    if "/dev/nvidia-modeset" in devices:
        lines.append("ExecStart=/usr/bin/nvidia-modprobe -m")
    lines.append("ExecStart=/usr/bin/nvidia-smi")
    if persistence_mode:
        lines.append("ExecStart=/usr/bin/nvidia-smi -pm 1")
    lines += ["", "[Install]", "WantedBy=multi-user.target"]
    return "\n".join(lines) + "\n"


MANIFEST_DIR = evidence.MANIFEST_DIR


def manifest_path(vmid: int) -> str:
    return f"{MANIFEST_DIR}/ct{vmid}.json"


@dataclass(frozen=True)
class DriftFinding:
    """One drift: what it is about, the sentence naming it, and the step kind that repairs it ('' = none)."""

    kind: DriftKind
    text: str
    repair: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "text": self.text, "repair": self.repair}


class ManifestGpu(BaseModel):
    """A GPU passed at provisioning: its index then and its UUID (which outlives a renumbering)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    index: int
    uuid: str = ""


class Manifest(BaseModel):
    """What provisioning left on the node for CT `vmid` (written by `lxc.boot_persistence`): the passed
    device nodes and their devN mode, the GPUs passed (index, UUID), whether the CT starts at boot."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    vmid: int
    devices: list[str]
    dev_mode: str = "0666"
    passthrough: Literal["dev", "raw"] = "dev"
    gpus: list[ManifestGpu] = []
    onboot: bool | None = None
    unit: str = UNIT_NAME  # "" = the playbook removed the boot unit (state: absent)
    persistence_mode: bool = True

    def render(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def parse_manifest(text: str) -> Manifest | None:
    """The manifest file's content (None when absent or not ours)."""
    if not text.strip():
        return None
    try:
        return Manifest.model_validate(json.loads(text))
    except (ValueError, TypeError):
        return None


# --- pure checks ---------------------------------------------------------------------------------


def driver_drift(host_module: str, userspace: list[str], vmid: int) -> list[DriftFinding]:
    """Userspace must equal the host module exactly (NVML compares the full version string)."""
    if not userspace or userspace == [host_module]:
        return []
    return [DriftFinding("driver", f"CT {vmid} userspace {', '.join(userspace)} ≠ host kernel module {host_module} "
                                   "(NVML: Driver/library version mismatch)", "driver.userspace")]


def missing_nodes(wanted: list[str], present: set[str]) -> list[str]:
    return [d for d in wanted if not d.startswith("/dev/nvidia-caps/") and d not in present]


def nodes_drift(wanted: list[str], present: set[str]) -> list[DriftFinding]:
    missing = missing_nodes(wanted, present)
    if not missing:
        return []
    return [DriftFinding("nodes", f"device nodes missing on the host: {', '.join(missing)}", "lxc.boot_persistence")]


def boot_unit_drift(text: str | None, expected: str, enabled: bool) -> list[DriftFinding]:
    if text is None:
        return [DriftFinding("boot_unit", f"boot unit {UNIT_NAME} is not installed: after a reboot the passed "
                                          "device nodes are missing before pve-guests starts containers",
                             "lxc.boot_persistence")]
    out = []
    if text != expected:
        out.append(DriftFinding("boot_unit", f"boot unit {UNIT_PATH} was changed by hand", "lxc.boot_persistence"))
    if not enabled:
        out.append(DriftFinding("boot_unit", f"boot unit {UNIT_NAME} is not enabled", "lxc.boot_persistence"))
    return out


def dev_entries(conf: LxcConfig, *, effective: bool = False) -> dict[str, tuple[int, dict[str, str]]]:
    """devN entries of the config by device path: path -> (index, properties). `effective`: of the config
    the container gets at its next start (``[pve:pending]`` applied), not of the main section."""
    out: dict[str, tuple[int, dict[str, str]]] = {}
    if effective:
        items = sorted((int(k[3:]), v) for k, v in conf.effective().items() if re.fullmatch(r"dev\d+", k))
    else:
        items = sorted(conf.indexed("dev").items())
    for index, value in items:
        props = parse_property_string(value, "path")
        if "path" in props:
            out.setdefault(props["path"], (index, props))
    return out


def stale_allow_majors(conf: LxcConfig, char_majors: set[int]) -> list[int]:
    """Majors of ``c MAJOR:* rwm`` allow lines that no character driver of the node registers any more
    (/proc/devices): what a changed nvidia-uvm major (dynamic; it moves after kernel updates:
    jammsen/proxmox-setup-scripts#7) leaves behind. Only for configs with a raw bind mount of
    /dev/nvidia-uvm (raw passthrough)."""
    mounted = {v.split()[0] for _, v in conf.raw_lines("lxc.mount.entry") if v.split()}
    if "/dev/nvidia-uvm" not in mounted:
        return []
    out: list[int] = []
    for key, value in conf.raw_lines():
        if key not in ("lxc.cgroup2.devices.allow", "lxc.cgroup.devices.allow"):
            continue
        m = re.fullmatch(r"c (\d+):\* rwm", value.strip())
        if m and int(m.group(1)) not in char_majors and int(m.group(1)) not in out:
            out.append(int(m.group(1)))
    return out


def config_drift(conf: LxcConfig, manifest: Manifest, char_majors: dict[str, int] | None = None
                 ) -> list[DriftFinding]:
    """The CT config against what provisioning wrote (the manifest): passed devN entries removed or with
    another mode (in the config the container gets at its next start: a value waiting in ``[pve:pending]``
    counts, and is named so), `onboot` changed; in raw mode an allow line for a device major no driver
    registers now (`char_majors`: /proc/devices' character devices)."""
    out: list[DriftFinding] = []
    vmid = manifest.vmid
    if manifest.passthrough == "dev":
        have = dev_entries(conf, effective=True)
        pending = conf.pending()
        gone = [d for d in manifest.devices if d not in have and not d.startswith("/dev/nvidia-caps/")]
        if gone:
            out.append(DriftFinding("config", f"CT {vmid} config: devN entries for {', '.join(gone)} were removed",
                                    "lxc.gpu_passthrough"))
        for dev in manifest.devices:
            if dev in have:
                index, props = have[dev]
                mode = props.get("mode", "")
                where = " pending in [pve:pending] (applies at the next restart)" if f"dev{index}" in pending else ""
                if mode != manifest.dev_mode:
                    out.append(DriftFinding("config", f"CT {vmid} config: dev{index} ({dev}) has mode "
                                                      f"{mode or 'unset'}{where}, the playbook wrote "
                                                      f"{manifest.dev_mode}", "lxc.gpu_passthrough"))
    else:
        mounted = {v.split()[0] for k, v in conf.raw_lines("lxc.mount.entry") if v.split()}
        gone = [d for d in manifest.devices if d not in mounted and not d.startswith("/dev/nvidia-caps/")]
        if gone:
            out.append(DriftFinding("config", f"CT {vmid} config: bind-mount lines for {', '.join(gone)} were "
                                              "removed", "lxc.gpu_passthrough"))
        if char_majors is not None:
            stale = stale_allow_majors(conf, set(char_majors.values()))
            if stale:
                uvm = char_majors.get("nvidia-uvm")
                out.append(DriftFinding(
                    "config", f"CT {vmid} config: lxc.cgroup2.devices.allow names device major(s) "
                              f"{', '.join(map(str, stale))} that no driver registers now (nvidia-uvm is "
                              f"{uvm if uvm is not None else 'not loaded'}: its major changed, e.g. after a kernel "
                              "update); CUDA in the container fails until the line names the new major",
                    "lxc.gpu_passthrough"))
    if manifest.onboot is not None:
        onboot = str(conf.get("onboot") or "0") in ("1", "yes", "on", "true")
        if onboot != manifest.onboot:
            out.append(DriftFinding("config", f"CT {vmid} config: onboot is {int(onboot)}, the playbook wrote "
                                              f"{int(manifest.onboot)}", "lxc.boot_persistence"))
    return out


def gpus_drift(recorded: list[ManifestGpu], current: list[tuple[int, str]]) -> list[DriftFinding]:
    """GPUs passed at provisioning (UUIDs) that the node no longer lists, or a changed count."""
    if not recorded:
        return []
    now = {uuid for _, uuid in current}
    gone = [g for g in recorded if g.uuid not in now]
    out = []
    if len(current) < len(recorded) or gone:
        what = ", ".join(f"GPU {g.index} {g.uuid}" for g in gone)
        out.append(DriftFinding("gpus", f"GPUs vanished: provisioned {len(recorded)}, the node lists {len(current)}"
                                        + (f"; gone: {what}" if what else ""), ""))
    return out


def container_drift(vmid: int, status: str) -> list[DriftFinding]:
    if status == "running":
        return []
    return [DriftFinding("container", f"CT {vmid} is {status}", "lxc.start")]


# --- gathering the facts -------------------------------------------------------------------------


@dataclass
class DriftReport:
    """All findings for one container on one host, plus what could not be checked (and why)."""

    host: str
    vmid: int
    findings: list[DriftFinding] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict[str, object]:
        return {"host": self.host, "vmid": self.vmid, "findings": [f.to_dict() for f in self.findings],
                "unchecked": list(self.unchecked)}


_fact_text = evidence.text  # the text of an evidence fact read through the cache; None when its command fails


async def gather(node: Any, vmid: int, *, host: str = "", facts: Any = None) -> DriftReport:
    """Every drift check for CT `vmid` on `node`, from the node's and the container's facts.

    Needs only the node transport (the SSH login `diagnose --host` and the wizard already have) and the
    manifest provisioning left on the node; without a manifest the checks that need it say so."""
    from provisioner.facts import catalog
    from provisioner.facts.base import FactCache, FactUnavailable
    from provisioner.transport.container import ContainerTransport

    cache = facts if facts is not None else FactCache()
    report = DriftReport(host=host or getattr(node, "name", ""), vmid=vmid)
    manifest = parse_manifest(await _fact_text(cache, node, evidence.PROVISIONING_MANIFEST, vmid) or "")
    # Device nodes first: the node's nvidia-smi (the GPU fact) creates missing GPU nodes as it runs.
    nodes = await cache.get(node, catalog.DEV_NODES)
    present = {n.path for n in nodes.nodes}
    try:
        module = await cache.get(node, catalog.MODULE_VERSION)
    except FactUnavailable:
        module = None
    if manifest is None:
        report.unchecked.append(f"no provisioning record {manifest_path(vmid)} on the node: device nodes, config "
                                "and GPU set are not compared")
    else:
        report.findings += nodes_drift(manifest.devices, present)
        if manifest.unit:
            unit_text = await _fact_text(cache, node, evidence.BOOT_UNIT_FILE, vmid)
            enabled = await _fact_text(cache, node, evidence.BOOT_UNIT_ENABLED, vmid)
            report.findings += boot_unit_drift(unit_text, render_unit(manifest.devices, manifest.persistence_mode),
                                               enabled is not None)
        conf_text = await _fact_text(cache, node, evidence.LXC_CONFIG_FILE, vmid)
        if conf_text is None:
            report.findings.append(DriftFinding("container", f"CT {vmid} no longer exists on the node", ""))
            return report
        try:
            char_majors: dict[str, int] | None = dict((await cache.get(node, catalog.PROC_DEVICES)).char)
        except FactUnavailable:
            char_majors = None
        report.findings += config_drift(LxcConfig.parse(conf_text), manifest, char_majors)
        try:
            gpus = await cache.get(node, catalog.GPUS)
            report.findings += gpus_drift(manifest.gpus, [(g.index, g.uuid) for g in gpus])
        except FactUnavailable as exc:
            report.findings.append(DriftFinding("gpus", f"nvidia-smi on the node fails: {exc.reason}", ""))
    status = await _fact_text(cache, node, evidence.PCT_STATE, vmid)
    state = status.split(":", 1)[1].strip() if status is not None and ":" in status else "unknown"
    report.findings += container_drift(vmid, state)
    if state == "running" and module:
        try:
            libs = await cache.get(ContainerTransport(node, vmid), catalog.USERSPACE_LIBS)
        except FactUnavailable as exc:
            report.unchecked.append(f"userspace libraries in CT {vmid}: {exc.reason}")
        else:
            report.findings += driver_drift(module, list(libs.versions), vmid)
    elif module is None:
        report.unchecked.append("no NVIDIA kernel module version on the host (/sys/module/nvidia/version)")
    return report
