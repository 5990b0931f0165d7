"""Words for the face in use: a fix names the wizard's field in the wizard and the playbook key headless.

A step says what to change by its parameter (`ctx.words.field("lxc.create", "cores", "lower cores")`):
headless that is the playbook key (`lxc.create params: cores`, `target.container`), in the wizard the
page and field the user types into (`field 'cores' on the Container page`). "then replay" becomes
"then Retry" in the wizard. The wizard hands in its pages' titles, so the engine knows no screen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Face = Literal["cli", "wizard"]

#: parameters kept outside a step's params: the playbook key, and the wizard's label of its field
TARGET_KEYS: dict[tuple[str, str], tuple[str, str]] = {
    ("lxc.create", "vmid"): ("target.container", "container id"),
}


@dataclass(frozen=True)
class Words:
    face: Face = "cli"
    pages: Mapping[str, str] = field(default_factory=dict)  # step kind -> wizard page title

    @property
    def wizard(self) -> bool:
        return self.face == "wizard"

    def where(self, kind: str, param: str) -> str:
        """Where the value is set: `playbook key target.container` / `field 'container id' on the Container page`."""
        key, label = TARGET_KEYS.get((kind, param), (f"{kind} params: {param}", param.replace("_", " ")))
        if self.wizard:
            page = self.pages.get(kind)
            return f"field '{label}'" + (f" on the {page} page" if page else "")
        return f"playbook key {key}"

    def field(self, kind: str, param: str, advice: str) -> str:
        return f"{advice} ({self.where(kind, param)})"

    @property
    def retry(self) -> str:
        """The closing words of a fix: how to try again in this face."""
        return "then Retry (ctrl+r)" if self.wizard else "then replay"
