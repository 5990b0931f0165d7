"""A newcomer's machine (issue 22, items 1 and 2): two commands on a machine with only PyPI, and a lab
whose burn-in proves the venv that venv.build built.

The machine's wheel folder (/opt/wheels on the project's machines) is hidden by a tmpfs in a private
mount namespace (`unshare -m`), every find-links setting is removed from the environment and pip's
configuration is /dev/null: what is left is a machine with PyPI and nothing of ours.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.require import require

ROOT = Path(__file__).resolve().parents[1]
WHEELS = Path("/opt/wheels")
FIND_LINKS_VARS = ("PIP_FIND_LINKS", "UV_FIND_LINKS", "PROVISIONER_TORCH_FIND_LINKS", "PROVISIONER_TORCH_INDEX")


def _bare_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This process's environment without any find-links or lab setting, with its own state and cache."""
    env = {k: v for k, v in os.environ.items() if k not in FIND_LINKS_VARS and not k.startswith("PROVISIONER_")}
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env.update(PIP_CONFIG_FILE=os.devnull, TMPDIR=str(tmp), PROVISIONER_STATE_DIR=str(tmp_path / "state"),
               PROVISIONER_CACHE_DIR=str(tmp_path / "cache"), NO_COLOR="1", COLUMNS="200", **extra)
    return env


def _hidden(script: str, network: bool = True) -> list[str]:
    """argv running `script` with the machine's wheel folder hidden (and no network unless `network`)."""
    hide = (f"if [ -d {WHEELS} ]; then mount -t tmpfs -o size=1M hide-wheels {WHEELS}; fi; "
            f"test -z \"$(ls -A {WHEELS} 2>/dev/null)\"")
    if not network:
        hide += "; ip link set lo up"
    return ["unshare", "-m", *([] if network else ["-n"]), "--propagation", "private", "bash", "-c",
            f"set -e; {hide}; {script}"]


def _need_namespace() -> None:
    require(os.geteuid() == 0, "hiding /opt/wheels needs a private mount namespace as root (unshare -m)")
    require(shutil.which("unshare") is not None, "util-linux unshare is not installed")
    require(shutil.which("uv") is not None, "uv is not installed")


def test_pyproject_and_lock_name_no_machine_path_and_the_controller_no_torch() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    lock = (ROOT / "uv.lock").read_text()
    assert "find-links" not in project.get("tool", {}).get("uv", {})
    assert "/opt/wheels" not in lock and "+cpu" not in lock
    assert not re.search(r'source = \{ (registry|path|directory) = "/', lock), "a machine-local source in uv.lock"
    groups = project["dependency-groups"]
    deps = [*project["project"]["dependencies"], *(d for g in groups.values() for d in g if isinstance(d, str))]
    assert deps and all(isinstance(d, str) or set(d) == {"include-group"} for g in groups.values() for d in g)
    assert not [d for d in deps if re.match(r"torch\b", d)], deps
    burnin = project["project"]["optional-dependencies"]["burnin"]
    assert [d for d in burnin if re.match(r"torch\b", d)] and not [d for d in burnin if "+" in d or "/" in d]


def test_uv_sync_and_version_on_a_machine_with_only_pypi(tmp_path: Path) -> None:
    _need_namespace()
    before = hashlib.sha256((ROOT / "uv.lock").read_bytes()).hexdigest()
    venv = tmp_path / "venv"
    env = _bare_env(tmp_path, UV_PROJECT_ENVIRONMENT=str(venv))
    r = subprocess.run(_hidden("uv sync --quiet && uv run provisioner --version"), cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900, check=False)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert re.search(r"\b\d+\.\d+\.\d+\b", r.stdout), r.stdout
    assert hashlib.sha256((ROOT / "uv.lock").read_bytes()).hexdigest() == before, "uv sync rewrote uv.lock"
    assert not list(venv.glob("lib/python*/site-packages/torch")), "the controller installed torch"


def _tool_names(project: dict[str, object], group: str) -> set[str]:
    """The distribution names a dependency group asks for (its included groups' too), normalised."""
    groups = project["dependency-groups"]
    assert isinstance(groups, dict)
    names: set[str] = set()
    for entry in groups[group]:
        if isinstance(entry, dict):
            names |= _tool_names(project, entry["include-group"])
        else:
            names.add(re.sub(r"[-_.]+", "_", re.split(r"[\s<>=!~\[;]", entry, maxsplit=1)[0]).lower())
    return names


def _installed(venv: Path) -> set[str]:
    """The distributions installed in a venv (from their .dist-info folders), normalised."""
    return {re.sub(r"[-_.]+", "_", d.name.removesuffix(".dist-info").rsplit("-", 1)[0]).lower()
            for d in venv.glob("lib/python*/site-packages/*.dist-info")}


def test_the_first_command_installs_what_it_runs_and_pytest_gets_the_test_tools(tmp_path: Path) -> None:
    """#36 item 7: `uv run provisioner …` in a fresh environment installs no test or lint tool (the default group
    is only the `pytest` launcher, tests/launcher); `uv run pytest` then gets the locked test group and runs
    pytest; after an exact `uv sync` (which removes the test group and pytest's own script) `uv run pytest`
    still finds its command."""
    _need_namespace()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    tools = _tool_names(project, "dev")
    controller = {re.sub(r"[-_.]+", "_", re.split(r"[\s<>=!~\[;]", d, maxsplit=1)[0]).lower()
                  for d in project["project"]["dependencies"]}
    assert {"pytest", "hypothesis", "ruff", "mypy", "ansible_core"} <= tools and not tools & controller
    venv = tmp_path / "venv"
    env = _bare_env(tmp_path, UV_PROJECT_ENVIRONMENT=str(venv))

    def run(script: str) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(_hidden(script), cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
                           check=False)
        assert r.returncode == 0, (script, (r.stdout + r.stderr)[-3000:])
        return r

    r = run("uv run --frozen provisioner --version")
    assert re.search(r"\bprovisioner, version \d+\.\d+\.\d+", r.stdout), r.stdout
    installed = _installed(venv)
    assert "gpu_provisioner" in installed and "textual" in installed, installed
    assert not installed & tools, f"the first command installed development tools: {sorted(installed & tools)}"
    assert (venv / "bin" / "pytest").is_file(), "the launcher gives the environment its `pytest` command"

    r = run("uv run --frozen pytest --version")
    assert re.search(r"^pytest \d+\.\d+", r.stdout + r.stderr, re.M), r.stdout + r.stderr
    assert _tool_names(project, "test") <= _installed(venv), sorted(_tool_names(project, "test") - _installed(venv))
    assert not _tool_names(project, "lint") & _installed(venv), "uv run pytest installed the linters"

    r = run("uv sync --frozen --quiet && uv run --frozen pytest --version")  # the sync removes pytest and its script
    assert re.search(r"^pytest \d+\.\d+", r.stdout + r.stderr, re.M), r.stdout + r.stderr


def test_demo_offline_with_nothing_configured_says_in_one_line_what_it_needs(tmp_path: Path) -> None:
    _need_namespace()
    argv = [sys.executable, "-m", "provisioner", "demo"]
    r = subprocess.run(_hidden("exec " + shlex.join(argv), network=False), cwd=ROOT, env=_bare_env(tmp_path),
                       capture_output=True, text=True, timeout=600, check=False)
    out = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode != 0, out
    needs = [line for line in out if "needs a CPU build of PyTorch" in line]
    assert len(needs) == 1, out
    assert "UV_FIND_LINKS" in needs[0] and "download.pytorch.org" in needs[0]
    assert "Traceback" not in r.stderr and len(out) <= 2, out  # "starting the lab" and that line


@pytest.mark.parametrize("given", ["PROVISIONER_TORCH_FIND_LINKS", "UV_FIND_LINKS", "PIP_FIND_LINKS", "pip.conf"])
def test_the_supply_takes_the_wheel_the_configuration_names(tmp_path: Path, given: str) -> None:
    """Each way a user names a find-links folder is read; of its wheels the CPU build for a Python the
    machine has is taken (a CUDA build, another platform, another Python are not)."""
    from provisioner.lab.torch_supply import find_links, supply

    folder = tmp_path / "wheels"
    folder.mkdir()
    for name in ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                 "torch-2.14.0+cpu-cp311-cp311-macosx_11_0_arm64.whl", "torch-2.14.0+cpu-cp313-cp313-manylinux_2_28_x86_64.whl",
                 "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"):
        (folder / name).write_bytes(b"")
    env = {"PIP_CONFIG_FILE": os.devnull, "HOME": str(tmp_path), "PROVISIONER_CACHE_DIR": str(tmp_path / "cache")}
    if given == "pip.conf":
        conf = tmp_path / "pip.conf"
        conf.write_text(f"[global]\nfind-links = {folder}\n")
        env["PIP_CONFIG_FILE"] = str(conf)
    else:
        env[given] = str(folder)
    assert str(folder) in find_links(env)
    got = supply(["3.11", "3.12"], env=env, progress=False)
    assert got.path.name == "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert got.python == "3.11" and got.tag == "cp311-cp311-manylinux_2_28_x86_64" and got.source == str(folder)
    assert got.numpy is not None and got.numpy.parent == folder


def test_the_supply_offline_with_nothing_configured_raises_one_line(tmp_path: Path) -> None:
    import socket

    from provisioner.lab.torch_supply import TorchSupplyError, supply

    with socket.socket() as s:  # a port nothing listens on: connection refused, as offline
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"PIP_CONFIG_FILE": os.devnull, "HOME": str(tmp_path), "PROVISIONER_TORCH_INDEX": f"http://127.0.0.1:{port}/",
           "PROVISIONER_CACHE_DIR": str(tmp_path / "cache")}  # the supply's cache is the environment's it is given
    with pytest.raises(TorchSupplyError) as info:
        supply(["3.11"], env=env, progress=False)
    line = str(info.value)
    assert "\n" not in line and f"cannot reach http://127.0.0.1:{port}/" in line and "UV_FIND_LINKS" in line


def test_burnin_on_a_controller_without_torch_says_in_one_line_how_to_get_it() -> None:
    code = ("import sys; sys.modules['torch'] = None  # as on a controller without torch\n"
            "from provisioner.cli import main\nmain(['burnin', '--backend', 'gloo'])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 3, r.stderr[-2000:]
    (line,) = r.stderr.strip().splitlines()
    assert "torch is not installed" in line and "--extra burnin" in line and "download.pytorch.org/whl/cpu" in line


def test_numpy_comes_from_the_index_the_configuration_names(tmp_path: Path) -> None:
    """numpy beside the torch: from pip's configured extra index (a local file: mirror, PEP 503), not PyPI."""
    from provisioner.lab.torch_supply import package_indexes, supply

    wheels, files, page = tmp_path / "wheels", tmp_path / "mirror" / "files", tmp_path / "mirror" / "simple" / "numpy"
    for d in (wheels, files, page):
        d.mkdir(parents=True)
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    numpy = "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
    (files / numpy).write_bytes(b"")
    (page / "index.html").write_text(f'<a href="../../files/{numpy}#sha256={"0" * 64}">{numpy}</a>\n'
                                     '<a href="../../files/numpy-2.4.6-cp312-cp312-win_amd64.whl">x</a>\n')
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nextra-index-url = file://{tmp_path / 'mirror' / 'simple'}\n")
    env = {"PIP_CONFIG_FILE": str(conf), "HOME": str(tmp_path), "UV_FIND_LINKS": str(wheels),
           "PROVISIONER_CACHE_DIR": str(tmp_path / "cache")}
    assert package_indexes(env) == [f"file://{tmp_path / 'mirror' / 'simple'}/", "https://pypi.org/simple/"]
    got = supply(["3.11"], env=env, progress=False)
    assert got.numpy == files / numpy
