"""``systemctl`` stand-in on the lab node: the node's GPU-related units, never the real machine's systemd.

Known units: ``nvidia-fabricmanager.service`` (installed on HGX profiles only; active unless the
scenario ``fabricmanager-down`` or a ``stop`` holds it down), ``pve-guests.service`` (active) and
every unit file the node has in the lab's ``/etc/systemd/system``. ``enable``/``disable`` make or
remove the ``multi-user.target.wants`` link (in the lab's /etc overlay), ``start`` of a lab unit
runs its ExecStart= lines (`provisioner.lab.day2.run_unit`). Exit codes as systemctl's:
``is-active`` 0 active / 3 inactive, ``is-enabled`` 0 / 1, status of an unknown unit 4.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from provisioner.lab.commands._common import die, out, state
from provisioner.lab.profiles import get_profile
from provisioner.lab.state import LabState

FM = "nvidia-fabricmanager.service"


def _name(unit: str) -> str:
    return unit if "." in unit else unit + ".service"


def _unit_dir(lab: LabState) -> Path:
    return lab.root / "etc" / "systemd" / "system"


def _exists(lab: LabState, unit: str) -> bool:
    if unit == FM:
        return get_profile(lab.settings().profile).needs_fabric_manager
    return unit == "pve-guests.service" or (_unit_dir(lab) / unit).is_file()


def _active(lab: LabState, unit: str) -> bool:
    if unit == FM:
        return _exists(lab, unit) and lab.settings().fabricmanager_active
    if unit == "pve-guests.service":
        return True
    return (lab.root / "run" / "units" / unit).exists()


def _wants(lab: LabState, unit: str) -> Path:
    return _unit_dir(lab) / "multi-user.target.wants" / unit


def main(argv: list[str] | None = None) -> int:
    args = [a for a in (sys.argv[1:] if argv is None else argv) if a not in ("--quiet", "-q", "--no-pager")]
    now = "--now" in args
    args = [a for a in args if a != "--now"]
    if not args:
        die("LAB systemctl: a command is needed", 1)
    lab = state()
    cmd, units = args[0], [_name(u) for u in args[1:]]
    if cmd == "daemon-reload":
        return 0
    if not units:
        die("Too few arguments.", 1)
    rc = 0
    for unit in units:
        if cmd == "is-active":
            active = _active(lab, unit)
            out("active\n" if active else "inactive\n")
            rc = rc or (0 if active else 3)
        elif cmd == "is-enabled":
            if not _exists(lab, unit):
                out("not-found\n")
                rc = rc or 4
                continue
            enabled = unit in (FM, "pve-guests.service") or _wants(lab, unit).exists()
            out("enabled\n" if enabled else "disabled\n")
            rc = rc or (0 if enabled else 1)
        elif cmd in ("enable", "disable"):
            if not _exists(lab, unit):
                die(f"Failed to {cmd} unit: Unit file {unit} does not exist.", 1)
            link = _wants(lab, unit)
            if cmd == "enable" and unit not in (FM, "pve-guests.service") and not link.exists():
                link.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(f"/etc/systemd/system/{unit}", link)
                sys.stderr.write(f"Created symlink '/etc/systemd/system/multi-user.target.wants/{unit}' → "
                                 f"'/etc/systemd/system/{unit}'.\n")
            elif cmd == "disable" and link.is_symlink():
                link.unlink()
                sys.stderr.write(f"Removed '/etc/systemd/system/multi-user.target.wants/{unit}'.\n")
            if now:
                rc = rc or _start_stop(lab, "start" if cmd == "enable" else "stop", unit)
        elif cmd in ("start", "stop", "restart"):
            rc = rc or _start_stop(lab, cmd, unit)
        elif cmd == "status":
            if not _exists(lab, unit):
                sys.stderr.write(f"Unit {unit} could not be found.\n")
                rc = rc or 4
                continue
            active = _active(lab, unit)
            state_text = "active (running)" if active else "inactive (dead)"
            out(f"{'●' if active else '○'} {unit} - LAB {unit}\n     Active: {state_text}\n")
            rc = rc or (0 if active else 3)
        else:
            die(f"LAB systemctl: unsupported command {cmd!r}", 1)
    return rc


def _start_stop(lab: LabState, cmd: str, unit: str) -> int:
    if not _exists(lab, unit):
        sys.stderr.write(f"Failed to {cmd} {unit}: Unit {unit} not found.\n")
        return 5
    if unit == FM:
        lab.update_settings(fabricmanager_active=cmd != "stop")
        return 0
    marker = lab.root / "run" / "units" / unit
    if cmd == "stop":
        marker.unlink(missing_ok=True)
        return 0
    from provisioner.lab.day2 import parse_unit, run_unit_here

    rc = run_unit_here(parse_unit((_unit_dir(lab) / unit).read_text()))
    if rc == 0:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("LAB\n")
    else:
        sys.stderr.write(f"Job for {unit} failed because the control process exited with error code.\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
