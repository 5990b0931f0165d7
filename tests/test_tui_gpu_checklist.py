"""The Passthrough page's GPU checklist (issue 28): one line per GPU of the inventory, in step with the
`gpus` field (which still takes ranges), and an index the inventory does not list refused in the form."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, SelectionList, Static

from screens.pages.passthrough import ranges_text
from screens.step_page import StepPage
from tests.support.tui import make_app, screen_text, show


def test_ranges_text() -> None:
    assert ranges_text([0, 1, 2, 3, 6], list(range(8))) == "0-3,6"
    assert ranges_text(list(range(8)), list(range(8))) == "all"
    assert ranges_text([5], list(range(8))) == "5"
    assert ranges_text([], list(range(8))) == ""


@pytest.fixture(autouse=True)
def _state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISIONER_STATE_DIR", "/nonexistent/state")


async def test_gpu_checklist_follows_the_inventory_and_the_field(tmp_path: Path) -> None:
    app = make_app(tmp_path, "passthrough")
    async with app.run_test(size=(100, 30)) as pilot:
        await show(pilot, "passthrough")
        page = app.screen
        assert isinstance(page, StepPage)
        index = next(i for i in page.indices if app.session.runs[i].spec.kind == "lxc.gpu_passthrough")
        listing: SelectionList[Any] = page.query_one("#gpu-list", SelectionList)
        assert listing.option_count == 8 and sorted(listing.selected) == list(range(8))  # playbook: all
        field = page.query_one(f"#s{index}--gpus", Input)

        listing.deselect(7)
        listing.deselect(4)
        await pilot.pause()
        page.flush_forms()  # type: ignore[attr-defined]
        await pilot.pause()
        assert field.value == "0-3,5-6"
        assert app.session.runs[index].spec.params["gpus"] == [0, 1, 2, 3, 5, 6]

        field.value = "0-1"  # ranges typed in the field move the checklist
        await pilot.pause()
        page.flush_forms()  # type: ignore[attr-defined]
        await pilot.pause()
        assert sorted(listing.selected) == [0, 1]

        field.value = "0,9"  # not on the inventory: refused in the form, not at plan time
        await pilot.pause()
        page.flush_forms()  # type: ignore[attr-defined]
        await pilot.pause()
        error = str(page.query_one(f"#s{index}--gpus--error", Static).render())
        assert "GPU 9 not on this node" in error and "0-7" in error
        assert page.form_valid[index] is False
        assert app.session.runs[index].spec.params["gpus"] == [0, 1]  # the refused value is not stored
        assert "GPU 9 not on this node" in screen_text(app) or field.has_class("-invalid")
