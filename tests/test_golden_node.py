"""The golden node (tests/support/lab.py): the shipped playbook provisioned once per run, and each test's own
copy of it. A copy names nothing of the golden node's directory (every file, binary ones and the venv included,
and every link), starts on ports of its own beside another copy, finds the node converged (`plan --check`
exit 0, every step ok), and what one copy changes reaches neither the other nor the golden node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.lab import GoldenNode, files_naming, golden_playbook
from tests.support.labrun import REPO, LabRun, snapshot
from tests.support.streams import streamed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # the first user of the run builds the golden node


def _plan_check(run: LabRun) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "provisioner", *streamed(["plan", str(golden_playbook(run)), "--lab", "--check",
                                                             "--json"])]
    return subprocess.run(argv, capture_output=True, text=True, env=run.env(), cwd=REPO, timeout=600, check=False)


def test_a_golden_copy_is_its_own_node(golden_node: GoldenNode, golden_copy: Callable[[Path], LabRun],
                                       tmp_path: Path) -> None:
    old = str(golden_node.base)
    a, b = golden_copy(tmp_path / "a"), golden_copy(tmp_path / "b")
    for run in (a, b):
        assert files_naming(run.base, old) == [], f"{run.base} still names the golden node"
        links = [str(p) for p in run.base.rglob("*") if p.is_symlink() and os.readlink(p).startswith(old)]
        assert links == [], links
        assert golden_playbook(run).is_file() and list((run.state_dir / "runs").glob("*.jsonl"))
        assert snapshot(run.root) == golden_node.snapshot()

    with a.running(), b.running():
        conns = [json.loads((run.root / "private" / "connection.json").read_text()) for run in (a, b)]
        assert conns[0]["ssh"]["port"] != conns[1]["ssh"]["port"] and conns[0]["index_url"] != conns[1]["index_url"]
        assert [c["root"] for c in conns] == [str(a.root), str(b.root)]
        for run in (a, b):
            check = _plan_check(run)
            assert check.returncode == 0, check.stderr[-3000:]
            (counts,) = json.loads(check.stdout.strip().splitlines()[-1])["hosts"].values()
            assert counts == {"ok": 11, "changed": 0, "failed": 0, "skipped": 0, "interrupted": 0}, counts

    # what one copy changes is its own
    mark = Path("root") / "only-in-a"
    (a.state().ct_root(200) / mark).write_text("a\n")
    assert not (b.state().ct_root(200) / mark).exists()
    assert not (golden_node.root / "ct" / "200" / "rootfs" / mark).exists()
    assert files_naming(golden_node.base, str(tmp_path)) == [], "the golden node names a copy"


def test_relocate_rewrites_text_and_links_skips_venvs_and_refuses_binaries(tmp_path: Path) -> None:
    from tests.support.lab import relocate

    old, new = tmp_path / "golden", tmp_path / "copy"
    tree = new / "lab"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "pct").write_text(f"#!/bin/sh\nexec python -m pct --root='{old}/lab' \"$@\"\n")
    (tree / "bin" / "pct").chmod(0o755)
    venv = tree / "ct" / "200" / "rootfs" / "opt" / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {old}/python\n")  # (never true of a container's venv: left alone)
    (tree / "state.json").write_text(json.dumps({"playbook": f"{old}/blackwell.yaml", "other": "/elsewhere"}))
    (tree / "link").symlink_to(f"{old}/lab/bin")
    (tree / "away").symlink_to("/usr/bin")

    changed = relocate(new, str(old), str(new))
    assert sorted(p.name for p in changed) == ["link", "pct", "state.json"]
    assert f"--root='{new}/lab'" in (tree / "bin" / "pct").read_text()
    assert (tree / "bin" / "pct").stat().st_mode & 0o777 == 0o755
    assert json.loads((tree / "state.json").read_text()) == {"playbook": f"{new}/blackwell.yaml", "other": "/elsewhere"}
    assert os.readlink(tree / "link") == f"{new}/lab/bin" and os.readlink(tree / "away") == "/usr/bin"
    assert str(old) in (venv / "pyvenv.cfg").read_text()

    (tree / "blob.bin").write_bytes(b"\0\1" + str(old).encode() + b"\0")
    with pytest.raises(AssertionError, match="cannot be relocated"):
        relocate(new, str(old), str(new))


def test_the_burnin_ran_the_venvs_own_python_and_a_torch_without_distributed_fails_it(
        golden_copy: Callable[[Path], LabRun], tmp_path: Path) -> None:
    """(From the demo with a user's mirror, issue 22, merged into tests/test_demo_bare.py, which now runs the demo
    exactly as the README does and keeps no lab.) The burn-in's ranks ran the venv's bin/python, with the venv's
    torch and Python; and a venv whose torch lost torch.distributed fails burnin.run with that reason."""
    import re
    import shutil

    run = golden_copy(tmp_path / "node")
    ct = run.state().ct_root(200)
    (result,) = ct.glob("opt/gpu-provisioner/burnin/last-result.json")
    environment = json.loads(result.read_text())["environment"]
    assert environment["executable"] == "/opt/torch-venv/bin/python", environment
    assert environment["prefix"] == "/opt/torch-venv", environment
    cfg = dict(line.split(" = ", 1) for line in (ct / "opt" / "torch-venv" / "pyvenv.cfg").read_text().splitlines()
               if " = " in line)
    assert environment["torch"] == "2.11.0+cu128" and environment["python"].startswith(cfg["version_info"]), \
        (environment, cfg)

    # the venv's torch without torch.distributed (the package removed from it), on this copy started with its
    # node and container kept
    (dist_dir,) = ct.glob("opt/torch-venv/lib/python*/site-packages/torch/distributed")
    shutil.rmtree(dist_dir)
    result.unlink()  # no passing result: burnin.run runs again
    with run.running():
        again = run.replay(golden_playbook(run))
    assert again.rc == 1, again.describe()
    # (torch 2.13's __init__ imports torch.distributed: the venv's torch no longer imports)
    assert re.search(r"the venv's Python /opt/torch-venv/bin/python (cannot import torch|has torch \S+ without "
                     r"torch\.distributed) \(ModuleNotFoundError: No module named 'torch\.distributed'\): the "
                     r"burn-in cannot run in this venv", again.stderr), again.describe()
    assert again.status_of("burnin.run") == "failed" and "burn-in verdict" not in again.stderr
