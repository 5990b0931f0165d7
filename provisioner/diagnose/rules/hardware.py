"""oom_or_hw: out of memory, Xid errors, ECC, thermal and bus faults."""

from __future__ import annotations

from provisioner.burnin.xid import HARDWARE_XIDS, XIDS
from provisioner.diagnose.model import Rule

# Xid numbers from NVIDIA's catalogue (provisioner/burnin/xid.py): those whose action is not "restart the
# application" are GPU/node faults; the rest are faults of the running program.
_HW = "|".join(str(n) for n in sorted(HARDWARE_XIDS, reverse=True))
_APP = "|".join(str(n) for n in sorted(set(XIDS) - HARDWARE_XIDS, reverse=True))
# "NVRM: Xid (PCI:0000:3b:00): 79, ..." (dmesg), "Xid 119 (GSP RPC timeout)" / "XID 79" (prose, monitors)
XID_HW = rf"(?:NVRM: Xid \(PCI:[^\n]{{0,40}}\): (?:{_HW})\b|\bXid[ :=]+(?:{_HW})\b)"
XID_APP = rf"(?:NVRM: Xid \(PCI:[^\n]{{0,40}}\): (?:{_APP})\b|\bXid[ :=]+(?:{_APP})\b)"

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
            # "GPU has fallen off the bus" (Xid 79), "…has fallen off the bus and is not responding to commands"
            # (NVRM's own line, wrapped over NVRM:-prefixed lines), "GPU has fallen off of the bus"
            r"\bfallen off (?:of )?the bus\b",
            # NVML_ERROR_GPU_IS_LOST / NV_ERR_GPU_IS_LOST as tools word it: nvidia-smi "GPU is lost. Reboot the
            # system", pynvml `NVMLError_GpuIsLost` (rossumai/nvgpu#6), slurm "NVML: Failed to get usage(15): GPU
            # is lost" (LSSI-ETH/plmfit#40), NVRM "GPU lost from the bus [NV_ERR_GPU_IS_LOST]" (open-gpu-kernel-
            # modules#688), gpud's ERROR_GPU_IS_LOST
            r"GPU[ _]?is[ _]?lost\b",
            r"\bGPU lost from the bus\b",
            XID_HW,
            r"Unable to determine the device handle for GPU\s?[\w:.]*: (?:Unknown Error|GPU is lost)",
            r"row remapping (?:failure|pending)|Row Remapper Failure",
            r"double bit ECC error",
        ),
        confidence=0.9,
        root_cause=(
            "A GPU hardware fault[: Xid {xid} ({xid_meaning}, likely cause: {xid_cause})] (ECC memory error, GPU "
            "fell off the bus, GSP firmware timeout, or the device stopped responding)."
        ),
        fix=(
            "[Xid {xid}: {xid_advice}. ]Drain the GPU: check `nvidia-smi -q -d ECC,ROW_REMAPPER`, dmesg Xid codes, "
            "power/cooling and PCIe seating; reset or power-cycle, and replace the card if it recurs."
        ),
        examples=(
            "CUDA error: uncorrectable ECC error encountered Search for `cudaErrorECCUncorrectable' in "
            "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.",
            "Unable to determine the device handle for GPU0000:07:00.0: Unknown Error",
            "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error.",
            "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n               NVRM: (PCI ID: 10de:26b5) installed in "
            "this system has\n               NVRM: fallen off the bus and is not responding to commands.",
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
            "NVMLError_GpuIsLost: GPU is lost",
            "slurmstepd: error: NVML: Failed to get usage(15): GPU is lost",
            "- 2026-03-01 12:42:15 CET: Xid 119 (\"Timeout after 45s of waiting for RPC response from GPU0 GSP\")",
        ),
    ),
    Rule(
        name="hw.gsp_timeout",
        category="oom_or_hw",
        patterns=(
            r"Timeout (?:after \d+s of )?waiting for RPC (?:response )?from (?:GPU\d+ )?GSP",
            r"_kgspLogRpcTimeout",
            r"\bGSP Timeout\b",
            r"_kgspIsHeartbeatTimedOut: Heartbeat timed out",
            r"GSP task timeout",
            r"Memory Subsystem Error detected",
        ),
        confidence=0.88,
        root_cause=(
            "The GPU System Processor (GSP) stopped answering the driver (the condition NVIDIA reports as Xid 119/120: "
            f"{XIDS[119].meaning}); the GPU is wedged until it is reset."
        ),
        fix=(
            f"Xid 119: {XIDS[119].action}: {XIDS[119].advice}. Update to a driver branch with the GSP fix for this GPU, "
            "and if it recurs on one GPU only, treat the GPU (or its slot/power) as faulty."
        ),
        examples=(
            "[   84.300488] NVRM: GPU6 _kgspLogRpcTimeout: ********************************* GSP Timeout "
            "**********************************",
        ),
    ),
    Rule(
        # the resource manager's own status for a GPU that failed (nvstatuscodes.h, printed "<text> [<name>]" in its
        # assertion, RPC and RmInit lines): a GPU needing a reset fails every channel it is asked for, and the
        # program sees only "CUDA-capable device(s) is/are busy or unavailable" or an NCCL test failing on that GPU
        name="hw.gpu_needs_reset",
        category="oom_or_hw",
        # the bare status names, as monitoring tools and bug reports quote them
        patterns=(r"\bNV_ERR_(?:RESET_REQUIRED|GPU_IN_FULLCHIP_RESET|ECC_ERROR|MEMORY_ERROR|BROKEN_FB"
                  r"|MEMORY_TRAINING_FAILED|INSUFFICIENT_POWER|GPU_NOT_FULL_POWER)\b",),
        messages=("nvrm.status_reset_required", "nvrm.status_gpu_in_fullchip_reset", "nvrm.status_ecc_error",
                  "nvrm.status_memory_error", "nvrm.status_broken_fb", "nvrm.status_memory_training_failed",
                  "nvrm.status_insufficient_power", "nvrm.status_gpu_not_full_power"),
        confidence=0.86,
        demotes=("no_driver_loaded", "nccl_failure"),
        root_cause=(
            "The NVIDIA driver reports that a GPU failed or must be reset (its status: reset required, full-chip "
            "reset, ECC/memory error, memory training failed, or not enough power): work on that GPU fails while the "
            "others run."
        ),
        fix=(
            "Find the GPU the NVRM lines name (`dmesg | grep NVRM`, `nvidia-smi -q -d ECC,ROW_REMAPPER,POWER`), stop its "
            "processes and reset it (`nvidia-smi -r -i <n>`) or reboot; check its power cables and supply; if it "
            "recurs, drain and replace the GPU."
        ),
        examples=(
            # scitix/sichek#51 (an NCCL test failing only with GPU1 in it)
            "[Sun Jan 11 09:52:01 2026] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required "
            "[NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874",
        ),
    ),
    Rule(
        name="hw.xid_other",
        category="oom_or_hw",
        patterns=(
            XID_APP,
            r"NVRM: Xid \(PCI:[^\n]{0,40}\): \d+",
            r"PCIe Bus Error: severity=(?:Uncorrected|Fatal)",
        ),
        confidence=0.6,
        root_cause=(
            "The driver logged GPU errors[ (Xid {xid}: {xid_meaning}, likely cause: {xid_cause})] or PCIe errors."
        ),
        fix=(
            "[Xid {xid}: {xid_advice}. ]Look the Xid up in NVIDIA's Xid catalog; check power, cooling, PCIe link and "
            "firmware; re-run a burn-in."
        ),
        examples=(
            "NVRM: Xid (PCI:0000:01:00): 13, pid=2871, Graphics Exception: ESR 0x504648=0x1000e",
            "May 13 17:19:01 hyperion kernel: NVRM: Xid (PCI:0000:08:00): 31, Ch 0000003b, intr 10000000. MMU Fault: "
            "ENGINE GRAPHICS HUBCLIENT_SCC faulted @ 0x0_04687000. Fault is of type FAULT_PDE ACCESS_TYPE_READ",
        ),
    ),
    Rule(
        # CUDA's cudaErrorNvlinkUncorrectable (220): the fault is on a link between GPUs (or an NVSwitch), not in the
        # program; nvidia-smi's NVLink counters and the Xids (74 NVLink error, 79 fallen off) name the link
        name="hw.nvlink_uncorrectable",
        category="oom_or_hw",
        patterns=(),
        messages=("cuda.nvlink_uncorrectable",),
        demotes=("nccl_failure",),  # NCCL reports the link's error as its own CUDA failure
        confidence=0.75,
        root_cause=("An uncorrectable NVLink error stopped the work (the error is sticky: every later CUDA call fails): "
                    "a link between the GPUs or an NVSwitch faulted — hardware or firmware as a rule; a program or "
                    "library that aborts peer-to-peer transfers mid-flight can leave the same error."),
        fix=("Read the link errors (`nvidia-smi nvlink -s` and `nvidia-smi nvlink -e` per GPU; `dmesg | grep -i xid` for "
             "Xid 74) and, on NVSwitch systems, the fabric manager's log; reset the GPUs or reboot, and if the same "
             "link fails again have the board/baseboard serviced; until then keep the job off that GPU pair "
             "(CUDA_VISIBLE_DEVICES) or run NCCL with NCCL_P2P_DISABLE=1 to confirm. No Xid 74 and no moved counters, "
             "and only one torch/NCCL release fails: update that release."),
        examples=("RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution",),
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
            # ggml's CUDA_CHECK before it printed the call: "CUDA error %d at %s:%d: %s" with the runtime's text
            # (llama.cpp and ollama of 2023: "CUDA error 2 at …/ggml-cuda.cu:7358: out of memory")
            r"\bCUDA error \d+ at [^\n]{1,200}?:\d+: out of memory",
            r"Cuda failure '?out of memory",
            r"\b(?:CUBLAS|CUDNN|CUSOLVER|CUSPARSE|CUTENSOR)_STATUS_ALLOC_FAILED\b",
            r"\bCUDNN_STATUS_INTERNAL_ERROR_(?:DEVICE|HOST)_ALLOCATION_FAILED\b",  # cuDNN 9's names
            r"\bCUFFT_ALLOC_FAILED\b",
            r"\bCURAND_STATUS_ALLOCATION_FAILED\b",
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
    Rule(
        # Windows' ERROR_COMMITMENT_LIMIT: importing torch maps its CUDA/cuDNN DLLs (GBs), which can exceed what the
        # paging file and RAM can commit; Python prints it as "[WinError 1455] … Error loading \"…cudnn….dll\" or one
        # of its dependencies" (oatsu-gh/enunu_training_kit#8) — the file is there, the memory is not
        name="hw.windows_page_file_too_small",
        category="oom_or_hw",
        # the number as Python, cuDNN's loader ("Error code 1455") and Rust ("os error 1455") print it; the text as a
        # Chinese Windows prints it (szad670401/HyperLPR#49)
        patterns=(r"\bWinError 1455\b", r"\bError code 1455\b", r"\bos error 1455\b", r"页面文件太小"),
        messages=("windows.commitment_limit",),
        confidence=0.88,
        demotes=("missing_shared_lib",),
        root_cause=("Windows could not commit the memory to load the framework's CUDA libraries (or an allocation): "
                    "the paging file is too small for what torch maps at import (its CUDA and cuDNN DLLs are GBs), "
                    "not a missing file."),
        fix=("Let Windows manage the paging file size, or set it larger (System → Advanced system settings → "
             "Performance → Virtual memory) on a drive with space, and restart; fewer DataLoader workers (each maps the "
             "DLLs again) or more RAM also help."),
        examples=("OSError: [WinError 1455] The paging file is too small for this operation to complete. Error loading "
                  "\"C:\\py\\lib\\site-packages\\torch\\lib\\cudnn_adv_infer64_8.dll\" or one of its "
                  "dependencies.",),
    ),
)
