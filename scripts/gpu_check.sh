#!/usr/bin/env bash
# GPU check of the burn-in (test tier 6): one machine, ONE NVIDIA GPU, under 5 minutes.
#
#   OUT=/some/dir scripts/gpu_check.sh          # default OUT=./out
#
# 1. records nvidia-smi facts;
# 2. makes a venv (pip; --system-site-packages so a preinstalled torch is reused, otherwise
#    `pip install torch` from the machine's index / PyPI) with nvidia-ml-py;
# 3. runs `python -m provisioner.burnin` with NCCL at world size 1: NVML preflight + monitor, GEMM
#    phase, collectives 8B..256MiB, a short soak and the NVSHMEM probe;
# 4. runs the collectives once more through torchrun, the way the `burnin.run` step launches it.
# Everything lands in $OUT: burnin/burnin.json (the result), burnin/burnin.txt (nccl-tests table +
# summary), torchrun/burnin.json, env.json, nvidia-smi.csv, *.stderr, gpu_check.log, summary.txt.
# Exit status: 0 when the burn-in passed, 1 when it ran and failed, 2 when it could not run.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$PWD/out}"
VENV="${BURNIN_VENV:-${TMPDIR:-/tmp}/burnin-gpu-venv}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
: >"$OUT/gpu_check.log"
export PIP_DEFAULT_TIMEOUT=15 PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf '[gpu_check %(%H:%M:%S)T] %s\n' -1 "$*" | tee -a "$OUT/gpu_check.log" >&2; }

# -- 1. facts ------------------------------------------------------------------------------------
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 30 nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,compute_cap,driver_version,memory.total,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,ecc.mode.current \
    --format=csv >"$OUT/nvidia-smi.csv" 2>>"$OUT/gpu_check.log" || log "nvidia-smi query failed (rc $?)"
  timeout 30 nvidia-smi topo -m >"$OUT/nvidia-smi-topo.txt" 2>&1 || true
else
  log "nvidia-smi not found"
fi

# -- 2. venv ---------------------------------------------------------------------------------------
if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating venv $VENV"
  timeout 120 "$PY" -m venv --system-site-packages "$VENV"
fi
VPY="$VENV/bin/python"
if ! timeout 120 "$VPY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>>"$OUT/gpu_check.log"; then
  log "torch with CUDA not importable: pip install torch"
  timeout 240 "$VPY" -m pip install --quiet --retries 1 torch >>"$OUT/gpu_check.log" 2>&1 || log "pip install torch failed (rc $?)"
fi
if ! "$VPY" -c 'import pynvml' 2>/dev/null; then
  timeout 90 "$VPY" -m pip install --quiet --retries 1 nvidia-ml-py >>"$OUT/gpu_check.log" 2>&1 || log "pip install nvidia-ml-py failed: NVML checks will be skipped"
fi
if ! timeout 120 "$VPY" - >"$OUT/env.json" 2>>"$OUT/gpu_check.log" <<'PYEOF'
import json, torch
info = {"torch": torch.__version__, "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
if torch.cuda.is_available():
    info["device"] = torch.cuda.get_device_name(0)
    info["capability"] = list(torch.cuda.get_device_capability(0))
    info["device_count"] = torch.cuda.device_count()
    try:
        info["nccl"] = list(torch.cuda.nccl.version())
    except Exception as exc:
        info["nccl"] = repr(exc)
try:
    import torch.distributed._symmetric_memory as symm_mem
    info["nvshmem_available"] = bool(symm_mem.is_nvshmem_available())
except Exception as exc:
    info["nvshmem_available"] = repr(exc)
try:
    import pynvml
    info["pynvml"] = getattr(pynvml, "__version__", "present")
except ImportError:
    info["pynvml"] = None
print(json.dumps(info))
PYEOF
then
  log "torch does not import in $VENV: cannot run"
  exit 2
fi
log "env: $(cat "$OUT/env.json")"
if ! grep -q '"cuda_available": true' "$OUT/env.json"; then
  log "torch sees no CUDA device: cannot run the NCCL path"
  exit 2
fi

# -- 3. the burn-in, local launcher, world size 1 --------------------------------------------------
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
rc=0
log "burn-in: nccl, world size 1"
timeout --kill-after=10 210 "$VPY" -m provisioner.burnin --backend nccl --world-size 1 \
  --sizes 8B:256MiB --iters 10 --warmup-iters 2 --timeout 60 \
  --gemm-seconds 15 --gemm-size 8192 --duration 10 --nvshmem-timeout 60 \
  --json --out "$OUT/burnin" >"$OUT/burnin.stdout" 2>"$OUT/burnin.stderr" || rc=$?
log "burn-in exit status $rc"

# -- 4. the same module under torchrun (how burnin.run launches it) -------------------------------
trc=0
log "torchrun --standalone --nproc-per-node=1 -m provisioner.burnin (collectives only)"
timeout --kill-after=10 120 "$VPY" -m torch.distributed.run --standalone --nproc-per-node=1 \
  -m provisioner.burnin --phases preflight,collectives --sizes 1KiB:64MiB --iters 5 --timeout 60 \
  --json --out "$OUT/torchrun" >"$OUT/torchrun.stdout" 2>"$OUT/torchrun.stderr" || trc=$?
log "torchrun exit status $trc"

# -- summary ----------------------------------------------------------------------------------------
timeout 60 "$VPY" - "$OUT" >"$OUT/summary.txt" 2>&1 <<'PYEOF' || true
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
for name in ("burnin", "torchrun"):
    f = out / name / "burnin.json"
    if not f.exists():
        print(f"{name}: no result file")
        continue
    doc = json.loads(f.read_text())
    print(f"{name}: {doc['status']}  ({doc.get('environment', {})})")
    for phase, p in doc.get("phases", {}).items():
        print(f"  {phase:<12} {p.get('status')}  {'; '.join(p.get('reasons', []))[:300]}")
    rows = doc.get("phases", {}).get("collectives", {}).get("rows", [])
    big = [r for r in rows if r["collective"] == "all_reduce" and not r["inplace"]][-1:]
    for r in big:
        print(f"  largest all_reduce: {r['size']} B in {r['time_us']:.1f} us, algbw {r['algbw']:.2f} GB/s")
    g = doc.get("phases", {}).get("gemm", {}).get("ranks", [])
    for r in g:
        print(f"  gemm rank {r['rank']}: {r.get('gflops', 0):.0f} Gflop/s, {r.get('mismatches')} mismatches")
PYEOF
cat "$OUT/summary.txt" >&2 || true

if [[ ! -s "$OUT/burnin/burnin.json" ]]; then
  log "no burn-in result written"
  exit 2
fi
if [[ $rc -ne 0 || $trc -ne 0 ]]; then
  exit 1
fi
exit 0
