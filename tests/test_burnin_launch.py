"""The launcher's rank start (provisioner/burnin/launcher.py `spawn_ranks`): every rank is forked from
one forkserver that has preloaded torch, with torchrun's per-rank environment, its own log, and the
same failure reporting as before (a crashed rank is named with its exit status).

Real processes and real torch.distributed (gloo on the CPU); no timing is asserted.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from provisioner.burnin.config import make_config
from provisioner.burnin.launcher import ForkedRank, run_world
from tests.support.require import require, require_gloo


@pytest.fixture(autouse=True)
def _needs_gloo() -> None:
    require_gloo()


MARK = re.compile(r"^\[launch\] rank (\d+) forked from preloaded process (\d+) \(torch preloaded: (True|False)\)$",
                  re.MULTILINE)


def test_ranks_fork_from_the_preloaded_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a variable of this process reaches every rank, as Popen's environment did (faults, NCCL_*)
    monkeypatch.setenv("PROVISIONER_TEST_MARKER", "seen")
    cfg = make_config(backend="gloo", world_size=3, sizes="1KiB:2KiB", phases="collectives")
    doc = run_world(cfg, tmp_path, extra_env={"NCCL_P2P_DISABLE": "1"})
    assert doc["status"] == "pass", doc.get("verdict")
    assert doc["launcher"]["ranks"] == [{"rank": k, "returncode": 0} for k in range(3)]
    parents = set()
    for k in range(3):
        log = (tmp_path / f"rank{k}.log").read_text()
        found = MARK.search(log)
        assert found, log[:500]
        assert found.group(1) == str(k)
        assert found.group(3) == "True"  # torch was already imported when the rank began
        parents.add(int(found.group(2)))
    assert len(parents) == 1 and os.getpid() not in parents  # one forkserver, not this process
    # torchrun's per-rank environment, as the worker saw it (its env_info in the result)
    env = json.dumps(doc)
    assert '"world_size": 3' in env


def test_rank_environment_is_torchruns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What each forked rank's os.environ holds: read back from the rank itself (a planted `env` dump
    is not available in the worker, so the launcher's `_rank_main` runs a tiny module instead)."""
    from provisioner.burnin import launcher

    monkeypatch.setenv("PROVISIONER_TEST_MARKER", "seen")
    ctx = launcher._forkserver()
    require(ctx is not None, "no forkserver on this platform")
    out = tmp_path / "env"
    out.mkdir()
    procs = []
    with launcher._bare_main():
        for rank in range(2):
            p = ctx.Process(target=_dump_env, args=(launcher.child_env(rank, 2, 12345, {"NCCL_P2P_DISABLE": "1"}),
                                                     str(out / f"{rank}.json")))
            p.start()
            procs.append(ForkedRank(p))
    assert launcher.wait_world(procs, grace=60.0, deadline=None) == [0, 0]
    for rank in range(2):
        env = json.loads((out / f"{rank}.json").read_text())
        assert env["RANK"] == env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == "12345"
        assert env["NCCL_P2P_DISABLE"] == "1" and env["PROVISIONER_TEST_MARKER"] == "seen"
        assert env["torch_threads"] == int(env["OMP_NUM_THREADS"]) and env["bad_fork"] is False


def _dump_env(env: dict[str, str], path: str) -> None:
    """A stand-in rank body that applies the environment like `_rank_main` and writes what it sees."""
    os.environ.clear()
    os.environ.update(env)
    import torch

    torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    Path(path).write_text(json.dumps({**os.environ, "torch_threads": torch.get_num_threads(),
                                      "bad_fork": torch.cuda._is_in_bad_fork()}))


def test_a_crashed_forked_rank_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BURNIN_FAULT", "crash:rank=1:collective=all_gather")
    cfg = make_config(backend="gloo", world_size=2, sizes="1KiB:2KiB", phases="collectives", timeout=5.0)
    doc = run_world(cfg, tmp_path, deadline_s=300)
    assert doc["status"] == "fail"
    ranks = {r["rank"]: r["returncode"] for r in doc["launcher"]["ranks"]}
    assert ranks[1] == 3  # the fault's exit status, through the forkserver
    reasons = " ".join(doc["verdict"]["reasons"])
    assert "rank 1 exited with status 3 (crashed or killed)" in reasons
    assert MARK.search((tmp_path / "rank1.log").read_text())  # it was a forked rank that crashed
