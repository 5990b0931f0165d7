"""driver.userspace against the lab: a container with another userspace version is planned as a replacement
and fixed; the installer's behaviour is what the step depends on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from provisioner.environ import copy_environ
from tests.support.concurrent import play_selected
from tests.support.lab import lab_down, lab_up
from tests.support.labcache import with_shared_wheels
from tests.support.require import require
from tests.support.streams import streamed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

LIGHT = """schema_version: 1
name: light
target:
  host: 127.0.0.1
  node: pve
  container: {ct}
steps:
  - kind: node.connect
  - kind: node.inventory
    params: {{expected_gpus: 8}}
  - kind: lxc.create
    params: {{hostname: drv-test, cores: 4, memory: 8192, rootfs_size_gb: 16}}
  - kind: lxc.gpu_passthrough
    params: {{mode: {mode}}}
  - kind: lxc.start
  - kind: driver.userspace
  - kind: gpu.detect
"""


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provisioner", *streamed(args)], env=env, capture_output=True,
                          text=True, timeout=600)


def start_lab(tmp_path: Path, *scenarios: str) -> dict[str, str]:
    require(os.geteuid() == 0, "the lab needs root (mount namespaces, device nodes)")
    root = tmp_path / "lab"
    env = copy_environ() | dict(PROVISIONER_LAB_ROOT=str(root), PROVISIONER_STATE_DIR=str(tmp_path / "state"),
                                PROVISIONER_CACHE_DIR=str(with_shared_wheels(tmp_path / "cache")))
    up = lab_up(env, root, scenarios=scenarios)
    assert up.returncode == 0, up.stderr
    return env


def _driver_mismatch_is_planned_as_replacement_and_fixed(tmp_path: Path) -> None:
    env = start_lab(tmp_path, "driver-mismatch")
    try:
        pb = tmp_path / "light.yaml"
        # Raw mode: also exercises the root edit of /etc/pve/lxc/<vmid>.conf through the lab's node shell.
        pb.write_text(LIGHT.format(ct=201, mode="raw"))
        # Create and start the container; the lab seeds userspace 580.95.05 in it (scenario driver-mismatch).
        first = cli(env, "replay", str(pb), "--lab", "--json")
        assert first.returncode == 0, first.stderr[-4000:]
        assert "replace userspace 580.95.05 with 595.71.05" in first.stderr
        (counts,) = json.loads(first.stdout.strip().splitlines()[-1])["hosts"].values()
        assert counts["failed"] == 0
        # Fixed: nvidia-smi in the container reports the host version for all 8 GPUs, and a plan shows no change.
        plan = cli(env, "plan", str(pb), "--lab", "--check", "--json")
        assert plan.returncode == 0, plan.stderr[-3000:]
        assert "userspace 595.71.05 installed, equal to the host module" in plan.stderr
        assert "8 GPU(s) visible in CT 201, compute capability 12.0" in plan.stderr
        conf = (Path(env["PROVISIONER_LAB_ROOT"]) / "etc" / "pve" / "lxc" / "201.conf").read_text()
        assert "lxc.cgroup2.devices.allow: c 195:* rwm" in conf and "lxc.mount.entry: /dev/nvidia7 dev/nvidia7" in conf
    finally:
        lab_down(env, Path(env["PROVISIONER_LAB_ROOT"]))


def _installer_killed_after_its_libraries_is_reinstalled(tmp_path: Path) -> None:
    """A dropped connection or the OOM killer can stop the installer after it wrote libnvidia-ml.so.<ver>:
    the right libraries are there, the install is not. The step reads the installer's own record (its log's
    completion line, the .run it copied still in /root) and plans a reinstall."""
    from provisioner.lab.state import LabState

    env = start_lab(tmp_path)
    try:
        pb = tmp_path / "light.yaml"
        pb.write_text(LIGHT.format(ct=203, mode="dev"))
        first = cli(env, "replay", str(pb), "--lab", "--json")
        assert first.returncode == 0, first.stderr[-4000:]
        ct = LabState(Path(env["PROVISIONER_LAB_ROOT"])).ct_root(203)
        log = ct / "var" / "log" / "nvidia-installer.log"
        complete = log.read_text()
        assert "is now complete" in complete
        # what a kill between the libraries and the completion line leaves
        log.write_text(complete.split("-> Driver file installation is complete.")[0])
        run = ct / "root" / "NVIDIA-Linux-x86_64-595.71.05.run"
        run.write_text("#!/bin/sh\n")
        plan = cli(env, "plan", str(pb), "--lab", "--check", "--json")
        assert plan.returncode == 10, plan.stderr[-3000:]
        assert "reinstall NVIDIA userspace 595.71.05" in plan.stderr
        assert "the last install did not finish" in plan.stderr and "is still in /root" in plan.stderr
        again = cli(env, "replay", str(pb), "--lab", "--json")
        assert again.returncode == 0, again.stderr[-4000:]
        assert "is now complete" in log.read_text() and not run.exists()
        assert cli(env, "plan", str(pb), "--lab", "--check", "--json").returncode == 0
    finally:
        lab_down(env, Path(env["PROVISIONER_LAB_ROOT"]))


def _corrupt_download_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    env = start_lab(tmp_path, "corrupt-download")
    try:
        pb = tmp_path / "light.yaml"
        pb.write_text(LIGHT.format(ct=202, mode="auto"))
        run = cli(env, "replay", str(pb), "--lab", "--json")
        assert run.returncode == 1
        assert "checksum mismatch" in run.stderr and "will not be executed" in run.stderr
        assert "NVIDIA-Linux-x86_64-595.71.05.run --silent" not in run.stderr  # the installer never ran
        kept = list((Path(env["PROVISIONER_CACHE_DIR"]) / "drivers").glob("*.corrupt-*"))
        assert kept, "the corrupt file is kept aside for inspection"
        ct_root = Path(env["PROVISIONER_LAB_ROOT"]) / "ct" / "202"
        assert not list(ct_root.rglob("NVIDIA-Linux-*.run")), "nothing was copied into the container"
        # The lab corrupts once; the replay downloads a good copy and finishes.
        again = cli(env, "replay", str(pb), "--lab", "--json")
        assert again.returncode == 0, again.stderr[-3000:]
    finally:
        lab_down(env, Path(env["PROVISIONER_LAB_ROOT"]))


def _noop_replay_records_the_same_resolved_state(tmp_path: Path) -> None:
    """issue 23: a recording holds the whole `resolved` state whatever the run's path. The install's recording
    and a no-op replay's recording (of the same original playbook, which has no `resolved`) hold the same
    section, the driver installer and its sha256 pin included; so does a no-op replay of the recording."""
    import yaml

    env = start_lab(tmp_path)
    try:
        pb = tmp_path / "light.yaml"
        pb.write_text(LIGHT.format(ct=204, mode="dev"))
        recordings = []
        for name, book in (("install", pb), ("noop", pb), ("noop-of-recording", tmp_path / "install.yaml")):
            out = tmp_path / f"{name}.yaml"
            run = cli(env, "replay", str(book), "--lab", "--json", "--record", str(out))
            assert run.returncode == 0, run.stderr[-4000:]
            (counts,) = json.loads(run.stdout.strip().splitlines()[-1])["hosts"].values()
            assert (counts["changed"] > 0) == (name == "install"), (name, counts)
            recordings.append(yaml.safe_load(out.read_text())["resolved"])
        driver = recordings[0]["driver"]
        assert driver["version"] == "595.71.05" and len(driver["sha256"]) == 64, driver
        int(driver["sha256"], 16)
        assert recordings[1] == recordings[0], (recordings[0], recordings[1])
        assert recordings[2] == recordings[0], (recordings[0], recordings[2])
    finally:
        lab_down(env, Path(env["PROVISIONER_LAB_ROOT"]))


PROFILE_NOISE = """# a site's login banner: to stdout and to stderr, as profile.d scripts do
echo "Welcome to $(hostname) - managed by ops"
echo "warning: proxy settings loaded" >&2
"""


def _facts_read_past_login_shell_noise_in_the_container(tmp_path: Path) -> None:
    """issue #19: one profile.d echo made gpu.detect fail with a ParseError; facts run without a login shell."""
    import asyncio

    from provisioner.events import Bus
    from provisioner.lab.state import LabState
    from provisioner.playbook import loads
    from provisioner.session import node_transport, point_at_lab
    from provisioner.transport.container import ContainerTransport

    env = start_lab(tmp_path)
    try:
        pb = tmp_path / "light.yaml"
        pb.write_text(LIGHT.format(ct=202, mode="dev"))
        first = cli(env, "replay", str(pb), "--lab", "--json")
        assert first.returncode == 0, first.stderr[-4000:]
        root = Path(env["PROVISIONER_LAB_ROOT"])
        (LabState(root).ct_root(202) / "etc" / "profile.d" / "zz-banner.sh").write_text(PROFILE_NOISE)

        async def login_shell_output() -> list[str]:  # the noise is real: a login shell prints it
            target = point_at_lab(loads(pb.read_text()), root).target
            node = node_transport(target, Bus())
            try:
                return (await ContainerTransport(node, 202).run(["true"], timeout=60, quiet=True)).lines
            finally:
                await node.close()

        lines = asyncio.run(login_shell_output())
        assert any("Welcome to" in line for line in lines) and "warning: proxy settings loaded" in lines
        plan = cli(env, "plan", str(pb), "--lab", "--check", "--json")
        assert plan.returncode == 0, plan.stderr[-3000:]
        assert "8 GPU(s) visible in CT 202, compute capability 12.0" in plan.stderr
        assert "ParseError" not in plan.stderr and "cannot parse" not in plan.stderr
    finally:
        lab_down(env, Path(env["PROVISIONER_LAB_ROOT"]))


# -- each test checks its own script; the scripts (one lab each) play concurrently -----------------

SCRIPTS: dict[str, Callable[[Path], None]] = {
    "test_driver_mismatch_is_planned_as_replacement_and_fixed": _driver_mismatch_is_planned_as_replacement_and_fixed,
    "test_installer_killed_after_its_libraries_is_reinstalled": _installer_killed_after_its_libraries_is_reinstalled,
    "test_corrupt_download_is_refused_and_nothing_runs": _corrupt_download_is_refused_and_nothing_runs,
    "test_facts_read_past_login_shell_noise_in_the_container": _facts_read_past_login_shell_noise_in_the_container,
    "test_noop_replay_records_the_same_resolved_state": _noop_replay_records_the_same_resolved_state,
}
#: scripts at once: none runs a burn-in (the playbook ends at gpu.detect); each mostly waits on SSH and tasks
WORKERS = int(os.environ.get("DRIVER_LAB_WORKERS", "4"))


@pytest.fixture(scope="module")
def played(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[None]]]:
    yield from play_selected(request, tmp_path_factory, SCRIPTS, WORKERS)


def test_driver_mismatch_is_planned_as_replacement_and_fixed(played: dict[str, Future[None]]) -> None:
    played["test_driver_mismatch_is_planned_as_replacement_and_fixed"].result()  # re-raises the script's failure (or skip)


def test_installer_killed_after_its_libraries_is_reinstalled(played: dict[str, Future[None]]) -> None:
    played["test_installer_killed_after_its_libraries_is_reinstalled"].result()  # re-raises the script's failure (or skip)


def test_corrupt_download_is_refused_and_nothing_runs(played: dict[str, Future[None]]) -> None:
    played["test_corrupt_download_is_refused_and_nothing_runs"].result()  # re-raises the script's failure (or skip)


def test_facts_read_past_login_shell_noise_in_the_container(played: dict[str, Future[None]]) -> None:
    played["test_facts_read_past_login_shell_noise_in_the_container"].result()  # re-raises the script's failure (or skip)


def test_noop_replay_records_the_same_resolved_state(played: dict[str, Future[None]]) -> None:
    played["test_noop_replay_records_the_same_resolved_state"].result()  # re-raises the script's failure (or skip)
