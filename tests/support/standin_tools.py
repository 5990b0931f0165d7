"""Stand-in host tools on PATH (nvidia-smi, pct, dmesg...) answering with recorded real outputs, and a local transport
that finds them (once in the support-collect test module)."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

from provisioner.transport.local import LocalTransport

OUTPUTS = Path(__file__).resolve().parents[1] / "fixtures" / "outputs"
VENV = sys.prefix  # the venv running the tests: it has torch (a CPU build in CI)
HAS_NVIDIA_SMI = shutil.which("nvidia-smi") is not None
HAS_NVIDIA_MODULE = Path("/sys/module/nvidia/version").exists()

# dmesg lines in the kernel's format (NVRM banner; Xid format per reference/burnin.md §XID).
DMESG_LINES = (
    "[    4.211930] nvidia: loading out-of-tree module taints kernel.",
    "[    4.250101] nvidia-nvlink: Nvlink Core is being initialized, major device number 236",
    "[    4.312345] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
    "(dvs-builder@U22-I3-AF03-09-1)  Tue Sep 23 09:42:33 UTC 2025",
    "[    5.001200] EXT4-fs (dm-1): mounted filesystem with ordered data mode.",
    "[ 8123.456789] NVRM: Xid (PCI:0000:16:00): 79, pid=2231, name=python3, GPU has fallen off the bus.",
)


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def standin_bin(tmp: Path, *, vmid: int = 200, dmesg_extra: tuple[str, ...] = (), ct_wrapper: str = "") -> Path:
    """A directory of stand-ins for a 2 × RTX PRO 6000 (580.95.05) Proxmox node.

    `pct exec <vmid> -- cmd` runs cmd on this machine with STANDIN_CT=1 (optionally through
    `ct_wrapper`, e.g. an `unshare` that mounts the container's /var/log); in the "container"
    nvidia-smi fails with the driver/library mismatch recorded in smi_mismatch.txt.
    """
    bindir = tmp / "standin-bin"
    bindir.mkdir(parents=True, exist_ok=True)
    csv = OUTPUTS / "smi_query_csv_rtxpro6000_x2_580.txt"
    _script(bindir / "nvidia-smi", f"""#!/bin/sh
if [ -n "$STANDIN_CT" ]; then cat '{OUTPUTS}/smi_mismatch.txt'; exit 18; fi
case "$1" in
  -L) awk -F', ' '{{print "GPU " $1 ": " $2 " (UUID: " $3 ")"}}' '{csv}' ;;
  -q) cat '{OUTPUTS}/smi_q_rtx5090_570.txt' ;;
  --query-gpu=*) cat '{csv}' ;;
  "") cat '{OUTPUTS}/smi_table_rtxpro6000_x2_595.txt' ;;
  *) echo "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."; exit 2 ;;
esac
""")
    dmesg = "\n".join((*DMESG_LINES, *dmesg_extra)) + "\n"
    (bindir / "dmesg.txt").write_text(dmesg)
    _script(bindir / "dmesg", f"#!/bin/sh\ncat '{bindir}/dmesg.txt'\n")
    _script(bindir / "pct", f"""#!/bin/sh
cmd=$1; shift
vmid=$1; shift
if [ "$vmid" != "{vmid}" ]; then echo "Configuration file 'nodes/pve/lxc/$vmid.conf' does not exist" >&2; exit 255; fi
case "$cmd" in
  exec) [ "$1" = "--" ] && shift
        # bash -lc would reset PATH from /etc/profile and lose the stand-ins: run it without login
        if [ "$1" = bash ] && [ "$2" = -lc ]; then shift 2; set -- bash -c "$@"; fi
        STANDIN_CT=1; export STANDIN_CT; exec {ct_wrapper} "$@" ;;
  status) echo "status: running"; echo "name: ml-burn"; echo "cpus: 64" ;;
  *) echo "400 unknown command 'pct $cmd'" >&2; exit 255 ;;
esac
""")
    return bindir


def standin_transport(bindir: Path, **env: str) -> LocalTransport:
    return LocalTransport(env={"PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}", **env})
