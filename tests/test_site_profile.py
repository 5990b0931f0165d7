"""Site profiles (`provisioner.site`): a site's mirrors, sizes and switches apply at run time and are never
recorded; the inventory format knows no lab.

Unit tests: loading validates kinds and parameter names; the recorder writes back the playbook's own target
and parameters (a site value the playbook set itself stays). The lab test takes the shipped playbook's two
recordings against a lab (replay `--record`: the golden node's provisioning, on this test's copy of it; and
the wizard's step-by-step session on that copy), restarts the lab's services
on new ports with its state kept, and replays each recording: 0 changes, and no loopback URL, lab size or
interpreter path in either file.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml

from provisioner.events import StepFinished
from provisioner.playbook import Playbook, PlaybookError, StepSpec
from provisioner.runlog import Recorder
from provisioner.session import LAB_BURNIN
from provisioner.site import SiteProfile, apply_site, load_site, origin_of, site_of
from tests.support.lab import golden_playbook, golden_recorded
from tests.support.labrun import LabRun, lab_importable
from tests.support.require import require


def _playbook(**venv: Any) -> Playbook:
    return Playbook.model_validate({
        "schema_version": 1, "target": {"host": "pve1.example.internal", "container": 200},
        "steps": [{"kind": "node.connect"},
                  {"kind": "venv.build", "params": {"path": "/opt/venv", **venv}},
                  {"kind": "burnin.run", "params": {"duration_s": 30}}]})


SITE = SiteProfile(name="berlin", steps={
    "venv.build": {"index_mirror": "http://mirror.example/whl", "pypi_mirror": "http://mirror.example/simple"},
    "burnin.run": {"sizes": "1KiB:256KiB", "duration_s": 2}})


def test_load_site_validates_kinds_and_parameter_names(tmp_path: Path) -> None:
    good = tmp_path / "site.yaml"
    good.write_text(yaml.safe_dump(SITE.model_dump()))
    assert load_site(good) == SITE
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "x", "steps": {"venv.build": {"index_mirorr": "http://m/whl"},
                                                           "no.such": {}}}))
    with pytest.raises(PlaybookError) as err:
        load_site(bad)
    text = str(err.value)
    assert "steps.venv.build.index_mirorr: not a parameter of venv.build" in text
    assert "steps.no.such: unknown step kind" in text
    extra = tmp_path / "extra.yaml"
    extra.write_text("name: x\nlab_root: /tmp/lab\n")
    with pytest.raises(PlaybookError, match="lab_root"):
        load_site(extra)


def test_site_values_are_defaults_and_never_recorded() -> None:
    written = _playbook(pypi_mirror="http://own.example/simple")
    lab_target = written.target.model_copy(update={"host": "127.0.0.1"})
    applied = apply_site(written.model_copy(update={"target": lab_target}), SITE, target_from=written)
    assert site_of(applied) == SITE and origin_of(applied) == written
    build, burnin = applied.steps[1].params, applied.steps[2].params
    assert build["index_mirror"] == "http://mirror.example/whl"
    assert build["pypi_mirror"] == "http://own.example/simple"  # the playbook's own value wins
    assert burnin == {"sizes": "1KiB:256KiB", "duration_s": 30}
    # A second profile on top (a user's --site over the lab's) wins over the first.
    top = apply_site(applied, SiteProfile(name="top", steps={"burnin.run": {"sizes": "8B:1MiB"}}))
    assert top.steps[2].params == {"sizes": "8B:1MiB", "duration_s": 30}
    assert origin_of(top) == written and top.target == applied.target

    recorder = Recorder(top)
    for index, spec in enumerate(top.steps):
        recorder(StepFinished(host="h", index=index, step=spec.kind, status="changed", mode="apply"))
    recorded = recorder.playbook()
    assert recorded.target == written.target  # never the run's (lab) endpoint
    assert recorded.steps[1].params == {"path": "/opt/venv", "pypi_mirror": "http://own.example/simple"}
    assert recorded.steps[2].params == {"duration_s": 30}
    # A value edited during the run (the wizard) is the user's: it is kept.
    edited = StepSpec(kind="burnin.run", params={"sizes": "4KiB:8KiB", "duration_s": 30})
    recorder2 = Recorder(top, lambda index: edited if index == 2 else top.steps[index])
    recorder2(StepFinished(host="h", index=2, step="burnin.run", status="changed", mode="apply"))
    assert recorder2.playbook().steps[0].params == {"sizes": "4KiB:8KiB", "duration_s": 30}


# --- against the lab ---------------------------------------------------------------------------------

LOOPBACK = ("127.0.0.1", "localhost", "::1")
LAB_ONLY = ("index_mirror", "pypi_mirror", "driver_mirror", "extras_from_torch_index", "nvml_gpu_count_check",
            "fallback_python", "apt_lock_backoff_max_s", str(LAB_BURNIN["sizes"]), "16KiB:256KiB")


def _assert_site_free(path: Path, lab: LabRun) -> None:
    text = path.read_text()
    found = [s for s in (*LOOPBACK, *LAB_ONLY, str(lab.root), sys.executable, sys.prefix) if s in text]
    assert not found, f"{path} holds site values {found}:\n{text}"


def _restart_keeping_state(lab: LabRun) -> dict[str, Any]:
    """The lab's services stopped and started again on new ports, its node and containers kept."""
    from provisioner.lab.lab import Lab

    before = Lab(lab.root).connection()
    lab.down()
    conn = LabRun(lab.base, lab.lab_cache, lab.scenarios, keep_state=True, profile=lab.profile).up()
    assert before is not None and conn["ssh"]["port"] != before["ssh"]["port"]
    assert conn["index_url"] != before["index_url"]
    return conn


async def _wizard_record(lab: LabRun, playbook: Path, out: Path) -> None:
    """The wizard's engine (`StepSession`), step by step as the pages drive it, then Save."""
    from provisioner.playbook import load
    from provisioner.session import point_at_lab
    from provisioner.stepwise import StepSession

    env = {k: v for k, v in lab.env().items() if k.startswith("PROVISIONER_")}
    with mock.patch.dict(os.environ, env):
        session = StepSession(point_at_lab(load(playbook), lab.root), playbook_path=str(playbook),
                              runs_dir=lab.base)
        try:
            for index, run in enumerate(session.runs):
                status = await session.apply(index)
                assert status in ("ok", "changed"), f"{run.spec.kind}: {run.message}\n" + "\n".join(run.tail)
        finally:
            await session.close()
        session.save(out)


@pytest.mark.timeout(1200)  # two labs, four replays (one of them a full install) on a loaded 2-core machine
def test_recordings_from_the_lab_hold_no_site_value_and_replay_on_a_restarted_and_a_second_lab(
        golden_copy: Callable[[Path], LabRun], tmp_path: Path) -> None:
    require(os.geteuid() == 0, "the lab needs root (mount namespaces, device nodes)")
    require(lab_importable(), "the embedded lab is not in this build")
    # the first lab: the run's golden node (the shipped playbook replayed with --record, checked end to end where
    # it ran), this test's own copy; its recording is the replay's
    lab = golden_copy(tmp_path / "a")
    playbook = golden_playbook(lab)
    replay_recorded = golden_recorded(lab)
    with lab.running():
        _assert_site_free(replay_recorded, lab)
        wizard_recorded = tmp_path / "wizard-recorded.yaml"
        asyncio.run(_wizard_record(lab, playbook, wizard_recorded))
        _assert_site_free(wizard_recorded, lab)

        _restart_keeping_state(lab)
        for recorded in (replay_recorded, wizard_recorded):
            again = tmp_path / f"again-{recorded.name}"
            run = lab.replay(recorded, extra=["--record", str(again)])
            assert run.rc == 0, run.describe()
            assert run.recap is not None
            (counts,) = run.recap["hosts"].values()
            assert counts["changed"] == 0 and counts["failed"] == 0, (recorded.name, counts)
            _assert_site_free(again, lab)

    # A second lab (another root, other ports, another API password and host key): the wizard's recording
    # applies there as it stands, and then the replay's recording finds nothing to change.
    second = LabRun(tmp_path / "b", tmp_path / "lab-cache")
    with second.running():
        applied = second.replay(wizard_recorded)
        assert applied.rc == 0, applied.describe()
        assert applied.recap is not None
        (counts,) = applied.recap["hosts"].values()
        assert counts["changed"] > 0 and counts["failed"] == 0, counts
        converged = second.replay(replay_recorded)
        assert converged.rc == 0, converged.describe()
        assert converged.recap is not None
        (counts,) = converged.recap["hosts"].values()
        assert counts["changed"] == 0 and counts["failed"] == 0, counts
