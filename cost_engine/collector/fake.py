"""A fake GpuBackend for tests, answering with pynvml's own ctypes structs and NVMLError codes.

Each reading of a FakeCard is a value, or a list of values indexed by the sample number
(the backend counts samples by its `poll_xids` calls, which the sampler makes once per
sample; the last value repeats). A value may be `Fail(code)`: that call raises
`pynvml.NVMLError(code)`, as NVML would. `UNSUPPORTED` and `LOST` are the usual two.

    card = FakeCard("GPU-1", util=[40, 50], energy_j=UNSUPPORTED)
    mig = FakeCard("GPU-2", migs=[FakeMig("MIG-a", gi=1, slices=3)])
    backend = FakeBackend([card, mig])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pynvml

from .backend import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_EVENT_XID_CRITICAL,
    CollectorError,
)

MIB = 1024 * 1024


@dataclass(frozen=True)
class Fail:
    """A reading that fails with this NVML error code."""

    code: int


UNSUPPORTED = Fail(NVML_ERROR_NOT_SUPPORTED)
LOST = Fail(NVML_ERROR_GPU_IS_LOST)


@dataclass
class FakeMig:
    uuid: str
    gi: int  # GPU instance id
    slices: int  # gpuInstanceSliceCount (3 for 3g.40gb)
    name: str | None = None
    util: Any = UNSUPPORTED  # NVML gives no per-instance utilization on most drivers
    mem_used_mib: Any = 1024.0
    mem_total_mib: float = 40960.0


@dataclass
class FakeCard:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    util: Any = 50
    mem_used_mib: Any = 8192.0
    mem_total_mib: float = 81559.0
    power_w: Any = 300.0
    energy_j: Any = 1_000_000.0
    clock_reasons: Any = 0
    ecc_uncorrected: Any = 0
    retired_pages: Any = 0
    remapped_rows: Any = (0, 0, False, False)
    migs: list[FakeMig] = field(default_factory=list)
    xids: dict[int, list[int]] = field(default_factory=dict)  # sample number -> XIDs raised then
    lost_from: int | None = None  # from this sample number on, every call: GPU_IS_LOST


@dataclass
class _Handle:
    card: FakeCard
    mig: FakeMig | None = None


class FakeBackend:
    """GpuBackend over FakeCards. `init_error` makes `init` fail as a machine without a driver."""

    def __init__(self, cards: list[FakeCard], init_error: int | None = None) -> None:
        self.cards = cards
        self.init_error = init_error
        self.step = -1  # sample number; poll_xids starts each sample
        self.watched: list[str] = []
        self.calls: list[tuple[str, str]] = []
        self.initialised = False

    # lifecycle
    def init(self) -> None:
        if self.init_error is not None:
            err = pynvml.NVMLError(self.init_error)
            raise CollectorError(f"NVIDIA driver not available: {err} (NVML error {self.init_error})")
        self.initialised = True

    def shutdown(self) -> None:
        self.initialised = False

    def device_count(self) -> int:
        return len(self.cards)

    def handle(self, index: int) -> _Handle:
        return _Handle(self.cards[index])

    # identity
    def uuid(self, h: _Handle) -> str:
        return h.mig.uuid if h.mig else h.card.uuid

    def name(self, h: _Handle) -> str:
        if h.mig:
            return h.mig.name or f"{h.card.name} MIG {h.mig.slices}g.{int(h.mig.mem_total_mib // 1024)}gb"
        return h.card.name

    def mig_enabled(self, h: _Handle) -> bool:
        return bool(h.card.migs)

    def mig_devices(self, h: _Handle) -> list[_Handle]:
        return [_Handle(h.card, m) for m in h.card.migs]

    def attributes(self, h: _Handle) -> pynvml.c_nvmlDeviceAttributes:
        if h.mig is None:
            raise pynvml.NVMLError(NVML_ERROR_NOT_SUPPORTED)  # NVML: MIG handles only
        return pynvml.c_nvmlDeviceAttributes(gpuInstanceSliceCount=h.mig.slices,
                                             memorySizeMB=int(h.mig.mem_total_mib))

    def gpu_instance_id(self, h: _Handle) -> int:
        if h.mig is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return h.mig.gi

    # readings
    def utilization(self, h: _Handle) -> pynvml.c_nvmlUtilization_t:
        v = self._value(h, "util", h.mig.util if h.mig else h.card.util)
        return pynvml.c_nvmlUtilization_t(gpu=int(v), memory=0)

    def memory(self, h: _Handle) -> pynvml.c_nvmlMemory_t:
        src = h.mig or h.card
        used = self._value(h, "memory", src.mem_used_mib)
        total = int(src.mem_total_mib * MIB)
        used_b = int(used * MIB)
        return pynvml.c_nvmlMemory_t(total=total, free=max(total - used_b, 0), used=used_b)

    def power_mw(self, h: _Handle) -> int:
        return int(round(self._value(h, "power", h.card.power_w) * 1000))

    def energy_mj(self, h: _Handle) -> int:
        return int(round(self._value(h, "energy", h.card.energy_j) * 1000))

    def clock_event_reasons(self, h: _Handle) -> int:
        return int(self._value(h, "clocks", h.card.clock_reasons))

    def ecc_uncorrected(self, h: _Handle) -> int:
        return int(self._value(h, "ecc", h.card.ecc_uncorrected))

    def retired_pages(self, h: _Handle) -> int:
        return int(self._value(h, "retired", h.card.retired_pages))

    def remapped_rows(self, h: _Handle) -> tuple[int, int, bool, bool]:
        corr, unc, pending, failure = self._value(h, "remapped", h.card.remapped_rows)
        return int(corr), int(unc), bool(pending), bool(failure)

    # events
    def watch_xids(self, handles: list[_Handle]) -> None:
        self.watched = [h.card.uuid for h in handles]

    def poll_xids(self) -> list[tuple[str, int]]:
        self.step += 1
        out = []
        for card in self.cards:
            for xid in card.xids.get(self.step, []):
                # Built as NVML hands it over, then resolved to the card as NvmlBackend does.
                data = pynvml.c_nvmlEventData_t(eventType=NVML_EVENT_XID_CRITICAL, eventData=xid)
                if card.uuid in self.watched and data.eventType & NVML_EVENT_XID_CRITICAL:
                    out.append((card.uuid, int(data.eventData)))
        return out

    # ---------------------------------------------------------------- internals
    def _value(self, h: _Handle, what: str, spec: Any) -> Any:
        self.calls.append((self.uuid(h), what))
        step = max(self.step, 0)
        if h.card.lost_from is not None and step >= h.card.lost_from:
            raise pynvml.NVMLError(NVML_ERROR_GPU_IS_LOST)
        v = spec[min(step, len(spec) - 1)] if isinstance(spec, list) else spec
        if isinstance(v, Fail):
            raise pynvml.NVMLError(v.code)
        return v


NO_DRIVER = NVML_ERROR_DRIVER_NOT_LOADED
