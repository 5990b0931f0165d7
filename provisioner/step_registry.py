"""The step registry: which modules hold the step kinds, and every kind registered by name.

It sits below `playbook.py` (which validates each step's params against its kind) and `steps/base.py`
(whose `register` fills it), and imports neither: the step modules are imported by name, at first use.
"""

from __future__ import annotations

import importlib
from typing import Protocol

from pydantic import BaseModel


class KindClass(Protocol):
    """What the playbook's validation reads of a step kind class object (a `steps.base.StepKind` subclass)."""

    @property
    def kind(self) -> str: ...

    @property
    def Params(self) -> type[BaseModel]: ...


#: step kind name -> its class; filled by `provisioner.steps.base.register` as each step module loads
KINDS: dict[str, KindClass] = {}

STEP_MODULES = (  # one step kind per module
    "provisioner.steps.node_connect",
    "provisioner.steps.node_inventory",
    "provisioner.steps.lxc_create",
    "provisioner.steps.lxc_passthrough",
    "provisioner.steps.lxc_boot_persistence",
    "provisioner.steps.lxc_start",
    "provisioner.steps.driver_userspace",
    "provisioner.steps.gpu_detect",
    "provisioner.steps.torch_resolve",
    "provisioner.steps.venv_build",
    "provisioner.steps.burnin_run",
    "provisioner.steps.burnin_multinode",
)


def load_step_modules() -> dict[str, KindClass]:
    """Import every step module so that they register."""
    for module in STEP_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:  # a step module not in this build yet
            if exc.name != module:
                raise
    return KINDS
