"""Day two across a fleet (issue #15): three lab daemons, each its own copy of the run's golden node (the
shipped playbook provisioned once per run with every step, torch.resolve, venv.build and burnin.run included,
and checked end to end there: tests/support/lab.py), one `--inventory` over them. The fleet's first replay
finds nothing to do on any host. Each host reboots through its boot unit; host `c` loses the unit and its CT
fails to start; only host `b` gets a host driver upgrade. `plan --check --inventory` names that host alone
(the missing nodes for c, both driver versions for b, read from the run log, whose events carry their host),
and `replay` repairs it with a burn-in that really runs (torch.distributed, gloo on the CPU) on b and is a
no-op on a and c, whose passing result still proves them.

Burn-in sizes: the golden node's burn-in ran with the CPU-sized settings the lab hands out
(`session.lab_settings`); the playbook here lowers them further (sizes 1KiB:2KiB, 1 s soak, 0.5 s GEMM) for
b's re-run, which proves the plumbing, not the machine's load. Changing them does not by itself plan a new
burn-in: the first replay is a no-op on every host. The phases, the rank count (one per GPU) and the verdict
are unchanged.

`burnin.run` on a replay: `check` is a no-op while a passing result exists and the userspace driver it ran
under (its stamp) is the container's; after the driver changed it plans "run the burn-in again", so the
recap's changed hosts are exactly the ones whose driver changed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.drift import UNIT_NAME, UNIT_PATH
from provisioner.session import LAB_BURNIN
from tests.support.lab import lab_ready, stop_labs
from tests.support.lab_inventory import write_lab_inventory
from tests.support.labcache import with_shared_wheels
from tests.support.labrun import LabRun, read_run_log

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "playbooks" / "blackwell-8gpu-lxc.yaml"
KINDS = ("node.connect", "node.inventory", "lxc.create", "lxc.gpu_passthrough", "lxc.boot_persistence", "lxc.start",
         "driver.userspace", "gpu.detect", "torch.resolve", "venv.build", "burnin.run")
BURNIN_PARAMS = {"sizes": "1KiB:2KiB", "duration_s": 1, "gemm_seconds": 0.5}
OLD_DRIVER = "595.71.05"
NEW_DRIVER = "595.82.01"
HOSTS = ("a", "b", "c")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2700)]


@dataclass
class FleetRun:
    rc: int
    recap: dict[str, Any]
    stderr: str
    events: list[dict[str, Any]]

    def describe(self) -> str:
        return f"exit {self.rc}; recap {self.recap}; stderr:\n{self.stderr[-5000:]}"

    def changed(self) -> set[str]:
        return {h for h, counts in self.recap["hosts"].items() if counts["changed"]}

    def texts(self, host: str) -> str:
        """Everything the run said about one host: planned changes and notes, messages, step results."""
        out: list[str] = []
        for e in self.events:
            if e.get("host") != host:
                continue
            if e["kind"] == "step.plan":
                out += [*e["changes"], *e["notes"]]
            elif e["kind"] == "message":
                out.append(e["text"])
            elif e["kind"] == "step.finished":
                out.append(e["message"])
        return "\n".join(out)

    def status(self, host: str, kind: str) -> str:
        (st,) = [e["status"] for e in self.events
                 if e["kind"] == "step.finished" and e["host"] == host and e["step"] == kind]
        return str(st)


class Fleet:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.copies = {n: base / f"lab-{n}" for n in HOSTS}  # each host's golden copy (`golden_copy`)
        self.roots = {n: base / f"lab-{n}" / "lab" for n in HOSTS}
        self.inventory = base / "hosts.yaml"  # written once the labs are up (`write_lab_inventory`)
        doc = yaml.safe_load(SHIPPED.read_text())
        assert [s["kind"] for s in doc["steps"]] == list(KINDS)  # the shipped playbook, every step
        for step in doc["steps"]:
            if step["kind"] == "burnin.run":
                step["params"] = {**step.get("params", {}), **BURNIN_PARAMS}
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
                              env=self.env(), cwd=REPO, timeout=1500, check=False)

    def run(self, command: str) -> FleetRun:
        proc = self.cli(command, str(self.playbook), "--inventory", str(self.inventory), "--json", "--quiet",
                        *(["--check"] if command == "plan" else []))
        lines = proc.stdout.strip().splitlines()
        recap: dict[str, Any] = json.loads(lines[-1]) if lines else {}
        log = re.search(r"run log: (\S+\.jsonl)", proc.stderr)
        events = read_run_log(Path(log.group(1))) if log else []
        return FleetRun(proc.returncode, recap, proc.stderr, events)

    def lab(self, host: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self.cli("lab", *args, "--root", str(self.roots[host]))

    def on_node(self, host: str, script: str) -> str:
        from provisioner.lab.sandbox import node_argv, node_env
        from provisioner.lab.state import LabState

        state = LabState.load(self.roots[host])
        return subprocess.run(node_argv(state, ["bash", "-c", script]), env=node_env(state), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=300, check=False).stdout


@pytest.fixture(scope="module")
def fleet(golden_copy: Callable[[Path], LabRun], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Three hosts, each its own copy of the golden node (its node, container and venv as the provisioning left
    them), started on ports of its own; the inventory names them."""
    lab_ready()
    f = Fleet(tmp_path_factory.mktemp("day2fleet"))
    runs = {n: golden_copy(f.copies[n]) for n in HOSTS}
    try:
        for host, run in runs.items():
            assert run.root == f.roots[host], (run.root, f.roots[host])
            # the run's one lab wheel index (`tests.support.labcache`), built once, not once per copy
            run.lab_cache = with_shared_wheels(f.base / "lab-cache")
            run.up()
        write_lab_inventory(f.inventory, f.roots)
        yield f
    finally:
        stop_labs(list(f.roots.values()))


def test_fleet_reboot_and_one_upgraded_host(fleet: Fleet) -> None:
    # the provisioning (exit 0, every step ok/changed, the burn-in run with verdict pass) is the golden node's,
    # checked where it ran; the fleet's first replay over the three copies finds every step of every host done,
    # the burn-in's passing result included (the playbook's other burn-in sizes plan no new burn-in)
    first = fleet.run("replay")
    assert first.rc == 0, first.describe()
    assert set(first.recap["hosts"]) == set(HOSTS)
    for host in HOSTS:
        assert first.recap["hosts"][host] == {"ok": len(KINDS), "changed": 0, "failed": 0, "skipped": 0,
                                              "interrupted": 0}, first.describe()
        for kind in KINDS:
            assert first.status(host, kind) == "ok", (host, kind, first.describe())
        assert "a passing burn-in result exists" in first.texts(host), (host, first.texts(host)[-3000:])
        assert "burn-in verdict" not in first.texts(host), (host, first.texts(host)[-3000:])

    # every host reboots: the boot unit brings each CT back with 8 GPUs; the fleet plan is clean
    for host in HOSTS:
        boot = fleet.lab(host, "reboot")
        assert boot.returncode == 0, boot.stdout + boot.stderr
        look = fleet.on_node(host, "pct status 200; pct exec 200 -- nvidia-smi -L")
        assert "status: running" in look and look.count("GPU ") == 8, (host, look)
    clean = fleet.run("plan")
    assert clean.rc == 0 and clean.changed() == set(), clean.describe()

    # host c loses its boot unit and reboots: its CT fails to start; the plan names c alone, with the nodes
    fleet.on_node("c", f"systemctl disable {UNIT_NAME} && rm {UNIT_PATH}")
    boot = fleet.lab("c", "reboot")
    assert "Starting CT 200 failed: Device /dev/nvidia0 does not exist" in boot.stdout + boot.stderr
    drift = fleet.run("plan")
    assert drift.rc == 10 and drift.changed() == {"c"}, drift.describe()
    said = drift.texts("c")
    assert f"boot unit {UNIT_NAME} is not installed" in said, said
    assert "device nodes missing on the host: /dev/nvidia-uvm, /dev/nvidia-uvm-tools" in said, said
    assert "start CT 200 (now stopped)" in said, said
    for host in ("a", "b"):
        assert "device nodes missing" not in drift.texts(host) and "not installed" not in drift.texts(host)
    repair = fleet.run("replay")
    assert repair.rc == 0 and repair.changed() == {"c"}, repair.describe()
    assert "status: running" in fleet.on_node("c", "pct status 200")
    # the driver did not change on c: its passing burn-in still proves it, nothing re-runs
    assert repair.status("c", "burnin.run") == "ok", repair.describe()

    # only host b gets the new host driver: the plan names b alone, with both versions
    up = fleet.lab("b", "upgrade-driver", NEW_DRIVER)
    assert up.returncode == 0, up.stdout + up.stderr
    drift = fleet.run("plan")
    assert drift.rc == 10 and drift.changed() == {"b"}, drift.describe()
    said = drift.texts("b")
    assert f"replace userspace {OLD_DRIVER} with {NEW_DRIVER}" in said, said
    for host in ("a", "c"):
        assert NEW_DRIVER not in drift.texts(host), (host, drift.texts(host))

    # replay: b's userspace is replaced and verified, its burn-in runs again and passes; a and c are no-ops
    fixed = fleet.run("replay")
    assert fixed.rc == 0 and fixed.changed() == {"b"}, fixed.describe()
    said = fixed.texts("b")
    assert fixed.status("b", "driver.userspace") == "changed", fixed.describe()
    assert fixed.status("b", "burnin.run") == "changed", fixed.describe()
    assert f"the last pass ran under userspace {OLD_DRIVER}, the container now has {NEW_DRIVER}" in said, said
    assert "burn-in verdict: pass" in said, said[-5000:]
    # with the playbook's own sizes, not the ones the lab hands out (which the golden node's burn-in ran with)
    assert BURNIN_PARAMS["sizes"] != LAB_BURNIN["sizes"]
    assert f"sizes {BURNIN_PARAMS['sizes']}, soak {BURNIN_PARAMS['duration_s']}s" in said, said[-5000:]
    for host in ("a", "c"):
        assert fixed.status(host, "burnin.run") == "ok" and "burn-in verdict" not in fixed.texts(host)
    smi = fleet.on_node("b", "pct exec 200 -- nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    assert set(smi.split()) == {NEW_DRIVER}, smi
    again = fleet.run("plan")
    assert again.rc == 0 and again.changed() == set(), again.describe()
