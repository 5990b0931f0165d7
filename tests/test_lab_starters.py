"""One module defines how the tests start a lab (issue 32): `tests/support/lab.py`.

Every other test module starts its lab through it: the lab daemon (`up_daemon`, which `LabRun` uses; `lab_up`
for `provisioner lab up` as a user types it), the services in this process (`start_services`, `start_lab`), the
node's SSH endpoint alone (`ssh_node`) or the PVE API alone (`start_api`, `make_lab`). The tests whose subject is
the starting itself — the `lab up`/`lab down` command and the wizard's own lab start — run it as a user does.
"""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
STARTERS = TESTS / "support" / "lab.py"
#: the tests whose subject is the start itself (the CLI command, the wizard's lab start)
SUBJECTS = frozenset({"test_lab_cli.py", "test_lab_tui_start.py"})
#: each way of starting a lab's daemon or its servers
STARTS = {
    "the lab daemon (Lab.up)": re.compile(r"\bLab\([^)]*\)\.up\(|\.up\(env=|\.up, env="),
    "the services in this process": re.compile(r"\bLabServices\("),
    "the SSH node alone": re.compile(r"\bLabSshServer\("),
    "the PVE API alone": re.compile(r"\bLabApiServer\([^)]*\)\.start\("),
    "`provisioner lab up`": re.compile(r"""["']lab["'],\s*["']up["']"""),
}


def starts_in(text: str) -> list[str]:
    return [what for what, pattern in STARTS.items() if pattern.search(text)]


def test_every_way_of_starting_a_lab_is_defined_in_one_module() -> None:
    # the one module holds every kind (so this test would see one anywhere else)
    assert starts_in(STARTERS.read_text()) == list(STARTS)
    elsewhere = {
        str(path.relative_to(TESTS)): found
        for path in sorted(TESTS.rglob("*.py"))
        if path != STARTERS and path.name not in SUBJECTS and path != Path(__file__).resolve()
        if (found := starts_in(path.read_text()))
    }
    assert elsewhere == {}, f"start labs through tests/support/lab.py: {elsewhere}"


def test_the_patterns_see_the_starts_they_name() -> None:
    samples = {
        "the lab daemon (Lab.up)": 'conn, _ = Lab(root, ["x"]).up(env=env)',
        "the services in this process": "services = LabServices(state).start()",
        "the SSH node alone": "server = await LabSshServer(state).start()",
        "the PVE API alone": "api = LabApiServer(state).start()",
        "`provisioner lab up`": 'cli(env, "lab", "up", "--root", str(root))',
    }
    for what, sample in samples.items():
        assert starts_in(sample) == [what], (what, sample)
    assert starts_in('lab.up(env=env)') == ["the lab daemon (Lab.up)"]
    # a test's handle on a lab (`LabRun.up()`) and the lab's other commands are not starts of their own
    assert starts_in('cli(env, "lab", "upgrade-driver", "580.95.05")') == starts_in("run.up()") == []
