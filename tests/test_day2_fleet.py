"""Day two across a fleet (issue #15): three lab daemons, one `--inventory`; each host reboots through its
boot unit, only host `b` gets a host driver upgrade, and `plan --check --inventory` names that host alone.

The playbook is the shipped one up to GPU detection plus the boot unit (lxc.boot_persistence): the
torch/venv/burn-in steps are proven on one host in tests/test_day2_engine.py; three CPU burn-ins on
this machine's two cores would only measure its load. Labs are started as tests/test_fleet.py does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_fleet import lab_ready, start_labs, stop_labs

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "playbooks" / "blackwell-8gpu-lxc.yaml"
KINDS = ("node.connect", "node.inventory", "lxc.create", "lxc.gpu_passthrough", "lxc.boot_persistence", "lxc.start",
         "driver.userspace", "gpu.detect")
HOSTS = ("a", "b", "c")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


class Fleet:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.roots = {n: base / f"lab-{n}" for n in HOSTS}
        self.inventory = base / "hosts.yaml"
        self.inventory.write_text(yaml.safe_dump({"hosts": [{"name": n, "lab_root": str(r)}
                                                            for n, r in self.roots.items()]}))
        doc = yaml.safe_load(SHIPPED.read_text())
        doc["steps"] = [s for s in doc["steps"] if s["kind"] in KINDS]
        assert [s["kind"] for s in doc["steps"]] == list(KINDS)
        self.playbook = base / "day2.yaml"
        self.playbook.write_text(yaml.safe_dump(doc, sort_keys=False))

    def env(self) -> dict[str, str]:
        env = dict(os.environ, PROVISIONER_STATE_DIR=str(self.base / "state"),
                   PROVISIONER_CACHE_DIR=str(self.base / "cache"), NO_COLOR="1", COLUMNS="240")
        env.pop("PVE_PASSWORD", None)
        env.pop("PROVISIONER_LAB_ROOT", None)
        return env

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "provisioner", *args], capture_output=True, text=True,
                              env=self.env(), cwd=REPO, timeout=900, check=False)

    def run(self, command: str) -> tuple[int, dict[str, Any], str]:
        proc = self.cli(command, str(self.playbook), "--inventory", str(self.inventory), "--json", "--quiet",
                        *(["--check"] if command == "plan" else []))
        lines = proc.stdout.strip().splitlines()
        recap: dict[str, Any] = json.loads(lines[-1]) if lines else {}
        return proc.returncode, recap, proc.stderr

    def lab(self, host: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self.cli("lab", *args, "--root", str(self.roots[host]))

    def on_node(self, host: str, script: str) -> str:
        from provisioner.lab.sandbox import node_argv, node_env
        from provisioner.lab.state import LabState

        state = LabState.load(self.roots[host])
        return subprocess.run(node_argv(state, ["bash", "-c", script]), env=node_env(state), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=300, check=False).stdout


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    lab_ready()
    f = Fleet(tmp_path_factory.mktemp("day2fleet"))
    try:
        start_labs({n: (f.roots[n], ()) for n in HOSTS}, f.base / "lab-cache")
        yield f
    finally:
        stop_labs(list(f.roots.values()))


def changed_hosts(recap: dict[str, Any]) -> set[str]:
    return {h for h, counts in recap["hosts"].items() if counts["changed"]}


def test_fleet_reboot_and_one_upgraded_host(fleet: Fleet) -> None:
    rc, recap, err = fleet.run("replay")
    assert rc == 0, err[-5000:]
    assert set(recap["hosts"]) == set(HOSTS)

    # every host reboots: the boot unit brings each CT back with 8 GPUs; the fleet plan is clean
    for host in HOSTS:
        boot = fleet.lab(host, "reboot")
        assert boot.returncode == 0, boot.stdout + boot.stderr
        look = fleet.on_node(host, "pct status 200; pct exec 200 -- nvidia-smi -L")
        assert "status: running" in look and look.count("GPU ") == 8, (host, look)
    rc, recap, err = fleet.run("plan")
    assert rc == 0 and changed_hosts(recap) == set(), err[-5000:]

    # host c loses its boot unit and reboots: its CT fails to start; the plan names c alone, with the nodes
    fleet.on_node("c", "systemctl disable gpu-provisioner-nvidia-nodes.service && "
                       "rm /etc/systemd/system/gpu-provisioner-nvidia-nodes.service")
    boot = fleet.lab("c", "reboot")
    assert "Starting CT 200 failed: Device /dev/nvidia0 does not exist" in boot.stdout + boot.stderr
    rc, recap, err = fleet.run("plan")
    assert rc == 10 and changed_hosts(recap) == {"c"}, (recap, err[-5000:])
    rc, recap, err = fleet.run("replay")
    assert rc == 0, err[-5000:]
    assert "status: running" in fleet.on_node("c", "pct status 200")

    # only host b gets the new host driver: the recap names b alone; replay repairs it; then clean
    up = fleet.lab("b", "upgrade-driver", "595.82.01")
    assert up.returncode == 0, up.stdout + up.stderr
    rc, recap, err = fleet.run("plan")
    assert rc == 10 and changed_hosts(recap) == {"b"}, (recap, err[-5000:])
    rc, recap, err = fleet.run("replay")
    assert rc == 0, err[-5000:]
    assert {h for h, c in recap["hosts"].items() if c["changed"]} == {"b"}, recap
    smi = fleet.on_node("b", "pct exec 200 -- nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    assert set(smi.split()) == {"595.82.01"}, smi
    rc, recap, err = fleet.run("plan")
    assert rc == 0 and changed_hosts(recap) == set(), err[-5000:]
