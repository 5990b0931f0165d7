"""nccl_failure: communicator setup, transports (P2P/SHM), hangs and wrong results."""

from __future__ import annotations

from provisioner.diagnose.model import Rule

RULES: tuple[Rule, ...] = (
    Rule(
        name="nccl.shm_exhausted",
        category="nccl_failure",
        patterns=(
            r"Error while creating shared memory segment",
            r"Call to shm_open failed",
            r"failed to extend /dev/shm/nccl-",
            r"Error while creating shared memory segment /dev/shm/nccl",
            r"shm\.h:\d+ NCCL WARN Call to posix_fallocate failed",
            r"NCCL WARN Call to posix_fallocate failed",
            r"NCCL WARN[^\n]{0,120}No space left on device",
        ),
        confidence=0.92,
        root_cause="NCCL cannot create its shared-memory buffers in /dev/shm (too small, or not writable).",
        fix=(
            "Give the container a larger /dev/shm (Docker --shm-size=1g or --ipc=host; LXC: a tmpfs /dev/shm of "
            "several GiB)."
        ),
        examples=(
            "include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
            "misc/shmutils.cc:88 NCCL WARN Error: failed to extend /dev/shm/nccl-WU88OE to 9637892 bytes, error: No "
            "space left on device (28)",
        ),
    ),
    Rule(
        name="nccl.p2p_broken",
        category="nccl_failure",
        patterns=(
            r"(?:works?|working|fine|runs|succeeds?|passes|fixe[sd]|helps?|solves?)(?: \S+){0,4} (?:with|when "
            r"setting|after setting|by setting) `?NCCL_P2P_DISABLE",
            r"NCCL_P2P_DISABLE=1`?(?: \S+){0,3} (?:works|fixes|fixed|helps|solves|resolves)",
            r"peer access is not supported between these two devices",
            r"peer mapping resources exhausted",
            r"Peer GPU \d+ is not accessible",
            r"building transport map failed",
            r"(?:with|when|if|once) `?p2p`? (?:is )?disabled,? (?:\S+ ){0,4}(?:works?|fine|well|ok|passes|succeeds)",
            r"NCCL_P2P_DISABLE=1[^\n]{0,80}\b(?:works|working|fine|passes|succeeds)\b",
        ),
        confidence=0.8,
        root_cause=(
            "GPU peer-to-peer (P2P) transport does not work on this machine (ACS/IOMMU, virtualisation, or GPUs "
            "without P2P)."
        ),
        fix=(
            "Disable ACS/IOMMU redirection (BIOS, iommu=pt, setpci ACS); on PCIe boxes without NVLink (GeForce/"
            "RTX PRO Blackwell, Ada) update the driver and NCCL to releases that fixed P2P for that GPU before giving "
            "up on it; otherwise set NCCL_P2P_DISABLE=1. Verify with nccl-tests all_reduce_perf (with and without it)."
        ),
        examples=(
            "It works with NCCL_P2P_DISABLE=1, but ideally would like to figure out why normal P2P is not working.",
        ),
    ),
    Rule(
        name="nccl.error",
        category="nccl_failure",
        patterns=(
            r"Distributed package doesn't have NCCL built in",
            r"is setting up NCCL communicator and retrieving ncclUniqueId",
            r"NCCL Error \d+: (?:unhandled|internal|invalid|remote|system)",
            r"Test NCCL failure",
            r"Bootstrap : no socket interface found",
            r"NCCL error in: ",
            r"\bncclUnhandledCudaError\b",
            r"\bncclSystemError\b",
            r"\bncclInternalError\b",
            r"\bncclRemoteError\b",
            r"\bncclInvalidUsage\b",
            r"DistBackendError: NCCL",
            r"NCCL communicator was aborted",
            r"ncclCommInitRank failed",
            r"NCCL error: (?:unhandled|internal|remote|invalid)",
        ),
        confidence=0.72,
        root_cause="An NCCL collective or communicator setup failed.",
        fix=(
            "Re-run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV to see the transport that fails; check /dev/shm "
            "size, P2P/ACS and network interfaces."
        ),
        examples=(
            "torch.distributed.DistBackendError: NCCL error in: "
            "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
            "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
        ),
    ),
    Rule(
        name="nccl.collective_timeout",
        category="nccl_failure",
        patterns=(
            r"Watchdog caught collective operation timeout",
            r"WorkNCCL\([^\n]{0,200}\) ran for \d+ milliseconds before timing out",
            r"Some NCCL operations have failed or timed out",
        ),
        confidence=0.75,
        root_cause="An NCCL collective hung until the watchdog timeout (often a broken P2P path or a rank that died).",
        fix=(
            "Run nccl-tests with and without NCCL_P2P_DISABLE=1 to isolate P2P; check ACS/IOMMU and that every rank "
            "reached the collective."
        ),
        examples=(
            "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
            "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600039 milliseconds before timing out.",
        ),
    ),
    Rule(
        name="nccl.warn",
        category="nccl_failure",
        patterns=(
            r"\bNCCL WARN\b",
            # NCCL 2.2/2.3 printed no "NCCL" in its prefix: "host:pid:tid [dev] include/socket.h:371 WARN …" (horovod/
            # horovod#666); AWS Neuron's fork says "CCOM WARN", not NCCL's
            r"\S+:\d+:\d+ \[\d+\] [\w/.-]+\.(?:h|cc?|cu|cpp):\d+ WARN\b",
            r"socketStartConnect: Connect to [^\n]{0,60} failed",
            r"\[Proxy Service\][^\n]{0,40}Failed",
        ),
        confidence=0.55,
        root_cause="NCCL reported a warning during communication setup or a collective.",
        fix="Read the NCCL WARN line; re-run with NCCL_DEBUG=INFO to see the failing transport.",
        examples=("node1:123:456 [0] NCCL WARN Call to connect returned Connection refused, retrying",),
    ),
    Rule(
        name="nccl.hang",
        category="nccl_failure",
        patterns=(
            r"\b(?:hangs?|hanging|hung|freez(?:es|ing)|frozen|stuck|deadlock)\b",
            r"\b(?:allreduce|all_reduce|all-reduce|collective|alltoall)\b[^\n]{0,40}\b(?:failure|fails|failed|crash(?:es|ed)?)\b",
        ),
        confidence=0.5,
        generic=True,
        context=r"\bNCCL\b|all_reduce_perf|nccl-tests",
        root_cause="Multi-GPU communication hangs after NCCL initialisation (typical of a broken P2P path).",
        fix="A/B test with NCCL_P2P_DISABLE=1; if that works, fix ACS/IOMMU or keep P2P disabled on GPUs without P2P.",
        examples=("NCCL INFO Bootstrap : Using eno2:10.1.10.95<0>\nit hangs/freezes right after initialization",),
    ),
    Rule(
        name="nccl.context",
        category="nccl_failure",
        patterns=(r"\bNCCL INFO\b", r"\bNCCL_P2P_DISABLE\b", r"\bNCCL_SHM_DISABLE\b", r"\bNCCL version \d"),
        confidence=0.3,
        supporting=True,
        root_cause="NCCL was in use.",
        fix="",
        examples=("worker2:182125:182125 [0] NCCL INFO Bootstrap : Using eno2:10.1.10.95<0>",),
    ),
    Rule(
        name="nccl.wrong_results",
        category="nccl_failure",
        patterns=(
            r"Out of bounds values\s*:\s*[1-9]\d*\s+FAILED",
            r"Avg bus bandwidth\s*:\s*[\d.]+\s+FAILED",
        ),
        confidence=0.8,
        root_cause="The collective test produced wrong values (or bandwidth below the threshold).",
        fix=(
            "Treat as a hardware/transport fault: rerun with NCCL_P2P_DISABLE=1 and per GPU pair to isolate the "
            "link; check PCIe/NVLink errors and Xid codes in dmesg."
        ),
        examples=("# Out of bounds values : 32 FAILED\n# Avg bus bandwidth    : 21.0832",),
    ),
    Rule(
        name="nccl.version_predates_gpu",
        category="nccl_failure",
        patterns=(
            r"ncclMaxSharedMem \d+ exceeds device/fn maxSharedMem \d+",
            r"NCCL WARN[^\n]{0,120}(?:no kernel image|invalid device function|CUDA driver version is insufficient)",
        ),
        confidence=0.86,
        root_cause=(
            "The NCCL build in use predates this GPU/driver: its kernels ask for more shared memory than the GPU "
            "offers (Blackwell consumer/workstation sm_120 with NCCL < 2.26), so collectives fail or hang."
        ),
        fix=(
            "Use an NCCL built for the GPU (nvidia-nccl-cu12 >= 2.26.2 / the one in torch >= 2.7 cu128; rebuild "
            "nccl-tests against it) and a driver of the same generation (R570+ for Blackwell); re-run all_reduce_perf."
        ),
        examples=(
            "GENOA-06:4766:4766 [0] NCCL INFO NCCL version 2.25.1+cuda12.8\nGENOA-06:4766:4780 [0] NCCL INFO "
            "ncclMaxSharedMem 82240 exceeds device/fn maxSharedMem 79856",
        ),
    ),
)
