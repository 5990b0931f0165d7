"""The suite's two tiers: `lab` (tests that start the lab, sshd, LXC or other real system parts) and the rest.

Never set by hand: at collection, a test is marked ``lab`` when it asks for a lab fixture
(`LAB_FIXTURES`), when its module uses the lab's code or the support modules that start real parts
(`LAB_SOURCES`) — directly, or through another test module it takes helpers from — or when its module's
source starts them another way (`LAB_WORDS`: a subprocess `provisioner demo`, `--lab`, a real torch
venv, namespaces). The tests of the other tier
run first (they fail in seconds when something basic is broken), then the lab tier; under pytest-xdist the
two share the workers. `uv run pytest -m "not lab"` runs the fast tier alone.

The lab tier runs its modules longest first, by the seconds a whole run measured (`durations.json`, refreshed
with scripts/suite_durations.py from a suite report): pytest-xdist hands modules out in this order
(`--dist loadscope --no-loadscope-reorder`; its default order, most tests first, handed the longest
one-test modules out last, and the run ended on them). A module the file does not know counts as
`UNKNOWN_S`.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

#: modules whose use makes a test module part of the lab tier
LAB_SOURCES = ("provisioner.lab", "tests.support.labrun", "tests.support.lab", "tests.support.sshd",
               "tests.support.lxc", "tests.support.torch_env", "tests.support.labcache",
               "tests.support.lab_inventory")
#: words in a test module's source that start real parts without importing them (subprocess CLIs, namespaces)
LAB_WORDS = ("provisioner.lab", "point_at_lab", '"--lab"', "'--lab'", '"demo"', "unshare",
             "torch_supply", "real_torch", "supplied_torch", "lab_env", "lab_session",
             "tui_tmux_e2e.sh")  # the script that drives the wizard in tmux against a lab it starts
#: fixtures that start a lab or a real daemon
LAB_FIXTURES = frozenset({"lab", "make_lab", "sshd"})

#: a module's measured seconds (`durations.json`); a new module counts as this much until measured
UNKNOWN_S = 60
DURATIONS = Path(__file__).with_name("durations.json")

_memo: dict[str, bool] = {}


def _origin(obj: object) -> str:
    if inspect.ismodule(obj):
        return obj.__name__
    return str(getattr(obj, "__module__", "") or "")


def _module_uses_lab(module: ModuleType, seen: frozenset[str] = frozenset()) -> bool:
    name = module.__name__
    if name in _memo:
        return _memo[name]
    used = False
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        source = ""
    if any(word in source for word in LAB_WORDS):
        _memo[name] = True
        return True
    for obj in list(vars(module).values()):
        origin = _origin(obj)
        if origin.startswith(LAB_SOURCES):
            used = True
            break
        if origin.startswith("tests.test_") and origin != name and origin not in seen:
            other = sys.modules.get(origin)
            if other is not None and _module_uses_lab(other, seen | {name}):
                used = True
                break
    _memo[name] = used
    return used


def is_lab(item: pytest.Item) -> bool:
    if LAB_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    module = getattr(item, "module", None)
    return module is not None and _module_uses_lab(module)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    fast: list[pytest.Item] = []
    lab: list[pytest.Item] = []
    for item in items:
        if is_lab(item):
            item.add_marker(pytest.mark.lab)
            lab.append(item)
        else:
            fast.append(item)
    items[:] = fast + longest_first(lab)


def module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def longest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """`items` grouped by module, the modules in descending measured duration (a stable sort: each module's
    tests keep their order, modules of equal duration keep theirs)."""
    seconds: dict[str, int] = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(module_of(item), index)
    return sorted(items, key=lambda item: (-seconds.get(module_of(item), UNKNOWN_S), first_seen[module_of(item)]))
