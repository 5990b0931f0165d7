"""The evidence probes: what `provisioner bundle` and `diagnose --host` run, where, and what they feed.

Each probe is data: a name, a target (`node` = the Proxmox host, `container` = `pct exec <vmid>`
on it; without a container the container probes run on the node, which is then where the
workload runs), a fixed argv, the live-fact keys of `provisioner.diagnose.live_rules` it feeds
(see docs/diagnose-rules.md, "Live facts"), and the bundle member its output is written to.

Probes are read-only. They are written so that "the thing is legitimately not there" is an
exit status of its own (`absent_statuses`, by convention 3, plus 127 "command not found"),
distinct from a failure: a missing installer log is absent, a `pct exec` that cannot enter the
container is a failure.

Placeholders, replaced by `argv_for` as whole argv elements (never spliced into a script):
`{vmid}` (a validated int, also inside a path element) and `{venv}` (passed as `$1`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from provisioner.facts import catalog
from provisioner.facts.base import Fact

Target = Literal["node", "container"]

VENV = "{venv}"
VMID = "{vmid}"
DEFAULT_VENV = "/opt/torch-venv"  # venv.build's default path
INSTALLER_LOG = "/var/log/nvidia-installer.log"
ABSENT = 3  # exit status our probe scripts use for "not there"
NOT_FOUND = 127  # shell: command not found
DEFAULT_TIMEOUT = 30.0

_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")

# Runs in the venv's python: prints warnings/tracebacks as they come, then ONE JSON line last.
TORCH_SCRIPT = r"""
import json, platform, sys
out = {"python": sys.executable, "python_version": sys.version.split()[0], "platform": platform.platform()}
try:
    import torch
except Exception as exc:
    out["error"] = f"import torch failed: {type(exc).__name__}: {exc}"
    print(json.dumps(out)); sys.exit(0)
out["torch"] = torch.__version__
out["cuda"] = torch.version.cuda
out["hip"] = getattr(torch.version, "hip", None)
out["debug"] = bool(torch.version.debug)
try:
    out["cudnn"] = torch.backends.cudnn.version()
except Exception as exc:
    out["cudnn"] = f"error: {exc}"
flags = getattr(torch._C, "_cuda_getArchFlags", lambda: None)()
out["arch_flags"] = flags.split() if flags else []
try:
    out["available"] = bool(torch.cuda.is_available())
    out["count"] = torch.cuda.device_count() if out["available"] else 0
    out["arch_list"] = list(torch.cuda.get_arch_list()) if out["available"] else out["arch_flags"]
    out["capabilities"] = [".".join(map(str, torch.cuda.get_device_capability(i))) for i in range(out["count"])]
    out["devices"] = [torch.cuda.get_device_name(i) for i in range(out["count"])]
except Exception as exc:
    out["cuda_error"] = f"{type(exc).__name__}: {exc}"
    out.setdefault("arch_list", out["arch_flags"])
try:
    v = torch.cuda.nccl.version() if out.get("cuda") else None
    out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else v
except Exception as exc:
    out["nccl"] = f"error: {exc}"
print(json.dumps(out))
"""

PACKAGES_SCRIPT = r"""
import importlib.metadata as m
seen = {}
for d in m.distributions():
    name = d.metadata["Name"]
    if name:
        seen[name.lower()] = f"{name}=={d.version}"
print("\n".join(sorted(seen.values(), key=str.lower)))
"""


def _venv_python(script: str) -> tuple[str, ...]:
    """argv running `script` with `<venv>/bin/python`; exit 3 (absent) when the venv has none."""
    return ("sh", "-c",
            'py="$1/bin/python"; [ -x "$py" ] || { echo "no python at $py"; exit 3; }; exec "$py" -c "$2"',
            "sh", VENV, script)


def _absent_unless_file(path: str, reader: str) -> tuple[str, ...]:
    return ("sh", "-c", f'[ -r "$1" ] || {{ echo "$1: not present"; exit 3; }}; {reader} "$1"', "sh", path)


@dataclass(frozen=True)
class Probe:
    name: str
    target: Target
    argv: tuple[str, ...]
    file: str  # bundle member, relative to the bundle root
    feeds: tuple[str, ...] = ()  # live-fact keys (docs/diagnose-rules.md)
    description: str = ""
    timeout: float = DEFAULT_TIMEOUT
    absent_statuses: tuple[int, ...] = (ABSENT, NOT_FOUND)
    needs_container: bool = False  # only meaningful with a container (its config, its status)
    needs_venv: bool = False
    fact: Fact[Any] | None = None  # the fact whose command this probe runs: its parser reads the output


def _fact_probe(name: str, target: Target, fact: Fact[Any], file: str, feeds: tuple[str, ...] = (),
                description: str = "") -> Probe:
    """A probe that is one of the steps' facts (`facts.catalog`): same command, same parser."""
    return Probe(name, target, tuple(fact.argv), file, feeds, description, fact=fact)


PROBES: tuple[Probe, ...] = (
    # --- node (the Proxmox host) ---------------------------------------------------------------
    Probe("node.uname", "node", ("uname", "-a"), "node/uname.txt",
          description="kernel and architecture (also the reachability check)"),
    _fact_probe("node.os_release", "node", catalog.OS_RELEASE, "node/os-release.txt"),
    Probe("node.pveversion", "node", ("pveversion", "-v"), "node/pveversion.txt",
          description="Proxmox VE and package versions"),
    Probe("node.module_version", "node", _absent_unless_file("/sys/module/nvidia/version", "cat"),
          "node/sys-module-nvidia-version.txt", ("host_driver_version",),
          "version of the loaded nvidia kernel module"),
    Probe("node.proc_driver_version", "node", _absent_unless_file("/proc/driver/nvidia/version", "cat"),
          "node/proc-driver-nvidia-version.txt", ("host_driver_version",), "NVRM banner of the loaded module"),
    Probe("node.gpu_list", "node", ("nvidia-smi", "-L"), "node/nvidia-smi-L.txt", ("host_gpu_count", "nvidia_smi")),
    _fact_probe("node.gpu_query", "node", catalog.GPUS, "node/nvidia-smi-query-gpu.csv",
                ("gpu_compute_caps", "host_driver_version"),
                "index, name, uuid, bus id, compute capability, driver, memory"),
    Probe("node.nvidia_smi_q", "node", ("nvidia-smi", "-q"), "node/nvidia-smi-q.txt",
          description="full per-GPU report (clocks, ECC, throttle reasons, PCIe)", timeout=90.0),
    _fact_probe("node.proc_devices", "node", catalog.PROC_DEVICES, "node/proc-devices.txt", ("host_proc_devices",),
                "character device majors (nvidia-uvm's is dynamic)"),
    _fact_probe("node.dev_nodes", "node", catalog.DEV_NODES, "node/dev-nvidia.txt", ("host_dev_nodes",)),
    _fact_probe("node.cgroup_fs", "node", catalog.CGROUP, "node/cgroup-fs.txt", ("cgroup_fs",),
                "cgroup2fs (v2) or tmpfs (v1)"),
    Probe("node.nvidia_modules", "node",
          ("sh", "-c", "grep -E '^nvidia' /proc/modules || echo 'no nvidia module loaded'"),
          "node/nvidia-modules.txt"),
    Probe("node.dmesg", "node",
          ("sh", "-c", 'out=$(dmesg 2>&1) || { printf "%s\\n" "$out" | tail -n 5; exit 1; }; '
                       'printf "%s\\n" "$out" | grep -E "NVRM|Xid|nvidia" | tail -n 2000; true'),
          "node/dmesg-nvidia.txt", ("dmesg",), "kernel log lines of the NVIDIA driver (NVRM, Xid)"),
    Probe("node.lxc_config", "node", _absent_unless_file(f"/etc/pve/lxc/{VMID}.conf", "cat"),
          "node/lxc-config.conf", ("lxc_config",), "/etc/pve/lxc/<vmid>.conf", needs_container=True),
    Probe("node.pct_status", "node", ("pct", "status", VMID, "--verbose"), "node/pct-status.txt",
          needs_container=True),
    # --- container (pct exec), or the node itself when there is no container -------------------
    Probe("ct.uname", "container", ("uname", "-a"), "container/uname.txt",
          description="also the check that commands run in the container at all"),
    _fact_probe("ct.os_release", "container", catalog.OS_RELEASE, "container/os-release.txt"),
    Probe("ct.libc", "container", ("sh", "-c", "ldd --version 2>&1 | head -n 2"), "container/ldd-version.txt"),
    Probe("ct.userspace", "container",
          ("sh", "-c", "ls -1 " + " ".join(f"{d}/libcuda.so.* {d}/libnvidia-ml.so.*" for d in _LIB_DIRS)
           + " 2>/dev/null; true"),
          "container/nvidia-userspace-libs.txt", ("container_driver_version",),
          "installed userspace driver libraries (their version must equal the host module)"),
    Probe("ct.gpu_list", "container", ("nvidia-smi", "-L"), "container/nvidia-smi-L.txt",
          ("container_gpu_count",)),
    Probe("ct.nvidia_smi", "container", ("nvidia-smi",), "container/nvidia-smi.txt", ("nvidia_smi",)),
    _fact_probe("ct.dev_nodes", "container", catalog.DEV_NODES, "container/dev-nvidia.txt", ("container_dev_nodes",)),
    _fact_probe("ct.shm", "container", catalog.SHM, "container/df-shm.txt", ("shm",)),
    Probe("ct.ldconfig", "container",
          ("sh", "-c", "ldconfig -p 2>/dev/null | grep -E 'libcuda|libnvidia|libcudnn|libnccl|libcublas'; true"),
          "container/ldconfig-nvidia.txt"),
    Probe("ct.gpu_env", "container",
          ("sh", "-c", "env | grep -E '^(NCCL_|CUDA_|NVIDIA_|TORCH_|PYTORCH_|LD_LIBRARY_PATH=|OMP_NUM_THREADS=)' "
                       "| sort; true"),
          "container/gpu-env.txt", ("nccl_env",), "NCCL/CUDA environment of a login shell (other variables are "
                                                  "never read)"),
    Probe("ct.installer_log", "container", _absent_unless_file(INSTALLER_LOG, "tail -n 5000"),
          "container/nvidia-installer.log", ("install_log",), timeout=60.0),
    Probe("ct.torch", "container", _venv_python(TORCH_SCRIPT), "container/torch.txt",
          ("torch_version", "torch_cuda_version", "torch_arch_list", "torch_check", "gpu_compute_caps"),
          "torch build, CUDA version, arch list and device capabilities in the venv", timeout=180.0,
          needs_venv=True),
    Probe("ct.packages", "container", _venv_python(PACKAGES_SCRIPT), "container/packages.txt",
          description="installed distributions in the venv (name==version)", timeout=60.0, needs_venv=True),
)

BY_NAME: dict[str, Probe] = {p.name: p for p in PROBES}


def argv_for(probe: Probe, vmid: int | None, venv: str | None) -> list[str]:
    """The probe's argv with `{vmid}` and `{venv}` filled in (each stays one argv element)."""
    out: list[str] = []
    for arg in probe.argv:
        if arg == VENV:
            out.append(venv or DEFAULT_VENV)
        elif VMID in arg:
            if vmid is None:
                raise ValueError(f"probe {probe.name} needs a container id")
            out.append(arg.replace(VMID, str(int(vmid))))
        else:
            out.append(arg)
    return out


def selected(vmid: int | None, probes: Sequence[Probe] = PROBES) -> list[Probe]:
    """The probes that apply: container-only ones are dropped when there is no container."""
    return [p for p in probes if vmid is not None or not p.needs_container]
