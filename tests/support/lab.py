"""How the tests start a lab: the one module that does (issue 32).

- `lab_state(root, *scenarios, profile=...)`: a lab's state on disk with its node tools, no daemon — the
  node and its containers are entered per command (`node`, `ct`), as the SSH endpoint runs them.
- `gpu_ct(state, vmid)`: a container with the GPUs passed through (devN entries or raw lines).
- `start_lab(root, *scenarios)`: the lab's services in this process (API, SSH, mirrors, wheel index), and
  `ssh_transport(conn)` to reach its node over real SSH.
- `make_lab` / `lab` (fixtures): the lab's PVE API server alone, in this process, for tests of the API and
  of our client.
- `tests.support.labrun.LabRun`: a lab daemon started as `provisioner lab up` starts it, for replays run as
  a user runs them (it starts through `up_daemon` below).

Every lab test is marked ``lab`` at collection (`tests/support/tiers.py`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from provisioner.lab.commands import write_node_bin
from provisioner.lab.lab import Lab, LabServices
from provisioner.lab.pve_api import LabApiServer
from provisioner.lab.sandbox import make_device_nodes, node_argv, node_env, record_host_ns
from provisioner.lab.state import LabState
from provisioner.proxmox.lxc_conf import LxcConfig
from provisioner.transport.ssh import SshTarget, SshTransport
from tests.support.require import require

UBUNTU = "local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst"
NOT_DEFINED = "property is not defined in schema and the schema does not allow additional properties"

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

def start_lab(root: Path, *scenarios: str) -> tuple[LabServices, dict[str, Any]]:
    """The lab's services (PVE API, SSH node, driver mirror, wheel index) started in this process."""
    require(os.geteuid() == 0, "the lab sandboxes need root (mount namespaces, mknod)")
    require(shutil.which("unshare") is not None, "util-linux unshare is not installed")
    state = Lab(root, list(scenarios)).create_state()
    services = LabServices(state).start()
    return services, services.connection()


def ssh_transport(conn: dict[str, Any], **overrides: Any) -> SshTransport:
    """Our SSH transport to the lab node named by `conn` (a lab's connection block)."""
    ssh = conn["ssh"]
    args = {"host": ssh["host"], "port": ssh["port"], "user": ssh["user"], "key_file": ssh["key_file"],
            "known_hosts": ssh["known_hosts"], **overrides}
    return SshTransport(SshTarget(**args))


# -- a lab daemon, as `provisioner lab up` starts it ----------------------------------------------

def up_daemon(root: Path, scenarios: Sequence[str] = (), **kw: Any) -> dict[str, Any]:
    """Start the lab daemon at `root` (its own process, in the background); its connection block."""
    conn, _ = Lab(root, list(scenarios), **kw).up()
    return conn


def down_daemon(root: Path) -> None:
    Lab(root).down()


# -- the PVE API alone, in this process ----------------------------------------------------------

@pytest.fixture
def make_lab(tmp_path: Path) -> Iterator[Callable[..., ApiLab]]:
    """Factory of (state, started API server) pairs; tasks finish after 50 ms; all stopped at teardown."""
    servers: list[LabApiServer] = []

    def make(**settings: Any) -> ApiLab:
        settings.setdefault("task_delay", 0.05)
        state = LabState.create(tmp_path / f"lab{len(servers)}", **settings)
        server = LabApiServer(state).start()
        servers.append(server)
        return state, server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def lab(make_lab: Callable[..., ApiLab]) -> ApiLab:
    return make_lab()
