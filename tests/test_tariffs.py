"""Tariff bands: a piece of energy priced by the bands it overlaps (tariffs.Bands); by hand."""

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


def test_a_piece_across_three_bands_is_priced_by_time_in_each():
    """Piece 0: 00:30-02:30, 3,600 J, idle (util 0). By time: 900 J before 01:00 at $0.10,
    1,800 J in 01-02 at $0.40, 900 J in 02-02:30 at $0.20 -> price_j = 90 + 720 + 180 = 990
    (J x $/kWh; /3.6e6 gives $0.000275). All of it drawn while idle -> idle_price_j = 990.
    Carbon: only 01-02 has an intensity -> 1,800 x 100 = 180,000 J x g/kWh.
    Piece 1: 03:00-03:10, 600 J, busy (util 90 >= 50): flat $0.10 -> price_j 60, idle_price_j 0."""
    pieces = pl.DataFrame(
        {"e_idx": [0, 1], "p0": [ts(1, 0.5), ts(1, 3)], "p1": [ts(1, 2.5), ts(1, 3 + 1 / 6)],
         "util_pct": [0.0, 90.0], "joules": [3600.0, 600.0], "frac": [1.0, 1.0]},
        schema={"e_idx": pl.Int64, "p0": TS, "p1": TS, "util_pct": pl.Float64, "joules": pl.Float64,
                "frac": pl.Float64},
    )
    busy = pl.when(pl.col("util_pct") >= 50.0).then(1.0).otherwise(0.0)
    got = {r["e_idx"]: r for r in _bands().priced(pieces, busy).iter_rows(named=True)}
    assert got[0]["price_j"] == pytest.approx(990.0)
    assert got[0]["idle_price_j"] == pytest.approx(990.0)
    assert got[0]["carbon_j"] == pytest.approx(180_000.0)
    assert got[1]["price_j"] == pytest.approx(60.0)
    assert got[1]["idle_price_j"] == pytest.approx(0.0)
    assert got[1]["carbon_j"] == pytest.approx(0.0)


def test_carbon_known_only_where_a_band_with_an_intensity_overlaps():
    t0 = pl.Series([ts(1, 0.5), ts(1, 2), ts(1, 3), ts(1, 1.5)], dtype=TS)
    t1 = pl.Series([ts(1, 2.5), ts(1, 3), ts(1, 4), ts(1, 1.75)], dtype=TS)
    assert _bands().carbon_known(t0, t1).to_list() == [True, False, False, True]


def test_without_tariffs_everything_is_the_flat_price():
    """No tariffs: 7,200 J at $0.10 -> price_j 720, half of it idle-weighted (weighted mode, util
    50 -> busy 0.5) -> idle_price_j 360; no carbon."""
    pieces = pl.DataFrame(
        {"e_idx": [3], "p0": [ts(1, 0)], "p1": [ts(1, 2)], "util_pct": [50.0], "joules": [7200.0],
         "frac": [1.0]},
        schema={"e_idx": pl.Int64, "p0": TS, "p1": TS, "util_pct": pl.Float64, "joules": pl.Float64,
                "frac": pl.Float64},
    )
    got = Bands.flat(0.10).priced(pieces, pl.col("util_pct") / 100.0).row(0, named=True)
    assert (got["price_j"], got["idle_price_j"], got["carbon_j"]) == pytest.approx((720.0, 360.0, 0.0))


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
