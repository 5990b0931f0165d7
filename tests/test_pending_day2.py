"""Issue 24 item 2 as a user meets it, PVE 8.4 and PVE 9: after `lab upgrade-driver` and a devN mode change
on the running container, `plan --check` names the pending change and the restart (pve-container keeps a
changed existing devN of a running container in ``[pve:pending]``: ``vmconfig_hotplug_pending`` dies
"skip" for it), `replay` converges (restart, new userspace), and `plan --check` then exits 0.

`provisioner plan/replay --lab` subprocesses against `provisioner lab up --pve …` (HTTPS API, SSH, the
node's pct), with the shipped playbook's steps up to driver.userspace.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.lab import lab_down, lab_up
from tests.support.labcache import with_shared_wheels
from tests.support.require import require
from tests.support.streams import streamed

SHIPPED = Path(__file__).resolve().parents[1] / "playbooks" / "blackwell-8gpu-lxc.yaml"
NEW_DRIVER = "595.82.01"
KINDS = ("node.connect", "node.inventory", "lxc.create", "lxc.gpu_passthrough", "lxc.start", "driver.userspace")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


def cli(env: dict[str, str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provisioner", *streamed(args)], env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def playbook(path: Path, dev_mode: str) -> Path:
    doc = yaml.safe_load(SHIPPED.read_text())
    doc["steps"] = [s for s in doc["steps"] if s["kind"] in KINDS]
    for step in doc["steps"]:
        if step["kind"] == "lxc.gpu_passthrough":
            step["params"] = {**step.get("params", {}), "mode": "dev", "dev_mode": dev_mode}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(params=["8.4", "9"])
def lab(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    require(os.geteuid() == 0, "the lab needs root (mount namespaces, device nodes)")
    root = tmp_path / "lab"
    env = dict(os.environ, PROVISIONER_LAB_ROOT=str(root), PROVISIONER_STATE_DIR=str(root / "state"),
               PROVISIONER_CACHE_DIR=str(with_shared_wheels(tmp_path / "cache")), NO_COLOR="1", COLUMNS="240")
    env.pop("PVE_PASSWORD", None)
    up = lab_up(env, root, pve=str(request.param), timeout=180)
    assert up.returncode == 0, up.stdout + up.stderr
    yield env
    lab_down(env, root)


def test_upgrade_and_mode_change_plan_the_restart_and_converge(lab: dict[str, str], tmp_path: Path) -> None:
    root = lab["PROVISIONER_LAB_ROOT"]
    first = cli(lab, "replay", str(playbook(tmp_path / "a.yaml", "0666")), "--lab")
    assert first.returncode == 0, first.stderr[-5000:]
    up = cli(lab, "lab", "upgrade-driver", NEW_DRIVER, "--root", root)
    assert up.returncode == 0, up.stdout + up.stderr
    changed = playbook(tmp_path / "b.yaml", "0660")
    drift = cli(lab, "plan", str(changed), "--lab", "--check")
    assert drift.returncode == 10, drift.stderr[-5000:]
    # the plan is on stdout (issue 36)
    assert "restart CT 200 to apply its pending devN change(s): dev0 = /dev/nvidia0,mode=0660" in drift.stdout, \
        drift.stdout[-5000:]
    assert f"with {NEW_DRIVER}" in drift.stdout, drift.stdout[-5000:]
    fixed = cli(lab, "replay", str(changed), "--lab")
    assert fixed.returncode == 0, fixed.stderr[-5000:]
    conf = (Path(root) / "etc" / "pve" / "lxc" / "200.conf").read_text()
    assert "[pve:pending]" not in conf and "mode=0666" not in conf, conf
    again = cli(lab, "plan", str(changed), "--lab", "--check")
    assert again.returncode == 0, again.stderr[-5000:]
