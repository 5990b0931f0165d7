"""Faults real hosts throw, each injected into a private lab, survived, and repaired by a replay.

For every fault: the run that meets it ends with a clear message and exit code, its JSONL run
log parses event by event (run.started ... run.finished), another team's container on the same
node is untouched, and the next `provisioner replay` (after the fault is gone, as the lab models
it) succeeds and leaves a final state identical to a clean run's (container config, userspace
driver, venv packages and records).

The playbook is the shipped `playbooks/blackwell-8gpu-lxc.yaml` minus `burnin.run` (no fault
below is in the burn-in, and its 8-rank launch would multiply this file's runtime); `lxc.start`
gets `timeout_s: 10` so that the hanging Proxmox task is reported in seconds, not minutes.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.labrun import (
    FlakyMirror,
    LabRun,
    Replay,
    diff_snapshots,
    lab_importable,
    snapshot,
    write_test_playbook,
)
from tests.support.require import require

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TEST_PARAMS: dict[str, dict[str, Any]] = {"lxc.start": {"timeout_s": 10}}
DRIVER = "595.71.05"
RUN_NAME = f"NVIDIA-Linux-x86_64-{DRIVER}.run"
STEPS = ("node.connect", "node.inventory", "lxc.create", "lxc.gpu_passthrough", "lxc.start", "driver.userspace",
         "gpu.detect", "torch.resolve", "venv.build")


# -- fixtures -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lab_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(lab_importable(), "the embedded lab (provisioner.lab.lab) is not in this build")
    return tmp_path_factory.mktemp("lab-cache")


@pytest.fixture(scope="module")
def playbook(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_test_playbook(tmp_path_factory.mktemp("playbook") / "faults.yaml", params=TEST_PARAMS)


@pytest.fixture(scope="module")
def clean_lab(tmp_path_factory: pytest.TempPathFactory, lab_cache: Path) -> Iterator[LabRun]:
    run = LabRun(tmp_path_factory.mktemp("clean"), lab_cache)
    with run.running():
        run.add_foreign_container()
        yield run


@pytest.fixture(scope="module")
def clean(clean_lab: LabRun, playbook: Path) -> dict[str, Any]:
    """The final state of a run that met no fault (the reference every fault's end state must equal)."""
    before = clean_lab.foreign_fingerprint()
    result = clean_lab.replay(playbook)
    assert result.rc == 0, f"the clean run failed: {result.describe()}"
    assert [result.status_of(k) for k in STEPS] == ["ok", "ok", "changed", "changed", "changed", "changed", "ok",
                                                      "ok", "changed"], result.describe()
    assert clean_lab.foreign_fingerprint() == before
    snap = snapshot(clean_lab.root)
    # What a proven end state has; a fault run is compared against all of this.
    assert snap["status"] == "running" and "tags: gpu-provisioner" in snap["conf"]
    assert sum(1 for line in snap["conf"] if line.startswith("dev")) == 12
    assert snap["nvml_libs"] == ["libnvidia-ml.so.1", f"libnvidia-ml.so.{DRIVER}"]
    assert snap["root_leftovers"] == [] and snap["installer_done"]
    assert snap["venv"]["exists"] and not snap["venv"]["building_marker"]
    assert any(d.startswith("torch==2.11.0") for d in snap["venv"]["dists"])
    assert {"lock.json", "torch.lock.txt"} <= set(snap["venv"]["records"])
    assert snap["venv"]["runtime"]["request"]["torch"] == "2.11.0"
    return snap


@pytest.fixture
def make_lab(tmp_path: Path, lab_cache: Path) -> Iterator[Any]:
    """make_lab(*scenarios) -> a running private lab with a foreign container; stopped afterwards."""
    runs: list[LabRun] = []

    def make(*scenarios: str) -> LabRun:
        run = LabRun(tmp_path / f"lab{len(runs)}", lab_cache, scenarios)
        runs.append(run)
        run.up()
        run.add_foreign_container()
        return run

    yield make
    for run in runs:
        run.down()


# -- checks shared by every fault -----------------------------------------------------------------

def assert_stopped_cleanly(result: Replay, step: str, *, rc: int, status: str = "failed",
                           says: tuple[str, ...] = ()) -> str:
    """The run stopped at `step` with exit `rc`, said `says`, skipped the rest; its log is whole."""
    assert result.rc == rc, result.describe()
    assert result.recap is not None and result.recap["status"] == "failed", result.describe()
    assert result.log_path is not None and result.log_path.is_file(), "no run log path printed"
    kinds = [e["kind"] for e in result.events]
    assert kinds[0] == "run.started" and kinds[-1] == "run.finished", kinds[:3] + kinds[-3:]
    assert result.events[-1]["status"] == "failed"
    assert result.status_of(step) == status, result.steps().get(step)
    message = result.message_of(step)
    for phrase in says:
        assert phrase in message, f"{phrase!r} not in the message of {step}: {message!r}"
    assert message.splitlines()[0][:80] in result.stderr, "the message is not on the console"
    later = STEPS[STEPS.index(step) + 1:]
    assert all(result.status_of(k) == "skipped" for k in later), {k: result.status_of(k) for k in later}
    return message


def assert_recovered(run: LabRun, playbook: Path, clean: dict[str, Any], foreign: dict[str, str]) -> Replay:
    """The next replay succeeds and the end state is the clean run's; the foreign CT is as it was."""
    result = run.replay(playbook)
    assert result.rc == 0, f"the replay after the fault failed: {result.describe()}"
    assert result.recap is not None and result.recap["status"] == "ok", result.describe()
    assert all(result.status_of(k) in ("ok", "changed") for k in STEPS), result.steps()
    differences = diff_snapshots(clean, snapshot(run.root))
    assert not differences, "the end state differs from a clean run's:\n" + "\n".join(differences)
    assert run.foreign_fingerprint() == foreign, "a container outside the playbook was touched"
    return result


def known_bug(ok: bool, report: str) -> None:
    """The last check of a test whose fault is otherwise survived: a reported engine shortcoming turns
    it into an expected failure (the test passes, unmarked, once the engine is fixed)."""
    if not ok:
        pytest.xfail(f"reported engine bug: {report}")


# -- SSH connection dropped -----------------------------------------------------------------------

def test_ssh_drop_during_driver_install_is_reported_interrupted_and_replay_resumes(
        make_lab: Any, playbook: Path, clean: dict[str, Any]) -> None:
    run = make_lab("ssh-drop")
    foreign = run.foreign_fingerprint()
    first = run.replay(playbook)
    message = assert_stopped_cleanly(first, "driver.userspace", rc=4, status="interrupted",
                                     says=("connection dropped while running", "--no-kernel-modules",
                                           "the step was interrupted while applying; replay the playbook to resume"))
    assert "interrupted" in first.stderr and message.splitlines()[-1] in first.stderr
    dropped = (run.root / "run" / "ssh-drop.log").read_text()
    assert "--no-kernel-modules" in dropped, dropped
    assert run.foreign_fingerprint() == foreign
    again = assert_recovered(run, playbook, clean, foreign)
    assert [again.status_of(k) for k in STEPS[2:5]] == ["ok", "ok", "ok"]  # nothing before the drop is redone


def test_idempotent_probe_is_retried_with_backoff_after_a_drop_and_a_non_idempotent_one_is_not(
        clean_lab: LabRun, playbook: Path) -> None:
    """The lab drops the connection of a command naming the installer flag; a probe survives it."""
    from provisioner.events import Bus
    from provisioner.facts.base import Fact, FactCache
    from provisioner.playbook import load
    from provisioner.session import node_transport, point_at_lab
    from provisioner.transport.base import TransportError

    target = point_at_lab(load(playbook), clean_lab.root).target
    # The installer flag is only an argument of `sh -c` ($0), so the command itself is harmless.
    argv = ["sh", "-c", "sleep 1; echo probe-answer", "--no-kernel-modules"]
    log = clean_lab.root / "run" / "ssh-drop.log"

    async def probe(idempotent: bool) -> tuple[str, float]:
        node = node_transport(target, Bus())
        fact = Fact(name=f"probe-{idempotent}", argv=argv, parse=lambda out: out.strip(), idempotent=idempotent)
        started = time.monotonic()
        try:
            return await FactCache().get(node, fact), time.monotonic() - started
        finally:
            await node.close()

    clean_lab.arm_once("ssh-drop")
    value, seconds = asyncio.run(probe(True))
    assert value == "probe-answer"
    assert seconds >= 0.5 + 1.0, "the retry came without the 0.5 s backoff"
    assert log.read_text().count("LAB: dropped the connection") == 1  # one drop, then the retry got through

    clean_lab.arm_once("ssh-drop")
    with pytest.raises(TransportError, match="connection dropped"):
        asyncio.run(probe(False))
    assert log.read_text().count("LAB: dropped the connection") == 2
    clean_lab.set_scenarios()


# -- Proxmox tasks --------------------------------------------------------------------------------

def test_proxmox_task_failure_leaves_no_container_and_replay_creates_it(
        make_lab: Any, playbook: Path, clean: dict[str, Any]) -> None:
    run = make_lab("task-fails")
    foreign = run.foreign_fingerprint()
    first = run.replay(playbook)
    assert_stopped_cleanly(first, "lxc.create", rc=1, says=(
        "Proxmox task failed", "unable to create CT 200", "insufficient free space",
        "fix: read the task log above; fix the cause and replay"))
    assert not run.state().has_ct(200), "a failed create left a container behind"
    assert run.foreign_fingerprint() == foreign
    run.set_scenarios()  # the operator extended the volume group
    assert_recovered(run, playbook, clean, foreign)


def test_proxmox_task_that_never_finishes_times_out_and_replay_starts_the_container(
        make_lab: Any, playbook: Path, clean: dict[str, Any]) -> None:
    run = make_lab()
    foreign = run.foreign_fingerprint()
    # Once the container exists, every Proxmox task hangs (the worker is stuck): the start task is the next one.
    first = run.replay(playbook, after_step=("lxc.create", lambda: run.set_scenarios("api-timeout")))
    assert_stopped_cleanly(first, "lxc.start", rc=1, says=(
        "start CT 200: Proxmox task did not finish in time", "did not finish within 10 s (last status: running)",
        "check the task in the Proxmox UI"))
    assert first.steps()["lxc.start"]["duration_s"] < 60
    assert run.state().get_status(200).status == "stopped"
    assert run.foreign_fingerprint() == foreign
    run.set_scenarios()  # the node's task worker is healthy again
    assert_recovered(run, playbook, clean, foreign)


def test_container_start_failure_is_reported_with_the_task_log_and_replay_starts_it(
        make_lab: Any, playbook: Path, clean: dict[str, Any]) -> None:
    run = make_lab("start-fails")
    foreign = run.foreign_fingerprint()
    first = run.replay(playbook)
    assert_stopped_cleanly(first, "lxc.start", rc=1, says=(
        "start CT 200: Proxmox task failed", "startup for container '200' failed"))
    decisive = 'Failed to setup limits for the "devices" controller'  # the task log's decisive line
    assert any(decisive in line for f in first.steps()["lxc.start"]["diagnosis"] for line in f["evidence"])
    assert run.state().get_status(200).status == "stopped"
    assert sum(1 for ln in run.state().conf_path(200).read_text().splitlines() if ln.startswith("dev")) == 12
    assert run.foreign_fingerprint() == foreign
    run.set_scenarios()
    again = assert_recovered(run, playbook, clean, foreign)
    assert again.status_of("lxc.create") == "ok" and again.status_of("lxc.gpu_passthrough") == "ok"
    known_bug(decisive in first.stderr,
              "the fix says 'read the task log above' but the console never shows the task log "
              "(provisioner/steps/pve_ops.py call(): TaskFailed's log goes only into StepFailed.evidence)")


# -- inside the container -------------------------------------------------------------------------

def test_apt_lock_held_in_the_container_is_waited_for(make_lab: Any, playbook: Path, clean: dict[str, Any]) -> None:
    """The lab's lock is held for the first two apt-get runs; the driver step waits and retries."""
    run = make_lab("apt-lock")
    foreign = run.foreign_fingerprint()
    result = run.replay(playbook)
    assert result.rc == 0, result.describe()
    warnings = [e["text"] for e in result.events if e["kind"] == "message" and e["level"] == "warning"]
    assert "apt/dpkg lock held by another process; retrying (1/6)" in warnings
    assert "apt/dpkg lock held by another process; retrying (2/6)" in warnings
    assert any("Could not get lock /var/lib/dpkg/lock-frontend" in t for t in result.texts())
    differences = diff_snapshots(clean, snapshot(run.root))
    assert not differences, "\n".join(differences)
    assert run.foreign_fingerprint() == foreign


@pytest.mark.xfail(strict=True, reason="provisioner/steps/torch_steps.py VenvBuild.apply finishes an interrupted "
                   "build with a plain `uv pip install`, which answers 'Checked 2 packages' for the torch whose copy "
                   "ENOSPC cut short; the smoke test then fails (import torch: files missing) on this and every later "
                   "replay; reported with the fix")
def test_disk_full_while_installing_the_venv_then_replay_finishes_the_build(
        make_lab: Any, playbook: Path, clean: dict[str, Any]) -> None:
    run = make_lab("disk-full")  # the container's /opt is an 8 MiB tmpfs; the torch wheel does not fit
    foreign = run.foreign_fingerprint()
    first = run.replay(playbook)
    assert_stopped_cleanly(first, "venv.build", rc=1, says=("uv failed while installing the torch",))
    assert any("No space left on device" in t for t in first.texts())  # uv's cause, in the run log
    opt = run.root / "ct" / "200" / "rootfs" / "opt"
    assert (opt / "torch-venv" / ".provisioner-building").exists(), "the interrupted build is not marked"
    assert run.foreign_fingerprint() == foreign
    # The operator grows the volume (what is on it stays).
    subprocess.run(["mount", "-o", "remount,size=256m", str(opt)], check=True)
    again = assert_recovered(run, playbook, clean, foreign)
    assert again.status_of("venv.build") == "changed"
    finding = first.steps()["venv.build"]
    known_bug("No space left on device" in finding["message"] + json.dumps(finding["diagnosis"]),
              "the step says only 'uv failed while installing the torch packages': neither the message nor a "
              "diagnosis names the full disk (torch_steps._install_failure / diagnose rules)")


def test_corrupted_download_is_refused_and_never_executed(make_lab: Any, playbook: Path,
                                                          clean: dict[str, Any]) -> None:
    run = make_lab("corrupt-download")
    foreign = run.foreign_fingerprint()
    first = run.replay(playbook)
    assert_stopped_cleanly(first, "driver.userspace", rc=1, says=(
        f"checksum mismatch for {RUN_NAME}", "will not be executed", "fix: the download is corrupt or tampered with"))
    drivers = run.cache_dir / "drivers"
    assert [p.name for p in drivers.iterdir() if ".corrupt-" in p.name], "the bad file was not kept aside"
    assert not (drivers / RUN_NAME).exists()
    rootfs = run.root / "ct" / "200" / "rootfs"
    assert not list((rootfs / "root").glob("NVIDIA-*")) and not (rootfs / "var/log/nvidia-installer.log").exists()
    assert not any(e["kind"] == "command.started" and RUN_NAME in e["command"] for e in first.events)
    assert run.foreign_fingerprint() == foreign
    assert_recovered(run, playbook, clean, foreign)


def _mirror_params(mirror: FlakyMirror) -> dict[str, dict[str, Any]]:
    return {**TEST_PARAMS, "driver.userspace": {"driver_mirror": mirror.base_url + "/XFree86"}}


@pytest.mark.xfail(strict=True, reason="provisioner/download.py download() takes a body cut short by a closed "
                                       "connection for a whole file (no length check), so it is refused as "
                                       "corrupt instead of resumed; reported with the fix")
def test_download_interrupted_midway_is_resumed(make_lab: Any, clean: dict[str, Any], tmp_path: Path) -> None:
    run = make_lab()
    foreign = run.foreign_fingerprint()
    conn = run.root / "connection.json"
    with FlakyMirror(json.loads(conn.read_text())["driver_mirror"], cut_fraction=0.5) as mirror:
        pb = write_test_playbook(tmp_path / "mirror.yaml", params=_mirror_params(mirror))
        result = run.replay(pb)
        assert result.rc == 0, result.describe()
        runs = [(rng, status) for path, rng, status in mirror.requests if path.endswith(".run")]
        assert runs[0] == (None, 200) and runs[1][1] == 206 and str(runs[1][0]).startswith("bytes="), runs
    differences = diff_snapshots(clean, snapshot(run.root))
    assert not differences, "\n".join(differences)
    assert run.foreign_fingerprint() == foreign


def test_download_left_partial_by_a_killed_run_is_resumed(make_lab: Any, clean: dict[str, Any],
                                                          tmp_path: Path) -> None:
    run = make_lab()
    foreign = run.foreign_fingerprint()
    upstream = json.loads((run.root / "connection.json").read_text())["driver_mirror"]
    with urllib.request.urlopen(f"{upstream}/XFree86/Linux-x86_64/{DRIVER}/{RUN_NAME}", timeout=30) as resp:
        whole = resp.read()
    part = run.cache_dir / "drivers" / f"{RUN_NAME}.part"  # what a run killed mid-download leaves
    part.parent.mkdir(parents=True)
    part.write_bytes(whole[: len(whole) // 3])
    with FlakyMirror(upstream, cut_fraction=None) as mirror:
        result = run.replay(write_test_playbook(tmp_path / "mirror.yaml", params=_mirror_params(mirror)))
        assert result.rc == 0, result.describe()
        runs = [(rng, status) for path, rng, status in mirror.requests if path.endswith(".run")]
    assert runs == [(f"bytes={len(whole) // 3}-", 206)], runs
    assert (run.cache_dir / "drivers" / RUN_NAME).read_bytes() == whole and not part.exists()
    differences = diff_snapshots(clean, snapshot(run.root))
    assert not differences, "\n".join(differences)
    assert run.foreign_fingerprint() == foreign


def test_installer_killed_midway_is_reported_and_replay_reinstalls(make_lab: Any, playbook: Path,
                                                                   clean: dict[str, Any]) -> None:
    run = make_lab("installer-killed")
    foreign = run.foreign_fingerprint()
    first = run.replay(playbook)
    assert_stopped_cleanly(first, "driver.userspace", rc=1, says=("the NVIDIA installer failed",))
    ended = [e for e in first.events if e["kind"] == "command.ended" and RUN_NAME in e["command"]]
    assert ended and ended[-1]["exit_status"] == 137, ended
    lib = run.root / "ct" / "200" / "rootfs" / "usr/lib/x86_64-linux-gnu"
    assert not list(lib.glob("libnvidia-ml.so.*")), "the killed installer got further than the lab lets it"
    assert run.foreign_fingerprint() == foreign
    again = assert_recovered(run, playbook, clean, foreign)
    assert again.status_of("driver.userspace") == "changed"
    message = first.message_of("driver.userspace")
    known_bug("killed" in message or "137" in message,
              "a SIGKILLed installer is reported as 'the NVIDIA installer failed' with advice about "
              "--no-kernel-modules and kmod (provisioner/steps/driver.py _installer_failed)")


def test_venv_build_interrupted_by_a_drop_is_finished_by_the_replay(make_lab: Any, playbook: Path,
                                                                    clean: dict[str, Any]) -> None:
    run = make_lab()
    foreign = run.foreign_fingerprint()
    # Armed once the driver is in: the next command the lab drops is the venv's `uv pip install`.
    first = run.replay(playbook, after_step=("driver.userspace", lambda: run.arm_once("ssh-drop")))
    assert_stopped_cleanly(first, "venv.build", rc=4, status="interrupted", says=(
        "connection dropped while running", "uv pip install", "replay the playbook to resume"))
    venv = run.root / "ct" / "200" / "rootfs" / "opt" / "torch-venv"
    assert (venv / ".provisioner-building").exists() and not (venv / "runtime.json").exists()
    assert run.foreign_fingerprint() == foreign
    again = assert_recovered(run, playbook, clean, foreign)
    assert again.status_of("venv.build") == "changed"
    assert any("finish the interrupted build" in c for e in again.events if e["kind"] == "step.plan"
               for c in e["changes"])
