"""Thin pynvml reader: NVML calls -> the plain dicts `nvml_eval` judges.

pynvml (package nvidia-ml-py) is imported lazily; without it, or without a driver, the record
carries `"error"` and the GPU checks are skipped. Every field NVML refuses on a board
(NOT_SUPPORTED, e.g. ECC on GeForce) becomes None.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from provisioner.burnin.shapes import NvmlEvent, NvmlGpu, NvmlGpuSample, NvmlRecord, NvmlSample, ShmInfo


def import_pynvml() -> Any | None:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def shm_info(path: str = "/dev/shm") -> ShmInfo | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return {"total_bytes": st.f_blocks * st.f_frsize, "free_bytes": st.f_bavail * st.f_frsize}


def nccl_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k.startswith(("NCCL_", "NVSHMEM_", "TORCH_SYMMMEM"))}


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlReader:
    """Opened with `open()` (nvmlInit); `close()` shuts NVML down. Not thread-safe by itself."""

    def __init__(self, nvml: Any | None = None) -> None:
        self.nvml: Any = nvml if nvml is not None else import_pynvml()
        self.error: str | None = None if self.nvml is not None else "pynvml (nvidia-ml-py) not installed"
        self.handles: list[Any] = []

    def open(self) -> bool:
        if self.nvml is None:
            return False
        try:
            self.nvml.nvmlInit()
            count = int(self.nvml.nvmlDeviceGetCount())
            self.handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            self.error = f"{type(exc).__name__}: {exc}"
            return False
        return True

    def close(self) -> None:
        if self.nvml is not None and self.error is None:
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # noqa: S110 - shutting down, nothing to report
                pass

    def _safe(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception:  # an unsupported field on this board
            return None

    # -- preflight ---------------------------------------------------------------------------------
    def record(self, environ: Mapping[str, str] | None = None) -> NvmlRecord:
        env = nccl_env(environ if environ is not None else os.environ)
        rec: NvmlRecord = {"error": self.error, "gpus": [], "shm": shm_info(), "env": env}
        if self.error is not None:
            return rec
        n = self.nvml
        rec["driver_version"] = _str(self._safe(n.nvmlSystemGetDriverVersion))
        rec["cuda_driver_version"] = self._safe(n.nvmlSystemGetCudaDriverVersion)
        rec["gpus"] = [self._gpu(i, h) for i, h in enumerate(self.handles)]
        rec["p2p_read"] = self._p2p_matrix()
        return rec

    def _gpu(self, index: int, h: Any) -> NvmlGpu:
        n = self.nvml
        pci = self._safe(n.nvmlDeviceGetPciInfo_v3, h)
        ecc_mode = self._safe(n.nvmlDeviceGetEccMode, h)
        remap = self._safe(n.nvmlDeviceGetRemappedRows, h)
        links = None
        if hasattr(n, "nvmlDeviceGetNvLinkState"):
            states = [self._safe(n.nvmlDeviceGetNvLinkState, h, link) for link in range(n.NVML_NVLINK_MAX_LINKS)]
            supported = [bool(s) for s in states if s is not None]
            links = supported or None
        ecc_err = n.nvmlDeviceGetTotalEccErrors
        unc, cor = n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_MEMORY_ERROR_TYPE_CORRECTED
        return {
            "index": index,
            "name": _str(self._safe(n.nvmlDeviceGetName, h)),
            "uuid": _str(self._safe(n.nvmlDeviceGetUUID, h)),
            "pci_bus_id": _str(pci.busId) if pci is not None else None,
            "ecc_mode": ecc_mode[0] if ecc_mode else None,
            "ecc": {
                "sbe_volatile": self._safe(ecc_err, h, cor, n.NVML_VOLATILE_ECC),
                "dbe_volatile": self._safe(ecc_err, h, unc, n.NVML_VOLATILE_ECC),
                "sbe_aggregate": self._safe(ecc_err, h, cor, n.NVML_AGGREGATE_ECC),
                "dbe_aggregate": self._safe(ecc_err, h, unc, n.NVML_AGGREGATE_ECC),
            },
            "remapped_rows": (
                {"correctable": remap[0], "uncorrectable": remap[1], "pending": bool(remap[2]),
                 "failure": bool(remap[3])}
                if remap else None
            ),
            "retired_pages_pending": self._safe(n.nvmlDeviceGetRetiredPagesPendingStatus, h),
            "pcie": {
                "gen_current": self._safe(n.nvmlDeviceGetCurrPcieLinkGeneration, h),
                "gen_max": self._safe(n.nvmlDeviceGetMaxPcieLinkGeneration, h),
                "width_current": self._safe(n.nvmlDeviceGetCurrPcieLinkWidth, h),
                "width_max": self._safe(n.nvmlDeviceGetMaxPcieLinkWidth, h),
                "replay_counter": self._safe(n.nvmlDeviceGetPcieReplayCounter, h),
            },
            "nvlink_active": links,
            "temperature_c": self._safe(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
            "slowdown_temp_c": self._safe(
                n.nvmlDeviceGetTemperatureThreshold, h, n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
            ),
            "power_w": _watts(self._safe(n.nvmlDeviceGetPowerUsage, h)),
            "power_limit_w": _watts(self._safe(n.nvmlDeviceGetEnforcedPowerLimit, h)),
            "clocks_event_reasons": self._clock_reasons(h),
        }

    def _clock_reasons(self, h: Any) -> int | None:
        n = self.nvml
        fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            n, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        return None if fn is None else self._safe(fn, h)

    def _p2p_matrix(self) -> list[list[int | None]] | None:
        n = self.nvml
        idx = n.NVML_P2P_CAPS_INDEX_READ
        idx = idx[0] if isinstance(idx, tuple) else idx  # pynvml 13.x defines it as a 1-tuple
        count = len(self.handles)
        if count < 2:
            return None
        return [
            [None if i == j else self._safe(n.nvmlDeviceGetP2PStatus, self.handles[i], self.handles[j], idx)
             for j in range(count)]
            for i in range(count)
        ]

    # -- monitoring -------------------------------------------------------------------------------
    def sample(self, phase: str, t: float) -> NvmlSample:
        n = self.nvml
        gpus: list[NvmlGpuSample] = []
        for i, h in enumerate(self.handles):
            ecc_err = n.nvmlDeviceGetTotalEccErrors
            gpus.append({
                "index": i,
                "temperature_c": self._safe(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
                "power_w": _watts(self._safe(n.nvmlDeviceGetPowerUsage, h)),
                "power_limit_w": _watts(self._safe(n.nvmlDeviceGetEnforcedPowerLimit, h)),
                "clocks_event_reasons": self._clock_reasons(h),
                "sm_clock_mhz": self._safe(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM),
                "pcie_gen": self._safe(n.nvmlDeviceGetCurrPcieLinkGeneration, h),
                "pcie_width": self._safe(n.nvmlDeviceGetCurrPcieLinkWidth, h),
                "pcie_replay": self._safe(n.nvmlDeviceGetPcieReplayCounter, h),
                "ecc_sbe_volatile": self._safe(
                    ecc_err, h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC),
                "ecc_dbe_volatile": self._safe(
                    ecc_err, h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC),
            })
        return {"t": round(t, 3), "phase": phase, "gpus": gpus}


def _watts(milliwatts: Any) -> float | None:
    return None if milliwatts is None else float(milliwatts) / 1000.0


class XidWatcher:
    """nvmlEventSet registered for XID and double-bit ECC events on every GPU that supports them."""

    def __init__(self, reader: NvmlReader) -> None:
        self.reader = reader
        n = reader.nvml
        self.event_set: Any = None
        self.registered: list[int] = []
        if n is None or reader.error is not None:
            return
        try:
            self.event_set = n.nvmlEventSetCreate()
        except Exception:
            self.event_set = None
            return
        wanted = n.nvmlEventTypeXidCriticalError | n.nvmlEventTypeDoubleBitEccError
        for i, h in enumerate(reader.handles):
            supported = reader._safe(n.nvmlDeviceGetSupportedEventTypes, h) or 0
            mask = int(supported) & wanted
            if not mask:
                continue
            try:
                n.nvmlDeviceRegisterEvents(h, mask, self.event_set)
            except Exception:  # noqa: S112 - this GPU cannot report events; sampling still runs
                continue
            self.registered.append(i)

    def wait(self, timeout_ms: int, t0: float) -> list[NvmlEvent]:
        """Block up to timeout_ms; returns the events seen (at most one per call, as NVML delivers)."""
        n = self.reader.nvml
        if self.event_set is None:
            time.sleep(timeout_ms / 1000.0)
            return []
        try:
            data = n.nvmlEventSetWait(self.event_set, timeout_ms)
        except Exception:  # NVML_ERROR_TIMEOUT: nothing happened
            return []
        index = self.reader._safe(n.nvmlDeviceGetIndex, data.device)
        kind: Literal["xid", "dbe"] = "xid" if data.eventType == n.nvmlEventTypeXidCriticalError else "dbe"
        ev: NvmlEvent = {"t": round(time.monotonic() - t0, 3), "gpu": index, "kind": kind}
        if kind == "xid":
            ev["xid"] = int(data.eventData)
        return [ev]

    def close(self) -> None:
        if self.event_set is not None:
            self.reader._safe(self.reader.nvml.nvmlEventSetFree, self.event_set)
