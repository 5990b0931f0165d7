"""A container's ``apt-get``/``apt`` stand-in (the machine's real apt must never run in a lab container).

Knows the few packages the steps install (``kmod``, ``pkg-config``, ``curl``, ``ca-certificates``...)
and prints apt's real non-interactive output for them (Ubuntu 24.04 package versions). Installing
``kmod`` puts working-looking ``modprobe``/``lsmod``/``depmod``/``rmmod`` into the container (the
driver installer needs them). Unknown package: ``E: Unable to locate package X``, exit 100.
Scenario ``apt-lock``: the first `APT_LOCK_ATTEMPTS` runs meet a held dpkg frontend lock (the real
two ``E:`` lines, exit 100).

It acts for the container and writes only there (as the container's root: run by the resident server
it has joined the container's user namespace first, `provisioner.lab.resident`): its package list
and the kmod tools beneath the container's ``/``, the apt-lock counter beneath the lab root, every
path resolved beneath its directory without following a link (`provisioner.lab.safe_fs`). A link
the container planted on one of those paths is refused (dpkg's own ``E:`` shape, exit 100), never
followed.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from provisioner.lab import safe_fs
from provisioner.lab.commands._common import out, state
from provisioner.lab.sandbox import lab_python

APT_LOCK_ATTEMPTS = 2
STATE = Path("/var/lib/lab-apt/installed")
#: the container's own root: everything the stand-in installs is written beneath it
CT_ROOT = Path("/")
ARCHIVE = "http://archive.ubuntu.com/ubuntu noble/main amd64"
# name -> (version, download size in bytes, installed size kB, dependencies)
PACKAGES: dict[str, tuple[str, int, int, tuple[str, ...]]] = {
    "kmod": ("31+20240202-2ubuntu7", 101_432, 411, ()),
    "libpkgconf3": ("1.8.1-2build1", 30_675, 91, ()),
    "pkgconf-bin": ("1.8.1-2build1", 20_713, 62, ("libpkgconf3",)),
    "pkgconf": ("1.8.1-2build1", 16_769, 53, ("pkgconf-bin",)),
    "pkg-config": ("1.8.1-2build1", 7_186, 20, ("pkgconf",)),
    "curl": ("8.5.0-2ubuntu10.6", 226_878, 534, ()),
    "ca-certificates": ("20240203", 159_796, 384, ()),
    "libglvnd-dev": ("1.7.0-1build1", 3_362, 21, ()),
    "build-essential": ("12.10ubuntu1", 4_928, 21, ()),
}
KMOD_TOOLS = {"usr/sbin/modprobe", "usr/sbin/rmmod", "usr/sbin/depmod", "usr/sbin/insmod", "usr/sbin/modinfo",
              "usr/bin/lsmod"}
LOCK_ERROR = (
    "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 1234 (apt-get)\n"
    "N: Be aware that removing the lock file is not a solution and may break your system.\n"
    "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another process using it?\n"
)


def _installed() -> set[str]:
    try:  # a link (to another view's file) or a FIFO there is not a package list
        return set(safe_fs.read_bytes(CT_ROOT, STATE).decode(errors="replace").split())
    except OSError:
        return set()


def _closure(names: list[str]) -> list[str]:
    seen: list[str] = []

    def visit(n: str) -> None:
        for dep in PACKAGES[n][3]:
            visit(dep)
        if n not in seen:
            seen.append(n)

    for n in names:
        visit(n)
    return seen


def _kb(n: int) -> str:
    return f"{n / 1000:.0f} kB" if n >= 1000 else f"{n} B"


def _install_files(name: str, root: Path) -> None:
    if name != "kmod":
        return
    text = ("#!/bin/sh\n# LAB stand-in for kmod (gpu-provisioner lab)\n"
            f"PROVISIONER_LAB_ROOT={shlex.quote(str(root))}; export PROVISIONER_LAB_ROOT\n"
            f'exec {shlex.quote(lab_python())} -m provisioner.lab.commands.kmod "$(basename "$0")" "$@"\n')
    safe_fs.write_bytes(CT_ROOT, CT_ROOT / "usr/bin/kmod", text.encode(), 0o755)
    for rel in sorted(KMOD_TOOLS):
        try:
            safe_fs.symlink(CT_ROOT, CT_ROOT / rel, "/usr/bin/kmod")
        except safe_fs.UnsafePath:
            if not rel.startswith("usr/sbin/"):
                raise
            # a merged /usr/sbin (a link to bin, as on Fedora or Arch): the tool goes where it points
            safe_fs.symlink(CT_ROOT, CT_ROOT / "usr/bin" / Path(rel).name, "/usr/bin/kmod")


def _lock_held() -> bool:
    lab = state()
    if not lab.has_scenario("apt-lock"):
        return False
    counter = lab.root / "run" / "apt-lock-attempts"
    try:
        n = int(safe_fs.read_bytes(lab.root, counter))
    except (OSError, ValueError):
        n = 0
    if n >= APT_LOCK_ATTEMPTS:
        return False
    try:  # in place: in a container view the counter is a bind of the lab's file
        safe_fs.write_bytes(lab.root, counter, str(n + 1).encode(), in_place=True)
    except OSError:
        return False  # not the lab's counter (a link, another file system): no lock to simulate
    return True


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    args = [a for a in args if not a.startswith("--vmid=")]
    flags = {a for a in args if a.startswith("-")}
    words = [a for a in args if not a.startswith("-")]
    if not words:
        out("apt 2.7.14ubuntu0.1 (amd64) -- LAB stand-in\nUsage: apt-get [options] command\n")
        return 0
    cmd, names = words[0], words[1:]
    if cmd in ("update", "install", "upgrade", "remove", "purge", "dist-upgrade") and _lock_held():
        if cmd == "update":
            sys.stdout.write("Reading package lists...\n")
        sys.stdout.write(LOCK_ERROR if cmd != "update" else
                         "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 1234 (apt-get)\n"
                         "N: Be aware that removing the lock file is not a solution and may break your system.\n"
                         "E: Unable to lock directory /var/lib/apt/lists/\n")
        return 100
    if cmd == "update":
        out("Hit:1 http://archive.ubuntu.com/ubuntu noble InRelease\n"
            "Hit:2 http://archive.ubuntu.com/ubuntu noble-updates InRelease\n"
            "Hit:3 http://archive.ubuntu.com/ubuntu noble-security InRelease\n"
            "Reading package lists...\nLAB: simulated apt-get (nothing was downloaded)\n")
        return 0
    if cmd != "install":
        out(f"LAB: apt-get {cmd} is not simulated; nothing done\n")
        return 0
    out("Reading package lists...\nBuilding dependency tree...\nReading state information...\n")
    for n in names:
        if n.split("=")[0] not in PACKAGES:
            out(f"E: Unable to locate package {n}\n")
            return 100
    names = [n.split("=")[0] for n in names]
    installed = _installed()
    for n in names:
        if n in installed:
            out(f"{n} is already the newest version ({PACKAGES[n][0]}).\n")
    new = [n for n in _closure(names) if n not in installed]
    extra = [n for n in new if n not in names]
    if extra:
        out("The following additional packages will be installed:\n  " + " ".join(sorted(extra)) + "\n")
    if new:
        out("The following NEW packages will be installed:\n  " + " ".join(sorted(new)) + "\n")
    out(f"0 upgraded, {len(new)} newly installed, 0 to remove and 0 not upgraded.\n")
    if not new:
        return 0
    size = sum(PACKAGES[n][1] for n in new)
    inst = sum(PACKAGES[n][2] for n in new)
    out(f"Need to get {_kb(size)} of archives.\nAfter this operation, {inst} kB of additional disk space will be used.\n")
    if extra and not ({"-y", "--yes", "--assume-yes", "-qq"} & flags):
        out("Do you want to continue? [Y/n] Abort.\n")
        return 1
    for i, n in enumerate(new, 1):
        v, sz, _, _ = PACKAGES[n]
        out(f"Get:{i} {ARCHIVE} {n} amd64 {v} [{_kb(sz)}]\n")
    out(f"Fetched {_kb(size)} in 0s (LAB, no network)\n")
    lab_root = state().root
    for n in new:
        v = PACKAGES[n][0]
        out(f"Selecting previously unselected package {n}.\n(Reading database ... 19425 files and directories "
            f"currently installed.)\nPreparing to unpack .../{n}_{v}_amd64.deb ...\nUnpacking {n} ({v}) ...\n")
    try:
        for n in new:
            out(f"Setting up {n} ({PACKAGES[n][0]}) ...\n")
            _install_files(n, lab_root)
        safe_fs.write_bytes(CT_ROOT, STATE, ("\n".join(sorted(installed | set(new))) + "\n").encode())
    except OSError as exc:  # a link planted on the way, a read-only or full file system
        sys.stdout.flush()
        sys.stderr.write(f"E: Sub-process /usr/bin/dpkg returned an error code (1)\n"
                         f"LAB: apt-get stand-in could not write beneath the container's root: "
                         f"{exc.strerror or exc}\n")
        return 100
    out("Processing triggers for libc-bin (2.39-0ubuntu8.4) ...\n")
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    raise SystemExit(main())
