"""One engine path (issue #13), as specifications:

- a registered secret put into nested event fields (a plan's changes, a command's argv, its output,
  a diagnosis, a metric's labels, the facts a step records) reaches no sink: not the console, the
  run log, the recorder nor the wizard (its tracker and the run-log view the TUI renders);
- the wizard's run log ends with the true counts (the last applied status of every step);
- `replay --inventory` exits with the most specific code of its hosts.

Steps run for real on this machine (LocalTransport, real `sh`); the step kinds of this module are
registered for its tests only.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from provisioner import secrets
from provisioner.cli import main
from provisioner.events import Event, Metric, StepFinished
from provisioner.exitcodes import ExitCode
from provisioner.playbook import Playbook, dumps, loads
from provisioner.redaction import MASK
from provisioner.render.console import ConsoleRenderer
from provisioner.runner import HostResult, exit_code
from provisioner.steps.base import Params, Plan, StepFailed, StepKind
from provisioner.steps.context import StepContext
from provisioner.stepwise import StepSession
from screens.runlog_view import describe
from tests.support.lab import closed_port
from tests.support.step_kinds import FileStep, use_kinds

SECRET = "Zq-nested-canary-9f3k1"


class LeakyParams(Params):
    password: secrets.SecretRef
    fail: bool = True


class LeakyStep(StepKind[LeakyParams]):
    """Puts its (resolved) secret everywhere a careless step could."""

    kind = "test.leaky"
    title = "a careless step"
    Params = LeakyParams

    async def check(self, ctx: StepContext) -> Plan:
        value = secrets.resolve(self.params.password)
        return Plan(changes=[f"set the API password to {value}", f"then log in with {{'password': '{value}'}}"],
                    notes=[f"curl -u root:{value} https://pve:8006/"])

    async def apply(self, ctx: StepContext) -> AsyncIterator[Event]:
        value = secrets.resolve(self.params.password)
        await ctx.node.run(["sh", "-c", 'echo "login with $1"', "sh", value], timeout=60)
        ctx.bus.emit(Metric(host=ctx.host, name="probe", value=1.0, labels={"auth": value}))
        yield ctx.info(f"connected as root with {value}")
        if self.params.fail:
            line = (f"NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current "
                    f"PyTorch installation. token={value}")
            raise StepFailed(f"install failed ({value})", evidence=[line, json.dumps({"password": value})])

    def resolved(self, ctx: StepContext) -> dict[str, Any]:
        return {"leaky": {"nested": [secrets.resolve(self.params.password)]}}


@pytest.fixture(autouse=True)
def _kinds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_kinds(monkeypatch, LeakyStep, FileStep)
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PVE_GP_TEST_API_SECRET", SECRET)


def leaky_playbook(fail: bool) -> Playbook:
    return loads(f"""schema_version: 1
target: {{host: localhost, local: true}}
steps:
  - kind: test.leaky
    params: {{password: "env:PVE_GP_TEST_API_SECRET", fail: {str(fail).lower()}}}
""")


@pytest.mark.parametrize("fail", [True, False], ids=["failing", "succeeding"])
async def test_a_nested_secret_reaches_no_sink(tmp_path: Path, fail: bool) -> None:
    console_out = io.StringIO()
    session = StepSession(leaky_playbook(fail), playbook_path="leaky.yaml", runs_dir=tmp_path)
    session.subscribe(ConsoleRenderer(Console(file=console_out, width=200, highlight=False), verbose=True))
    seen: list[Event] = []
    session.subscribe(seen.append)  # what the wizard's app receives
    assert await session.plan(0) == "planned"
    status = await session.apply(0)
    assert status == ("failed" if fail else "changed")
    # A diagnosis and a plan built by hand, nested two levels deep, through the same bus.
    session.bus.emit(StepFinished(host=session.host, index=0, step="test.leaky", status="failed",
                                  diagnosis=[{"category": "x", "evidence": [f"password={SECRET}", SECRET]}]))
    await session.close()

    run = session.runs[0]
    wizard_view = json.dumps([run.changes, run.notes, run.message, run.diagnosis, list(run.tail),
                              run.last_command])
    runlog = session.log_path.read_text()
    rendered = "\n".join(describe(json.loads(line)) for line in runlog.splitlines())
    recorded = dumps(session.recorded_playbook())
    events = json.dumps([e.model_dump() for e in seen])
    sinks = {"console": console_out.getvalue(), "run log": runlog, "run-log view (TUI)": rendered,
             "wizard tracker (TUI)": wizard_view, "app sink (TUI)": events, "recorder": recorded}
    for name, text in sinks.items():
        assert SECRET not in text, f"the secret reached the {name}"
    # ... and the events did carry it where a careless step put it (masked, not dropped).
    assert f"set the API password to {MASK}" in run.changes
    assert any(MASK in line for line in run.tail) and MASK in run.last_command
    assert MASK in runlog and MASK in sinks["console"]
    if fail:
        assert run.diagnosis and run.diagnosis[0]["evidence"]
    else:
        assert session.recorded_playbook().resolved["leaky"] == {"nested": [MASK]}


async def test_the_wizard_run_log_ends_with_the_true_counts(tmp_path: Path) -> None:
    pb = loads(f"""schema_version: 1
target: {{host: localhost, local: true}}
steps:
  - {{kind: test.file, params: {{path: "{tmp_path}/a", content: a}}}}
  - {{kind: test.file, params: {{path: "{tmp_path}/b", content: b, fail_before_write: true}}}}
  - {{kind: test.file, params: {{path: "{tmp_path}/c", content: c}}}}
  - {{kind: test.file, params: {{path: "{tmp_path}/d", content: d}}}}
""")
    (tmp_path / "d").write_text("d")
    session = StepSession(pb, runs_dir=tmp_path)
    assert await session.plan(0) == "planned"  # plans are not counted
    assert await session.apply(0) == "changed"
    assert await session.apply(1) == "failed"
    session.set_params(1, {"path": f"{tmp_path}/b", "content": "b", "fail_before_write": False})
    assert await session.apply(1) == "changed"  # the retry's status replaces the failure
    assert await session.apply(3) == "ok"  # d already holds its content
    await session.close()  # step 2 was never applied: skipped
    last = json.loads(session.log_path.read_text().splitlines()[-1])
    assert last["kind"] == "run.finished"
    assert last["recap"] == {"localhost": {"ok": 1, "changed": 2, "failed": 0, "skipped": 1, "interrupted": 0}}
    assert last["status"] == "ok"
    # the step never applied stays in the recording, marked pending (issue 36: resuming plans it); the others are done
    recorded = session.recorded_playbook().steps
    assert [(s.params["path"], bool(s.pending)) for s in recorded] == \
        [(f"{tmp_path}/a", False), (f"{tmp_path}/b", False), (f"{tmp_path}/c", True), (f"{tmp_path}/d", False)]


async def test_a_failed_wizard_step_is_counted_failed(tmp_path: Path) -> None:
    pb = loads(f"""schema_version: 1
target: {{host: localhost, local: true}}
steps:
  - {{kind: test.file, params: {{path: "{tmp_path}/a", content: a, fail_before_write: true}}}}
""")
    session = StepSession(pb, runs_dir=tmp_path)
    assert await session.apply(0) == "failed"
    await session.close()
    last = json.loads(session.log_path.read_text().splitlines()[-1])
    assert (last["status"], last["recap"]["localhost"]["failed"]) == ("failed", 1)


def test_exit_code_is_the_most_specific_of_the_failed_hosts() -> None:
    def host(name: str, code: int, failed: bool = True) -> HostResult:
        r = HostResult(host=name)
        r.by_index[0] = "failed" if failed else "changed"
        r.exit_code = code if failed else 0
        return r

    assert exit_code([host("a", 0), host("b", 3)]) == ExitCode.NO_SOLUTION
    assert exit_code([host("a", 0)]) == ExitCode.FAILED  # no host more specific than "failed"
    assert exit_code([host("a", 2), host("b", 4)]) == ExitCode.UNREACHABLE
    assert exit_code([host("a", 0, failed=False)], check=True) == ExitCode.CHANGES_PENDING
    assert exit_code([host("a", 0, failed=False)]) == ExitCode.OK


def fleet_files(tmp_path: Path, hosts: str) -> tuple[Path, Path]:
    pb = tmp_path / "pb.yaml"
    pb.write_text(f"""schema_version: 1
target: {{host: placeholder}}
steps:
  - {{kind: test.file, params: {{path: "{tmp_path}/x", content: x}}}}
""")
    inv = tmp_path / "hosts.yaml"
    inv.write_text(hosts)
    return pb, inv


@pytest.mark.parametrize(("hosts", "code"), [
    # an address where nothing listens is unreachable (4); an invalid address is a usage error (2)
    (lambda t: f"hosts:\n  - {{name: gone, host: 127.0.0.1, ssh: {{port: {closed_port()}, key_file: {t}/no-key, "
               f"known_hosts: {t}/kh}}}}\n  - {{name: bad, host: 'bad host!'}}\n",
     ExitCode.UNREACHABLE),
    (lambda t: "hosts:\n  - {name: bad, host: 'bad host!'}\n", ExitCode.USAGE),
], ids=["unreachable-and-usage", "usage"])
def test_replay_inventory_exits_with_the_most_specific_code(tmp_path: Path, hosts: Any, code: int) -> None:
    pb, inv = fleet_files(tmp_path, hosts(tmp_path))
    res = CliRunner().invoke(main, ["replay", str(pb), "--inventory", str(inv), "--json"])
    assert res.exit_code == code, res.output
    recap = json.loads(res.stdout.strip().splitlines()[-1])
    assert recap["status"] == "failed" and all(h["failed"] == 1 for h in recap["hosts"].values())
