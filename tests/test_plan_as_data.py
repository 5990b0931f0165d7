"""A plan that hides nothing (issue #28 item 4): `plan` never says "changed" (it changed nothing), and
`plan --json` lists each change by step with the commands the apply will run — for `driver.userspace` the
apt packages it installs in the container and the installer command — redacted like every event."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provisioner.render.console import status_word
from tests.support.lab import PLAYBOOK, cli, last_json, running_lab

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_plan_json_lists_changes_and_commands_by_step_on_a_fresh_lab(tmp_path: Path) -> None:
    with running_lab(tmp_path) as lab:
        plan = cli(lab, "plan", str(PLAYBOOK), "--lab", "--json")
    assert plan.returncode == 0, plan.stderr[-3000:]
    doc = last_json(plan.stdout)
    host, counts = next(iter(doc["hosts"].items()))  # type: ignore[attr-defined]
    steps = {entry["step"]: entry for entry in doc["plan"][host]}  # type: ignore[index]
    # the recap's count is exactly the steps it names
    assert counts["changed"] == len([e for e in doc["plan"][host] if e["changes"]])  # type: ignore[index]
    assert any("create CT 200" in c for c in steps["lxc.create"]["changes"])
    driver = steps["driver.userspace"]
    commands = "\n".join(driver["commands"])
    assert "apt-get install -y --no-install-recommends kmod pkg-config" in commands
    assert "--no-kernel-modules" in commands and "NVIDIA-Linux-x86_64-595.71.05.run" in commands
    # the console speaks of a plan, not of changes made
    lines = plan.stderr.splitlines()
    assert not any(line.strip().startswith("changed") for line in lines), plan.stderr[-2000:]
    assert any(line.strip().startswith("will change") for line in lines)
    # no secret in the data: the lab's password is a reference resolved at run time
    password = (Path(lab["PROVISIONER_LAB_ROOT"]) / "credentials.json")
    if password.exists():
        secret = json.loads(password.read_text()).get("password", "")
        assert not secret or secret not in plan.stdout


def test_status_words_of_a_plan() -> None:
    assert status_word("changed", "plan") == "will change"
    assert status_word("ok", "plan") == "no change"
    assert status_word("changed", "apply") == "changed"
    assert status_word("failed", "plan") == "failed"
