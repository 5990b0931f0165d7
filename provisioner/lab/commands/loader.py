"""``ldconfig -p`` and ``ldd`` stand-ins for a lab container, where the NVIDIA libraries are text markers.

The driver installer stand-in (`provisioner.lab.commands.installer`) writes ``libcuda.so.<ver>`` and
``libnvidia-ml.so.<ver>`` as text ("LAB stand-in for ...") with their ``.so.1`` links. The real
``ldconfig`` skips them (not ELF) and the real ``ldd`` says "not a dynamic executable", so the doctor's
loader check (`facts.evidence.CUDA_LOADER`) would call every lab container broken. These two scripts,
in the container's ``/usr/local/sbin`` and ``/usr/local/bin`` (first on its PATH; the real tools stay
in ``/usr/sbin`` and ``/usr/bin``), answer for the markers only and pass everything else on:

* ``ldconfig -p`` prints the real cache plus an entry per ``lib*.so.1`` link in the library directory
  whose target is a marker that exists (a removed ``libcuda.so.1`` has no entry, as after a real
  ``ldconfig``); any other use runs the real ``ldconfig``.
* ``ldd FILE`` on a marker prints what ``ldd`` prints for a real ``libcuda.so``: its DT_NEEDED
  libraries (libm, libc, libdl, libpthread, librt: eyalroz/cuda-api-wrappers#583, "libcuda and libcudart
  both currently depend on libdl, libpthreads and librt; and libcuda on libm"), each resolved in the
  container's library directories or "not found"; other files go to the real ``ldd``.
"""

from __future__ import annotations

from pathlib import Path

from provisioner.lab.commands import write_executable
from provisioner.lab.commands.installer import LIBDIR

MARKER = "LAB stand-in for "
LIBCUDA_NEEDED = ("libm.so.6", "libc.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1")
SYSTEM_LIB_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64")

LDCONFIG = f"""#!/bin/sh
# LAB stand-in (gpu-provisioner lab): `ldconfig -p` also lists the lab's NVIDIA library markers
real=
for c in /usr/sbin/ldconfig /sbin/ldconfig; do if [ -x "$c" ]; then real=$c; break; fi; done
case " $* " in
  *" -p "*|*" --print-cache "*) ;;
  *) if [ -n "$real" ]; then exec "$real" "$@"; fi; echo "ldconfig: not installed" >&2; exit 127 ;;
esac
lab=$(for f in /{LIBDIR}/lib*.so.1; do
  [ -L "$f" ] || continue
  t=$(readlink -f "$f") || continue
  if grep -qs '^{MARKER}' "$t"; then printf '\\t%s (libc6,x86-64) => %s\\n' "${{f##*/}}" "$f"; fi
done)
rest=$(if [ -n "$real" ]; then "$real" -p 2>/dev/null | tail -n +2; fi)
all=$(printf '%s\\n%s\\n' "$lab" "$rest" | grep -v '^$')
printf "%s libs found in cache \\`/etc/ld.so.cache'\\n" "$(printf '%s\\n' "$all" | grep -c .)"
printf '%s\\n' "$all"
"""

LDD = f"""#!/bin/sh
# LAB stand-in (gpu-provisioner lab): ldd on the lab's NVIDIA library markers prints libcuda's needs
real=/usr/bin/ldd
lab=
for f in "$@"; do if grep -qs '^{MARKER}' "$f"; then lab=1; fi; done
[ -n "$lab" ] || exec "$real" "$@"
status=0
for f in "$@"; do
  case $f in -*) continue ;; esac
  if ! grep -qs '^{MARKER}' "$f"; then "$real" "$f" || status=$?; continue; fi
  [ $# -gt 1 ] && echo "$f:"
  printf '\\tlinux-vdso.so.1 (0x00007ffd00000000)\\n'
  for n in {' '.join(LIBCUDA_NEEDED)}; do
    p=
    for d in {' '.join(SYSTEM_LIB_DIRS)}; do if [ -e "$d/$n" ]; then p=$d/$n; break; fi; done
    if [ -n "$p" ]; then printf '\\t%s => %s (0x00007f0000000000)\\n' "$n" "$p"
    else printf '\\t%s => not found\\n' "$n"; fi
  done
  printf '\\t/lib64/ld-linux-x86-64.so.2 (0x00007f0000000000)\\n'
done
exit $status
"""


def write_loader_tools(rootfs: Path) -> None:
    """The two stand-ins into a container root (`ct_seed.seed_container`)."""
    write_executable(rootfs / "usr/local/sbin/ldconfig", LDCONFIG)
    write_executable(rootfs / "usr/local/bin/ldd", LDD)
