"""The wizard applies only what the user confirmed, and holds the node-side lock while it provisions
(issues #16 and #19). Real steps over the real local transport; the lock is real flock(1) in a
temporary lock directory, so another controller is refused exactly as on a node."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from provisioner.events import Event
from provisioner.node_lock import NodeLock
from provisioner.playbook import loads
from provisioner.steps.base import Params, Plan, StepFailed, StepKind
from provisioner.steps.context import StepContext
from provisioner.stepwise import StepSession
from provisioner.transport.local import LocalTransport
from tests.support.step_kinds import FileStep, use_kinds


class SetParams(Params):
    path: str
    content: str


class SetStep(StepKind[SetParams]):
    """`test.set`: its plan names what the file holds now, so a change behind the user's back changes the plan."""

    kind = "test.set"
    title = "set a file"
    Params = SetParams

    async def check(self, ctx: StepContext) -> Plan:
        res = await ctx.node.run(["cat", self.params.path], quiet=True)
        now = res.output.rstrip("\n") if res.ok else None
        if now == self.params.content:
            return Plan.no_change("content matches")
        return Plan(changes=[f"replace {now!r} in {self.params.path} with {self.params.content!r}"])

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        await ctx.node.run(["sh", "-c", 'printf %s "$1" > "$2"', "sh", self.params.content, self.params.path],
                           check=True)
        yield ctx.info("written")

    async def verify(self, ctx: StepContext) -> None:
        res = await ctx.node.run(["cat", self.params.path], quiet=True)
        if res.output.rstrip("\n") != self.params.content:
            raise StepFailed("content differs")


@pytest.fixture(autouse=True)
def _kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    use_kinds(monkeypatch, SetStep, FileStep)


async def test_apply_refuses_a_plan_the_user_did_not_confirm(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_text("old")
    pb = loads(f"""schema_version: 1
target: {{host: localhost, local: true, container: 300}}
steps:
  - {{kind: test.set, params: {{path: "{target}", content: new}}}}
""")
    session = StepSession(pb, runs_dir=tmp_path, node_lock_dir=str(tmp_path / "locks"))
    assert await session.plan(0) == "planned"
    assert session.runs[0].changes == [f"replace 'old' in {target} with 'new'"]
    target.write_text("someone else's")  # the host changes between the plan on screen and the Apply
    assert await session.apply(0) == "failed"
    assert target.read_text() == "someone else's"  # nothing the user did not see was applied
    run = session.runs[0]
    assert "changed since the plan was confirmed" in run.message
    assert run.changes == [f"replace \"someone else's\" in {target} with 'new'"]  # the new plan is on screen
    assert await session.apply(0) == "changed"  # confirming the new plan applies it
    assert target.read_text() == "new"
    await session.close()


async def test_the_wizard_holds_the_node_lock_while_it_provisions(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    pb = loads(f"""schema_version: 1
target: {{host: localhost, local: true, container: 301}}
steps:
  - {{kind: test.file, params: {{path: "{tmp_path}/a", content: a}}}}
""")
    session = StepSession(pb, runs_dir=tmp_path, node_lock_dir=str(locks))
    assert await session.plan(0) == "planned"  # planning takes no lock
    other = NodeLock(LocalTransport(None, "node"), 301, "localhost", str(locks))
    await other.acquire()
    await other.release()
    assert await session.apply(0) == "changed"
    other = NodeLock(LocalTransport(None, "node"), 301, "127.0.0.1", str(locks))
    with pytest.raises(StepFailed, match="another controller is provisioning container 301"):
        await other.acquire()  # a replay (or a second wizard) is refused while this wizard runs
    await session.close()  # closing the wizard releases it
    await other.acquire()
    assert other.held
    await other.release()
