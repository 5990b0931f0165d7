"""What a page may ask of the wizard application (`screens.app.ProvisionerApp` provides it).

The pages sit below the app: the app builds them, and they reach back only through this protocol, so
no page module imports `screens.app` (which would close an import circle app -> pages -> step_page -> app).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class WizardApp(Protocol):
    busy: bool  # an engine task runs (one at a time)
    lab: bool  # the target is the embedded lab (shown in the sub-title)
    sub_title: str  # textual's App.sub_title

    def flush_events(self) -> None: ...

    def start_engine(self, page: Any, coro: Coroutine[Any, Any, None]) -> None: ...

    def action_next_page(self) -> None: ...

    def action_prev_page(self) -> None: ...

    def action_abort(self) -> None: ...

    def action_run_log(self) -> None: ...

    def action_save(self) -> bool: ...
