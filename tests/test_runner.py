"""The runner over a real local transport: plan changes nothing, replay applies, second replay is a no-op,
an interrupted run resumes, failures stop the host, the recap counts, the run log is JSON Lines."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from provisioner import interrupts
from provisioner.cli import main
from provisioner.events import Bus, Event, StepFinished
from provisioner.playbook import Playbook, loads
from provisioner.runlog import JsonlRunLog, Recorder
from provisioner.runner import recap_json, run_host
from provisioner.steps.base import Params, Plan, StepFailed, StepKind
from provisioner.steps.context import StepContext
from provisioner.transport.local import LocalTransport
from tests.support.step_kinds import FileStep, use_kinds


@pytest.fixture(autouse=True)
def _test_step_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    """This module's step kinds, registered for its tests only (the global registry is left as it was)."""
    use_kinds(monkeypatch, FileStep, FailWith)


def book(tmp: Path, *, fail: bool = False) -> Playbook:
    text = f"""schema_version: 1
target: {{host: localhost, local: true}}
steps:
  - kind: test.file
    params: {{path: {tmp}/a.txt, content: alpha}}
  - kind: test.file
    params: {{path: {tmp}/b.txt, content: beta, fail_after_write: {str(fail).lower()}}}
  - kind: test.file
    params: {{path: {tmp}/c.txt, content: gamma}}
"""
    return loads(text, "t.yaml")


async def run(pb: Playbook, mode: str, events: list[Event]) -> dict[str, object]:
    bus = Bus(events.append)
    result = await run_host(pb, bus, LocalTransport(bus), mode=mode, host="localhost")  # type: ignore[arg-type]
    return recap_json([result])


async def test_plan_changes_nothing_then_replay_then_noop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    pb = book(tmp_path)
    events: list[Event] = []
    recap = await run(pb, "plan", events)
    assert recap == {"hosts": {"localhost": {"ok": 0, "changed": 3, "failed": 0, "skipped": 0, "interrupted": 0}}, "status": "ok"}
    assert not (tmp_path / "a.txt").exists()
    recap = await run(pb, "apply", events)
    assert recap["hosts"] == {"localhost": {"ok": 0, "changed": 3, "failed": 0, "skipped": 0, "interrupted": 0}}
    assert (tmp_path / "c.txt").read_text() == "gamma"
    recap = await run(pb, "apply", events)
    assert recap["hosts"] == {"localhost": {"ok": 3, "changed": 0, "failed": 0, "skipped": 0, "interrupted": 0}}


async def test_failure_skips_rest_and_replay_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    events: list[Event] = []
    recap = await run(book(tmp_path, fail=True), "apply", events)
    assert recap["status"] == "failed"
    assert recap["hosts"] == {"localhost": {"ok": 0, "changed": 1, "failed": 1, "skipped": 1, "interrupted": 0}}
    failed = [e for e in events if isinstance(e, StepFinished) and e.status == "failed"]
    assert "simulated failure" in failed[0].message and "fix: replay" in failed[0].message
    assert not (tmp_path / "c.txt").exists()
    # The fixed playbook resumes: a and b are already right (ok), only c changes.
    recap = await run(book(tmp_path), "apply", events)
    assert recap["hosts"] == {"localhost": {"ok": 2, "changed": 1, "failed": 0, "skipped": 0, "interrupted": 0}}


async def test_run_log_and_recorder(tmp_path: Path) -> None:
    pb = book(tmp_path)
    log = JsonlRunLog("t1", tmp_path)
    rec = Recorder(pb)
    bus = Bus(log, rec)
    result = await run_host(pb, bus, LocalTransport(bus), mode="apply", host="localhost")
    log.close()
    assert not result.failed
    kinds = [json.loads(line)["kind"] for line in log.path.read_text().splitlines()]
    assert kinds.count("step.finished") == 3 and "command.started" in kinds and "output" not in kinds[:1]
    recorded = rec.playbook()
    assert [s.params["path"] for s in recorded.steps] == [s.params["path"] for s in pb.steps]


def test_cli_plan_check_exit_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    pb = tmp_path / "pb.yaml"
    pb.write_text(f"""schema_version: 1
target: {{host: localhost, local: true}}
steps:
  - kind: test.file
    params: {{path: {tmp_path}/x.txt, content: x}}
""")
    runner = CliRunner()
    res = runner.invoke(main, ["plan", str(pb), "--check", "--json"])
    assert res.exit_code == 10, res.output
    assert json.loads(res.stdout.strip().splitlines()[-1])["status"] == "ok"
    res = runner.invoke(main, ["replay", str(pb), "--json"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["plan", str(pb), "--check", "--json"])
    assert res.exit_code == 0
    assert json.loads(res.stdout.strip().splitlines()[-1]) == {
        "hosts": {"localhost": {"ok": 1, "changed": 0, "failed": 0, "skipped": 0, "interrupted": 0}}, "status": "ok",
        "plan": {"localhost": []}}


def test_help_lists_every_command_with_example_and_exit_codes() -> None:
    res = CliRunner().invoke(main, ["--help"])
    assert res.exit_code == 0
    for name in ("demo", "lab", "plan", "replay", "resolve", "burnin", "diagnose", "bundle", "tui"):
        assert name in res.output
    assert res.output.count("e.g. provisioner") >= 9
    assert "10 plan has pending changes" in res.output.replace("\n", " ").replace("  ", " ")


class EchoParams(Params):
    text: str


class FailWith(StepKind[EchoParams]):
    """Fails with the output of a real command as evidence (what the diagnoser reads)."""

    kind = "test.fail_with"
    title = "fail with output"
    Params = EchoParams

    async def check(self, ctx: StepContext) -> Plan:
        return Plan(changes=["run it"])

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        res = await ctx.node.run(["sh", "-c", 'printf "%s\\n" "$1"; exit 1', "sh", self.params.text])
        raise StepFailed("the command failed", result=res)
        yield  # pragma: no cover


async def test_failed_step_carries_the_diagnosis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    pb = loads("""schema_version: 1
target: {host: localhost, local: true}
steps:
  - kind: test.fail_with
    params:
      text: "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation."
""")
    events: list[Event] = []
    recap = await run(pb, "apply", events)
    assert recap["status"] == "failed"
    (finished,) = [e for e in events if isinstance(e, StepFinished)]
    assert finished.diagnosis and finished.diagnosis[0]["category"] == "arch_unsupported"
    assert any("sm_120" in line for line in finished.diagnosis[0]["evidence"])


async def test_two_runs_cannot_provision_the_same_container(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The node lock is the one lock: a run holding it from another state dir, with the host spelled
    otherwise (what the controller-side lock it replaced never saw), stops this run before any step."""
    from provisioner import node_lock
    from provisioner.node_lock import NodeLock
    from provisioner.transport.local import LocalTransport

    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    pb = loads(f"""schema_version: 1
target: {{host: localhost, local: true, container: 300}}
steps:
  - kind: test.file
    params: {{path: {tmp_path}/l.txt, content: l}}
  - kind: test.file
    params: {{path: {tmp_path}/m.txt, content: m}}
  - kind: test.file
    params: {{path: {tmp_path}/n.txt, content: n}}
""")
    other = NodeLock(LocalTransport(None, "node"), 300, "127.0.0.1", node_lock.LOCK_DIR)
    await other.acquire()  # another run (other state dir, other spelling) holds the container
    try:
        events: list[Event] = []
        recap = await run(pb, "apply", events)
        assert recap["status"] == "failed"
        # every step is counted: the one the lock stopped failed, the rest skipped (issue 23: "2 of 10")
        assert recap["hosts"]["localhost"] == {"ok": 0, "changed": 0, "failed": 1, "skipped": 2, "interrupted": 0}, recap
        finished = [e for e in events if isinstance(e, StepFinished)]
        assert [e.status for e in finished] == ["failed", "skipped", "skipped"]
        assert "another controller is provisioning container 300" in finished[0].message
        assert any("another controller is provisioning container 300" in getattr(e, "text", "") for e in events)
        assert any("(target 127.0.0.1)" in getattr(e, "text", "") for e in events)
        assert not (tmp_path / "l.txt").exists()
    finally:
        await other.release()
    recap = await run(pb, "apply", [])
    assert recap["status"] == "ok" and (tmp_path / "l.txt").exists()


class _KilledController(LocalTransport):
    """A controller that dies before its first command (as a test's killed controller or a caller's cancel)."""

    async def _run(self, *args: object, **kwargs: object) -> int | None:
        raise asyncio.CancelledError("the controller was killed")


async def test_a_signal_of_an_earlier_run_does_not_turn_a_later_cancellation_into_an_interrupt(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One process, two runs: the first is interrupted by a real SIGINT inside `cancel_on_signals`; the second,
    outside any signal block, is cancelled. The second must propagate the cancellation, not record "interrupted
    by SIGINT" and return (the wizard and the test workers run many playbooks in one process)."""
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    with interrupts.cancel_on_signals():
        os.kill(os.getpid(), signal.SIGINT)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(asyncio.Event().wait(), 30)
        asyncio.current_task().uncancel()  # type: ignore[union-attr]
    assert interrupts.received() == signal.SIGINT and interrupts.interrupting() is None
    bus = Bus()
    with pytest.raises(asyncio.CancelledError):
        await run_host(book(tmp_path), bus, _KilledController(bus), mode="apply", host="localhost")
    assert not (tmp_path / "a.txt").exists()
