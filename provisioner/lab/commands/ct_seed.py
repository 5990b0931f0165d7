"""First-use seeding of a lab container's root: the files an Ubuntu 24.04 (or Debian 12) template has
that the steps look at, the lab's apt-get stand-in, the machine's Python and uv, and (scenario
``driver-mismatch``) a pre-installed 580.95.05 NVIDIA userspace."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from provisioner.lab.commands import wrapper_text, write_executable
from provisioner.lab.commands.installer import MISMATCH_PREINSTALLED, install_userspace
from provisioner.lab.commands.loader import write_loader_tools
from provisioner.lab.host_tools import discover_pythons, find_uv
from provisioner.lab.state import LabState
from provisioner.proxmox.lxc_conf import LxcConfig

UBUNTU_2404_OS_RELEASE = """PRETTY_NAME="Ubuntu 24.04.2 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION="24.04.2 LTS (Noble Numbat)"
VERSION_CODENAME=noble
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
SUPPORT_URL="https://help.ubuntu.com/"
BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"
PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"
UBUNTU_CODENAME=noble
LOGO=ubuntu-logo
"""

DEBIAN_12_OS_RELEASE = """PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
HOME_URL="https://www.debian.org/"
SUPPORT_URL="https://www.debian.org/support"
BUG_REPORT_URL="https://bugs.debian.org/"
"""

# Ubuntu's /etc/profile does not set PATH (pam_env does); Debian's would reset it for root.
UBUNTU_PROFILE = """# /etc/profile: system-wide .profile file for the Bourne shell (sh(1))
# and Bourne compatible shells (bash(1), ksh(1), ash(1), ...).

if [ "${PS1-}" ]; then
  if [ "${BASH-}" ] && [ "$BASH" != "/bin/sh" ]; then
    if [ -f /etc/bash.bashrc ]; then
      . /etc/bash.bashrc
    fi
  else
    if [ "$(id -u)" -eq 0 ]; then
      PS1='# '
    else
      PS1='$ '
    fi
  fi
fi

if [ -d /etc/profile.d ]; then
  for i in /etc/profile.d/*.sh; do
    if [ -r $i ]; then
      . $i
    fi
  done
  unset i
fi
"""

ROOT_PROFILE = """# ~/.profile: executed by Bourne-compatible login shells.

if [ "$BASH" ]; then
  if [ -f ~/.bashrc ]; then
    . ~/.bashrc
  fi
fi

mesg n 2> /dev/null || true
"""

ROOT_BASHRC = "# ~/.bashrc: executed by bash(1) for non-login shells.\n"

_DIRS = ("etc", "etc/profile.d", "usr/bin", "usr/sbin", "usr/lib/x86_64-linux-gnu", "usr/local/bin", "usr/local/sbin",
         "usr/local/lib", "usr/local/share", "usr/local/include", "var/log", "var/lib/dpkg", "var/lib/lab-apt",
         "var/cache/apt", "opt", "root")

#: machine files that must not show through a container's /usr (a GPU machine's own driver userspace)
_HIDE = ("etc/pve", "usr/bin/nvidia-smi", "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "usr/lib/x86_64-linux-gnu/libcuda.so.1",
         "usr/bin/apt", "usr/bin/apt-get")


def _whiteout(rootfs: Path, rel: str) -> None:
    if os.path.lexists("/" + rel) and not os.path.lexists(rootfs / rel):
        try:
            os.mknod(rootfs / rel, 0o600 | 0o020000, os.makedev(0, 0))  # overlayfs whiteout
        except OSError:
            pass


def _link(path: Path, target: str) -> None:
    if path.is_symlink() or path.exists():
        path.unlink()
    path.symlink_to(target)


def seed_container(state: LabState, vmid: int, conf: LxcConfig) -> Path:
    """Seed container `vmid`'s root once; returns it."""
    rootfs = state.ct_root(vmid)
    marker = state.ct_dir(vmid) / "seeded"
    if marker.exists():
        return rootfs
    for d in _DIRS:
        (rootfs / d).mkdir(parents=True, exist_ok=True)
    (rootfs / "tmp").mkdir(exist_ok=True)
    (rootfs / "tmp").chmod(0o1777)
    (rootfs / "root").chmod(0o700)
    debian = (conf.get("ostype") or "ubuntu") == "debian"
    (rootfs / "etc/os-release").write_text(DEBIAN_12_OS_RELEASE if debian else UBUNTU_2404_OS_RELEASE)
    (rootfs / "etc/hostname").write_text((conf.get("hostname") or f"CT{vmid}") + "\n")
    (rootfs / "etc/profile").write_text(UBUNTU_PROFILE)
    (rootfs / "root/.profile").write_text(ROOT_PROFILE)
    (rootfs / "root/.bashrc").write_text(ROOT_BASHRC)
    for rel in _HIDE:
        _whiteout(rootfs, rel)
    pythons = discover_pythons()
    default = "3.11" if debian else "3.12"
    for minor, exe in pythons.items():
        if minor in ("3.11", "3.12", "3.13") and str(exe) != f"/usr/bin/python{minor}":
            # (the machine's own /usr/bin/python3.X is already the container's: no wrapper calling itself)
            # a wrapper, not a symlink: Python would take /usr as its prefix and pick up the machine's stdlib
            write_executable(rootfs / f"usr/bin/python{minor}",
                             f"#!/bin/sh\n# LAB: the machine's Python {minor}\nexec {shlex.quote(str(exe))} \"$@\"\n")
    if default in pythons:
        _link(rootfs / "usr/bin/python3", f"python{default}")
    uv = find_uv()
    if uv is not None:
        _link(rootfs / "usr/local/bin/uv", str(uv))
    apt = wrapper_text("provisioner.lab.commands.apt_get", state.root, f"--vmid={vmid}")
    write_executable(rootfs / "usr/bin/apt-get", apt)
    write_executable(rootfs / "usr/bin/apt", apt)
    write_loader_tools(rootfs)  # `ldconfig -p` / `ldd` that know the NVIDIA library markers
    if state.has_scenario("driver-mismatch"):
        install_userspace(rootfs, MISMATCH_PREINSTALLED, state.root)
    marker.write_text("seeded by the lab\n")
    return rootfs
