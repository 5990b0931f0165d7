"""Day-two events on the lab node (issue #15): a host reboot and a host driver upgrade.

``reboot(state)`` does what a Proxmox node's shutdown and boot do to the GPU side:
  * shutdown: every running container stops (pve-guests.service stops guests);
  * boot: nvidia.ko is loaded by udev from the GPU's PCI modalias; nvidia-uvm.ko is NOT (it is
    loaded lazily, by ``nvidia-modprobe -u`` or a CUDA client), and no ``/dev/nvidia*`` node
    exists until something runs nvidia-modprobe (NVIDIA README, "How and when are the NVIDIA
    device files created?"); persistence mode is Disabled again (it is per driver load);
    nvidia-fabricmanager.service (HGX) starts again unless the scenario holds it down;
  * the node's own enabled units (``/etc/systemd/system/multi-user.target.wants/*.service`` in
    the lab's /etc) ordered ``Before=pve-guests.service`` run their ``ExecStart=`` lines in the
    node view (systemd ordering);
  * then pve-guests.service runs ``pvesh create /nodes/<node>/startall``: containers with
    ``onboot: 1`` start ordered by ``startup: order=`` (unset = last), then by vmid
    (pve-manager ``PVE::API2::Nodes::get_start_stop_list`` and ``startall``), each start being
    the ordinary ``vm_start`` (so a devN whose node is missing fails with pve-container's
    ``Device <path> does not exist``, and the boot carries on with the next guest);
  * finally the units ordered after pve-guests run.

``upgrade_driver(state, version)`` replaces the host's kernel module: ``/sys/module/nvidia/version``
and ``/proc/driver/nvidia/version`` say `version`; containers keep their userspace, so NVML in
them reports ``Driver/library version mismatch`` (the lab's container ``nvidia-smi`` compares
its ``libnvidia-ml.so`` version with the host module's, as the real library does).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from provisioner.lab.profiles import get_profile
from provisioner.lab.state import LabState
from provisioner.proxmox.lxc_conf import parse_property_string

VERSION_RE = re.compile(r"^\d{3}\.\d{1,3}(?:\.\d{1,3})?$")
LONG_MAX = 2**63 - 1
UNIT_TIMEOUT_S = 300


@dataclass
class BootReport:
    """What the boot did, in order (what `provisioner lab reboot` prints)."""

    boot: int
    units_before_guests: list[tuple[str, int]] = field(default_factory=list)
    started: list[int] = field(default_factory=list)
    failed: list[tuple[int, str]] = field(default_factory=list)
    units_after_guests: list[tuple[str, int]] = field(default_factory=list)
    log: list[str] = field(default_factory=list)


def _unit_dir(state: LabState) -> Path:
    return state.root / "etc" / "systemd" / "system"


def parse_unit(text: str) -> dict[str, list[str]]:
    """A systemd unit file's `Key=value` lines as {key: [values]} (what the lab's boot and `systemctl` run)."""
    out: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";", "[")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out.setdefault(key.strip(), []).append(value.strip())
    return out


def enabled_units(state: LabState) -> list[tuple[str, dict[str, list[str]]]]:
    """Units the node enabled into multi-user.target (the lab's /etc only, never the machine's)."""
    wants = _unit_dir(state) / "multi-user.target.wants"
    units = []
    for link in sorted(wants.glob("*.service")) if wants.is_dir() else []:
        target = _unit_dir(state) / link.name
        try:
            text = target.read_text()
        except OSError:
            continue
        units.append((link.name, parse_unit(text)))
    return units


def _before_guests(unit: dict[str, list[str]]) -> bool:
    return any("pve-guests.service" in v.split() for v in unit.get("Before", []))


def run_unit(state: LabState, name: str, unit: dict[str, list[str]]) -> int:
    """Run a unit's ExecStart= lines one after another in the node view (a '-' prefix ignores failure)."""
    from provisioner.lab.commands import NODE_COMMANDS
    from provisioner.lab.sandbox import node_argv, node_env

    for line in unit.get("ExecStart", []):
        ignore = line.startswith("-")
        argv = shlex.split(line.lstrip("-@:+!"))
        if not argv:
            continue
        if os.path.basename(argv[0]) in NODE_COMMANDS and not os.path.exists(argv[0]):
            argv[0] = os.path.basename(argv[0])  # the lab's stand-in (first on the node's PATH)
        rc = subprocess.run(node_argv(state, argv), env=node_env(state), stdin=subprocess.DEVNULL,
                            capture_output=True, timeout=UNIT_TIMEOUT_S, check=False).returncode
        if rc != 0 and not ignore:
            return rc
    return 0


def run_unit_here(unit: dict[str, list[str]]) -> int:
    """Run a unit's ExecStart= lines in the current view (``systemctl start`` on the node)."""
    from provisioner.lab.commands import NODE_COMMANDS

    for line in unit.get("ExecStart", []):
        ignore = line.startswith("-")
        argv = shlex.split(line.lstrip("-@:+!"))
        if argv and os.path.basename(argv[0]) in NODE_COMMANDS and not os.path.exists(argv[0]):
            argv[0] = os.path.basename(argv[0])
        rc = subprocess.run(argv, stdin=subprocess.DEVNULL, check=False).returncode if argv else 0
        if rc != 0 and not ignore:
            return rc
    return 0


def start_order(state: LabState) -> list[int]:
    """vmids pve-guests starts at boot: onboot=1, by startup order= (unset = LONG_MAX), then vmid."""
    keyed = []
    for vmid in state.list_cts():
        conf = state.read_conf(vmid)
        if str(conf.get("onboot") or "0") not in ("1", "yes", "on", "true"):
            continue
        startup = conf.get("startup")
        order = LONG_MAX
        if startup:
            props = parse_property_string(str(startup), "order")
            if str(props.get("order", "")).isdigit():
                order = int(props["order"])
        keyed.append((order, vmid))
    return [vmid for _, vmid in sorted(keyed)]


def shutdown(state: LabState) -> list[int]:
    stopped = []
    for vmid in state.list_cts():
        if state.get_status(vmid).status == "running":
            state.set_status(vmid, "stopped")
            stopped.append(vmid)
    return stopped


def reboot(state: LabState) -> BootReport:
    """Reboot the lab node (see the module docstring)."""
    from provisioner.lab.pve_api import CLI_IDENTITY, LabApi
    from provisioner.lab.sandbox import write_node_files

    settings = state.settings()
    profile = get_profile(settings.profile)
    with state.lock():
        shutdown(state)
        new = state.update_settings(
            host_uvm_nodes=False, host_created_nodes=[], modeset_loaded=None, persistence=False,
            boots=settings.boots + 1,
            fabricmanager_active=profile.needs_fabric_manager and not state.has_scenario("fabricmanager-down"),
        )
    write_node_files(state)
    report = BootReport(boot=new.boots)
    units = enabled_units(state)
    for name, unit in units:
        if _before_guests(unit):
            rc = run_unit(state, name, unit)
            report.units_before_guests.append((name, rc))
            report.log.append(f"{name}: {'started' if rc == 0 else f'failed (exit {rc})'}")
    api = LabApi(state, sync_tasks=True)
    upid = state.new_task("startall", "", CLI_IDENTITY.user)
    lines = []
    for vmid in start_order(state):
        lines.append(f"Starting CT {vmid}")
        result = api.call("POST", f"/nodes/{new.node}/lxc/{vmid}/status/start", {}, CLI_IDENTITY)
        status = "OK"
        if result.status >= 400:
            status = (result.message or result.reason or "error").strip()
        elif isinstance(result.data, str) and (task := state.get_task(result.data)) is not None:
            status = str(task.exitstatus)
        if status == "OK":
            report.started.append(vmid)
        else:
            lines.append(f"Starting CT {vmid} failed: {status}")
            report.failed.append((vmid, status))
    state.finish_task(upid, "OK", lines)
    report.log.extend(lines)
    for name, unit in units:
        if not _before_guests(unit):
            rc = run_unit(state, name, unit)
            report.units_after_guests.append((name, rc))
            report.log.append(f"{name}: {'started' if rc == 0 else f'failed (exit {rc})'}")
    return report


def upgrade_driver(state: LabState, version: str) -> tuple[str, str]:
    """The host's kernel module becomes `version` (returns (old, new)); containers are not touched."""
    from provisioner.lab.sandbox import write_node_files

    if not VERSION_RE.match(version):
        raise ValueError(f"not an NVIDIA driver version: {version!r} (e.g. 595.82.01)")
    with state.lock():
        old = state.settings().driver_version
        # a new module load: persistence mode starts Disabled again
        state.update_settings(driver_version=version, persistence=False)
    write_node_files(state)
    return old, version
