"""The loading frame (`provisioner tui` paints before the playbook and the engine load): ctrl+q pressed on it
leaves cleanly — exit 0, no traceback — whether the key is handled before the session is built or while it is
(CI stop 38: `tui --lab` under load exited 1 with `NoMatches: '#log'` because the Connect page was mounted on
an app that was already exiting) — or after the page is switched in, while it is mounted (CI stop 39: the same
`NoMatches` from the page's own `on_mount`, its widgets already pruned by the quit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provisioner.playbook import load
from screens.app import ProvisionerApp
from screens.wizard_session import PAGES, WizardSession
from tests.support.tui import PLAYBOOK


class _QuitOnTheLoadingFrame(ProvisionerApp):
    """ctrl+q handled right after the loading frame is pushed, before the callback that builds the session."""

    def on_mount(self) -> None:  # Textual runs ProvisionerApp.on_mount first (handlers of each class in the MRO)
        self.action_request_quit()


def _factory(tmp_path: Path, built: list[WizardSession], before: Any = None) -> Any:
    def factory() -> WizardSession:
        if before is not None:
            before()
        session = WizardSession(load(PLAYBOOK), playbook_path=str(PLAYBOOK), runs_dir=tmp_path)
        built.append(session)
        return session
    return factory


async def test_ctrl_q_before_the_session_is_built_exits_0_without_building_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    built: list[WizardSession] = []
    app = _QuitOnTheLoadingFrame(_factory(tmp_path, built))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
    assert app.return_code == 0 and not app._exit_renderables
    assert built == []  # nothing loaded, no page mounted on a leaving app
    assert "page-connect" not in [s.id for s in app.pages.values()]


async def test_ctrl_q_while_the_session_is_built_exits_0_and_closes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    built: list[WizardSession] = []
    holder: list[ProvisionerApp] = []
    app = ProvisionerApp(_factory(tmp_path, built, before=lambda: holder[0].action_request_quit()))
    holder.append(app)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
    assert app.return_code == 0 and not app._exit_renderables
    assert len(built) == 1 and app.pages == {}  # the session was built (and closed on unmount); no page opened


class _QuitAsThePageMounts(ProvisionerApp):
    """ctrl+q handled right after the page replaces the loading frame, before the page has mounted."""

    def switch_screen(self, screen: Any) -> Any:
        result = super().switch_screen(screen)
        self.action_request_quit()
        return result


@pytest.mark.parametrize("page", [p.name for p in PAGES])
async def test_ctrl_q_while_the_first_page_is_mounted_exits_0(
        page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    built: list[WizardSession] = []
    app = _QuitAsThePageMounts(_factory(tmp_path, built), start_page=page)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
    assert app.return_code == 0 and not app._exit_renderables, app._exit_renderables
    assert len(built) == 1 and not app.pages[page].body_ready  # nothing filled on the leaving app
