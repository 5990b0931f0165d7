"""Evidence facts: the probes `provisioner bundle` and `diagnose --host` run besides the steps' facts.

Each is a `Fact` like those of `facts.catalog` (a fixed command plus a pure parser). Most evidence
is read for its text (a kernel log, the installer log, `nvidia-smi -q`): those parse to `RawText`,
and the bundle keeps only their raw output. Probes are written so that "the thing is legitimately
not there" is an exit status of its own (`ABSENT`, 3; the shell's 127 is "command not found").

Facts that need a container id or a venv are templates: `{vmid}` and `{venv}` are whole argv
elements (or inside a path element for the vmid) that `bind` fills in — never spliced into a script
(the venv is passed as `$1`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from provisioner.facts import catalog
from provisioner.facts.base import Fact, FactCache
from provisioner.facts.models import RawText
from provisioner.transport.base import Transport

VENV = "{venv}"
VMID = "{vmid}"
DEFAULT_VENV = "/opt/torch-venv"  # venv.build's default path
INSTALLER_LOG = "/var/log/nvidia-installer.log"
BOOT_UNIT_NAME = "gpu-provisioner-nvidia-nodes.service"  # lxc.boot_persistence's unit (`drift.UNIT_NAME`)
BOOT_UNIT_PATH = f"/etc/systemd/system/{BOOT_UNIT_NAME}"
MANIFEST_DIR = "/etc/gpu-provisioner"  # the provisioning record per container (`drift.manifest_path`)
ABSENT = 3  # exit status our probe scripts use for "not there"
TIMED_OUT = 124  # coreutils `timeout`'s status when it had to stop the command (our probe scripts pass it on)
BUG_REPORT_BOUND_S = 120  # default bound on nvidia-bug-report.sh (it hangs where a GPU stops responding)


def raw_text(text: str) -> RawText:
    """The parser of evidence read for its text: the text itself."""
    return RawText(text=text)


def _raw(name: str, argv: tuple[str, ...], timeout: float = 30.0) -> Fact[RawText]:
    return Fact(name, argv, raw_text, timeout=timeout)


def _absent_unless_file(path: str, reader: str) -> tuple[str, ...]:
    return ("sh", "-c", f'[ -r "$1" ] || {{ echo "$1: not present"; exit {ABSENT}; }}; {reader} "$1"', "sh", path)


def _venv_python(script: str) -> tuple[str, ...]:
    """argv running `script` with `<venv>/bin/python`; exit 3 (absent) when the venv has none."""
    return ("sh", "-c",
            f'py="$1/bin/python"; [ -x "$py" ] || {{ echo "no python at $py"; exit {ABSENT}; }}; exec "$py" -c "$2"',
            "sh", VENV, script)


# Runs in the venv's python: prints warnings/tracebacks as they come, then ONE JSON line last.
TORCH_SCRIPT = r"""
import json, platform, sys
out = {"python": sys.executable, "python_version": sys.version.split()[0], "platform": platform.platform()}
try:
    import torch
except Exception as exc:
    out["error"] = f"import torch failed: {type(exc).__name__}: {exc}"
    print(json.dumps(out)); sys.exit(0)
out["torch"] = torch.__version__
out["cuda"] = torch.version.cuda
out["hip"] = getattr(torch.version, "hip", None)
out["debug"] = bool(torch.version.debug)
try:
    out["cudnn"] = torch.backends.cudnn.version()
except Exception as exc:
    out["cudnn"] = f"error: {exc}"
flags = getattr(torch._C, "_cuda_getArchFlags", lambda: None)()
out["arch_flags"] = flags.split() if flags else []
try:
    out["available"] = bool(torch.cuda.is_available())
    out["count"] = torch.cuda.device_count() if out["available"] else 0
    out["arch_list"] = list(torch.cuda.get_arch_list()) if out["available"] else out["arch_flags"]
    out["capabilities"] = [".".join(map(str, torch.cuda.get_device_capability(i))) for i in range(out["count"])]
    out["devices"] = [torch.cuda.get_device_name(i) for i in range(out["count"])]
except Exception as exc:
    out["cuda_error"] = f"{type(exc).__name__}: {exc}"
    out.setdefault("arch_list", out["arch_flags"])
try:
    v = torch.cuda.nccl.version() if out.get("cuda") else None
    out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else v
except Exception as exc:
    out["nccl"] = f"error: {exc}"
print(json.dumps(out))
"""

PACKAGES_SCRIPT = r"""
import importlib.metadata as m
seen = {}
for d in m.distributions():
    name = d.metadata["Name"]
    if name:
        seen[name.lower()] = f"{name}=={d.version}"
print("\n".join(sorted(seen.values(), key=str.lower)))
"""



UNAME = _raw("uname", ("uname", "-a"))
PVEVERSION_VERBOSE = _raw("pveversion_verbose", ("pveversion", "-v"))
MODULE_VERSION_FILE = _raw("module_version_file", _absent_unless_file("/sys/module/nvidia/version", "cat"))
PROC_DRIVER_VERSION_FILE = _raw("proc_driver_version_file",
                                _absent_unless_file("/proc/driver/nvidia/version", "cat"))
SMI_LIST = _raw("nvidia_smi_list", ("nvidia-smi", "-L"))
SMI_QUERY = _raw("nvidia_smi_q", ("nvidia-smi", "-q"), timeout=90.0)
SMI = _raw("nvidia_smi", ("nvidia-smi",))
NVIDIA_MODULES = _raw("nvidia_modules",
                      ("sh", "-c", "grep -E '^nvidia' /proc/modules || echo 'no nvidia module loaded'"))
DMESG_NVIDIA = _raw("dmesg_nvidia",
                    ("sh", "-c", 'out=$(dmesg 2>&1) || { printf "%s\\n" "$out" | tail -n 5; exit 1; }; '
                                 'printf "%s\\n" "$out" | grep -E "NVRM|Xid|nvidia" | tail -n 2000; true'))
LXC_CONFIG_FILE = _raw("lxc_config_file", _absent_unless_file(f"/etc/pve/lxc/{VMID}.conf", "cat"))
PCT_STATUS = _raw("pct_status", ("pct", "status", VMID, "--verbose"))
LIBC_BANNER = _raw("libc_banner", ("sh", "-c", "ldd --version 2>&1 | head -n 2"))
LDCONFIG_NVIDIA = _raw("ldconfig_nvidia",
                       ("sh", "-c", "ldconfig -p 2>/dev/null | grep -E 'libcuda|libnvidia|libcudnn|libnccl|libcublas'; "
                                    "true"))
#: what the dynamic loader finds for the CUDA driver library (torch dlopens "libcuda.so.1"): the
#: `ldconfig -p` entries, the file it resolves to (a stale cache entry whose file is gone is skipped, as
#: ld.so skips it; then LD_LIBRARY_PATH and the default directories), and `ldd` on it (what it needs, each
#: resolved or "not found"). Exit 1 when libcuda.so.1 does not resolve or what it needs does not.
CUDA_LOADER = _raw("cuda_loader", ("sh", "-c", r"""
if command -v ldconfig >/dev/null 2>&1; then
  cache=$(ldconfig -p 2>&1) || echo "ldconfig -p failed: $(printf '%s\n' "$cache" | head -n 1)"
  printf '%s\n' "$cache" | grep -E '^[[:space:]]*lib(cuda|nvidia-ml)\.so\.1 ' | sed 's/^[[:space:]]*/ldconfig: /'
else
  cache=""; echo "ldconfig: not installed"
fi
path=""
for p in $(printf '%s\n' "$cache" | sed -n 's/^[[:space:]]*libcuda\.so\.1 .*=> //p'); do
  if [ -e "$p" ]; then path=$p; break; fi
  echo "ldconfig: stale entry $p (the file is gone)"
done
if [ -z "$path" ]; then
  rest=${LD_LIBRARY_PATH:-}
  while [ -z "$path" ] && [ -n "$rest" ]; do
    d=${rest%%:*}; [ "$d" = "$rest" ] && rest="" || rest=${rest#*:}
    if [ -n "$d" ] && [ -e "$d/libcuda.so.1" ]; then path=$d/libcuda.so.1; fi
  done
fi
if [ -z "$path" ]; then
  for d in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib/aarch64-linux-gnu /usr/lib/aarch64-linux-gnu \
           /lib64 /usr/lib64 /lib /usr/lib; do
    if [ -e "$d/libcuda.so.1" ]; then path=$d/libcuda.so.1; break; fi
  done
fi
if [ -z "$path" ]; then
  echo "libcuda.so.1: not found by the loader (no ldconfig entry, not in LD_LIBRARY_PATH or the default library directories)"
  exit 1
fi
echo "resolved: libcuda.so.1 => $path ($(readlink -f "$path" 2>/dev/null || echo "$path"))"
if ! command -v ldd >/dev/null 2>&1; then echo "ldd: not installed (what libcuda.so.1 needs was not checked)"; exit 0; fi
out=$(ldd "$path" 2>&1); rc=$?
printf '%s\n' "$out" | sed 's/^[[:space:]]*/needs: /'
[ "$rc" -eq 0 ] || exit 1
if printf '%s\n' "$out" | grep -qE 'not found|not a dynamic executable|wrong ELF class|cannot open'; then exit 1; fi
exit 0
"""))
#: the environment of a login shell (where a profile sets NCCL_*/CUDA_*); other variables are never read
GPU_ENV = replace(_raw("gpu_env", ("sh", "-c", "env | grep -E "
                                   "'^(NCCL_|CUDA_|NVIDIA_|TORCH_|PYTORCH_|LD_LIBRARY_PATH=|OMP_NUM_THREADS=)' | sort; true")),
                  login=True)
INSTALLER_LOG_TAIL = _raw("installer_log_tail", _absent_unless_file(INSTALLER_LOG, "tail -n 5000"), timeout=60.0)
# What drift (`diagnose --host`, `plan --check`) compares with the provisioning record.
PROVISIONING_MANIFEST = _raw("provisioning_manifest", ("cat", f"{MANIFEST_DIR}/ct{VMID}.json"))
BOOT_UNIT_FILE = _raw("boot_unit_file", ("cat", BOOT_UNIT_PATH))
BOOT_UNIT_ENABLED = _raw("boot_unit_enabled", ("systemctl", "is-enabled", BOOT_UNIT_NAME))
PCT_STATE = _raw("pct_state", ("pct", "status", VMID))



def bug_report_fact(bound_s: int = BUG_REPORT_BOUND_S) -> Fact[RawText]:
    """NVIDIA's `nvidia-bug-report.sh` (installed with the driver), bounded to `bound_s` seconds.

    It runs in a private temp dir with `--safe-mode` ("Disable some parts of the script that may hang the
    system", the script's own usage text) and `--output-file`, to which it appends `.gz` when gzip is
    there; the probe prints the log uncompressed. NVIDIA's docs allow it to "run slowly" and it blocks for
    good where nvidia-smi does (a GPU that stopped responding, the task in D state: leptonai/gpud#117), so
    `timeout -k 5` stops it: exit `TIMED_OUT` (124) with what it had written so far. Not installed: `ABSENT`.
    The bound is a separate argv element (`$1`), never spliced into the script."""
    bound = int(bound_s)
    if not 1 <= bound <= 3600:
        raise ValueError(f"nvidia-bug-report.sh bound must be 1..3600 s, not {bound_s}")
    script = (
        f'command -v nvidia-bug-report.sh >/dev/null 2>&1 || {{ echo "nvidia-bug-report.sh: not installed"; '
        f'exit {ABSENT}; }}\n'
        'd=$(mktemp -d) || exit 1\n'
        "trap 'rm -rf \"$d\"' EXIT\n"
        'cd "$d" || exit 1\n'
        'timeout -k 5 "$1" nvidia-bug-report.sh --safe-mode --output-file "$d/nvidia-bug-report.log" '
        '>"$d/console.txt" 2>&1 </dev/null\n'
        'rc=$?\n'
        'if [ -s "$d/nvidia-bug-report.log.gz" ]; then gzip -dc "$d/nvidia-bug-report.log.gz" 2>/dev/null\n'
        'elif [ -s "$d/nvidia-bug-report.log" ]; then cat "$d/nvidia-bug-report.log"; fi\n'
        f'if [ "$rc" -eq {TIMED_OUT} ] || [ "$rc" -eq 137 ]; then\n'
        '  echo "nvidia-bug-report.sh: timed out after $1 s and was stopped (a GPU that does not respond?)"\n'
        '  tail -n 5 "$d/console.txt"\n'
        f'  exit {TIMED_OUT}\n'
        'fi\n'
        '[ "$rc" -eq 0 ] || tail -n 5 "$d/console.txt"\n'
        'exit "$rc"\n'
    )
    return _raw("nvidia_bug_report", ("sh", "-c", script, "sh", str(bound)), timeout=bound + 30.0)


NVIDIA_BUG_REPORT = bug_report_fact()
TORCH_SUMMARY = _raw("torch_summary", _venv_python(TORCH_SCRIPT), timeout=180.0)
VENV_PACKAGES = _raw("venv_packages", _venv_python(PACKAGES_SCRIPT), timeout=60.0)

#: every fact support/ and diagnose/ may run: the steps' catalogue plus the evidence facts above
CATALOGUE: tuple[Fact[Any], ...] = tuple(
    v for v in [*vars(catalog).values(), *list(globals().values())] if isinstance(v, Fact))


def bind(fact: Fact[Any], vmid: int | None, venv: str | None) -> Fact[Any]:
    """The fact with `{vmid}` and `{venv}` filled in (each stays one argv element); named per binding."""
    out: list[str] = []
    for arg in fact.argv:
        if arg == VENV:
            out.append(venv or DEFAULT_VENV)
        elif VMID in arg:
            if vmid is None:
                raise ValueError(f"fact {fact.name} needs a container id")
            out.append(arg.replace(VMID, str(int(vmid))))
        else:
            out.append(arg)
    if out == list(fact.argv):
        return fact
    return replace(fact, name=f"{fact.name}[{_binding(vmid, venv, fact)}]", argv=tuple(out))


def _binding(vmid: int | None, venv: str | None, fact: Fact[Any]) -> str:
    parts = []
    if any(VMID in a for a in fact.argv):
        parts.append(f"vmid={vmid}")
    if VENV in fact.argv:
        parts.append(f"venv={venv or DEFAULT_VENV}")
    return ",".join(parts)


async def text(cache: FactCache, transport: Transport, fact: Fact[Any], vmid: int | None,
               venv: str | None = None) -> str | None:
    """The output of evidence `fact` (bound to `vmid`/`venv`) read through `cache`; None when its
    command fails (no such file, a unit not enabled). What `lxc.boot_persistence`, drift (`plan --check`,
    the wizard's Summary) and `diagnose --host` read, so they see the same thing."""
    result = await cache.result(transport, bind(fact, vmid, venv))
    return str(result.output) if result.ok else None


def needs_container(fact: Fact[Any]) -> bool:
    return any(VMID in a for a in fact.argv)


def needs_venv(fact: Fact[Any]) -> bool:
    return VENV in fact.argv
