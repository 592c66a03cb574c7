"""Live GPU collector: NVML readings -> telemetry, inventory and events of the data contract.

    from cost_engine.collector import NvmlBackend, Sampler, BundleWriter, run
    sampler = Sampler(NvmlBackend(), interval_s=10)
    run(sampler, BundleWriter("collected/"), count=6)

backend.py holds the one narrow seam to NVML (GpuBackend) and the real pynvml backend;
fake.py a fake built from pynvml's own ctypes structs for tests; sampler.py the sampling,
the event rules and the writers.
"""

from __future__ import annotations

from .backend import CollectorError, GpuBackend, NvmlBackend
from .sampler import Batch, BundleWriter, Reading, Sampler, StoreWriter, run

__all__ = [
    "Batch",
    "BundleWriter",
    "CollectorError",
    "GpuBackend",
    "NvmlBackend",
    "Reading",
    "Sampler",
    "StoreWriter",
    "run",
]
