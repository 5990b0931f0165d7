"""The wizard's view of the engine: its pages, and the step-by-step session (`provisioner.stepwise`).

The session logic (run assembly, counting, recording, tracking) lives in the engine; this module
only names the pages and keeps the wizard's `lab` flag (shown in the header).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from provisioner.playbook import Playbook
from provisioner.stepwise import RunStatus, StepRun, StepSession, changed_params, params_model
from provisioner.words import Words

__all__ = ["PAGES", "PageDef", "RunStatus", "StepRun", "WizardSession", "changed_params", "params_model"]


@dataclass(frozen=True)
class PageDef:
    """One wizard page: a name (also the screen name), a title and the step kinds it drives."""

    name: str
    title: str
    kinds: tuple[str, ...]


PAGES: tuple[PageDef, ...] = (
    PageDef("connect", "Connect", ("node.connect",)),
    PageDef("inventory", "Inventory", ("node.inventory",)),
    PageDef("container", "Container", ("lxc.create",)),
    PageDef("passthrough", "Passthrough", ("lxc.gpu_passthrough", "lxc.boot_persistence", "lxc.start")),
    PageDef("driver", "Driver", ("driver.userspace", "gpu.detect")),
    PageDef("pytorch", "PyTorch", ("torch.resolve",)),
    PageDef("venv", "Venv", ("venv.build",)),
    PageDef("burnin", "Burn-in", ("burnin.run",)),
    PageDef("summary", "Summary", ()),
)


class WizardSession(StepSession):
    """One wizard run against one target (`lab`: the header says LAB; the steps never know)."""

    def __init__(self, playbook: Playbook, *, playbook_path: str = "", lab: bool = False,
                 runs_dir: Path | None = None, record_to: str | None = None) -> None:
        super().__init__(playbook, playbook_path=playbook_path, runs_dir=runs_dir, record_to=record_to)
        self.lab = lab
        self.words = Words("wizard", {kind: page.title for page in PAGES for kind in page.kinds})
