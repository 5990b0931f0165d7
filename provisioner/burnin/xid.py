"""NVIDIA Xid table: number -> meaning, likely cause, action. Stdlib only, pure.

Shared by the burn-in's NVML monitor (`nvml_eval`) and the diagnose rules (`diagnose/rules/`),
so `provisioner.burnin` never imports the diagnose engine.

Source: NVIDIA's published Xid catalogue, "Analyzing Xid Errors with the Xid Catalog"
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, Ampere and newer: the
mnemonic, description and the "Resolution Bucket (Immediate Action)" column) and the older
"Xid Errors" table (https://docs.nvidia.com/deploy/xid-errors/index.html, the causes: HW error,
driver error, user application error, system memory corruption, bus error, thermal issue, FB
corruption). The `action` buckets below are the catalogue's immediate actions, mapped to the
verbs an operator uses: RESTART_APP -> "application", RESET_GPU -> "reset", RESTART_BM/node
reboot -> "reboot", hardware inspection -> "reseat", CONTACT_SUPPORT/replace -> "rma",
driver/firmware update -> "driver", cooling/power -> "thermal".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Action = Literal["application", "reset", "reboot", "reseat", "rma", "driver", "thermal", "ignore"]
Cause = Literal["application", "driver", "hardware", "memory", "bus", "thermal", "nvlink", "firmware"]

# What each action bucket asks the operator to do (one sentence each).
ACTION_TEXT: dict[str, str] = {
    "application": "restart the application; if it recurs on every GPU, debug the program (CUDA_LAUNCH_BLOCKING=1)",
    "reset": "drain the GPU and reset it (`nvidia-smi -r -i <gpu>` or a node reboot); replace it if the Xid recurs",
    "reboot": "drain the node and reboot it (a GPU reset is not enough)",
    "reseat": "power down, reseat the GPU and its power cables, check the PCIe slot/riser; replace it if it recurs",
    "rma": "drain the GPU and open an RMA / replace it",
    "driver": "update the driver/firmware to a fixed release (and reset the GPU); report it to NVIDIA if it recurs",
    "thermal": "check cooling, fans and power delivery; reset the GPU once it is back within limits",
    "ignore": "no action on its own: read the Xid that preceded it",
}


@dataclass(frozen=True)
class Xid:
    """One catalogue entry."""

    number: int
    mnemonic: str
    meaning: str
    cause: Cause
    action: Action
    critical: bool  # the GPU (not just one application) is affected; the burn-in treats every Xid as a failure

    @property
    def advice(self) -> str:
        return ACTION_TEXT[self.action]


def _x(number: int, mnemonic: str, meaning: str, cause: Cause, action: Action, critical: bool) -> Xid:
    return Xid(number, mnemonic, meaning, cause, action, critical)


XIDS: dict[int, Xid] = {
    x.number: x
    for x in (
        _x(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "driver", "application", False),
        _x(13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception", "application", "application", False),
        _x(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault (MMU fault)", "application",
           "application", False),
        _x(32, "ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream", "bus", "reset", True),
        _x(38, "ROBUST_CHANNEL_FIFO_ERROR_INTR_PENDING", "Driver firmware error", "driver", "driver", True),
        _x(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing (channel reset)", "application",
           "application", False),
        _x(45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup, due to previous errors", "application",
           "ignore", False),
        _x(46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", "hardware", "reset", True),
        _x(48, "ROBUST_CHANNEL_DBE_ERROR", "double-bit ECC error", "memory", "reset", True),
        _x(61, "PMU_BREAKPOINT", "Internal micro-controller breakpoint/warning", "firmware", "reset", True),
        _x(62, "PMU_HALT_ERROR", "Internal micro-controller halt", "firmware", "reset", True),
        _x(63, "INFOROM_DRAM_RETIREMENT_EVENT", "page retirement / row remapping event", "memory", "reset", True),
        _x(64, "INFOROM_DRAM_RETIREMENT_FAILURE", "page retirement / row remapping failure", "memory", "rma", True),
        _x(68, "ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 (video decoder) exception", "application", "application", False),
        _x(69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", "application", "application", False),
        _x(74, "NVLINK_ERROR", "NVLink error", "nvlink", "reset", True),
        _x(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "bus", "reseat", True),
        _x(92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "memory", "reset", True),
        _x(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error (uncorrectable ECC, contained)", "memory",
           "application", True),
        _x(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error (uncorrectable ECC)", "memory", "reset",
           True),
        _x(109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context switch timeout", "driver", "application", False),
        _x(119, "GSP_RPC_TIMEOUT", "GSP RPC timeout (the GPU System Processor stopped answering)", "firmware", "reset",
           True),
        _x(120, "GSP_ERROR", "GSP firmware error", "firmware", "reset", True),
        _x(121, "C2C_ERROR", "C2C (chip-to-chip, Grace-Hopper/Blackwell) link error", "hardware", "reset", True),
        _x(140, "ECC_UNRECOVERED_ERROR", "Unrecovered ECC error", "memory", "reset", True),
        _x(143, "GPU_INIT_ERROR", "GPU initialization failure", "hardware", "rma", True),
        _x(144, "NVLINK_SAW_ERROR", "NVLink SAW error", "nvlink", "reset", True),
        _x(145, "NVLINK_RLW_ERROR", "NVLink RLW error", "nvlink", "reset", True),
        _x(146, "NVLINK_TLW_ERROR", "NVLink TLW error", "nvlink", "reset", True),
        _x(147, "NVLINK_TREX_ERROR", "NVLink TREX error", "nvlink", "reset", True),
        _x(148, "NVLINK_NVLPW_CTRL_ERROR", "NVLink NVLPW control error", "nvlink", "reset", True),
        _x(149, "NVLINK_NETIR_ERROR", "NVLink NETIR error", "nvlink", "reset", True),
        _x(150, "NVLINK_MSE_ERROR", "NVLink MSE error", "nvlink", "reset", True),
        _x(154, "GPU_RECOVERY_ACTION_CHANGED", "GPU recovery action changed (reset or reboot required)", "hardware",
           "reset", True),
    )
}

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"


def lookup(number: int) -> Xid | None:
    return XIDS.get(number)


def meaning(number: int) -> str:
    """The catalogue's description, or a pointer to the catalogue for numbers not in the table."""
    x = XIDS.get(number)
    return x.meaning if x else "see NVIDIA's Xid catalog"


def advice(number: int) -> str:
    """What to do about this Xid (one sentence, with the likely cause)."""
    x = XIDS.get(number)
    if x is None:
        return f"look Xid {number} up in NVIDIA's Xid catalog ({CATALOG_URL})"
    return f"likely cause: {x.cause}; action ({x.action}): {x.advice}"


def is_application_fault(number: int) -> bool:
    """Xids the catalogue attributes to the running program rather than the GPU."""
    x = XIDS.get(number)
    return x is not None and not x.critical


# When a log shows several Xids, the one that best explains the failure: the GPU leaving the bus, then
# uncorrectable memory errors, then firmware (GSP) failures, then the rest in catalogue order.
PRIORITY: tuple[int, ...] = (79, 95, 48, 64, 140, 143, 121, 119, 120, 74, 144, 145, 146, 147, 148, 149, 150,
                             92, 63, 94, 62, 61, 46, 38, 32, 154)


def most_telling(numbers: list[int]) -> int | None:
    """The Xid of `numbers` that best explains a failure (see PRIORITY); None if none is in the table."""
    known = [n for n in numbers if n in XIDS]
    if not known:
        return None
    ranked = [n for n in PRIORITY if n in known]
    return ranked[0] if ranked else known[0]


# The numbers whose catalogue action is not "restart the application": a GPU/node problem.
HARDWARE_XIDS: frozenset[int] = frozenset(n for n, x in XIDS.items() if x.critical)
