"""``nvidia-modprobe`` stand-in: ``-u`` loads nvidia-uvm and (with ``-c=N``) creates its device nodes.

On the lab host this flips LabState's ``host_uvm_nodes``: from then on ``/dev/nvidia-uvm`` and
``/dev/nvidia-uvm-tools`` exist in the node view and ``/proc/devices`` lists ``nvidia-uvm``.
Like the real tool it prints nothing and exits 0.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable

from provisioner.lab.commands._common import die, state
from provisioner.lab.sandbox import write_node_files
from provisioner.lab.state import LabState


def make_nodes(lab: LabState, want: Callable[[str], bool]) -> None:
    """mknod the lab host's nodes selected by `want` in this view (the node's /dev is its own tmpfs)."""
    write_node_files(lab)
    for path, (major, minor) in lab.host_devices().items():
        if want(path) and not os.path.exists(path):
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
                os.chmod(path, 0o666)  # noqa: S103 - nvidia-modprobe's NV_DEVICE_FILE_MODE
            except OSError:
                pass


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    unified = False
    create = False
    it = iter(args)
    for a in it:
        if a in ("-u", "--unified-memory"):
            unified = True
        elif a in ("-c", "--create-nvidia-device-file"):
            next(it, None)
            create = True
        elif a.startswith(("-c=", "--create-nvidia-device-file=")):
            create = True
        elif a in ("-m", "--modeset", "-s", "--nvswitch", "-l", "--nvlink", "-f", "--nvidia-capability-device-file"):
            continue
        elif a.startswith(("-f=", "--nvidia-capability-device-file=")):
            continue
        else:
            die(f"nvidia-modprobe: unrecognized option: \"{a}\"", 1)
    lab = state()
    if create and not lab.settings().host_gpu_nodes:
        # -c=N (nvidia-modprobe.c main): /dev/nvidiactl and /dev/nvidiaN (the lab makes every GPU's node,
        # as the driver's libraries do on first use)
        lab.update_settings(host_gpu_nodes=True)
        make_nodes(lab, lambda path: "uvm" not in path)
    if unified:
        if not lab.settings().host_uvm_nodes:
            lab.update_settings(host_uvm_nodes=True)  # the module loads; -c=N also makes the nodes
        make_nodes(lab, lambda path: "uvm" in path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
