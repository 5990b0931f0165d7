"""``nvidia-modprobe`` stand-in: ``-u`` loads nvidia-uvm and (with ``-c=N``) creates its device nodes.

On the lab host this flips LabState's ``host_uvm_nodes``: from then on ``/dev/nvidia-uvm`` and
``/dev/nvidia-uvm-tools`` exist in the node view and ``/proc/devices`` lists ``nvidia-uvm``.
Like the real tool it prints nothing and exits 0.
"""

from __future__ import annotations

import sys

from provisioner.lab.commands._common import die, state
from provisioner.lab.sandbox import add_node_devices, write_node_files


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    unified = False
    it = iter(args)
    for a in it:
        if a in ("-u", "--unified-memory"):
            unified = True
        elif a in ("-c", "--create-nvidia-device-file"):
            next(it, None)
        elif a.startswith(("-c=", "--create-nvidia-device-file=")):
            continue
        elif a in ("-m", "--modeset", "-s", "--nvswitch", "-l", "--nvlink", "-f", "--nvidia-capability-device-file"):
            continue
        elif a.startswith(("-f=", "--nvidia-capability-device-file=")):
            continue
        else:
            die(f"nvidia-modprobe: unrecognized option: \"{a}\"", 1)
    if unified:
        lab = state()
        if not lab.settings().host_uvm_nodes:
            lab.update_settings(host_uvm_nodes=True)  # the module loads; -c=N also makes the nodes
        write_node_files(lab)
        # the nodes appear at once in this view too (the node's /dev is a tmpfs of its own; a user
        # namespace cannot mknod, so the lab's node is bound onto the path, mode 0666 as
        # nvidia-modprobe's NV_DEVICE_FILE_MODE)
        add_node_devices(lab, [p for p in lab.host_devices() if "uvm" in p])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
