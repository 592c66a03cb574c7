"""The one narrow seam between the sampler and NVML: a Protocol, the real pynvml backend, constants.

Every call either returns the NVML value (pynvml's own ctypes structs where NVML has one) or
raises an exception carrying the NVML error code in `.value` (pynvml.NVMLError does). The
sampler turns NVML_ERROR_NOT_SUPPORTED into a missing reading (never 0) and
NVML_ERROR_GPU_IS_LOST into a lost card. pynvml is imported only when NvmlBackend starts,
so this module (and the importers that share its constants) work on machines without it.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

# NVML return codes (nvml.h; stable ABI values, also pynvml.NVML_ERROR_*).
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

# Clock event (throttle) reasons that mean the hardware is holding the card back: hardware
# slowdown, thermal slowdown (software or hardware), power brake. Idle, application clocks,
# the software power cap, sync boost and display clocks are normal operation.
CLOCK_HW_SLOWDOWN = 0x08
CLOCK_SW_THERMAL = 0x20
CLOCK_HW_THERMAL = 0x40
CLOCK_HW_POWER_BRAKE = 0x80
HW_SLOWDOWN_BITS = CLOCK_HW_SLOWDOWN | CLOCK_SW_THERMAL | CLOCK_HW_THERMAL | CLOCK_HW_POWER_BRAKE

# XIDs that NVIDIA documents as application faults (bad kernels, page faults, a process that
# stopped): they say nothing about the card's health, so they make no degraded_hardware event.
APPLICATION_XIDS = frozenset({13, 31, 43, 45})

NVML_EVENT_XID_CRITICAL = 0x0000000000000008
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_DEVICE_MIG_ENABLE = 1


class CollectorError(RuntimeError):
    """The collector cannot run: no driver, no NVML library, no devices."""


def nvml_code(exc: BaseException) -> int | None:
    """The NVML error code an exception carries (pynvml.NVMLError.value), else None."""
    v = getattr(exc, "value", None)
    return v if isinstance(v, int) else None


def mig_total_slices(card_name: str | None) -> int:
    """GPU-instance slices of a whole card: 7 (A100, H100, H200, B200), 4 on an A30."""
    return 4 if card_name and "A30" in card_name.upper() else 7


def mig_slices_from_name(name: str | None) -> int | None:
    """`NVIDIA A100-SXM4-40GB MIG 3g.20gb` -> 3."""
    m = re.search(r"(\d+)g\.\d+gb", name or "")
    return int(m.group(1)) if m else None


class GpuBackend(Protocol):
    """The calls the sampler needs. Handles are opaque; errors carry the NVML code in `.value`."""

    def init(self) -> None:
        """Start NVML; raise CollectorError("NVIDIA driver not available: ...") when it cannot."""

    def shutdown(self) -> None: ...

    def device_count(self) -> int: ...

    def handle(self, index: int) -> Any: ...

    def uuid(self, handle: Any) -> str: ...

    def name(self, handle: Any) -> str: ...

    def mig_enabled(self, handle: Any) -> bool: ...

    def mig_devices(self, handle: Any) -> list[Any]:
        """Handles of the MIG instances that exist on a card in MIG mode."""

    def attributes(self, handle: Any) -> Any:
        """c_nvmlDeviceAttributes of a MIG handle (gpuInstanceSliceCount, memorySizeMB)."""

    def gpu_instance_id(self, handle: Any) -> int: ...

    def utilization(self, handle: Any) -> Any:
        """c_nvmlUtilization_t (.gpu in %)."""

    def memory(self, handle: Any) -> Any:
        """c_nvmlMemory_t (.total, .free, .used in bytes)."""

    def power_mw(self, handle: Any) -> int: ...

    def energy_mj(self, handle: Any) -> int:
        """Total energy since the driver loaded, in millijoules."""

    def clock_event_reasons(self, handle: Any) -> int: ...

    def ecc_uncorrected(self, handle: Any) -> int:
        """Volatile (since boot) uncorrected ECC errors."""

    def retired_pages(self, handle: Any) -> int:
        """Pages retired for double-bit ECC errors."""

    def remapped_rows(self, handle: Any) -> tuple[int, int, bool, bool]:
        """(correctable, uncorrectable, remap pending, remap failure)."""

    def watch_xids(self, handles: list[Any]) -> None:
        """Start listening for XID critical-error events on these cards."""

    def poll_xids(self) -> list[tuple[str, int]]:
        """(card uuid, XID) of the events since the last poll; never blocks."""


class NvmlBackend:
    """GpuBackend over nvidia-ml-py (`import pynvml`), imported when `init` runs."""

    def __init__(self) -> None:
        self._nv: Any = None
        self._events: Any = None

    def init(self) -> None:
        try:
            import pynvml
        except ImportError:
            raise CollectorError("NVIDIA driver not available: nvidia-ml-py (import pynvml) is not installed") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise CollectorError(f"NVIDIA driver not available: {exc} (NVML error {nvml_code(exc)})") from None
        except OSError as exc:  # a broken libnvidia-ml
            raise CollectorError(f"NVIDIA driver not available: {exc}") from None
        self._nv = pynvml

    def shutdown(self) -> None:
        if self._nv is None:
            return
        try:
            if self._events is not None:
                self._nv.nvmlEventSetFree(self._events)
            self._nv.nvmlShutdown()
        finally:
            self._nv = None
            self._events = None

    def device_count(self) -> int:
        return int(self._nv.nvmlDeviceGetCount())

    def handle(self, index: int) -> Any:
        return self._nv.nvmlDeviceGetHandleByIndex(index)

    def uuid(self, handle: Any) -> str:
        return _str(self._nv.nvmlDeviceGetUUID(handle))

    def name(self, handle: Any) -> str:
        return _str(self._nv.nvmlDeviceGetName(handle))

    def mig_enabled(self, handle: Any) -> bool:
        try:
            current, _pending = self._nv.nvmlDeviceGetMigMode(handle)
        except self._nv.NVMLError as exc:
            if nvml_code(exc) == NVML_ERROR_NOT_SUPPORTED:
                return False
            raise
        return current == NVML_DEVICE_MIG_ENABLE

    def mig_devices(self, handle: Any) -> list[Any]:
        out = []
        for i in range(int(self._nv.nvmlDeviceGetMaxMigDeviceCount(handle))):
            try:
                out.append(self._nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, i))
            except self._nv.NVMLError as exc:
                if nvml_code(exc) in (NVML_ERROR_NOT_FOUND, NVML_ERROR_INVALID_ARGUMENT):
                    continue  # no instance in that slot
                raise
        return out

    def attributes(self, handle: Any) -> Any:
        return self._nv.nvmlDeviceGetAttributes(handle)

    def gpu_instance_id(self, handle: Any) -> int:
        return int(self._nv.nvmlDeviceGetGpuInstanceId(handle))

    def utilization(self, handle: Any) -> Any:
        return self._nv.nvmlDeviceGetUtilizationRates(handle)

    def memory(self, handle: Any) -> Any:
        return self._nv.nvmlDeviceGetMemoryInfo(handle)

    def power_mw(self, handle: Any) -> int:
        return int(self._nv.nvmlDeviceGetPowerUsage(handle))

    def energy_mj(self, handle: Any) -> int:
        return int(self._nv.nvmlDeviceGetTotalEnergyConsumption(handle))

    def clock_event_reasons(self, handle: Any) -> int:
        fn = getattr(self._nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            self._nv.nvmlDeviceGetCurrentClocksThrottleReasons
        return int(fn(handle))

    def ecc_uncorrected(self, handle: Any) -> int:
        return int(self._nv.nvmlDeviceGetTotalEccErrors(handle, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC))

    def retired_pages(self, handle: Any) -> int:
        return len(self._nv.nvmlDeviceGetRetiredPages(handle, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR))

    def remapped_rows(self, handle: Any) -> tuple[int, int, bool, bool]:
        corr, unc, pending, failure = self._nv.nvmlDeviceGetRemappedRows(handle)
        return int(corr), int(unc), bool(pending), bool(failure)

    def watch_xids(self, handles: list[Any]) -> None:
        nv = self._nv
        self._events = nv.nvmlEventSetCreate()
        for h in handles:
            try:
                nv.nvmlDeviceRegisterEvents(h, NVML_EVENT_XID_CRITICAL, self._events)
            except nv.NVMLError as exc:
                if nvml_code(exc) != NVML_ERROR_NOT_SUPPORTED:
                    raise

    def poll_xids(self) -> list[tuple[str, int]]:
        if self._events is None:
            return []
        nv = self._nv
        out = []
        while True:
            try:
                data = nv.nvmlEventSetWait(self._events, 0)
            except nv.NVMLError as exc:
                if nvml_code(exc) == NVML_ERROR_TIMEOUT:
                    return out
                raise
            if data.eventType & NVML_EVENT_XID_CRITICAL:
                out.append((_str(nv.nvmlDeviceGetUUID(data.device)), int(data.eventData)))


def _str(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
