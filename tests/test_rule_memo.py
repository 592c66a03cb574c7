"""A rule change reuses the ledger, the telemetry stage and the resolved requests (engine.compute's
`memo`, issue 20).

The dashboard keeps one memo per read of the source. Changing a rule the telemetry stage does
not read (boundary, drivers, idle treatment, recharge, token weights, SLO, PUE) must give the
same report as computing from scratch, without reading a telemetry sample; changing what it does
read (the period, the activity rule, the flat energy price) must read telemetry again. The
reference is always a fresh `compute` without a memo, so a stale reuse shows as a difference.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import pytest

from cost_engine.api import find_config
from cost_engine.bundle import read_bundle
from cost_engine.config import Config, load_config
from cost_engine.engine import compute
from cost_engine.report import build_report
from cost_engine.telemetry import FrameTelemetry

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data" / "fleet-week"


class CountingTelemetry:
    """The bundle's telemetry, counting how often a reader is opened (every sample read opens one)."""

    def __init__(self, frame):
        self.inner = FrameTelemetry(frame)
        self.opened = 0

    @contextlib.contextmanager
    def reader(self):
        self.opened += 1
        with self.inner.reader() as r:
            yield r

    def __getattr__(self, name):  # card(), only(), held(): what views read for drill-down
        return getattr(self.inner, name)


@pytest.fixture(scope="module")
def sample():
    cfg = load_config(find_config(SAMPLE, None))
    return read_bundle(SAMPLE, cfg), cfg


def changed(cfg: Config, **parts) -> Config:
    data = cfg.model_dump()
    for section, values in parts.items():
        data[section] = {**data[section], **values}
    return Config.model_validate(data)


def assert_same(a, b, path: str = "report") -> None:
    """Equal reports: numbers to a relative 1e-9 (sums may add in another order), the rest exactly."""
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), f"{path}: {a} != {b}"
    elif isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{path}: {len(a)} rows != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


RULE_CHANGES = {
    "boundary rental": {"boundary": {"name": "rental"}},
    "boundary energy only": {"boundary": {"name": "energy_only"}},
    "idle charged to owners": {"allocation": {"idle": "proportional"}},
    "power by utilization": {"allocation": {"drivers": {"power": "utilization", "facility": "energy"}}},
    "recharge by requests": {"allocation": {"inference_recharge": "requests"}},
    "no recharge": {"allocation": {"inference_recharge": "none"}},
    "token weights": {"allocation": {"token_split": "weights", "token_weights": {"input": 2.0, "cached_input": 0.5,
                                                                                "output": 3.0}}},
    "tighter SLO": {"slo": {"ttft_ms": 300.0, "latency_ms": 4000.0}},
    "PUE": {"energy": {"pue": 1.5, "server_overhead": 1.1}},
}


@pytest.mark.parametrize("name", sorted(RULE_CHANGES))
def test_a_rule_change_reuses_the_telemetry_stage_with_the_same_report(sample, name):
    bundle, cfg = sample
    tele = CountingTelemetry(bundle["telemetry"])
    memo: dict = {}
    first = compute(bundle, cfg, telemetry=tele, memo=memo)
    opened = tele.opened
    assert opened > 0 and len(memo) == 2  # the first computation read samples; stage and requests kept

    new = changed(cfg, **RULE_CHANGES[name])
    reused = compute(bundle, new, telemetry=tele, memo=memo)
    assert tele.opened == opened  # not one sample read again
    if name not in ("token weights", "tighter SLO"):
        # Nor a request resolved again: a boundary or driver change maps the summary's slots.
        assert reused.requests is first.requests
    fresh = compute(bundle, new, telemetry=FrameTelemetry(bundle["telemetry"]))
    assert_same(build_report(reused), build_report(fresh))


@pytest.mark.parametrize("name,parts", [
    ("activity threshold", {"activity": {"threshold_pct": 50.0}}),
    ("weighted activity", {"activity": {"mode": "weighted"}}),
    ("flat energy price", {"energy": {"flat_price_per_kwh": 0.3}}),
    ("period", {"period": {"start": "2026-10-06T00:00:00+02:00", "end": "2026-10-08T00:00:00+02:00"}}),
])
def test_what_the_telemetry_stage_reads_computes_it_again(sample, name, parts):
    bundle, cfg = sample
    tele = CountingTelemetry(bundle["telemetry"])
    memo: dict = {}
    compute(bundle, cfg, telemetry=tele, memo=memo)
    opened = tele.opened
    new = changed(cfg, **parts)
    reused = compute(bundle, new, telemetry=tele, memo=memo)
    assert tele.opened > opened  # read again: the kept stage was for another rule or period
    assert sum(k[0] == "telemetry stage" for k in memo) == 2
    fresh = compute(bundle, new, telemetry=FrameTelemetry(bundle["telemetry"]))
    assert_same(build_report(reused), build_report(fresh))
