"""`lxc.boot_persistence` against the lab node (real bash, the lab's systemctl): the unit is installed
and enabled once, a hand edit is found by `plan --check` and rewritten by `replay` after a backup,
and `state: absent` disables and removes it (backup kept), each idempotent."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from provisioner.drift import UNIT_NAME, UNIT_PATH
from tests.support.lab import lab_down, lab_up
from tests.support.labcache import with_shared_wheels
from tests.support.require import require

SHIPPED = Path(__file__).resolve().parents[1] / "playbooks" / "blackwell-8gpu-lxc.yaml"
KINDS = ("node.connect", "node.inventory", "lxc.create", "lxc.gpu_passthrough", "lxc.boot_persistence")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provisioner", *args], env=env, capture_output=True, text=True,
                          timeout=600, check=False)


def on_node(root: Path, script: str) -> str:
    from provisioner.lab.sandbox import node_argv, node_env
    from provisioner.lab.state import LabState

    state = LabState.load(root)
    return subprocess.run(node_argv(state, ["bash", "-c", script]), env=node_env(state), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120, check=False).stdout


def playbook(dest: Path, **boot: object) -> Path:
    doc = yaml.safe_load(SHIPPED.read_text())
    doc["steps"] = [s for s in doc["steps"] if s["kind"] in KINDS]
    for step in doc["steps"]:
        if step["kind"] == "lxc.boot_persistence":
            step["params"] = {**step.get("params", {}), **boot}
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    require(os.geteuid() == 0, "the lab needs root (mount namespaces, device nodes)")
    root = tmp_path_factory.mktemp("bootunit") / "lab"
    env = dict(os.environ, PROVISIONER_LAB_ROOT=str(root), PROVISIONER_STATE_DIR=str(root / "state"),
               PROVISIONER_CACHE_DIR=str(with_shared_wheels(root.parent / "cache")), NO_COLOR="1", COLUMNS="240")
    up = lab_up(env, root)
    assert up.returncode == 0, up.stdout + up.stderr
    yield env
    lab_down(env, root)


def test_install_hand_edit_backup_and_remove(lab: dict[str, str], tmp_path: Path) -> None:
    root = Path(lab["PROVISIONER_LAB_ROOT"])
    present = playbook(tmp_path / "present.yaml")
    first = cli(lab, "replay", str(present), "--lab")
    assert first.returncode == 0, first.stderr[-4000:]
    assert on_node(root, f"systemctl is-enabled {UNIT_NAME}").strip() == "enabled"
    assert cli(lab, "plan", str(present), "--lab", "--check").returncode == 0  # idempotent

    on_node(root, f"sed -i 's/ -pm 1/ -pm 0/' {UNIT_PATH}")
    plan = cli(lab, "plan", str(present), "--lab", "--check")
    # the plan is what `plan` is asked for: on stdout (issue 36)
    assert plan.returncode == 10 and f"drift: boot unit {UNIT_PATH} was changed by hand" in plan.stdout, plan.stdout
    fixed = cli(lab, "replay", str(present), "--lab")
    assert fixed.returncode == 0, fixed.stderr[-4000:]
    assert "ExecStart=/usr/bin/nvidia-smi -pm 1" in on_node(root, f"cat {UNIT_PATH}")
    backups = on_node(root, f"cat /etc/gpu-provisioner/backups/{UNIT_NAME}.*")
    assert "-pm 0" in backups, backups  # the hand-edited file was kept before the rewrite

    absent = playbook(tmp_path / "absent.yaml", state="absent")
    removed = cli(lab, "replay", str(absent), "--lab")
    assert removed.returncode == 0, removed.stderr[-4000:]
    assert on_node(root, f"test -e {UNIT_PATH} && echo present || echo gone").strip() == "gone"
    assert on_node(root, f"systemctl is-enabled {UNIT_NAME}").strip() == "not-found"
    assert cli(lab, "plan", str(absent), "--lab", "--check").returncode == 0
