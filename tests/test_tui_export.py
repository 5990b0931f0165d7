"""The Summary page offers the export of the proven runtime: plan first, write on confirmation, report.

The engine (`provisioner.export.offer`) plans and writes; the page only edits the parameters and shows the
result. The wizard session's run log holds the proof, as a finished run writes it (`StepFinished` events with
their `resolved` facts, emitted on the session's own bus). The proving container is this machine
(`LocalTransport`: the page's `container_transport` seam; in the wizard it is `pct exec` through the node):
the real uv compiles the venv's hashed lock to pylock.toml against a real PEP 503 index of real wheel files
(the lab's wheel builder, served over HTTP on 127.0.0.1), and the sizes are read from the index as in a container.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from textual.widgets import Button, Input, Select, Static

from provisioner.cli import export_image
from provisioner.events import StepFinished
from provisioner.export.offer import CORE_FILES
from provisioner.payloads import RuntimeGpu, VenvRuntime
from provisioner.playbook import load
from provisioner.transport.container import ContainerTransport
from provisioner.transport.local import LocalTransport
from screens.app import ProvisionerApp
from screens.pages.summary import SummaryPage
from screens.wizard_session import WizardSession
from tests.support.fake_pct import FAKE_PCT
from tests.support.require import require
from tests.support.tui import PLAYBOOK, wait_for
from tests.support.wheel_server import serve

TORCH = "2.11.0+cu128"
SYSTEM_PYTHON = "/usr/bin/python3.11"


def _index(root: Path, base: str) -> tuple[str, str]:
    """A PEP 503 simple index (served over HTTP at `base`) holding a real torch wheel; (index URL, the lock text)."""
    from provisioner.lab.wheels import make_wheel

    wheels = root / "wheels"
    wheels.mkdir(parents=True)
    wheel = make_wheel(wheels, "torch", TORCH, "py3-none-manylinux_2_28_x86_64",
                       {"torch/__init__.py": f"__version__ = '{TORCH}'\n".encode()})
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (root / "simple" / "torch").mkdir(parents=True)
    (root / "simple" / "index.html").write_text('<html><body><a href="torch/">torch</a></body></html>\n')
    (root / "simple" / "torch" / "index.html").write_text(
        f'<html><body><a href="{base}/wheels/{quote(wheel.name)}#sha256={sha}">{wheel.name}</a></body></html>\n')
    return f"{base}/simple/", f"torch=={TORCH} \\\n    --hash=sha256:{sha}\n"


def _venv(path: Path, index: str, python: str = sys.executable) -> None:
    """A venv as venv.build leaves it: a real interpreter and a verified runtime.json."""
    subprocess.run(["uv", "venv", "--quiet", "--python", python, str(path)], check=True, timeout=300)
    version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    runtime = VenvRuntime(built_by="gpu-provisioner", verified=True, torch=TORCH, cuda="12.8", index_url=index,
                          python=version, driver="595.71.05",
                          arch_list=["sm_80", "sm_90", "sm_100", "sm_120"],
                          gpus=[RuntimeGpu(index=0, name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
                                           compute_cap="12.0")])
    (path / "runtime.json").write_text(runtime.model_dump_json())


def _session(tmp: Path, venv: Path, *, index: str, lock: str, burnin: bool = True) -> WizardSession:
    (tmp / "runs").mkdir(exist_ok=True)
    pb = load(PLAYBOOK)
    steps = [s.model_copy(update={"params": {**s.params, "path": str(venv)}}) if s.kind == "venv.build" else s
             for s in pb.steps]
    session = WizardSession(pb.model_copy(update={"steps": steps}), playbook_path=str(PLAYBOOK),
                            runs_dir=tmp / "runs", record_to=str(tmp / "recorded.yaml"))
    at = {r.spec.kind: r.index for r in session.runs}
    facts = [("torch.resolve", {"torch": {"version": "2.11.0", "variant": "cu128", "index_url": index}}),
             ("venv.build", {"venv_lock": {"groups": {"torch": {"text": lock, "index_url": index}}},
                             "runtime": {"torch": TORCH, "cuda": "12.8"}})]
    if burnin:
        facts.append(("burnin.run", {"burnin": {"verdict": "pass", "summary": "pass"}}))
    for kind, resolved in facts:
        session.bus.emit(StepFinished(host=session.host, index=at[kind], step=kind, status="changed",
                                      resolved=resolved, mode="apply"))
    return session


async def _set(app: ProvisionerApp, pilot: Any, fmt: str, dest: Path) -> SummaryPage:
    page = app.screen
    assert isinstance(page, SummaryPage)
    page.query_one("#export-format", Select).value = fmt
    page.query_one("#export-dest", Input).value = str(dest)
    await pilot.pause()
    return page


@contextlib.asynccontextmanager
async def _export_summary(tmp_path: Path, base: str, fmt: str,
                          python: str = sys.executable) -> AsyncIterator[tuple[Any, SummaryPage]]:
    """A proven run's session (its venv built from the wheel index served at `base`) on the Summary page, with
    `fmt` and `tmp_path/out` set: (pilot, page); the session is closed afterwards."""
    index, lock = _index(tmp_path / "index", base)
    _venv(tmp_path / "venv", index, python)
    session = _session(tmp_path, tmp_path / "venv", index=index, lock=lock)
    app = ProvisionerApp(session, start_page="summary")
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, SummaryPage) and app.screen.body_ready,
                           timeout=60, what="the Summary page")
            yield pilot, await _set(app, pilot, fmt, tmp_path / OUT)
    finally:
        await session.close()


#: the export folder of the plan-and-write tests: longer than the page is wide, so that the plan's lines wrap — the
#: folder's path must still be shown whole (a CI run with a longer scratch path met it cut mid-name)
OUT = "export-folder-" + "with-a-name-longer-than-the-page-" * 3


@pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv")
async def test_the_summary_plans_then_writes_the_export_and_lists_the_files(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "index").mkdir()
    with serve(tmp_path / "index") as base:
        await _write_export(tmp_path, monkeypatch, base)


async def _write_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base: str) -> None:
    venv, out = tmp_path / "venv", tmp_path / OUT
    async with _export_summary(tmp_path, base, "flox") as (pilot, page):
        monkeypatch.setattr(page, "container_transport", lambda vmid: LocalTransport())
        write = page.query_one("#export-write", Button)
        assert write.disabled  # nothing is written before a plan is shown
        page.query_one("#export-plan", Button).press()
        await wait_for(pilot, lambda: not write.disabled, timeout=60, what="the plan")
        shown = str(page.query_one("#export-result", Static).render())
        for name in ("pylock.toml", "runtime.json", "host.json", "manifest.toml", str(out)):
            assert name in shown, name
        assert not out.exists()  # the plan changed nothing
        page.query_one("#export-dest", Input).value = str(out) + "x"  # an edit drops the plan
        await pilot.pause()
        assert write.disabled
        page.query_one("#export-dest", Input).value = str(out)
        page.query_one("#export-plan", Button).press()
        await wait_for(pilot, lambda: not write.disabled, timeout=60, what="the plan again")
        # a change event that arrives after the plan with the values as planned (Select and Input post theirs
        # asynchronously) keeps it: Write export stays enabled (stop 41's run 22 waited 800 s on a dropped plan)
        page.query_one("#export-dest", Input).post_message(Input.Changed(page.query_one("#export-dest", Input),
                                                                         str(out)))
        await pilot.pause()
        assert not write.disabled and page.export_plan is not None
        write.press()
        await wait_for(pilot, lambda: "wrote" in str(page.query_one("#export-result", Static).render())
                       or "failed" in str(page.query_one("#export-result", Static).render()),
                       timeout=300, what="the export written")
        shown = str(page.query_one("#export-result", Static).render())
        assert shown.startswith(f"wrote {out}/"), shown
    for name in ("pylock.toml", "runtime.json", "host.json", "manifest.toml"):
        assert name in shown and (out / name).is_file(), name
    doc = tomllib.loads((out / "pylock.toml").read_text())
    wheel = (tmp_path / "index" / "wheels").glob("torch-*.whl").__next__()
    [pkg] = doc["packages"]
    assert pkg["name"] == "torch" and pkg["version"] == TORCH
    [entry] = pkg["wheels"]
    assert entry["hashes"]["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert entry["size"] == wheel.stat().st_size and entry["url"].startswith(f"{base}/wheels/")
    runtime = json.loads((out / "runtime.json").read_text())
    assert runtime["torch"] == TORCH and runtime["burnin"]["verdict"] == "pass" and runtime["venv"] == str(venv)
    assert json.loads((out / "host.json").read_text())["driver_proven_on"] == "595.71.05"
    assert tomllib.loads((out / "manifest.toml").read_text())["options"]["cuda-detection"] is True


async def test_the_summary_says_why_it_cannot_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No burn-in in the run: the plan is refused with the reason and nothing can be written; an oci base the
    CLI's --base refuses is refused the same way, by the same check."""
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    session = _session(tmp_path, tmp_path / "venv", index="https://download.pytorch.org/whl/cu128",
                       lock="torch==2.11.0\n", burnin=False)
    app = ProvisionerApp(session, start_page="summary")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SummaryPage) and app.screen.body_ready,
                       timeout=60, what="the Summary page")
        page = await _set(app, pilot, "pylock", tmp_path / "out")
        plan = page.plan_export()
        await pilot.pause()
        shown = str(page.query_one("#export-result", Static).render())
        assert not plan.ok and shown.startswith("cannot export:") and "no burn-in ran" in shown, shown
        assert page.query_one("#export-write", Button).disabled
        page = await _set(app, pilot, "oci", tmp_path / "out")
        page.query_one("#export-base", Input).value = "ubuntu:24.04"  # a tag, not a digest: the CLI refuses it too
        await pilot.pause()
        assert "the base must be `container`, oci:DIR@sha256:<hex>" in " ".join(page.plan_export().lines())
    await session.close()
    assert not (tmp_path / "out").exists()


def _container(tmp_path: Path) -> ContainerTransport:
    """This machine as the proving container: `pct exec 200 -- …` runs here (tests/support/fake_pct.py), as the
    wizard's `pct exec` through the node does on Proxmox."""
    bin_dir = tmp_path / "node-bin"
    bin_dir.mkdir()
    (bin_dir / "pct").write_text(FAKE_PCT)
    (bin_dir / "pct").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_PCT_LOG": str(tmp_path / "pct.log")}
    return ContainerTransport(LocalTransport(env=env), 200)


@pytest.mark.timeout(900)
async def test_the_summary_writes_the_oci_image_the_cli_writes(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The wizard's oci export is `provisioner export --format oci`'s image: the plan names exactly the CLI's
    files (the engine's list, `export_image.written`), Write export makes them through `build_image` over the
    page's container transport, and skopeo reads the layout and the archive (base, venv and tool layers, the
    three NVIDIA_* variables). The venv's interpreter is the system's (a small runtime root file system)."""
    require(shutil.which("uv") is not None and Path(SYSTEM_PYTHON).is_file(), f"uv and {SYSTEM_PYTHON}")
    require(shutil.which("skopeo") is not None, "skopeo (Debian package) is not installed")
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "index").mkdir()
    with serve(tmp_path / "index") as base:
        out = tmp_path / OUT
        async with _export_summary(tmp_path, base, "oci", SYSTEM_PYTHON) as (pilot, page):
            monkeypatch.setattr(page, "container_transport", lambda vmid: _container(tmp_path))
            page.export_rootfs = "runtime"  # `--rootfs runtime`: not this whole machine's root file system
            plan = page.plan_export()
            cli = [*CORE_FILES, *export_image.written({"manifest": "sha256:" + "0" * 64}, "container", "runtime")]
            assert plan.ok and [name for name, _ in plan.files] == cli, plan.lines()
            write = page.query_one("#export-write", Button)
            await wait_for(pilot, lambda: not write.disabled, timeout=60, what="the plan")
            write.press()
            result = page.query_one("#export-result", Static)
            await wait_for(pilot, lambda: "wrote" in str(result.render()) or "failed" in str(result.render()),
                           timeout=800, what="the image written")
            shown = str(result.render())
            assert shown.startswith(f"wrote {out}/"), shown
    assert shown.splitlines()[1:] == [f"  {name}" for name in cli]
    assert sorted(p.name for p in out.iterdir()) == sorted(cli)  # no old layout (oci/, Containerfile, wheels/)
    info = json.loads((out / "image.json").read_text())
    inspected = json.loads(subprocess.run(["skopeo", "inspect", f"oci:{out / 'image'}:latest"], capture_output=True,
                                          text=True, timeout=300, check=True).stdout)
    assert inspected["Digest"] == info["manifest"] and len(inspected["Layers"]) == 3
    assert {"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.0,driver>=525.60.13"} <= set(inspected["Env"])
    assert inspected["Labels"]["io.gpu-provisioner.torch"] == TORCH
    archived = json.loads(subprocess.run(["skopeo", "inspect", f"oci-archive:{out / 'image.oci.tar'}"],
                                         capture_output=True, text=True, timeout=300, check=True).stdout)
    assert archived["Digest"] == info["manifest"]
