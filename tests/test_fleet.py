"""Fleets: `provisioner replay PLAYBOOK --inventory hosts.yaml` against several private labs at once.

Three labs (fresh roots; lab `c` runs scenario ``task-fails``: ``pct create`` fails on the LVM
volume group) and a light playbook (the shipped one without torch.resolve / venv.build /
burnin.run) replayed as a user runs it (a subprocess, its own state and download cache):

- ``--parallel 3 --json``: per-host counts in the recap, the failing host isolated (the others
  provisioned: CT 200 running with the NVIDIA userspace in it), exit 1, the fleet report written,
  the hosts' steps overlapping in time;
- ``--limit a`` runs only host a (a no-op on an already provisioned host);
- ``--resume-failed`` reruns only the failed host once its fault is cleared, and succeeds;
- an unknown ``--limit`` name is a usage error (exit 2); unreachable / not running entries fail
  alone with their reason in the report.

The Ansible example of ``playbooks/fleet/`` is run for real (slow, needs ansible-core from PyPI
through ``uv run --with``), and the Slurm burn-in script is run on this machine as a two-"node"
torchrun job on CPU (gloo) under a stand-in ``srun``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.lab import closed_port, lab_ready, start_labs, stop_labs
from tests.support.lab_inventory import write_lab_inventory
from tests.support.labrun import read_run_log
from tests.support.require import require, require_torch

REPO = Path(__file__).resolve().parents[1]
SHIPPED_PLAYBOOK = REPO / "playbooks" / "blackwell-8gpu-lxc.yaml"
FLEET_DIR = REPO / "playbooks" / "fleet"
LIGHT_KINDS = ("node.connect", "node.inventory", "lxc.create", "lxc.gpu_passthrough", "lxc.start",
               "driver.userspace", "gpu.detect")
VMID = 200
REPLAY_TIMEOUT_S = 240
HOSTS = {"a": (), "b": (), "c": ("task-fails",)}


def write_light_playbook(dest: Path) -> Path:
    """The shipped playbook with only the steps up to GPU detection (no venv, no burn-in)."""
    doc = yaml.safe_load(SHIPPED_PLAYBOOK.read_text())
    doc["steps"] = [s for s in doc["steps"] if s["kind"] in LIGHT_KINDS]
    assert [s["kind"] for s in doc["steps"]] == list(LIGHT_KINDS)
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest




@dataclass
class FleetReplay:
    rc: int
    stdout: str
    stderr: str
    seconds: float
    recap: dict[str, Any] | None
    log_path: Path | None
    report_path: Path | None
    events: list[dict[str, Any]] = field(default_factory=list)

    def describe(self) -> str:
        return f"exit {self.rc} after {self.seconds:.1f}s; stdout:\n{self.stdout[-1500:]}\nstderr:\n{self.stderr[-4000:]}"

    def report(self) -> dict[str, Any]:
        assert self.report_path is not None, self.describe()
        doc: dict[str, Any] = json.loads(self.report_path.read_text())
        return doc

    def steps_of(self, host: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["kind"] == "step.finished" and e["host"] == host]


@dataclass
class Fleet:
    base: Path
    playbook: Path
    inventory: Path
    roots: dict[str, Path]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(PROVISIONER_STATE_DIR=str(self.base / "state"), PROVISIONER_CACHE_DIR=str(self.base / "cache"),
                   NO_COLOR="1", COLUMNS="200")
        env.pop("PVE_PASSWORD", None)
        env.pop("PROVISIONER_LAB_ROOT", None)
        return env

    def replay(self, *args: str, inventory: Path | None = None, command: str = "replay") -> FleetReplay:
        argv = [sys.executable, "-m", "provisioner", command, str(self.playbook),
                "--inventory", str(inventory or self.inventory), "--json", "--quiet", *args]
        started = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, env=self.env(), cwd=REPO,
                              timeout=REPLAY_TIMEOUT_S, check=False)
        seconds = time.monotonic() - started
        recap = None
        lines = proc.stdout.strip().splitlines()
        if lines:
            with contextlib.suppress(ValueError):
                recap = json.loads(lines[-1])
        log_m = re.search(r"run log: (\S+\.jsonl)", proc.stderr)
        rep_m = re.search(r"fleet report: (\S+\.json)", proc.stderr)
        log_path = Path(log_m.group(1)) if log_m else None
        events = read_run_log(log_path) if log_path is not None else []
        return FleetReplay(proc.returncode, proc.stdout, proc.stderr, seconds, recap, log_path,
                           Path(rep_m.group(1)) if rep_m else None, events)








@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    lab_ready()
    base = tmp_path_factory.mktemp("fleet")
    roots = {name: base / f"lab-{name}" for name in HOSTS}
    inventory = base / "hosts.yaml"
    try:
        start_labs({n: (roots[n], HOSTS[n]) for n in HOSTS}, base / "lab-cache")
        write_lab_inventory(inventory, roots)
        yield Fleet(base, write_light_playbook(base / "light.yaml"), inventory, roots)
    finally:
        stop_labs(list(roots.values()))


@pytest.fixture(scope="module")
def first_run(fleet: Fleet) -> FleetReplay:
    return fleet.replay("--parallel", "3")


def lab_ct(root: Path) -> dict[str, Any]:
    """What the playbook leaves in a lab: CT 200's status and the userspace driver libraries in it."""
    from provisioner.lab.state import LabState

    state = LabState.load(root)
    if not state.has_ct(VMID):
        return {"exists": False}
    libdir = state.ct_dir(VMID) / "rootfs" / "usr/lib/x86_64-linux-gnu"
    return {"exists": True, "status": state.get_status(VMID).status,
            "nvml": sorted(p.name for p in libdir.glob("libnvidia-ml.so.*")),
            "smi": (state.ct_dir(VMID) / "rootfs" / "usr/bin/nvidia-smi").exists()}


def test_failing_host_is_isolated_and_reported(fleet: Fleet, first_run: FleetReplay) -> None:
    run = first_run
    assert run.rc == 1, run.describe()
    assert run.recap is not None, run.describe()
    assert run.recap["status"] == "failed"
    hosts = run.recap["hosts"]
    assert set(hosts) == {"a", "b", "c"}
    for ok_host in ("a", "b"):
        counts = hosts[ok_host]
        assert counts["failed"] == 0 and counts["skipped"] == 0, (ok_host, counts, run.describe())
        assert counts["ok"] + counts["changed"] == len(LIGHT_KINDS)
        assert counts["changed"] >= 4  # create, passthrough, start, userspace driver at least
        ct = lab_ct(fleet.roots[ok_host])
        assert ct["status"] == "running" and ct["smi"] and ct["nvml"], (ok_host, ct)
    # c: node.connect and node.inventory pass, lxc.create fails on the task, the rest is skipped
    assert hosts["c"] == {"ok": 2, "changed": 0, "failed": 1, "skipped": 4, "interrupted": 0}, run.describe()
    c_steps = {e["step"]: e for e in run.steps_of("c")}
    assert c_steps["lxc.create"]["status"] == "failed"
    assert "insufficient free space" in c_steps["lxc.create"]["message"]
    assert not lab_ct(fleet.roots["c"])["exists"]  # the failed create left no half container
    # every host's seven steps are in the one run log, and the run's recap event agrees
    for host in ("a", "b", "c"):
        assert [e["index"] for e in run.steps_of(host)] == list(range(len(LIGHT_KINDS)))
    finished = [e for e in run.events if e["kind"] == "run.finished"]
    assert len(finished) == 1 and finished[0]["recap"] == hosts and finished[0]["status"] == "failed"
    # the fleet report: same counts plus c's failure
    report = run.report()
    assert report["hosts"] == hosts and report["status"] == "failed"
    assert report["duration_s"] > 0
    # --parallel 3: every host started before the first host finished its last step
    starts = {h: min(e["ts"] for e in run.events if e["kind"] == "step.started" and e["host"] == h) for h in hosts}
    ends = {h: max(e["ts"] for e in run.steps_of(h)) for h in ("a", "b")}
    assert max(starts.values()) < min(ends.values()), (starts, ends)


def test_limit_runs_only_the_named_hosts(fleet: Fleet, first_run: FleetReplay) -> None:
    assert first_run.rc == 1, first_run.describe()
    # its own inventory file: a --limit run rewrites the fleet report of its (playbook, inventory)
    inventory = fleet.base / "hosts-limit.yaml"
    shutil.copy(fleet.inventory, inventory)
    run = fleet.replay("--limit", "a", inventory=inventory)
    assert run.rc == 0, run.describe()
    assert run.recap == {"hosts": {"a": {"ok": len(LIGHT_KINDS), "changed": 0, "failed": 0, "skipped": 0, "interrupted": 0}},
                         "status": "ok"}
    assert {e["host"] for e in run.events if e["kind"].startswith("step.")} == {"a"}
    started = [e for e in run.events if e["kind"] == "run.started"]
    assert started[0]["hosts"] == ["a"]


def test_plan_with_inventory_changes_nothing(fleet: Fleet, first_run: FleetReplay) -> None:
    assert first_run.rc == 1, first_run.describe()
    done = fleet.replay("--limit", "a,b", "--check", command="plan")
    assert done.rc == 0, done.describe()
    assert done.recap == {"hosts": {h: {"ok": len(LIGHT_KINDS), "changed": 0, "failed": 0, "skipped": 0, "interrupted": 0}
                                    for h in ("a", "b")}, "status": "ok"}
    pending = fleet.replay("--limit", "c", "--check", command="plan")
    assert pending.rc == 10, pending.describe()  # c's container still has to be created
    assert pending.recap is not None and pending.recap["hosts"]["c"]["changed"] > 0
    assert not lab_ct(fleet.roots["c"])["exists"]  # planning created nothing
    assert "fleet report:" not in pending.stderr  # a plan does not touch the fleet report


def test_resume_failed_reruns_only_the_failed_host(fleet: Fleet, first_run: FleetReplay) -> None:
    from provisioner.lab.state import LabState

    assert first_run.rc == 1, first_run.describe()
    assert first_run.report()["hosts"]["c"]["failed"] == 1
    # the operator frees space in the volume group: the fault is gone
    LabState.load(fleet.roots["c"]).update_settings(scenarios=[])
    run = fleet.replay("--resume-failed", "--parallel", "3")
    assert run.rc == 0, run.describe()
    assert run.recap is not None and set(run.recap["hosts"]) == {"c"}, run.describe()
    counts = run.recap["hosts"]["c"]
    assert counts["failed"] == 0 and counts["ok"] + counts["changed"] == len(LIGHT_KINDS)
    assert {e["host"] for e in run.events if e["kind"].startswith("step.")} == {"c"}
    ct = lab_ct(fleet.roots["c"])
    assert ct["status"] == "running" and ct["smi"] and ct["nvml"], ct
    assert run.report()["status"] == "ok"
    # nothing failed any more: a second resume has nothing to do
    again = fleet.replay("--resume-failed")
    assert again.rc == 0, again.describe()
    assert again.recap == {"hosts": {}, "status": "ok"}
    assert "nothing to resume" in again.stderr


def test_unknown_limit_name_is_a_usage_error(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(yaml.safe_dump({"hosts": [{"name": "a", "host": "127.0.0.1"}]}))
    fleet = Fleet(tmp_path, write_light_playbook(tmp_path / "light.yaml"), inventory, {})
    run = fleet.replay("--limit", "a,nosuchhost")
    assert run.rc == 2, run.describe()
    assert "nosuchhost" in run.stderr
    assert run.log_path is None  # refused before anything ran
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"hosts": [{"name": "a", "host": "10.0.0.1"}, {"name": "a", "host": "10.0.0.2"}]}))
    dup = fleet.replay(inventory=bad)
    assert dup.rc == 2 and "duplicate host names" in dup.stderr, dup.describe()


def test_unreachable_entries_fail_alone_with_their_reason(tmp_path: Path) -> None:
    """An address where nothing listens, and an entry whose site profile file is missing: both fail, each
    with its reason in the fleet report, and the run still ends with a recap."""
    port = closed_port()
    key = tmp_path / "id_ed25519"  # a real key (a file that is not one is refused at load); never used
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(yaml.safe_dump({"hosts": [
        {"name": "gone", "host": "127.0.0.1", "node": "pve",
         "ssh": {"port": port, "key_file": str(key), "known_hosts": str(tmp_path / "known_hosts")},
         "api": {"port": closed_port(), "password": "env:PVE_FLEET_TEST_NO_SUCH_VAR"}},
        {"name": "down", "host": "127.0.0.1", "node": "pve", "site": str(tmp_path / "no-such-site.yaml"),
         "ssh": {"port": port, "key_file": str(key), "known_hosts": str(tmp_path / "known_hosts")}},
    ]}))
    fleet = Fleet(tmp_path, write_light_playbook(tmp_path / "light.yaml"), inventory, {})
    run = fleet.replay("--parallel", "2")
    assert run.rc == 4, run.describe()  # unreachable (4) and invalid (2): the most specific code (4), not 1
    assert run.recap is not None and set(run.recap["hosts"]) == {"gone", "down"}
    assert all(c["failed"] >= 1 for c in run.recap["hosts"].values())
    report = run.report()
    assert "no-such-site.yaml: cannot read" in report["errors"]["down"]
    gone_steps = run.steps_of("gone")
    assert gone_steps and gone_steps[0]["step"] == "node.connect" and gone_steps[0]["status"] == "failed"
    assert str(port) in gone_steps[0]["message"] or "refused" in gone_steps[0]["message"].lower(), gone_steps[0]


# -- playbooks/fleet: the Ansible and Slurm examples ------------------------------------------------

def test_example_inventory_is_valid() -> None:
    from provisioner.fleet import load_inventory

    # the schema: the example names a site's CA file (/etc/gpu-provisioner/...) this machine need not have
    inv = load_inventory(FLEET_DIR / "hosts.example.yaml", check_files=False)
    assert len(inv.hosts) >= 2
    assert all(h.host and h.node for h in inv.hosts)


def pypi_reachable() -> bool:
    try:
        with socket.create_connection(("pypi.org", 443), timeout=5):
            return True
    except OSError:
        return False


@pytest.mark.slow
def test_ansible_example_replays_each_host(fleet: Fleet, first_run: FleetReplay) -> None:
    """playbooks/fleet/ansible-replay.yml: one `provisioner replay --lab` per inventory host,
    `serial` batches, per-host recap collected; a failing host stops only itself."""
    assert first_run.rc == 1, first_run.describe()
    uv = shutil.which("uv")
    require(uv is not None, "uv is not on PATH (it runs ansible-core from PyPI)")
    if not pypi_reachable():
        pytest.skip("PyPI is unreachable: cannot fetch ansible-core for the optional Ansible example")
    assert uv is not None
    from provisioner.lab.state import LabState

    LabState.load(fleet.roots["c"]).update_settings(scenarios=[])  # c's fault cleared (if not yet)
    inv = fleet.base / "ansible-hosts.yaml"
    hosts = {f"pve-{n}": {"provisioner_lab_root": str(r)} for n, r in fleet.roots.items()}
    hosts["pve-down"] = {"provisioner_lab_root": str(fleet.base / "lab-never-started")}
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    results = fleet.base / "ansible-results"
    env = fleet.env()
    env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_HOST_KEY_CHECKING="False", ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    extra = {"provisioner_playbook": str(fleet.playbook), "provisioner_cmd": f"{sys.executable} -m provisioner",
             "provisioner_chdir": str(REPO), "provisioner_results_dir": str(results), "provisioner_serial": 3}
    argv = [uv, "run", "--no-project", "--with", "ansible-core", "ansible-playbook", "-i", str(inv),
            str(FLEET_DIR / "ansible-replay.yml"), "--forks", "3", "-e", json.dumps(extra)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    if "Failed to download" in out or "error sending request" in out:
        pytest.skip(f"could not install ansible-core from PyPI:\n{out[-800:]}")
    # pve-down fails (its lab is not running): Ansible exits 2 and goes on with the others, which
    # all end provisioned (a and b were already: ok, nothing changed; c is created if the resume
    # test has not done it)
    assert proc.returncode == 2, out[-6000:]
    assert re.search(r"pve-down\s*:\s*ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=1", out), out[-3000:]
    for n in fleet.roots:
        doc = json.loads((results / f"pve-{n}.json").read_text())
        assert doc["status"] == "ok" and set(doc["hosts"]) == {f"pve-{n}"}, (n, doc)
        assert re.search(rf"pve-{n}\s*:\s*ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0", out), out[-3000:]
        assert lab_ct(fleet.roots[n])["status"] == "running"
    assert not (results / "pve-down.json").exists()
    for n in ("a", "b"):  # provisioned by the first fleet run: a replay changes nothing
        assert json.loads((results / f"pve-{n}.json").read_text())["hosts"][f"pve-{n}"]["changed"] == 0


def fake_srun(bin_dir: Path) -> Path:
    """A stand-in for Slurm's `srun`: runs the command once per "node" (SLURM_NNODES) on this
    machine, concurrently, with the per-task variables Slurm sets."""
    srun = bin_dir / "srun"
    srun.write_text("""#!/usr/bin/env bash
set -u
while [[ $# -gt 0 && $1 == -* ]]; do shift; done   # --ntasks-per-node=1 etc.
pids=()
for ((i = 0; i < SLURM_NNODES; i++)); do
  SLURM_NODEID=$i SLURM_PROCID=$i SLURM_LOCALID=0 "$@" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
exit $rc
""")
    srun.chmod(0o755)
    return srun


def test_slurm_burnin_script_runs_two_nodes_with_torchrun(tmp_path: Path) -> None:
    """playbooks/fleet/slurm-burnin.sbatch outside Slurm: two "nodes" on this machine (a stand-in
    srun), torchrun's c10d rendezvous, the burn-in on CPU with gloo: one verdict for the job."""
    require_torch()  # the supply puts a CPU torch (and its torchrun) into this venv, as for every torch test
    torchrun = Path(sys.executable).with_name("torchrun")
    require(torchrun.exists(), "torchrun is not installed next to this Python (torch missing)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_srun(bin_dir)
    out = tmp_path / "out"
    env = dict(os.environ, PATH=f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
               SLURM_JOB_ID="4242", SLURM_NNODES="2", SLURM_JOB_NODELIST="localhost", SLURM_GPUS_ON_NODE="1",
               BURNIN_PYTHON=sys.executable, BURNIN_PYTHONPATH=str(REPO), BURNIN_MASTER_ADDR="127.0.0.1",
               BURNIN_MASTER_PORT=str(closed_port()), BURNIN_OUT=str(out),
               BURNIN_ARGS="--backend gloo --sizes 1KiB:16KiB --phases collectives --collectives all_reduce "
                           "--duration 0")
    proc = subprocess.run(["bash", str(FLEET_DIR / "slurm-burnin.sbatch")], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=180, check=False)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    doc = json.loads((out / "4242" / "burnin.json").read_text())
    assert doc["status"] == "pass" and doc["world_size"] == 2, doc
    assert doc["backend"] == "gloo"
