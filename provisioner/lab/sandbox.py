"""User-namespace sandboxes with their own root: the lab node's view and each lab container's view.

Both are built by a generated bash script run under ``unshare -UrmC --propagation private`` (a
user, mount and cgroup namespace; the same as root and as any other user), which assembles a
fresh tmpfs root and enters it with ``pivot_root``. Nothing outside the lab root is writable
from inside, and only what is bound in is visible:

  /usr /bin /sbin /lib*   read-only binds of the machine's (symlinks copied as symlinks)
  keep paths              this Python's prefixes, the project's ``provisioner`` package, the
                          machine's Pythons and uv: read-only binds at their own paths; the lab
                          root read-write (the stand-ins keep their state there)
  /proc /sys              recursive binds (``/sys`` read-only), a cgroup2 mount on /sys/fs/cgroup
                          (``stat -fc %T`` -> ``cgroup2fs`` as on PVE 8/9)

Node view (every command of the SSH endpoint runs in it):
  /etc                 overlay: lower = the machine's /etc, upper = ``<root>/etc`` (so
                       ``/etc/pve/lxc/<vmid>.conf`` is exactly LabState's file)
  /tmp /root /var /srv /opt /home /mnt /media /run   the node's own dirs, ``<root>/node/fs/*``
                       (the lab's SFTP server is chrooted there, see `node_fs`)
  /sys/module /proc/driver /proc/devices   binds of the node facts (``<root>/node/...``)
  /.lab/etc            the machine's /etc, read-only (the lower layer of the containers' /etc)

Container view (``pct exec``; built inside the node view):
  /etc, /usr, /var     overlays whose upper layers live in the container's rootfs
  /opt /root /tmp /usr/local /var/log /srv /home /mnt /media   binds of the container's own dirs

Device nodes (both views): a user namespace cannot mknod, so each passed node is a bind of the
machine's ``/dev/null`` at its path (a character device: ``test -c`` holds, open() works). The
lab's ``ls`` and ``stat`` (bound over ``/usr/bin/ls`` and ``/usr/bin/stat`` in the view) report
the lab's major:minor for those paths from the view's device table (``/.lab/devices``); a node
the container's device cgroup denies is listed there as ``denied`` and the lab's stand-ins fail
on it as the real driver would.
Where the kernel forbids unprivileged user namespaces, `unshare_prefix` raises
`SandboxUnavailable` (the lab says so in one line and exits 2; it never simulates a broken host).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from provisioner.lab import render, safe_fs
from provisioner.lab.commands.ct_seed import seed_container
from provisioner.lab.commands.installer import installer_env
from provisioner.lab.host_tools import discover_pythons as discover_pythons
from provisioner.lab.host_tools import find_uv as find_uv
from provisioner.lab.host_tools import lab_python as lab_python
from provisioner.lab.host_tools import lab_pythonpath as lab_pythonpath
from provisioner.lab.host_tools import project_dir as project_dir
from provisioner.lab.profiles import get_profile
from provisioner.lab.profiles import lab_host as profile_host
from provisioner.lab.settings import StorageSpec
from provisioner.lab.state import PRIVATE_DIR, LabSettings, LabState, bin_dir, make_private_dir
from provisioner.proxmox.lxc_conf import LxcConfig, parse_property_string

#: PATH of a login on the lab node (stand-ins first, then sshd's default PATH)
NODE_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: PATH lxc-attach --clear-env gives a container command
CT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
REAL_DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
DISK_FULL_OPT_SIZE = "8m"
SHM_SMALL_SIZE = "64m"
#: container directories below its overlays (`CT_OVERLAY_DIRS`) that are binds of the container's own directories;
#: everything else (/opt, /root, /tmp, /srv, /home...) lies in the container's root mount itself, one file
#: system as a real LXC rootfs is (pve-container mounts the volume at rootfs/ and LXC pivots into it), so
#: that link(2) between /root/.cache/uv and a venv under /opt works as it does there (uv hardlinks)
CT_BIND_DIRS = ("/usr/local", "/var/log")
#: the node's own writable directories (under ``<root>/node/fs``)
NODE_OWN_DIRS = ("tmp", "root", "var", "srv", "opt", "home", "mnt", "media", "run")
#: top-level system directories bound read-only into every view
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
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
    #: a real character device made by `made_node` (as root), bound at `path`; None = /dev/null
    source: str | None = None


def made_node(root: Path, major: int, minor: int, mode: int) -> str | None:
    """A real character device major:minor with `mode` under ``<root>/run/devnodes`` (made once, as
    root in the machine's own namespace); None where this process cannot mknod (not root)."""
    path = root / "run" / "devnodes" / f"c{major}-{minor}-{mode:o}"
    if safe_fs.exists(root, path):
        return str(path)
    if os.geteuid() != 0:
        return None
    try:  # never through a link planted under run/ (this runs as root on the machine)
        safe_fs.mknod(root, path, 0o020000 | mode, os.makedev(major, minor))
    except OSError:
        return None
    return str(path)


# --- helpers --------------------------------------------------------------------------------


UNSHARE = ("unshare", "-UrmC", "--propagation", "private", "--")


@cache
def unshare_prefix() -> tuple[str, ...]:
    """argv prefix that runs a command in a private user + mount + cgroup namespace (as root too)."""
    if shutil.which("unshare") is None:
        raise SandboxUnavailable("LAB: `unshare` (util-linux) is not installed; install util-linux to run the lab")
    # a user's PATH on Debian has no sbin directories; the views' own PATH has (NODE_DEFAULT_PATH)
    if shutil.which("pivot_root", path=f"{os.environ.get('PATH', '')}:{NODE_DEFAULT_PATH}") is None:
        raise SandboxUnavailable("LAB: `pivot_root` (util-linux) is not installed; install util-linux to run the lab")
    probe = subprocess.run([*UNSHARE, "true"], capture_output=True, check=False)
    if probe.returncode == 0:
        return UNSHARE
    raise SandboxUnavailable(
        "LAB: this kernel does not let this user create user namespaces (`unshare -Urm` failed: "
        + probe.stderr.decode(errors="replace").strip()
        + "); the lab needs them (e.g. sysctl kernel.unprivileged_userns_clone=1)")


def _prefix_of(exe: Path) -> Path:
    real = exe.resolve()
    return real.parent.parent if real.parent.name == "bin" else real.parent


def keep_paths(root: Path) -> list[tuple[Path, bool]]:
    """Machine paths bound read-only into every view at their own path: (path, writable=False). Of the
    project only its ``provisioner`` package (the stand-ins' code) is visible. The lab root is not one
    of them: the node gets it by `_lab_window_node`, a container by `_lab_window_ct`."""
    ro = {project_dir() / "provisioner", Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(),
          _prefix_of(Path(sys.executable))}
    for exe in discover_pythons().values():
        ro.add(_prefix_of(exe))
    ro.update(p for p in lab_pythonpath()[1:] if p != project_dir())
    uv = find_uv()
    if uv is not None:
        ro.add(uv.parent)
    lab = root.resolve()
    system = [Path("/" + d) for d in SYSTEM_DIRS]  # in every view already (a container's /usr is its overlay)
    paths = {p: False for p in ro if p.exists() and not _under(p, lab) and not _under(lab, p)
             and not any(_under(p, d) for d in system)}
    # a path inside another kept path comes with it (binding it again would only hide nothing)
    out = [(p, w) for p, w in paths.items() if not any(q != p and _under(p, q) and not wq
                                                       for q, wq in paths.items())]
    return sorted(out, key=lambda pw: len(str(pw[0])))


def _under(p: Path, q: Path) -> bool:
    return p == q or str(p).startswith(str(q).rstrip("/") + "/")


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
    """Fill a fresh tmpfs at `dev` (the parent's /dev is still visible while this runs)."""
    d = str(dev)
    for name in REAL_DEV_NODES:
        s.raw(f"if [ -e /dev/{name} ]; then : > {shlex.quote(d + '/' + name)}; "
              f"mount -n --bind /dev/{name} {shlex.quote(d + '/' + name)}; fi")
    s.run("mkdir", "-p", f"{d}/pts", f"{d}/shm")
    s.raw(f"mount -n --rbind /dev/pts {shlex.quote(d + '/pts')} 2>/dev/null || true")
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
        # a user namespace cannot mknod: a node made beforehand on the machine (as root), else a bind of
        # the machine's /dev/null stands for it; the view's device table gives the lab's ls/stat and
        # stand-ins its major:minor and mode
        s.raw(f": > {shlex.quote(path)}")
        s.mount("--bind", node.source or "/dev/null", path)


def _sed_literal(text: str) -> str:
    """`text` as a literal in a sed BRE delimited by ``%`` (device paths: letters, digits, ``/-_.``)."""
    if not re.fullmatch(r"[A-Za-z0-9/_.-]+", text):
        raise ValueError(f"unexpected device path {text!r}")
    return text.replace(".", "\\.")


def _mode_string(mode: int) -> str:
    bits = "rwxrwxrwx"
    return "c" + "".join(ch if mode & (1 << (8 - i)) else "-" for i, ch in enumerate(bits))


def _owner(uid: int) -> str:
    return "root" if uid == 0 else str(uid)


def write_device_table(root: Path, path: Path, nodes: Iterable[DeviceNode], denied: Iterable[str] = ()) -> None:
    """The view's device table (``path major minor mode uid gid allowed|denied`` per line) and the
    sed script (``<path>.sed``) that the lab's ls/stat pass their output through."""
    denied_set = set(denied)
    rows, sed = [], []
    for n in nodes:
        rows.append(f"{n.path} {n.major} {n.minor} {n.mode:o} {n.uid} {n.gid} "
                    f"{'denied' if n.path in denied_set else 'allowed'}\n")
        base = _sed_literal(n.path.rsplit("/", 1)[1])
        own = f"{_owner(n.uid)} {_owner(n.gid)}"
        # ls -l: "crw-rw-rw- 1 root root 1, 3 Dec  1 22:00 /dev/nvidia0" (or the bare name)
        sed.append(f"\\%[ /]{base}$% s%^c[-rwxsStT]\\{{9\\}}\\([.+@]\\?\\) \\+\\([0-9]\\+\\) \\+[^ ]\\+ \\+[^ ]\\+ \\+1, \\+3 "
                   f"%{_mode_string(n.mode)}\\1 \\2 {own} {n.major}, {n.minor} %")
        # stat -c '... %t %T ... %a' of the node: "/dev/nvidia0 character special file 1 3 666"
        p = _sed_literal(n.path)
        sed.append(f"\\%^{p} % {{ s% 1 3\\( \\|$\\)% {n.major:x} {n.minor:x}\\1%; s% 666$% {n.mode:o}%; }}")
    _write(root, path, "".join(rows))
    _write(root, path.with_name(path.name + ".sed"), "\n".join(sed) + "\n")


#: ls/stat of a view: the real tool's output with the device table's numbers for the lab's nodes
VIEW_TOOL = """#!/bin/bash
# LAB: {name} of the lab's view (the real {name}, device numbers from the lab's device table)
set -o pipefail
if [ -s /.lab/devices.sed ]; then
  (exec -a {name} /.lab/bin/{name} "$@") | sed -f /.lab/devices.sed
else
  exec -a {name} /.lab/bin/{name} "$@"
fi
"""


def read_device_table(path: str | Path = "/.lab/devices") -> dict[str, tuple[int, int, int, bool]]:
    """The view's device table: path -> (major, minor, mode, allowed); empty outside a lab view."""
    table: dict[str, tuple[int, int, int, bool]] = {}
    try:
        text = Path(path).read_text()
    except OSError:
        return table
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 7:
            table[parts[0]] = (int(parts[1]), int(parts[2]), int(parts[3], 8), parts[6] == "allowed")
    return table


# --- lab host model and node files ------------------------------------------------------------

#: kernel each lab PVE version runs
PVE_KERNELS = {"8.1": "6.5.13-5-pve", "8.4": "6.8.12-10-pve", "9": "6.14.11-4-pve"}


def lab_host(settings: LabSettings) -> render.LabHost:
    """The render model of the lab host described by lab.json (its profile, `provisioner.lab.profiles`)."""
    return profile_host(settings)


def _write(root: Path, path: Path, text: str) -> None:
    """Write in place and only when changed: live bind mounts of the file keep showing it (a replaced
    file would leave them on a deleted inode, onto which nothing can be mounted). `path` is under the
    lab `root`; no component below it is followed as a link (the node can write there, the lab server
    runs outside the views: `provisioner.lab.safe_fs`)."""
    data = text.encode()
    try:
        if safe_fs.read_bytes(root, path) == data:
            return
    except OSError:
        pass
    try:
        safe_fs.write_bytes(root, path, data, in_place=True)
    except OSError:
        # the lab's own file was replaced (by a link, a FIFO...): it is removed, never followed, and
        # written afresh (a view that bound the old file sees the new one when it is built again)
        safe_fs.remove_tree(root, path)
        safe_fs.write_bytes(root, path, data, in_place=True)



def node_dir(root: Path) -> Path:
    return root / "node"


def write_node_files(state: LabState) -> Path:
    """(Re)write the node's /sys/module, /proc/driver and /proc/devices stand-ins; returns their dir."""
    settings = state.settings()
    host = lab_host(settings)
    root = state.root
    d = node_dir(root)
    _write(root, d / "sys-module" / "nvidia" / "version", render.render_sys_module_version(host))
    _write(root, d / "proc-driver" / "nvidia" / "version", render.render_proc_driver_version(host))
    _write(root, d / "proc-driver" / "nvidia" / render.LAB_FABRIC_FILE, render.render_lab_fabric_state(host))
    devices = render.render_proc_devices(host)
    uvm = d / "sys-module" / "nvidia_uvm"
    if settings.host_uvm_nodes:
        _write(root, uvm / "version", render.render_sys_module_version(host))
    else:
        devices = "".join(line for line in devices.splitlines(keepends=True) if not line.endswith(" nvidia-uvm\n"))
        safe_fs.remove_tree(root, uvm)
    _write(root, d / "proc-devices", devices)
    if get_profile(settings.profile).vgpu_manager:  # the vGPU manager's module (every loaded module has initstate)
        _write(root, d / "sys-module" / "nvidia_vgpu_vfio" / "initstate", "live\n")
    for g in host.gpus:
        _write(root, d / "proc-driver" / "nvidia" / "gpus" / render.proc_bus_dir(g) / "information",
               render.render_gpu_information(host, g))
    for sub in ("stage", "hold"):
        safe_fs.make_dirs(root, root / "run" / sub)
    return d


def make_device_nodes(state: LabState) -> None:
    """Make (as root) the real device nodes the views bind, for every mode a view may give them."""
    numbers = set(state.host_devices().values())
    uvm_major = state.settings().uvm_major
    numbers |= {(uvm_major, 0), (uvm_major, 1)}  # nvidia-uvm(-tools), also before nvidia-modprobe -u
    for major, minor in numbers:
        for mode in (0o666, 0o660, 0o000):
            made_node(state.root, major, minor, mode)


def add_node_devices(state: LabState, paths: Iterable[str]) -> None:
    """In the node view: make `paths` (of `LabState.host_devices()`) appear in this view's /dev now
    (an empty file with the node bound onto it) and list them in the view's device table."""
    devices = {n.path: n for n in node_devices(state)}
    for path in paths:
        node = devices.get(path)
        if node is None or os.path.exists(path):
            continue
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "a"):
                pass
        except OSError:
            continue
        subprocess.run(["mount", "-n", "--bind", node.source or "/dev/null", path], check=False, capture_output=True)
    write_device_table(state.root, state.root / "run" / "devtab" / "node", devices.values())


def node_devices(state: LabState) -> list[DeviceNode]:
    return [DeviceNode(path, major, minor, 0o666, source=made_node(state.root, major, minor, 0o666))
            for path, (major, minor) in sorted(state.host_devices().items())]


def _bind_node_facts(s: _Script, d: Path, r: str = "") -> None:
    s.mount("--bind", d / "sys-module", f"{r}/sys/module")
    s.raw(f"if [ -d {_q(r + '/proc/driver')} ]; then mount -n --bind {_q(d / 'proc-driver')} {_q(r + '/proc/driver')}; fi")
    s.mount("--bind", d / "proc-devices", f"{r}/proc/devices")


def node_fs(root: Path) -> Path:
    """The node's own writable directories (its /tmp, /root, /var ...); the lab's SFTP server's root."""
    return root / "node" / "fs"


#: the folder of each content type below a dir storage's path (pve-storage src/PVE/Storage/Plugin.pm
#: ``$vtype_subdirs``, github:proxmox/pve-storage @0c56bad "bump version to 9.1.7")
CONTENT_SUBDIRS = {"images": "images", "rootdir": "private", "iso": "template/iso", "vztmpl": "template/cache",
                   "backup": "dump", "snippets": "snippets", "import": "import"}


def make_node_fs(root: Path, storages: Sequence[StorageSpec] = ()) -> Path:
    """The node's own directories; below each dir storage's path, the folder of each content type it holds, as
    pve-storage's ``activate_storage`` makes them (Plugin.pm: ``make_path`` of ``get_subdir`` for each content
    type unless ``create-subdirs 0``; ``rootdir`` also gets ``dump``) -- a node's ``local`` storage has
    ``/var/lib/vz/template/cache``, where its container templates are."""
    fs = node_fs(root)
    for sub in NODE_OWN_DIRS:
        (fs / sub).mkdir(parents=True, exist_ok=True)
    (fs / "tmp").chmod(0o1777)
    for st in storages:
        if st.type != "dir" or not st.path:
            continue
        wanted = set(st.content) | ({"backup"} if "rootdir" in st.content else set())
        for content in sorted(wanted & CONTENT_SUBDIRS.keys()):
            safe_fs.make_dirs(root, fs / st.path.strip("/") / CONTENT_SUBDIRS[content])
    return fs


def new_root_dir(root: Path) -> Path:
    """Empty directory each view mounts its fresh root on (mounts are per namespace: one dir serves all)."""
    return root / "run" / "newroot"


def view_tool_dir(root: Path) -> Path:
    return root / "run" / "view-bin"


def write_view_tools(root: Path) -> Path:
    d = view_tool_dir(root)
    for name in ("ls", "stat"):
        path = d / name
        _write(root, path, VIEW_TOOL.format(name=name))
        safe_fs.chmod(root, path, 0o755)
    return d


def _q(p: str | Path) -> str:
    return shlex.quote(str(p))


def _ro_bind(s: _Script, src: str | Path, dst: str | Path, *, recursive: bool = True) -> None:
    s.mount("--rbind" if recursive else "--bind", src, dst)
    s.raw(f"mount -n -o remount,bind,ro {_q(dst)} 2>/dev/null || true")


def _system_dirs(s: _Script, r: str) -> None:
    """/usr, /bin, /lib* of the parent view, read-only (symlinks such as /bin -> usr/bin copied)."""
    for top in SYSTEM_DIRS:
        s.raw(f"if [ -L /{top} ]; then ln -s \"$(readlink /{top})\" {_q(r + '/' + top)}; "
              f"elif [ -d /{top} ]; then mkdir -p {_q(r + '/' + top)}; "
              f"mount -n --rbind /{top} {_q(r + '/' + top)}; "
              f"mount -n -o remount,bind,ro {_q(r + '/' + top)} 2>/dev/null || true; fi")


def _kernel_dirs(s: _Script, r: str) -> None:
    s.run("mkdir", "-p", f"{r}/proc", f"{r}/sys", f"{r}/dev")
    s.mount("--rbind", "/proc", f"{r}/proc")
    _ro_bind(s, "/sys", f"{r}/sys")
    s.raw(f"mount -n -t cgroup2 cgroup2 {_q(r + '/sys/fs/cgroup')} 2>/dev/null || true")


def _keep(s: _Script, r: str, root: Path) -> None:
    for path, writable in keep_paths(root):
        target = f"{r}{path}"
        s.raw(f"if [ -d {_q(path)} ]; then mkdir -p {_q(target)}; "
              f"mount -n --rbind {_q(path)} {_q(target)}; "
              + ("" if writable else f"mount -n -o remount,bind,ro {_q(target)} 2>/dev/null || true; ")
              + "fi")


#: what a container's stand-ins (apt-get, nvidia-smi, the driver installer) read or write of the lab root:
#: ``lab.json`` (through a read-only bind of the root), the resident stand-in server's
#: socket, the once-markers and the apt-lock counter; everything else is covered
CT_WINDOW_HIDDEN = ("private", "ct", "etc", "tasks", "node", "bin", "run", "api-requests.jsonl", "lab.log", ".lock")


def _lab_window_node(s: _Script, r: str, root: Path) -> None:
    """The lab root in the node view, at its own path: read-write (the node's stand-ins keep the lab's
    state there), with ``private/`` (the lab's secrets) covered by an empty read-only tmpfs."""
    t = f"{r}{root}"
    s.run("mkdir", "-p", t)
    s.mount("--rbind", root, t)
    s.mount("-t", "tmpfs", "-o", "ro,mode=000,size=4k", "lab-private", f"{t}/{PRIVATE_DIR}")


def _lab_window_ct(s: _Script, r: str, root: Path) -> None:
    """The lab root in a container view: read-only, every part but ``lab.json`` covered (`CT_WINDOW_HIDDEN`),
    the stand-ins' socket and markers bound back. Mounts made before the view's own user namespace
    (`_enter`): the container cannot remove or remount them (locked, see mount_namespaces(7))."""
    t = f"{r}{root}"
    s.run("mkdir", "-p", t)
    s.mount("--rbind", root, t)  # (recursive: in the node view the root carries locked mounts)
    s.raw(f"mount -n -o remount,bind,ro {_q(t)}")
    for name in CT_WINDOW_HIDDEN:
        p = f"{t}/{name}"
        # read-only from the start ("run" gets the stand-ins' binds below): a later `mount -o remount,ro`
        # makes libmount pass back the options /proc/self/mountinfo shows, and for a lab run by a plain
        # user that is the tmpfs's `uid=<the user's uid>`, unmapped in this namespace: EINVAL
        opts = "mode=755,size=64k" if name == "run" else "ro,mode=755,size=64k"
        s.raw(f"if [ -d {_q(p)} ]; then mount -n -t tmpfs -o {opts} lab-hidden {_q(p)}; "
              f"elif [ -e {_q(p)} ]; then mount -n --bind /dev/null {_q(p)}; fi")
    run = f"{t}/run"
    for sub in ("resident", "once"):
        s.run("mkdir", "-p", f"{run}/{sub}")
        s.mount("--bind", root / "run" / sub, f"{run}/{sub}")
    # the socket is reached through a read-only mount too (connect(2) does not write the file system)
    s.raw(f"mount -n -o remount,bind,ro {_q(run + '/resident')}")
    s.raw(f": > {_q(run + '/apt-lock-attempts')}")
    s.mount("--bind", root / "run" / "apt-lock-attempts", f"{run}/apt-lock-attempts")
    s.raw(f"mount -n -o remount,bind,ro {_q(run)}")


def _view_tools(s: _Script, r: str, root: Path, table: Path) -> None:
    """The lab's ls/stat over the view's /usr/bin/ls and /usr/bin/stat; the real ones in /.lab/bin."""
    tools = write_view_tools(root)
    s.run("mkdir", "-p", f"{r}/.lab/bin")
    s.raw(f": > {_q(r + '/.lab/devices')}; : > {_q(r + '/.lab/devices.sed')}")
    s.mount("--bind", table, f"{r}/.lab/devices")
    s.mount("--bind", table.with_name(table.name + ".sed"), f"{r}/.lab/devices.sed")
    for name in ("ls", "stat"):
        s.raw(f"real=$(command -v /.lab/bin/{name} || readlink -f /usr/bin/{name}); "
              f": > {_q(r + '/.lab/bin/' + name)}; mount -n --bind \"$real\" {_q(r + '/.lab/bin/' + name)}; "
              f"mount -n --bind {_q(tools / name)} {_q(r + '/usr/bin/' + name)}")


def _enter(s: _Script, r: str, cwd: str) -> None:
    # pivot_root(".", "."): the old root is stacked on the new one and detached at once (pivot_root(2), NOTES;
    # runc does the same): no put_old directory in the new root, which for a container is its rootfs on disk,
    # shared by the views of all its commands at once
    s.raw(f"cd {_q(r)}")
    s.run("pivot_root", ".", ".")
    s.run("umount", "-n", "-l", ".")
    s.raw("cd /")
    s.raw(f"cd {_q(cwd)} 2>/dev/null || cd /")
    # a user namespace of its own (root maps to this view's root): every mount of the view is locked
    # in it (mount_namespaces(7), "restrictions on mount namespaces"): nothing covered can be uncovered,
    # nothing read-only remounted read-write, from inside. The cgroup namespace is made again, owned by
    # that user namespace: `held_node_argv` joins both with nsenter, and setns(2) into a cgroup namespace
    # needs CAP_SYS_ADMIN in the user namespace that owns it, which an unprivileged lab user has only in
    # the innermost one (cgroup_namespaces(7); as root the outer owner worked, as a plain user it did not)
    s.raw('exec unshare -U -m -C --map-root-user --propagation private -- "$@"')


def own_etc_dirs(root: Path, lower: Path = Path("/etc")) -> None:
    """The node's root owns its /etc, as on a real node: every directory of the lower /etc gets a
    directory in the overlay's upper layer (``<root>/etc``), owned by the lab's user, so the node can
    create files anywhere in /etc (a unit in /etc/systemd/system, /etc/gpu-provisioner/...) also in a
    user namespace, where the machine's own directories belong to an unmapped owner. Done once."""
    marker = root / "run" / "etc-dirs-owned"
    if marker.exists():
        return
    upper = root / "etc"
    for dirpath, dirnames, _ in os.walk(lower, followlinks=False):
        rel = os.path.relpath(dirpath, lower)
        for name in list(dirnames):
            src = os.path.join(dirpath, name)
            if os.path.islink(src) or not os.access(src, os.R_OK | os.X_OK):
                dirnames.remove(name)  # a link stays the lower layer's link; unreadable trees are left alone
                continue
            with contextlib.suppress(OSError):
                (upper / rel / name).mkdir(parents=True, exist_ok=True)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("LAB: the node's /etc directories are its own\n")


def node_script(state: LabState) -> str:
    """Setup script of the node view; ends by running ``"$@"`` in the node's own root."""
    d = write_node_files(state)
    root = state.root
    work = root / "run" / "overlay-work" / "etc"
    work.mkdir(parents=True, exist_ok=True)
    (root / "etc").mkdir(parents=True, exist_ok=True)
    own_etc_dirs(root)
    fs = make_node_fs(root, state.settings().storages)
    make_private_dir(root)
    nr = new_root_dir(root)
    nr.mkdir(parents=True, exist_ok=True)
    devices = node_devices(state)
    table = root / "run" / "devtab" / "node"
    write_device_table(root, table, devices)
    r = str(nr)
    s = _Script()
    s.mount("-t", "tmpfs", "-o", "mode=755", "lab-node-root", r)
    _system_dirs(s, r)
    _kernel_dirs(s, r)
    s.mount("-t", "tmpfs", "-o", "mode=755,size=1m", "lab-node-dev", f"{r}/dev")
    _populate_dev(s, f"{r}/dev", devices, "50%")
    s.run("mkdir", "-p", f"{r}/etc", f"{r}/.lab/etc", f"{r}/.lab/usr", f"{r}/.lab/var")
    _overlay(s, "lab-node-etc", "/etc", root / "etc", work, f"{r}/etc")
    # pristine lower layers for the containers' /etc, /usr, /var (the node's own carry its binds)
    for top in CT_OVERLAY_DIRS:
        # a plain bind when it can (overlayfs refuses a lower layer with locked submounts)
        s.raw(f"mount -n --bind {top} {_q(r + '/.lab' + top)} 2>/dev/null || mount -n --rbind {top} {_q(r + '/.lab' + top)}")
        s.raw(f"mount -n -o remount,bind,ro {_q(r + '/.lab' + top)} 2>/dev/null || true")
    for sub in NODE_OWN_DIRS:
        s.run("mkdir", "-p", f"{r}/{sub}")
        s.mount("--bind", fs / sub, f"{r}/{sub}")
    _keep(s, r, root)
    _lab_window_node(s, r, root)
    _view_tools(s, r, root, table)
    _bind_node_facts(s, d, r)
    _enter(s, r, "/root")
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
    uv = find_uv()
    if uv is not None:
        env["PROVISIONER_LAB_UV"] = str(uv)
    env.update(extra or {})
    return env


def node_argv(state: LabState, argv: Sequence[str]) -> list[str]:
    """argv that runs `argv` in the lab node's view."""
    return [*unshare_prefix(), "bash", "-c", node_script(state), "lab-node", *argv]


#: what an SSH command does on entering the held node view (`held_node_argv`): a mount namespace of
#: its own with a fresh /etc overlay (LabState writes ``<root>/etc`` by rename, which a long-lived
#: overlay would not show), then ``"$@"`` in /root as in a fresh view
#: Each command's overlay gets a work directory of its own (beside the holder's, same file system): overlayfs
#: empties and recreates `work/` in its workdir at every mount (ovl_workdir_create, fs/overlayfs/super.c), so
#: commands started together on one workdir raced (a mount failed, exit 32) and took each other's work dir away.
HELD_ENTER = """set -e
mkdir -p "$2-cmd"
w=$(mktemp -d "$2-cmd/w.XXXXXXXX")
mount -n -t overlay lab-node-etc -o "lowerdir=/.lab/etc,upperdir=$1,workdir=$w,index=off" /etc 2>/dev/null || \\
  mount -n -t overlay lab-node-etc -o "lowerdir=/.lab/etc,upperdir=$1,workdir=$w" /etc
shift 2
cd /root 2>/dev/null || cd /
exec "$@"
"""


def node_holder_argv(script: str, sock: Path) -> list[str]:
    """argv of the node view's holder: `provisioner.lab.resident` serving `sock`, in the view that
    `script` (`node_script`) builds. A changed script means a stale holder (the SSH endpoint starts
    another and the commands already in the old view finish there)."""
    return [*unshare_prefix(), "bash", "-c", script, "lab-node", lab_python(), "-m", "provisioner.lab.resident",
            "--socket", str(sock)]


def held_node_argv(state: LabState, holder_pid: int, argv: Sequence[str]) -> list[str]:
    """argv that runs `argv` in the node view held by `holder_pid` (no view to build: ``nsenter``, a
    private mount namespace and a fresh /etc overlay)."""
    root = state.root
    return ["nsenter", "--user", "--mount", "--cgroup", "--preserve-credentials", "-t", str(holder_pid), "-r", "-w",
            "--", "unshare", "-m", "--propagation", "private", "--", "bash", "-c", HELD_ENTER, "lab-node",
            str(root / "etc"), str(root / "run" / "overlay-work" / "etc"), *argv]


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


def ensure_disk_full_opt(state: LabState, vmid: int) -> bool:
    """Scenario disk-full: the container's /opt is a small tmpfs, mounted once in the machine's own
    namespace (as root; the views made afterwards see it, and an operator can grow it). True when it
    was mounted now (a held view made before it does not have it)."""
    if os.geteuid() != 0:
        return False
    opt = state.ct_root(vmid) / "opt"
    try:
        with open("/proc/self/mountinfo") as fh:
            if any(line.split()[4] == str(opt) for line in fh):
                return False
    except OSError:
        return False
    try:  # the directory as opened without following a link (the node can write the container's root)
        fd = safe_fs.open_dir(state.root, opt, create=True)
    except OSError:
        return False
    try:
        return subprocess.run(["mount", "-n", "-t", "tmpfs", "-o", f"size={DISK_FULL_OPT_SIZE},mode=755",
                               f"lab-ct{vmid}-opt", f"/proc/self/fd/{fd}"], check=False, capture_output=True,
                              pass_fds=(fd,)).returncode == 0
    finally:
        os.close(fd)


def record_host_ns(root: Path) -> None:
    """Remember the lab server's pid (kept for callers; views no longer enter the machine's namespace)."""
    (root / "run").mkdir(parents=True, exist_ok=True)
    (root / "run" / "host-ns.pid").write_text(f"{os.getpid()}\n")


def ct_script(state: LabState, vmid: int, conf: LxcConfig, *, cwd: str = "/root") -> str:
    """Setup script of container `vmid`'s view (run inside the node view, or anywhere on the machine);
    ends by running ``"$@"`` in the container's own root."""
    root = state.root
    ct = state.ct_dir(vmid)
    rootfs = seed_container(state, vmid, conf)
    d = write_node_files(state)
    work = ct / "work"
    for sub in CT_OVERLAY_DIRS:
        (work / sub.strip("/")).mkdir(parents=True, exist_ok=True)
    _ct_mount_points(root, rootfs)
    for sub in ("resident", "once"):
        (root / "run" / sub).mkdir(parents=True, exist_ok=True)
    counter = root / "run" / "apt-lock-attempts"
    if not counter.exists():
        counter.touch()
    nr = new_root_dir(root)
    nr.mkdir(parents=True, exist_ok=True)
    denied = denied_paths(state, conf)
    table = root / "run" / "devtab" / f"ct{vmid}"
    devices = [DeviceNode(n.path, n.major, n.minor, n.mode, n.uid, n.gid, made_node(root, n.major, n.minor, n.mode))
               for n in ct_devices(state, conf)]
    write_device_table(root, table, devices, denied)
    r = str(nr)
    s = _Script()
    # the container's root is its rootfs directory itself (one mount: see `CT_BIND_DIRS`), with what the lab
    # mounted below it (the disk-full scenario's small /opt volume, as a PVE mount point would be)
    s.mount("--rbind", rootfs, r)
    s.run("mkdir", "-p", *(f"{r}{top}" for top in CT_OVERLAY_DIRS))
    s.raw("if [ -d /.lab/usr ]; then lower=/.lab; else lower=; fi")
    for top in CT_OVERLAY_DIRS:
        subs = submounts_under(top)
        if subs:
            _split_overlay(s, f"lab-ct{vmid}-{top.strip('/')}", top, rootfs, work, r, subs)
        else:
            _ct_overlay(s, f"lab-ct{vmid}-{top.strip('/')}", top, rootfs / top.strip("/"), work / top.strip("/"),
                        r + top)
    for top in SYSTEM_DIRS:
        if top != "usr":
            # (the link, made by the first command, stays in the rootfs: a real rootfs carries /bin -> usr/bin)
            s.raw(f"if [ -L /{top} ]; then [ -L {_q(r + '/' + top)} ] || ln -s \"$(readlink /{top})\" {_q(r + '/' + top)}; "
                  f"elif [ -d /{top} ]; then mkdir -p {_q(r + '/' + top)}; mount -n --rbind /{top} {_q(r + '/' + top)}; "
                  f"mount -n -o remount,bind,ro {_q(r + '/' + top)} 2>/dev/null || true; fi")
    for top in sorted(CT_BIND_DIRS, key=len):
        s.run("mkdir", "-p", f"{r}{top}")
        s.mount("--bind", rootfs / top.strip("/"), f"{r}{top}")
    if state.has_scenario("disk-full"):
        # the lab server (as root) mounts a persistent 8 MiB tmpfs on the rootfs' /opt (see
        # `ensure_disk_full_opt`); where it could not, each command gets a fresh one
        s.raw(f"mountpoint -q {_q(rootfs / 'opt')} || mount -n -t tmpfs -o size={DISK_FULL_OPT_SIZE},mode=755 "
              f"lab-ct{vmid}-opt {_q(r + '/opt')}")
    _kernel_dirs(s, r)
    shm = SHM_SMALL_SIZE if state.has_scenario("shm-small") else "50%"
    s.mount("-t", "tmpfs", "-o", "mode=755,size=1m", f"lab-ct{vmid}-dev", f"{r}/dev")
    _populate_dev(s, f"{r}/dev", devices, shm)
    s.run("mkdir", "-p", f"{r}/run")
    s.mount("-t", "tmpfs", "-o", "mode=755,size=16m", f"lab-ct{vmid}-run", f"{r}/run")
    # the lab's own files of this view (device table, view tools, installer.env) on a tmpfs of the view, not in
    # the container's rootfs
    s.run("mkdir", "-p", f"{r}/.lab")
    s.mount("-t", "tmpfs", "-o", "mode=755,size=1m", f"lab-ct{vmid}-lab", f"{r}/.lab")
    _keep(s, r, root)
    _lab_window_ct(s, r, root)
    _view_tools(s, r, root, table)
    _installer_env(s, r, root)
    _bind_node_facts(s, d, r)
    _enter(s, r, cwd)
    return s.text()


#: top-level directories of a container's rootfs that its view mounts something on
CT_MOUNT_POINTS = ("proc", "sys", "dev", "run", ".lab")


def _ct_mount_points(root: Path, rootfs: Path) -> None:
    """Make every directory the container's view mounts on, in the container's rootfs — which the container
    writes (its root mount is the rootfs itself) — beneath a handle of the rootfs, never through a link the
    container planted (`safe_fs`: openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS): a rootfs whose mount point is
    a link fails the command (LXC refuses such a rootfs the same way: `safe_mount` in lxc's src/lxc/utils.c
    mounts on paths it opened beneath the rootfs). /tmp is made 1777 by fchmod on the opened directory."""
    targets = [*CT_OVERLAY_DIRS, *CT_BIND_DIRS, "/tmp", "/root", *(f"/{d}" for d in CT_MOUNT_POINTS),
               *(str(p) for p, _ in keep_paths(root)), str(root)]
    for target in targets:
        fd = safe_fs.open_dir(rootfs, rootfs / target.strip("/"), create=True)
        try:
            if target == "/tmp":
                os.fchmod(fd, 0o1777)
        finally:
            os.close(fd)


def _installer_env(s: _Script, r: str, root: Path) -> None:
    """``/.lab/installer.env`` (read-only): the lab's values the driver installer stand-in sources, so that
    the .run file itself is the same bytes on every lab (`provisioner.lab.commands.installer.build_run`)."""
    path = root / "run" / "installer.env"
    _write(root, path, installer_env(root))
    s.raw(f": > {_q(r + '/.lab/installer.env')}")
    s.mount("--bind", path, f"{r}/.lab/installer.env")
    s.raw(f"mount -n -o remount,bind,ro {_q(r + '/.lab/installer.env')}")


def _ct_overlay(s: _Script, name: str, lower: str, upper: Path, work: Path, target: str) -> None:
    """overlay `lower` (a path of the parent view; under /.lab when the node view has its pristine copy)."""
    opts = f"upperdir={upper},workdir={work}"
    s.raw(f"mount -n -t overlay {name} -o \"lowerdir=$lower{lower}\",{_q(opts + ',index=off')} "
          f"{_q(target)} 2>/dev/null || mount -n -t overlay {name} -o \"lowerdir=$lower{lower}\",{_q(opts)} "
          f"{_q(target)}")


def _unescape_mountinfo(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _lower_base(top: str) -> str:
    """Where a container's overlay of `top` takes its lower layer: the node view's pristine copy
    (``/.lab/usr``...: the node's own /usr carries the view's tools) or, outside it, `top` itself."""
    return "/.lab" if os.path.isdir("/.lab" + top) else ""


def submounts_under(top: str) -> list[str]:
    """Mount points strictly below `top`'s lower layer (`_lower_base`), as paths under `top` (WSL2's
    /usr/lib/wsl, a container runtime's binds under /etc or /usr)."""
    base = _lower_base(top) + top.rstrip("/")
    try:
        with open("/proc/self/mountinfo") as fh:
            points = {_unescape_mountinfo(line.split()[4]) for line in fh if len(line.split()) > 4}
    except OSError:
        return []
    return sorted(top.rstrip("/") + p[len(base):] for p in points if p.startswith(base + "/"))


def _split_overlay(s: _Script, name: str, top: str, rootfs: Path, work: Path, r: str, subs: list[str]) -> None:
    """A container's `top` where the machine's has mounts below it: in a user namespace those are locked
    to their parent and overlayfs refuses a lower layer with a locked mount below it (clone_private_mount,
    fs/namespace.c). The container's directory is then its own upper directory, each entry of the lower
    one an overlay of its own (same upper paths as the whole-directory overlay), a directory holding a
    mount split again, the mount itself and a plain file read-only binds, a link a copy."""
    upper = rootfs / top.strip("/")
    upper.mkdir(parents=True, exist_ok=True)
    target = r + top
    s.run("mkdir", "-p", target)
    s.mount("--bind", upper, target)
    try:
        entries = sorted(os.scandir(_lower_base(top) + top), key=lambda e: e.name)
    except OSError:
        return
    for e in entries:
        path, t, up = f"{top}/{e.name}", f"{target}/{e.name}", upper / e.name
        if os.path.lexists(up) and not (up.is_dir() and not up.is_symlink()):
            continue  # the container's own file, link or whiteout there hides the machine's
        if path in subs:
            if e.is_dir(follow_symlinks=False):
                up.mkdir(exist_ok=True)
            else:
                up.touch()
            s.raw(f"mount -n --rbind \"$lower\"{_q(path)} {_q(t)} && mount -n -o remount,bind,ro {_q(t)} 2>/dev/null || true")
        elif e.is_symlink():
            os.symlink(os.readlink(e.path), up)
        elif e.is_dir(follow_symlinks=False):
            up.mkdir(exist_ok=True)
            if any(p.startswith(path + "/") for p in subs):
                _split_overlay(s, name, path, rootfs, work, r, subs)
            else:
                w = work / "split" / path.strip("/")
                w.mkdir(parents=True, exist_ok=True)
                _ct_overlay(s, name, path, up, w, t)
        elif e.is_file(follow_symlinks=False):
            up.touch()
            s.raw(f"mount -n --bind \"$lower\"{_q(path)} {_q(t)} && mount -n -o remount,bind,ro {_q(t)} 2>/dev/null || true")


def denied_paths(state: LabState, conf: LxcConfig) -> list[str]:
    """Container device paths its device cgroup denies (raw lxc.mount.entry without an allow rule)."""
    return [n.path for n in ct_devices(state, conf) if n.mode == 0]


def ct_env(vmid: int, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment ``lxc-attach --clear-env`` gives a container command."""
    env = {"PATH": CT_PATH, "HOME": "/root", "USER": "root", "LOGNAME": "root", "container": "lxc",
           "LANG": "C.UTF-8", "TERM": "linux"}
    env.update(extra or {})
    return env


def ct_argv(state: LabState, vmid: int, argv: Sequence[str], *, cwd: str = "/root") -> list[str]:
    """argv, run in the node view (or anywhere on the machine), that runs `argv` in the container."""
    conf = state.read_conf(vmid)
    script = ct_script(state, vmid, conf, cwd=cwd)
    env_args = [f"{k}={v}" for k, v in ct_env(vmid).items()]
    return [*unshare_prefix(), "bash", "-c", script, f"lab-ct{vmid}", "env", "-i", *env_args, *argv]


# --- held container views ---------------------------------------------------------------------
#
# A running container's view is built once and held by a process (``sleep infinity`` in the view,
# a session of its own); ``pct exec`` enters it with nsenter. The holder's key is the view's script
# (its devices, scenarios, node facts), the container's config and its start time: any change (a
# ``pct set``, a new device, a stop and start or a reboot) and the next command builds a new view
# (the old holder is killed). ``pct stop``/``reboot`` and the lab's stop end the holder.


def ct_holder_file(root: Path, vmid: int) -> Path:
    return root / "run" / "resident" / f"ct{vmid}.json"


def _proc_start(pid: int) -> str | None:
    """The process's start time (``/proc/PID/stat`` field 22): a pid and this name one process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def stop_ct_holder(root: Path, vmid: int) -> None:
    """End container `vmid`'s held view, if there is one."""
    path = ct_holder_file(root, vmid)
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    pid = int(rec.get("pid", 0))
    # the record lies where the node can write: only a process in a lab view (a user namespace other
    # than this process's) is ever killed by it, never one of the machine's
    if pid > 0 and _proc_start(pid) == rec.get("start") and _in_other_userns(pid):
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
    path.unlink(missing_ok=True)


def _in_other_userns(pid: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user")
    except OSError:
        return False


def stop_ct_holders(root: Path) -> None:
    for path in sorted((root / "run" / "resident").glob("ct*.json")):
        if path.stem[2:].isdigit():
            stop_ct_holder(root, int(path.stem[2:]))


def serving_lock(root: Path) -> Path:
    """Locked (exclusively) by the lab's SSH endpoint while it serves; the held container views
    live as long as that lock (a lab that stops or is killed leaves no holder behind)."""
    return root / "run" / "resident" / "serving.lock"


def lab_serving(root: Path) -> bool:
    try:
        fd = os.open(serving_lock(root), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # (also drops the shared lock just taken)
    return False


def _start_ct_holder(state: LabState, vmid: int, script: str) -> int | None:
    # the holder waits for the serving lock: it ends when the lab stops, however it stops
    lock = shlex.quote(str(serving_lock(state.root)))
    proc = subprocess.Popen([*unshare_prefix(), "bash", "-c", script, f"lab-ct{vmid}", "sh", "-c",
                             f"echo ready; exec flock -s {lock} true"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=ct_env(vmid), start_new_session=True)
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    proc.stdout.close()
    if ready != b"ready\n":
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None
    proc.returncode = 0  # the holder outlives this process on purpose (no "still running" warning)
    return proc.pid


def held_ct_argv(state: LabState, vmid: int, argv: Sequence[str]) -> list[str]:
    """argv that runs `argv` in container `vmid`'s held view (built now if it has none or its key
    changed); `ct_argv` (a view of its own) where no view can be held."""
    conf = state.read_conf(vmid)
    script = ct_script(state, vmid, conf)
    env_args = [f"{k}={v}" for k, v in ct_env(vmid).items()]
    if shutil.which("flock") is None or not lab_serving(state.root):  # no lab to tie a holder to
        return [*unshare_prefix(), "bash", "-c", script, f"lab-ct{vmid}", "env", "-i", *env_args, *argv]
    status = state.get_status(vmid)
    key = hashlib.sha256("\0".join([script, conf.render(), str(status.started), str(status.pid)]).encode()).hexdigest()
    path = ct_holder_file(state.root, vmid)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            rec = {}
        pid = int(rec.get("pid", 0))
        if rec.get("key") != key or pid <= 0 or _proc_start(pid) != rec.get("start"):
            stop_ct_holder(state.root, vmid)
            new = _start_ct_holder(state, vmid, script)
            start = _proc_start(new) if new is not None else None
            if new is None or start is None:
                return [*unshare_prefix(), "bash", "-c", script, f"lab-ct{vmid}", "env", "-i", *env_args, *argv]
            pid = new
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"pid": pid, "start": start, "key": key}))
            tmp.replace(path)
    return ["nsenter", "--user", "--mount", "--cgroup", "--preserve-credentials", "-t", str(pid), "-r", "-w", "--",
            "env", "-i", *env_args, *argv]


def release_mounts(root: Path) -> None:
    """Unmount whatever is mounted under `root` in this namespace (nothing, unless an older lab left some)."""
    prefix = str(root.resolve()) + "/"
    try:
        with open("/proc/self/mountinfo") as fh:
            points = [line.split()[4] for line in fh]
    except OSError:
        return
    for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
