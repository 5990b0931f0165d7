"""Drive container steps through the real engine on this machine, without Proxmox.

The node is a `LocalTransport`; the container transport wraps every command as
`pct exec <vmid> -- bash -lc <script>`, so a test-only `pct` script on the node's PATH runs it here.
The real `pct` (and real containers) are covered by the lab end-to-end tests; this stand-in only
checks the wrapping and executes. `bash -lc` runs as `bash -c`: a login shell would source this
machine's /etc/profile, which resets PATH to the system default.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.events import Bus, Event, PlanReady, StepFinished
from provisioner.facts.models import Gpu
from provisioner.playbook import Playbook
from provisioner.runlog import Recorder
from provisioner.runner import HostResult, run_host
from provisioner.session import with_settings
from provisioner.steps.state import GpuDetection, HostInventory, RunState
from provisioner.transport.local import LocalTransport

FAKE_PCT = r"""#!/bin/sh
# Test-only stand-in for Proxmox's pct: exec runs the command here, push copies.
printf '%s %s %s %s %s\n' "$1" "$2" "$3" "$4" "$5" >> "$FAKE_PCT_LOG"
sub=$1; shift
case "$sub" in
  exec)
    vmid=$1; shift
    [ "$1" = "--" ] || { echo "pct stand-in: expected -- after vmid $vmid" >&2; exit 2; }
    shift
    if [ "$1" = "bash" ] && [ "$2" = "-lc" ] && [ $# -eq 3 ]; then exec bash -c "$3"; fi
    exec "$@" ;;
  push)
    shift; cp "$1" "$2"
    if [ "$3" = "--perms" ]; then chmod "$4" "$2"; fi ;;
  *) echo "pct stand-in: unsupported subcommand $sub" >&2; exit 2 ;;
esac
"""

# Two GPUs as `nvidia-smi --query-gpu=...` reports them on the reference host (RTX PRO 6000 Blackwell, CC 12.0).
REFERENCE_GPU = {"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "compute_cap": "12.0",
                 "driver_version": "595.71.05", "memory_mib": 97887}


def reference_gpus(count: int, compute_cap: str = "12.0", driver: str = "595.71.05") -> list[dict[str, Any]]:
    return [{**REFERENCE_GPU, "index": i, "uuid": f"GPU-5b1c7a2e-0d3f-4e71-9a0c-1f2e3d4c5b{i:02d}",
             "pci_bus_id": f"00000000:{0x17 + 0x10 * i:02X}:00.0", "compute_cap": compute_cap,
             "driver_version": driver} for i in range(count)]


def real_uv() -> str | None:
    """The uv executable itself (a pyenv shim would need pyenv on PATH)."""
    found = shutil.which("uv")
    if found is None:
        return None
    if "/shims/" in found and shutil.which("pyenv"):
        out = subprocess.run(["pyenv", "which", "uv"], capture_output=True, text=True, check=False)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    return os.path.realpath(found)


def base_python() -> str:
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


@dataclass
class Node:
    """A fake node: a bin directory with `pct`, `python3` (and `uv` unless left out) and an environment."""

    root: Path
    with_uv: bool = True
    extra_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.bin = self.root / "node-bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        (self.bin / "pct").write_text(FAKE_PCT)
        (self.bin / "pct").chmod(0o755)
        for name in ("python3", f"python{sys.version_info.major}.{sys.version_info.minor}"):
            link = self.bin / name
            if not link.exists():
                link.symlink_to(base_python())
        uv = real_uv()
        if self.with_uv and uv and not (self.bin / "uv").exists():
            (self.bin / "uv").symlink_to(uv)
        self.pct_log = self.root / "pct.log"

    def env(self) -> dict[str, str]:
        env = {
            "PATH": f"{self.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.root / "home"),
            "UV_CACHE_DIR": str(self.root / "uv-cache"),
            "UV_PYTHON_DOWNLOADS": "never",
            "UV_NO_CONFIG": "1",
            "PIP_NO_CACHE_DIR": "1",
            "FAKE_PCT_LOG": str(self.pct_log),
        }
        env.update(self.extra_env)
        return env

    def transport(self, bus: Bus) -> LocalTransport:
        transport = LocalTransport(bus, host_label="lab-node")
        transport.env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "VIRTUAL_ENV", "PIP_"))}
        transport.env.update(self.env())
        return transport


@dataclass
class Outcome:
    result: HostResult
    events: list[Event]
    recorder: Recorder

    def finished(self, step: str) -> StepFinished:
        return next(e for e in self.events if isinstance(e, StepFinished) and e.step == step)

    def plan(self, step: str) -> PlanReady:
        return next(e for e in self.events if isinstance(e, PlanReady) and e.step == step)


async def run_playbook(node: Node, playbook: Playbook, *, mode: str = "apply", state: RunState | None = None,
                       settings: dict[str, dict[str, Any]] | None = None) -> Outcome:
    """Run `playbook` (with `settings` written into its steps, as the lab hands them out) on `node`,
    starting from `state` (what earlier steps would have learnt)."""
    events: list[Event] = []
    bus = Bus(events.append)
    playbook = with_settings(playbook, settings or {})
    recorder = Recorder(playbook)
    bus.subscribe(recorder)
    result = await run_host(playbook, bus, node.transport(bus), mode=mode,  # type: ignore[arg-type]
                            host="lab-node", state=state)
    return Outcome(result, events, recorder)


def known_gpus(gpus: list[dict[str, Any]], driver: str = "595.71.05") -> RunState:
    """The run state node.inventory and gpu.detect leave for the torch steps on a PVE 8.4 node."""
    models = [Gpu.model_validate(g) for g in gpus]
    inventory = HostInventory(gpus=models, driver_version=driver, module_flavour="open", uvm_major=511,
                              caps_major=None, device_nodes=[f"/dev/nvidia{g.index}" for g in models],
                              pve_version="8.4.1", pve_release=(8, 4), kernel="6.8.12-9-pve", cgroup_version=2)
    return RunState(inventory=inventory, detection=GpuDetection(gpus=models))
