"""``lspci -nn`` lines and the NVSwitch probe (PCI bridges of class 0680, their /dev and /proc entries)."""

from __future__ import annotations

import re

from provisioner.facts.models import NvSwitchFacts, PciDevice
from provisioner.facts.nvidia_text import split_lines

# --- lspci -nn, NVSwitch ------------------------------------------------------------------------

_LSPCI_NN_RE = re.compile(
    r"^(?P<slot>[0-9A-Fa-f:.]+)\s+(?P<desc>.*?)\s*\[(?P<cls>[0-9a-fA-F]{4})\]:\s*(?P<rest>.*?)"
    r"\s*\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]")


def parse_lspci_nn(text: str) -> list[PciDevice]:
    """Parse ``lspci -nn`` lines (``07:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3]``)."""
    out = []
    for raw in split_lines(text):
        m = _LSPCI_NN_RE.match(raw.strip())
        if m:
            out.append(PciDevice(slot=m.group("slot"), class_id=m.group("cls").lower(),
                                 vendor_id=m.group("vendor").lower(), device_id=m.group("device").lower(),
                                 description=f"{m.group('desc')}: {m.group('rest')}"))
    return out


NVSWITCH_COMMAND: tuple[str, ...] = (
    "sh", "-c", "lspci -nn -d 10de: 2>/dev/null | sed 's/^/pci: /'; "
                "for d in /dev/nvidia-nvswitch[0-9]*; do [ -e \"$d\" ] && echo \"dev: $d\"; done; "
                "ls -1 /proc/driver/nvidia-nvswitch/devices 2>/dev/null | sed 's/^/proc: /'; true")

#: PCI class of an NVSwitch: "Bridge [0680]" (e.g. 10de:1af1 NVSwitch, 10de:22a3 H100 NVSwitch in pci.ids)
NVSWITCH_PCI_CLASS = "0680"


def parse_nvswitch(text: str) -> NvSwitchFacts:
    """Parse the output of :data:`NVSWITCH_COMMAND` (prefixed lines pci:/dev:/proc:)."""
    pci: list[str] = []
    devs: list[str] = []
    procs: list[str] = []
    for raw in split_lines(text):
        line = raw.strip()
        if line.startswith("pci: "):
            for d in parse_lspci_nn(line[5:]):
                if d.vendor_id == "10de" and d.class_id == NVSWITCH_PCI_CLASS:
                    pci.append(f"{d.slot} [{d.vendor_id}:{d.device_id}]")
        elif line.startswith("dev: "):
            devs.append(line[5:].strip())
        elif line.startswith("proc: ") and line[6:].strip():
            procs.append(line[6:].strip())
    return NvSwitchFacts(pci=tuple(pci), dev_nodes=tuple(devs), proc_devices=tuple(procs))
