"""venv.build with real uv against a PEP 503 index served on loopback (stand-in wheels).

The index mirrors the layout the lab serves: `<url>/whl/<variant>/<project>/` for the PyTorch
indexes (reached through venv.build's `index_mirror`, which replaces https://download.pytorch.org/whl) and
`<url>/pypi/<project>/` for PyPI (`pypi_url`). The stand-in PyPI also carries a CPU-only
`torch 2.11.0`, and an extra package that depends on torch, so the tests can see that PyPI never
shadows the chosen CUDA build. Commands reach the "container" through `pct exec` (a test-only
stand-in, see tests/support/fake_pct.py; the real pct is covered by the lab end-to-end tests).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner import playbook as playbook_mod
from provisioner.steps.venv_build import parse_lock
from provisioner.steps.venv_common import UV_PIN, parse_state
from tests.support.fake_pct import Node, known_gpus, real_uv, reference_gpus, run_playbook
from tests.support.require import require
from tests.support.standin_index import (  # noqa: F401  (fixtures among them)
    ARCH_LIST,
    PY,
    Index,
    build_wheel,
    freeze,
    index,
    lab,
    make_playbook,
    node,
)

# --- tests -----------------------------------------------------------------------------------------

async def test_build_records_lock_and_replay_reproduces_it(tmp_path: Path, index: Index, node: Node) -> None:
    venv_a = tmp_path / "ct" / "opt" / "venv-a"
    first = await run_playbook(node, make_playbook(venv_a), **lab(index))
    assert first.result.statuses == ["ok", "changed"], [e for e in first.events if getattr(e, "message", "")]
    assert first.result.exit_code == 0

    # The chosen CUDA build is installed although PyPI has torch 2.11.0 and torch-addon depends on torch.
    frozen_a = freeze(venv_a)
    assert "torch==2.11.0+cu128" in frozen_a
    assert {"torchvision==0.26.0+cu128", "filelock==3.20.0", "nvidia-ml-py==13.580.82", "torch-addon==1.0.0"} \
        <= set(frozen_a)

    # Every command went through `pct exec 101 -- …` on the node: the step's through a login bash, the facts
    # (uname -m, ldd --version) without a shell (no profile noise reaches their parsers).
    calls = set(node.pct_log.read_text().splitlines())
    assert "exec 101 -- bash -lc" in calls and all(c.startswith("exec 101 -- ") for c in calls), calls
    assert {c for c in calls if "bash" not in c} <= {"exec 101 -- uname -m", "exec 101 -- ldd --version"}, calls

    # runtime.json next to the venv: what was built and proven, and from which index as the playbook names it
    # (the site's mirror is where it was fetched, not what was asked for: a mirror that moves is not drift).
    runtime = json.loads((venv_a / "runtime.json").read_text())
    assert runtime["verified"] is True
    assert runtime["torch"] == "2.11.0+cu128" and runtime["cuda"] == "12.8"
    assert runtime["index_url"] == "https://download.pytorch.org/whl/cu128"
    assert index.url not in (venv_a / "runtime.json").read_text()
    assert runtime["driver"] == "595.71.05" and runtime["python"].startswith(PY + ".")
    assert [g["compute_cap"] for g in runtime["gpus"]] == ["12.0", "12.0"]
    assert not (venv_a / ".provisioner-building").exists()

    # The lock (exact versions and hashes) is in the recorded playbook's resolved section.
    recorded = first.recorder.playbook()
    lock = recorded.resolved["venv_lock"]["groups"]
    assert set(lock) == {"torch", "extra"}
    # PyPI is the index, the PyTorch index explicit for torch/torchvision (uv's documented way for PyTorch).
    for group in ("torch", "extra"):
        assert lock[group]["index_url"] == "https://pypi.org/simple"
        assert lock[group]["torch_index_url"] == "https://download.pytorch.org/whl/cu128"
    assert index.url not in json.dumps(recorded.resolved)
    torch_pins = parse_lock(lock["torch"]["text"])
    assert torch_pins == {"filelock": "3.20.0", "torch": "2.11.0+cu128", "torchvision": "0.26.0+cu128"}
    served = (index.root / "whl/cu128/torch-2.11.0+cu128-py3-none-any.whl").read_bytes()
    assert f"--hash=sha256:{hashlib.sha256(served).hexdigest()}" in lock["torch"]["text"]
    assert parse_lock(lock["extra"]["text"])["torch"] == "2.11.0+cu128"
    assert recorded.resolved["torch"]["variant"] == "cu128"

    # A second check of the same playbook: nothing to do.
    again = await run_playbook(node, make_playbook(venv_a), mode="plan", **lab(index))
    assert again.result.statuses == ["ok", "ok"]
    assert again.plan("venv.build").changes == []

    # The index moves on: newer filelock and nvidia-ml-py appear.
    new_filelock = build_wheel(index.wheels, "filelock", "3.20.1", {"filelock/__init__.py": "__version__ = '3.20.1'\n"})
    for sub in ("whl/cu128", "pypi"):
        index.publish(sub, new_filelock)
    index.publish("pypi", build_wheel(index.wheels, "nvidia-ml-py", "13.590.1", {"pynvml.py": "x = 1\n"}))

    # Replay of the recorded playbook (through YAML) into a new path installs the same set from the lock.
    venv_b = tmp_path / "ct" / "opt" / "venv-b"
    text = playbook_mod.dumps(recorded)
    replay_pb = playbook_mod.loads(text.replace(str(venv_a), str(venv_b)))
    planned = await run_playbook(node, replay_pb, mode="plan", **lab(index))
    assert planned.plan("venv.build").notes == ["torch, extra group(s) install from the lock in the playbook's "
                                                "resolved section"]
    replay = await run_playbook(node, replay_pb, **lab(index))
    assert replay.result.statuses == ["ok", "changed"]
    assert freeze(venv_b) == frozen_a
    messages = [getattr(e, "text", "") for e in replay.events]
    assert "installing the torch group from the recorded lock" in messages
    assert replay.recorder.playbook().resolved["venv_lock"] == recorded.resolved["venv_lock"]

    # Without the lock, the same playbook resolves afresh and gets the newer packages.
    venv_c = tmp_path / "ct" / "opt" / "venv-c"
    fresh = await run_playbook(node, make_playbook(venv_c), **lab(index))
    assert fresh.result.statuses == ["ok", "changed"]
    assert {"filelock==3.20.1", "nvidia-ml-py==13.590.1"} <= set(freeze(venv_c))


async def test_foreign_venv_is_left_untouched_without_recreate(tmp_path: Path, index: Index, node: Node) -> None:
    venv = tmp_path / "ct" / "opt" / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (venv / "keep-me.txt").write_text("user data\n")
    before = sorted(str(p.relative_to(venv)) for p in venv.rglob("*"))

    out = await run_playbook(node, make_playbook(venv), **lab(index))
    assert out.result.statuses == ["ok", "failed"]
    message = out.finished("venv.build").message
    assert "not built by gpu-provisioner" in message and "recreate: true" in message
    assert sorted(str(p.relative_to(venv)) for p in venv.rglob("*")) == before

    out = await run_playbook(node, make_playbook(venv, build={"recreate": True}), **lab(index))
    assert out.result.statuses == ["ok", "changed"]
    assert not (venv / "keep-me.txt").exists()
    assert "torch==2.11.0+cu128" in freeze(venv)


async def test_built_venv_with_another_request_needs_recreate(tmp_path: Path, index: Index, node: Node) -> None:
    venv = tmp_path / "ct" / "opt" / "venv"
    assert (await run_playbook(node, make_playbook(venv), **lab(index))).result.statuses == ["ok", "changed"]
    changed = make_playbook(venv, build={"extra_packages": ["nvidia-ml-py"]})
    out = await run_playbook(node, changed, **lab(index))
    assert out.result.statuses == ["ok", "failed"]
    assert "left untouched" in out.finished("venv.build").message
    assert "torch-addon==1.0.0" in freeze(venv)


async def test_index_without_the_build_is_a_clear_resolver_failure(tmp_path: Path, index: Index, node: Node) -> None:
    venv = tmp_path / "ct" / "opt" / "venv"
    out = await run_playbook(node, make_playbook(venv, resolve={"variant": "cu130"}), **lab(index))
    assert out.result.statuses == ["ok", "failed"]
    assert out.result.exit_code == 3
    message = out.finished("venv.build").message
    assert message.startswith(f"resolver_failure: the index {index.url}/whl/cu130 has no build satisfying "
                              "torch==2.11.0 torchvision==0.26.0 for this Python/platform (torch packages)")
    assert "fix:" in message and "Traceback" not in message
    # The half-made venv is marked as ours and interrupted: the next run may finish it.
    assert (venv / ".provisioner-building").exists()
    plan = await run_playbook(node, make_playbook(venv), mode="plan", **lab(index))
    assert plan.plan("venv.build").changes == [f"finish the interrupted build of {venv}: torch 2.11.0 + torchvision "
                                               "0.26.0 from https://download.pytorch.org/whl/cu128 + nvidia-ml-py, "
                                               "torch-addon "
                                               f"(Python {PY})"]
    done = await run_playbook(node, make_playbook(venv), **lab(index))
    assert done.result.statuses == ["ok", "changed"]
    assert not (venv / ".provisioner-building").exists()


async def test_verify_fails_when_torch_sees_fewer_gpus(tmp_path: Path, index: Index, node: Node) -> None:
    node.extra_env["STANDIN_TORCH_GPUS"] = "1"
    venv = tmp_path / "ct" / "opt" / "venv"
    out = await run_playbook(node, make_playbook(venv), **lab(index))
    assert out.result.statuses == ["ok", "failed"]
    assert "torch sees 1 GPUs, 2 were passed" in out.finished("venv.build").message
    assert json.loads((venv / "runtime.json").read_text())["verified"] is False
    # Not proven → the next check does not call it done.
    node.extra_env["STANDIN_TORCH_GPUS"] = "2"
    plan = await run_playbook(node, make_playbook(venv), mode="plan", **lab(index))
    assert plan.plan("venv.build").changes[0].startswith(f"finish {venv}: its last build did not pass verification")
    fixed = await run_playbook(node, make_playbook(venv), **lab(index))
    assert fixed.result.statuses == ["ok", "changed"]


async def test_uv_is_installed_from_the_index_when_absent(tmp_path: Path, index: Index,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    uv = real_uv()
    require(uv is not None, "uv is not on PATH")
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    # The stand-in uv wheel on the lab PyPI installs a `uv` script that hands over to the real uv.
    index.publish("pypi", build_wheel(index.wheels, "uv", UV_PIN, {"uv/__init__.py": ""},
                                      scripts={"uv": f'#!/bin/sh\nexec {uv} "$@"\n'}))
    bare = Node(tmp_path / "bare-node", with_uv=False, extra_env={"STANDIN_TORCH_GPUS": "2"})
    uv_dir = tmp_path / "ct" / "opt" / "uv"
    venv = tmp_path / "ct" / "opt" / "venv"
    out = await run_playbook(bare, make_playbook(venv, build={"uv_dir": str(uv_dir)}), **lab(index))
    assert out.result.statuses == ["ok", "changed"], [getattr(e, "line", "") for e in out.events][-15:]
    assert (uv_dir / "bin" / "uv").exists()
    assert f"using {uv_dir}/bin/uv (uv {UV_PIN})" in [getattr(e, "text", "") for e in out.events]
    assert "torch==2.11.0+cu128" in freeze(venv)
    # the container lacked uv: exactly the pinned one was installed, and the playbook records it
    toolchain = out.recorder.playbook().resolved["toolchain"]
    assert toolchain["uv"] == {"version": UV_PIN, "source": "uv_dir (installed by gpu-provisioner)"}


async def test_resolved_records_the_toolchain_and_plan_check_names_a_changed_uv(
        tmp_path: Path, index: Index, node: Node) -> None:
    from provisioner.exitcodes import ExitCode
    from provisioner.runner import exit_code

    uv = real_uv()
    assert uv is not None
    venv, uv_dir = tmp_path / "ct" / "opt" / "venv", tmp_path / "ct" / "opt" / "uv"
    first = await run_playbook(node, make_playbook(venv, build={"uv_dir": str(uv_dir)}), **lab(index))
    assert first.result.statuses == ["ok", "changed"]
    recorded = first.recorder.playbook()
    toolchain = recorded.resolved["toolchain"]
    real = subprocess.run([uv, "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
    assert toolchain["uv"] == {"version": real, "source": "container PATH"}
    # Python's full version (3.12.x, not 3.12) and how it was provided
    assert toolchain["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert toolchain["python"]["provided_by"] in ("the container's Python", "uv-managed Python")
    assert json.loads((venv / "runtime.json").read_text())["toolchain"] == toolchain

    # The container's uv is replaced by another version: plan --check names it and exits 10.
    (node.bin / "uv").unlink()
    (node.bin / "uv").write_text(f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "uv 0.11.2 (0000000 2025-01-01)"; '
                                 f'exit 0; }}\nexec {uv} "$@"\n')
    (node.bin / "uv").chmod(0o755)
    planned = await run_playbook(node, recorded, mode="plan", **lab(index))
    assert planned.plan("venv.build").changes == [
        f"install uv {real} into {uv_dir}: uv 0.11.2 in CT 101, the playbook recorded {real}"]
    assert exit_code([planned.result], check=True) == ExitCode.CHANGES_PENDING

    # replay installs exactly the recorded uv into uv_dir (the stand-in wheel hands over to the real uv) and
    # leaves the venv as it is; then nothing is pending.
    index.publish("pypi", build_wheel(index.wheels, "uv", real, {"uv/__init__.py": ""},
                                      scripts={"uv": f'#!/bin/sh\nexec {uv} "$@"\n'}))
    frozen = freeze(venv)
    replay = await run_playbook(node, recorded, **lab(index))
    assert replay.result.statuses == ["ok", "changed"], [getattr(e, "line", "") for e in replay.events][-15:]
    assert (uv_dir / "bin" / "uv").exists() and freeze(venv) == frozen
    assert replay.recorder.playbook().resolved["toolchain"]["uv"] == {
        "version": real, "source": "uv_dir (installed by gpu-provisioner)"}
    again = await run_playbook(node, replay.recorder.playbook(), mode="plan", **lab(index))
    assert again.plan("venv.build").changes == [] and exit_code([again.result], check=True) == ExitCode.OK


async def test_lab_without_a_pypi_takes_extras_from_its_wheel_index(tmp_path: Path, index: Index, node: Node) -> None:
    index.publish("whl/cu128", build_wheel(index.wheels, "nvidia-ml-py", "13.595.45", {"pynvml.py": "x = 1\n"}))
    # A site without a PyPI mirror takes its extras from its wheel index (extras_from_torch_index).
    mirrors = lab(index, pypi=False)
    venv = tmp_path / "ct" / "opt" / "venv"
    out = await run_playbook(node, make_playbook(venv, build={"extra_packages": ["nvidia-ml-py"]}), **mirrors)
    assert out.result.statuses == ["ok", "changed"], out.finished("venv.build").message
    extra = out.recorder.playbook().resolved["venv_lock"]["groups"]["extra"]
    assert (extra["index_url"], extra["torch_index_url"]) == ("https://download.pytorch.org/whl/cu128", None)
    assert "nvidia-ml-py==13.595.45" in freeze(venv)


async def test_builds_from_the_lab_wheel_index(tmp_path: Path, node: Node) -> None:
    """The same step against the lab's own index (provisioner.lab.wheels: the supplied real CPU torch with
    the LAB layer, for that wheel's Python); its torch answers CUDA queries from the container's
    /dev/nvidia* nodes, which this machine lacks, so the smoke test is off here."""
    from provisioner.lab import wheels
    from provisioner.lab.sandbox import discover_pythons
    from provisioner.lab.torch_supply import TorchSupplyError, supply
    from tests.support.labcache import with_shared_wheels

    try:
        supplied = supply(discover_pythons(), progress=False)
    except TorchSupplyError as exc:
        require(False, str(exc))
        raise
    server = wheels.WheelIndexServer(wheels.build_index(with_shared_wheels(tmp_path / "cache") / "lab",
                                                       supplied)).start()
    try:
        venv = tmp_path / "ct" / "opt" / "venv"
        pb = make_playbook(venv, resolve={"python": supplied.python},
                           build={"smoke_test": False, "extra_packages": ["nvidia-ml-py"],
                                  "index_mirror": server.base_url, "extras_from_torch_index": True})
        out = await run_playbook(node, pb, state=known_gpus(reference_gpus(2)))
        assert out.result.statuses == ["ok", "changed"], out.finished("venv.build").message
        frozen = freeze(venv)
        assert {"torch==2.11.0+cu128", "torchvision==0.26.0+cu128"} <= set(frozen)
        assert any(line.startswith("nvidia-ml-py==") for line in frozen)
        assert any(line.startswith("numpy==") for line in frozen)  # the real torchvision requires numpy
        probe = subprocess.run([str(venv / "bin/python"), "-c", "import torch, torch.distributed as d; "
                                "print(torch.__version__, d.is_available() and d.is_gloo_available())"],
                               capture_output=True, text=True, timeout=300, check=False)
        assert probe.stdout.split() == ["2.11.0+cu128", "True"], probe.stderr[-2000:]  # a real torch, gloo built in
    finally:
        server.stop()


def test_parse_lock_reads_uv_compile_output() -> None:
    text = ("# This file was autogenerated by uv via the following command:\n"
            "#    uv pip compile /opt/venv/.provisioner/torch.in --generate-hashes\n"
            "filelock==3.20.0 \\\n    --hash=sha256:56d71c224563788fd5a253dd52254b8751db403366a16dbc933b74edc3cc8bc0\n"
            "    # via torch\n"
            "Jinja2==3.1.6 ; python_version >= '3.9' \\\n    --hash=sha256:abc\n"
            "torch==2.11.0+cu128 \\\n    --hash=sha256:e6f1425e5e973ef8647ec5c00080f578a5d50de6f91d8324442646e87a3d9280\n")
    assert parse_lock(text) == {"filelock": "3.20.0", "jinja2": "3.1.6", "torch": "2.11.0+cu128"}


def test_parse_state_refuses_a_runtime_json_not_written_by_us() -> None:
    assert parse_state("@@real\n/opt/v\n@@uvreal\n/opt/uv\n@@state\nbuilt\n@@runtime\n{\"torch\": \"2.11.0\"}\n"
                       "@@lock\n\n") == {"state": "foreign", "real": "/opt/v", "uv_real": "/opt/uv"}
    ours = parse_state('@@state\nbuilt\n@@runtime\n{"built_by": "gpu-provisioner", "verified": true}\n@@lock\n{}\n')
    assert ours["state"] == "built" and ours["runtime"]["verified"] is True and ours["lock"] is None
    assert parse_state("@@state\nabsent\n") == {"state": "absent", "real": "", "uv_real": "", "uv_path_version": None,
                                                "uv_dir_version": None, "venv_python": None}
    # `uv --version` on PATH and in uv_dir, and the venv's Python, as the probe prints them
    built = parse_state('@@uvpath\nuv 0.11.2 (0000000 2025-01-01)\n@@uvdir\n@@pyver\n3.12.3\n@@state\nbuilt\n'
                        '@@runtime\n{"built_by": "gpu-provisioner"}\n')
    assert (built["uv_path_version"], built["uv_dir_version"], built["venv_python"]) == ("0.11.2", None, "3.12.3")


def test_toolchain_drift_names_uv_and_python() -> None:
    from provisioner.steps.venv_build import toolchain_drift

    recorded = {"uv": {"version": "0.13.9"}, "python": {"version": "3.12.3", "provided_by": "the container's Python"}}
    state = {"uv_path_version": "0.11.2", "uv_dir_version": None, "venv_python": "3.12.7"}
    changes, notes = toolchain_drift(recorded, state, vmid=200, uv_dir="/opt/gpu-provisioner/uv")
    assert changes == ["install uv 0.13.9 into /opt/gpu-provisioner/uv: uv 0.11.2 in CT 200, the playbook "
                       "recorded 0.13.9"]
    assert notes == ["warning: drift: Python 3.12.7 in the venv of CT 200, the playbook recorded 3.12.3; set "
                     "recreate: true to rebuild it with the recorded Python"]
    # the recorded uv in uv_dir (installed by an earlier replay) is no drift; nothing recorded, nothing to say
    assert toolchain_drift(recorded, {**state, "uv_dir_version": "0.13.9", "venv_python": "3.12.3"}, vmid=200,
                           uv_dir="/u") == ([], [])
    assert toolchain_drift({}, state, vmid=200, uv_dir="/u") == ([], [])
