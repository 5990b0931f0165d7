"""One module per wizard page; `PAGE_CLASSES` maps page names (see `wizard_session.PAGES`) to screens."""

from __future__ import annotations

from screens.pages.burnin import BurninPage
from screens.pages.connect import ConnectPage
from screens.pages.container import ContainerPage
from screens.pages.driver import DriverPage
from screens.pages.inventory import InventoryPage
from screens.pages.passthrough import PassthroughPage
from screens.pages.pytorch import PyTorchPage
from screens.pages.summary import SummaryPage
from screens.pages.venv import VenvPage
from screens.step_page import StepPage

PAGE_CLASSES: dict[str, type[StepPage]] = {
    cls.PAGE_NAME: cls
    for cls in (ConnectPage, InventoryPage, ContainerPage, PassthroughPage, DriverPage, PyTorchPage, VenvPage,
                BurninPage, SummaryPage)
}
