"""``modprobe``/``lsmod``/``depmod``/``rmmod`` in a lab container (installed by the apt-get stand-in's kmod).

A container shares the host's kernel: ``lsmod`` lists the host's NVIDIA modules; loading or
removing modules is refused as in an LXC container (no /lib/modules for the running kernel).
"""

from __future__ import annotations

import sys
from pathlib import Path

from provisioner.lab.commands._common import out, state
from provisioner.lab.sandbox import lab_host


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    tool, rest = (args[0], args[1:]) if args else ("kmod", [])
    kernel = lab_host(state().settings()).kernel
    if tool == "lsmod":
        lines = ["Module                  Size  Used by"]
        if Path("/sys/module/nvidia_uvm").exists():
            lines.append("nvidia_uvm           2076672  0")
        lines += ["nvidia_drm            131072  0", "nvidia_modeset       1724416  1 nvidia_drm",
                  "nvidia              11640832  2 nvidia_uvm,nvidia_modeset"]
        out("\n".join(lines) + "\n")
        return 0
    if tool == "depmod":
        return 0
    if tool in ("modprobe", "insmod", "modinfo"):
        if "--version" in rest or "-V" in rest:
            out("kmod version 31\n+ZSTD +XZ -ZLIB +LIBCRYPTO -EXPERIMENTAL\n")
            return 0
        names = [a for a in rest if not a.startswith("-")]
        sys.stderr.write(f"{tool}: FATAL: Module {names[0] if names else ''} not found in directory "
                         f"/lib/modules/{kernel}\n")
        return 1
    if tool == "rmmod":
        names = [a for a in rest if not a.startswith("-")]
        sys.stderr.write(f"rmmod: ERROR: could not remove module {names[0] if names else ''}: Operation not permitted\n")
        return 1
    out("kmod version 31\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
