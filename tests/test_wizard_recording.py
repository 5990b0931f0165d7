"""What the wizard's recording keeps and what its Summary counts (issue 36 items 1, 2 and 4), on the engine
(`StepSession`) with real steps over the real local transport.

An interrupted step and every step after it stay in the recording, marked `pending`, with the values they were
to run with; a session opened on that recording resumes there (the completed steps are "no change", the
interrupted one is planned again). Quitting has something to lose as soon as a plan waits for Apply or a field
holds an edit the saved recording lacks. The Summary's counts come from the run's events: two applied updates
of one step count twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from provisioner.events import Event
from provisioner.playbook import load, loads
from provisioner.steps.base import Params, Plan, StepKind
from provisioner.steps.context import StepContext
from provisioner.stepwise import StepSession
from tests.support.step_kinds import FileStep, use_kinds


class WaitParams(Params):
    marker: str
    seconds: int = 600


class WaitStep(StepKind[WaitParams]):
    """`test.wait`: a long command (a burn-in stands-in); done once its marker file exists."""

    kind = "test.wait"
    title = "wait"
    Params = WaitParams

    async def check(self, ctx: StepContext) -> Plan:
        res = await ctx.node.run(["test", "-e", self.params.marker], quiet=True)
        return Plan.no_change("ran") if res.ok else Plan(changes=[f"wait {self.params.seconds} s"])

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        await ctx.node.run(["sh", "-c", 'echo started; sleep "$1"; touch "$2"', "sh", str(self.params.seconds),
                            self.params.marker], check=True)
        yield ctx.info("waited")


@pytest.fixture(autouse=True)
def _kinds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_kinds(monkeypatch, FileStep, WaitStep)
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))


def playbook(tmp_path: Path) -> str:
    return f"""schema_version: 1
target: {{host: localhost, local: true, container: 310}}
steps:
  - {{kind: test.file, params: {{path: "{tmp_path}/a", content: a}}}}
  - {{kind: test.wait, params: {{marker: "{tmp_path}/waited"}}}}
  - {{kind: test.file, params: {{path: "{tmp_path}/b", content: b}}}}
"""


async def _wait_for(predicate: object, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def test_an_interrupted_step_stays_in_the_recording_and_resuming_plans_it(tmp_path: Path) -> None:
    record = tmp_path / "rec.yaml"
    for runs in ("runs", "runs2"):
        (tmp_path / runs).mkdir()
    session = StepSession(loads(playbook(tmp_path)), runs_dir=tmp_path / "runs", record_to=str(record),
                          node_lock_dir=str(tmp_path / "locks"))
    assert await session.plan(0) == "planned" and await session.apply(0) == "changed"
    assert await session.plan(1) == "planned"
    task = asyncio.ensure_future(session.apply(1))
    await _wait_for(lambda: "started" in session.runs[1].tail, "the long step to start")
    task.cancel()  # "Stop safely": the worker running the step is cancelled
    with pytest.raises(asyncio.CancelledError):
        await task
    assert session.runs[1].status == "interrupted"
    session.save(record)
    await session.close()

    recorded = load(record)
    assert [(s.kind, bool(s.pending)) for s in recorded.steps] == \
        [("test.file", False), ("test.wait", True), ("test.file", True)]
    assert session.saved_pending == ["test.wait", "test.file"]
    assert "pending: true" in record.read_text()
    counts = session.recap()
    assert counts["changed"] == 1 and counts["interrupted"] == 1 and counts["failed"] == 0, counts

    # Opened again: the completed step is "no change", the interrupted one is planned (not dropped, not applied).
    again = StepSession(recorded, runs_dir=tmp_path / "runs2", record_to=str(tmp_path / "rec2.yaml"),
                        node_lock_dir=str(tmp_path / "locks"))
    assert await again.resume() == 1
    assert again.runs[0].status == "ok" and again.runs[0].message == "no change"
    assert again.runs[1].status == "planned" and again.runs[1].changes == ["wait 600 s"]
    assert again.recap()["pending"] == 2
    await again.close()
    # the step recorded as done again carries no pending mark
    assert not load(tmp_path / "rec2.yaml").steps[0].pending


async def test_a_waiting_plan_or_an_edit_is_work_to_lose_and_every_apply_is_counted(tmp_path: Path) -> None:
    record = tmp_path / "rec.yaml"
    for runs in ("runs", "runs2"):
        (tmp_path / runs).mkdir()
    session = StepSession(loads(playbook(tmp_path)), runs_dir=tmp_path / "runs", record_to=str(record),
                          node_lock_dir=str(tmp_path / "locks"))
    assert session.unsaved_work() == []  # nothing done, nothing edited: quitting loses nothing
    assert await session.plan(0) == "planned"
    assert session.unsaved_work() == ["test.file: a plan of 1 change(s) waits for Apply"]
    assert await session.apply(0) == "changed"
    assert session.unsaved_work() == []  # saved after the apply

    session.set_params(0, {"content": "a2"})  # an update of the done step, not applied yet
    session.reopen(0)
    assert any("recording on disk" in line for line in session.unsaved_work()), session.unsaved_work()
    session.save(record)
    assert load(record).steps[0].params["content"] == "a2" and load(record).steps[0].pending
    assert await session.plan(0) == "planned" and await session.apply(0) == "changed"
    assert (tmp_path / "a").read_text() == "a2"
    counts = session.recap()
    assert counts["changed"] == 2 and counts["pending"] == 2, counts  # both applies, from the events
    await session.close()
