"""Real LXC containers for tests: a busybox rootfs, Proxmox's default device policy, fake GPU nodes.

The fake NVIDIA nodes must appear at their real host paths (``/dev/nvidia0`` ...), because the
``lxc.mount.entry`` lines under test name those paths. Rather than touching the real ``/dev`` or
rewriting the lines, every LXC command runs inside a private mount namespace (``unshare --mount
--propagation private``) whose ``/dev`` is a fresh tmpfs holding the ordinary nodes LXC itself
needs (null, zero, full, random, urandom, tty, a devpts instance with ptmx) plus the fake GPU nodes
made with ``mknod``. Nothing propagates back to the host's ``/dev``; the namespace disappears when
its holder process and the container are gone. The host kernel has no driver for the fake
majors, so ``open()`` of a node the cgroup allows fails with ENXIO, and of one it denies with EPERM.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.executables import copy_executable
from tests.support.require import require

BUSYBOX = "/bin/busybox"

#: The device allow-list every Proxmox VE container starts with: pve-container writes
#: ``lxc.include = /usr/share/lxc/config/<ostype>.common.conf`` (src/PVE/LXC.pm
#: ``update_lxc_config``), which includes LXC's ``common.conf`` (lxc/lxc
#: config/templates/common.conf.in, as shipped in LXC 5.0 / PVE's lxc-pve): deny everything,
#: then allow mknod of any node and use of these few. (``c 10:200`` /dev/net/tun is *not* in it:
#: PVE guides add that line by hand.)
PVE_DEFAULT_DEVICE_RULES: tuple[tuple[str, str], ...] = (
    ("deny", "a"),
    ("allow", "c *:* m"),  # mknod of any char node, but not reading/writing it
    ("allow", "b *:* m"),
    ("allow", "c 1:3 rwm"),  # /dev/null
    ("allow", "c 1:5 rwm"),  # /dev/zero
    ("allow", "c 1:7 rwm"),  # /dev/full
    ("allow", "c 5:0 rwm"),  # /dev/tty
    ("allow", "c 5:1 rwm"),  # /dev/console
    ("allow", "c 5:2 rwm"),  # /dev/ptmx
    ("allow", "c 1:8 rwm"),  # /dev/random
    ("allow", "c 1:9 rwm"),  # /dev/urandom
    ("allow", "c 136:* rwm"),  # /dev/pts/*
    ("allow", "c 10:229 rwm"),  # fuse
)

#: Nodes the private /dev gets so that LXC's own start-up works: (name, major, minor).
_BASE_NODES = (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9),
               ("tty", 5, 0))


def cgroup_key(version: int) -> str:
    """The LXC config prefix for the devices controller: v1 ``lxc.cgroup.``, v2 ``lxc.cgroup2.``."""
    return "lxc.cgroup2" if version == 2 else "lxc.cgroup"


def default_device_policy(cgroup_version: int) -> list[tuple[str, str]]:
    """PVE's default device policy as (key, value) lines for the given cgroup version."""
    prefix = cgroup_key(cgroup_version)
    return [(f"{prefix}.devices.{verb}", rule) for verb, rule in PVE_DEFAULT_DEVICE_RULES]


def host_cgroup_fs_type() -> str:
    """What ``stat -fc %T /sys/fs/cgroup`` prints here (the engine's CGROUP fact command)."""
    return subprocess.run(["stat", "-fc", "%T", "/sys/fs/cgroup"], capture_output=True, text=True,
                          check=True).stdout


def free_char_major(proc_devices: str, preferred: Iterable[int] = range(511, 383, -1)) -> int:
    """A character major no driver has registered (per ``/proc/devices``), from the dynamic range."""
    used = set()
    section = ""
    for line in proc_devices.splitlines():
        if line.endswith("devices:"):
            section = line
        elif m := re.match(r"^\s*(\d+)\s", line):
            if section.startswith("Character"):
                used.add(int(m.group(1)))
    for major in preferred:
        if major not in used:
            return major
    raise RuntimeError("no free character major in the dynamic range")


@dataclass(frozen=True)
class FakeNode:
    path: str
    major: int
    minor: int


def require_lxc_tools() -> None:
    """Skip (fail under CI=true) unless we are root with lxc, busybox-static and util-linux."""
    require(os.geteuid() == 0, "real LXC tests need root (mknod, mount namespaces, lxc-start)")
    for tool in ("lxc-start", "lxc-attach", "lxc-stop", "lxc-info", "lxc-wait", "unshare", "nsenter", "chroot"):
        require(shutil.which(tool) is not None, f"{tool} is not installed (apt-get install lxc util-linux)")
    require(Path(BUSYBOX).is_file(), f"{BUSYBOX} is missing (apt-get install busybox-static)")
    require(Path("/sys/fs/cgroup").is_dir(), "no /sys/fs/cgroup")


def make_busybox_rootfs(root: Path) -> None:
    """A minimal rootfs: static busybox at /bin/busybox, applets installed with ``--install -s``."""
    for d in ("bin", "dev", "proc", "sys", "tmp", "etc", "root"):
        (root / d).mkdir(parents=True, exist_ok=True)
    copy_executable(BUSYBOX, root / "bin" / "busybox")
    result = subprocess.run(["chroot", str(root), "/bin/busybox", "--install", "-s", "/bin"],
                            capture_output=True, text=True, timeout=30)
    require(result.returncode == 0,
            f"{BUSYBOX} does not run in an empty chroot (not busybox-static?): {result.stderr.strip()}")
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc" / "group").write_text("root:x:0:\n")


_SETUP_DEV = r"""
set -eu
mount -t tmpfs -o mode=0755 provisioner-test-dev /dev
for spec in {base}; do
  IFS=: read -r name major minor <<EOF
$spec
EOF
  mknod -m 0666 "/dev/$name" c "$major" "$minor"
done
mkdir /dev/pts /dev/shm
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts /dev/pts
ln -s pts/ptmx /dev/ptmx
for spec in "$@"; do
  IFS=: read -r path major minor <<EOF
$spec
EOF
  mkdir -p "$(dirname "$path")"
  mknod -m 0666 "$path" c "$major" "$minor"
done
echo ready
exec sleep 3600
"""


class PrivateDev:
    """A process holding a private mount namespace whose /dev holds the base and fake nodes."""

    def __init__(self, nodes: Sequence[FakeNode]) -> None:
        for n in nodes:
            if not re.fullmatch(r"/dev/[A-Za-z0-9_./-]+", n.path) or ".." in n.path:
                raise ValueError(f"not a /dev path: {n.path!r}")
        base = " ".join(f"{name}:{major}:{minor}" for name, major, minor in _BASE_NODES)
        self.process = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", _SETUP_DEV.format(base=base), "sh",
             *(f"{n.path}:{n.major}:{n.minor}" for n in nodes)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        first = self.process.stdout.readline().strip()
        if first != "ready":
            self.close()
            err = self.process.stderr.read() if self.process.stderr else ""
            raise RuntimeError(f"could not set up the private /dev: {first} {err}".strip())

    def run(self, argv: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a command inside the namespace (LXC sees the private /dev)."""
        return subprocess.run(["nsenter", "-t", str(self.process.pid), "-m", "--", *argv],
                              capture_output=True, text=True, timeout=timeout)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def lxc_config(name: str, rootfs: Path, lines: Iterable[tuple[str, str]]) -> str:
    """A plain LXC config (``key = value``) for a busybox container with no network."""
    head = [
        ("lxc.uts.name", name),
        ("lxc.rootfs.path", f"dir:{rootfs}"),
        ("lxc.net.0.type", "empty"),
        ("lxc.console.path", "none"),
        ("lxc.tty.max", "0"),
        ("lxc.pty.max", "8"),
        ("lxc.autodev", "1"),
        ("lxc.apparmor.profile", "unconfined"),
        ("lxc.mount.auto", "proc:mixed sys:mixed"),
        ("lxc.init.cmd", "/bin/sleep 3600"),
    ]
    return "".join(f"{k} = {v}\n" for k, v in [*head, *lines])


#: Runs in the container for each path argument: ``path|<stat>|<open O_RDWR outcome>`` (``<>`` would
#: create a missing file, so only existing paths are opened).
_PROBE = r"""
for n in "$@"; do
  if s=$(stat -c '%F|%t|%T' "$n" 2>/dev/null); then
    if err=$( { : <>"$n"; } 2>&1 ); then r=opened; else r="$err"; fi
  else
    s="missing||" r="not opened: missing"
  fi
  echo "$n|$s|$r"
done
"""

_STRERROR = {os.strerror(code): code for code in errno.errorcode}


@dataclass(frozen=True)
class NodeProbe:
    path: str
    kind: str  # busybox stat %F, e.g. "character special file", or "missing"
    major: int | None
    minor: int | None
    errno: int | None  # None: open(O_RDWR) succeeded; ENOENT: the path is missing
    message: str

    @property
    def errno_name(self) -> str:
        return "opened" if self.errno is None else errno.errorcode.get(self.errno, f"errno {self.errno}")


def parse_probe(output: str) -> dict[str, NodeProbe]:
    out: dict[str, NodeProbe] = {}
    for line in output.splitlines():
        parts = line.split("|", 4)
        if len(parts) != 5:
            continue
        path, kind, major, minor, result = parts
        code: int | None = None
        if kind == "missing":
            code = errno.ENOENT
        elif result != "opened":
            code = _STRERROR.get(result.rsplit(": ", 1)[-1].strip(), -1)
        out[path] = NodeProbe(path, kind, int(major, 16) if major else None, int(minor, 16) if minor else None,
                              code, result)
    return out


class BusyboxContainer:
    """One ``lxc-start -f config`` container in a private lxcpath, driven inside a `PrivateDev`."""

    def __init__(self, dev: PrivateDev, workdir: Path, rootfs: Path) -> None:
        self.dev = dev
        self.workdir = workdir
        self.rootfs = rootfs
        self.lxcpath = workdir / "lxcpath"
        self.lxcpath.mkdir(parents=True, exist_ok=True)
        self.name = f"gpt-{os.getpid()}-{secrets.token_hex(3)}"
        self.log = workdir / f"{self.name}.log"
        self.running = False

    def _args(self) -> list[str]:
        return ["-n", self.name, "-P", str(self.lxcpath)]

    def start(self, lines: Iterable[tuple[str, str]]) -> Path:
        """Write the config and start the container; returns the config path."""
        config = self.workdir / f"{self.name}.conf"
        config.write_text(lxc_config(self.name, self.rootfs, lines))
        result = self.dev.run(["lxc-start", *self._args(), "-f", str(config), "-l", "DEBUG", "-o", str(self.log)])
        if result.returncode != 0:
            raise AssertionError(f"lxc-start failed ({result.returncode}): {result.stderr}\n{self.log_tail()}")
        self.running = True
        wait = self.dev.run(["lxc-wait", *self._args(), "-s", "RUNNING", "-t", "10"])
        if wait.returncode != 0:
            raise AssertionError(f"container did not reach RUNNING: {wait.stderr}\n{self.log_tail()}")
        return config

    def attach(self, script: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self.dev.run(["lxc-attach", *self._args(), "--clear-env", "--set-var", "PATH=/bin", "--",
                             "/bin/sh", "-c", script, "sh", *args])

    def probe(self, paths: Sequence[str]) -> dict[str, NodeProbe]:
        """stat and open(O_RDWR) each path inside the container."""
        result = self.attach(_PROBE, *paths)
        if result.returncode != 0:
            raise AssertionError(f"lxc-attach failed ({result.returncode}): {result.stderr}\n{self.log_tail()}")
        return parse_probe(result.stdout)

    def init_pid(self) -> int:
        result = self.dev.run(["lxc-info", *self._args(), "-p", "-H"])
        return int(result.stdout.strip())

    def devices_list(self) -> list[str] | None:
        """The cgroup v1 ``devices.list`` of the container's init, or None without a v1 controller."""
        for line in Path(f"/proc/{self.init_pid()}/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "devices" in controllers.split(","):
                listing = Path("/sys/fs/cgroup/devices") / path.lstrip("/") / "devices.list"
                return listing.read_text().splitlines() if listing.exists() else None
        return None

    def stop(self) -> None:
        if self.running:
            self.dev.run(["lxc-stop", *self._args(), "-k"])
            self.running = False

    def log_tail(self, lines: int = 30) -> str:
        if not self.log.exists():
            return "(no lxc log)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
