"""End to end against the lab: the shipped playbook through the real CLI (proxmoxer over HTTPS, asyncssh to the
lab's SSH endpoint, pct/nvidia-smi stand-ins, real uv, real torch gloo burn-in)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.support.lab import (
    cli,
    golden_first_plan,
    golden_playbook,
    golden_recorded,
    lab_cli_env,
    lab_down,
    lab_up,
    last_json,
)
from tests.support.labrun import LabRun
from tests.support.require import require

PLAYBOOK = Path(__file__).resolve().parents[1] / "playbooks" / "blackwell-8gpu-lxc.yaml"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


# the run's first user of the golden node builds it (tests/support/lab.py: a whole provisioning)
@pytest.mark.timeout(1800)
def test_plan_replay_idempotent_and_recorded(golden_copy: Callable[[Path], LabRun], tmp_path: Path) -> None:
    # The node before its provisioning and the provisioning itself are the golden node's (tests/support/lab.py
    # `_provision_golden`): it ran `plan --check --json` on the new node first and kept how it ended, then the
    # first replay with `--record`, which `check_provisioned` checks where it ran: exit 0, recap ok, no step
    # failed and at least 6 changed, the burn-in verdict pass, every API request of the run validated against
    # the PVE 8.4 schema and none refused, POSTs and GETs among them. This copy carries the plan and the recording.
    run = golden_copy(tmp_path / "node")
    root = run.root
    plan = golden_first_plan(run)
    assert plan["rc"] == 10, plan["stderr"][-3000:]
    assert plan["venvs"] == [], f"plan must not change anything: {plan['venvs']}"

    # The recorded playbook holds what ran plus the resolved facts, secrets as references (and replays clean).
    recorded = golden_recorded(run)
    text = recorded.read_text()
    assert "resolved:" in text and "venv_lock" in text and "cu128" in text and "595.71.05" in text
    password = Path(root / "private" / "api-password").read_text().strip()
    assert password not in text and "file:" in text
    assert str(yaml.safe_load(text)["target"]["api"]["password"]).startswith(("env:", "file:")), "not a reference"

    with run.running():
        lab = run.env()
        second = cli(lab, "replay", str(golden_playbook(run)), "--lab", "--json")
        assert second.returncode == 0, second.stderr[-3000:]
        (counts2,) = last_json(second.stdout)["hosts"].values()  # type: ignore[union-attr]
        assert counts2 == {"ok": 11, "changed": 0, "failed": 0, "skipped": 0, "interrupted": 0}

        third = cli(lab, "replay", str(recorded), "--lab", "--json")
        assert third.returncode == 0, third.stderr[-3000:]
        (counts3,) = last_json(third.stdout)["hosts"].values()  # type: ignore[union-attr]
        assert counts3["changed"] == 0 and counts3["failed"] == 0

        check = cli(lab, "plan", str(golden_playbook(run)), "--lab", "--check", "--json")
        assert check.returncode == 0, check.stderr[-2000:]

    # The run logs (the golden node's plan and provisioning, and this copy's runs) never hold the API password.
    logs = list((run.state_dir / "runs").glob("*.jsonl"))
    assert len(logs) >= 5, logs
    for log in logs:
        assert password not in log.read_text()


def test_foreign_container_is_left_untouched(tmp_path: Path) -> None:
    require(os.geteuid() == 0, "the lab needs root (mount namespaces, device nodes)")
    root = tmp_path / "lab"
    env = lab_cli_env(root)
    assert lab_up(env, root, timeout=180).returncode == 0
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
        lab_down(env, root)
