"""``nvidia-modprobe`` stand-in, after NVIDIA/nvidia-modprobe's ``main``: ``-c=N`` creates /dev/nvidiaN
(255: nvidiactl), ``-u`` loads nvidia-uvm and (with ``-c=N``) creates its device nodes, ``-m`` loads
nvidia-modeset and creates its node, ``-s -c=N`` NVSwitch nodes, ``-f=<proc cap file>`` caps nodes.

On the lab host this flips LabState's ``host_uvm_nodes``: from then on ``/dev/nvidia-uvm`` and
``/dev/nvidia-uvm-tools`` exist in the node view and ``/proc/devices`` lists ``nvidia-uvm``.
Like the real tool it prints nothing and exits 0.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

from provisioner.lab.commands._common import die, state
from provisioner.lab.sandbox import add_node_devices, write_node_files
from provisioner.lab.state import LabState


def make_nodes(lab: LabState, want: Callable[[str], bool]) -> None:
    """Make the lab host's nodes selected by `want` appear in this view at once (the node's /dev is a
    tmpfs of its own; a user namespace cannot mknod, so the lab's node is bound onto the path, mode 0666
    as nvidia-modprobe's NV_DEVICE_FILE_MODE) and list them in the view's device table."""
    write_node_files(lab)
    add_node_devices(lab, [p for p in lab.host_devices() if want(p)])


CAP_FILES = {"/proc/driver/nvidia/capabilities/mig/config": "/dev/nvidia-caps/nvidia-cap1",
             "/proc/driver/nvidia/capabilities/mig/monitor": "/dev/nvidia-caps/nvidia-cap2"}


def _value(a: str, it: Iterator[str]) -> str:
    return a.split("=", 1)[1] if "=" in a else next(it, "")


def main(argv: list[str] | None = None) -> int:
    """NVIDIA/nvidia-modprobe ``main``: -c=N collects minors; then -l / -s / -u / plain (nvidia.ko) in that
    precedence each create their own kind of node for the minors; -m adds nvidia-modeset; -f capability nodes."""
    args = list(sys.argv[1:] if argv is None else argv)
    unified = modeset = nvswitch = nvlink = False
    minors: list[int] = []
    caps: list[str] = []
    it = iter(args)
    for a in it:
        if a in ("-u", "--unified-memory"):
            unified = True
        elif a in ("-m", "--modeset"):
            modeset = True
        elif a in ("-s", "--nvswitch"):
            nvswitch = True
        elif a in ("-l", "--nvlink"):
            nvlink = True
        elif a == "-c" or a.startswith(("-c=", "--create-nvidia-device-file")):
            value = _value(a, it)
            if not value.isdigit():
                die("nvidia-modprobe: Invalid commandline, please run `nvidia-modprobe --help` for usage "
                    "information.", 1)
            minors.append(int(value))
        elif a == "-f" or a.startswith(("-f=", "--nvidia-capability-device-file")):
            caps.append(_value(a, it))
        else:
            die("nvidia-modprobe: Invalid commandline, please run `nvidia-modprobe --help` for usage "
                "information.", 1)
    lab = state()
    wanted: list[str] = []
    if nvlink:
        pass  # /dev/nvidia-nvlink: not modelled
    elif nvswitch:
        wanted += ["/dev/nvidia-nvswitchctl" if m == 255 else f"/dev/nvidia-nvswitch{m}" for m in minors]
    elif unified:
        # nvidia_uvm_modprobe + nvidia_uvm_mknod(minor): /dev/nvidia-uvm and /dev/nvidia-uvm-tools.
        # LAB: the module and its nodes are one switch (host_uvm_nodes), so -u alone also makes them.
        if not lab.settings().host_uvm_nodes:
            lab.update_settings(host_uvm_nodes=True)
        make_nodes(lab, lambda path: "uvm" in path)
    else:
        wanted += ["/dev/nvidiactl" if m == 255 else f"/dev/nvidia{m}" for m in minors]
    if modeset:
        lab.update_settings(modeset_loaded=True)
        wanted.append("/dev/nvidia-modeset")
    wanted += [CAP_FILES[c] for c in caps if c in CAP_FILES]
    if wanted:
        create(lab, wanted)
    return 0


def create(lab: LabState, paths: list[str]) -> None:
    """Record `paths` as created on the lab host and mknod them in this view."""
    from provisioner.lab.profiles import create_nodes

    with lab.lock():
        lab.update_settings(host_created_nodes=create_nodes(lab.settings(), paths))
    make_nodes(lab, lambda path: path in paths)


if __name__ == "__main__":
    raise SystemExit(main())
