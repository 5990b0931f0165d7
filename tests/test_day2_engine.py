"""Day two (issue #15), the engine side, against the lab: the shipped playbook (provisioned: the run's golden
node, this test's own copy, tests/support/lab.py) survives `lab reboot` through its boot unit
(lxc.boot_persistence), `plan --check` finds the drift a reboot without the unit and a host driver upgrade
leave (exit 10, naming the missing nodes / both versions), and `replay` repairs it.

Everything runs as a user runs it: `provisioner replay/plan --lab` subprocesses (proxmoxer over HTTPS,
asyncssh to the lab's sshd, real uv, real torch gloo burn-in), `provisioner lab reboot` /
`lab upgrade-driver` for the events, and the node's own `pct`/`systemctl` (real bash in the lab's
namespaces) to look. pve-container's message for a devN whose node is missing at `pct start` is
``Device /dev/nvidia0 does not exist`` (PVE::LXC::Tools::get_device_mode_and_rdev, called from
vm_start -> update_lxc_config; docs/lab-hosts.md), not the prestart hook's text the issue quotes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from provisioner.drift import UNIT_NAME, UNIT_PATH
from tests.support.lab import golden_playbook
from tests.support.labrun import LabRun
from tests.support.streams import streamed

NEW_DRIVER = "595.82.01"
OLD_DRIVER = "595.71.05"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def cli(env: dict[str, str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """plan/replay with -v (`tests.support.streams`): a plan's text is on stdout, on stderr under --json."""
    return subprocess.run([sys.executable, "-m", "provisioner", *streamed(args)], env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def last_json(out: str) -> dict[str, object]:
    doc: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return doc


def on_node(root: Path, script: str) -> subprocess.CompletedProcess[str]:
    """A shell on the lab node (the same view the lab's sshd gives root)."""
    from provisioner.lab.sandbox import node_argv, node_env
    from provisioner.lab.state import LabState

    state = LabState.load(root)
    return subprocess.run(node_argv(state, ["bash", "-c", script]), env=node_env(state), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300, check=False)


@pytest.fixture
def node(golden_copy: Callable[[Path], LabRun], tmp_path: Path) -> Iterator[LabRun]:
    """The shipped playbook provisioned: this test's own copy of the golden node, running."""
    run = golden_copy(tmp_path / "daytwo")
    with run.running():
        yield run


def test_reboot_without_unit_then_driver_upgrade(node: LabRun) -> None:
    # the provisioning (exit 0, "installed <the boot unit>") is the golden node's, checked where it ran
    lab = dict(node.env(), COLUMNS="240")
    root = node.root
    playbook = golden_playbook(node)  # the playbook that provisioned this copy
    unit = on_node(root, f"cat {UNIT_PATH}; systemctl is-enabled {UNIT_NAME}; grep onboot /etc/pve/lxc/200.conf")
    assert "Before=pve-guests.service" in unit.stdout and "ExecStart=/usr/bin/nvidia-modprobe -u -c=0" in unit.stdout
    assert "enabled" in unit.stdout and "onboot: 1" in unit.stdout, unit.stdout

    # 1. reboot with the unit: no other command, the container is running with its 8 GPUs; nothing drifted
    boot = cli(lab, "lab", "reboot", "--root", str(root))
    assert boot.returncode == 0, boot.stdout + boot.stderr
    assert f"{UNIT_NAME}: started" in boot.stdout + boot.stderr
    look = on_node(root, "pct status 200; pct exec 200 -- nvidia-smi -L")
    assert "status: running" in look.stdout, look.stdout
    assert len([ln for ln in look.stdout.splitlines() if ln.startswith("GPU ")]) == 8, look.stdout
    clean = cli(lab, "plan", str(playbook), "--lab", "--check", "--json")
    assert clean.returncode == 0, clean.stderr[-5000:]

    # 2. without the unit (removed by hand), the same reboot fails the devN container with pve-container's message
    gone = on_node(root, f"systemctl disable {UNIT_NAME} && rm {UNIT_PATH}")
    assert gone.returncode == 0, gone.stdout
    boot = cli(lab, "lab", "reboot", "--root", str(root))
    assert "Starting CT 200 failed: Device /dev/nvidia0 does not exist" in boot.stdout + boot.stderr, \
        boot.stdout + boot.stderr
    assert "status: stopped" in on_node(root, "pct status 200").stdout
    seen = drift_rules(lab)  # diagnose --host: the same drift module, before any plan touched the node
    assert "drift.boot_unit" in seen and "drift.container" in seen, seen
    assert "/dev/nvidia-uvm" in seen["drift.nodes"], seen
    drift = cli(lab, "plan", str(playbook), "--lab", "--check")
    assert drift.returncode == 10, drift.stderr[-5000:]
    assert f"boot unit {UNIT_NAME} is not installed" in drift.stdout
    # the node's nvidia-smi (node.inventory) creates nvidiactl and the GPU nodes as it runs; nvidia-uvm's
    # nodes stay missing until nvidia-modprobe -u runs: the plan names them
    assert "device nodes missing on the host: /dev/nvidia-uvm, /dev/nvidia-uvm-tools" in drift.stdout, drift.stdout
    assert "start CT 200 (now stopped)" in drift.stdout
    repair = cli(lab, "replay", str(playbook), "--lab", "--json")
    assert repair.returncode == 0, repair.stderr[-5000:]
    assert on_node(root, f"systemctl is-enabled {UNIT_NAME}").stdout.strip() == "enabled"
    assert cli(lab, "plan", str(playbook), "--lab", "--check").returncode == 0

    # 3. host driver upgrade: drift names both versions; replay reinstalls the userspace and burns in again
    up = cli(lab, "lab", "upgrade-driver", NEW_DRIVER, "--root", str(root))
    assert up.returncode == 0, up.stdout + up.stderr
    mismatch = on_node(root, "pct exec 200 -- nvidia-smi -L")
    assert "Driver/library version mismatch" in mismatch.stdout, mismatch.stdout
    drift = cli(lab, "plan", str(playbook), "--lab", "--check")
    assert drift.returncode == 10, drift.stderr[-5000:]
    assert f"replace userspace {OLD_DRIVER} with {NEW_DRIVER}" in drift.stdout, drift.stdout
    seen = drift_rules(lab)
    assert f"userspace {OLD_DRIVER} ≠ host kernel module {NEW_DRIVER}" in seen["drift.driver"], seen
    fixed = cli(lab, "replay", str(playbook), "--lab", "--json")
    assert fixed.returncode == 0, fixed.stderr[-5000:]
    assert f"the last pass ran under userspace {OLD_DRIVER}, the container now has {NEW_DRIVER}" in fixed.stderr
    assert "burn-in verdict: pass" in fixed.stderr, fixed.stderr[-5000:]
    smi = on_node(root, "pct exec 200 -- nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    assert set(smi.stdout.split()) == {NEW_DRIVER}, smi.stdout
    again = cli(lab, "plan", str(playbook), "--lab", "--check", "--json")
    assert again.returncode == 0, again.stderr[-5000:]
    (counts,) = last_json(again.stdout)["hosts"].values()  # type: ignore[union-attr]
    assert counts == {"ok": 11, "changed": 0, "failed": 0, "skipped": 0, "interrupted": 0}, counts

    # the same findings through diagnose --host (the one drift module): nothing drifted now
    assert drift_rules(lab) == {}


def drift_rules(env: dict[str, str]) -> dict[str, str]:
    """`diagnose --lab --container 200`'s drift findings: rule -> root cause."""
    diag = cli(env, "diagnose", "--lab", "--container", "200", "--json")
    findings = last_json(diag.stdout)["findings"]
    assert isinstance(findings, list)
    assert diag.returncode == (1 if findings else 0), diag.stderr[-3000:]  # a live check exits 1 on a fault
    # a drift finding merged with the facts' finding of the same cause (merge_by_cause) is named in `rules`,
    # its text among the evidence
    return {str(r): " | ".join([str(f["root_cause"]), *map(str, f["evidence"])])
            for f in findings for r in f["rules"] if str(r).startswith("drift.")}
