"""The suite's two tiers: `lab` (tests that start the lab, sshd, LXC or other real system parts) and the rest.

Never set by hand: at collection, a test is marked ``lab`` when it asks for a lab fixture
(`LAB_FIXTURES`), when its module uses the lab's code or the support modules that start real parts
(`LAB_SOURCES`) — directly, or through another test module it takes helpers from — or when its module's
source starts them another way (`LAB_WORDS`: a subprocess `provisioner demo`, `--lab`, a real torch
venv, namespaces). The tests of the other tier
run first (they fail in seconds when something basic is broken), then the lab tier; under pytest-xdist the
two share the workers. `uv run pytest -m "not lab"` runs the fast tier alone.
"""

from __future__ import annotations

import inspect
import sys
from types import ModuleType

import pytest

#: modules whose use makes a test module part of the lab tier
LAB_SOURCES = ("provisioner.lab", "tests.support.labrun", "tests.support.lab", "tests.support.sshd",
               "tests.support.lxc", "tests.support.torch_env", "tests.support.labcache",
               "tests.support.lab_inventory")
#: words in a test module's source that start real parts without importing them (subprocess CLIs, namespaces)
LAB_WORDS = ("provisioner.lab", "point_at_lab", '"--lab"', "'--lab'", '"demo"', "unshare",
             "torch_supply", "real_torch", "supplied_torch", "lab_env", "lab_session")
#: fixtures that start a lab or a real daemon
LAB_FIXTURES = frozenset({"lab", "make_lab", "sshd"})

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
    items[:] = fast + lab
