"""Mount-namespace sandboxes: the lab node's view of the machine and each lab container's view.

Both are built by a generated bash script run under ``unshare -m --propagation private`` (as
root; ``unshare -rm`` otherwise), so nothing leaks into the real machine's mount table.

Node view (every command of the SSH endpoint runs in it):
  /sys/module          bind of ``<root>/node/sys-module`` (``nvidia/version`` = host driver)
  /proc/driver         bind of ``<root>/node/proc-driver`` (``nvidia/version`` banner)
  /proc/devices        bind of ``<root>/node/proc-devices`` (nvidia-uvm's major only once loaded)
  /sys/fs/cgroup       a cgroup2 mount (``stat -fc %T`` -> ``cgroup2fs`` as on PVE 8/9)
  /dev                 tmpfs: the real null/zero/full/random/urandom/tty, pts, shm, plus the
                       NVIDIA nodes of `LabState.host_devices()` made with mknod
  /etc                 overlay: lower = the machine's /etc, upper = ``<root>/etc`` (so
                       ``/etc/pve/lxc/<vmid>.conf`` is exactly LabState's file)

Container view (``pct exec``; built from the machine's own mount namespace, see `host_ns_pid`):
  /etc, /usr, /var     overlays whose upper layers live in the container's rootfs
  /opt /root /tmp /usr/local /var/log   binds of the container's own directories
  /dev                 tmpfs with only what the container config passes: ``devN`` entries and
                       raw ``lxc.mount.entry`` lines; a raw entry without a matching
                       ``lxc.cgroup2.devices.allow`` rule is created with mode 000 (the lab's
                       stand-ins treat such a node as "denied by the device cgroup"), /dev/shm
                       a tmpfs (64M under scenario ``shm-small``)
  /run                 a private tmpfs
  host paths the lab itself needs inside (its root, this Python, the project, the machine's
  Pythons and uv) stay visible at their own paths even when they live under /root or /tmp.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from provisioner.lab import render
from provisioner.lab.state import LabSettings, LabState
from provisioner.proxmox.lxc_conf import LxcConfig, parse_property_string

#: PATH of a login on the lab node (stand-ins first, then sshd's default PATH)
NODE_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: PATH lxc-attach --clear-env gives a container command
CT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
REAL_DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
DISK_FULL_OPT_SIZE = "8m"
SHM_SMALL_SIZE = "64m"
#: container directories that are bind mounts of the container's own directories (longest first)
CT_BIND_DIRS = ("/usr/local", "/var/log", "/opt", "/root", "/tmp")
CT_OVERLAY_DIRS = ("/etc", "/usr", "/var")


class SandboxUnavailable(RuntimeError):
    """Mount namespaces are not available to this process (not root, no user namespaces)."""


@dataclass(frozen=True)
class DeviceNode:
    path: str
    major: int
    minor: int
    mode: int = 0o666
    uid: int = 0
    gid: int = 0


# --- helpers --------------------------------------------------------------------------------


@cache
def unshare_prefix() -> tuple[str, ...]:
    """argv prefix that runs a command in a private mount namespace."""
    if shutil.which("unshare") is None:
        raise SandboxUnavailable("LAB: `unshare` (util-linux) is not installed; the lab's sandboxes need it")
    if os.geteuid() == 0:
        return ("unshare", "-m", "--propagation", "private", "--")
    probe = subprocess.run(["unshare", "-rm", "--propagation", "private", "true"], capture_output=True, check=False)
    if probe.returncode == 0:
        return ("unshare", "-rm", "--propagation", "private", "--")
    raise SandboxUnavailable(
        "LAB: the lab's node and container sandboxes need root or unprivileged user namespaces "
        "(`unshare -rm` failed: " + probe.stderr.decode(errors="replace").strip() + ")"
    )


def lab_python() -> str:
    """The interpreter the stand-ins run with."""
    return sys.executable


def project_dir() -> Path:
    """Directory that holds the `provisioner` package (for the stand-ins' imports)."""
    return Path(__file__).resolve().parents[2]


@cache
def discover_pythons() -> dict[str, Path]:
    """Real CPython interpreters on this machine: ``"3.12" -> /path/to/python3.12`` (newest patch)."""
    found: dict[str, tuple[tuple[int, ...], Path]] = {}
    roots = [Path.home() / ".pyenv" / "versions", Path("/root/.pyenv/versions"),
             Path.home() / ".local/share/uv/python", Path("/opt/python")]
    for base in roots:
        if not base.is_dir():
            continue
        for d in base.iterdir():
            m = re.search(r"(\d+)\.(\d+)\.(\d+)", d.name)
            if not m:
                continue
            minor = f"{m.group(1)}.{m.group(2)}"
            exe = d / "bin" / f"python{minor}"
            if not exe.exists():
                continue
            key = tuple(int(x) for x in m.groups())
            if minor not in found or key > found[minor][0]:
                found[minor] = (key, exe)
    for minor in ("3.10", "3.11", "3.12", "3.13", "3.14"):
        if minor not in found:
            exe_s = shutil.which(f"python{minor}", path="/usr/bin:/usr/local/bin")
            if exe_s:
                found[minor] = ((0,), Path(exe_s))
    return {k: v[1] for k, v in sorted(found.items())}


def find_uv() -> Path | None:
    """The real `uv` binary (not a pyenv shim)."""
    candidates: list[Path] = [Path(sys.prefix) / "bin" / "uv", Path(sys.base_prefix) / "bin" / "uv"]
    which = shutil.which("uv")
    if which:
        candidates.append(Path(which))
    for c in candidates:
        if c.exists():
            real = c.resolve()
            if "shims" not in real.parts:
                return real
    try:
        out = subprocess.run(["pyenv", "which", "uv"], capture_output=True, text=True, check=False, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return Path(out.stdout.strip()).resolve()
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def _prefix_of(exe: Path) -> Path:
    real = exe.resolve()
    return real.parent.parent if real.parent.name == "bin" else real.parent


def keep_paths(root: Path) -> list[Path]:
    """Host paths that must stay visible inside a container (they may live under /root or /tmp)."""
    paths = {root.resolve(), project_dir(), Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(),
             _prefix_of(Path(sys.executable))}
    for exe in discover_pythons().values():
        paths.add(_prefix_of(exe))
    uv = find_uv()
    if uv is not None:
        paths.add(uv.parent)
    return sorted(paths)


class _Script:
    """A bash script assembled from argv lists (everything quoted)."""

    def __init__(self) -> None:
        self.lines: list[str] = ["set -e", "umask 022"]

    def run(self, *argv: str | Path) -> None:
        self.lines.append(" ".join(shlex.quote(str(a)) for a in argv))

    def raw(self, line: str) -> None:
        self.lines.append(line)

    def mount(self, *args: str | Path) -> None:
        self.run("mount", "-n", *args)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _overlay(s: _Script, name: str, lower: str, upper: Path, work: Path, target: str | Path) -> None:
    opts = f"lowerdir={lower},upperdir={upper},workdir={work}"
    q = shlex.quote
    s.raw(f"mount -n -t overlay {q(name)} -o {q(opts + ',index=off')} {q(str(target))} 2>/dev/null || "
          f"mount -n -t overlay {q(name)} -o {q(opts)} {q(str(target))}")


def _populate_dev(s: _Script, dev: str | Path, nodes: Iterable[DeviceNode], shm_size: str) -> None:
    """Fill a fresh tmpfs at `dev` (the real /dev is still visible while this runs)."""
    d = str(dev)
    for name in REAL_DEV_NODES:
        s.raw(f"if [ -e /dev/{name} ]; then : > {shlex.quote(d + '/' + name)}; "
              f"mount -n --bind /dev/{name} {shlex.quote(d + '/' + name)}; fi")
    s.run("mkdir", "-p", f"{d}/pts", f"{d}/shm")
    s.raw(f"mount -n --bind /dev/pts {shlex.quote(d + '/pts')} 2>/dev/null || true")
    s.run("ln", "-sf", "pts/ptmx", f"{d}/ptmx")
    s.mount("-t", "tmpfs", "-o", f"mode=1777,size={shm_size}", "shm", f"{d}/shm")
    s.run("ln", "-sf", "/proc/self/fd", f"{d}/fd")
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        s.run("ln", "-sf", f"/proc/self/fd/{i}", f"{d}/{name}")
    for node in nodes:
        path = d + node.path.removeprefix("/dev")
        parent = path.rsplit("/", 1)[0]
        if parent != d:
            s.run("mkdir", "-p", parent)
        # in a user namespace mknod is refused: fall back to an empty placeholder file
        s.raw(f"mknod -m {node.mode:03o} {shlex.quote(path)} c {node.major} {node.minor} 2>/dev/null || "
              f": > {shlex.quote(path)}")
        if node.uid or node.gid:
            s.run("chown", f"{node.uid}:{node.gid}", path)


# --- lab host model and node files ------------------------------------------------------------

#: kernel each lab PVE version runs
PVE_KERNELS = {"8.1": "6.5.13-5-pve", "8.4": "6.8.12-10-pve", "9": "6.14.11-4-pve"}


def lab_host(settings: LabSettings) -> render.LabHost:
    """The render model of the lab host described by lab.json (its profile, `provisioner.lab.profiles`)."""
    from provisioner.lab.profiles import lab_host as profile_host

    return profile_host(settings)


def _write(path: Path, text: str) -> None:
    """Write in place and only when changed: live bind mounts of the file keep showing it (a replaced
    file would leave them on a deleted inode, onto which nothing can be mounted)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode()
    try:
        if path.read_bytes() == data:
            return
    except OSError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, data)
    finally:
        os.close(fd)


render_gpu_information = render.render_gpu_information


def node_dir(root: Path) -> Path:
    return root / "node"


def write_node_files(state: LabState) -> Path:
    """(Re)write the node's /sys/module, /proc/driver and /proc/devices stand-ins; returns their dir."""
    settings = state.settings()
    host = lab_host(settings)
    d = node_dir(state.root)
    _write(d / "sys-module" / "nvidia" / "version", render.render_sys_module_version(host))
    _write(d / "proc-driver" / "nvidia" / "version", render.render_proc_driver_version(host))
    _write(d / "proc-driver" / "nvidia" / render.LAB_FABRIC_FILE, render.render_lab_fabric_state(host))
    devices = render.render_proc_devices(host)
    uvm = d / "sys-module" / "nvidia_uvm"
    if settings.host_uvm_nodes:
        _write(uvm / "version", render.render_sys_module_version(host))
    else:
        devices = "".join(line for line in devices.splitlines(keepends=True) if not line.endswith(" nvidia-uvm\n"))
        shutil.rmtree(uvm, ignore_errors=True)
    _write(d / "proc-devices", devices)
    for g in host.gpus:
        _write(d / "proc-driver" / "nvidia" / "gpus" / render.proc_bus_dir(g) / "information",
               render_gpu_information(host, g))
    for sub in ("stage", "hold"):
        (state.root / "run" / sub).mkdir(parents=True, exist_ok=True)
    return d


def node_devices(state: LabState) -> list[DeviceNode]:
    return [DeviceNode(path, major, minor) for path, (major, minor) in sorted(state.host_devices().items())]


def _bind_node_facts(s: _Script, d: Path) -> None:
    s.mount("--bind", d / "sys-module", "/sys/module")
    s.raw("if [ -d /proc/driver ]; then " + " ".join(
        shlex.quote(str(a)) for a in ("mount", "-n", "--bind", d / "proc-driver", "/proc/driver")) + "; fi")
    s.mount("--bind", d / "proc-devices", "/proc/devices")
    s.raw("mount -n -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null || true")


def node_script(state: LabState) -> str:
    """Setup script of the node view; ends by running ``"$@"``."""
    d = write_node_files(state)
    root = state.root
    work = root / "run" / "overlay-work" / "etc"
    work.mkdir(parents=True, exist_ok=True)
    (root / "etc").mkdir(parents=True, exist_ok=True)
    stage = root / "run" / "stage" / f"node-dev-{os.getpid()}-{os.urandom(3).hex()}"
    s = _Script()
    s.run("mkdir", "-p", stage)
    s.mount("-t", "tmpfs", "-o", "mode=755,size=1m", "lab-node-dev", stage)
    _populate_dev(s, stage, node_devices(state), "50%")
    s.mount("--move", stage, "/dev")
    s.run("rmdir", stage)
    _bind_node_facts(s, d)
    _overlay(s, "lab-node-etc", "/etc", root / "etc", work, "/etc")
    s.raw("cd /root 2>/dev/null || cd /")
    s.raw('exec "$@"')
    return s.text()


def node_env(state: LabState, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a command on the lab node (sshd-like, stand-ins first on PATH)."""
    env = {
        "PATH": f"{bin_dir(state.root)}:{NODE_DEFAULT_PATH}",
        "HOME": "/root",
        "USER": "root",
        "LOGNAME": "root",
        "SHELL": "/bin/bash",
        "LANG": "C.UTF-8",
        "PROVISIONER_LAB_ROOT": str(state.root),
    }
    env.update(extra or {})
    return env


def node_argv(state: LabState, argv: Sequence[str]) -> list[str]:
    """argv that runs `argv` in the lab node's view."""
    return [*unshare_prefix(), "bash", "-c", node_script(state), "lab-node", *argv]


def bin_dir(root: Path) -> Path:
    return root / "bin"


# --- containers -------------------------------------------------------------------------------

_ALLOW_RE = re.compile(r"^\s*([abc])\s*(?:(\*|\d+):(\*|\d+))?\s*([rwm]*)\s*$")


def _device_rules(conf: LxcConfig) -> list[tuple[bool, str, str, str]]:
    """(allow?, type, major, minor) in order, from lxc.cgroup2.devices.allow/deny (v1 keys do nothing on PVE 8)."""
    rules: list[tuple[bool, str, str, str]] = []
    for key, value in conf.raw_lines():
        if key not in ("lxc.cgroup2.devices.allow", "lxc.cgroup2.devices.deny"):
            continue
        m = _ALLOW_RE.match(value)
        if not m:
            continue
        kind, major, minor, _access = m.groups()
        rules.append((key.endswith("allow"), kind, major or "*", minor or "*"))
    return rules


def cgroup_allows(conf: LxcConfig, major: int, minor: int) -> bool:
    """Whether the container's device cgroup lets it use char device major:minor."""
    allowed = False
    for allow, kind, ma, mi in _device_rules(conf):
        if kind == "a" or (kind == "c" and ma in ("*", str(major)) and mi in ("*", str(minor))):
            allowed = allow
    return allowed


def ct_devices(state: LabState, conf: LxcConfig) -> list[DeviceNode]:
    """The device nodes a container sees, from its devN entries and raw lxc.mount.entry lines."""
    host = state.host_devices()
    nodes: dict[str, DeviceNode] = {}
    for _, value in conf.indexed("dev").items():
        props = parse_property_string(value, "path")
        path = props.get("path", "")
        if path not in host:
            continue  # PVE refuses to start such a CT; the lab's API/pct start report it
        major, minor = host[path]
        mode = int(props.get("mode", "0660"), 8)
        nodes[path] = DeviceNode(path, major, minor, mode, int(props.get("uid", "0")), int(props.get("gid", "0")))
    for _, value in conf.raw_lines("lxc.mount.entry"):
        parts = value.split()
        if len(parts) < 4 or parts[2] != "none" or "bind" not in parts[3].split(","):
            continue
        src, dst = parts[0], "/" + parts[1].lstrip("/")
        if src in host and dst.startswith("/dev/"):
            major, minor = host[src]
            mode = 0o666 if cgroup_allows(conf, major, minor) else 0o000
            nodes[dst] = DeviceNode(dst, major, minor, mode)
        elif src.rstrip("/") in ("/dev/nvidia-caps",) and dst.startswith("/dev/"):
            continue  # the lab host has no MIG capability nodes
    return sorted(nodes.values(), key=lambda n: n.path)


def host_ns_pid(root: Path) -> int | None:
    """PID of a process in the machine's own mount namespace (the lab server), if alive."""
    try:
        pid = int((root / "run" / "host-ns.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if Path(f"/proc/{pid}/ns/mnt").exists() else None


def record_host_ns(root: Path) -> None:
    """Remember this process as the anchor of the machine's mount namespace."""
    (root / "run").mkdir(parents=True, exist_ok=True)
    (root / "run" / "host-ns.pid").write_text(f"{os.getpid()}\n")


def _same_mount_ns(pid: int) -> bool:
    try:
        return os.readlink("/proc/self/ns/mnt") == os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return True


def ct_hidden_under(path: Path) -> str | None:
    """The container bind dir that hides `path`, if any (``/root``, ``/tmp``...)."""
    p = str(path)
    for d in CT_BIND_DIRS:
        if p == d or p.startswith(d + "/"):
            return d
    return None


def ct_script(state: LabState, vmid: int, conf: LxcConfig, *, cwd: str = "/root") -> str:
    """Setup script of container `vmid`'s view; ends by running ``"$@"`` with a clean environment."""
    from provisioner.lab.commands.ct_seed import seed_container

    root = state.root
    ct = state.ct_dir(vmid)
    rootfs = seed_container(state, vmid, conf)
    if state.has_scenario("disk-full"):
        ensure_disk_full_opt(state, vmid)
    d = write_node_files(state)
    work = ct / "work"
    for sub in CT_OVERLAY_DIRS:
        (work / sub.strip("/")).mkdir(parents=True, exist_ok=True)
    stage = "/run/lab-stage"
    s = _Script()
    s.mount("-t", "tmpfs", "-o", "mode=755,size=16m", "lab-ct-run", "/run")
    names = {"/etc": "etc", "/usr": "usr", "/var": "var", "/opt": "opt", "/root": "root", "/tmp": "tmp",
             "/usr/local": "usrlocal", "/var/log": "varlog", "/dev": "dev"}
    s.run("mkdir", "-p", *(f"{stage}/{n}" for n in names.values()))
    for top in CT_OVERLAY_DIRS:
        _overlay(s, f"lab-ct{vmid}-{names[top]}", top, rootfs / top.strip("/"), work / top.strip("/"),
                 f"{stage}/{names[top]}")
    for top in CT_BIND_DIRS:
        s.mount("--bind", rootfs / top.strip("/"), f"{stage}/{names[top]}")
    shm = SHM_SMALL_SIZE if state.has_scenario("shm-small") else "50%"
    s.mount("-t", "tmpfs", "-o", "mode=755,size=1m", f"lab-ct{vmid}-dev", f"{stage}/dev")
    _populate_dev(s, f"{stage}/dev", ct_devices(state, conf), shm)
    for keep in keep_paths(root):
        hidden_by = ct_hidden_under(keep)
        if hidden_by is None:
            continue
        target = f"{stage}/{names[hidden_by]}/{str(keep)[len(hidden_by):].lstrip('/')}"
        s.raw(f"if [ -d {shlex.quote(str(keep))} ]; then mkdir -p {shlex.quote(target)}; "
              f"mount -n --bind {shlex.quote(str(keep))} {shlex.quote(target)}; fi")
    for top in ("/etc", "/usr", "/var", "/usr/local", "/var/log", "/opt", "/root", "/tmp", "/dev"):
        s.mount("--move", f"{stage}/{names[top]}", top)
    s.run("rmdir", *(f"{stage}/{n}" for n in names.values()), stage)
    _bind_node_facts(s, d)
    s.raw(f"cd {shlex.quote(cwd)} 2>/dev/null || cd /")
    s.raw('exec "$@"')
    return s.text()


def ct_env(vmid: int, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment ``lxc-attach --clear-env`` gives a container command."""
    env = {"PATH": CT_PATH, "HOME": "/root", "USER": "root", "LOGNAME": "root", "container": "lxc",
           "LANG": "C.UTF-8", "TERM": "linux"}
    env.update(extra or {})
    return env


def ct_argv(state: LabState, vmid: int, argv: Sequence[str], *, cwd: str = "/root") -> list[str]:
    """argv, run anywhere on the machine (also inside the node view), that runs `argv` in the container."""
    conf = state.read_conf(vmid)
    script = ct_script(state, vmid, conf, cwd=cwd)
    env_args = [f"{k}={v}" for k, v in ct_env(vmid).items()]
    inner = [*unshare_prefix(), "bash", "-c", script, f"lab-ct{vmid}", "env", "-i", *env_args, *argv]
    return [*host_ns_prefix(state.root), *inner]


def host_ns_prefix(root: Path) -> list[str]:
    """argv prefix that runs a command in the machine's own mount namespace (from the node view)."""
    pid = host_ns_pid(root)
    if pid is not None and not _same_mount_ns(pid):
        return ["nsenter", f"--mount=/proc/{pid}/ns/mnt", "--"]
    return []


def ensure_disk_full_opt(state: LabState, vmid: int) -> None:
    """Scenario disk-full: the container's /opt is a small tmpfs, mounted once in the machine's namespace."""
    opt = state.ct_root(vmid) / "opt"
    opt.mkdir(parents=True, exist_ok=True)
    q = shlex.quote(str(opt))
    cmd = (f"mountpoint -q {q} || mount -n -t tmpfs -o size={DISK_FULL_OPT_SIZE},mode=755 lab-ct{vmid}-opt {q}")
    subprocess.run([*host_ns_prefix(state.root), "sh", "-c", cmd], check=False, capture_output=True)


def release_mounts(root: Path) -> None:
    """Unmount what the lab mounted under `root` in this namespace (scenario disk-full's tmpfs)."""
    prefix = str(root.resolve()) + "/"
    try:
        with open("/proc/self/mountinfo") as fh:
            points = [line.split()[4] for line in fh]
    except OSError:
        return
    for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
