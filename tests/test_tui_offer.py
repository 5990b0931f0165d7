"""A failed step that offers an edit of its own parameters (venv.build: trust the sha256 of a wheel its index links
without one) shows a button on its error panel; the dialog shows what to check, Cancel changes nothing, and the
confirmed edit is merged into the step's parameters, shown in its field, and planned again (never applied before
that plan is confirmed).

The offer is the one the engine makes from a real index page (`tests/fixtures/index/torch_cu128_links.html`: the
aarch64 torch 2.7.0+cu128 wheel linked without a sha256, pytorch/pytorch#153469), delivered as the engine delivers
it, a `step.finished` event on the session's bus. That venv.build raises it against a real index and uv is
`tests/test_index_shape.py` (in-process and in a lab container through the CLI)."""

from __future__ import annotations

import socket
from pathlib import Path

from textual.widgets import Button, Input, Log, Static

from provisioner.events import ParamOffer, StepFinished
from provisioner.playbook import load
from provisioner.steps.venv_links import judge_unhashed, unhashed_files
from screens.app import ProvisionerApp
from screens.dialogs import OfferDialog, QuitDialog
from screens.wizard_session import WizardSession
from tests.support.index_page import AARCH64_270, DOWNLOADED, WIN_270_SHA, X86_270_SHA, _list, _lock
from tests.support.index_page import index as index  # the real page on loopback (fixture)
from tests.support.tui import PLAYBOOK, wait_for, wait_idle

EARLIER = "torch-2.7.0+cu128-cp311-cp311-manylinux_2_28_aarch64.whl"  # an entry the user trusted before


def _offer(index: str) -> tuple[ParamOffer, str]:
    """venv.build's offer and failure text for the real page (served on loopback, read by its listing script),
    as a container on aarch64 sees it."""
    listing = _list(f"{index}/torch/")
    listing.machine = "aarch64"
    found = unhashed_files(_lock(DOWNLOADED, X86_270_SHA, WIN_270_SHA), listing, index, "3.10")
    verdict = judge_unhashed(found, {})
    offer = verdict["offer"]
    assert verdict["refused"] and offer is not None and offer.add == {AARCH64_270: DOWNLOADED}, verdict
    return offer, "; ".join(verdict["refused"]) + "\nfix: " + verdict["fix"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_failed_steps_offer_is_shown_confirmed_merged_and_planned_again(tmp_path: Path, index: str) -> None:
    book = load(PLAYBOOK)
    # a node that refuses the connection at once: the plan after the edit fails fast, without the network
    target = book.target.model_copy(update={"host": "127.0.0.1", "ssh": book.target.ssh.model_copy(update={
        "port": _closed_port(), "known_hosts": str(tmp_path / "known_hosts")})})
    steps = [s.model_copy(update={"params": {**s.params, "trusted_hashes": {EARLIER: "7" * 64}}})
             if s.kind == "venv.build" else s for s in book.steps]
    session = WizardSession(book.model_copy(update={"target": target, "steps": steps}), playbook_path=str(PLAYBOOK),
                            runs_dir=tmp_path, record_to=str(tmp_path / "rec.yaml"))
    step = next(i for i, r in enumerate(session.runs) if r.spec.kind == "venv.build")
    offer, message = _offer(index)
    app = ProvisionerApp(session, start_page="venv")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.screen.name == "venv" and getattr(app.screen, "body_ready", False),
                       what="the venv page")
        page = app.screen
        session.runs[step].status = "failed"
        session.bus.emit(StepFinished(host=session.host, index=step, step="venv.build", status="failed",
                                      message=message, offer=offer))
        page.show_error(step)  # type: ignore[attr-defined]
        await pilot.pause()
        button = page.query_one("#offer", Button)
        assert button.display and str(button.label) == "Trust…"
        assert session.runs[step].offer == offer

        # Cancel (the focused button: trusting takes a deliberate choice) changes nothing
        await pilot.click("#offer")
        await wait_for(pilot, lambda: isinstance(app.screen, OfferDialog), what="the trust dialog")
        shown = str(app.screen.query_one("#offer-text", Static).render())
        host = index.split("/")[2]
        assert AARCH64_270 in shown and DOWNLOADED in shown and host in shown, shown
        assert "Trust only a sha256 you have checked against a source you trust" in shown, shown
        assert app.screen.focused is not None and app.screen.focused.id == "offer-cancel"
        await pilot.press("enter")
        await wait_for(pilot, lambda: not isinstance(app.screen, OfferDialog), what="the dialog to close")
        assert session.runs[step].spec.params["trusted_hashes"] == {EARLIER: "7" * 64}
        assert not app.busy

        # Trust: merged with what the playbook trusted already, shown in the field, planned again
        await pilot.click("#offer")
        await wait_for(pilot, lambda: isinstance(app.screen, OfferDialog), what="the trust dialog")
        await pilot.click("#offer-accept")
        await wait_for(pilot, lambda: not isinstance(app.screen, OfferDialog), what="the dialog to close")
        await wait_idle(app, pilot, 120)
        assert session.runs[step].spec.params["trusted_hashes"] == {EARLIER: "7" * 64, AARCH64_270: DOWNLOADED}
        field = page.query_one(f"#s{step}--trusted_hashes", Input).value
        assert AARCH64_270 in field and DOWNLOADED in field and EARLIER in field, field
        logged = "\n".join(str(line) for line in page.query_one("#log", Log).lines)
        assert f"trusted_hashes: added {AARCH64_270}" in logged and "── plan: venv.build" in logged, logged
        # the new plan ran (and failed: nothing listens on that port); its failure offers nothing
        assert session.runs[step].status == "failed" and session.runs[step].offer is None
        assert not page.query_one("#offer", Button).display
        assert not (tmp_path / "rec.yaml").exists()  # nothing was applied, nothing saved yet

        # ctrl+q does not drop the confirmation: it asks (Stay / Discard / Save and quit), and Save keeps the
        # trusted sha256s in the recording, the step marked pending (opening the recording plans it again)
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: isinstance(app.screen, QuitDialog), what="the quit prompt")
        assert app.is_running
        assert [str(b.label) for b in app.screen.query(Button)] == ["Stay", "Discard", "Save and quit"]
        await pilot.click("#quit-save")
        await wait_for(pilot, lambda: app._exit, what="the wizard to exit")
    assert app.return_code == 0
    recorded = load(tmp_path / "rec.yaml")
    venv = next(s for s in recorded.steps if s.kind == "venv.build")
    assert venv.pending and venv.params["trusted_hashes"] == {EARLIER: "7" * 64, AARCH64_270: DOWNLOADED}
    assert all(s.pending for s in recorded.steps)  # nothing ran: every step is left to do
    assert app.resume_command == f"provisioner tui {tmp_path / 'rec.yaml'}"
