"""``nvidia-bug-report.sh`` stand-in for the lab node, after NVIDIA's script (shipped with every driver; e.g.
NVIDIA-Linux-x86_64-390.48/nvidia-bug-report.sh as vendored in sakjain92/Fractional-GPUs):

- ``--output-file <file>``: writes ``<file>.gz`` when gzip is there (default ``nvidia-bug-report.log.gz`` in
  the current directory); ``--safe-mode`` "Disable[s] some parts of the script that may hang the system";
- it tells the user it "may hang trying to capture data generated dynamically by the Linux kernel and/or the
  NVIDIA kernel module", and the log is written section by section (each one appended as its own gzip
  member), so a run that hangs leaves the sections before the hang;
- where the GPU stopped responding, nvidia-smi blocks in the kernel (task in D state, leptonai/gpud#117) and
  the script with it, ``--safe-mode`` or not: scenario ``bug-report-hangs`` blocks at that section until
  the caller stops it (the bundle's bound: ``timeout -k 5``).

Every section says LAB: the content is the lab's own node files and stand-ins, not a real report.
"""

from __future__ import annotations

import gzip
import os
import platform
import sys
import time
from pathlib import Path

from provisioner.lab.commands._common import die, out, state
from provisioner.lab.sandbox import lab_host

SEPARATOR = "____________________________________________\n\n"
HANG_SCENARIO = "bug-report-hangs"


def _section(log: Path, title: str, body: str) -> None:
    """Append one section as its own gzip member (as the script's `... | gzip -c >> $LOG_FILENAME`)."""
    with open(log, "ab") as fh:
        fh.write(gzip.compress(f"{SEPARATOR}{title}\n\n{body.rstrip()}\n\n".encode()))


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        return f"{path}: {exc.strerror}"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    output = "nvidia-bug-report.log"
    it = iter(args)
    for a in it:
        if a == "--output-file":
            output = next(it, "")
            if not output:
                die("nvidia-bug-report.sh: --output-file needs a file name", 1)
        elif a in ("--safe-mode", "--extra-system-data"):
            continue
        elif a in ("-h", "--help"):
            out("nvidia-bug-report.sh [OPTION]...  (LAB stand-in)\n")
            return 0
        else:
            die(f"nvidia-bug-report.sh: unknown option {a!r}", 1)
    lab = state()
    log = Path(output + ".gz")
    out(f"\nnvidia-bug-report.sh will now collect information about your system and create the file '{log}' "
        "in the current directory.  It may take several seconds to run.  In some cases, it may hang trying to "
        "capture data generated dynamically by the Linux kernel and/or the NVIDIA kernel module.  (LAB stand-in)\n\n")
    log.unlink(missing_ok=True)
    _section(log, "Start of NVIDIA bug report log file.  (LAB: gpu-provisioner lab stand-in, not a real report)",
             f"nvidia-bug-report.sh Version: LAB\n\nDate: {time.strftime('%a %b %d %H:%M:%S %Z %Y')}\n"
             f"uname: {' '.join(platform.uname())}")
    _section(log, "/proc/driver/nvidia/version", _read("/proc/driver/nvidia/version"))
    _section(log, "/sys/module/nvidia/version", _read("/sys/module/nvidia/version"))
    if lab.has_scenario(HANG_SCENARIO):
        out("Running nvidia-smi --query ...\n")
        while True:  # blocked as on a GPU that stopped responding; only a signal ends it
            time.sleep(3600)
    host = lab_host(lab.settings())
    gpus = "\n".join(f"GPU {i}: {g.bus_id}" for i, g in enumerate(host.gpus))
    _section(log, "nvidia-smi --query (LAB: the lab's GPUs)",
             f"Driver Version                            : {host.driver_version}\nAttached GPUs : {len(host.gpus)}\n"
             f"{gpus}")
    _section(log, "End of NVIDIA bug report log file.", "")
    out(f"complete.\n\nThe file '{log}' has been created (LAB).\n")
    os.chmod(log, 0o644)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
