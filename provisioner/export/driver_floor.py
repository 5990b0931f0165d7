"""The host driver floor as a POSIX shell check, for the renderings that run on a host the engine never sees.

The Flox `on-activate` hook and the Nix flake's `torch-runtime` wrapper start with this script: it reads the
loaded kernel module's version from `/proc/driver/nvidia/version` (the `NVRM version:` line, proprietary or
open module: the first field that is a driver number, so `x86_64` in "Open Kernel Module for x86_64" is
passed over), else the first line of `nvidia-smi --query-gpu=driver_version --format=csv,noheader`, and exits
1 with one line naming the host's driver and the floor when the driver is below the floor or absent. Nothing
of what the host prints reaches the shell as code: awk keeps only a field of digits and dots.

`GPU_PROVISIONER_DRIVER_VERSION_FILE` and `GPU_PROVISIONER_NVIDIA_SMI` name other sources (a container that
sees the host's file elsewhere; the tests' fake inputs).
"""

from __future__ import annotations

import re
import shlex

from provisioner.export.models import HostNeeds

_DRIVER = re.compile(r"[0-9]{2,4}(\.[0-9]{1,3}){0,2}")

#: the driver number of a `/proc/driver/nvidia/version` text (awk program)
_PROC_AWK = ("/^NVRM version:/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+[.][0-9]+([.][0-9]+)?$/) "
             "{ print $i; exit } }")
_SMI_AWK = "NR == 1 { if ($1 ~ /^[0-9]+[.][0-9]+([.][0-9]+)?$/) print $1; exit }"
#: 1 when the driver `a` is below the floor `b`, numerically per component (a missing component is 0)
_BELOW_AWK = ("BEGIN { n = split(a, x, \".\"); m = split(b, y, \".\"); for (i = 1; i <= 3; i++) "
              "{ p = (i <= n) ? x[i] + 0 : 0; q = (i <= m) ? y[i] + 0 : 0; if (p < q) { print 1; exit } "
              "if (p > q) { print 0; exit } } print 0 }")


def check_script(host: HostNeeds) -> str:
    """POSIX sh: exits 1 (one line on stderr) unless the host's NVIDIA driver is at least `host.min_driver`."""
    floor, proven = host.min_driver, host.driver_proven_on
    if not _DRIVER.fullmatch(floor):
        raise ValueError(f"host.json: min_driver: not a driver version: {floor!r}")
    if proven and not _DRIVER.fullmatch(proven):
        raise ValueError(f"host.json: driver_proven_on: not a driver version: {proven!r}")
    q = shlex.quote
    return "\n".join([
        "# the host driver floor (gpu-provisioner export, host.json min_driver): checked before anything runs",
        f"gp_floor={q(floor)}",
        f"gp_proven={q(proven or 'unknown')}",
        'gp_file="${GPU_PROVISIONER_DRIVER_VERSION_FILE:-/proc/driver/nvidia/version}"',
        'gp_smi="${GPU_PROVISIONER_NVIDIA_SMI:-nvidia-smi}"',
        'gp_driver=""',
        'if [ -r "$gp_file" ]; then',
        f'  gp_driver=$(awk {q(_PROC_AWK)} "$gp_file" 2>/dev/null)',
        "fi",
        'if [ -z "$gp_driver" ] && command -v "$gp_smi" >/dev/null 2>&1; then',
        f'  gp_driver=$("$gp_smi" --query-gpu=driver_version --format=csv,noheader 2>/dev/null | awk {q(_SMI_AWK)})',
        "fi",
        'if [ -z "$gp_driver" ]; then',
        '  echo "gpu-provisioner: no NVIDIA driver found ($gp_file absent, no $gp_smi): this runtime needs the host'
        ' driver >= $gp_floor (proven on $gp_proven)" >&2',
        "  exit 1",
        "fi",
        f'if [ "$(awk -v a="$gp_driver" -v b="$gp_floor" {q(_BELOW_AWK)})" = 1 ]; then',
        '  echo "gpu-provisioner: the host NVIDIA driver $gp_driver is below this runtime\'s floor $gp_floor'
        ' (proven on $gp_proven): upgrade the host driver" >&2',
        "  exit 1",
        "fi",
        "export GPU_PROVISIONER_HOST_DRIVER=\"$gp_driver\"",
    ]) + "\n"
