"""One module per wizard page; `page_class(name)` imports the one page `name` (see `wizard_session.PAGES`).

Pages are imported when first shown, so the wizard's first frame does not wait for the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from screens.step_page import StepPage

PAGE_MODULES: dict[str, tuple[str, str]] = {
    "connect": ("screens.pages.connect", "ConnectPage"),
    "inventory": ("screens.pages.inventory", "InventoryPage"),
    "container": ("screens.pages.container", "ContainerPage"),
    "passthrough": ("screens.pages.passthrough", "PassthroughPage"),
    "driver": ("screens.pages.driver", "DriverPage"),
    "pytorch": ("screens.pages.pytorch", "PyTorchPage"),
    "venv": ("screens.pages.venv", "VenvPage"),
    "burnin": ("screens.pages.burnin", "BurninPage"),
    "summary": ("screens.pages.summary", "SummaryPage"),
}

PAGE_TITLES: dict[str, str] = {"connect": "Connect", "inventory": "Inventory", "container": "Container",
                               "passthrough": "Passthrough", "driver": "Driver", "pytorch": "PyTorch",
                               "venv": "Venv", "burnin": "Burn-in", "summary": "Summary"}


def page_class(name: str) -> type[StepPage]:
    module, cls = PAGE_MODULES[name]
    page: type[StepPage] = getattr(importlib.import_module(module), cls)
    return page
