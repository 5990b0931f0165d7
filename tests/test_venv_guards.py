"""venv.build's path guards and crash windows (issue 23 items 4 and 6), with real uv on a loopback index.

- The venv path and uv_dir are resolved in the container (`realpath -m`) before any guard and before any
  `rm`/`venv`: `/opt/link -> /` with `path: /opt/link/srv, recreate: true` is refused after the one read-only
  probe, and /srv is untouched; `uv_dir: /usr` is refused at load; a uv_dir reached through a link is refused.
- A uv_dir holding someone else's files is never cleared (no `venv --clear`): the step says so.
- The controller dies (as under kill -9) at every command boundary of venv.build, one run per boundary: the
  container keeps what the commands before it did, nothing after; the next replay finishes the venv (never
  "not built by gpu-provisioner") and the one after reports no change.

The controller's death is modelled in-process: the node transport refuses every command after the k-th (it
raises `CancelledError`, as a dead process runs nothing more); the commands run so far are real.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from provisioner.events import Bus
from provisioner.steps.venv_build import BUILDING_MARKER, VenvParams
from provisioner.transport.base import LineCallback
from provisioner.transport.local import LocalTransport
from tests.support.fake_pct import Node, known_gpus, reference_gpus, run_playbook
from tests.support.standin_index import Index, freeze, index, lab, make_playbook, node  # noqa: F401 (fixtures)


def test_uv_dir_under_the_venv_path_rules() -> None:
    for bad in ("/usr", "/", "/etc/uv", "/./usr", "//usr"):
        with pytest.raises(ValidationError, match="refusing a system directory as uv_dir"):
            VenvParams.model_validate({"uv_dir": bad})
    assert VenvParams.model_validate({"uv_dir": "/opt/uv/"}).uv_dir == "/opt/uv"


def _commands(at: Node) -> list[str]:
    return at.pct_log.read_text().splitlines() if at.pct_log.exists() else []


async def test_a_venv_path_through_a_symlink_is_refused_before_anything_changes(
        tmp_path: Path, index: Index, node: Node) -> None:
    ct = tmp_path / "ct"
    (ct / "srv").mkdir(parents=True)
    (ct / "srv" / "model.bin").write_bytes(b"weights\n")
    (ct / "opt").mkdir()
    (ct / "opt" / "link").symlink_to(ct)  # /opt/link -> /
    before = _commands(node)
    out = await run_playbook(node, make_playbook(ct / "opt/link/srv", build={"recreate": True}), **lab(index))
    assert out.result.statuses == ["ok", "failed"]
    message = out.finished("venv.build").message
    assert f"resolves to {ct}/srv" in message and "symbolic link" in message and "left untouched" in message
    assert out.result.exit_code == 2
    assert (ct / "srv" / "model.bin").read_bytes() == b"weights\n"
    assert sorted(p.name for p in (ct / "srv").iterdir()) == ["model.bin"]
    # One command reached the container for venv.build: the read-only probe that resolved the paths.
    ran = _commands(node)[len(before):]
    assert len([c for c in ran if "bash -lc" in c]) == 1, ran


async def test_a_uv_dir_through_a_symlink_or_of_someone_else_is_left_alone(
        tmp_path: Path, index: Index, node: Node) -> None:
    ct = tmp_path / "ct"
    system = tmp_path / "system-usr"
    (system / "bin").mkdir(parents=True)
    (system / "bin" / "tool").write_text("#!/bin/sh\n")
    (ct / "opt").mkdir(parents=True)
    (ct / "opt" / "uvlink").symlink_to(system)
    out = await run_playbook(node, make_playbook(ct / "opt/venv", build={"uv_dir": str(ct / "opt/uvlink")}),
                             **lab(index))
    assert out.result.statuses == ["ok", "failed"]
    assert f"uv_dir {ct}/opt/uvlink resolves to {system}" in out.finished("venv.build").message
    assert sorted(p.name for p in system.rglob("*")) == ["bin", "tool"]
    assert not (ct / "opt/venv").exists()

    # A node without uv and a uv_dir that holds someone's files: refused, never `venv --clear`ed.
    bare = Node(tmp_path / "bare", with_uv=False, extra_env=dict(node.extra_env))
    theirs = ct / "opt" / "tools"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine\n")
    out = await run_playbook(bare, make_playbook(ct / "opt/venv", build={"uv_dir": str(theirs)}), **lab(index))
    assert out.result.statuses == ["ok", "failed"]
    message = out.finished("venv.build").message
    assert f"uv_dir {theirs} holds files gpu-provisioner did not make" in message
    assert sorted(p.name for p in theirs.iterdir()) == ["notes.txt"]


class DyingTransport(LocalTransport):
    """The node as seen by a controller that dies after `budget` commands: nothing runs after that."""

    budget: int | None = None
    ran: int = 0

    async def _run(self, argv: Sequence[str], command: str, *, timeout: float | None, on_line: LineCallback,
                   stdin: bytes | None) -> int | None:
        if self.budget is not None and self.ran >= self.budget:
            raise asyncio.CancelledError("the controller was killed (SIGKILL)")
        self.ran += 1
        return await super()._run(argv, command, timeout=timeout, on_line=on_line, stdin=stdin)


def _dying(at: Node, budget: int | None, counter: list[DyingTransport]) -> Any:
    def transport(bus: Bus) -> DyingTransport:
        base = Node.transport(at, bus)
        t = DyingTransport(bus, host_label=base.host_label)
        t.env = base.env
        t.budget = budget
        counter.append(t)
        return t
    return transport


async def test_killed_at_every_command_boundary_the_next_replay_converges(
        tmp_path: Path, index: Index, node: Node,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The reference: one whole build, counting the commands the controller runs.
    seen: list[DyingTransport] = []
    pb_only = {"state": known_gpus(reference_gpus(2)), "settings": lab(index)["settings"]}
    monkeypatch.setattr(node, "transport", _dying(node, None, seen))
    reference = tmp_path / "ct" / "opt" / "ref"
    out = await run_playbook(node, make_playbook(reference), **pb_only)
    assert out.result.statuses == ["ok", "changed"]
    total = seen[-1].ran
    assert total >= 8, total
    want = freeze(reference)

    for k in range(total):
        venv = tmp_path / "ct" / "opt" / f"venv-{k}"
        monkeypatch.setattr(node, "transport", _dying(node, k, seen))
        try:
            await run_playbook(node, make_playbook(venv), **pb_only)
        except asyncio.CancelledError:
            pass
        else:
            # the reference counted a command this build did not need (a retry under load): every boundary of
            # this build has been killed at; the build it ran to the end must be the reference's venv
            assert k >= total - 2 and freeze(venv) == want, (k, total)
            break
        assert seen[-1].ran == k
        left = sorted(p.name for p in venv.iterdir()) if venv.is_dir() else []
        assert not left or BUILDING_MARKER in left or "runtime.json" in left, (k, left)  # never "foreign"
        monkeypatch.setattr(node, "transport", _dying(node, None, seen))
        again = await run_playbook(node, make_playbook(venv), **pb_only)
        assert again.result.exit_code == 0, (k, again.finished("venv.build").message)
        assert again.result.statuses[1] in ("changed", "ok"), k
        assert freeze(venv) == want, k
        done = await run_playbook(node, make_playbook(venv), mode="plan", **pb_only)
        assert done.plan("venv.build").changes == [], (k, done.plan("venv.build").changes)
