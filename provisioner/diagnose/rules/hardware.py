"""oom_or_hw: out of memory, Xid errors, ECC, thermal and bus faults."""

from __future__ import annotations

from provisioner.diagnose.model import Rule

RULES: tuple[Rule, ...] = (
    Rule(
        name="hw.ecc_xid_fallen_off",
        category="oom_or_hw",
        patterns=(
            r"GPU does not have the necessary power cables connected",
            r"Detected Critical Xid Error",
            r"uncorrectable ECC error encountered",
            r"cudaErrorECCUncorrectable",
            r"CUDA_ERROR_ECC_UNCORRECTABLE",
            r"GPU has fallen off the bus",
            r"GPU is lost\. Reboot the system",
            r"NVRM: Xid \(PCI:[^\n]{0,40}\): (?:48|63|64|74|79|92|94|95|119|120)\b",
            r"Unable to determine the device handle for GPU[\w:.]*: (?:Unknown Error|GPU is lost)",
            r"row remapping (?:failure|pending)|Row Remapper Failure",
            r"double bit ECC error",
        ),
        confidence=0.9,
        root_cause="A GPU hardware fault (ECC memory error, GPU fell off the bus, or the device stopped responding).",
        fix=(
            "Drain the GPU: check `nvidia-smi -q -d ECC,ROW_REMAPPER`, dmesg Xid codes, power/cooling and PCIe "
            "seating; "
            "reset or power-cycle, and replace the card if it recurs."
        ),
        examples=(
            "CUDA error: uncorrectable ECC error encountered Search for `cudaErrorECCUncorrectable' in "
            "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.",
            "Unable to determine the device handle for GPU0000:07:00.0: Unknown Error",
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
        ),
    ),
    Rule(
        name="hw.xid_other",
        category="oom_or_hw",
        patterns=(
            r"NVRM: Xid \(PCI:[^\n]{0,40}\): \d+",
            r"RmInitAdapter failed",
            r"PCIe Bus Error: severity=(?:Uncorrected|Fatal)",
        ),
        confidence=0.65,
        root_cause="The driver logged GPU errors (Xid / adapter init failure / PCIe errors).",
        fix="Look the Xid up in NVIDIA's Xid catalog; check power, cooling, PCIe link and firmware; re-run a burn-in.",
        examples=("NVRM: Xid (PCI:0000:01:00): 13, pid=2871, Graphics Exception: ESR 0x504648=0x1000e",),
    ),
    Rule(
        name="hw.cuda_oom",
        category="oom_or_hw",
        patterns=(
            r"OOM when allocating tensor",
            r"ran out of memory trying to allocate",
            r"cudaMalloc failed: out of memory",
            r"CUDA out of memory",
            r"torch\.(?:cuda\.)?OutOfMemoryError",
            r"CUDA error: out of memory",
            r"Cuda failure '?out of memory",
            r"CUBLAS_STATUS_ALLOC_FAILED",
            r"cudaErrorMemoryAllocation",
            r"CUDA_ERROR_OUT_OF_MEMORY",
            r"RESOURCE_EXHAUSTED: Out of memory while trying to allocate",
        ),
        confidence=0.88,
        root_cause="The GPU ran out of memory.",
        fix="Reduce batch size/sequence length, free other processes on the GPU (nvidia-smi), or use more/larger GPUs.",
        examples=(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "23.55 GiB",
        ),
    ),
    Rule(
        name="hw.host_oom_or_shm",
        category="oom_or_hw",
        patterns=(
            r"Out of memory: Killed process \d+",
            r"oom-kill(?:er)?\b",
            r"insufficient shared memory \(shm\)",
            r"Unexpected bus error encountered in worker",
        ),
        confidence=0.75,
        root_cause="The host (or container) ran out of RAM or shared memory and killed/aborted the process.",
        fix="Raise the container's memory and /dev/shm limits, reduce DataLoader workers/batch size, or add RAM.",
        examples=(
            "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory "
            "(shm).",
        ),
    ),
    Rule(
        name="hw.thermal_or_power",
        category="oom_or_hw",
        patterns=(
            r"HW (?:Thermal )?Slowdown\s*:\s*Active",
            r"GPU (?:over|exceeded) temperature",
            r"thermal (?:shutdown|violation)",
            r"\| ERR! ",
            r"unspecified launch failure",
        ),
        confidence=0.6,
        root_cause="The GPU is throttling, overheating, or failing mid-kernel (power/thermal/hardware).",
        fix=(
            "Check airflow, power cables and limits (`nvidia-smi -q -d TEMPERATURE,POWER,PERFORMANCE`) and dmesg Xid "
            "codes."
        ),
        examples=("    HW Slowdown                       : Active",),
    ),
    Rule(
        name="hw.illegal_memory_access",
        category="oom_or_hw",
        patterns=(r"an illegal memory access was encountered", r"cudaErrorIllegalAddress", r"CUDA_ERROR_ILLEGAL_ADDRESS"),
        confidence=0.45,
        generic=True,
        root_cause="A kernel faulted on an illegal address: a software bug, or memory/hardware instability.",
        fix=(
            "Re-run with CUDA_LAUNCH_BLOCKING=1 to locate the kernel; if it recurs on one GPU only, check Xid codes "
            "and ECC."
        ),
        examples=("RuntimeError: CUDA error: an illegal memory access was encountered",),
    ),
)
