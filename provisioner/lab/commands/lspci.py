"""``lspci`` stand-in for the lab node: a few host bridges plus the lab's GPUs (``-nn``, ``-d 10de:``)."""

from __future__ import annotations

import sys

from provisioner.lab.commands._common import state
from provisioner.lab.sandbox import lab_host

#: (PCI device id, lspci marketing name) of the lab's GPU
GPU_DEVICE = ("2bb5", "GB202GL [RTX PRO 6000 Blackwell Server Edition]")
_OTHER = [
    ("00:00.0", "Host bridge", "0600", "Advanced Micro Devices, Inc. [AMD]", "1022", "14a4",
     "Genoa/Bergamo Root Complex", "rev 01"),
    ("00:01.0", "Host bridge", "0600", "Advanced Micro Devices, Inc. [AMD]", "1022", "149f",
     "Genoa/Bergamo Dummy Host Bridge", "rev 01"),
    ("01:00.0", "Ethernet controller", "0200", "Intel Corporation", "8086", "1521",
     "I350 Gigabit Network Connection", "rev 01"),
]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    numeric = "-nn" in args or "-n" in args
    vendor_filter = None
    if "-d" in args:
        i = args.index("-d")
        vendor_filter = args[i + 1].split(":")[0].lower() if i + 1 < len(args) else None
    host = lab_host(state().settings())
    rows = []
    for slot, cls, cls_id, vendor, vid, did, name, rev in _OTHER:
        rows.append((slot, cls, cls_id, vendor, vid, did, name, rev))
    for g in host.gpus:
        slot = g.bus_id.split(":", 1)[1].lower()
        rows.append((slot, "3D controller", "0302", "NVIDIA Corporation", "10de", GPU_DEVICE[0], GPU_DEVICE[1], "rev a1"))
    for slot, cls, cls_id, vendor, vid, did, name, rev in sorted(rows):
        if vendor_filter and vid != vendor_filter:
            continue
        if numeric:
            sys.stdout.write(f"{slot} {cls} [{cls_id}]: {vendor} {name} [{vid}:{did}] ({rev})\n")
        else:
            sys.stdout.write(f"{slot} {cls}: {vendor} {name} ({rev})\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
