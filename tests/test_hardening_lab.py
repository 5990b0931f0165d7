"""Red-team cases of issue #19 against a real lab (HTTPS PVE API, OpenSSH endpoint, real bash and flock):

- SIGINT/SIGTERM mid-run → the recap, `run.finished`, exit 130/143;
- a replay waiting on a stuck Proxmox task holds the node lock: a second controller (its own state dir)
  is refused, a `plan` runs; the lock dies with its holder (SIGKILL);
- `api-timeout` during create → a bounded, configurable wait with progress; the half-created CT
  (`lock: create`) is ours on every later replay: waited for, then removed and created again;
- a `lock: create` CT without our marker, a CT with our hostname and spec but without our tag, or ours with
  a smaller disk, another storage or privilege, is refused and left untouched; ours with a bigger disk,
  other features or cores is updated in place (issue 28);
- TLS refusal → exit 4 with a clear message (not "internal error").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.lab_inventory import write_lab_inventory
from tests.support.labrun import REPO, LabRun, lab_importable, read_run_log, write_test_playbook
from tests.support.require import require
from tests.support.streams import streamed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
VMID = 200
UPTO = "lxc.start"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabRun]:
    require(lab_importable(), "the embedded lab (provisioner.lab.lab) is not in this build")
    require(os.geteuid() == 0, "the lab's container sandbox (mount namespaces) needs root")
    base = tmp_path_factory.mktemp("harden-lab")
    lab = LabRun(base, base / "lab-cache")
    lab.up()
    try:
        yield lab
    finally:
        lab.down()


def _playbook(dest: Path, **create: Any) -> Path:
    return write_test_playbook(dest, upto=UPTO, params={"lxc.create": create, "lxc.start": {"timeout_s": 30}})


class Proc:
    """`provisioner replay|plan PLAYBOOK --lab --json` in the background, its run log read as it grows."""

    def __init__(self, run: LabRun, verb: str, playbook: Path, state_dir: Path | None = None,
                 extra: tuple[str, ...] = ("--lab",)) -> None:
        env = run.env()
        if state_dir is not None:
            env["PROVISIONER_STATE_DIR"] = str(state_dir)
        self.runs = Path(env["PROVISIONER_STATE_DIR"]) / "runs"
        self.before = set(self.runs.glob("*.jsonl")) if self.runs.is_dir() else set()
        self.proc = subprocess.Popen([sys.executable, "-m", "provisioner", *streamed([verb, str(playbook), *extra,
                                                                                      "--json"])],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
        self.stdout = self.stderr = ""

    def log(self) -> Path | None:
        new = set(self.runs.glob("*.jsonl")) - self.before if self.runs.is_dir() else set()
        return max(new, key=lambda p: p.stat().st_mtime) if new else None

    def events(self) -> list[dict[str, Any]]:
        path = self.log()
        if path is None:
            return []
        out = []
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                break  # a line being written
        return out

    def wait_for(self, what: str, pred: Any, deadline_s: float = 240) -> None:
        """Block until an event of the run log satisfies `pred` (a state, not a duration)."""
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if any(pred(e) for e in self.events()):
                return
            if self.proc.poll() is not None:
                self.finish()
                raise AssertionError(f"run ended before {what}: rc {self.proc.returncode}\n{self.stderr[-3000:]}")
            time.sleep(0.1)
        raise AssertionError(f"no {what} within {deadline_s} s")

    def finish(self, timeout: float = 600) -> int:
        out, err = self.proc.communicate(timeout=timeout)
        self.stdout += out
        self.stderr += err
        return self.proc.returncode

    def recap(self) -> dict[str, Any]:
        return dict(json.loads(self.stdout.strip().splitlines()[-1]))


def cli(run: LabRun, *args: str, state_dir: Path | None = None,
        extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**run.env(), **(extra_env or {})}
    if state_dir is not None:
        env["PROVISIONER_STATE_DIR"] = str(state_dir)
    return subprocess.run([sys.executable, "-m", "provisioner", *streamed(args)], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=600)


def finished(events: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(e for e in reversed(events) if e["kind"] == "step.finished" and e["step"] == kind)


def waiting_on_create(e: dict[str, Any]) -> bool:
    return e["kind"] == "message" and str(e.get("text", "")).startswith("task UPID:")


def conf_text(run: LabRun, vmid: int = VMID) -> str:
    return run.state().conf_path(vmid).read_text()


def test_interrupt_lock_and_half_created_container_resume(run: LabRun, tmp_path: Path) -> None:
    run.set_scenarios("api-timeout")  # every Proxmox task hangs: the create request is answered, never done
    pb = _playbook(tmp_path / "pb.yaml", task_timeout_s=600)

    # -- a replay waits on the stuck create task; it holds the node lock -----------------------------
    first = Proc(run, "replay", pb)
    first.wait_for("the create request", waiting_on_create)
    assert "lock: create" in conf_text(run)

    # A second controller with its own state dir (its own local lock file) is refused by the node lock.
    other = cli(run, "replay", str(pb), "--lab", "--json", state_dir=tmp_path / "other-state")
    assert other.returncode == 1, other.stderr[-3000:]
    assert "another controller is provisioning container 200 on this node: controller" in other.stderr
    assert "lock: create" in conf_text(run), "the refused controller touched the container"
    # plan takes no lock (neither the node's nor the state dir's): it runs during the replay, same state dir.
    plan = cli(run, "plan", str(pb), "--lab", "--json", "--check")
    assert plan.returncode == 10, plan.stderr[-3000:]
    assert "wait for our create task" in plan.stderr

    # -- SIGINT: the step in progress is interrupted, the rest skipped, the recap and run.finished come -----
    first.proc.send_signal(signal.SIGINT)
    assert first.finish() == 130, first.stderr[-3000:]
    events = read_run_log(first.log())  # type: ignore[arg-type]
    assert events[-1]["kind"] == "run.finished" and events[-1]["status"] == "interrupted"
    assert finished(events, "lxc.create")["status"] == "interrupted"
    assert "interrupted by SIGINT" in finished(events, "lxc.create")["message"]
    assert finished(events, "lxc.start")["status"] == "skipped"
    assert first.recap()["status"] == "failed"

    # The lock died with its holder: a SIGKILLed controller leaves no stale lock either.
    killed = Proc(run, "replay", pb)
    killed.wait_for("the create wait", lambda e: e["kind"] == "step.started" and e["step"] == "lxc.create")
    killed.proc.kill()
    killed.finish()

    # -- a bounded, configurable wait with progress; the half-created CT is still ours --------------
    short = _playbook(tmp_path / "short.yaml", task_timeout_s=12)
    waited = Proc(run, "replay", short)
    assert waited.finish() == 1, waited.stderr[-3000:]
    events = read_run_log(waited.log())  # type: ignore[arg-type]
    create = finished(events, "lxc.create")
    assert create["status"] == "failed", create
    assert "did not finish within 12 s" in create["message"], create["message"]
    assert "someone else" not in create["message"] and "not ours" not in create["message"]
    assert any(e["kind"] == "step.plan" and any("wait for our create task" in c for c in e["changes"])
               for e in events), "the half-created CT was not recognised as ours"
    progress = [e for e in events if e["kind"] == "progress" and "create CT 200" in e["task"]]
    assert progress and progress[-1]["total"] == 12 and progress[-1]["unit"] == "s", progress
    # SIGTERM too leaves a recap (exit 143).
    term = Proc(run, "replay", pb)
    term.wait_for("the create wait", lambda e: e["kind"] == "step.started" and e["step"] == "lxc.create")
    term.wait_for("the wait itself", lambda e: e["kind"] == "message" and "waiting for it" in str(e.get("text")))
    term.proc.send_signal(signal.SIGTERM)
    assert term.finish() == 143, term.stderr[-3000:]
    assert read_run_log(term.log())[-1]["kind"] == "run.finished"  # type: ignore[arg-type]

    # -- the operator stops the stuck worker (Datacenter → Tasks → Stop) and the node is healthy again ----
    state = run.state()
    stuck = [t for t in state.list_tasks() if t.type == "vzcreate" and t.status == "running"]
    assert stuck, "no running create task"
    for task in stuck:
        state.finish_task(task.upid, "interrupted by signal")
    run.set_scenarios()
    assert "lock: create" in conf_text(run)
    resumed = cli(run, "replay", str(pb), "--lab", "--json")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "remove our half-created CT 200" in resumed.stderr
    conf = conf_text(run)
    assert "lock:" not in conf and "tags: gpu-provisioner" in conf and "hostname: blackwell-torch" in conf
    assert run.state().get_status(VMID).status == "running"
    # the node's /run is its own (`sandbox.node_fs`), its /etc the lab's overlay whose upper layer holds
    # what we wrote there
    from provisioner.lab.sandbox import node_fs
    assert (node_fs(run.root) / "run" / "lock" / "gpu-provisioner" / "ct-200.lock.owner").is_file()
    assert not (run.root / "etc" / "gpu-provisioner" / "creating" / "200.json").exists(), "marker left behind"
    again = cli(run, "replay", str(pb), "--lab", "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    (counts,) = json.loads(again.stdout.strip().splitlines()[-1])["hosts"].values()
    assert counts["changed"] == 0 and counts["failed"] == 0, counts


def _ours_changed(run: LabRun, pb: Path, change: tuple[str, str | None]) -> tuple[Any, str]:
    """CT 200 made by the playbook (unless it is there and tagged ours), then one option of its config set (or,
    with None, deleted) behind the tool's back: the lab state and the config text before the change."""
    from provisioner.proxmox.lxc_conf import LxcConfig

    state = run.state()
    if not state.has_ct(VMID) or "tags: gpu-provisioner" not in conf_text(run):
        ok = cli(run, "replay", str(pb), "--lab", "--json")
        assert ok.returncode == 0, ok.stderr[-3000:]
    original = conf_text(run)
    conf = LxcConfig.parse(original)
    key, value = change
    if value is None:
        conf.delete(key)
    else:
        conf.set(key, value)
    state.write_conf(VMID, conf)
    return state, original


@pytest.mark.parametrize(("change", "needle"), [
    (("tags", None), "is not tagged 'gpu-provisioner'"),
    (("tags", "inference"), "is not tagged 'gpu-provisioner'"),
    (("rootfs", "local-lvm:vm-200-disk-0,size=300G"), "rootfs 300G → 200G: PVE cannot shrink"),
    (("rootfs", "other-lvm:vm-200-disk-0,size=200G"), "rootfs storage other-lvm → local-lvm"),
    (("unprivileged", "0"), "unable to modify read-only option: 'unprivileged'"),
])
def test_container_with_our_name_but_not_our_tag_or_spec_is_refused(run: LabRun, tmp_path: Path,
                                                                   change: tuple[str, str | None],
                                                                   needle: str) -> None:
    from provisioner.proxmox.lxc_conf import LxcConfig

    pb = _playbook(tmp_path / "pb.yaml")
    state, original = _ours_changed(run, pb, change)
    before = conf_text(run)
    try:
        res = cli(run, "replay", str(pb), "--lab", "--json")
        assert res.returncode == 1, res.stderr[-3000:]
        assert needle in res.stderr, res.stderr[-3000:]
        assert "left untouched" in res.stderr
        assert conf_text(run) == before, "a container that is not ours was changed"
    finally:
        state.write_conf(VMID, LxcConfig.parse(original))


@pytest.mark.parametrize(("change", "expect"), [
    (("rootfs", "local-lvm:vm-200-disk-0,size=100G"), ("rootfs", "local-lvm:vm-200-disk-0,size=200G")),
    (("features", "nesting=0"), ("features", "nesting=1")),
    (("features", None), ("features", "nesting=1")),
    (("features", "nesting=1,keyctl=1"), ("features", "nesting=1")),
    (("cores", "4"), ("cores", "64")),
])
def test_our_container_with_another_spec_is_updated_in_place(run: LabRun, tmp_path: Path, change: tuple[str, str | None],
                                                             expect: tuple[str, str]) -> None:
    """Issue 28: ours (tagged) with a smaller disk, nesting off or other cores → `pct set`/`pct resize`
    through the API, then the replay after it changes nothing."""
    from provisioner.proxmox.lxc_conf import LxcConfig

    pb = _playbook(tmp_path / "pb.yaml")
    state, original = _ours_changed(run, pb, change)
    try:
        res = cli(run, "replay", str(pb), "--lab", "--json")
        assert res.returncode == 0, res.stderr[-3000:]
        assert "update CT 200 in place" in res.stdout + res.stderr
        # features are not hot-pluggable (pve-container's vmconfig_hotplug_pending): on a running container
        # the change waits in [pve:pending] until the next start; what the container gets then is the test
        assert LxcConfig.parse(conf_text(run)).effective().get(expect[0]) == expect[1]
        again = cli(run, "replay", str(pb), "--lab", "--json")
        (counts,) = json.loads(again.stdout.strip().splitlines()[-1])["hosts"].values()
        assert again.returncode == 0 and counts["changed"] == 0, counts
    finally:
        state.write_conf(VMID, LxcConfig.parse(original))


def test_half_created_container_without_our_marker_is_foreign(run: LabRun, tmp_path: Path) -> None:
    from provisioner.proxmox.lxc_conf import LxcConfig

    doc = yaml.safe_load(_playbook(tmp_path / "pb.yaml").read_text())
    doc["target"]["container"] = 300
    pb = tmp_path / "ct300.yaml"
    pb.write_text(yaml.safe_dump(doc, sort_keys=False))
    state = run.state()
    state.write_conf(300, LxcConfig.from_options({"lock": "create"}))  # someone else's create in progress
    try:
        res = cli(run, "replay", str(pb), "--lab", "--json")
        assert res.returncode == 1, res.stderr[-3000:]
        assert "CT 300 on pve is being created by someone else (lock: create" in res.stderr
        assert state.read_conf(300).get("lock") == "create" and state.has_ct(300)
    finally:
        state.delete_ct(300)


def test_tls_refusal_exits_4_with_a_clear_message(run: LabRun, tmp_path: Path) -> None:
    """The API's certificate is not signed by the CA the playbook names: refused, exit 4, no traceback."""
    conn = json.loads((run.root / "private" / "connection.json").read_text())
    doc = yaml.safe_load(_playbook(tmp_path / "pb.yaml").read_text())
    doc["target"] = {
        "host": conn["ssh"]["host"], "node": conn["node"], "container": VMID,
        "ssh": {"user": conn["ssh"]["user"], "port": conn["ssh"]["port"], "key_file": conn["ssh"]["key_file"],
                "known_hosts": conn["ssh"]["known_hosts"]},
        # the operator's own reference (a playbook never names the lab's private files: #23)
        "api": {"port": conn["api"]["port"], "user": conn["api"]["user"], "password": "env:PVE_WRONG_CA_PW",
                "verify_tls": True, "ca_file": "/etc/ssl/certs/ca-certificates.crt"},
    }
    pb = tmp_path / "wrong-ca.yaml"
    pb.write_text(yaml.safe_dump(doc, sort_keys=False))
    password = Path(conn["api"]["password"].removeprefix("file:")).read_text().strip()
    res = cli(run, "replay", str(pb), "--json", extra_env={"PVE_WRONG_CA_PW": password})
    assert res.returncode == 4, res.stderr[-3000:]
    assert "refusing the Proxmox API: TLS certificate of https://" in res.stderr, res.stderr[-3000:]
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr
    assert "fix: set target.api.ca_file" in res.stderr


def test_sigint_during_a_fleet_run_still_gives_the_fleet_recap(run: LabRun, tmp_path: Path) -> None:
    """Two hosts, one at a time: the first waits on a stuck create task, the second has not started."""
    pb = _playbook(tmp_path / "pb.yaml", task_timeout_s=600)
    inventory = tmp_path / "hosts.yaml"
    write_lab_inventory(inventory, {"first": run.root, "second": run.root}, {"first": 210, "second": 211})
    run.set_scenarios("api-timeout")
    state = run.state()
    try:
        fleet = Proc(run, "replay", pb, extra=("--inventory", str(inventory), "--parallel", "1"))
        fleet.wait_for("the create request", waiting_on_create)
        fleet.proc.send_signal(signal.SIGINT)
        assert fleet.finish() == 130, fleet.stderr[-3000:]
        events = read_run_log(fleet.log())  # type: ignore[arg-type]
        assert events[-1]["kind"] == "run.finished" and events[-1]["status"] == "interrupted"
        # interrupted is its own count (issue 36), not a failure
        assert (events[-1]["recap"]["first"]["interrupted"], events[-1]["recap"]["first"]["failed"]) == (1, 0)
        assert events[-1]["recap"]["second"]["skipped"] == len(yaml.safe_load(pb.read_text())["steps"])
        assert any(e["kind"] == "step.finished" and e["host"] == "first" and e["status"] == "interrupted"
                   for e in events)
        assert fleet.recap()["status"] == "failed"
        assert not state.has_ct(211)
    finally:
        run.set_scenarios()
        for task in state.list_tasks():
            if task.status == "running":
                state.finish_task(task.upid, "interrupted by signal")
        for vmid in (210, 211):
            if state.has_ct(vmid):
                state.delete_ct(vmid)
