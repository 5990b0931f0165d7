"""The NVIDIA ``.run`` installer stand-in: a POSIX sh script shaped like the real makeself archive.

What it does like the real one (reference/proxmox.md §4): makeself's integrity check of its
payload ("Verifying archive integrity... OK", MD5 error on a corrupted download); flags
``--silent``/``-s``, ``--no-kernel-modules`` (alias ``--no-kernel-module``), ``-z``/
``--no-nouveau-check``, ``--no-x-check``, ``--log-file-name``, ``--uninstall`` and the other
userspace-install flags (accepted, no effect); must run as root; needs ``ldconfig grep dmesg
tail`` and ``modprobe rmmod lsmod depmod`` (kmod) on PATH; without ``--no-kernel-modules`` it
fails the way it does in a container (no kernel source tree); writes
``/var/log/nvidia-installer.log``; installs ``/usr/bin/nvidia-smi`` and the
``libnvidia-ml.so.<ver>``/``libcuda.so.<ver>`` markers (+ ``.so.1`` links). Exit 0 / 1.
Scenario ``installer-killed``: the first run dies (SIGKILL, exit 137) after nvidia-smi was
written but before the libraries were.
"""

from __future__ import annotations

import hashlib
import shlex
from pathlib import Path

from provisioner.lab import safe_fs
from provisioner.lab.commands import wrapper_text, write_executable

LIBDIR = "usr/lib/x86_64-linux-gnu"
#: the userspace version scenario driver-mismatch pre-installs in a container
MISMATCH_PREINSTALLED = "580.95.05"
LAB_DRIVER_VERSIONS = ("595.71.05", "580.95.05")
TITLE = "NVIDIA Accelerated Graphics Driver for Linux-x86_64"

KERNEL_SOURCE_ERROR = (
    "ERROR: Unable to find the kernel source tree for the currently running kernel.  Please make sure you have "
    "installed the kernel source files for your kernel and that they are properly configured; on Red Hat Linux "
    "systems, for example, be sure you have the 'kernel-source' or 'kernel-devel' RPM installed.  If you know the "
    "correct kernel source files are installed, you may specify the kernel source path with the "
    "'--kernel-source-path' command line option."
)


def failed_line(log: str) -> str:
    return (
        f"ERROR: Installation has failed.  Please see the file '{log}' for details.  You may find suggestions on "
        "fixing installation problems in the README available on the Linux driver download page at www.nvidia.com."
    )


def run_name(version: str) -> str:
    return f"NVIDIA-Linux-x86_64-{version}.run"


def smi_wrapper(root: Path) -> str:
    return wrapper_text("provisioner.lab.commands.nvidia_smi", root, "--lab-view=ct")


def install_userspace(rootfs: Path, version: str, root: Path) -> None:
    """Write the files the installer installs, straight into a container root (scenario pre-installs);
    beneath the lab `root`, never through a link (`provisioner.lab.safe_fs`)."""
    write_executable(rootfs / "usr/bin/nvidia-smi", smi_wrapper(root), root)
    lib = rootfs / LIBDIR
    for name in ("libnvidia-ml.so", "libcuda.so"):
        safe_fs.write_bytes(root, lib / f"{name}.{version}",
                            f"LAB stand-in for {name}.{version} (not an NVIDIA library)\n".encode())
        safe_fs.symlink(root, lib / f"{name}.1", f"{name}.{version}")
    safe_fs.write_bytes(root, rootfs / "var/log/nvidia-installer.log", (
        f"nvidia-installer log file '/var/log/nvidia-installer.log'\ninstaller version: {version}\n"
        f"-> Installation of the {TITLE} (version: {version}) is now complete.\n").encode())


def _payload(version: str) -> str:
    """Deterministic filler standing for the compressed archive (so a corrupted download is detectable)."""
    lines = [f"LAB payload of {run_name(version)} (gpu-provisioner lab stand-in, not NVIDIA software)"]
    seed = hashlib.sha256(version.encode()).digest()
    for i in range(512):
        seed = hashlib.sha256(seed + i.to_bytes(4, "big")).digest()
        lines.append(seed.hex() + seed[:16].hex())
    return "\n".join(lines) + "\n"


_SCRIPT = r"""#!/bin/sh
# This script was generated using Makeself 2.1.5 -- LAB stand-in built by the gpu-provisioner lab.
# It imitates NVIDIA-Linux-x86_64-@VERSION@.run for the lab's containers; it is NOT NVIDIA software.
VERSION=@VERSION@
MD5=@MD5@
# The lab's own values (where its state lives, its nvidia-smi stand-in) come from the container's view: the
# file's bytes are those of one version, the same on every lab, as a real .run is the same on every machine
# (a playbook pins its sha256 and replays on another lab).
if [ -r /.lab/installer.env ]; then
  . /.lab/installer.env
else
  echo "ERROR: LAB: this installer stand-in runs only in a lab container (no /.lab/installer.env)" >&2; exit 1
fi
LIBDIR=/usr/lib/x86_64-linux-gnu
LOG=/var/log/nvidia-installer.log
TITLE="@TITLE@"
silent=0; kmods=1; uninstall=0; cmdline=""
while [ $# -gt 0 ]; do
  arg=$1; shift
  cmdline="$cmdline
    $arg"
  case "$arg" in
    -s|--silent) silent=1 ;;
    --no-kernel-modules|--no-kernel-module) kmods=0 ;;
    --log-file-name=*) LOG=${arg#*=} ;;
    --log-file-name|-l) LOG=$1; cmdline="$cmdline
    $1"; shift ;;
    --uninstall) uninstall=1 ;;
    -z|--no-nouveau-check|--no-x-check|-q|--no-questions|-a|--accept-license|--ui=*|-N|--no-network|--no-drm|\
    --install-libglvnd|--no-install-libglvnd|--no-nvidia-modprobe|--no-kernel-module-source|--no-systemd|\
    --no-distro-scripts|--no-opengl-files|--no-install-compat32-libs|--skip-depmod|--skip-module-unload|\
    --disable-nouveau|--no-backup|--no-rpms|--dkms|--no-dkms|--no-cc-version-check|--no-check-for-alternate-installs|\
    --allow-installation-with-running-driver|--no-peermem|--no-wine-files|--no-libglx-indirect) ;;
    --version|-v) echo "nvidia-installer:  version $VERSION"; exit 0 ;;
    *) echo "ERROR: Unrecognized option: '$arg'" >&2; exit 1 ;;
  esac
done

payload_line=$(awk '/^__LAB_PAYLOAD_BELOW__$/ { print NR + 1; exit 0; }' "$0")
sum=$(tail -n +"$payload_line" "$0" | md5sum | cut -b-32)
printf 'Verifying archive integrity...'
if [ "$sum" != "$MD5" ]; then
  echo " Error in MD5 checksums: $sum is different from $MD5" >&2
  exit 2
fi
echo " OK"
echo "Uncompressing $TITLE $VERSION....................................................."

say() { [ "$silent" = 1 ] || echo "$*"; }
logit() { echo "$*" >> "$LOG"; }
err() { echo "$*" >&2; logit "$*"; }

if [ "$(id -u)" != 0 ]; then
  echo "ERROR: nvidia-installer must be run as root" >&2; exit 1
fi
mkdir -p "$(dirname "$LOG")"
{
  echo "nvidia-installer log file '$LOG'"
  echo "creation time: $(date '+%a %b %e %H:%M:%S %Y')"
  echo "installer version: $VERSION"
  echo ""
  echo "PATH: $PATH"
  echo ""
  echo "nvidia-installer command line:"
  echo "    ./nvidia-installer$cmdline"
  echo ""
} > "$LOG"

if [ "$uninstall" = 1 ]; then
  UNLOG=/var/log/nvidia-uninstall.log
  if [ ! -e /usr/bin/nvidia-smi ] && ! ls "$LIBDIR"/libnvidia-ml.so.*.* >/dev/null 2>&1; then
    echo "There is no NVIDIA driver currently installed." >&2; exit 1
  fi
  old=$(ls "$LIBDIR"/libnvidia-ml.so.*.* 2>/dev/null | head -n1 | sed 's/.*libnvidia-ml\.so\.//')
  rm -f /usr/bin/nvidia-smi "$LIBDIR"/libnvidia-ml.so.* "$LIBDIR"/libcuda.so.* "$LIBDIR"/libcuda.so
  echo "-> Uninstallation of existing driver: $TITLE (${old:-$VERSION}) is complete." >> "$LOG"
  cp "$LOG" "$UNLOG" 2>/dev/null || true
  say "-> Uninstallation of existing driver: $TITLE (${old:-$VERSION}) is complete."
  exit 0
fi

for util in ldconfig grep dmesg tail; do
  if ! command -v "$util" >/dev/null 2>&1; then
    pkg=coreutils; [ "$util" = ldconfig ] && pkg=libc-bin; [ "$util" = grep ] && pkg=grep; [ "$util" = dmesg ] && pkg=util-linux
    err "ERROR: Unable to find the system utility \`$util\`; please make sure you have the package '$pkg' installed.  If you do have $util installed, then please check that \`$util\` is in your PATH."
    exit 1
  fi
done
for util in modprobe rmmod lsmod depmod; do
  if ! command -v "$util" >/dev/null 2>&1; then
    err "ERROR: Unable to find the module utility \`$util\`; please make sure you have the package 'module-init-tools' or 'kmod' installed.  If you do have 'module-init-tools' or 'kmod' installed, then please check that \`$util\` is in your PATH."
    exit 1
  fi
done

logit "Using built-in stream user interface"
logit "-> Detected $(nproc 2>/dev/null || echo 1) CPUs online; setting concurrency level to $(nproc 2>/dev/null || echo 1)."
logit "-> Installing NVIDIA driver version $VERSION."
say "-> Installing NVIDIA driver version $VERSION."
if [ "$kmods" = 1 ]; then
  err "@KERNEL_SOURCE_ERROR@"
  err "ERROR: Installation has failed.  Please see the file '$LOG' for details.  You may find suggestions on fixing installation problems in the README available on the Linux driver download page at www.nvidia.com."
  exit 1
fi
logit "-> Skipping check for conflicting rpms."
old=$(ls "$LIBDIR"/libnvidia-ml.so.*.* 2>/dev/null | head -n1 | sed 's/.*libnvidia-ml\.so\.//')
if [ -n "$old" ]; then
  logit "-> Found previous driver installation ($old) at /usr."
  logit "-> Uninstalling the previous installation ($old)."
  say "-> Uninstalling the previous installation ($old)."
  rm -f "$LIBDIR"/libnvidia-ml.so.* "$LIBDIR"/libcuda.so.* "$LIBDIR"/libcuda.so
fi
logit "-> Installing '$TITLE' ($VERSION):"
say "-> Installing '$TITLE' ($VERSION):"
sleep 0.3
mkdir -p /usr/bin "$LIBDIR"
printf '%s' "$SMI_WRAPPER" > /usr/bin/nvidia-smi
chmod 0755 /usr/bin/nvidia-smi
logit "   Installing: /usr/bin/nvidia-smi"
if [ -e "$LAB_ROOT/run/once/installer-killed" ]; then
  rm -f "$LAB_ROOT/run/once/installer-killed"
  logit "   Installing: $LIBDIR/libnvidia-ml.so.$VERSION"
  kill -9 $$
fi
for lib in libnvidia-ml.so libcuda.so; do
  echo "LAB stand-in for $lib.$VERSION (not an NVIDIA library)" > "$LIBDIR/$lib.$VERSION"
  ln -sf "$lib.$VERSION" "$LIBDIR/$lib.1"
  logit "   Installing: $LIBDIR/$lib.$VERSION"
done
ln -sf libcuda.so.1 "$LIBDIR/libcuda.so"
sleep 0.1
logit "-> Driver file installation is complete."
logit "-> Running post-install sanity check:"
logit "-> Post-install sanity check passed."
logit "-> Installation of the $TITLE (version: $VERSION) is now complete."
say "-> Installation of the $TITLE (version: $VERSION) is now complete."
exit 0
__LAB_PAYLOAD_BELOW__
"""


def build_run(version: str) -> bytes:
    """The bytes of ``NVIDIA-Linux-x86_64-<version>.run``: a function of the version alone (`installer_env`
    gives each lab's container what differs between labs)."""
    payload = _payload(version)
    md5 = hashlib.md5(payload.encode()).hexdigest()  # noqa: S324 - makeself's integrity check is MD5
    script = (
        _SCRIPT.replace("@VERSION@", version)
        .replace("@MD5@", md5)
        .replace("@TITLE@", TITLE)
        .replace("@KERNEL_SOURCE_ERROR@", KERNEL_SOURCE_ERROR)
    )
    return (script + payload).encode()


def installer_env(root: Path) -> str:
    """``/.lab/installer.env`` of the lab at `root`'s container views: what the installer stand-in sources."""
    return f"LAB_ROOT={shlex.quote(str(root))}\nSMI_WRAPPER={shlex.quote(smi_wrapper(root))}\n"


def corrupt(data: bytes) -> bytes:
    """A damaged download: some payload bytes flipped (the size stays the same)."""
    buf = bytearray(data)
    start = data.index(b"\n__LAB_PAYLOAD_BELOW__\n") + 200
    for i in range(start, min(start + 64, len(buf))):
        buf[i] ^= 0x5A
    return bytes(buf)


def sha256sum_line(data: bytes, version: str) -> str:
    """The ``.sha256sum`` file next to a .run on download.nvidia.com."""
    return f"{hashlib.sha256(data).hexdigest()}  {run_name(version)}\n"
