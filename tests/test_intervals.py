"""The interval primitives (cost_engine/intervals.py), hand-computed: coverage, precedence, step integrals."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl
import pytest

from cost_engine.contract import TS
from cost_engine.intervals import Coverage, Precedence, StepIntegral, WeightedPrecedence, holes

T0 = datetime(2026, 10, 1, tzinfo=timezone.utc)
H = 3_600_000_000  # an hour in microseconds


def h(x: float) -> datetime:
    return T0 + timedelta(hours=x)


def frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows).with_columns(pl.col("start", "end").cast(TS))


def questions(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame({"pool": [r[0] for r in rows], "t0": [h(r[1]) for r in rows], "t1": [h(r[2]) for r in rows]}).with_columns(
        pl.col("t0", "t1").cast(TS)
    )


def test_coverage_measures_the_union_per_key():
    """Pool a: [1, 3) and [2, 4) overlap (union [1, 4)), and [5, 6). Pool b: [0, 1).

    [3, 5) of a: 1 h covered ([3, 4)); [0, 10) of a: 3 + 1 = 4 h; [0, 2) of b: 1 h; pool c has
    no interval: 0.
    """
    cov = Coverage.of(frame([{"pool": "a", "start": h(1), "end": h(3)}, {"pool": "a", "start": h(2), "end": h(4)},
                             {"pool": "a", "start": h(5), "end": h(6)}, {"pool": "b", "start": h(0), "end": h(1)}]),
                      "pool")
    got = cov.covered(questions([("a", 3, 5), ("a", 0, 10), ("b", 0, 2), ("c", 0, 1)]), "t0", "t1")
    assert got["covered_us"].to_list() == [1 * H, 4 * H, 1 * H, 0]


def test_precedence_gives_each_rank_the_time_it_won():
    """Ranks 0 (degraded) [2, 6), 1 (maintenance) [4, 8), 2 (quota) [0, 10) in one pool.

    Over [0, 12): rank 0 wins [2, 6) = 4 h; rank 1 wins [6, 8) = 2 h; rank 2 wins [0, 2) and
    [8, 10) = 4 h; the other 2 h no rank. Over [5, 9): rank 0 1 h, rank 1 2 h, rank 2 1 h.
    """
    p = Precedence.of(frame([{"pool": "p", "start": h(2), "end": h(6), "rank": 0},
                             {"pool": "p", "start": h(4), "end": h(8), "rank": 1},
                             {"pool": "p", "start": h(0), "end": h(10), "rank": 2}]), "pool", 3)
    got = p.won(questions([("p", 0, 12), ("p", 5, 9), ("q", 0, 12)]), "t0", "t1", "w")
    assert got.select("w0", "w1", "w2").rows() == [(4 * H, 2 * H, 4 * H), (1 * H, 2 * H, 1 * H), (0, 0, 0)]


def test_step_integral_of_overlapping_rates():
    """Rates 2/s on [0, 4) and 3/s on [2, 6): over [1, 5): 2 x 3 h + 3 x 3 h = 15 h-units,
    i.e. 15 x 3600 = 54,000; over [6, 8): 0."""
    si = StepIntegral.of(frame([{"pool": "p", "start": h(0), "end": h(4), "r": 2.0},
                                {"pool": "p", "start": h(2), "end": h(6), "r": 3.0}]), "pool", "start", "end", "r")
    got = si.integral(questions([("p", 1, 5), ("p", 6, 8)]), "t0", "t1", "x")
    assert got["x"].to_list() == pytest.approx([54_000.0, 0.0])


def test_a_gap_between_intervals_integrates_to_exactly_zero():
    """0.1 + 0.2 - 0.1 - 0.2 is 2.8e-17 in floating point, not 0: a rate summed step by step
    leaves a residue after both intervals end, and a cost row over that gap would see a driver
    quantity of 1e-13 and a price of amount / 1e-13 (found by the cut-invariance property). The
    rate where no interval is in force is exactly 0."""
    si = StepIntegral.of(frame([{"pool": "p", "start": h(0), "end": h(2), "r": 0.1},
                                {"pool": "p", "start": h(1), "end": h(3), "r": 0.2}]), "pool", "start", "end", "r")
    assert si.integral(questions([("p", 4, 6)]), "t0", "t1", "x")["x"].to_list() == [0.0]


def test_weighted_precedence_charges_each_cause_the_price_of_its_own_time():
    """A free card's price is $1/h on [0, 4) and $3/h on [4, 8); quota wins [2, 6).

    Over [0, 8): quota's time costs 2 x $1 + 2 x $3 = $8 (x 3600 s = 28,800 in $-seconds per
    card-second); no cause: [0, 2) $2 + [6, 8) $6 = $8 -> 28,800. A time share would split $16 by
    4 h / 4 h as well, but over [0, 6): quota $8 (28,800), none $2 (7,200), not 4/6 and 2/6 of $10.
    """
    prices = StepIntegral.of(frame([{"pool": "p", "start": h(0), "end": h(4), "r": 1.0},
                                    {"pool": "p", "start": h(4), "end": h(8), "r": 3.0}]), "pool", "start", "end", "r")
    quota = Precedence.of(frame([{"pool": "p", "start": h(2), "end": h(6), "rank": 0}]), "pool", 1)
    got = WeightedPrecedence.of(quota, prices).weighted(questions([("p", 0, 8), ("p", 0, 6)]), "t0", "t1", "v")
    assert got.select("v0", "v1").rows() == [pytest.approx((28_800.0, 28_800.0)), pytest.approx((28_800.0, 7_200.0))]


def test_look_ups_fall_back_to_as_of_joins_for_centuries_of_microseconds():
    """600 keys whose intervals start between 1900 and 2250 need more than 62 bits for one
    (key code, microseconds) search integer: the same answers come from as-of joins. Key k
    covers one day from its start; asking [start + 6 h, start + 30 h) gives 18 h; a key
    without intervals gives 0."""
    first = datetime(1900, 1, 1, tzinfo=timezone.utc)
    starts = [first + timedelta(days=213 * k) for k in range(600)]  # the last is in 2249
    cov = Coverage.of(frame([{"pool": f"p{k:03d}", "start": s, "end": s + timedelta(days=1)}
                             for k, s in enumerate(starts)]), "pool")
    assert cov.line.search is None  # too wide for one Int64: the fallback is what is tested
    ks = [0, 321, 599]
    q = pl.DataFrame({"pool": [f"p{k:03d}" for k in ks] + ["nope"],
                      "t0": [starts[k] + timedelta(hours=6) for k in ks] + [starts[0]],
                      "t1": [starts[k] + timedelta(hours=30) for k in ks] + [starts[1]]}).with_columns(
        pl.col("t0", "t1").cast(TS))
    assert cov.covered(q, "t0", "t1")["covered_us"].to_list() == [18 * H, 18 * H, 18 * H, 0]


def test_coverage_finds_a_piece_starting_a_power_of_two_microseconds_after_the_first():
    """Pool a: [T0, T0 + 1 s) and [T0 + 2^22 us, T0 + 2^22 us + 1 s) (2^22 us = 4.194304 s): the
    timeline's times span exactly 2^22 us. Over [T0, T0 + 10 s): 1 s + 1 s = 2,000,000 us covered.
    The same intervals without a key (a Coverage over the whole fleet, as allocation's power rows
    without a pool use): 2,000,000 us too.

    Mutants (intervals._Timeline.of: the key width from the span less 1, 2^22 - 1 in 22 bits, so
    the second piece's key runs into the next code's and a question after it reads the first
    piece: 1,000,000 us; _Timeline.at: the code of a keyless question 1 instead of 0: 0 us).
    """
    step = timedelta(microseconds=1 << 22)
    rows = [{"pool": "a", "start": T0, "end": T0 + timedelta(seconds=1)},
            {"pool": "a", "start": T0 + step, "end": T0 + step + timedelta(seconds=1)}]
    q = pl.DataFrame({"pool": ["a"], "t0": [T0], "t1": [T0 + timedelta(seconds=10)]}).with_columns(
        pl.col("t0", "t1").cast(TS))
    assert Coverage.of(frame(rows), "pool").covered(q, "t0", "t1")["covered_us"].to_list() == [2_000_000]
    fleet = Coverage.of(frame(rows).drop("pool"), [])
    assert fleet.covered(q.drop("pool"), "t0", "t1")["covered_us"].to_list() == [2_000_000]


def test_weighted_precedence_without_keys_charges_each_cause_the_price_of_its_own_time():
    """The case above for the whole fleet, without a key: $1/h on [0, 4), $3/h on [4, 8), quota
    wins [2, 6). Over [0, 8): quota $8 (28,800 $-seconds per card-second), none $8 (28,800).

    Mutant (intervals._encode: the code table of a keyless frame saying code 1 while its rows
    carry code 0): WeightedPrecedence finds no breakpoint of either timeline, and both are 0.
    """
    prices = StepIntegral.of(frame([{"start": h(0), "end": h(4), "r": 1.0}, {"start": h(4), "end": h(8), "r": 3.0}]),
                             [], "start", "end", "r")
    quota = Precedence.of(frame([{"start": h(2), "end": h(6), "rank": 0}]), [], 1)
    q = pl.DataFrame({"t0": [h(0)], "t1": [h(8)]}).with_columns(pl.col("t0", "t1").cast(TS))
    got = WeightedPrecedence.of(quota, prices).weighted(q, "t0", "t1", "v")
    assert got.select("v0", "v1").rows() == [pytest.approx((28_800.0, 28_800.0))]


def test_holes_are_the_parts_of_each_window_no_interval_covers():
    """Window 0-24 h for pools a, b, c. a: [0,6) and [6,8) touching (no hole at 6), [9,11), and
    [10,30) reaching past the window: one hole 8-9. b: [2,4), [3,5) overlapping: holes 0-2 and
    5-24. c: no interval: one hole 0-24. d has an interval but no window: nothing. Keyless, a's
    and b's intervals together (b's lie inside a's 0-8): the hole 8-9 only."""
    f = frame([{"pool": "a", "start": h(0), "end": h(6)}, {"pool": "a", "start": h(6), "end": h(8)},
               {"pool": "a", "start": h(10), "end": h(30)}, {"pool": "a", "start": h(9), "end": h(11)},
               {"pool": "b", "start": h(2), "end": h(4)}, {"pool": "b", "start": h(3), "end": h(5)},
               {"pool": "d", "start": h(0), "end": h(1)}])
    w = pl.DataFrame({"pool": ["a", "b", "c"], "w0": [h(0)] * 3, "w1": [h(24)] * 3}).with_columns(
        pl.col("w0", "w1").cast(TS))
    got = holes(f, w, "pool")
    assert got.rows() == [("a", h(8), h(9)), ("b", h(0), h(2)), ("b", h(5), h(24)), ("c", h(0), h(24))]
    assert got.schema["g0"] == TS
    keyless = holes(f.filter(pl.col("pool") != "d").drop("pool"), w.head(1).drop("pool"), [])
    assert keyless.rows() == [(h(8), h(9))]


def test_islands_number_the_runs_of_overlapping_or_touching_intervals():
    """Key a: [0, 2) and [2, 3) touch (one run), [1, 2) lies inside them (same run), [5, 6) begins
    after every earlier end (3): a new run. Key b: [1, 2) starts its own run. Merged per run:
    a [0, 3), a [5, 6), b [1, 2)."""
    from cost_engine.intervals import islands

    f = pl.DataFrame({"k": ["a", "a", "a", "a", "b"], "s": [0, 1, 2, 5, 1], "e": [2, 2, 3, 6, 2]})
    runs = f.sort("k", "s").with_columns(islands("s", "e", ["k"]).alias("run"))
    merged = runs.group_by("k", "run", maintain_order=True).agg(pl.col("s").min(), pl.col("e").max())
    assert merged.select("k", "s", "e").rows() == [("a", 0, 3), ("a", 5, 6), ("b", 1, 2)]
