"""Tariff bands: intervals cut at band edges and energy priced by the band it was drawn in (tariffs.Bands); by hand."""

from __future__ import annotations

import polars as pl
import pytest

from cost_engine.contract import TS
from cost_engine.tariffs import Bands
from tests.helpers import ts


def _bands() -> Bands:
    """$0.40 and 100 g/kWh over 01:00-02:00, $0.20 and no carbon over 02:00-03:00; the flat
    price $0.10 (no carbon) before and after."""
    tariffs = pl.DataFrame(
        {"start": [ts(1, 1), ts(1, 2)], "end": [ts(1, 2), ts(1, 3)], "price_per_kwh": [0.40, 0.20],
         "carbon_g_per_kwh": [100.0, None]},
        schema={"start": TS, "end": TS, "price_per_kwh": pl.Float64, "carbon_g_per_kwh": pl.Float64},
    )
    return Bands.of(tariffs, 0.10)


def _intervals(*spans) -> pl.DataFrame:
    return pl.DataFrame(
        {"e_idx": list(range(len(spans))), "t0": [a for a, _ in spans], "t1": [b for _, b in spans]},
        schema={"e_idx": pl.Int64, "t0": TS, "t1": TS},
    )


def _rows(parts: pl.DataFrame) -> list[tuple]:
    return parts.with_columns(pl.col("t0", "t1").dt.strftime("%Y-%m-%dT%H:%M:%SZ")).rows()


def test_an_interval_across_three_bands_is_cut_at_their_edges():
    """Interval 0: 00:30-02:30 over three bands -> [00:30, 01:00) at the flat $0.10 (no carbon, so
    0), [01:00, 02:00) at $0.40 and 100 g/kWh, [02:00, 02:30) at $0.20 (carbon unknown -> 0).
    Interval 1: 03:00-03:10, after the last tariff: one part at the flat $0.10."""
    got = _bands().split(_intervals((ts(1, 0.5), ts(1, 2.5)), (ts(1, 3), ts(1, 3 + 1 / 6))))
    assert _rows(got) == [
        (0, ts(1, 0.5), ts(1, 1), 0.10, 0.0),
        (0, ts(1, 1), ts(1, 2), 0.40, 100.0),
        (0, ts(1, 2), ts(1, 2.5), 0.20, 0.0),
        (1, ts(1, 3), ts(1, 3 + 1 / 6), 0.10, 0.0),
    ]


def test_an_interval_ending_on_a_band_edge_stays_whole():
    """01:00-02:00 is exactly the $0.40 band: one part (its end, 02:00, starts the next band)."""
    got = _bands().split(_intervals((ts(1, 1), ts(1, 2))))
    assert _rows(got) == [(0, ts(1, 1), ts(1, 2), 0.40, 100.0)]


def test_carbon_known_only_where_a_band_with_an_intensity_overlaps():
    t0 = pl.Series([ts(1, 0.5), ts(1, 2), ts(1, 3), ts(1, 1.5)], dtype=TS)
    t1 = pl.Series([ts(1, 2.5), ts(1, 3), ts(1, 4), ts(1, 1.75)], dtype=TS)
    assert _bands().carbon_known(t0, t1).to_list() == [True, False, False, True]


def test_without_tariffs_everything_is_the_flat_price():
    """No tariffs: the interval is one part at the flat $0.10, no carbon."""
    got = Bands.flat(0.10).split(_intervals((ts(1, 0), ts(1, 2))))
    assert _rows(got) == [(0, ts(1, 0), ts(1, 2), 0.10, 0.0)]


def test_samples_across_a_band_edge_are_priced_in_the_engine():
    """g0 held by A1 00:00-02:00; samples at 00:00, 00:40, 01:20 at 300 W (gap cap 2,400 s), so
    each stands for 2,400 s = 720,000 J. Tariff $0.40 over 01:00-02:00, flat $0.10 otherwise;
    overhead and PUE 1.
    [00:00, 00:40): 720,000 J x 0.10 = 72,000; [00:40, 01:20) crosses 01:00: half at 0.10 and
    half at 0.40 = 36,000 + 144,000 = 180,000; [01:20, 02:00) at 0.40 = 288,000.
    540,000 J x $/kWh / 3.6e6 = $0.15 of measured energy, all A1's; 2.16e6 J = 0.6 kWh."""
    from cost_engine.engine import compute
    from cost_engine.report import build_report
    from tests.helpers import make_bundle, make_config

    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a0", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 2), "owner": "A1"}],
        telemetry=[{"ts": ts(1, h), "gpu_id": "g0", "util_pct": 90.0, "power_w": 300.0} for h in (0, 2 / 3, 4 / 3)],
        tariffs=[{"start": ts(1, 1), "end": ts(1, 2), "price_per_kwh": 0.40}],
        owners=[{"tenant": "A", "project": "A1"}],
    )
    cfg = make_config(activity={"max_sample_gap_s": 2400},
                      energy={"server_overhead": 1.0, "pue": 1.0, "flat_price_per_kwh": 0.10})
    comp = compute(b, cfg)
    assert comp.seg["energy_cost"].sum() == pytest.approx(0.15)
    assert comp.seg["kwh_gpu"].sum() == pytest.approx(0.6)
    rc = build_report(comp)["reconciliation"]
    assert (rc["input_cost"], rc["attributed"]) == pytest.approx((0.15, 0.15))
