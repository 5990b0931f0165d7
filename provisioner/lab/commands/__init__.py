"""The lab's stand-ins for node and container commands (everything they print says LAB where it is simulated).

Node side (wrappers in ``<root>/bin``, first on the node's PATH): ``pct``, ``pveversion``, ``pvesm``,
``nvidia-smi``, ``nvidia-modprobe``, ``nvidia-bug-report.sh``, ``lspci`` and ``pvesh`` (from `provisioner.lab.pvesh`).
Container side (written into a container by `ct_seed` or by the driver installer):
``apt-get``/``apt`` stand-ins, ``kmod`` tools once installed, and the installer's ``nvidia-smi``.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from provisioner.lab import safe_fs
from provisioner.lab.host_tools import lab_python, lab_pythonpath
from provisioner.lab.state import bin_dir

#: wrapper name -> python module run by it
NODE_COMMANDS: dict[str, str] = {
    "pct": "provisioner.lab.commands.pct",
    "pveversion": "provisioner.lab.commands.pveversion",
    "pvesm": "provisioner.lab.commands.pvesm",
    "nvidia-smi": "provisioner.lab.commands.nvidia_smi",
    "nvidia-modprobe": "provisioner.lab.commands.nvidia_modprobe",
    "lspci": "provisioner.lab.commands.lspci",
    "pvesh": "provisioner.lab.pvesh",
    "systemctl": "provisioner.lab.commands.systemctl",
    "nvidia-bug-report.sh": "provisioner.lab.commands.nvidia_bug_report",
}


CLIENT = Path(__file__).with_name("_client.py")


def resident_socket(root: Path) -> Path:
    """The resident stand-in server's socket (`provisioner.lab.resident`, held by the node view's holder)."""
    return root / "run" / "resident" / "node.sock"


def wrapper_text(module: str, root: Path, *extra: str) -> str:
    """A /bin/sh wrapper that runs `module` with the lab's Python and root: through the resident
    stand-in server while it runs (the stand-in runs in the caller's own view, see
    `provisioner.lab.resident`), else itself."""
    args = " ".join(shlex.quote(a) for a in extra)
    args = f"{args} " if args else ""
    py = shlex.quote(lab_python())
    pythonpath = os.pathsep.join(str(p) for p in lab_pythonpath())
    sock = shlex.quote(str(resident_socket(root)))
    return (
        "#!/bin/sh\n"
        "# LAB stand-in (gpu-provisioner lab); not the real command\n"
        f"PROVISIONER_LAB_ROOT={shlex.quote(str(root))}; export PROVISIONER_LAB_ROOT\n"
        # the lab's Python finds the stand-ins' package wherever it came from (an install, PYTHONPATH)
        f"PYTHONPATH={shlex.quote(pythonpath)}${{PYTHONPATH:+:$PYTHONPATH}}; export PYTHONPATH\n"
        f"if [ -S {sock} ]; then\n"
        f'  exec {py} -S {shlex.quote(str(CLIENT))} {sock} {py} {module} {args}"$@"\n'
        "fi\n"
        f"exec {py} -m {module} {args}\"$@\"\n"
    )


def write_executable(path: Path, text: str, root: Path | None = None) -> None:
    """Write an executable (0755) by a rename; with `root` (the lab root, a container's root) beneath it,
    no link followed on the way (`provisioner.lab.safe_fs`)."""
    if root is not None:
        safe_fs.write_bytes(root, path, text.encode(), 0o755)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o755)
    os.replace(tmp, path)


def write_node_bin(root: Path) -> Path:
    """Create ``<root>/bin`` with one wrapper per node stand-in; returns the directory."""
    d = bin_dir(root)
    for name, module in NODE_COMMANDS.items():  # by the lab server: never through a link the node planted
        safe_fs.write_bytes(root, d / name, wrapper_text(module, root).encode(), 0o755)
    return d
