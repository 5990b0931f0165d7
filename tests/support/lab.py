"""How the tests start a lab: the one module that does (issue 32).

- `lab_state(root, *scenarios, profile=...)`: a lab's state on disk with its node tools, no daemon — the
  node and its containers are entered per command (`node`, `ct`), as the SSH endpoint runs them.
- `gpu_ct(state, vmid)`: a container with the GPUs passed through (devN entries or raw lines).
- `start_services(state)` / `start_lab(root, *scenarios)`: the lab's services in this process (API, SSH,
  mirrors, wheel index), and `ssh_transport(conn)` to reach its node over real SSH; `ssh_node(state)`: the
  node's SSH endpoint alone.
- `make_lab` / `lab` (fixtures): the lab's PVE API server alone, in this process, for tests of the API and
  of our client.
- `up_daemon(root, ...)`: the lab daemon in its own process (what `tests.support.labrun.LabRun`, the fault
  scenarios' and golden copies' handle, starts through), `start_labs` several at once, and `lab_up`/`lab_down`:
  `provisioner lab up`/`down` as a user types them (`running_lab`, `lab_env` use these). The tests of the
  `lab up` command itself (`tests/test_lab_cli.py`) run it as their subject.
- `golden_node` (session fixture) and `GoldenNode.copy(dest)`: the shipped playbook provisioned once per run,
  for real (a cold venv.build and the burn-in), then stopped; a test that begins after provisioning takes its
  own copy of it (lab root and tool state, relocated to `dest`), started on its own ports.

Every lab test is marked ``lab`` at collection (`tests/support/tiers.py`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from unittest import mock

import pytest
from textual.widgets import Button, Static

from provisioner.environ import copy_environ
from provisioner.lab.commands import write_node_bin
from provisioner.lab.lab import Lab, LabServices
from provisioner.lab.pve_api import LabApiServer
from provisioner.lab.sandbox import make_device_nodes, node_argv, node_env, record_host_ns
from provisioner.lab.state import LabState
from provisioner.playbook import load
from provisioner.proxmox.lxc_conf import LxcConfig
from provisioner.session import point_at_lab
from provisioner.transport.ssh import SshTarget, SshTransport
from screens.app import ProvisionerApp
from screens.step_page import StepPage
from screens.wizard_session import WizardSession
from tests.support import shared_tree
from tests.support.labcache import with_shared_wheels
from tests.support.labrun import REPO, SHIPPED_PLAYBOOK, LabRun, Replay, lab_importable, read_run_log, snapshot
from tests.support.require import require
from tests.support.streams import streamed
from tests.support.tui import PLAYBOOK, wait_idle

UBUNTU = "local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst"
NOT_DEFINED = "property is not defined in schema and the schema does not allow additional properties"

if TYPE_CHECKING:
    from provisioner.lab.node_ssh import LabSshServer

ApiLab = tuple[LabState, LabApiServer]


def need_namespaces(*, root: bool = False) -> None:
    """The lab's node and container views need util-linux unshare and user namespaces (`root`: and root here,
    for mknod and the profile's device nodes)."""
    if root:
        require(os.geteuid() == 0, "the lab sandboxes need root (mount namespaces, mknod)")
    require(shutil.which("unshare") is not None, "util-linux unshare is not installed")
    require(subprocess.run(["unshare", "-Urm", "true"], capture_output=True, check=False).returncode == 0,
            "the lab sandboxes need user namespaces (`unshare -Urm`)")


# -- a lab's state, entered per command ----------------------------------------------------------

def lab_state(root: Path, *scenarios: str, profile: str | None = None, devices: bool = True,
              need_root: bool = False) -> LabState:
    """The lab at `root` on disk, with its node's tools and (`devices`) its device nodes, as the lab server
    makes them at start; no daemon runs."""
    need_namespaces(root=need_root)
    lab = Lab(root, list(scenarios), profile=profile) if profile is not None else Lab(root, list(scenarios))
    state = lab.create_state()
    write_node_bin(state.root)
    record_host_ns(state.root)
    if devices:
        make_device_nodes(state)
    return state


def profile_lab(root: Path, profile: str, *scenarios: str) -> LabState:
    """`lab_state` of a host profile (`provisioner.lab.profiles`), its device nodes left to the lab server."""
    return lab_state(root, *scenarios, profile=profile, devices=False, need_root=True)


def node(state: LabState, script: str, *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `script` with bash in the lab node's view (as the SSH endpoint does); stderr merged like our SSH."""
    return subprocess.run(node_argv(state, ["bash", "-c", script]), env=node_env(state), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False)


def ct(state: LabState, vmid: int, script: str, *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`pct exec <vmid> -- bash -lc <script>` on the lab node (quoted the way the engine quotes)."""
    from provisioner import quoting

    return node(state, quoting.join(quoting.pct_exec(vmid, quoting.bash_lc(script))), timeout=timeout)


def gpu_ct(state: LabState, vmid: int = 200, *, raw: list[tuple[str, str]] | None = None,
           devn: bool = True, running: bool = True) -> None:
    """Container `vmid` with the 8 GPUs, nvidiactl and the UVM nodes passed as devN entries (or only `raw`)."""
    opts: dict[str, str | int] = {"arch": "amd64", "hostname": f"ct{vmid}", "ostype": "ubuntu", "memory": 65536,
                                  "cores": 16, "rootfs": f"local-lvm:vm-{vmid}-disk-0,size=64G"}
    if devn:
        for i in range(8):
            opts[f"dev{i}"] = f"/dev/nvidia{i},mode=0666"
        opts["dev8"] = "/dev/nvidiactl,mode=0666"
        opts["dev9"] = "/dev/nvidia-uvm,mode=0666"
        opts["dev10"] = "/dev/nvidia-uvm-tools,mode=0666"
    state.write_conf(vmid, LxcConfig.from_options(opts, raw=raw))
    state.set_status(vmid, "running" if running else "stopped")


# -- the lab's services in this process ----------------------------------------------------------

def start_services(state: LabState) -> LabServices:
    """The lab's services (PVE API, SSH node, driver mirror, wheel index) for `state`, started in this process
    as the lab daemon runs them; the caller stops them (`services.stop()`)."""
    return LabServices(state).start()


def start_lab(root: Path, *scenarios: str) -> tuple[LabServices, dict[str, Any]]:
    """A fresh lab at `root` with its services started in this process (`start_services`)."""
    require(os.geteuid() == 0, "the lab sandboxes need root (mount namespaces, mknod)")
    require(shutil.which("unshare") is not None, "util-linux unshare is not installed")
    state = Lab(root, list(scenarios)).create_state()
    services = start_services(state)
    return services, services.connection()


@contextlib.asynccontextmanager
async def ssh_node(state: LabState) -> AsyncIterator[LabSshServer]:
    """The lab node's SSH endpoint alone for `state`, in this process (no API, mirrors or index); stopped and
    the node's mounts released afterwards."""
    from provisioner.lab.node_ssh import LabSshServer
    from provisioner.lab.sandbox import release_mounts

    server = await LabSshServer(state).start()
    try:
        yield server
    finally:
        await server.stop()
        release_mounts(state.root)


def ssh_transport(conn: dict[str, Any], **overrides: Any) -> SshTransport:
    """Our SSH transport to the lab node named by `conn` (a lab's connection block)."""
    ssh = conn["ssh"]
    args = {"host": ssh["host"], "port": ssh["port"], "user": ssh["user"], "key_file": ssh["key_file"],
            "known_hosts": ssh["known_hosts"], **overrides}
    return SshTransport(SshTarget(**args))


# -- a lab daemon, as `provisioner lab up` starts it ----------------------------------------------

def up_daemon(root: Path, scenarios: Sequence[str] = (), *, env: dict[str, str] | None = None,
              keep_state: bool = False, **kw: Any) -> dict[str, Any]:
    """Start the lab daemon at `root` (its own process, in the background); its connection block. `env`: the
    daemon's environment (default a snapshot of this process's); `keep_state`: start on the node and containers
    already on disk (a stopped lab, a golden copy) where `Lab.up` would make a fresh lab."""
    lab = Lab(root, list(scenarios), **kw)
    if keep_state:
        with mock.patch.object(lab, "create_state", lambda: LabState.load(root)):
            conn, _ = lab.up(env=env)
    else:
        conn, _ = lab.up(env=env)
    return conn


def down_daemon(root: Path) -> None:
    Lab(root).down()


def lab_up(env: dict[str, str], root: Path, *, profile: str | None = None, pve: str | None = None,
           scenarios: Sequence[str] = (), json_out: bool = False,
           timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """`provisioner lab up` as a user types it (the daemon in its own process, `env` its environment)."""
    args = ["lab", "up", "--root", str(root)]
    if profile is not None:
        args += ["--profile", profile]
    if pve is not None:
        args += ["--pve", pve]
    for scenario in scenarios:
        args += ["--scenario", scenario]
    if json_out:
        args.append("--json")
    return cli(env, *args, timeout=timeout)


def lab_down(env: dict[str, str], root: Path, *, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`provisioner lab down` for the lab at `root`."""
    return cli(env, "lab", "down", "--root", str(root), timeout=timeout)


# -- the PVE API alone, in this process ----------------------------------------------------------

def start_api(state: LabState) -> LabApiServer:
    """The lab's PVE API server alone for `state`, started in this process; the caller stops it."""
    return LabApiServer(state).start()


@pytest.fixture
def make_lab(tmp_path: Path) -> Iterator[Callable[..., ApiLab]]:
    """Factory of (state, started API server) pairs; tasks finish after 50 ms; all stopped at teardown."""
    servers: list[LabApiServer] = []

    def make(**settings: Any) -> ApiLab:
        settings.setdefault("task_delay", 0.05)
        state = LabState.create(tmp_path / f"lab{len(servers)}", **settings)
        server = start_api(state)
        servers.append(server)
        return state, server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def lab(make_lab: Callable[..., ApiLab]) -> ApiLab:
    return make_lab()


# -- the golden node: the shipped playbook provisioned once per run, a copy per test -------------

#: the golden node's directory in the run-shared area (tests/conftest.py `run_shared_dir`)
GOLDEN_DIR = "golden-node"
#: a whole provisioning (cold venv.build with the real CPU torch, the 8-rank burn-in) on a loaded 2-core machine
GOLDEN_REPLAY_TIMEOUT_S = 1200
#: in the golden base: `plan --check --json` of the node BEFORE its provisioning, as it ended (`golden_first_plan`)
GOLDEN_FIRST_PLAN = "first-plan.json"
#: in the golden base: the provisioning's recording (`replay --record`; `golden_recorded`)
GOLDEN_RECORDED = "recorded.yaml"
#: beside the golden base: size and mtime of every file its copies share (`tests.support.shared_tree`)
GOLDEN_SHARED = "shared-files.json"


@dataclass(frozen=True)
class GoldenNode:
    """The shipped playbook, provisioned once for the run and stopped (`golden_node`): `base` holds the lab
    root (`lab/`), the tool's state (`state/`: the run logs of the plan before and of the provisioning), its
    download cache, the playbook it ran (so that the run log names a playbook inside `base`), the plan of the
    node before it (`GOLDEN_FIRST_PLAN`) and the provisioning's recording (`GOLDEN_RECORDED`). Never started
    again: tests copy it."""

    base: Path
    lab_cache: Path

    @property
    def root(self) -> Path:
        return self.base / "lab"

    @property
    def playbook(self) -> Path:
        return self.base / SHIPPED_PLAYBOOK.name

    def snapshot(self) -> dict[str, Any]:
        """`tests.support.labrun.snapshot` of the node as the provisioning left it."""
        data: dict[str, Any] = json.loads((self.base.parent / "snapshot.json").read_text())
        return data

    def copy(self, dest: Path) -> LabRun:
        """A copy of the node at `dest` (which must not exist), relocated there, as a stopped `LabRun` whose
        `up()`/`running()` start it with its node and containers kept, on ports of its own. The playbook is
        `dest / SHIPPED_PLAYBOOK.name` (`golden_playbook`)."""
        dest = dest.resolve()
        assert not dest.exists(), f"{dest} exists: a golden copy goes to a new directory"
        dest.parent.mkdir(parents=True, exist_ok=True)
        # the venv's packages and the uv cache are the golden node's inodes (hardlinks: the links between the two
        # kept, no GB written per copy); everything else is the copy's own (`tests.support.shared_tree`)
        shared_tree.copy_sharing(self.base, dest)
        (dest / ".complete").unlink(missing_ok=True)
        relocate(dest, str(self.base), str(dest))
        return LabRun(dest, dest / "lab-cache", keep_state=True)


def golden_playbook(run: LabRun) -> Path:
    """The playbook a golden copy was provisioned with (inside the copy: its run log names this path)."""
    return run.base / SHIPPED_PLAYBOOK.name


def golden_recorded(run: LabRun) -> Path:
    """The recording (`replay --record`) of a golden copy's provisioning, relocated with the copy."""
    return run.base / GOLDEN_RECORDED


def golden_first_plan(run: LabRun) -> dict[str, Any]:
    """`plan --check --json` of the golden node before its provisioning, as it ended: `rc`, `stdout`, `stderr`
    (tails) and `venvs` (every container's /opt/torch-venv after it, relative to the lab root)."""
    data: dict[str, Any] = json.loads((run.base / GOLDEN_FIRST_PLAN).read_text())
    return data


def relocate(tree: Path, old: str, new: str) -> list[Path]:
    """Rewrite `old` (an absolute directory) to `new` in every text file and link target under `tree`, skipping
    venvs and uv caches; returns the files rewritten. The lab writes its absolute root into a few files (the
    container's apt/kmod/nvidia-smi wrappers, run/installer.env, lab.log, the tool's run logs). A binary file
    naming `old` cannot be relocated: AssertionError."""
    changed: list[Path] = []
    binary: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(tree):
        here = Path(dirpath)
        # a venv or a uv cache: the real torch (~26k files), built in the container where the lab's paths do not
        # exist; never rewritten (hardlinked to each other, and to the golden node's: a rewrite would reach all)
        if shared_tree.is_venv(filenames) or shared_tree.is_uv_cache(here):
            dirnames[:] = []
            continue
        for name in [*filenames, *dirnames]:
            path = here / name
            if path.is_symlink():
                target = os.readlink(path)
                if target == old or target.startswith(old + "/"):
                    path.unlink()
                    path.symlink_to(new + target[len(old):])
                    changed.append(path)
                continue
            if name in dirnames or not path.is_file():
                continue
            data = path.read_bytes()
            if old.encode() not in data:
                continue
            if b"\0" in data:
                binary.append(path)
                continue
            st = path.stat()
            path.write_bytes(data.replace(old.encode(), new.encode()))  # in place: mode, owner and hardlinks kept
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
            changed.append(path)
    assert not binary, f"binary files name {old} and cannot be relocated: {binary[:5]}"
    return changed


def files_naming(tree: Path, text: str) -> list[str]:
    """Every file under `tree` whose bytes contain `text` (binary files too, venvs too; devices skipped)."""
    out = subprocess.run(["grep", "-rlF", "--devices=skip", "--", text, str(tree)], capture_output=True,
                         text=True, check=False)
    assert out.returncode in (0, 1), out.stderr[-2000:]
    return out.stdout.splitlines()


def _plan_before(run: LabRun, playbook: Path) -> dict[str, Any]:
    """`plan --check --json` of the new node, as a user runs it, and the venvs it left (none: it changes
    nothing); kept in the golden base for tests/test_e2e_lab.py, which asserts on it."""
    argv = [sys.executable, "-m", "provisioner", *streamed(["plan", str(playbook), "--lab", "--check", "--json"])]
    plan = subprocess.run(argv, capture_output=True, text=True, env=run.env(), cwd=REPO, timeout=600, check=False)
    venvs = sorted(str(p.relative_to(run.root)) for p in (run.root / "ct").glob("*/rootfs/opt/torch-venv"))
    return {"rc": plan.returncode, "stdout": plan.stdout[-5000:], "stderr": plan.stderr[-5000:], "venvs": venvs}


def _provision_golden(base: Path, lab_cache: Path, snapshot_file: Path) -> None:
    """Plan the shipped playbook against a new lab at `base` (`GOLDEN_FIRST_PLAN`), replay it (with its burn-in,
    recorded to `GOLDEN_RECORDED`) and check it end to end; the lab is stopped afterwards, its state kept on
    disk."""
    from provisioner.drift import UNIT_PATH

    base.mkdir(parents=True, exist_ok=True)
    playbook = base / SHIPPED_PLAYBOOK.name
    shutil.copyfile(SHIPPED_PLAYBOOK, playbook)
    run = LabRun(base, lab_cache)
    with run.running():
        (base / GOLDEN_FIRST_PLAN).write_text(json.dumps(_plan_before(run, playbook), indent=1))
        first = run.replay(playbook, timeout=GOLDEN_REPLAY_TIMEOUT_S, extra=("--record", str(base / GOLDEN_RECORDED)))
        check_provisioned(run, first, playbook)
        # (the day-two engine test module's first replay once) the boot unit went in with the install
        assert "installed " + UNIT_PATH in first.stderr, first.describe()
    snap = snapshot(run.root)
    check_provisioned_state(snap)
    snapshot_file.write_text(json.dumps(snap, indent=1, sort_keys=True))


def check_provisioned(run: LabRun, first: Replay, playbook: Path) -> None:
    """What a whole provisioning of the shipped playbook ends with: exit 0, every step ok or changed, the burn-in
    verdict pass, a run log that parses event by event (run.started ... run.finished), every API request valid
    against the PVE schema (none refused; POSTs and GETs among them), and no secret in the run logs. (From
    tests/test_e2e_lab.py's first replay and tests/test_faults.py's clean run.)"""
    import yaml

    assert first.rc == 0, first.describe()
    assert first.recap is not None and first.recap["status"] == "ok", first.describe()
    (counts,) = first.recap["hosts"].values()
    assert counts["failed"] == 0 and counts["changed"] >= 6, counts
    kinds = [step["kind"] for step in yaml.safe_load(playbook.read_text())["steps"]]
    assert "burnin.run" in kinds
    not_done = {k: first.status_of(k) for k in kinds if first.status_of(k) not in ("ok", "changed")}
    assert not not_done, f"{not_done}\n{first.describe()}"
    assert list(first.steps()) == kinds, list(first.steps())
    assert "burn-in verdict: pass" in first.stderr, first.describe()
    assert first.log_path is not None and first.log_path.is_file(), "no run log path printed"
    assert first.log_path.parent == run.state_dir / "runs", first.log_path
    events = read_run_log(first.log_path)  # every line a valid typed event
    assert events[0]["kind"] == "run.started" and events[-1]["kind"] == "run.finished", [events[0], events[-1]]
    assert events[-1]["status"] == "ok", events[-1]
    resolved: dict[str, Any] = {}
    for e in events:
        if e["kind"] == "step.finished" and e["status"] in ("ok", "changed"):
            resolved.update(e.get("resolved") or {})
    assert resolved["burnin"]["verdict"] == "pass", resolved.get("burnin")
    assert resolved.get("venv_lock"), sorted(resolved)

    requests = [json.loads(x) for x in (run.root / "api-requests.jsonl").read_text().splitlines() if x.strip()]
    assert len(requests) >= 10
    assert all(r["validated"] for r in requests), [r for r in requests if not r["validated"]][:3]
    assert all(r["status"] < 400 for r in requests), [r for r in requests if r["status"] >= 400][:3]
    assert {"POST", "GET"} <= {r["method"] for r in requests}
    password = (run.root / "private" / "api-password").read_text().strip()
    assert password and password not in first.log_path.read_text() and password not in first.stderr


def check_provisioned_state(snap: dict[str, Any]) -> None:
    """The node's final state (`snapshot`), as tests/test_faults.py's `clean` fixture checks it."""
    assert snap["status"] == "running" and "tags: gpu-provisioner" in snap["conf"], snap["conf"]
    assert "onboot: 1" in snap["conf"], snap["conf"]
    assert sum(1 for line in snap["conf"] if line.startswith("dev")) == 12, snap["conf"]
    assert snap["nvml_libs"] == ["libnvidia-ml.so.1", "libnvidia-ml.so.595.71.05"], snap["nvml_libs"]
    assert snap["root_leftovers"] == [] and snap["installer_done"] and snap["nvidia_smi"]
    venv = snap["venv"]
    assert venv["exists"] and not venv["building_marker"] and venv["broken_files"] == [], venv["broken_files"][:5]
    assert any(d.startswith("torch==2.11.0") for d in venv["dists"]), venv["dists"]
    assert {"lock.json", "torch.lock.txt"} <= set(venv["records"]), sorted(venv["records"])
    assert venv["runtime"]["request"]["torch"] == "2.11.0" and venv["runtime"]["verified"] is True


@pytest.fixture(scope="session")
def golden_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GoldenNode]:
    """The shipped playbook provisioned once per run (all pytest-xdist workers: built by the first one that
    asks, under a file lock, and found complete by the others), stopped, its state on disk. Its provisioning
    is the run's real cold venv.build: its container's uv cache starts empty. Tests never change it: they
    take `golden_copy`, which shares the venv's packages and the uv cache with it (hardlinks); at the end of
    the run every shared file must be as the provisioning left it (`GOLDEN_SHARED`), or the run fails."""
    from provisioner.lab.build_once import build_once
    from tests.conftest import run_shared_dir

    require(lab_importable(), "the embedded lab (provisioner.lab.lab) is not in this build")
    need_namespaces(root=True)
    shared = run_shared_dir(tmp_path_factory, GOLDEN_DIR)
    node = GoldenNode(shared / "node", shared / "lab-cache")
    failed = shared / "failed"

    def build(base: Path) -> None:
        if failed.exists():  # another worker's build failed: the same failure, not a second half-hour
            raise AssertionError(f"the golden node failed to build (in another worker):\n{failed.read_text()}")
        try:
            _provision_golden(base, node.lab_cache, shared / "snapshot.json")
        except Exception as exc:
            failed.write_text(f"{type(exc).__name__}: {exc}"[-20000:])
            raise
        (shared / GOLDEN_SHARED).write_text(json.dumps(shared_tree.fingerprint(base)))

    build_once(node.base, shared / ".lock", build)
    yield node
    before = json.loads((shared / GOLDEN_SHARED).read_text())
    rewritten = shared_tree.changed(node.base, before)
    assert not rewritten, (f"{len(rewritten)} of the golden node's shared files (venv packages, uv cache) were "
                           f"rewritten in place through a copy: {rewritten[:10]}")


@pytest.fixture(scope="session")
def golden_copy(golden_node: GoldenNode) -> Callable[[Path], LabRun]:
    """`golden_copy(dest) -> LabRun`: a test's own copy of the golden node at `dest` (stopped; `up()` starts it
    with its state on ports of its own; the playbook is `golden_playbook(run)`)."""
    return golden_node.copy


def _lab_available() -> bool:
    try:
        import provisioner.lab.lab  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture
def lab_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A private lab (scenarios from indirect parametrisation), with state under tmp_path."""
    require(_lab_available(), "the embedded lab (provisioner.lab.lab) is not in this build")
    from provisioner.lab.lab import Lab

    scenarios = list(getattr(request, "param", []))
    root = tmp_path / "lab"
    monkeypatch.setenv("PROVISIONER_LAB_ROOT", str(root))
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PROVISIONER_CACHE_DIR", os.environ.get("PROVISIONER_CACHE_DIR", str(tmp_path / "cache")))
    lab = Lab(root, scenarios=scenarios)
    lab.up()
    try:
        yield root
    finally:
        lab.down()


@pytest.fixture
def golden_lab_env(golden_copy: Callable[[Path], LabRun], tmp_path: Path,
                   monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """As `lab_env`, on this test's copy of the golden node (the shipped playbook provisioned, burn-in
    included), started with its node and containers kept: its lab root, with the state under tmp_path."""
    run = golden_copy(tmp_path / "golden-copy")
    monkeypatch.setenv("PROVISIONER_LAB_ROOT", str(run.root))
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PROVISIONER_CACHE_DIR", str(run.cache_dir))
    with run.running():
        yield run.root


def lab_session(root: Path, tmp_path: Path) -> WizardSession:
    playbook = point_at_lab(load(PLAYBOOK), root)
    return WizardSession(playbook, playbook_path=str(PLAYBOOK), lab=True, runs_dir=tmp_path,
                         record_to=str(tmp_path / "recorded.yaml"))


async def run_page(app: ProvisionerApp, pilot: Any, *, timeout: float = 600) -> list[list[str]]:
    """Press ctrl+r until the page is done; returns the plans that were shown for confirmation."""
    page = app.screen
    assert isinstance(page, StepPage)
    confirmed: list[list[str]] = []
    for _ in range(12):
        index = page.next_index()
        if index is None:
            return confirmed
        run = app.session.runs[index]
        if run.planned and run.changes:
            # A plan is on screen, waiting for the confirmation.
            plan_text = str(page.query_one("#plan", Static).render())
            assert "will change:" in plan_text
            assert all(change[:40] in plan_text for change in run.changes)
            assert str(page.query_one("#run", Button).label).startswith("Apply")
            confirmed.append(list(run.changes))
        await pilot.press("ctrl+r")
        await wait_idle(app, pilot, timeout)
        for i in page.indices:
            failed = app.session.runs[i]
            assert failed.status != "failed", f"{failed.spec.kind} failed: {failed.message}\n" + "\n".join(failed.tail)
    raise AssertionError(f"page {page.name} did not finish")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_labs(roots: dict[str, tuple[Path, tuple[str, ...]]], lab_cache: Path) -> None:
    """Start the labs (each is its own daemon process): the first alone, since it builds the lab's
    wheel index in the shared `lab_cache` (concurrent builds of a cold index collide on its
    temporary files), then the others in parallel."""
    from provisioner.lab.lab import Lab

    labs = [Lab(root, list(scen)) for root, scen in roots.values()]
    env = copy_environ() | {"PROVISIONER_CACHE_DIR": str(lab_cache)}
    labs[0].up(env=env)
    with ThreadPoolExecutor(max_workers=max(1, len(labs) - 1)) as pool:
        for fut in [pool.submit(lab.up, env=env) for lab in labs[1:]]:
            fut.result()


def stop_labs(roots: list[Path]) -> None:
    from provisioner.lab.lab import Lab

    for root in roots:
        with contextlib.suppress(Exception):
            Lab(root).down()


def lab_ready() -> None:
    try:
        import provisioner.lab.lab  # noqa: F401
    except ImportError as exc:
        require(False, f"the lab is not importable: {exc}")
    require(shutil.which("unshare") is not None, "the lab's sandboxes need `unshare` (util-linux)")
    require(os.geteuid() == 0, "the lab's node sandboxes need root here")


def cli(env: dict[str, str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provisioner", *streamed(args)], env=env, capture_output=True,
                          text=True, timeout=timeout)


def last_json(out: str) -> dict[str, object]:
    doc: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return doc


def lab_cli_env(root: Path) -> dict[str, str]:
    return dict(os.environ, PROVISIONER_LAB_ROOT=str(root), PROVISIONER_STATE_DIR=str(root / "state"),
                PROVISIONER_CACHE_DIR=str(with_shared_wheels(root.parent / "cache")))


@contextlib.contextmanager
def running_lab(base: Path) -> Iterator[dict[str, str]]:
    require(os.geteuid() == 0, "the lab needs root (mount namespaces, device nodes)")
    root = base / "lab"
    env = lab_cli_env(root)
    up = lab_up(env, root, timeout=180)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield env
    finally:
        lab_down(env, root)
