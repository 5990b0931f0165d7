"""End to end against the lab: the shipped playbook through the real CLI (proxmoxer over HTTPS, asyncssh to the
lab's SSH endpoint, pct/nvidia-smi stand-ins, real uv, real torch gloo burn-in)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest
import yaml

from tests.support.concurrent import play_selected
from tests.support.lab import cli, lab_cli_env, last_json, running_lab
from tests.support.require import require

PLAYBOOK = Path(__file__).resolve().parents[1] / "playbooks" / "blackwell-8gpu-lxc.yaml"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]










def _plan_replay_idempotent_and_recorded(tmp_path: Path) -> None:
    with running_lab(tmp_path) as lab:
        _plan_replay_idempotent_and_recorded_on(lab, tmp_path)


def _plan_replay_idempotent_and_recorded_on(lab: dict[str, str], tmp_path: Path) -> None:
    root = Path(lab["PROVISIONER_LAB_ROOT"])
    plan = cli(lab, "plan", str(PLAYBOOK), "--lab", "--check", "--json")
    assert plan.returncode == 10, plan.stderr[-3000:]
    assert not list((root / "ct").glob("*/rootfs/opt/torch-venv")), "plan must not change anything"

    recorded = tmp_path / "recorded.yaml"
    first = cli(lab, "replay", str(PLAYBOOK), "--lab", "--json", "--record", str(recorded))
    assert first.returncode == 0, first.stderr[-5000:]
    recap = last_json(first.stdout)
    assert recap["status"] == "ok"
    (counts,) = recap["hosts"].values()  # type: ignore[union-attr]
    assert counts["failed"] == 0 and counts["changed"] >= 6, counts
    assert "burn-in verdict: pass" in first.stderr

    # Every API request of the run was validated against the PVE 8.4 schema, and none was refused.
    requests = [json.loads(x) for x in (root / "api-requests.jsonl").read_text().splitlines() if x.strip()]
    assert len(requests) >= 10
    assert all(r["validated"] for r in requests), [r for r in requests if not r["validated"]][:3]
    assert all(r["status"] < 400 for r in requests), [r for r in requests if r["status"] >= 400][:3]
    assert {"POST", "GET"} <= {r["method"] for r in requests}

    second = cli(lab, "replay", str(PLAYBOOK), "--lab", "--json")
    assert second.returncode == 0, second.stderr[-3000:]
    (counts2,) = last_json(second.stdout)["hosts"].values()  # type: ignore[union-attr]
    assert counts2 == {"ok": 11, "changed": 0, "failed": 0, "skipped": 0, "interrupted": 0}

    # The recorded playbook holds what ran plus the resolved facts, secrets as references, and replays clean.
    text = recorded.read_text()
    assert "resolved:" in text and "venv_lock" in text and "cu128" in text and "595.71.05" in text
    password = Path(root / "private" / "api-password").read_text().strip()
    assert password not in text and "file:" in text
    third = cli(lab, "replay", str(recorded), "--lab", "--json")
    assert third.returncode == 0, third.stderr[-3000:]
    (counts3,) = last_json(third.stdout)["hosts"].values()  # type: ignore[union-attr]
    assert counts3["changed"] == 0 and counts3["failed"] == 0

    check = cli(lab, "plan", str(PLAYBOOK), "--lab", "--check", "--json")
    assert check.returncode == 0, check.stderr[-2000:]

    # The run logs never hold the API password.
    for log in (root / "state" / "runs").glob("*.jsonl"):
        assert password not in log.read_text()


def _foreign_container_is_left_untouched(tmp_path: Path) -> None:
    require(os.geteuid() == 0, "the lab needs root (mount namespaces, device nodes)")
    root = tmp_path / "lab"
    env = lab_cli_env(root)
    assert cli(env, "lab", "up", "--root", str(root), timeout=180).returncode == 0
    try:
        from provisioner import secrets
        from provisioner.proxmox.client import PveClient
        from provisioner.session import allow_lab_secrets

        conn = allow_lab_secrets(root)  # the lab's own password file, allowed as `--lab` allows it
        client = PveClient.https("127.0.0.1", port=conn["api"]["port"], user="root@pam",
                                 password=secrets.resolve(conn["api"]["password"]), verify=conn["api"]["ca_file"])
        upid = client.create_ct("pve", {"vmid": 200, "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
                                        "hostname": "someone-else", "unprivileged": 1, "rootfs": "local-lvm:8"})
        client.wait_task("pve", upid, timeout=30, poll=0.1)
        conf = root / "etc" / "pve" / "lxc" / "200.conf"
        before = conf.read_bytes()
        run = cli(env, "replay", str(PLAYBOOK), "--lab", "--json")
        assert run.returncode == 1
        assert "CT 200 already exists" in run.stderr and "left untouched" in run.stderr
        assert "someone-else" in run.stderr and "blackwell-torch" in run.stderr
        recap = last_json(run.stdout)
        (counts,) = recap["hosts"].values()  # type: ignore[union-attr]
        steps = len(yaml.safe_load(PLAYBOOK.read_text())["steps"])
        assert counts == {"ok": 2, "changed": 0, "failed": 1, "skipped": steps - 3, "interrupted": 0}, counts  # create is step 3
        assert conf.read_bytes() == before
        assert not any(r["method"] in ("PUT", "DELETE") for r in
                       (json.loads(x) for x in (root / "api-requests.jsonl").read_text().splitlines() if x.strip())
                       if "/lxc/200" in r["path"])
    finally:
        cli(env, "lab", "down", "--root", str(root), timeout=60)


# -- each test checks its own script; the two scripts (one lab each) play at once ----------------

SCRIPTS: dict[str, Callable[[Path], None]] = {
    "test_plan_replay_idempotent_and_recorded": _plan_replay_idempotent_and_recorded,
    "test_foreign_container_is_left_untouched": _foreign_container_is_left_untouched,
}


@pytest.fixture(scope="module")
def played(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[None]]]:
    yield from play_selected(request, tmp_path_factory, SCRIPTS, int(os.environ.get("E2E_LAB_WORKERS", "2")))


def test_plan_replay_idempotent_and_recorded(played: dict[str, Future[None]]) -> None:
    played["test_plan_replay_idempotent_and_recorded"].result()  # re-raises the script's failure (or skip)


def test_foreign_container_is_left_untouched(played: dict[str, Future[None]]) -> None:
    played["test_foreign_container_is_left_untouched"].result()  # re-raises the script's failure (or skip)
