"""Tests named by the wrong formula (the mutant) each one kills (issue 25).

An earlier round of hand-made mutants of the engine survived the whole suite because the tests
stopped at the simplest shape: one day, one project per tenant, no cached tokens, rates inside
the period, no overlapping events on a held card. Each test here builds the shape that tells the
right formula from the wrong one, with every figure computed by hand in its docstring, and names
the mutant in its own name. `mutation/manual.toml` applies each mutant by hand and checks that
its test fails (`python mutation/run.py manual`; the results are in docs/testing.md).

Period: 2026-10-01 00:00Z to 2026-10-02 00:00Z (24 h) unless said otherwise.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl
import pytest

from cost_engine.contract import CATEGORIES
from cost_engine.engine import compute
from cost_engine.report import build_report
from tests.helpers import DAY0, make_bundle, make_config, ts

NO_POWER = {"name": "custom", "categories": [c for c in CATEGORIES if c != "power"]}
TWO_DAYS = {"start": datetime(2026, 10, 1, tzinfo=timezone.utc), "end": datetime(2026, 10, 3, tzinfo=timezone.utc)}


def report(bundle, **config):
    return build_report(compute(bundle, make_config(**config)))


def by(rep, table, key, value="cost"):
    return {r[key]: r[value] for r in rep[table]}


def reconciled(rep, expected_input):
    rc = rep["reconciliation"]
    assert rc["input_cost"] == pytest.approx(expected_input)
    assert rc["attributed"] + rc["idle"] + rc["unattributed"] == pytest.approx(expected_input)


def test_kills_a_shared_cards_hours_divided_by_the_share():
    """A1 and B1 each hold half of g0 (share 0.5) 00:00-01:00; g0 reports 100 % every minute from
    00:00 to 01:00. Each holder is allocated, covered and active 1 h x 0.5 = 0.5 GPU-h; the card
    as a whole 1.0 GPU-h.

    Mutant (engine.enrich_segments: capacity / eff instead of x eff): 1 h / 0.5 = 2.0 GPU-h
    covered and active for each holder, 4.0 for a card that has 1.0.
    """
    tele = [{"ts": DAY0 + timedelta(minutes=m), "gpu_id": "g0", "util_pct": 100.0} for m in range(61)]
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}], telemetry=tele,
                    allocations=[{"allocation_id": o, "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 1),
                                  "owner": o, "share": 0.5} for o in ("A1", "B1")])
    rep = report(b)
    for key in ("allocated_gpu_hours", "active_gpu_hours"):
        assert by(rep, "by_project", "project", key) == {"A1": pytest.approx(0.5), "B1": pytest.approx(0.5)}
    assert rep["totals"]["active_gpu_hours"] == pytest.approx(1.0)
    assert rep["totals"]["telemetry_coverage"] == pytest.approx(1.0)


def test_kills_a_sample_at_a_cards_service_end_taken_as_a_busy_sibling():
    """Job j1 holds g0 00:00-01:00 (a0) and g1 00:00-01:01 (a1); g0 leaves service at 01:00. g0
    reports 100 % every minute 00:00-01:00 (the 01:00 sample lies at its service end, in no
    interval of the ledger), g1 0 % every minute 00:00-01:01. g1 is idle while its sibling g0 is
    busy from 00:00 to 01:00: 1.0 GPU-h oversized request; in the minute 01:00-01:01 no sibling
    is busy: 1/60 GPU-h underutilized. g1's free time: 24 h - 61 min = 22.983333 GPU-h no demand.

    Mutant (activity.pieces: pieces of 0 s kept, `ov_s >= 0`): g0's 01:00 sample keeps a piece of
    0 s on its last interval, busy in minute 01:00, so g1's last minute is oversized too: 1.016667
    GPU-h oversized, 0 underutilized.
    """
    m = timedelta(minutes=1)
    tele = ([{"ts": DAY0 + i * m, "gpu_id": "g0", "util_pct": 100.0} for i in range(61)]
            + [{"ts": DAY0 + i * m, "gpu_id": "g1", "util_pct": 0.0} for i in range(62)])
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p", "in_service_end": DAY0 + 60 * m},
                               {"gpu_id": "g1", "pool": "p"}],
                    allocations=[{"allocation_id": "a0", "gpu_id": "g0", "start": DAY0, "end": DAY0 + 60 * m,
                                  "owner": "A1", "job_id": "j1"},
                                 {"allocation_id": "a1", "gpu_id": "g1", "start": DAY0, "end": DAY0 + 61 * m,
                                  "owner": "A1", "job_id": "j1"}],
                    telemetry=tele)
    rows = report(b)["idle"]
    assert [(r["kind"], r["cause"], r["gpu_hours"]) for r in rows] == [
        ("unallocated", "no_demand", pytest.approx(24 - 61 / 60)),
        ("allocated", "oversized_request", pytest.approx(1.0)),
        ("allocated", "underutilized", pytest.approx(1 / 60))]


def test_kills_a_tenant_share_not_divided_over_its_projects():
    """$100 software by fixed shares A 0.75, B 0.25; tenant A has two projects with usage (A1, A2),
    B one (B1). A's 0.75 is split evenly: A1 0.375, A2 0.375, B1 0.25 -> $37.50, $37.50, $25.

    Mutant (A's share given whole to each of its projects): 0.75 + 0.75 + 0.25 = 1.75 normalised
    -> A 1.5 / 1.75 = $85.71, B $14.29.
    """
    b = make_bundle(
        inventory=[{"gpu_id": f"g{i}", "pool": "p"} for i in range(3)],
        allocations=[{"allocation_id": p, "gpu_id": f"g{i}", "start": ts(1, 0), "end": ts(1, 6), "owner": p}
                     for i, p in enumerate(("A1", "A2", "B1"))],
        owners=[{"tenant": "A", "project": "A1"}, {"tenant": "A", "project": "A2"}, {"tenant": "B", "project": "B1"}],
        costs=[{"cost_id": "sw", "category": "software", "amount": 100.0, "driver": "shares",
                "start": ts(1, 0), "end": ts(2, 0)}],
    )
    rep = report(b, allocation={"shares": {"A": 0.75, "B": 0.25}})
    assert by(rep, "by_project", "project") == pytest.approx({"A1": 37.5, "A2": 37.5, "B1": 25.0})
    assert by(rep, "by_tenant", "tenant") == pytest.approx({"A": 75.0, "B": 25.0})
    reconciled(rep, 100.0)


def test_kills_a_direct_cost_spread_evenly_per_day_instead_of_by_time():
    """Period 2026-10-01 .. 10-03 in Europe/Berlin (UTC+2 in October: 09-30 22:00Z .. 10-02 22:00Z).

    A direct cost of A1, $24 from 10-01 00:00Z to 10-02 00:00Z = 02:00 Oct 1 to 02:00 Oct 2 in
    Berlin: 22 h fall on Oct 1 and 2 h on Oct 2, so the daily trend shows $22 and $2.
    Mutant (each local day the span touches gets an equal part): $12 and $12.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 1), "owner": "A1"}],
        costs=[{"cost_id": "d", "category": "other", "amount": 24.0, "owner": "A1", "start": ts(1, 0), "end": ts(2, 0)}],
    )
    period = {"start": datetime(2026, 9, 30, 22, tzinfo=timezone.utc), "end": datetime(2026, 10, 2, 22, tzinfo=timezone.utc),
              "timezone": "Europe/Berlin"}
    rep = report(b, period=period)
    assert [(t["day"], t["cost"]) for t in rep["trend"]] == [("2026-10-01", pytest.approx(22.0)),
                                                             ("2026-10-02", pytest.approx(2.0))]
    assert by(rep, "by_project", "project") == pytest.approx({"A1": 24.0})
    reconciled(rep, 24.0)


def test_kills_a_rate_or_cost_that_starts_before_the_period_not_clipped_to_it():
    """One card g0 in pool p; A holds it 00:00-06:00.

    A rate of $2 per card-hour from 09-30 12:00 to 10-01 12:00: 12 h inside the period -> $24.
    A depreciation row of $72 from 09-30 00:00 to 10-03 00:00 (72 h): 24 h inside -> $24, spread
    by capacity_hours over the card's 24 card-hours = $1 per card-hour.
    A: 6 h x ($2 + $1) = $18. Idle: 06-12 at $3 = $18, 12-24 at $1 = $12, $30. Input $48.

    Mutants: the rate's start not clipped to the period (priced over 24 h of window from the
    day before, or nothing), the cost row's start not clipped (its in-period amount becomes
    72 x 48/72 = $48 instead of $24).
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 6), "owner": "A"}],
        rates=[{"pool": "p", "price_per_gpu_hour": 2.0, "start": ts(30, 12), "end": ts(1, 12)}],
        costs=[{"cost_id": "dep", "category": "depreciation", "amount": 72.0, "start": ts(30, 0),
                "end": "2026-10-03T00:00:00Z"}],
    )
    rep = report(b)
    assert by(rep, "by_project", "project") == pytest.approx({"A": 18.0})
    assert rep["reconciliation"]["idle"] == pytest.approx(30.0)
    assert {r["cause"]: r["cost"] for r in rep["idle"] if r["kind"] == "unallocated"} == pytest.approx({"no_demand": 30.0})
    reconciled(rep, 48.0)


def test_kills_proportional_idle_normalised_per_pool_and_day():
    """Two days (10-01 .. 10-03), one card g0 in pool p, $96 depreciation over both days:
    48 card-hours -> $1 per card-hour. A1 holds 10-01 00-12 (12 h), B1 holds 10-02 00-06 (6 h).
    Spread: A1 $12, B1 $6, idle $78. Proportional over the period by allocated hours 12 : 6:
    A1 12 + 78 x 12/18 = $64, B1 6 + 78 x 6/18 = $32; idle $0; attributed $96 = input.

    Mutant (weights normalised per pool and day): each day's holder takes the whole $78 -> A1
    $90, B1 $84: $174 attributed against $96 of input ($78 created).
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 12), "owner": "A1"},
                     {"allocation_id": "b", "gpu_id": "g0", "start": ts(2, 0), "end": ts(2, 6), "owner": "B1"}],
        costs=[{"cost_id": "dep", "category": "depreciation", "amount": 96.0, "start": ts(1, 0),
                "end": "2026-10-03T00:00:00Z"}],
    )
    rep = report(b, period=TWO_DAYS, allocation={"idle": "proportional"})
    assert by(rep, "by_project", "project") == pytest.approx({"A1": 64.0, "B1": 32.0})
    assert rep["reconciliation"]["idle"] == pytest.approx(0.0)
    assert rep["reconciliation"]["attributed"] == pytest.approx(96.0)
    reconciled(rep, 96.0)


def test_kills_cached_tokens_weighted_as_uncached_in_the_tokens_driver():
    """$100 other by tokens. A1 sends 1,000 uncached input tokens (weight 1: 1,000); B1 sends
    10,000 cached input tokens (weight 0.1: 1,000). Weighted 1,000 : 1,000 -> $50 / $50.

    Mutant (cached tokens at the uncached weight): 1,000 : 10,000 -> A $9.09, B $90.91.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 1), "owner": "A1"}],
        owners=[{"tenant": "A", "project": "A1"}, {"tenant": "B", "project": "B1"}],
        requests=[{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 1000,
                   "output_tokens": 0},
                  {"request_id": "r2", "ts": ts(1, 2), "owner": "B1", "model": "m", "input_tokens": 0,
                   "cached_input_tokens": 10000, "output_tokens": 0}],
        costs=[{"cost_id": "t", "category": "other", "amount": 100.0, "driver": "tokens",
                "start": ts(1, 0), "end": ts(2, 0)}],
    )
    rep = report(b, boundary=NO_POWER)
    assert by(rep, "by_tenant", "tenant") == pytest.approx({"A": 50.0, "B": 50.0})
    reconciled(rep, 100.0)


def inactive_card(events, hours=4):
    """One card g0 (node n0, pool p) held by A1 00:00-04:00 at util 0 (every 30 min, 300 W);
    $24 depreciation over its 24 card-hours = $1 per card-hour."""
    return make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p", "node": "n0"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, hours), "owner": "A1"}],
        telemetry=[{"ts": ts(1, h / 2), "gpu_id": "g0", "util_pct": 0.0, "power_w": 300.0} for h in range(2 * hours)],
        events=events,
        owners=[{"tenant": "A", "project": "A1"}],
        costs=[{"cost_id": "dep", "category": "depreciation", "amount": 24.0, "start": ts(1, 0), "end": ts(2, 0)}],
    )


def test_kills_a_wrong_precedence_of_events_on_a_held_card():
    """The held card of inactive_card is idle 00-04 under overlapping events: data_loading on g0
    00-03, network_bottleneck on pool p 01-02, degraded_hardware on node n0 00-04. First match
    in the order network, storage, data_loading, degraded:
      00-01 data_loading (beats degraded), 01-02 network (the pool's event beats the card's),
      02-03 data_loading, 03-04 degraded -> network 1 h, data_loading 2 h, degraded 1 h, nothing
      underutilized; at $1 per card-hour each hour costs $1.

    Mutants: the order of the held causes changed (e.g. degraded before data_loading: degraded
    4 h... ), or the card's and the pool's timelines combined by min instead of max (the pool's
    network hour lost to data_loading).
    """
    b = inactive_card([
        {"start": ts(1, 0), "end": ts(1, 3), "kind": "data_loading", "gpu_id": "g0"},
        {"start": ts(1, 1), "end": ts(1, 2), "kind": "network_bottleneck", "pool": "p"},
        {"start": ts(1, 0), "end": ts(1, 4), "kind": "degraded_hardware", "node": "n0"},
    ])
    rep = report(b, activity={"max_sample_gap_s": 1800}, boundary=NO_POWER)
    held = {r["cause"]: (r["gpu_hours"], r["cost"]) for r in rep["idle"] if r["kind"] == "allocated"}
    assert held == {"network_bottleneck": pytest.approx((1.0, 1.0)), "data_loading": pytest.approx((2.0, 2.0)),
                    "degraded_hardware": pytest.approx((1.0, 1.0))}


def test_kills_the_oversized_cause_lost_in_weighted_activity_mode():
    """Weighted mode; job j1 holds g0 and g1 00:00-04:00, samples every 30 min at 200 W.
    g0 runs at 25 % throughout; g1 at 100 % 00-02 and 0 % 02-04.
    Inactive (1 - util) time: g0 4 x 0.75 = 3 h, g1 2 h (02-04).
      g0 00-02: 2 x 0.75 = 1.5 h idle while g1 worked -> oversized_request;
      g0 02-04: 1.5 h idle while g1 was idle too -> underutilized;
      g1 02-04: 2 h idle while g0 did some work (25 %) -> oversized_request.
    oversized 3.5 h, underutilized 1.5 h. Energy: 200 W = 0.2 kWh per hour; idle joules are the
    inactive fraction's: oversized 0.2 x (1.5 + 2) = 0.7 kWh, underutilized 0.2 x 1.5 = 0.3 kWh.
    Active hours: g0 1 h + g1 2 h = 3 h.

    Mutants: a partly busy sample never counted as idle beside a busy sibling (busy == 0 instead
    of busy < 1: oversized 2 h), or its whole time counted as idle (oversized 4 h).
    """
    def util(card, h):
        return 25.0 if card == "g0" else (100.0 if h < 2 else 0.0)

    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p", "node": "n0"}, {"gpu_id": "g1", "pool": "p", "node": "n1"}],
        allocations=[{"allocation_id": f"a-{g}", "gpu_id": g, "start": ts(1, 0), "end": ts(1, 4), "owner": "A1",
                      "job_id": "j1"} for g in ("g0", "g1")],
        telemetry=[{"ts": ts(1, h / 2), "gpu_id": g, "util_pct": util(g, h / 2), "power_w": 200.0}
                   for g in ("g0", "g1") for h in range(8)],
        owners=[{"tenant": "A", "project": "A1"}],
    )
    rep = report(b, activity={"mode": "weighted", "max_sample_gap_s": 1800}, boundary=NO_POWER)
    held = {r["cause"]: (r["gpu_hours"], r["energy_kwh_gpu"]) for r in rep["idle"] if r["kind"] == "allocated"}
    assert held == {"oversized_request": pytest.approx((3.5, 0.7)), "underutilized": pytest.approx((1.5, 0.3))}
    assert rep["totals"]["active_gpu_hours"] == pytest.approx(3.0)


def test_kills_a_zero_counter_delta_taken_for_a_missing_counter():
    """g0 held by A1 00:00-03:00, hourly samples (max gap 1 h) at 40 W with an energy counter
    reading 5,000 J at 00:00, 5,000 J at 01:00 (no energy drawn: the counter did not move),
    365,000 J at 02:00 and 725,000 J at 03:00. The counter's deltas are trusted when >= 0 (40 W
    is under the low-side test's 50 W floor, power_limits, and 100 W is under 4 x 40 W):
    00-01 0 J, 01-02 360,000 J = 0.1 kWh, 02-03 0.1 kWh -> A1 0.2 kWh of GPU energy.

    Mutant (a zero delta treated like a missing one, power x time): 00-01 40 W x 1 h = 0.04 kWh
    -> 0.24 kWh. (At 400 W the still counter is not believed at all: test_energy_plausible.)
    """
    rep = report(still_counter(), activity={"max_sample_gap_s": 3600})
    assert by(rep, "by_project", "project", "energy_kwh_gpu") == pytest.approx({"A1": 0.2})


def still_counter():
    return make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 3), "owner": "A1"}],
        telemetry=[{"ts": ts(1, h), "gpu_id": "g0", "util_pct": 50.0, "power_w": 40.0, "energy_j": e}
                   for h, e in enumerate((5000.0, 5000.0, 365000.0, 725000.0))],
        owners=[{"tenant": "A", "project": "A1"}],
    )


# ---------------------------------------------------------------- survivors of `make mutate`: tariffs.py


def carbon_bundle(tariffs, owners=(("A1", 0, 6), ("B1", 6, 12))):
    """g0 drawing 1 kW 00:00-12:00 (hourly samples, max gap 1 h), held by the given projects.
    GPU energy 1 kWh per hour; facility energy x 1.3 x 1.2 = 1.56 kWh per hour."""
    return make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": p, "gpu_id": "g0", "start": ts(1, a), "end": ts(1, b), "owner": p}
                     for p, a, b in owners],
        telemetry=[{"ts": ts(1, h), "gpu_id": "g0", "util_pct": 50.0, "power_w": 1000.0} for h in range(12)],
        tariffs=tariffs,
    )


def test_kills_the_carbon_of_a_tariff_carried_past_its_end():
    """A tariff 00:00-06:00 with 400 g/kWh, none after: A1 (00-06) draws 6 x 1.56 = 9.36 facility
    kWh x 400 g = 3.744 kg; B1 (06-12) draws with no known intensity: its carbon is unknown.

    Mutant (tariffs.Bands.of: a tariff still in force at its own end, `end >= t0`): the band from
    06:00 takes the ended tariff's 400 g/kWh, and B1 gets 3.744 kg too.
    """
    rep = report(carbon_bundle([{"start": ts(1, 0), "end": ts(1, 6), "price_per_kwh": 0.2, "carbon_g_per_kwh": 400.0}]),
                 activity={"max_sample_gap_s": 3600})
    assert by(rep, "by_project", "project", "carbon_kg") == {"A1": pytest.approx(3.744), "B1": None}


def test_kills_carbon_known_without_any_tariff():
    """No tariff at all: no carbon intensity is known, so CO2e is unknown (null), not 0 kg.

    Mutant (tariffs.Bands.carbon_known without edges answering True): 0 kg.
    """
    rep = report(carbon_bundle([]), activity={"max_sample_gap_s": 3600})
    assert rep["totals"]["carbon_kg"] is None
    assert by(rep, "by_project", "project", "carbon_kg") == {"A1": None, "B1": None}


def test_kills_carbon_known_reaching_into_the_next_band():
    """A tariff 06:00-12:00 with 500 g/kWh, none before: B1 (06-12) 6 x 1.56 x 500 g = 4.68 kg; A1's
    segment ends exactly at 06:00, where the tariff starts, so its carbon stays unknown.

    Mutant (the band of a segment's last instant looked up at t1 + 1 us instead of t1 - 1 us): A1's
    segment seems to reach the tariff and shows 0 kg.
    """
    rep = report(carbon_bundle([{"start": ts(1, 6), "end": ts(1, 12), "price_per_kwh": 0.2, "carbon_g_per_kwh": 500.0}]),
                 activity={"max_sample_gap_s": 3600})
    assert by(rep, "by_project", "project", "carbon_kg") == {"A1": None, "B1": pytest.approx(4.68)}


# ---------------------------------------------------------------- survivors of `make mutate`: allocation.py


def gaps(rep, what):
    return [g["detail"] for g in rep["gaps"] if g["what"] == what]


def test_kills_costs_outside_the_period_not_named_in_the_gaps():
    """A $30 row for 10-05 lies wholly outside the period (10-01): it counts $0 and a gap names it;
    a $24 depreciation row inside the period spreads over the card's 24 card-hours, all idle.
    Without a row outside, no such gap.

    Mutant (`if not outside.height`): the gap appears only when no row is outside (saying 0 rows).
    """
    inside = {"cost_id": "dep", "category": "depreciation", "amount": 24.0, "start": ts(1, 0), "end": ts(2, 0)}
    outside = {"cost_id": "late", "category": "network", "amount": 30.0, "start": ts(5, 0), "end": ts(6, 0)}
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}], allocations=[], costs=[inside, outside])
    rep = report(b)
    assert gaps(rep, "costs outside the period") == ["1 cost rows lie outside the period and count 0: late"]
    reconciled(rep, 24.0)
    assert rep["reconciliation"]["idle"] == pytest.approx(24.0)
    rep = report(make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}], allocations=[], costs=[inside]))
    assert gaps(rep, "costs outside the period") == []


def test_kills_a_cost_not_spread_gap_that_names_the_wrong_driver():
    """A $50 network row of pool p spread by gpu_hours while nothing is held in p: no driver
    quantity in its span, so it is kept whole in idle ($50) and the gap names the row, its driver
    and its pool.

    Mutant (the gap's driver taken from the pool column): "no p in p".
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}], allocations=[],
                    costs=[{"cost_id": "net", "category": "network", "amount": 50.0, "pool": "p", "driver": "gpu_hours",
                            "start": ts(1, 0), "end": ts(2, 0)}])
    rep = report(b)
    assert gaps(rep, "cost not spread") == ["cost net: no gpu_hours in p during its span; kept as idle"]
    assert rep["reconciliation"]["idle"] == pytest.approx(50.0)
    reconciled(rep, 50.0)


def test_kills_the_last_band_of_a_segment_looked_up_two_microseconds_early():
    """A tariff 06:00-12:00 with 500 g/kWh, none before. A1 holds g0 from 00:00 to 06:00:00.000001,
    B1 from then to 12:00. A1's last segment reaches 1 us into the tariff, so a carbon intensity is
    known for it: A1's CO2e is a number, 1.56 kW x 1 us x 500 g/kWh = 2.2e-10 kg (0 to any
    tolerance), not unknown. B1: (6 h - 1 us) x 1.56 kW x 500 g = 4.68 kg.

    Mutant (tariffs._US = 2 us: a segment's last band looked up at t1 - 2 us): A1's segment seems
    to end before the tariff, and its CO2e turns unknown (None).
    """
    edge = "2026-10-01T06:00:00.000001Z"
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "A1", "gpu_id": "g0", "start": ts(1, 0), "end": edge, "owner": "A1"},
                     {"allocation_id": "B1", "gpu_id": "g0", "start": edge, "end": ts(1, 12), "owner": "B1"}],
        telemetry=[{"ts": ts(1, h), "gpu_id": "g0", "util_pct": 50.0, "power_w": 1000.0} for h in range(12)],
        tariffs=[{"start": ts(1, 6), "end": ts(1, 12), "price_per_kwh": 0.2, "carbon_g_per_kwh": 500.0}],
    )
    carbon = by(report(b, activity={"max_sample_gap_s": 3600}), "by_project", "project", "carbon_kg")
    assert carbon == {"A1": pytest.approx(0.0, abs=1e-9), "B1": pytest.approx(4.68)}


# ---------------------------------------------------------------- survivors of `make mutate`: idle.py


def test_kills_a_quota_peak_that_subtracts_capacity_over_share_at_an_allocation_end():
    """Tenant A (quota 4 cards in pool p): A1 holds half of g0 (share 0.5) 00:00-01:00, then whole
    g1 and g2 02:00-03:00. Held capacity: 0.5 until 01:00, 0 until 02:00, 2 until 03:00, so the
    peak is 2 cards (peak quota use 2 / 4 = 0.5) and the average (0.5 x 1 h + 2 x 1 h) / 24 h
    = 0.104167 cards (avg quota use 0.026042).

    Mutant (idle.quota_use: a held segment's end steps down by capacity / share, 1 / 0.5 = 2,
    instead of capacity x share = 0.5): the level falls to -1.5 at 01:00 and reaches only 0.5 at
    02:00, so the peak shows 0.5 cards.
    """
    b = make_bundle(
        inventory=[{"gpu_id": f"g{i}", "pool": "p"} for i in range(3)],
        allocations=[{"allocation_id": "half", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 1), "owner": "A1",
                      "share": 0.5}]
        + [{"allocation_id": f"w{i}", "gpu_id": f"g{i}", "start": ts(1, 2), "end": ts(1, 3), "owner": "A1"}
           for i in (1, 2)],
        owners=[{"tenant": "A", "project": "A1"}],
        quotas=[{"tenant": "A", "pool": "p", "gpus": 4}],
    )
    (row,) = report(b)["quotas"]["rows"]
    assert (row["tenant"], row["pool"], row["quota"]) == ("A", "p", 4.0)
    assert row["peak_allocated"] == pytest.approx(2.0)
    assert row["peak_quota_use"] == pytest.approx(0.5)
    assert row["avg_allocated"] == pytest.approx(2.5 / 24)
    assert row["avg_quota_use"] == pytest.approx(2.5 / 24 / 4)



def test_kills_a_quota_of_one_card_with_no_use_figure():
    """Tenant A has a quota of 1 card in pool p; A1 holds g0 06:00-18:00. Peak held capacity 1
    card: peak quota use 1 / 1 = 1.0; average 12 h / 24 h = 0.5 cards: average use 0.5 / 1 = 0.5.

    Mutant (idle.quota_use: a use figure only where the quota is above 1, not above 0): both uses
    of a one-card quota are null.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 6), "end": ts(1, 18), "owner": "A1"}],
        owners=[{"tenant": "A", "project": "A1"}],
        quotas=[{"tenant": "A", "pool": "p", "gpus": 1}],
    )
    (row,) = report(b)["quotas"]["rows"]
    assert (row["tenant"], row["pool"], row["quota"]) == ("A", "p", 1.0)
    assert row["peak_quota_use"] == pytest.approx(1.0)
    assert row["avg_quota_use"] == pytest.approx(0.5)



def test_kills_a_quota_of_zero_cards_with_an_infinite_use():
    """Tenant A has a quota of 0 cards in pool p and its project A1 holds g0 06:00-18:00 all the
    same: peak 1 card, average 12 h / 24 h = 0.5 cards. A use of a zero quota has no value (no
    ratio to a quota of nothing): both uses are null, never infinite, in the report and already
    in the engine's quota table (the report's guard against non-finite numbers is the last one,
    not where the rule lives).

    Mutant (idle.quota_use: the average use taken where the quota is `>= 0`, not `> 0`): 0.5 / 0
    gives an infinite average use in the table (which the report then prints as null).
    """
    from cost_engine.report import quota_table

    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 6), "end": ts(1, 18), "owner": "A1"}],
        owners=[{"tenant": "A", "project": "A1"}],
        quotas=[{"tenant": "A", "pool": "p", "gpus": 0}],
    )
    (row,) = report(b)["quotas"]["rows"]
    assert (row["tenant"], row["pool"], row["quota"]) == ("A", "p", 0.0)
    assert (row["peak_allocated"], row["avg_allocated"]) == (pytest.approx(1.0), pytest.approx(0.5))
    assert (row["peak_quota_use"], row["avg_quota_use"]) == (None, None)
    table = quota_table(compute(b, make_config()))
    assert table.select("peak_quota_use", "avg_quota_use").rows() == [(None, None)]


def test_kills_an_owner_without_a_tenant_given_a_quota_row():
    """Tenant A has a quota of 2 cards in pool p; its project A1 holds g0 06:00-18:00. Owner X9,
    which the owners table does not map to a tenant, holds g1 00:00-12:00. Quotas are per tenant:
    the table has A's row only, peak 1 card (peak use 1 / 2 = 0.5), average 12 h / 24 h = 0.5
    cards (average use 0.25); X9's time is no tenant's.

    Mutant (idle.quota_use: held segments taken when they have an allocation *or* a tenant):
    X9's segments come in under a tenant of null, rows without a tenant appear.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}, {"gpu_id": "g1", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 6), "end": ts(1, 18), "owner": "A1"},
                     {"allocation_id": "x", "gpu_id": "g1", "start": ts(1, 0), "end": ts(1, 12), "owner": "X9"}],
        owners=[{"tenant": "A", "project": "A1"}],
        quotas=[{"tenant": "A", "pool": "p", "gpus": 2}],
    )
    rows = report(b)["quotas"]["rows"]
    assert [(r["tenant"], r["pool"], r["quota"], r["peak_allocated"], r["avg_allocated"], r["peak_quota_use"],
             r["avg_quota_use"]) for r in rows] == [("A", "p", 2.0, 1.0, 0.5, 0.5, 0.25)]


def test_kills_a_tenant_without_a_quota_shown_under_no_name_in_the_quota_table():
    """Tenant A has a quota of 2 cards in pool p and holds nothing; tenant B has no quota and its
    project B1 holds g0 06:00-18:00. The quota table has a row per tenant and pool with a quota or
    a use: A (quota 2, peak 0, average 0: uses 0.0 and 0.0) and B (no quota, so no use ratios;
    peak 1 card, average 12 h / 24 h = 0.5 cards).

    Mutant (idle.quota_use: the quotas joined to the use without coalescing the keys): B's row
    keeps its figures but loses its tenant and pool (null), as it has no quota row to take them
    from.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "b", "gpu_id": "g0", "start": ts(1, 6), "end": ts(1, 18), "owner": "B1"}],
        owners=[{"tenant": "A", "project": "A1"}, {"tenant": "B", "project": "B1"}],
        quotas=[{"tenant": "A", "pool": "p", "gpus": 2}],
    )
    rows = report(b)["quotas"]["rows"]
    assert [(r["tenant"], r["pool"], r["quota"], r["peak_allocated"], r["avg_allocated"], r["peak_quota_use"],
             r["avg_quota_use"]) for r in rows] == [
        ("A", "p", 2.0, 0.0, 0.0, 0.0, 0.0),
        ("B", "p", None, pytest.approx(1.0), pytest.approx(0.5), None, None),
    ]


def test_kills_idle_causes_listed_allocated_first():
    """Pool p, $1/h on g0; A1 holds g0 00:00-20:00 and g0 reports 0 % every 5 minutes over that
    time: 20 GPU-h held but inactive, underutilized, $20; the free 4 h are no demand, $4. The idle
    table lists unallocated causes first, then allocated ones, each kind by cost (highest first):
    no demand ($4) before underutilized ($20).

    Mutant (idle.by_cause: the kinds sorted ascending): underutilized first.
    """
    tele = [{"ts": DAY0 + timedelta(minutes=5 * i), "gpu_id": "g0", "util_pct": 0.0} for i in range(240)]
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 20),
                                  "owner": "A1"}],
                    rates=[{"pool": "p", "price_per_gpu_hour": 1.0}], telemetry=tele)
    rows = report(b)["idle"]
    assert [(r["kind"], r["cause"], r["gpu_hours"], r["cost"]) for r in rows] == [
        ("unallocated", "no_demand", pytest.approx(4.0), pytest.approx(4.0)),
        ("allocated", "underutilized", pytest.approx(20.0), pytest.approx(20.0))]


def test_kills_idle_causes_of_one_kind_listed_cheapest_first_or_ties_in_reverse_name_order():
    """Pool p, $1/h on g0, nothing allocated over the day: 24 GPU-h free. Maintenance holds the
    pool 00:00-06:00 (6 h, $6), degraded hardware 06:00-12:00 (6 h, $6), the other 12 h are no
    demand ($12). One kind (unallocated), listed by cost, highest first, ties by cause name:
    no_demand $12, then degraded_hardware $6 before maintenance $6.

    Mutants (idle.by_cause: the cost sorted ascending; the causes of equal cost sorted in reverse
    name order): degraded_hardware, maintenance, no_demand; or maintenance before degraded_hardware.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}], rates=[{"pool": "p", "price_per_gpu_hour": 1.0}],
                    events=[{"start": ts(1, 0), "end": ts(1, 6), "pool": "p", "kind": "maintenance"},
                            {"start": ts(1, 6), "end": ts(1, 12), "pool": "p", "kind": "degraded_hardware"}])
    rows = report(b)["idle"]
    assert [(r["kind"], r["cause"], r["gpu_hours"], r["cost"]) for r in rows] == [
        ("unallocated", "no_demand", pytest.approx(12.0), pytest.approx(12.0)),
        ("unallocated", "degraded_hardware", pytest.approx(6.0), pytest.approx(6.0)),
        ("unallocated", "maintenance", pytest.approx(6.0), pytest.approx(6.0))]


def test_kills_underutilized_time_at_zero_watts_given_a_joule():
    """A1 holds g0 00:00-01:00; g0 reports 0 % and 0 W every 5 minutes over that hour: 1 GPU-h
    held but inactive (underutilized), and it drew 0 J: its energy is a known 0 kWh, not a trace.

    Mutant (idle.classify: the underutilized joules clipped below at 1 J, not 0 J): 1 J = 2.8e-7
    kWh of underutilized energy that nothing drew.
    """
    tele = [{"ts": DAY0 + timedelta(minutes=5 * i), "gpu_id": "g0", "util_pct": 0.0, "power_w": 0.0}
            for i in range(12)]
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 1),
                                  "owner": "A1"}],
                    telemetry=tele)
    rows = {(r["kind"], r["cause"]): r for r in report(b)["idle"]}
    under = rows[("allocated", "underutilized")]
    assert under["gpu_hours"] == pytest.approx(1.0)
    assert under["energy_kwh_gpu"] == 0.0


def test_kills_top_offenders_listed_by_fewest_hours_or_ties_in_reverse():
    """Pool p: g0 free all day (24 h of no demand), g1 and g2 each held 00:00-12:00 by A1 and free
    after (12 h each). The backlog's no-demand row names its top offenders by idle hours, highest
    first, ties by name: g0 (24 h), g1, g2 (12 h each); 48 GPU-h in all.

    Mutants (idle.backlog: offenders sorted by hours ascending, or ties by name descending): g1
    or g2 first, or g2 before g1.
    """
    b = make_bundle(inventory=[{"gpu_id": g, "pool": "p"} for g in ("g0", "g1", "g2")],
                    allocations=[{"allocation_id": f"a{g}", "gpu_id": g, "start": ts(1, 0), "end": ts(1, 12),
                                  "owner": "A1"} for g in ("g1", "g2")])
    (row,) = [r for r in report(b)["idle_backlog"] if r["cause"] == "no_demand"]
    assert row["gpu_hours"] == pytest.approx(48.0)
    assert row["top_offenders"] == ["g0", "g1", "g2"]


def test_kills_a_backlog_naming_six_top_offenders():
    """Pool p with six cards, g0 to g5, all free all day: 144 GPU-h of no demand. The backlog names
    the five top offenders, ties by name: g0 to g4.

    Mutant (idle.backlog: six top offenders by default): g5 too.
    """
    b = make_bundle(inventory=[{"gpu_id": f"g{i}", "pool": "p"} for i in range(6)])
    (row,) = [r for r in report(b)["idle_backlog"] if r["cause"] == "no_demand"]
    assert row["gpu_hours"] == pytest.approx(144.0)
    assert row["top_offenders"] == ["g0", "g1", "g2", "g3", "g4"]


def test_kills_an_event_on_a_busy_held_card_named_as_an_idle_cause():
    """A1 holds g0 00:00-01:00; g0 reports every minute from 00:00 to 01:00 at 90 % and 200 W, so
    it is active the whole hour; a data_loading event lies on g0 00:10-00:20. Nothing of the held
    hour is idle, so no allocated idle cause shows. The one idle row is the free rest of the day,
    no demand: 23 GPU-h, and the energy of the 01:00 sample (200 W x 300 s, the gap cap = 60,000 J
    = 0.016667 kWh), priced at the default $0.12 x 1.3 (server overhead) x 1.2 (PUE): $0.00312.

    Mutant (idle.classify: held segments kept when inactive for `>= 0` h, not `> 0`): the event's
    segment becomes a data_loading cause of 0 GPU-h, a row of its own in the idle table.
    """
    tele = [{"ts": DAY0 + timedelta(minutes=m), "gpu_id": "g0", "util_pct": 90.0, "power_w": 200.0}
            for m in range(61)]
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 1), "owner": "A1"}],
        telemetry=tele,
        events=[{"kind": "data_loading", "gpu_id": "g0", "start": ts(1, 10 / 60), "end": ts(1, 20 / 60)}],
    )
    rows = report(b)["idle"]
    assert [(r["kind"], r["cause"]) for r in rows] == [("unallocated", "no_demand")]
    assert rows[0]["gpu_hours"] == pytest.approx(23.0)
    assert rows[0]["energy_kwh_gpu"] == pytest.approx(60_000 / 3.6e6)
    assert rows[0]["cost"] == pytest.approx(60_000 / 3.6e6 * 1.3 * 1.2 * 0.12)


def test_kills_recharge_and_model_figures_that_take_the_wrong_rows():
    """Pool p, rate $1/h on 3 cards all day: $72 of input (power left out of the boundary).
    - SVC serves model m1 on g0 00:00-10:00 ($10) and m2 on g1 00:00-06:00 ($6), both inference;
    - A1 fine-tunes m1 on g2 00:00-04:00 ($4, workload training);
    - B1 sends the only request: m1 at 01:00, 100 input and 100 output tokens, one attempt,
      prefill 300 ms and decode 700 ms, within the SLO;
    - g1 reports every 5 min 00:00-00:25 at 100 %: 0.5 h covered and active (the last sample
      stands for 300 s, the gap cap).
    Token weights input 0, cached 0, output 1, split by phase time.

    Recharge: m1's $10 moves to B1; m2 has no requests, so SVC keeps its $6; A1 keeps its $4:
    B1 $10, SVC $6, A1 $4, idle 72 - 20 = $52. By model (before recharge, serving rows only): m1
    $10, m2 $6. m1: input share 300 / 1,000 = 0.3, no cached tokens, so uncached input costs
    10 x 0.3 / 100 x 1e6 = $30,000 per M; SLO attainment 1/1, retry share 0/1 = 0; active hours
    unknown (no telemetry on g0). m2: no requests, so SLO attainment and retry share are unknown
    (null, not NaN); active 0.5 GPU-hours. No "model without serving allocations" gap. Model
    trend of m1 on 10-01: $10 (the fine-tuning is not serving).

    Mutants killed, all in tokens.py:
    - recharge, `inference | (served & not idle)`: m2's rows are moved onto no caller (lost: SVC
      $0) and A1's fine-tuning of m1 is moved to B1 ($14);
    - model_table, `weights_in >= 0`: cached part 0/0 = NaN, uncached input $/M NaN;
    - model_table, SLO attainment where `requests >= 0`: m2 0/0 = NaN;
    - model_table, retry share where `requests > 1`: m1's one request gives null, not 0;
    - model_table, the no-allocation gap on `allocated == 0 | requests > 0`: names m1;
    - model_table, active hours where `_covered > 1`: m2's 0.5 h become unknown;
    - model_trend, `serving | not idle`: m1's day costs $14 (and money without a model joins).
    """
    b = make_bundle(
        inventory=[{"gpu_id": f"g{i}", "pool": "p"} for i in range(3)],
        rates=[{"pool": "p", "price_per_gpu_hour": 1.0, "start": ts(1, 0), "end": ts(2, 0)}],
        allocations=[
            {"allocation_id": "s1", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 10), "owner": "SVC",
             "workload": "inference", "model": "m1"},
            {"allocation_id": "s2", "gpu_id": "g1", "start": ts(1, 0), "end": ts(1, 6), "owner": "SVC",
             "workload": "inference", "model": "m2"},
            {"allocation_id": "t1", "gpu_id": "g2", "start": ts(1, 0), "end": ts(1, 4), "owner": "A1",
             "workload": "training", "model": "m1"},
        ],
        owners=[{"tenant": "S", "project": "SVC"}, {"tenant": "A", "project": "A1"}, {"tenant": "B", "project": "B1"}],
        requests=[{"request_id": "r1", "ts": ts(1, 1), "owner": "B1", "model": "m1", "input_tokens": 100,
                   "output_tokens": 100, "attempt": 1, "prefill_ms": 300.0, "decode_ms": 700.0, "ttft_ms": 100.0,
                   "latency_ms": 1000.0}],
        telemetry=[{"ts": f"2026-10-01T00:{m:02d}:00Z", "gpu_id": "g1", "util_pct": 100.0, "power_w": 300.0}
                   for m in range(0, 30, 5)],
    )
    comp = compute(b, make_config(boundary=NO_POWER, allocation={
        "token_split": "phase_time", "token_weights": {"input": 0.0, "cached_input": 0.0, "output": 1.0}}))
    rep = build_report(comp)
    assert by(rep, "by_project", "project") == pytest.approx({"B1": 10.0, "SVC": 6.0, "A1": 4.0})
    reconciled(rep, 72.0)
    assert rep["reconciliation"]["idle"] == pytest.approx(52.0)
    models = {r["model"]: r for r in comp.models.iter_rows(named=True)}
    assert (models["m1"]["cost"], models["m2"]["cost"]) == pytest.approx((10.0, 6.0))
    assert models["m1"]["cost_per_million_uncached_input_tokens"] == pytest.approx(30_000.0)
    assert (models["m1"]["slo_attainment"], models["m1"]["retry_share"]) == (1.0, 0.0)
    assert models["m1"]["active_gpu_hours"] is None
    assert (models["m2"]["slo_attainment"], models["m2"]["retry_share"]) == (None, None)
    assert models["m2"]["active_gpu_hours"] == pytest.approx(0.5)
    assert not [g for g in rep["gaps"] if g["what"] == "model without serving allocations"]
    trend = {(r["model"], r["day"]): r["cost"] for r in rep["model_trend"]}
    assert trend[("m1", "2026-10-01")] == pytest.approx(10.0)
    assert set(trend) == {("m1", "2026-10-01"), ("m2", "2026-10-01")}



def test_kills_one_sample_counted_before_any_is_read():
    """A1 holds g0 00:00-06:00 (rate $1/h all day: $6 to A1, $18 idle) and no card reports any
    telemetry: the report says so ("no telemetry": activity, utilization and energy unknown),
    the active hours are unknown, and no "telemetry coverage" gap claims 6 uncovered hours of a
    fleet that has telemetry.

    Mutant (activity.interval_activity: the sample count starts at 1): the engine believes it
    read telemetry, drops the "no telemetry" gap and reports 6 GPU-hours without telemetry.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 6), "owner": "A1"}],
                    rates=[{"pool": "p", "price_per_gpu_hour": 1.0, "start": ts(1, 0), "end": ts(2, 0)}])
    rep = report(b)
    gaps = {(g["what"], g["detail"]) for g in rep["gaps"]}
    assert ("telemetry", "no telemetry: active hours, utilization and energy are unknown") in gaps
    assert not [g for g in rep["gaps"] if g["what"] == "telemetry coverage"]
    assert rep["totals"]["active_gpu_hours"] is None
    assert by(rep, "by_project", "project") == pytest.approx({"A1": 6.0})
    reconciled(rep, 24.0)


def test_kills_oversized_utilization_divided_instead_of_multiplied():
    """Job j1 holds g0 and g1 00:00-01:00 (5-min samples, the gap cap): g0 at 100 %, g1 at 2 %
    (inactive: under the 5 % threshold) the whole hour, so g1 idles while its sibling works: 1 h
    of oversized_request. A $100 row of pool p, spread by utilization over 00:00-01:00: util
    hours g0 1 x 1.00 = 1, g1 1 x 0.02 = 0.02; g1 gets 100 x 0.02 / 1.02 = $1.960784, all of it
    for util-weighted hours of oversized idle (0.02 of 0.02): the oversized_request idle costs
    $1.960784 (power left out of the boundary).

    Mutant (activity._oversized: oversized util-seconds as seconds / util, 3,600 / 2, instead of
    seconds x util, 3,600 x 2): the oversized part is 1/4 of g1's util hours: $0.490196.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p", "node": "n0"}, {"gpu_id": "g1", "pool": "p", "node": "n1"}],
        allocations=[{"allocation_id": f"a-{g}", "gpu_id": g, "start": ts(1, 0), "end": ts(1, 1), "owner": "A1",
                      "job_id": "j1"} for g in ("g0", "g1")],
        telemetry=[{"ts": f"2026-10-01T00:{m:02d}:00Z", "gpu_id": g, "util_pct": 100.0 if g == "g0" else 2.0,
                    "power_w": 300.0} for g in ("g0", "g1") for m in range(0, 60, 5)],
        costs=[{"cost_id": "u", "category": "other", "amount": 100.0, "driver": "utilization", "pool": "p",
                "start": ts(1, 0), "end": ts(1, 1)}],
    )
    rep = report(b, boundary=NO_POWER)
    held = {r["cause"]: (r["gpu_hours"], r["cost"]) for r in rep["idle"] if r["kind"] == "allocated"}
    assert held == {"oversized_request": (pytest.approx(1.0), pytest.approx(100 * 0.02 / 1.02))}
    reconciled(rep, 100.0)



def test_kills_a_sample_on_a_window_edge_skipped_with_its_slice(monkeypatch):
    """A1 holds g0 00:00-01:00; g0 reports at 100 % every 5 min from 00:00 to 00:55 (12 samples):
    the hour is covered and active, 1 GPU-hour. Read in small pieces (a slice of one row, about
    3 rows per window: windows 23:45-00:15, 00:15-00:45, 00:45-01:00), the sample at 00:15 sits
    alone in its slice and exactly on a window's start, and is counted there.

    Mutant (telemetry.FrameTelemetry.window: a slice is read only when its last time is after the
    window's start, not at it): the 00:15 sample is skipped, 00:15-00:20 is lost: 55 min covered
    and active.
    """
    from cost_engine import activity, telemetry

    monkeypatch.setattr(telemetry, "_SLICE_ROWS", 1)
    monkeypatch.setattr(activity, "WINDOW_ROWS", 3)
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 1), "owner": "A1"}],
        telemetry=[{"ts": f"2026-10-01T00:{m:02d}:00Z", "gpu_id": "g0", "util_pct": 100.0, "power_w": 300.0}
                   for m in range(0, 60, 5)],
    )
    assert activity.windows(DAY0, DAY0 + timedelta(hours=1), 300, rows=12, window_rows=3) == [
        (DAY0 - timedelta(minutes=15), DAY0 + timedelta(minutes=15)),
        (DAY0 + timedelta(minutes=15), DAY0 + timedelta(minutes=45)),
        (DAY0 + timedelta(minutes=45), DAY0 + timedelta(hours=1))]
    rep = report(b, period={"start": DAY0, "end": DAY0 + timedelta(hours=1)})
    assert rep["totals"]["active_gpu_hours"] == pytest.approx(1.0)
    assert rep["totals"]["telemetry_coverage"] == pytest.approx(1.0)


def test_kills_held_spans_of_a_card_returned_empty():
    """A scoped user's telemetry is limited to the spans its allocations held (access.scope):
    g0 held 00:00-02:00 and 01:00-03:00 (overlapping) and 05:00-06:00, g1 00:00-01:00. Merged
    per card: g0 00:00-03:00 and 05:00-06:00, g1 00:00-01:00.

    Mutant (telemetry.merged_spans: the early return taken when there are intervals, not when
    there are none): no spans, so the user sees no telemetry at all.
    """
    from cost_engine.telemetry import merged_spans

    iv = pl.DataFrame({"gpu_id": ["g0", "g0", "g0", "g1"],
                       "t0": [DAY0, DAY0 + timedelta(hours=1), DAY0 + timedelta(hours=5), DAY0],
                       "t1": [DAY0 + timedelta(hours=2), DAY0 + timedelta(hours=3), DAY0 + timedelta(hours=6),
                              DAY0 + timedelta(hours=1)]})
    got = merged_spans(iv)
    assert got.rows() == [("g0", DAY0, DAY0 + timedelta(hours=3)), ("g0", DAY0 + timedelta(hours=5), DAY0 + timedelta(hours=6)),
                          ("g1", DAY0, DAY0 + timedelta(hours=1))]


def idle_costs(rep):
    return {(r["kind"], r["cause"]): r["cost"] for r in rep["idle"]}


def test_kills_free_idle_priced_by_time_instead_of_by_the_rates_in_force():
    """g0 (pool p, no telemetry) is free all day; the pool's rate is $1/h 00-12 and $3/h 12-24:
    $12 + $36 = $48, all idle. A maintenance window of the whole pool 00:00-06:00 meets the card
    by overlap (no cut: one segment, two causes) and wins those 6 h: they cost 6 x $1 = $6; no
    demand holds the other 18 h: 6 x $1 + 12 x $3 = $42 (not 18/24 of $48 = $36).

    Mutant (idle.detail: the segment's capacity money summed over every driver *but*
    capacity_hours): none of the $48 counts as capacity money, so each cause gets its share of
    the time: maintenance 6/24 x $48 = $12, no demand $36.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}], allocations=[],
                    rates=[{"pool": "p", "price_per_gpu_hour": 1.0, "start": ts(1, 0), "end": ts(1, 12)},
                           {"pool": "p", "price_per_gpu_hour": 3.0, "start": ts(1, 12), "end": ts(2, 0)}],
                    events=[{"start": ts(1, 0), "end": ts(1, 6), "pool": "p", "kind": "maintenance"}])
    rep = report(b)
    assert idle_costs(rep) == pytest.approx({("unallocated", "maintenance"): 6.0, ("unallocated", "no_demand"): 42.0})
    reconciled(rep, 48.0)


def test_kills_free_idle_priced_by_time_when_the_rates_charged_little():
    """As test_kills_free_idle_priced_by_time_instead_of_by_the_rates_in_force, with rates of
    $0.000001/h 00-12 and $0.000003/h 12-24: $0.000012 + $0.000036 = $0.000048, all idle.
    Maintenance wins 00:00-06:00: 6 x $0.000001 = $0.000006; no demand the other 18 h: $0.000006 +
    12 x $0.000003 = $0.000042 (not 18/24 of the total, $0.000036). Prices rule whenever the rates
    charged anything, however little (the price integral here is in $/h x seconds: 0.1728).

    Mutant (idle._cause_shares: the causes priced by the rates only where that integral is over
    1): by time, maintenance $0.000012, no demand $0.000036.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}], allocations=[],
                    rates=[{"pool": "p", "price_per_gpu_hour": 1e-6, "start": ts(1, 0), "end": ts(1, 12)},
                           {"pool": "p", "price_per_gpu_hour": 3e-6, "start": ts(1, 12), "end": ts(2, 0)}],
                    events=[{"start": ts(1, 0), "end": ts(1, 6), "pool": "p", "kind": "maintenance"}])
    rep = report(b)
    assert idle_costs(rep) == pytest.approx({("unallocated", "maintenance"): 6e-6, ("unallocated", "no_demand"): 4.2e-5},
                                            rel=1e-9, abs=1e-15)
    reconciled(rep, 4.8e-5)


def test_kills_an_hour_under_one_available_gpu_hour_given_no_allocation_ratio():
    """g0 enters service at 00:30 and A1 holds it 00:30-01:00. In the hourly capacity view the
    00:00 bucket has 0.5 available GPU-h, all allocated: allocation ratio 1.0.

    Mutant (idle.capacity_over_time: the ratio only where over 1 GPU-h is available): null.
    """
    from cost_engine import idle

    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p", "in_service_start": ts(1, 0.5)}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0.5), "end": ts(1, 1),
                                  "owner": "A1"}])
    got = idle.capacity_over_time(compute(b, make_config()).seg, "1h").filter(pl.col("bucket") == DAY0)
    assert got.select("available_gpu_hours", "allocated_gpu_hours", "allocation_ratio").rows() == [
        (pytest.approx(0.5), pytest.approx(0.5), pytest.approx(1.0))]


def test_kills_a_kilowatt_hour_of_3_600_001_joules_in_held_idle():
    """A1 holds g0 00:00-02:00 at 0 % utilization, drawing 1000 W (quarter-hourly samples): all
    held time is underutilized. A $100 row spread by energy over pool p 00:00-02:00 lands wholly on
    that segment, and its idle piece drew all of the segment's joules, so held idle costs exactly
    $100 (power left out of the boundary, so no measured-energy money joins it). The card idles
    free after 02:00 at no cost (no rate, no cost row).

    Mutant (idle.detail: a kWh taken as 3,600,001 J when the piece's joules are recovered from its
    kWh): the piece seems to draw 3,600,001 / 3,600,000 of the segment's joules: $100.0000278, a
    relative error of 2.8e-7 that only a tight tolerance sees.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 2), "owner": "A1"}],
        telemetry=[{"ts": ts(1, q / 4), "gpu_id": "g0", "util_pct": 0.0, "power_w": 1000.0} for q in range(8)],
        costs=[{"cost_id": "e", "category": "other", "amount": 100.0, "driver": "energy", "pool": "p",
                "start": ts(1, 0), "end": ts(1, 2)}],
        owners=[{"tenant": "A", "project": "A1"}],
    )
    rep = report(b, activity={"max_sample_gap_s": 900}, boundary=NO_POWER)
    assert idle_costs(rep) == {("allocated", "underutilized"): pytest.approx(100.0, rel=1e-12),
                               ("unallocated", "no_demand"): 0.0}
    reconciled(rep, 100.0)


def test_kills_a_card_cause_of_one_microsecond_that_pays_nothing():
    """g0 (pool p, no telemetry, free all day, rate $1/h: $24 of idle) has a maintenance event of
    its own lasting 1 us from 06:00. The card is cut at its events' edges, so that microsecond is a
    piece of its own, wholly maintenance: 1 us = 1/3.6e9 h, costing $1/3.6e9 = $2.78e-10. No
    demand holds the rest: $24 - $2.78e-10.

    Mutant (idle._cause_shares: the card's own cause takes the prices only where it won more than
    1 us, `card[k] > 1`): the maintenance microsecond pays $0 and no demand pays all $24.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}], allocations=[],
                    rates=[{"pool": "p", "price_per_gpu_hour": 1.0, "start": ts(1, 0), "end": ts(2, 0)}],
                    events=[{"start": ts(1, 6), "end": "2026-10-01T06:00:00.000001Z", "gpu_id": "g0",
                             "kind": "maintenance"}])
    rep = report(b)
    one_us = 1 / 3.6e9
    assert idle_costs(rep) == {("unallocated", "maintenance"): pytest.approx(one_us, rel=1e-6),
                               ("unallocated", "no_demand"): pytest.approx(24.0 - one_us, rel=1e-12)}
    assert {r["cause"]: r["gpu_hours"] for r in rep["idle"]}["maintenance"] == pytest.approx(one_us, rel=1e-6)
    reconciled(rep, 24.0)


def test_kills_an_oversized_request_shorter_than_an_hour_dropped():
    """Job j1 holds g0 and g1 00:00-00:30 (samples every 15 min at 200 W): g0 at 100 %, g1 at 0 %.
    g1 idles for 0.5 h while its sibling works: 0.5 GPU-hours of oversized_request, drawing
    200 W x 0.5 h = 0.1 kWh; nothing is underutilized.

    Mutant (idle.classify: oversized pieces kept only above 1 GPU-hour, `over_h > 1`): the 0.5 h
    vanish from the idle table (neither oversized nor underutilized).
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p", "node": "n0"}, {"gpu_id": "g1", "pool": "p", "node": "n1"}],
        allocations=[{"allocation_id": f"a-{g}", "gpu_id": g, "start": ts(1, 0), "end": ts(1, 0.5), "owner": "A1",
                      "job_id": "j1"} for g in ("g0", "g1")],
        telemetry=[{"ts": ts(1, q / 4), "gpu_id": g, "util_pct": 100.0 if g == "g0" else 0.0, "power_w": 200.0}
                   for g in ("g0", "g1") for q in range(2)],
        owners=[{"tenant": "A", "project": "A1"}],
    )
    rep = report(b, activity={"max_sample_gap_s": 900}, boundary=NO_POWER)
    held = {r["cause"]: (r["gpu_hours"], r["energy_kwh_gpu"]) for r in rep["idle"] if r["kind"] == "allocated"}
    assert held == {"oversized_request": pytest.approx((0.5, 0.1))}


# ---------------------------------------------------------------- survivors of `make mutate`: engine.py


def test_kills_the_gap_for_telemetry_of_unknown_cards_shown_backwards():
    """g0 is the only card; two samples name g9, which the inventory does not hold: they are
    ignored and a gap says so (2 samples). With g0's samples alone, no such gap.

    Mutant (`if not ta.outside`): the gap shows only when no sample is outside ("0 samples").
    """
    own = [{"ts": ts(1, h), "gpu_id": "g0", "util_pct": 50.0, "power_w": 300.0} for h in range(2)]
    stray = [{"ts": ts(1, h), "gpu_id": "g9", "util_pct": 50.0, "power_w": 300.0} for h in range(2)]
    alloc = [{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 2), "owner": "A1"}]
    rep = report(make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}], allocations=alloc, telemetry=own + stray))
    assert [d for d in gaps(rep, "telemetry") if "outside the inventory" in d] == [
        "2 samples of cards outside the inventory or out of service ignored"]
    rep = report(make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}], allocations=alloc, telemetry=own))
    assert [d for d in gaps(rep, "telemetry") if "outside the inventory" in d] == []


def test_kills_the_gap_for_requests_without_latency_shown_backwards():
    """Three requests of A1, one without a latency: a gap says that 1 request counts as meeting
    the SLO. When all three carry ttft and latency, no such gap.

    Mutant (`if not no_latency`): the gap shows only when every request has its latencies.
    """
    def requests(missing):
        return [{"request_id": f"r{i}", "ts": ts(1, i), "owner": "A1", "model": "m", "input_tokens": 100,
                 "output_tokens": 10, "ttft_ms": 50.0, "latency_ms": None if i < missing else 400.0}
                for i in range(3)]

    alloc = [{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 4), "owner": "A1",
              "workload": "inference", "model": "m"}]
    rep = report(make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}], allocations=alloc, requests=requests(1)))
    assert gaps(rep, "latency missing") == ["1 requests without ttft or latency count as meeting the SLO"]
    rep = report(make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}], allocations=alloc, requests=requests(0)))
    assert gaps(rep, "latency missing") == []


def test_kills_one_sample_taken_for_no_telemetry():
    """A1 holds g0 00:00-01:00; the only sample is at 00:00 (50 %, max gap 15 min): 0.25 h covered
    and active, 0.75 h without telemetry. One sample is telemetry: the gaps name the 0.75 h
    uncovered, and do not say "no telemetry".

    Mutant (`has_telemetry = ta.samples > 1`): one sample reads as none: the gaps say "no
    telemetry" and drop the coverage gap.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 1), "owner": "A1"}],
        telemetry=[{"ts": ts(1, 0), "gpu_id": "g0", "util_pct": 50.0, "power_w": 300.0}],
        owners=[{"tenant": "A", "project": "A1"}],
    )
    rep = report(b, activity={"max_sample_gap_s": 900})
    assert [(g["what"], g["detail"]) for g in rep["gaps"]] == [
        ("telemetry coverage", "0.75 allocated GPU-hours have no telemetry (neither active nor idle)")]
    assert rep["totals"]["active_gpu_hours"] == pytest.approx(0.25)
    assert rep["totals"]["telemetry_coverage"] == pytest.approx(0.25)


def test_kills_utilization_hours_scaled_by_100_instead_of_divided():
    """A1 holds g0 00:00-02:00, samples every 15 min (max gap 15 min): 40 % for 00-01, 80 % for
    01-02. Util-weighted hours 0.4 + 0.8 = 1.2 over 2 covered hours: average utilization 60 %,
    for the fleet and for A1.

    Mutant (engine.enrich_segments: util_h = capacity x util_s x 100 instead of / 100): 600,000 %.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 2), "owner": "A1"}],
        telemetry=[{"ts": ts(1, q / 4), "gpu_id": "g0", "util_pct": 40.0 if q < 4 else 80.0, "power_w": 300.0}
                   for q in range(8)],
        owners=[{"tenant": "A", "project": "A1"}],
    )
    rep = report(b, activity={"max_sample_gap_s": 900})
    assert rep["totals"]["avg_util_pct"] == pytest.approx(60.0)
    assert by(rep, "by_project", "project", "avg_util_pct") == pytest.approx({"A1": 60.0})


# ------------------------------------------- survivors of `make mutate`: tokens, report, ledger


def served(requests, allocation_end="2026-10-02T00:00:00Z", telemetry=(), share=1.0, also=(), **tables):
    """Model m served by svc (tenant S) on g0 from 10-01 00:00 to `allocation_end` at a rate of
    $1 per card-hour: $24 of model cost for the whole day. Callers A1 (tenant A) and B1 (B).
    `also`: more allocations, on g1 (in pool p too)."""
    return make_bundle(
        inventory=[{"gpu_id": g, "pool": "p"} for g in ("g0", "g1")[:1 + bool(also)]],
        owners=[{"tenant": "A", "project": "A1"}, {"tenant": "B", "project": "B1"}, {"tenant": "S", "project": "svc"}],
        allocations=[{"allocation_id": "s", "gpu_id": "g0", "start": ts(1, 0), "end": allocation_end, "owner": "svc",
                      "workload": "inference", "model": "m", "share": share}, *also],
        rates=[{"pool": "p", "price_per_gpu_hour": 1.0}],
        requests=list(requests),
        telemetry=list(telemetry),
        **tables,
    )


def test_kills_the_phase_times_of_a_bucket_across_the_period_start_added_instead_of_subtracted():
    """Model m costs $24 (served). A usage bucket of A1 from 09-30 23:00 to 10-01 01:00 (2 h):
    2 requests, 200 input and 200 output tokens, prefill 2,000 ms, decode 0 ms. Half of it lies
    in the period (lo = 0.5, hi = 1): floor(200 x 1) - floor(200 x 0.5) = 100 input and 100
    output tokens, 2 - 1 = 1 request, prefill 2,000 x (1 - 0.5) = 1,000 ms. A request at 02:00:
    100 input, 100 output, prefill 0, decode 3,000 ms.

    Phase time: prefill 1,000, decode 3,000 -> input share 0.25: input $6 over 200 input tokens
    = $30,000 per M, output $18 over 200 = $90,000 per M.

    Mutants: the bucket's phase time scaled by hi + lo = 1.5 (prefill 3,000 ms, share 0.5:
    input $60,000 per M); its counts floor(200) + floor(100) = 300 instead of 100.
    """
    b = served([{"request_id": "b1", "ts": ts(30, 23), "end": ts(1, 1), "owner": "A1", "model": "m",
                 "requests": 2, "input_tokens": 200, "output_tokens": 200, "prefill_ms": 2000.0, "decode_ms": 0.0},
                {"request_id": "r2", "ts": ts(1, 2), "owner": "A1", "model": "m", "input_tokens": 100,
                 "output_tokens": 100, "prefill_ms": 0.0, "decode_ms": 3000.0}])
    m = {r["model"]: r for r in report(b)["by_model"]}["m"]
    assert (m["input_tokens"], m["output_tokens"], m["requests"]) == (200, 200, 2)
    assert m["cost_per_million_input_tokens"] == pytest.approx(30_000.0)
    assert m["cost_per_million_output_tokens"] == pytest.approx(90_000.0)


def test_kills_a_bucket_across_the_period_end_counted_whole():
    """A usage bucket of A1 from 10-01 23:00 to 10-02 01:00 (2 h): 4 requests, 200 output tokens.
    The period keeps its first hour (lo = 0, hi = 0.5): floor(200 x 0.5) = 100 tokens and
    floor(4 x 0.5) = 2 requests; the rest belongs to the next period.

    Mutant (`whole` = starts in the period OR ends in it): the bucket counts whole, 200 and 4.
    """
    b = served([{"request_id": "b1", "ts": ts(1, 23), "end": ts(2, 1), "owner": "A1", "model": "m",
                 "requests": 4, "input_tokens": 0, "output_tokens": 200}])
    m = {r["model"]: r for r in report(b)["by_model"]}["m"]
    assert (m["output_tokens"], m["requests"]) == (100, 2)
    assert report(b)["totals"]["output_tokens"] == 100


def test_kills_tokens_per_joule_made_infinite_for_a_model_without_energy():
    """Model m served all day without telemetry; A1 sent 100 output tokens. Its energy is unknown:
    output tokens per facility joule is null in the engine's model table (comp.models), which the
    dashboard reads as well as the report.

    Mutant (`joules >= 0` instead of `> 0`): 100 / (0 J x 1.3 x 1.2) = inf.
    """
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 0,
                 "output_tokens": 100}])
    row = compute(b, make_config()).models.row(0, named=True)
    assert row["output_tokens"] == 100
    assert row["output_tokens_per_joule"] is None
    assert row["output_tokens_per_joule_facility"] is None


def test_kills_tokens_per_joule_unknown_below_one_joule():
    """Model m on g0 (held all day); an energy counter reads 0 J at 00:00 and 0.5 J at 00:01 (max
    gap 60 s; no power readings): 0.5 J for the model. A1 sent 100 output tokens.
    Per GPU joule 100 / 0.5 = 200; per facility joule (server overhead 1.0, PUE 1.25)
    100 / (0.5 x 1.0 x 1.25) = 160.

    Mutant (`joules > 1`): below one joule the facility figure is null.
    """
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 0,
                 "output_tokens": 100}],
               telemetry=[{"ts": ts(1, 0), "gpu_id": "g0", "util_pct": 50.0, "energy_j": 0.0},
                          {"ts": "2026-10-01T00:01:00Z", "gpu_id": "g0", "util_pct": 50.0, "energy_j": 0.5}])
    rep = report(b, activity={"max_sample_gap_s": 60}, energy={"server_overhead": 1.0, "pue": 1.25})
    m = {r["model"]: r for r in rep["by_model"]}["m"]
    assert m["output_tokens_per_joule"] == pytest.approx(200.0)
    assert m["output_tokens_per_joule_facility"] == pytest.approx(160.0)


def test_kills_categories_of_equal_cost_listed_in_reverse_name_order():
    """Pool p with g0: a $10 network row and a $10 facility row for the day, and a $5 storage row.
    The input by category lists the highest cost first, ties by name: facility $10, network $10,
    storage $5.

    Mutant (report.build_report: categories of equal cost sorted by name descending): network
    before facility.
    """
    day = {"pool": "p", "start": ts(1, 0), "end": ts(2, 0)}
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    costs=[{"cost_id": "n", "category": "network", "amount": 10.0, **day},
                           {"cost_id": "s", "category": "storage", "amount": 5.0, **day},
                           {"cost_id": "f", "category": "facility", "amount": 10.0, **day}])
    rep = report(b)
    assert [(r["category"], r["cost"]) for r in rep["by_category"]] == [
        ("facility", 10.0), ("network", 10.0), ("storage", 5.0)]


def test_kills_a_power_bill_without_telemetry_given_an_unknown_energy_cost():
    """A1 holds g0 (pool p) all day, with no telemetry; a $50 power row of pool p covers the day.
    The energy cost is that bill, known: $50 (the energy in kWh stays unknown: nothing measured
    it). Only where power is priced by measured energy alone would no telemetry leave it unknown.

    Mutant (report.energy_priced_by_measurement: the power rows looked for among the inputs that
    are *not* cost rows): the bill is missed, the energy cost reads as unknown.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(2, 0),
                                  "owner": "A1"}],
                    costs=[{"cost_id": "pw", "category": "power", "amount": 50.0, "pool": "p", "start": ts(1, 0),
                            "end": ts(2, 0)}])
    t = report(b)["totals"]
    assert t["energy_cost"] == pytest.approx(50.0)
    assert t["energy_kwh_gpu"] is None


def test_kills_an_owner_with_half_an_hour_of_telemetry_given_unknown_active_hours():
    """A1 holds g0 all day; g0 reports 50 % every 5 minutes from 00:00 to 00:25 (the last sample
    stands for 300 s, the gap cap): covered 00:00-00:30 = 0.5 GPU-h, all active. A1's active
    hours are known, 0.5, with an average utilization of 50 %; the owner table holds no NaN for
    an owner that held nothing either (B1, a $10 direct cost): its average utilization is null.

    Mutants (report.totals: the idle rate 1 + active / available: 1.020833;
    report.unknown_without_telemetry: active hours known only above 1 covered hour;
    report.owner_table: the average utilization taken over 0 covered hours too, 0 / 0 = NaN in
    the table, which the report prints as null; the cost per million tokens taken over 0 tokens
    too: B1 sent no request, $0 / 0 tokens = NaN; an owner without requests given 1 of each token
    count instead of 0: B1 with 1 request, 1 good token).
    """
    from cost_engine.report import owner_table

    tele = [{"ts": DAY0 + timedelta(minutes=5 * i), "gpu_id": "g0", "util_pct": 50.0} for i in range(6)]
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(2, 0),
                                  "owner": "A1"}],
                    owners=[{"tenant": "A", "project": "A1"}, {"tenant": "B", "project": "B1"}],
                    rates=[{"pool": "p", "price_per_gpu_hour": 1.0}],
                    costs=[{"cost_id": "d", "category": "software", "amount": 10.0, "owner": "B1", "start": ts(1, 0),
                            "end": ts(2, 0)}],
                    telemetry=tele)
    comp = compute(b, make_config())
    rep = build_report(comp)
    rows = {r["project"]: r for r in rep["by_project"]}
    assert rows["A1"]["active_gpu_hours"] == pytest.approx(0.5)
    # The fleet: 24 available GPU-h, 0.5 active: idle rate 1 - 0.5 / 24 = 0.979167.
    assert rep["totals"]["idle_rate"] == pytest.approx(1 - 0.5 / 24)
    assert rows["A1"]["avg_util_pct"] == pytest.approx(50.0)
    assert [(rows[p]["requests"], rows[p]["good_tokens"], rows[p]["output_tokens"]) for p in ("A1", "B1")] == [
        (0, 0, 0), (0, 0, 0)]
    table = owner_table(comp, ["tenant", "project"]).filter(pl.col("project") == "B1")
    assert table["avg_util_pct"].to_list() == [None]
    assert table["cost_per_million_tokens"].to_list() == [None]


def test_kills_owners_ranked_cheapest_first():
    """Direct software costs for the day: A1 $10, B1 $30, C1 $20 (no cards). The owner tables rank
    by cost, highest first: projects B1, C1, A1; tenants B, C, A.

    Mutant (report.owner_table: sorted by cost ascending): A1 first.
    """
    day = {"category": "software", "start": ts(1, 0), "end": ts(2, 0)}
    b = make_bundle(owners=[{"tenant": t, "project": f"{t}1"} for t in "ABC"],
                    costs=[{"cost_id": f"c{o}", "amount": a, "owner": o, **day}
                           for o, a in (("A1", 10.0), ("B1", 30.0), ("C1", 20.0))])
    rep = report(b)
    assert [(r["project"], r["cost"]) for r in rep["by_project"]] == [("B1", 30.0), ("C1", 20.0), ("A1", 10.0)]
    assert [r["tenant"] for r in rep["by_tenant"]] == ["B", "C", "A"]


def test_kills_owners_of_equal_cost_in_reverse_name_order_or_an_unknown_cost_ranked_first():
    """Direct software costs for the day: A1 $10, B1 $10 (no cards). C1 holds g0 of pool p all
    day, and no cost row, rate or energy reaches p: C1's cost is unknown (null), not $0. The
    ranking is by cost, highest first, equal costs by name, unknown last: A1 $10, B1 $10, C1
    unknown; tenants A, B, C.

    Mutants (report.owner_table: equal costs sorted by name descending; nulls sorted first): B1
    before A1; C1 first.
    """
    day = {"category": "software", "start": ts(1, 0), "end": ts(2, 0)}
    b = make_bundle(owners=[{"tenant": t, "project": f"{t}1"} for t in "ABC"],
                    inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(2, 0),
                                  "owner": "C1"}],
                    costs=[{"cost_id": f"c{o}", "amount": 10.0, "owner": o, **day} for o in ("A1", "B1")])
    rep = report(b)
    assert [(r["project"], r["cost"]) for r in rep["by_project"]] == [("A1", 10.0), ("B1", 10.0), ("C1", None)]
    assert [(r["tenant"], r["cost"]) for r in rep["by_tenant"]] == [("A", 10.0), ("B", 10.0), ("C", None)]


def test_kills_energy_known_for_half_a_second_taken_as_unknown():
    """A1 holds g0 all day; g0 reports at 00:00:00.0 (50 %, 100 W) and at 00:00:00.5 (50 %, no power,
    no counter). The first sample's energy is known for its 0.5 s: 100 W x 0.5 s = 50 J =
    1.3889e-5 kWh; the second's (capped at the 300 s gap) is unknown. A1's energy is that known
    part: metered time above 0 s makes it known, however short.

    Mutants (report.unknown_without_telemetry, report.totals: energy known only above 1 metered
    second): A1's energy, or the fleet's, reads as unknown.
    """
    tele = [{"ts": DAY0, "gpu_id": "g0", "util_pct": 50.0, "power_w": 100.0},
            {"ts": DAY0 + timedelta(milliseconds=500), "gpu_id": "g0", "util_pct": 50.0}]
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(2, 0),
                                  "owner": "A1"}],
                    owners=[{"tenant": "A", "project": "A1"}], telemetry=tele)
    rep = report(b)
    (row,) = rep["by_project"]
    assert row["energy_kwh_gpu"] == pytest.approx(50 / 3.6e6)
    assert rep["totals"]["energy_kwh_gpu"] == pytest.approx(50 / 3.6e6)


def test_kills_the_average_power_of_an_owner_held_half_a_second():
    """A1 holds g0 for half a second, 00:00:00.0-00:00:00.5; g0 reports 100 W at 00:00:00.0. A1's
    energy is 100 W x 0.5 s = 50 J over 0.5 held GPU-seconds: an average power of 100 W per GPU.

    Mutants (report.owner_table: held seconds taken as hours / 3600, not x 3600; the average
    power known only above 1 held second): 50 J / (0.5 s / 3600 / 3600) = 1.3e9 W, or unknown.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": DAY0,
                                  "end": DAY0 + timedelta(milliseconds=500), "owner": "A1"}],
                    owners=[{"tenant": "A", "project": "A1"}],
                    telemetry=[{"ts": DAY0, "gpu_id": "g0", "util_pct": 50.0, "power_w": 100.0}])
    row = {r["project"]: r for r in report(b)["by_project"]}["A1"]
    assert row["energy_kwh_gpu"] == pytest.approx(50 / 3.6e6)
    assert row["avg_power_w_per_gpu"] == pytest.approx(100.0)


def test_kills_an_owners_cost_per_allocated_hour_multiplied():
    """Pool p at $1/h; A1 holds g0 06:00-18:00: $12 over 12 allocated GPU-h, $1.00 per allocated
    GPU-hour.

    Mutant (report.owner_table: cost x hours, not cost / hours): $144.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 6), "end": ts(1, 18),
                                  "owner": "A1"}],
                    owners=[{"tenant": "A", "project": "A1"}], rates=[{"pool": "p", "price_per_gpu_hour": 1.0}])
    (row,) = report(b)["by_project"]
    assert (row["cost"], row["allocated_gpu_hours"]) == (pytest.approx(12.0), pytest.approx(12.0))
    assert row["cost_per_allocated_gpu_hour"] == pytest.approx(1.0)


def test_kills_half_a_dollar_of_model_cost_or_one_token_taken_as_nothing_served():
    """Model m is served on g0 00:00-00:30 at $1 per card-hour: $0.50 of model cost; A1 sent it one
    output token. The fleet's cost per million tokens is $0.50 x 1e6 / 1 token = $500,000, and
    A1, to whom the $0.50 is recharged, pays the same $500,000 per million.

    Mutants (report.totals: served models taken as those costing above $1, or serving above 1
    token; report.owner_table: an owner's cost per million tokens only above 1 token): unknown
    instead of $500,000.
    """
    b = served([{"request_id": "r1", "ts": ts(1, 0.25), "owner": "A1", "model": "m", "input_tokens": 0,
                 "output_tokens": 1}], allocation_end=ts(1, 0.5))
    rep = report(b)
    assert by(rep, "by_model", "model") == {"m": pytest.approx(0.5)}
    assert rep["totals"]["cost_per_million_tokens"] == pytest.approx(500_000.0)
    assert by(rep, "by_project", "project", "cost_per_million_tokens")["A1"] == pytest.approx(500_000.0)


def test_kills_half_a_joule_or_half_a_metered_second_taken_as_none():
    """Model m is served on g0 all day; A1 sent it 100 output tokens. g0 reports at 00:00:00.0
    (50 %, 1 W) and at 00:00:00.5 (50 %, no power, no counter): the energy of the day is known
    for 0.5 s, 1 W x 0.5 s = 0.5 J = 0.5 / 3.6e6 kWh = 1.3889e-7 kWh. The fleet's output tokens
    per joule: 100 / 0.5 J = 200; per facility joule (server overhead 1.3, PUE 1.2 by default):
    100 / (0.5 x 1.3 x 1.2) = 100 / 0.78 = 128.205 tokens per J. The daily trend's energy for
    10-01 is that 1.3889e-7 kWh.

    Mutants (report.totals: a model's tokens counted only above 1 J, in either figure;
    report.trend: a day's energy known only above 1 metered second): 0 tokens per joule; the
    day's energy unknown.
    """
    tele = [{"ts": DAY0, "gpu_id": "g0", "util_pct": 50.0, "power_w": 1.0},
            {"ts": DAY0 + timedelta(milliseconds=500), "gpu_id": "g0", "util_pct": 50.0}]
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 0,
                 "output_tokens": 100}], telemetry=tele)
    rep = report(b)
    assert rep["totals"]["output_tokens_per_joule"] == pytest.approx(200.0, rel=1e-12)
    assert rep["totals"]["output_tokens_per_joule_facility"] == pytest.approx(100 / 0.78, rel=1e-12)
    assert [(r["day"], r["energy_kwh_gpu"]) for r in rep["trend"]] == [
        ("2026-10-01", pytest.approx(0.5 / 3.6e6, rel=1e-12))]


def test_kills_the_fleets_cost_per_million_tokens_over_models_without_tokens_or_cost():
    """Model m is served all day on g0 ($24) and A1 sent it 100 output tokens; model m2 is held on
    g1 all day ($24) and nobody sent it a request; B1 sent 300 output tokens to model m3, which no
    card served (no cost). The fleet's cost per million tokens is over the models that both cost
    something and served tokens: m's $24 / 100 tokens = $240,000 per million.

    Mutants (report.totals: served models taken as those that cost something *or* served tokens:
    $48 / 400 tokens = $120,000; as those that cost $0 or more and served tokens: $24 / 400 tokens
    = $60,000).
    """
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 0,
                 "output_tokens": 100},
                {"request_id": "r2", "ts": ts(1, 1), "owner": "B1", "model": "m3", "input_tokens": 0,
                 "output_tokens": 300}],
               also=[{"allocation_id": "m2", "gpu_id": "g1", "start": ts(1, 0), "end": ts(2, 0), "owner": "svc",
                      "workload": "inference", "model": "m2"}])
    t = report(b)["totals"]
    assert t["cost_per_million_tokens"] == pytest.approx(240_000.0)


def test_kills_unattributed_lines_of_equal_cost_and_key_in_reverse_source_order():
    """Owner ZZ is in no owners table: its allocation of g0 00:00-05:00 at $1/h ($5, source
    scheduler) and its $5 software cost row (source finance) are unattributed. Lines of equal cost
    and key are listed by source: finance, then scheduler.

    Mutants (report.unattributed: ties sorted by source descending): scheduler first;
    (report.reconciliation: the unattributed money added to the difference, not taken from it):
    a difference of $20.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 5),
                                  "owner": "ZZ"}],
                    owners=[{"tenant": "A", "project": "A1"}], rates=[{"pool": "p", "price_per_gpu_hour": 1.0}],
                    costs=[{"cost_id": "d", "category": "software", "amount": 5.0, "owner": "ZZ", "start": ts(1, 0),
                            "end": ts(2, 0)}])
    rep = report(b)
    assert [(r["source"], r["key"], r["cost"]) for r in rep["unattributed"]] == [
        ("finance", "ZZ", pytest.approx(5.0)), ("scheduler", "ZZ", pytest.approx(5.0))]
    # Input $24 + $5 = $29: $10 unattributed, $19 idle, nothing attributed, difference 0.
    rc = rep["reconciliation"]
    assert (rc["input_cost"], rc["unattributed"], rc["idle"]) == (pytest.approx(29.0), pytest.approx(10.0),
                                                                  pytest.approx(19.0))
    assert rc["difference"] == pytest.approx(0.0, abs=1e-9)


def test_kills_the_fleets_facility_tokens_per_joule_with_the_server_overhead_divided_out():
    """The bundle of the test above (0.5 GPU joules for model m, 100 output tokens) with server
    overhead 1.25 and PUE 1.6, and 300 output tokens sent to model m3, which no card served (0 J):
    in the report's totals, output tokens per GPU joule are counted over models that drew energy,
    100 / 0.5 = 200, per facility joule 100 / (0.5 x 1.25 x 1.6) = 100 / 1.0 = 100, as for m.

    The model's cost, $24 of rate for the day and 1 facility J of measured energy at $0.12/kWh,
    over its 100 tokens: $240,000.000333 per million tokens.

    Mutants (report.totals: the fleet's model joules divided by the server overhead, not
    multiplied): 100 / (0.5 / 1.25 x 1.6) = 156.25; (a million taken as 1,000,001): $240,000.24...;
    (the facility figure's tokens counted over models of 0 J or more): (100 + 300) / 1.0 = 400.
    """
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 0,
                 "output_tokens": 100},
                {"request_id": "r2", "ts": ts(1, 1), "owner": "B1", "model": "m3", "input_tokens": 0,
                 "output_tokens": 300}],
               telemetry=[{"ts": ts(1, 0), "gpu_id": "g0", "util_pct": 50.0, "energy_j": 0.0},
                          {"ts": "2026-10-01T00:01:00Z", "gpu_id": "g0", "util_pct": 50.0, "energy_j": 0.5}])
    rep = report(b, activity={"max_sample_gap_s": 60}, energy={"server_overhead": 1.25, "pue": 1.6})
    t = rep["totals"]
    assert t["output_tokens_per_joule"] == pytest.approx(200.0)
    assert t["output_tokens_per_joule_facility"] == pytest.approx(100.0)
    # The model's $24 of rate and its measured energy, 1 facility J = 1/3.6e6 kWh x $0.12, over
    # its 100 tokens: (24 + 0.12 / 3.6e6) x 10,000 = $240,000.000333 per million.
    assert t["cost_per_million_tokens"] == pytest.approx((24 + 0.12 / 3.6e6) * 1e4, rel=1e-12)
    assert {r["model"]: r for r in rep["by_model"]}["m"]["output_tokens_per_joule_facility"] == pytest.approx(100.0)


def test_kills_a_fleet_without_requests_given_a_cost_per_million_tokens_of_zero():
    """Model m is served all day ($24) but nobody sent a request: no tokens were served, so the
    fleet's cost per million tokens (and per million good tokens) is unknown, not $0.

    Mutant (report.totals: the served tokens taken as 1 when there are none, not 0): $0 of served
    model cost over 1 token gives $0.00 per million.
    """
    t = report(served([]))["totals"]
    assert (t["input_tokens"], t["output_tokens"], t["requests"]) == (0, 0, 0)
    assert t["cost_per_million_tokens"] is None
    assert t["cost_per_million_good_tokens"] is None


def test_kills_a_daily_trend_whose_idle_cost_is_the_held_cost():
    """Pool p, $1/h on g0 for two days; A1 holds g0 on 10-01 06:00-18:00. Day 10-01: cost $24,
    of which $12 idle (the 12 free hours); day 10-02: cost $24, all idle.

    Mutants (report.trend: the idle cost summed over money *not* going to idle): $12 and $0;
    (a day's energy known from 0 metered seconds on): 0 kWh for days nothing measured.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 6), "end": ts(1, 18),
                                  "owner": "A1"}],
                    owners=[{"tenant": "A", "project": "A1"}],
                    rates=[{"pool": "p", "price_per_gpu_hour": 1.0}])
    rep = report(b, period=TWO_DAYS)
    assert [(r["day"], r["cost"], r["idle_cost"]) for r in rep["trend"]] == [
        ("2026-10-01", pytest.approx(24.0), pytest.approx(12.0)), ("2026-10-02", pytest.approx(24.0), pytest.approx(24.0))]
    # No telemetry: each day's energy is unknown, not 0 kWh.
    assert [r["energy_kwh_gpu"] for r in rep["trend"]] == [None, None]


def test_kills_a_model_day_with_under_an_hour_of_telemetry_given_no_energy():
    """The bundle of the test above: samples at 00:00 and 00:01 (max gap 60 s) cover 1 minute
    of the model's held day, and read 0.5 J. The model's trend on 10-01 knows its energy:
    joules 0.5, output tokens per joule 100 / 0.5 = 200.

    Mutant (tokens.model_trend: energy known only above 1 covered hour): joules and tokens per
    joule unknown (null) on that day.
    """
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 0,
                 "output_tokens": 100}],
               telemetry=[{"ts": ts(1, 0), "gpu_id": "g0", "util_pct": 50.0, "energy_j": 0.0},
                          {"ts": "2026-10-01T00:01:00Z", "gpu_id": "g0", "util_pct": 50.0, "energy_j": 0.5}])
    (row,) = report(b, activity={"max_sample_gap_s": 60})["model_trend"]
    assert (row["day"], row["joules"]) == ("2026-10-01", pytest.approx(0.5))
    assert row["output_tokens_per_joule"] == pytest.approx(200.0)


def test_kills_average_power_unknown_for_a_model_held_under_a_second():
    """Model m held on g0 for half a second (00:00:00 to 00:00:00.5); one sample at 00:00 at
    300 W (max gap 60 s). The held half second draws 300 W x 0.5 s = 150 J: average power
    150 J / 0.5 s = 300 W per GPU.

    Mutant (`_held_s > 1`): held under a second, the average power is null.
    """
    b = served([], allocation_end="2026-10-01T00:00:00.500Z",
               telemetry=[{"ts": ts(1, 0), "gpu_id": "g0", "util_pct": 50.0, "power_w": 300.0}])
    rep = report(b, activity={"max_sample_gap_s": 60})
    m = {r["model"]: r for r in rep["by_model"]}["m"]
    assert m["allocated_gpu_hours"] == pytest.approx(0.5 / 3600)
    assert m["avg_power_w_per_gpu"] == pytest.approx(300.0)


def test_kills_models_of_equal_cost_listed_in_reverse_name_order():
    """Requests for models "beta" and "alpha", which no allocation serves: both cost $0. The
    by_model table is sorted by cost, highest first, then by name: alpha before beta.

    Mutant (names sorted descending too): beta before alpha.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        owners=[{"tenant": "A", "project": "A1"}],
        requests=[{"request_id": f"r-{m}", "ts": ts(1, 1), "owner": "A1", "model": m, "input_tokens": 10,
                   "output_tokens": 10} for m in ("beta", "alpha")],
    )
    rep = report(b)
    assert [(r["model"], r["cost"]) for r in rep["by_model"]] == [("alpha", 0.0), ("beta", 0.0)]


def test_kills_served_tokens_counting_cached_input_against_the_rest():
    """Model m costs $24; A1 sends 100 uncached and 300 cached input tokens: 400 tokens, all
    served, so the fleet's cost per million tokens is 24 / 400 x 1e6 = $60,000, and A1 (who pays
    the $24 by recharge) has the same $60,000 per M on its row.

    Mutants: a model counted as serving tokens when input - cached + output > 0 (100 - 300 < 0:
    not served, the fleet figure unknown); the owner's per-million factor 1,000,001 instead of
    1e6 ($60,000.06: compared at 1e-12).
    """
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 100,
                 "cached_input_tokens": 300, "output_tokens": 0}])
    rep = report(b)
    assert rep["totals"]["cost_per_million_tokens"] == pytest.approx(60_000.0)
    a1 = {r["project"]: r for r in rep["by_project"]}["A1"]
    assert a1["cost"] == pytest.approx(24.0)
    assert a1["cost_per_million_tokens"] == pytest.approx(60_000.0, rel=1e-12)


def unmapped_callers():
    """Model m ($24, served) called only by two keys that map to no project, ghost-b and ghost-a,
    each with 100 input tokens: $12 each, unattributed."""
    return served([{"request_id": f"r-{k}", "ts": ts(1, 1), "owner": k, "model": "m", "input_tokens": 100,
                    "output_tokens": 0} for k in ("ghost-b", "ghost-a")])


def test_kills_unattributed_lines_without_a_key_listed_as_a_caller():
    """unmapped_callers: the unattributed list names the two keys with $12 each and one record
    each; the model's rows moved to them (one unattributed line per model row, no key) are not a
    caller of their own. Reconciliation: $24 unattributed of $24.

    Mutant (unattributed money rows OR rows with a key): the keyless line shows up as a caller
    (key null, $24) beside the two keys.
    """
    rep = report(unmapped_callers())
    got = {(r["source"], r["key"]): (r["cost"], r["records"]) for r in rep["unattributed"]}
    assert got == {("gateway", "ghost-a"): (pytest.approx(12.0), 1), ("gateway", "ghost-b"): (pytest.approx(12.0), 1)}
    assert rep["reconciliation"]["unattributed"] == pytest.approx(24.0)


def test_kills_unattributed_keys_of_equal_cost_listed_in_reverse_order():
    """unmapped_callers: ghost-a and ghost-b both cost $12: sorted by cost, then key ascending.

    Mutant (keys sorted descending too): ghost-b first.
    """
    assert [r["key"] for r in report(unmapped_callers())["unattributed"]] == ["ghost-a", "ghost-b"]


def test_kills_an_unattributed_key_without_cost_charged_one_dollar():
    """Two keys no project or alias maps: "nobody" owns a direct cost of $30 (no allocation or
    request carries it: 0 records); "ghost" holds g0 00:00-06:00 and there is no other cost, so
    its one record carries $0. Sorted by cost: nobody $30 (0 records), ghost $0 (1 record).

    Mutants: a key without money filled with $1 instead of $0 (ghost $1); a key without records
    filled with 1 record (nobody 1).
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        owners=[{"tenant": "A", "project": "A1"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 6), "owner": "ghost"}],
        costs=[{"cost_id": "d", "category": "other", "amount": 30.0, "owner": "nobody", "start": ts(1, 0),
                "end": ts(2, 0)}],
    )
    rep = report(b, boundary=NO_POWER)
    assert [(r["key"], r["cost"], r["records"]) for r in rep["unattributed"]] == [
        ("nobody", pytest.approx(30.0), 0), ("ghost", 0.0, 1)]
    reconciled(rep, 30.0)


def test_kills_cost_per_allocated_hour_made_infinite_for_an_owner_without_hours():
    """A1 holds g0 00:00-06:00; a direct cost of $30 for B1, who holds nothing. The owner table
    (report.owner_table, which the dashboard reads too) gives B $30 and 0 allocated GPU-hours:
    its cost per allocated GPU-hour is unknown (null), not $30 / 0. A holds 6 GPU-hours of pool p,
    which no cost row, rate or measured energy reaches: A's cost is unknown, not $0
    (report.uncosted_pools), so its cost per allocated GPU-hour is unknown too.

    Mutant (`allocated_gpu_hours >= 0`): inf.
    """
    from cost_engine.report import owner_table

    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        owners=[{"tenant": "A", "project": "A1"}, {"tenant": "B", "project": "B1"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 6), "owner": "A1"}],
        costs=[{"cost_id": "d", "category": "other", "amount": 30.0, "owner": "B1", "start": ts(1, 0),
                "end": ts(2, 0)}],
    )
    t = {r["tenant"]: r for r in owner_table(compute(b, make_config(boundary=NO_POWER)), ["tenant"]).to_dicts()}
    assert (t["B"]["cost"], t["B"]["allocated_gpu_hours"]) == (pytest.approx(30.0), 0.0)
    assert t["B"]["cost_per_allocated_gpu_hour"] is None
    assert (t["A"]["cost"], t["A"]["allocated_gpu_hours"]) == (None, pytest.approx(6.0))
    assert t["A"]["cost_per_allocated_gpu_hour"] is None


def test_kills_an_empty_inferred_period_accepted():
    """The config gives only a start, 10-02 00:00; the allocations end at 10-02 00:00, so the
    inferred end (the whole UTC day holding the last end) is 10-02 00:00 too: the period would be
    empty, and the engine says so.

    Mutant (`end < start`): an empty period passes the check.
    """
    from cost_engine.ledger import resolve_period

    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(2, 0), "owner": "A1"}])
    cfg = make_config(period={"start": datetime(2026, 10, 2, tzinfo=timezone.utc), "end": None})
    with pytest.raises(ValueError, match="inferred period is empty"):
        resolve_period(cfg, b["allocations"])


# ------------------------------------------- survivors of `make mutate`: activity, telemetry


def test_kills_a_counter_that_did_not_move_reported_as_a_reset():
    """The counter of test_kills_a_zero_counter_delta_taken_for_a_missing_counter reads 5,000 J
    at 00:00 and at 01:00: a delta of 0 J, which is no reset (a reset is a counter going down).
    No "energy counter reset" gap.

    Mutant (`delta < 1` flags the reset): a 0 J delta is reported as a reset of g0 at 01:00.
    """
    rep = report(still_counter(), activity={"max_sample_gap_s": 3600})
    assert [g for g in rep["gaps"] if g["what"] == "energy counter reset"] == []


def card_energy(samples, gap_s):
    """comp.card_energy of one day with A1 holding g0 and g1 00:00-01:00: (card, quarter start
    as HH:MM, joules) rows."""
    b = make_bundle(
        inventory=[{"gpu_id": g, "pool": "p"} for g in ("g0", "g1")],
        allocations=[{"allocation_id": f"a-{g}", "gpu_id": g, "start": ts(1, 0), "end": ts(1, 1), "owner": "A1"}
                     for g in ("g0", "g1")],
        telemetry=samples,
        owners=[{"tenant": "A", "project": "A1"}],
    )
    e = compute(b, make_config(activity={"max_sample_gap_s": gap_s})).card_energy
    return sorted((str(r["gpu_id"]), f"{r['bucket']:%Y-%m-%d %H:%M}", r["joules"]) for r in e.to_dicts())


def test_kills_the_energy_of_a_lone_sample_lost_from_the_card_energy():
    """One sample in the period: g0 at 00:00, 400 W, max gap 900 s: 400 x 900 = 360,000 J drawn
    in the quarter hour from 00:00 (the energy chart's input, comp.card_energy).

    Mutant (`s.height == 1` taken for no samples): the card energy is empty.
    """
    got = card_energy([{"ts": ts(1, 0), "gpu_id": "g0", "util_pct": 50.0, "power_w": 400.0}], 900)
    assert got == [("g0", "2026-10-01 00:00", pytest.approx(360_000.0))]


def test_kills_card_energy_put_in_the_wrong_quarter_hour():
    """Max gap 600 s. g0 at 00:00, 00:10 and 00:20 at 360 W: 360 x 600 = 216,000 J each (the last
    runs to its cap, 00:30); g1 at 00:05 at 400 W: 240,000 J. By the quarter hour each sample
    starts in: g0 00:00 432,000 J, g0 00:15 216,000 J, g1 00:00 240,000 J.

    Mutant (quarter + first quarter in the key instead of quarter - first quarter): every bucket
    lands decades after the period.
    """
    samples = [{"ts": f"2026-10-01T00:{m:02d}:00Z", "gpu_id": "g0", "util_pct": 50.0, "power_w": 360.0}
               for m in (0, 10, 20)] + [{"ts": "2026-10-01T00:05:00Z", "gpu_id": "g1", "util_pct": 50.0,
                                         "power_w": 400.0}]
    assert card_energy(samples, 600) == [("g0", "2026-10-01 00:00", pytest.approx(432_000.0)),
                                         ("g0", "2026-10-01 00:15", pytest.approx(216_000.0)),
                                         ("g1", "2026-10-01 00:00", pytest.approx(240_000.0))]


def test_kills_a_busy_sample_counted_in_the_utilization_paid_for_idle_time():
    """A1 holds g0 00:00-02:00; hourly samples (max gap 1 h): 80 % at 00:00 (active at the 5 %
    threshold), 2 % at 01:00 (inactive). $82 "other" by utilization over the day: all of it on
    A1's held time (util-hours 0.80 + 0.02 = 0.82 -> $100 per util-hour).
    The inactive hour had 0.02 util-hours, so held idle (underutilized, 1 GPU-hour) costs
    82 x 0.02 / 0.82 = $2; the busy hour paid for work.

    Mutant (idle utilization = util x (1 + busy)): the busy hour's 0.80 counted twice as idle:
    82 x (1.60 + 0.02) / 0.82 = $162.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 2), "owner": "A1"}],
        telemetry=[{"ts": ts(1, 0), "gpu_id": "g0", "util_pct": 80.0}, {"ts": ts(1, 1), "gpu_id": "g0", "util_pct": 2.0}],
        owners=[{"tenant": "A", "project": "A1"}],
        costs=[{"cost_id": "u", "category": "other", "amount": 82.0, "driver": "utilization", "start": ts(1, 0),
                "end": ts(2, 0)}],
    )
    rep = report(b, activity={"max_sample_gap_s": 3600}, boundary=NO_POWER)
    held = {r["cause"]: (r["gpu_hours"], r["cost"]) for r in rep["idle"] if r["kind"] == "allocated"}
    assert held == {"underutilized": (pytest.approx(1.0), pytest.approx(2.0))}
    assert by(rep, "by_project", "project") == pytest.approx({"A1": 82.0})
    reconciled(rep, 82.0)


def test_kills_a_narrowed_store_source_that_widens_to_the_union():
    """A store source limited to cards g0 and g1, narrowed to g1 and g2 (a tenant's view of
    it): only g1 is in both.

    Mutant (the union instead of the intersection): g0, g1 and g2.
    """
    from pathlib import Path

    from cost_engine.telemetry import StoreTelemetry

    src = StoreTelemetry(Path("unused.duckdb"), ("g0", "g1")).only(["g1", "g2"])
    assert src.gpu_ids == ("g1",)
    assert StoreTelemetry(Path("unused.duckdb")).only(["g2", "g1"]).gpu_ids == ("g1", "g2")


def test_kills_a_held_card_read_without_its_samples():
    """HeldTelemetry limits a card's samples to the spans it was held: g0 held 01:00-03:00 has
    samples at 00:00, 01:00, 02:00, 03:00; reading it over the day gives 01:00 and 02:00 (03:00
    is the span's end, outside it). g1 has samples but no span: nothing.

    Mutant (the inner source read only for a card without spans): g0 gives nothing.
    """
    import polars as pl

    from cost_engine.contract import make_frame
    from cost_engine.telemetry import FrameTelemetry, HeldTelemetry

    tele = make_frame("telemetry", [{"ts": ts(1, h), "gpu_id": g, "util_pct": 50.0} for g in ("g0", "g1")
                                    for h in range(4)])
    spans = pl.DataFrame({"gpu_id": ["g0"], "t0": [ts(1, 1)], "t1": [ts(1, 3)]}).with_columns(
        pl.col("t0", "t1").str.to_datetime(time_zone="UTC", time_unit="us"))
    held = HeldTelemetry(FrameTelemetry(tele), spans)
    day = (datetime(2026, 10, 1, tzinfo=timezone.utc), datetime(2026, 10, 2, tzinfo=timezone.utc))
    assert [f"{t:%H:%M}" for t in held.card("g0", *day)["ts"]] == ["01:00", "02:00"]
    assert held.card("g1", *day).height == 0


def test_kills_the_held_spans_of_the_other_cards_handed_out():
    """A scoped view cuts a card's samples at the spans that card was held (views.card_timeline):
    g0 held 01:00-03:00, g1 held 05:00-06:00. held("g0") is g0's one span, 01:00-03:00.

    Mutant (HeldTelemetry.held: `gpu_id != ...`): g0 gets g1's span 05:00-06:00.
    """
    from cost_engine.telemetry import FrameTelemetry, HeldTelemetry

    spans = pl.DataFrame({"gpu_id": ["g0", "g1"], "t0": [ts(1, 1), ts(1, 5)], "t1": [ts(1, 3), ts(1, 6)]}).with_columns(
        pl.col("t0", "t1").str.to_datetime(time_zone="UTC", time_unit="us"))
    held = HeldTelemetry(FrameTelemetry(pl.DataFrame()), spans)
    assert [(f"{a:%H:%M}", f"{b:%H:%M}") for a, b in held.held("g0").rows()] == [("01:00", "03:00")]


def test_kills_back_to_back_holds_of_a_card_left_as_two_spans():
    """g0 held 00:00-02:00 by one allowed allocation and 02:00-04:00 by the next: the card was
    held without a break, so its merged span is one, 00:00-04:00 (a scoped timeline shows one
    band, not two cut at 02:00).

    Mutant (telemetry.merged_spans: a new span where an interval starts exactly when the earlier
    ones ended, `>=`): 00:00-02:00 and 02:00-04:00.
    """
    from cost_engine.telemetry import merged_spans

    iv = pl.DataFrame({"gpu_id": ["g0", "g0"], "t0": [DAY0, DAY0 + timedelta(hours=2)],
                       "t1": [DAY0 + timedelta(hours=2), DAY0 + timedelta(hours=4)]})
    assert merged_spans(iv).rows() == [("g0", DAY0, DAY0 + timedelta(hours=4))]


def test_kills_a_card_sampled_exactly_at_the_window_start_left_out_of_the_sampled_cards():
    """cards(start, end) lists the cards with a sample in [start, end): g0 sampled at 00:00
    exactly (the start), g1 at 05:00, g2 only at 06:00 (the end, outside). Over 00:00-06:00:
    g0 and g1.

    Mutants (FrameTelemetry.cards): `ts > start` leaves g0 out (the ledger would not cut its
    card-time at a bill's edges); `ts <= end` and `|` for `&` take g2 in.
    """
    from cost_engine.contract import make_frame
    from cost_engine.telemetry import FrameTelemetry

    tele = make_frame("telemetry", [{"ts": ts(1, h), "gpu_id": g, "util_pct": 50.0}
                                    for g, h in (("g0", 0), ("g1", 5), ("g2", 6))])
    got = FrameTelemetry(tele).cards(datetime(2026, 10, 1, tzinfo=timezone.utc), datetime(2026, 10, 1, 6, tzinfo=timezone.utc))
    assert got.to_list() == ["g0", "g1"]


def test_kills_a_held_card_with_one_sample_read_outside_its_span():
    """A scoped view of g0, held 01:00-03:00, which has one sample, at 00:00 (before the span):
    reading g0 over the day gives nothing.

    Mutant (HeldTelemetry.card: the read returned as it is when it has one sample, not none):
    the 00:00 sample, which the scoped user may not see.
    """
    from cost_engine.contract import make_frame
    from cost_engine.telemetry import FrameTelemetry, HeldTelemetry

    tele = make_frame("telemetry", [{"ts": ts(1, 0), "gpu_id": "g0", "util_pct": 50.0}])
    spans = pl.DataFrame({"gpu_id": ["g0"], "t0": [ts(1, 1)], "t1": [ts(1, 3)]}).with_columns(
        pl.col("t0", "t1").str.to_datetime(time_zone="UTC", time_unit="us"))
    day = (datetime(2026, 10, 1, tzinfo=timezone.utc), datetime(2026, 10, 2, tzinfo=timezone.utc))
    assert HeldTelemetry(FrameTelemetry(tele), spans).card("g0", *day).height == 0


def test_kills_one_held_interval_merged_into_no_span():
    """A scoped user whose tenant held g0 once, 01:00-03:00: its one span is 01:00-03:00.

    Mutant (telemetry.merged_spans: the empty answer given for one interval, not none): no
    span, so the user sees none of g0's telemetry.
    """
    from cost_engine.telemetry import merged_spans

    iv = pl.DataFrame({"gpu_id": ["g0"], "t0": [DAY0 + timedelta(hours=1)], "t1": [DAY0 + timedelta(hours=3)]})
    assert merged_spans(iv).rows() == [("g0", DAY0 + timedelta(hours=1), DAY0 + timedelta(hours=3))]


def test_kills_the_recharge_detail_dropped_at_exactly_the_limit(monkeypatch):
    """Model m is served by one allocation (s on g0, the whole day, one rate, no cut): one money
    row of $24. One project (A1) sent its requests: 1 model row x 1 caller = 1 recharged row.
    With the limit at exactly 1 row the detail is kept (the limit is the most rows kept in
    detail): the $24 moved to A1 still names allocation s, and no gap is said. At a limit of 0
    the row is summed first and the gap `recharge detail` says so.

    Mutant (tokens.recharge: coarse from the limit on, `>=`): at a limit of 1 the allocation is
    dropped from the moved row and the gap is said.
    """
    from cost_engine import tokens

    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 0,
                 "output_tokens": 100}])
    monkeypatch.setattr(tokens, "RECHARGE_DETAIL_ROWS", 1)
    comp = compute(b, make_config())
    moved = comp.money.filter(pl.col("origin").str.contains("+recharge", literal=True))
    assert moved.select("project", "allocation_id", "amount").rows() == [("A1", "s", pytest.approx(24.0))]
    assert not [g for g in comp.gaps if g[0] == "recharge detail"]
    monkeypatch.setattr(tokens, "RECHARGE_DETAIL_ROWS", 0)
    comp = compute(b, make_config())
    assert [g[0] for g in comp.gaps if g[0] == "recharge detail"] == ["recharge detail"]


def test_kills_the_recharge_rows_counted_as_model_rows_over_callers(monkeypatch):
    """Model m's one money row ($24) with two calling projects, A1 and B1 (100 output tokens
    each): 1 row x 2 callers = 2 recharged rows. At a limit of 2 the detail is kept; at a limit of
    1 the row is summed first and the gap `recharge detail` says so (A1 and B1 get $12 each
    either way).

    Mutant (tokens.recharge: model rows / callers = 0.5): at a limit of 1 the detail is kept and
    no gap is said.
    """
    from cost_engine import tokens

    b = served([{"request_id": f"r{i}", "ts": ts(1, 1), "owner": p, "model": "m", "input_tokens": 0,
                 "output_tokens": 100} for i, p in enumerate(("A1", "B1"))])
    for limit, detail in ((2, True), (1, False)):
        monkeypatch.setattr(tokens, "RECHARGE_DETAIL_ROWS", limit)
        comp = compute(b, make_config())
        moved = comp.money.filter(pl.col("origin").str.contains("+recharge", literal=True)).sort("project")
        assert moved.select("project", "amount").rows() == [("A1", pytest.approx(12.0)), ("B1", pytest.approx(12.0))]
        assert moved["allocation_id"].to_list() == (["s", "s"] if detail else [None, None])
        assert bool([g for g in comp.gaps if g[0] == "recharge detail"]) is not detail


def test_kills_the_error_share_of_a_model_with_one_request_unknown():
    """Model m answered one request, and it failed (status error): error share 1 / 1 = 1.0.

    Mutant (tokens.model_table: the share taken only above one request): unknown (null).
    """
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 10,
                 "output_tokens": 0, "status": "error"}])
    m = {r["model"]: r for r in report(b)["by_model"]}["m"]
    assert m["error_share"] == pytest.approx(1.0)


def test_kills_a_kilowatt_hour_of_3_600_001_joules_in_the_fleet_energy():
    """A1 holds g0 00:00-01:00; samples at 00:00 and 00:30 read 1,000 W (gap limit 30 min), so
    the held hour draws 1,000 W x 3,600 s = 3,600,000 J = exactly 1 kWh (server overhead 1, PUE
    1: facility 1 kWh too). Compared to 1e-12: a kWh off by one joule is 2.8e-7 off.

    Mutant (engine: J_PER_KWH = 3,600,001): 0.99999972 kWh.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 1), "owner": "A1"}],
                    telemetry=[{"ts": t, "gpu_id": "g0", "util_pct": 50.0, "power_w": 1000.0}
                               for t in (ts(1, 0), "2026-10-01T00:30:00Z")])
    t = report(b, activity={"max_sample_gap_s": 1800}, energy={"server_overhead": 1.0, "pue": 1.0})["totals"]
    assert t["energy_kwh_gpu"] == pytest.approx(1.0, rel=1e-12)
    assert t["energy_kwh_facility"] == pytest.approx(1.0, rel=1e-12)


def test_kills_the_cached_part_of_an_input_weighing_under_one_token_dropped():
    """Model m costs $24 (served). One request: 0 uncached and 1 cached input token, 1 output
    token; token weights input 1, cached 0.5, output 1. Weighted input 0.5 x 1 = 0.5, output 1:
    the input's share of the cost is 0.5 / 1.5 = 1/3 ($8), all of it on the cached token (its
    weight 0.5 of the input's 0.5): $8 / 1 cached token = $8,000,000 per million cached tokens.

    Mutant (tokens.model_table: the cached part taken only above 1 weighted input token): the
    cached part is 0, so $0 per million cached tokens.
    """
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 0,
                 "cached_input_tokens": 1, "output_tokens": 1}])
    rep = report(b, allocation={"token_weights": {"input": 1.0, "cached_input": 0.5, "output": 1.0}})
    m = {r["model"]: r for r in rep["by_model"]}["m"]
    assert m["cost_per_million_cached_input_tokens"] == pytest.approx(8_000_000.0)
    assert m["cost_per_million_output_tokens"] == pytest.approx(16_000_000.0)  # $16 / 1 output token


def test_kills_a_fleet_row_kept_idle_lost_when_idle_is_charged_to_owners():
    """g0 in pool p; A1 holds it 00:00-12:00 (no telemetry). $48 depreciation of p for the day by
    GPU-hours: A1 $24, p's idle $24. A $10 fleet-wide row (no pool) spread by measured energy
    meets no energy: it cannot be spread and is kept whole as idle. Idle charged proportionally:
    p's $24 idle goes to A1 (its only holder): A1 $48. The fleet row has no pool to follow, so it
    stays idle: input $58 = attributed $48 + idle $10.

    Mutant (engine.charge_idle_to_owners: a row without a pool taken for movable): the $10 is
    joined to no pool and vanishes: idle $0, $10 missing from the reconciliation.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 12), "owner": "A1"}],
                    costs=[{"cost_id": "dep", "category": "depreciation", "amount": 48.0, "pool": "p", "start": ts(1, 0),
                            "end": ts(2, 0)},
                           {"cost_id": "fac", "category": "facility", "amount": 10.0, "driver": "energy",
                            "start": ts(1, 0), "end": ts(2, 0)}])
    rep = report(b, allocation={"idle": "proportional"})
    assert by(rep, "by_project", "project") == pytest.approx({"A1": 48.0})
    assert rep["reconciliation"]["idle"] == pytest.approx(10.0)
    reconciled(rep, 58.0)


def test_kills_the_hours_with_tokens_and_the_cache_hit_rate_turned_upside_down():
    """Model m is served on g0 the whole day (one 24 h segment). One request at 01:00 with 3
    uncached and 1 cached input token. The model's day: the 01:00 hour saw a request, so
    1 GPU-hour with tokens, 23 without, occupancy 1/24; the cache hit rate is 1 / (3 + 1) = 0.25.
    The day's $24 over its 1 output token: $24,000,000 per million output tokens (to 1e-9).

    Mutants: tokens.model_trend splitting the held hours as f / alloc_h (each hour (1/24) / 24 =
    1/576 GPU-h, not 1/24 x 24 = 1); tokens.model_table's cache hit rate cached x input tokens
    (1 x 4 = 4); tokens.model_trend's per-million x 1,000,001 (1e-6 off).
    """
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 3,
                 "cached_input_tokens": 1, "output_tokens": 1}])
    rep = report(b)
    (day,) = rep["model_trend"]
    assert (day["gpu_hours_with_tokens"], day["gpu_hours_without_tokens"]) == (pytest.approx(1.0), pytest.approx(23.0))
    assert day["occupancy"] == pytest.approx(1 / 24)
    assert day["cost_per_million_output_tokens"] == pytest.approx(24_000_000.0, rel=1e-9)
    assert {r["model"]: r for r in rep["by_model"]}["m"]["cache_hit_rate"] == pytest.approx(0.25)


def test_kills_a_project_only_in_the_aliases_left_unnamed():
    """The owners table names A1 (tenant A); the aliases map the gateway key `k9` to project X,
    which no owner row names: X's tenant is unknown, and a gap says so.

    Mutant (engine.compute: the loop over such projects run zero times): no gap.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}], owners=[{"tenant": "A", "project": "A1"}],
                    aliases=[{"source": "gateway", "key": "k9", "project": "X"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 1), "owner": "A1"}])
    assert gaps(report(b), "ownership") == ["project 'X' appears only in aliases; its tenant is unknown"]


def test_kills_oversized_util_hours_scaled_by_100_instead_of_divided():
    """Job j1 holds g0 and g1 00:00-02:00 (5-min samples, the gap cap; threshold 5 %). g0 works at
    100 % the first hour and idles at 0 % the second; g1 runs at 2 % (inactive) both hours. So g1's
    first hour is oversized_request (idle while its sibling worked), and the second hour of both
    cards is underutilized. A $100 row of pool p by utilization over 00:00-02:00: util-hours
    g0 1 x 1.00 + 1 x 0 = 1, g1 2 x 0.02 = 0.04, total 1.04. g1 pays 100 x 0.04 / 1.04 =
    $3.846154, all for idle util-hours: 0.02 of them oversized ($1.923077), 0.02 underutilized
    ($1.923077); g0's idle hour had no utilization, so it pays nothing.

    Mutant (engine.enrich_segments: oversized util-hours x 100 instead of / 100): the oversized
    part is capped by all of g1's idle util-hours, so oversized_request $3.846154 and
    underutilized $0.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p", "node": "n0"}, {"gpu_id": "g1", "pool": "p", "node": "n1"}],
        allocations=[{"allocation_id": f"a-{g}", "gpu_id": g, "start": ts(1, 0), "end": ts(1, 2), "owner": "A1",
                      "job_id": "j1"} for g in ("g0", "g1")],
        telemetry=[{"ts": f"2026-10-01T{h:02d}:{m:02d}:00Z", "gpu_id": g,
                    "util_pct": (100.0 if h == 0 else 0.0) if g == "g0" else 2.0, "power_w": 300.0}
                   for g in ("g0", "g1") for h in (0, 1) for m in range(0, 60, 5)],
        costs=[{"cost_id": "u", "category": "other", "amount": 100.0, "driver": "utilization", "pool": "p",
                "start": ts(1, 0), "end": ts(1, 2)}],
    )
    rep = report(b, boundary=NO_POWER)
    held = {r["cause"]: (r["gpu_hours"], r["cost"]) for r in rep["idle"] if r["kind"] == "allocated"}
    assert held == {"oversized_request": (pytest.approx(1.0), pytest.approx(100 * 0.02 / 1.04)),
                    "underutilized": (pytest.approx(2.0), pytest.approx(100 * 0.02 / 1.04))}
    reconciled(rep, 100.0)


def test_kills_the_occupancy_of_a_model_held_under_an_hour_unknown():
    """Model m is served on g0 00:00-00:30 (0.5 GPU-h held); one request at 00:10. The only hour
    it was held saw a request: 0.5 GPU-h with tokens, 0 without, occupancy 0.5 / 0.5 = 1.

    Mutant (tokens.model_trend: occupancy only above 1 held GPU-hour): unknown (null).
    """
    b = served([{"request_id": "r1", "ts": "2026-10-01T00:10:00Z", "owner": "A1", "model": "m", "input_tokens": 1,
                 "output_tokens": 1}], allocation_end="2026-10-01T00:30:00Z")
    (day,) = report(b)["model_trend"]
    assert (day["gpu_hours_with_tokens"], day["gpu_hours_without_tokens"]) == (pytest.approx(0.5), 0.0)
    assert day["occupancy"] == pytest.approx(1.0)


def test_kills_the_tokens_per_joule_of_a_model_day_at_zero_joules_taken_as_infinite():
    """Model m is served on g0 all day and g0 reports 50 % at 0 W every 5 minutes: m drew a
    measured 0 J. A1 sent it 100 output tokens. Tokens per joule over 0 J is undefined: null in
    model_trend (the report prints null too), not infinity.

    Mutant (tokens.model_trend: tokens per joule where joules >= 0): 100 / 0 J = inf.
    """
    from cost_engine import tokens

    tele = [{"ts": DAY0 + timedelta(minutes=5 * i), "gpu_id": "g0", "util_pct": 50.0, "power_w": 0.0}
            for i in range(288)]
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 0,
                 "output_tokens": 100}], telemetry=tele)
    comp = compute(b, make_config())
    (day,) = tokens.model_trend(comp.money_before_recharge, comp.seg, comp.request_summary,
                                comp.request_hours).iter_rows(named=True)
    assert (day["joules"], day["output_tokens"]) == (0.0, 100)
    assert day["output_tokens_per_joule"] is None


def test_kills_the_last_microsecond_of_a_straddling_sample_looked_up_two_back():
    """g0's sample [00:00:00, 00:01:00) straddles an edge one microsecond before its end: interval
    e0 is [00:00:00, 00:00:59.999999), e1 [00:00:59.999999, 00:02:00). It splits into two pieces,
    59.999999 s on e0 and 0.000001 s on e1 (fractions of its 60 s).

    Mutant (activity.pieces: the sample's last instant taken as t_end - 2 us): that instant lies
    in e0, so the 1 us piece on e1 is lost.
    """
    from cost_engine import activity

    t0, t_edge = DAY0, DAY0 + timedelta(seconds=60) - timedelta(microseconds=1)
    sample = pl.DataFrame({"gpu_id": [0], "ts": [t0], "t_end": [t0 + timedelta(seconds=60)], "dt_s": [60.0],
                           "util_pct": [50.0], "joules": [600.0]},
                          schema_overrides={"gpu_id": pl.UInt32, "ts": pl.Datetime("us", "UTC"),
                                            "t_end": pl.Datetime("us", "UTC")})
    intervals = pl.DataFrame({"e_idx": [0, 1], "gpu_id": [0, 0], "t0": [t0, t_edge],
                              "t1": [t_edge, t0 + timedelta(minutes=2)]},
                             schema_overrides={"e_idx": pl.Int64, "gpu_id": pl.UInt32, "t0": pl.Datetime("us", "UTC"),
                                               "t1": pl.Datetime("us", "UTC")})
    simple, spread = activity.pieces(sample, intervals)
    assert simple.height == 0
    got = spread.sort("e_idx").select("e_idx", "ov_s").rows()
    assert [e for e, _ in got] == [0, 1]
    assert got[0][1] == pytest.approx(59.999999, abs=1e-9) and got[1][1] == pytest.approx(1e-6, abs=1e-12)


def test_kills_the_occupancy_of_a_model_no_card_held_taken_as_nan():
    """Model m is served on g0 all day; A1 also sent 100 output tokens to model m3, which no card
    served that day: m3 held 0 GPU-h, with or without tokens, so its occupancy is unknown (null),
    in the library's model_trend as in the report.

    Mutant (tokens.model_trend: occupancy where held >= 0 h): 0 h / 0 h = NaN from model_trend
    (the report's guard still prints null).
    """
    from cost_engine import tokens

    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m3", "input_tokens": 0,
                 "output_tokens": 100}])
    comp = compute(b, make_config())
    t = tokens.model_trend(comp.money_before_recharge, comp.seg, comp.request_summary, comp.request_hours)
    m3 = t.filter(pl.col("model") == "m3").row(0, named=True)
    assert (m3["gpu_hours_with_tokens"], m3["gpu_hours_without_tokens"], m3["output_tokens"]) == (0.0, 0.0, 100)
    assert m3["occupancy"] is None


def test_kills_sampled_cards_looked_for_from_a_gap_after_the_period_start():
    """The bundle of the store test above, from frames, with a gap limit of 5 h: A1 holds g0
    00:00-04:00, hourly samples 00:00-04:00 at 1000 W until 02:00 and 0 W after. g0 is a sampled
    card (its samples fall in [period start - 5 h, period end)), so its card-time is cut at the
    $8 power bill's start (02:00): the bill meets no energy in 02:00-04:00 and stays idle ("cost
    not spread"); A1 pays its measured 2 kWh: 2 x 1.3 x 1.2 = 3.12 kWh x $0.12 = $0.3744.

    Mutant (engine.compute: sampled cards looked for from period start + 5 h): no sample lies in
    [05:00, end), g0 is not cut at 02:00, and the bill lands on A1.
    """
    b = bill_after_the_draw()
    rep = report(b, activity={"max_sample_gap_s": 5 * 3600})
    assert by(rep, "by_project", "project") == pytest.approx({"A1": 0.3744})
    assert any("bill" in d for d in gaps(rep, "cost not spread"))
    reconciled(rep, 8.3744)


def test_kills_more_than_ten_counter_resets_listed():
    """g0 (held by A1 all day) reports its energy counter every hour 00:00-22:00 (23 samples),
    alternating 1,000 J and 500 J: it goes down at 01:00, 03:00, ..., 21:00, 11 resets. The gaps
    list the first 10 (each names its sample), no more.

    Mutant (engine.compute: the first 11 listed): 11 lines.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(2, 0), "owner": "A1"}],
                    telemetry=[{"ts": ts(1, h), "gpu_id": "g0", "util_pct": 50.0, "energy_j": 500.0 if h % 2 else 1000.0}
                               for h in range(23)])
    resets = gaps(report(b, activity={"max_sample_gap_s": 3600}), "energy counter reset")
    assert len(resets) == 10 and resets[0].startswith("g0 at 2026-10-01 01:00:00Z")


def test_kills_the_telemetry_stage_of_a_memo_hit_read_from_the_wrong_slot():
    """A dashboard rule change reuses the ledger and telemetry stage kept in its memo. A1 holds
    g0 00:00-12:00 at 100 % (hourly samples, gap 1 h): 12 active GPU-hours. $24 depreciation of p
    for the day: A1 12 h x $1 = $12. Computed twice with one memo, the second time with idle
    charged to owners (a rule the memo's key leaves out): the same 12 active hours, and A1 pays
    $24 (its $12 and the pool's $12 idle).

    Mutant (engine.compute: the telemetry stage taken from another slot of the memo entry): the
    second run fails.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 12), "owner": "A1"}],
                    telemetry=[{"ts": ts(1, h), "gpu_id": "g0", "util_pct": 100.0} for h in range(12)],
                    costs=[{"cost_id": "dep", "category": "depreciation", "amount": 24.0, "pool": "p",
                            "start": ts(1, 0), "end": ts(2, 0)}])
    memo: dict = {}
    first = build_report(compute(b, make_config(activity={"max_sample_gap_s": 3600}), memo=memo))
    assert [k[0] for k in memo if k[0] == "telemetry stage"] == ["telemetry stage"]
    second = build_report(compute(b, make_config(activity={"max_sample_gap_s": 3600}, allocation={"idle": "proportional"}),
                                  memo=memo))
    assert (first["totals"]["active_gpu_hours"], second["totals"]["active_gpu_hours"]) == (pytest.approx(12.0),) * 2
    assert (by(first, "by_project", "project"), by(second, "by_project", "project")) == (
        {"A1": pytest.approx(12.0)}, {"A1": pytest.approx(24.0)})


def test_kills_rates_of_a_model_without_requests_or_input_made_nan():
    """Model m is served all day ($24) and sent one request of 5 output tokens and no input;
    model n is served too (on g1, 00:00-12:00) and sent nothing. In the engine's model table (read
    by the dashboard): m's cache hit rate has no input to divide, n's error share no request:
    both unknown (null), never NaN.

    Mutants (tokens.model_table: `in_tok >= 0`, `requests >= 0`): 0 / 0 = NaN.
    """
    n_alloc = {"allocation_id": "n", "gpu_id": "g1", "start": ts(1, 0), "end": ts(1, 12), "owner": "svc",
               "workload": "inference", "model": "n"}
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 0,
                 "output_tokens": 5}], also=[n_alloc])
    models = {r["model"]: r for r in compute(b, make_config()).models.iter_rows(named=True)}
    assert models["m"]["cache_hit_rate"] is None and models["m"]["error_share"] == 0.0
    assert models["n"]["error_share"] is None and models["n"]["allocated_gpu_hours"] == pytest.approx(12.0)


def test_kills_a_model_day_without_serving_cards_filled_with_one_dollar():
    """Model x is sent one request (10 output tokens) and no allocation serves it. Its trend day
    has no serving money and no held hours: cost $0, 0 GPU-hours with and without tokens, and no
    occupancy (nothing held).

    Mutant (tokens.model_trend: missing cost and hours filled with 1): $1, 1 GPU-h each, and
    $1 / 10 tokens = $100,000 per million output tokens.
    """
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "x", "input_tokens": 0,
                 "output_tokens": 10}])
    day = {r["model"]: r for r in report(b)["model_trend"]}["x"]
    assert (day["cost"], day["gpu_hours_with_tokens"], day["gpu_hours_without_tokens"]) == (0.0, 0.0, 0.0)
    assert day["occupancy"] is None and day["cost_per_million_output_tokens"] == 0.0


def test_kills_over_allocated_hours_printed_from_hours_of_3_601_seconds():
    """A1 and B1 both hold g0 the whole day at share 1: its shares sum to 2 for 86,400 s = 24 h,
    printed as 24.00 h.

    Mutant (engine.compute: hours as seconds / 3,601): 86,400 / 3,601 = 23.99 h.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": o, "gpu_id": "g0", "start": ts(1, 0), "end": ts(2, 0), "owner": o}
                                 for o in ("A1", "B1")])
    assert gaps(report(b), "over-allocation") == [
        "g0: shares sum to 2 for 24.00 h from 2026-10-01 00:00Z; split pro rata"]


def test_kills_six_cards_without_energy_all_named():
    """Six cards g0..g5, each held by A1 00:00-01:00 and sampled at 00:00 with a utilization and
    no power or energy reading: the gap counts 6 cards and names the first 5 (g0 to g4).

    Mutant (engine.compute: the first 6 named): g5 named too.
    """
    cards = [f"g{i}" for i in range(6)]
    b = make_bundle(inventory=[{"gpu_id": g, "pool": "p"} for g in cards],
                    allocations=[{"allocation_id": g, "gpu_id": g, "start": ts(1, 0), "end": ts(1, 1), "owner": "A1"}
                                 for g in cards],
                    telemetry=[{"ts": ts(1, 0), "gpu_id": g, "util_pct": 50.0} for g in cards])
    assert gaps(report(b, activity={"max_sample_gap_s": 3600}), "energy unknown") == [
        "6 cards report no power or energy counter for some samples: g0, g1, g2, g3, g4"]


def test_kills_the_model_table_sorted_cheapest_first():
    """Model m is served all day on g0 ($24), model n 00:00-12:00 on g1 ($12). The engine's model
    table (the dashboard's Models view reads it as it is) lists the costliest first: m, n.

    Mutant (tokens.model_table: cost ascending): n, m.
    """
    n_alloc = {"allocation_id": "n", "gpu_id": "g1", "start": ts(1, 0), "end": ts(1, 12), "owner": "svc",
               "workload": "inference", "model": "n"}
    models = compute(served([], also=[n_alloc]), make_config()).models
    assert models.select("model", "cost").rows() == [("m", pytest.approx(24.0)), ("n", pytest.approx(12.0))]


def test_kills_the_phase_split_of_a_request_under_one_millisecond_dropped():
    """Model m costs $24 (served). One request: 1 input and 1 output token, prefill 0.25 ms and
    decode 0.75 ms; the input/output split by phase time. Input's share 0.25 / (0.25 + 0.75) =
    0.25: $6 over 1 input token = $6,000,000 per million input tokens, $18 over the output token.

    Mutant (tokens.model_table: phase times used only above 1 ms in all): the split falls back
    to token weights, 1 x 1 / (1 x 1 + 4 x 1) = 0.2: $4,800,000 per million input tokens.
    """
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 1,
                 "output_tokens": 1, "prefill_ms": 0.25, "decode_ms": 0.75}])
    m = {r["model"]: r for r in report(b, allocation={"token_split": "phase_time"})["by_model"]}["m"]
    assert m["cost_per_million_input_tokens"] == pytest.approx(6_000_000.0)
    assert m["cost_per_million_output_tokens"] == pytest.approx(18_000_000.0)


def test_kills_a_store_without_a_telemetry_table_that_counts_one_row(tmp_path):
    """The Data page's accepted telemetry rows of a store whose telemetry table is missing
    (made before it existed, or dropped by hand): 0.

    Mutant (telemetry store reader: `count` gives 1 without a table): "1 row of telemetry".
    """
    import duckdb

    from cost_engine.views_data import telemetry_rows

    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 2), "owner": "A1"}],
                    telemetry=[{"ts": ts(1, 0), "gpu_id": "g0", "util_pct": 50.0}])
    db, run = stored(tmp_path, b)
    assert telemetry_rows(run()) == 1  # with its table: the one sample
    with duckdb.connect(str(db)) as con:
        con.execute("DROP TABLE telemetry")
    assert telemetry_rows(run()) == 0


def test_kills_a_sample_without_energy_counted_as_one_joule_of_oversized_energy():
    """Job j1 holds g0 and g1 00:00-02:00; hourly samples (max gap 1 h), threshold 5 %.
    g1: 100 % at 00:00 (busy), 0 % at 01:00, 200 W. g0: 0 % at 00:00 with no power or energy
    reading, 0 % at 01:00 at 100 W.
    g0 00-01 is idle while g1 worked: oversized_request, 1 h, with no energy reading: 0 kWh of
    the 0.1 kWh g0 drew while idle. g0 01-02 (100 W: 0.1 kWh) and g1 01-02 (200 W: 0.2 kWh) are
    idle with no sibling busy: underutilized 2 h, 0.3 kWh.

    Mutant (a missing reading filled with 1 J instead of 0 in the oversized joules): 1 J =
    1 / 3,600,000 kWh moves from underutilized to oversized.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p", "node": "n0"}, {"gpu_id": "g1", "pool": "p", "node": "n1"}],
        allocations=[{"allocation_id": f"a-{g}", "gpu_id": g, "start": ts(1, 0), "end": ts(1, 2), "owner": "A1",
                      "job_id": "j1"} for g in ("g0", "g1")],
        telemetry=[{"ts": ts(1, 0), "gpu_id": "g1", "util_pct": 100.0, "power_w": 200.0},
                   {"ts": ts(1, 1), "gpu_id": "g1", "util_pct": 0.0, "power_w": 200.0},
                   {"ts": ts(1, 0), "gpu_id": "g0", "util_pct": 0.0},
                   {"ts": ts(1, 1), "gpu_id": "g0", "util_pct": 0.0, "power_w": 100.0}],
        owners=[{"tenant": "A", "project": "A1"}],
    )
    rep = report(b, activity={"max_sample_gap_s": 3600}, boundary=NO_POWER)
    held = {r["cause"]: (r["gpu_hours"], r["energy_kwh_gpu"]) for r in rep["idle"] if r["kind"] == "allocated"}
    assert held == {"oversized_request": (pytest.approx(1.0), 0.0), "underutilized": pytest.approx((2.0, 0.3))}


def test_kills_the_outside_count_taken_against_the_wrong_cards():
    """interval_activity counts the samples of cards outside `known` (default: the intervals'
    cards). Inventory g0 (A1 holds it 00:00-02:00); telemetry of g0 and of g9, which is in no
    inventory, two samples each. Against the intervals' cards (g0): 2 samples outside. Against
    known = {g0, g9} (a caller that knows g9): 0. The engine says "2 samples of cards outside the
    inventory ignored".

    Mutant (`known is not None` for `is None`): `known` is ignored when given (2, not 0) and
    read when absent (no list at all).
    """
    import polars as pl

    from cost_engine.activity import interval_activity

    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 2), "owner": "A1"}],
        telemetry=[{"ts": ts(1, h), "gpu_id": g, "util_pct": 50.0, "power_w": 300.0} for h in (0, 1)
                   for g in ("g0", "g9")],
    )
    cfg = make_config(activity={"max_sample_gap_s": 3600})
    comp = compute(b, cfg)
    assert ("telemetry", "2 samples of cards outside the inventory or out of service ignored") in comp.gaps
    args = (comp.telemetry, comp.ledger.intervals, cfg.activity, comp.period.start, comp.period.end)
    assert interval_activity(*args).outside == 2
    assert interval_activity(*args, known=pl.Series(["g0", "g9"])).outside == 0


def test_kills_the_fleet_average_power_over_a_second_too_many_per_hour():
    """g0 held all day, hourly samples at 400 W (max gap 1 h): 400 x 86,400 s = 34,560,000 J over
    the 24 h period: average power 34,560,000 / (24 x 3,600) = 400 W.

    Mutant (an hour of 3,601 s): 34,560,000 / 86,424 = 399.89 W.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(2, 0), "owner": "A1"}],
        telemetry=[{"ts": ts(1, h), "gpu_id": "g0", "util_pct": 50.0, "power_w": 400.0} for h in range(24)],
    )
    assert report(b, activity={"max_sample_gap_s": 3600})["totals"]["avg_power_w"] == pytest.approx(400.0)


def test_kills_a_batch_job_naming_a_model_counted_as_serving_it():
    """served: svc's inference allocation of model m on g0 costs $24 (all day at $1/h). B1 also
    runs a batch_inference job on g1 00:00-12:00 that names model m ($12 at $1/h): the by_model
    table counts only inference allocations as serving a model: m costs $24 over 24 GPU-hours.

    Mutant (serving = inference OR a model named): m costs $36 over 36 GPU-hours.
    """
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 100,
                 "output_tokens": 0}],
               also=[{"allocation_id": "batch", "gpu_id": "g1", "start": ts(1, 0), "end": ts(1, 12), "owner": "B1",
                      "workload": "batch_inference", "model": "m"}])
    m = {r["model"]: r for r in report(b)["by_model"]}["m"]
    assert (m["cost"], m["allocated_gpu_hours"]) == (pytest.approx(24.0), pytest.approx(24.0))


def test_kills_average_power_of_a_model_held_at_share_zero_made_not_a_number():
    """Model m's allocation on g0 00:00-02:00 has share 0 (the contract allows it): 0 GPU-hours
    held, while g0's samples (300 W) cover the time. Average power per held GPU is 0 J / 0 s:
    unknown, null in the engine's model table.

    Mutant (`_held_s >= 0`): 0 / 0 = NaN in comp.models.
    """
    b = served([], allocation_end=ts(1, 2), share=0.0,
               telemetry=[{"ts": ts(1, h), "gpu_id": "g0", "util_pct": 50.0, "power_w": 300.0} for h in (0, 1)])
    row = compute(b, make_config(activity={"max_sample_gap_s": 3600})).models.row(0, named=True)
    assert (row["model"], row["allocated_gpu_hours"]) == ("m", 0.0)
    assert row["avg_power_w_per_gpu"] is None


def test_kills_unallocated_hours_of_at_least_one_for_a_fully_held_fleet():
    """g0 held by A1 all day: 24 GPU-hours available, 24 allocated, so 24 - 24 = 0 unallocated
    GPU-hours (never below 0).

    Mutant (the floor of unallocated hours 1.0 instead of 0.0): 1 unallocated GPU-hour.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(2, 0), "owner": "A1"}],
    )
    t = report(b)["totals"]
    assert (t["available_gpu_hours"], t["allocated_gpu_hours"]) == (pytest.approx(24.0), pytest.approx(24.0))
    assert t["unallocated_gpu_hours"] == 0.0


def test_kills_a_rate_of_one_dollar_a_second_before_the_pool_has_a_rate():
    """g0 (pool p, no telemetry) is free all day; the pool has a rate only from 12:00, $2/h: $24
    of idle, all of it 12:00-24:00. A maintenance window of the whole pool 00:00-06:00 wins those
    6 h (6 GPU-hours) but no rate is in force then: it costs $0. No demand holds 06:00-24:00
    (18 GPU-hours) and pays the whole 12 x $2 = $24.

    Mutant (intervals.WeightedPrecedence.of: a breakpoint before the pool's first rate takes the
    rate 1.0 instead of 0.0, i.e. $1 a second): the maintenance hours cost 6 x 3,600 = $21,600 and
    no demand 06:00-12:00 another $21,600; idle no longer reconciles with the $24 of input.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}], allocations=[],
                    rates=[{"pool": "p", "price_per_gpu_hour": 2.0, "start": ts(1, 12), "end": ts(2, 0)}],
                    events=[{"start": ts(1, 0), "end": ts(1, 6), "pool": "p", "kind": "maintenance"}])
    rep = report(b)
    assert idle_costs(rep) == pytest.approx({("unallocated", "maintenance"): 0.0, ("unallocated", "no_demand"): 24.0})
    assert {r["cause"]: r["gpu_hours"] for r in rep["idle"]} == pytest.approx({"maintenance": 6.0, "no_demand": 18.0})
    reconciled(rep, 24.0)


def test_kills_an_inferred_period_one_day_too_long():
    """No period in the config: the period is the whole UTC days the allocations cover. The only
    allocation runs 2026-10-01 03:00-05:00, so the period is 10-01 00:00 to 10-02 00:00: g0 (rate
    $1/h) is available 24 GPU-hours and costs $24 (2 h held by A1: $2; 22 h idle: $22).

    Mutant (ledger.resolve_period: a last day that ends inside a day extended by 2 days, not 1):
    the period runs to 10-03 00:00, 48 available GPU-hours, $48.
    """
    from cost_engine.config import parse_config

    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 3), "end": ts(1, 5), "owner": "A1"}],
                    rates=[{"pool": "p", "price_per_gpu_hour": 1.0, "start": ts(1, 0), "end": ts(5, 0)}])
    comp = compute(b, parse_config({}))
    assert (comp.period.start, comp.period.end) == (datetime(2026, 10, 1, tzinfo=timezone.utc),
                                                   datetime(2026, 10, 2, tzinfo=timezone.utc))
    rep = build_report(comp)
    assert rep["totals"]["available_gpu_hours"] == pytest.approx(24.0)
    assert by(rep, "by_project", "project") == pytest.approx({"A1": 2.0})
    reconciled(rep, 24.0)


def test_kills_a_gap_list_of_twenty_one_unspread_rows():
    """25 shared rows of $1 each, spread by tokens over the day, and not one request: none can be
    spread, all $25 stay in idle ("unspread"), and the gaps name the first 20 of them by cost id,
    one line each (a list that names every row would bury the report's other gaps at fleet
    scale). This test also found that the 20 named were any 20 (the rows were not sorted).

    Mutant (allocation._spread_by_project: the first 21 named): 21 "cost not spread" lines.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 1), "owner": "A1"}],
                    costs=[{"cost_id": f"t{i:02d}", "category": "software", "amount": 1.0, "driver": "tokens",
                            "start": ts(1, 0), "end": ts(2, 0)} for i in range(25)])
    rep = report(b)
    lines = [g["detail"] for g in rep["gaps"] if g["what"] == "cost not spread"]
    assert lines == [f"cost t{i:02d}: no tokens during its span; kept as idle" for i in range(20)]
    assert rep["reconciliation"]["idle"] == pytest.approx(25.0)
    reconciled(rep, 25.0)


def test_kills_a_cost_rate_for_a_row_with_no_quantity():
    """Pool p's only card g0 is in service from 12:00. Two network rows of pool p by capacity
    hours: n0 ($10, 00:00-12:00) meets no capacity at all, so it cannot be spread and stays in
    idle; n1 ($12, 12:00-24:00) lands on A1, who holds g0 12:00-24:00 ($1 per capacity-hour).
    Lineage of A1 finds n1's $12 and nothing of n0.

    Mutant (allocation.spread_costs: a price per unit kept for rows with no quantity, Q >= 0):
    n0's price is $10 / 0 = inf; the running integral of pool p's prices is inf from 00:00 on, so
    every later segment's integral is inf - inf = NaN and lineage loses A1's $12 of n1.
    """
    from cost_engine import lineage

    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p", "in_service_start": ts(1, 12)}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 12), "end": ts(2, 0), "owner": "A1"}],
                    costs=[{"cost_id": "n0", "category": "network", "amount": 10.0, "pool": "p",
                            "driver": "capacity_hours", "start": ts(1, 0), "end": ts(1, 12)},
                           {"cost_id": "n1", "category": "network", "amount": 12.0, "pool": "p",
                            "driver": "capacity_hours", "start": ts(1, 12), "end": ts(2, 0)}])
    comp = compute(b, make_config())
    ex = lineage.explain(comp, project="A1")
    assert {r["cost_id"]: r["cost"] for r in ex.costs.iter_rows(named=True)} == pytest.approx({"n1": 12.0})
    assert ex.total_cost == pytest.approx(12.0)
    rep = build_report(comp)
    assert by(rep, "by_project", "project") == pytest.approx({"A1": 12.0})
    reconciled(rep, 22.0)


# ---------------------------------------------------------------- holdout 2 (issue 25)


def test_kills_a_ledger_built_without_cuts_that_fails():
    """build_ledger without `cuts` (its default): one card g0 in service the whole day, A1 holds it
    06:00-12:00. The card is cut at its service edges, the allocation's edges and the midnights:
    [00-06) free 6 card-hours, [06-12) A1 6, [12-24) free 12; nothing over-allocated.

    Mutant (ledger.build_ledger: `cuts is not None or cuts.height`): asks None for its height
    and fails.
    """
    from cost_engine.ledger import build_ledger, resolve_period

    cfg = make_config()
    period = resolve_period(cfg, None)
    cards = pl.DataFrame({"gpu_id": ["g0"], "pool": ["p"], "node": ["n0"], "accelerator": ["H100"],
                          "capacity": [1.0], "svc_start": [DAY0], "svc_end": [DAY0 + timedelta(days=1)]})
    alloc = pl.DataFrame({"allocation_id": ["a"], "gpu_id": ["g0"], "start": [DAY0 + timedelta(hours=6)],
                          "end": [DAY0 + timedelta(hours=12)], "share": [1.0]})
    led = build_ledger(cards, True, alloc, period)
    seg = led.segments.sort("t0")
    assert [(r["t0"].hour, r["allocation_id"], r["cap_h"]) for r in seg.iter_rows(named=True)] == [
        (0, None, 6.0), (6, "a", 6.0), (12, None, 12.0)]
    assert led.conflicts.height == 0


def test_kills_a_cost_row_touching_the_period_start_kept_as_unspread():
    """A $30 network row of pool p by capacity hours, 2026-09-30 12:00 to 2026-10-01 00:00, ends
    exactly where the period starts: it lies outside the period and counts 0, and the gaps say
    so; nothing else names it. A $24 row over the day lands on A1, who holds g0 all day: $24.

    Mutant (allocation.spread_costs keeps rows with ce >= cs): the clipped row [00:00, 00:00)
    is kept, meets no capacity in its 0 s span and is also named "cost not spread".
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(2, 0), "owner": "A1"}],
                    costs=[{"cost_id": "before", "category": "network", "amount": 30.0, "pool": "p",
                            "driver": "capacity_hours", "start": "2026-09-30T12:00:00Z", "end": ts(1, 0)},
                           {"cost_id": "day", "category": "network", "amount": 24.0, "pool": "p",
                            "driver": "capacity_hours", "start": ts(1, 0), "end": ts(2, 0)}])
    rep = report(b)
    assert by(rep, "by_project", "project") == pytest.approx({"A1": 24.0})
    assert [g["what"] for g in rep["gaps"] if "before" in g["detail"]] == ["costs outside the period"]
    assert gaps(rep, "cost not spread") == []
    reconciled(rep, 24.0)


def test_kills_measured_energy_charged_beside_a_power_bill_on_one_segment():
    """A1 holds g0 00:00-01:00 at 1000 W (one sample at 00:00, a 0 W sample at 01:00; gap limit
    1 h): 1 kWh of GPU energy, the only segment with energy. A $5 power bill of pool p over the
    day is spread by energy: all of it on A1. The bill already pays for that energy, so the
    measured energy (1 x 1.3 x 1.2 = 1.56 kWh x $0.12 = $0.1872) is not charged again: A1 $5.

    Mutant (allocation._measured_energy: no bill coverage looked up when exactly one segment has
    energy, `used.height == 1`): A1 pays $5 + $0.1872 = $5.1872.
    """
    tele = [{"ts": ts(1, 0), "gpu_id": "g0", "util_pct": 50.0, "power_w": 1000.0},
            {"ts": ts(1, 1), "gpu_id": "g0", "util_pct": 0.0, "power_w": 0.0}]
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 1), "owner": "A1"}],
                    telemetry=tele,
                    costs=[{"cost_id": "bill", "category": "power", "amount": 5.0, "pool": "p", "driver": "energy",
                            "start": ts(1, 0), "end": ts(2, 0)}])
    rep = report(b, activity={"max_sample_gap_s": 3600})
    assert by(rep, "by_project", "project") == pytest.approx({"A1": 5.0})
    reconciled(rep, 5.0)


def test_kills_idle_classified_without_cards_that_fails():
    """idle.classify without `cards` (its default) finds the cards of node-scoped events from the
    segments themselves. g0 (node n0) is free all day with maintenance on node n0 02:00-06:00:
    4 h maintenance and 20 h no demand, the same pieces as with the ledger's cards.

    Mutant (idle.classify: `if not cards is None`): keeps cards None and fails on the node join.
    """
    from cost_engine import idle

    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p", "node": "n0"}],
                    events=[{"start": ts(1, 2), "end": ts(1, 6), "kind": "maintenance", "node": "n0"}])
    comp = compute(b, make_config())
    args = (comp.seg, comp.bundle["events"], comp.bundle["queue"], comp.period)
    pieces = idle.classify(*args)
    hours = pieces.group_by("cause").agg(pl.col("gpu_hours").sum())
    assert dict(hours.iter_rows()) == pytest.approx({"maintenance": 4.0, "no_demand": 20.0})
    assert pieces.sort("s_idx", "cause").equals(idle.classify(*args, comp.ledger.cards).sort("s_idx", "cause"))


def test_kills_active_hours_per_hour_divided_by_the_part_in_the_hour():
    """A1 holds g0 00:30-02:00 at 80 % (samples every 30 min from 00:30, a 0 % sample at 02:00;
    gap limit 1 h): 1.5 active hours on one segment [00:30, 02:00). Per hour, active time is
    taken as spread evenly over the segment: hour 00 gets 1/3 of it (0.5 h), hour 01 2/3 (1.0 h).

    Mutant (idle.capacity_over_time: active_h / f): 1.5 / (1/3) = 4.5 h in hour 00, 2.25 h in 01.
    """
    from cost_engine.idle import capacity_over_time

    tele = [{"ts": ts(1, h), "gpu_id": "g0", "util_pct": 80.0, "power_w": 300.0} for h in (0.5, 1.0, 1.5)]
    tele.append({"ts": ts(1, 2), "gpu_id": "g0", "util_pct": 0.0, "power_w": 60.0})
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0.5), "end": ts(1, 2), "owner": "A1"}],
                    telemetry=tele)
    cap = capacity_over_time(compute(b, make_config(activity={"max_sample_gap_s": 3600})).seg).sort("bucket")
    assert cap["active_gpu_hours"].to_list()[:3] == pytest.approx([0.5, 1.0, 0.0])
    assert cap["allocated_gpu_hours"].to_list()[:3] == pytest.approx([0.5, 1.0, 0.0])


def test_kills_an_allocation_ratio_of_zero_over_zero():
    """Pool p's only card has capacity 0 (a placeholder in the inventory): each hour has 0
    available GPU-hours, so its allocation ratio is unknown (null), never 0 / 0.

    Mutant (idle.capacity_over_time: ratio when available >= 0): 0 / 0 = NaN, a non-finite figure.
    """
    from cost_engine.idle import capacity_over_time

    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p", "capacity": 0.0}])
    cap = capacity_over_time(compute(b, make_config()).seg)
    assert cap.height == 24
    assert cap["available_gpu_hours"].sum() == 0.0
    assert cap["allocation_ratio"].null_count() == 24


def test_kills_tokens_that_subtract_cached_input():
    """Model m costs $24 (served). One request of A1: 100 input, 40 cached input and 60 output
    tokens, status ok and no latency: 200 tokens in all, all good. Per million good tokens:
    $24 / 200 x 1e6 = $120,000, for the model and for the fleet; the model's daily trend counts
    200 tokens on 10-01.

    Mutants (tokens._resolve_batch: input - cached + output): 120 tokens, $200,000 per M good tokens;
    (report.totals: the fleet's good-token million taken as 1,000,001): $120,000.12, so the fleet's
    figure is compared at 1e-12.
    """
    rep = report(served([{"request_id": "r", "ts": ts(1, 2), "owner": "A1", "model": "m", "input_tokens": 100,
                          "cached_input_tokens": 40, "output_tokens": 60}]))
    m = {r["model"]: r for r in rep["by_model"]}["m"]
    assert m["good_tokens"] == 200
    assert m["cost_per_million_good_tokens"] == pytest.approx(120_000.0)
    assert rep["totals"]["good_tokens"] == 200
    assert rep["totals"]["cost_per_million_good_tokens"] == pytest.approx(120_000.0, rel=1e-12)
    assert [(r["day"], r["tokens"]) for r in rep["model_trend"]] == [("2026-10-01", 200)]


def test_kills_a_missing_phase_time_unnamed_for_a_model_with_one_request():
    """Split by phase time (the default); model m (served, $24) has one request without prefill or decode time:
    its split falls back to token weights, and the gaps name m.

    Mutant (tokens.model_table: the gap only for models with more than one request): no gap.
    """
    rep = report(served([{"request_id": "r", "ts": ts(1, 2), "owner": "A1", "model": "m", "input_tokens": 100,
                          "output_tokens": 100}]))
    assert gaps(rep, "phase time missing") == ["input/output split fell back to token weights for some requests of: m"]


def test_kills_no_price_per_million_for_a_model_with_one_token():
    """Model m costs $24 (served); its one request has 0 input and 1 output token. The input
    weight is 0, so the output carries all of it: $24 / 1 token x 1e6 = $24,000,000 per million
    output tokens, and per million tokens.

    Mutant (tokens.model_table: a price per million only above 1 token): both unknown.
    """
    rep = report(served([{"request_id": "r", "ts": ts(1, 2), "owner": "A1", "model": "m", "input_tokens": 0,
                          "output_tokens": 1}]))
    m = {r["model"]: r for r in rep["by_model"]}["m"]
    assert m["cost_per_million_output_tokens"] == pytest.approx(24_000_000.0)
    assert m["cost_per_million_tokens"] == pytest.approx(24_000_000.0)


def test_kills_a_model_day_without_requests_counted_as_one_token():
    """Model m is served all day ($24) and nobody calls it: its trend row for 10-01 has 0 output
    tokens and 0 tokens, so no price per million output tokens (null); it has no telemetry, so its
    energy is unknown (null), not 0 J.

    Mutant (tokens.model_trend: a day without requests filled with 1 token): $24 / 1 x 1e6 =
    $24,000,000 per million output tokens.
    """
    (row,) = report(served([]))["model_trend"]
    assert (row["day"], row["cost"], row["output_tokens"], row["tokens"]) == ("2026-10-01", 24.0, 0, 0)
    assert row["cost_per_million_output_tokens"] is None
    assert row["joules"] is None and row["output_tokens_per_joule"] is None


def test_kills_busy_siblings_matched_on_the_exact_instant_instead_of_the_minute():
    """Job J holds g0 and g1 00:00-00:10 (threshold 5 %, gap limit 120 s). g0 is sampled on each
    minute at 90 %, g1 at half past each minute at 0 %: g1 covers 00:00:30-00:10, 9.5 min, all
    inactive. In each of those minutes its sibling g0 was busy, so all of it is oversized
    request: 9.5 / 60 = 0.158333 GPU-hours, and none underutilized.

    Mutant (activity._oversized: the minute as ts / 60 s, not floored): g1's samples fall on
    minute m + 0.5, never g0's m: 0.158333 h underutilized, no oversized request.
    """
    tele = [{"ts": f"2026-10-01T00:{m:02d}:00Z", "gpu_id": "g0", "util_pct": 90.0, "power_w": 500.0} for m in range(10)]
    tele += [{"ts": f"2026-10-01T00:{m:02d}:30Z", "gpu_id": "g1", "util_pct": 0.0, "power_w": 100.0} for m in range(10)]
    b = make_bundle(inventory=[{"gpu_id": g, "pool": "p"} for g in ("g0", "g1")],
                    allocations=[{"allocation_id": f"a{g}", "gpu_id": g, "start": ts(1, 0), "end": "2026-10-01T00:10:00Z",
                                  "owner": "A1", "job_id": "J"} for g in ("g0", "g1")],
                    telemetry=tele)
    rep = report(b, activity={"max_sample_gap_s": 120})
    held = {r["cause"]: r["gpu_hours"] for r in rep["idle"] if r["kind"] == "allocated"}
    assert held == pytest.approx({"oversized_request": 9.5 / 60})


def test_kills_card_energy_of_a_sample_before_the_period():
    """g0 is sampled at 2026-09-30 23:50 (400 W), 10-01 00:00 (1000 W) and 00:10 (0 W); gap limit
    20 min. The first sample's 600 s x 400 W = 240 kJ were drawn before the period; the second's
    600 s x 1000 W = 600 kJ in its first quarter hour. Card energy per quarter hour (what the
    power profile reads) is 600 kJ at 00:00 and nothing before: the profile's first hour averages
    600,000 J / 3,600 s = 166.67 W = 0.16667 kW.

    Mutant (activity._card_energy keeps samples with joules OR inside the period): the 240 kJ
    appear at 09-30 23:45, a bucket before the period.
    """
    from cost_engine.views_energy import power_profile

    tele = [{"ts": "2026-09-30T23:50:00Z", "gpu_id": "g0", "util_pct": 50.0, "power_w": 400.0},
            {"ts": ts(1, 0), "gpu_id": "g0", "util_pct": 50.0, "power_w": 1000.0},
            {"ts": "2026-10-01T00:10:00Z", "gpu_id": "g0", "util_pct": 0.0, "power_w": 0.0}]
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 1), "owner": "A1"}],
                    telemetry=tele)
    comp = compute(b, make_config(activity={"max_sample_gap_s": 1200}))
    ce = comp.card_energy
    assert [(r["bucket"].isoformat(), r["joules"]) for r in ce.iter_rows(named=True)] == [
        ("2026-10-01T00:00:00+00:00", pytest.approx(600_000.0))]
    prof = power_profile(comp)
    assert prof["gpu_kw"][0] == pytest.approx(600_000.0 / 3600 / 1000)


def test_kills_energy_priced_at_one_dollar_without_bands():
    """interval_activity without `bands` prices nothing: g0 draws 1000 W for 2 h (A1 holds it
    00:00-02:00; samples at 00:00 and 01:00, gap limit 1 h): 7.2 MJ, and price_j (J x price per
    kWh) is 0 on every interval. With the flat bands of $0.12 per kWh: 7,200,000 x 0.12 = 864,000.

    Mutant (activity.interval_activity: `Bands.flat(1.0)` when none are given): 7,200,000.
    """
    from cost_engine.activity import interval_activity
    from cost_engine.tariffs import Bands

    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 2), "owner": "A1"}],
        telemetry=[{"ts": ts(1, h), "gpu_id": "g0", "util_pct": 50.0, "power_w": 1000.0} for h in (0, 1)],
    )
    cfg = make_config(activity={"max_sample_gap_s": 3600})
    comp = compute(b, cfg)
    args = (comp.telemetry, comp.ledger.intervals, cfg.activity, comp.period.start, comp.period.end)
    plain = interval_activity(*args).per_interval
    assert plain["joules"].sum() == pytest.approx(7_200_000.0)
    assert plain["price_j"].to_list() == [0.0] * plain.height
    priced = interval_activity(*args, bands=Bands.flat(0.12)).per_interval
    assert priced["price_j"].sum() == pytest.approx(864_000.0)


def stored(tmp_path, b):
    """The bundle ingested into a DuckDB store, computed from the store (telemetry read from it)."""
    from cost_engine import api, store

    db = tmp_path / "s.duckdb"
    store.ingest(db, b)
    return db, lambda **config: api.run(db, config=make_config(**config))


def bill_after_the_draw():
    """A1 holds g0 00:00-04:00; hourly samples at 1000 W until 02:00 and 0 W after; an $8 power
    bill of pool p by energy for 02:00-04:00."""
    tele = [{"ts": ts(1, h), "gpu_id": "g0", "util_pct": 50.0, "power_w": w} for h, w in ((0, 1000.0), (1, 1000.0),
                                                                                       (2, 0.0), (3, 0.0), (4, 0.0))]
    return make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                       allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 4),
                                     "owner": "A1"}],
                       telemetry=tele,
                       costs=[{"cost_id": "bill", "category": "power", "amount": 8.0, "pool": "p", "driver": "energy",
                               "start": ts(1, 2), "end": ts(1, 4)}])


def test_kills_a_store_whose_sampled_cards_are_not_cut_at_a_bill(tmp_path):
    """From a store: A1 holds g0 00:00-04:00, which draws 1000 W 00:00-02:00 and 0 W 02:00-04:00
    (hourly samples, gap limit 1 h). A $8 power bill of pool p by energy, 02:00-04:00, meets no
    energy in its span: it cannot be spread and stays idle ("cost not spread"). The 2 kWh drawn
    before 02:00 are measured energy: 2 x 1.3 x 1.2 = 3.12 kWh x $0.12 = $0.3744 on A1.

    Mutant (telemetry store reader: no sampled cards when the table is present): g0 is not cut at
    the bill's start, its one segment 00:00-04:00 holds 2 kWh spread evenly, half of it inside the
    bill's span: the $8 land on A1, and half the measured energy is taken as billed.
    """
    b = bill_after_the_draw()
    _, run = stored(tmp_path, b)
    rep = build_report(run(activity={"max_sample_gap_s": 3600}))
    assert by(rep, "by_project", "project") == pytest.approx({"A1": 0.3744})
    assert any("bill" in d for d in gaps(rep, "cost not spread"))
    reconciled(rep, 8.3744)


def test_kills_a_store_without_a_telemetry_table_that_counts_a_sample_outside(tmp_path):
    """A store whose telemetry table is missing (made before it existed, or dropped by hand):
    there is no telemetry, so nothing is outside the inventory, and the gaps say only that
    telemetry is missing. A1 holds g0 00:00-02:00: 2 allocated GPU-hours, no active hours known.

    Mutant (telemetry store reader: `outside` counts 1 without a table): "1 samples of cards
    outside the inventory or out of service ignored".
    """
    import duckdb

    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 2), "owner": "A1"}])
    db, run = stored(tmp_path, b)
    with duckdb.connect(str(db)) as con:
        con.execute("DROP TABLE telemetry")
    comp = run()
    assert [d for w, d in comp.gaps if w == "telemetry"] == ["no telemetry: active hours, utilization and energy are unknown"]
    rep = build_report(comp)
    assert rep["totals"]["allocated_gpu_hours"] == pytest.approx(2.0)
    assert rep["totals"]["active_gpu_hours"] is None


def test_kills_a_one_card_inventory_not_taken_as_an_inventory():
    """A bundle built in code that does not say which tables it had (`present` empty) but has an
    inventory of one card g0: the inventory is known from its row. A1 holds g0 06:00-12:00, so
    18 of its 24 card-hours are unallocated idle (no demand), and no gap says the inventory is
    missing.

    Mutant (engine.compute: an inventory only with more than one row): "no inventory table",
    and the 18 free hours are unknown instead of idle.
    """
    import dataclasses

    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 6), "end": ts(1, 12), "owner": "A1"}])
    comp = compute(dataclasses.replace(b, present=frozenset()), make_config())
    assert not [d for w, d in comp.gaps if w == "inventory"]
    idle = {(r["kind"], r["cause"]): r["gpu_hours"] for r in build_report(comp)["idle"]}
    assert idle == pytest.approx({("unallocated", "no_demand"): 18.0})


def test_kills_an_over_allocation_gap_in_seconds_times_3600():
    """a and b both hold all of g0 (share 1 each) 02:00-03:30: shares sum to 2 for 1.5 h from
    02:00; the gap says so in hours.

    Mutant (engine.compute: the span's seconds x 3600): "for 19440000.00 h".
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": x, "gpu_id": "g0", "start": ts(1, 2), "end": ts(1, 3.5), "owner": "A1"}
                                 for x in ("a", "b")])
    comp = compute(b, make_config())
    assert [d for w, d in comp.gaps if w == "over-allocation"] == [
        "g0: shares sum to 2 for 1.50 h from 2026-10-01 02:00Z; split pro rata"]


def test_kills_a_half_second_without_power_left_out_of_the_energy_gap():
    """A1 holds g0 00:00-01:00. Its first sample (00:00:00.000) has no power reading; the next, half
    a second later, reads 300 W, and so does each minute after (gap limit 120 s). Half a second
    of covered time has no energy: the gap names g0 ("1 cards report no power or energy counter
    for some samples: g0").

    Mutant (engine.compute: flagged only past 1.000001 s without energy): no gap.
    """
    tele = [{"ts": "2026-10-01T00:00:00Z", "gpu_id": "g0", "util_pct": 50.0},
            {"ts": "2026-10-01T00:00:00.500Z", "gpu_id": "g0", "util_pct": 50.0, "power_w": 300.0}]
    tele += [{"ts": f"2026-10-01T00:{m:02d}:00Z", "gpu_id": "g0", "util_pct": 50.0, "power_w": 300.0} for m in range(1, 60)]
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 1), "owner": "A1"}],
                    telemetry=tele)
    comp = compute(b, make_config(activity={"max_sample_gap_s": 120}))
    assert [d for w, d in comp.gaps if w == "energy unknown"] == [
        "1 cards report no power or energy counter for some samples: g0"]


def job_of_two(utils=(90.0, 0.0), job="J"):
    """g0 and g1 held 00:00-02:00 by A1 (job `job`, or none), both at 1000 W with the given
    utilizations; hourly samples and a 0 W sample at 02:00 (gap limit 1 h)."""
    tele = [{"ts": ts(1, h), "gpu_id": g, "util_pct": u, "power_w": 1000.0} for h in (0, 1)
            for g, u in zip(("g0", "g1"), utils)]
    tele += [{"ts": ts(1, 2), "gpu_id": g, "util_pct": 0.0, "power_w": 0.0} for g in ("g0", "g1")]
    return make_bundle(inventory=[{"gpu_id": g, "pool": "p"} for g in ("g0", "g1")],
                       allocations=[{"allocation_id": f"a{g}", "gpu_id": g, "start": ts(1, 0), "end": ts(1, 2),
                                     "owner": "A1", "job_id": job} for g in ("g0", "g1")],
                       telemetry=tele)


def test_kills_oversized_idle_energy_divided_by_the_server_overhead():
    """Job J: g0 busy (90 %), g1 inactive (0 %), both 1000 W for 2 h. g1's 2 h are oversized
    request idle; its energy 2 kWh x 1.3 (server) x 1.2 (PUE) = 3.12 kWh x $0.12 = $0.3744.

    Mutant (engine.enrich_segments: oversized energy cost / server overhead): 2 x 1.2 / 1.3 x
    0.12 = $0.2215.
    """
    rep = report(job_of_two(), activity={"max_sample_gap_s": 3600})
    held = {r["cause"]: r["cost"] for r in rep["idle"] if r["kind"] == "allocated"}
    assert held == pytest.approx({"oversized_request": 0.3744})


def test_kills_held_idle_energy_divided_by_the_pue():
    """No job: g1 is simply inactive (0 %) at 1000 W for 2 h: underutilized, its energy 2 kWh x
    1.3 x 1.2 = 3.12 kWh x $0.12 = $0.3744. (g0 at 90 % is active.)

    Mutant (engine.enrich_segments: held idle energy cost / PUE): 2 x 1.3 / 1.2 x 0.12 = $0.26.
    """
    rep = report(job_of_two(job=None), activity={"max_sample_gap_s": 3600})
    held = {r["cause"]: r["cost"] for r in rep["idle"] if r["kind"] == "allocated"}
    assert held == pytest.approx({"underutilized": 0.3744})


def free_pool_and_a_direct_cost():
    """A1 holds g0 (pool p) 00:00-02:00 without telemetry; pool p's rate is $0 per card-hour (a
    free pool). B1 holds nothing and carries a direct $10 software row over the day. C1 holds g1
    of pool q 00:00-01:00, which no cost row, rate or measured energy reaches."""
    return make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}, {"gpu_id": "g1", "pool": "q"}],
                       allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 2), "owner": "A1"},
                                    {"allocation_id": "c", "gpu_id": "g1", "start": ts(1, 0), "end": ts(1, 1), "owner": "C1"}],
                       owners=[{"tenant": "A", "project": "A1"}, {"tenant": "B", "project": "B1"},
                               {"tenant": "C", "project": "C1"}],
                       costs=[{"cost_id": "sw", "category": "software", "amount": 10.0, "owner": "B1",
                               "start": ts(1, 0), "end": ts(2, 0)}],
                       rates=[{"pool": "p", "price_per_gpu_hour": 0.0}])


def test_kills_known_zeros_and_unknowns_swapped_in_the_owner_table():
    """No power cost row, so energy cost is measured energy x price. A1: 2 allocated GPU-hours
    priced at $0 by its pool's rate: cost a known $0.00; no sample measured its energy, so its
    energy (kWh, CO2e) and energy cost are unknown (null). B1: cost $10.00 (its direct row); it
    held no card, so it was active 0 h and drew no energy: 0 kWh, 0 kg CO2e and energy cost $0.00,
    all known (nothing to measure); its average power, over no held time, is undefined (null).
    C1: its pool q is reached by
    no cost input, so its cost is unknown and the gap "cost unknown" names q; A1's pool p is
    reached (by its $0 rate), so A1's $0 stands.

    Mutants (report.owner_table and its helpers):
    - unmetered also at 0 allocated hours (`>= 0`): B1's energy cost unknown;
    - an owner "uncosted" when it held any card (`| alloc_h > 0`): A1's $0 cost unknown;
    - any cost row taken for a power row (`origin == cost | category == power`): energy not priced
      by measurement, A1's unknown energy cost shown as $0;
    - energy "metered" at 0 s of readings (`>= 0`): A1's energy 0 kWh instead of unknown;
    - an owner that held no card left unmeasured (`held_nothing` dropped): B1's 0 kWh and 0 h
      active shown as unknown.
    """
    rep = report(free_pool_and_a_direct_cost())
    rows = {r["project"]: r for r in rep["by_project"]}
    a1, b1 = rows["A1"], rows["B1"]
    assert (a1["allocated_gpu_hours"], a1["cost"]) == pytest.approx((2.0, 0.0))
    assert (a1["energy_cost"], a1["energy_kwh_gpu"], a1["energy_kwh_facility"], a1["carbon_kg"]) == (None, None, None, None)
    assert (b1["allocated_gpu_hours"], b1["cost"], b1["energy_cost"]) == pytest.approx((0.0, 10.0, 0.0))
    assert (b1["active_gpu_hours"], b1["energy_kwh_gpu"], b1["energy_kwh_facility"], b1["carbon_kg"]) == (0.0, 0.0, 0.0, 0.0)
    assert b1["avg_power_w_per_gpu"] is None
    assert (rows["C1"]["allocated_gpu_hours"], rows["C1"]["cost"]) == (1.0, None)
    assert [d.split(":")[0] for d in gaps(rep, "cost unknown")] == ["no cost row, rate or measured energy of the period reaches pool(s) q"]
    reconciled(rep, 10.0)


def test_kills_the_activity_method_named_backwards():
    """The report's methods name the activity rule in force: "threshold: util >= 5%" by default,
    "weighted: time x util / 100" in weighted mode.

    Mutant (report.build_report: `if not mode == "threshold"`): each named as the other.
    """
    b = free_pool_and_a_direct_cost()
    assert report(b)["methods"]["activity"] == "threshold: util >= 5%"
    assert report(b, activity={"mode": "weighted"})["methods"]["activity"] == "weighted: time x util / 100"


def one_long_sample() -> pl.DataFrame:
    """Card g0's one sample, at 00:00:30 (50 %, 100 W): with no next sample it lasts the gap limit."""
    return pl.DataFrame({"ts": [datetime(2026, 10, 1, 0, 0, 30, tzinfo=timezone.utc)], "gpu_id": ["g0"],
                         "util_pct": [50.0], "power_w": [100.0], "energy_j": [None]},
                        schema={"ts": pl.Datetime("us", "UTC"), "gpu_id": pl.String, "util_pct": pl.Float64,
                                "power_w": pl.Float64, "energy_j": pl.Float64})


def test_kills_a_rollup_gap_limit_of_64_buckets():
    """One-minute buckets allow a gap limit of at most 63 buckets (3,780 s): a sample may then span
    64 buckets. g0's one sample lasts the limit, 3,780 s from 00:00:30: 30 s in bucket 00:00, 62
    whole buckets, 30 s in bucket 01:03; covered 3,780 s, 378,000 J at 100 W. A limit of 3,781 s
    is refused, naming the 63 buckets.

    Mutant (rollup: MAX_PIECES 65): 3,781 s is accepted.
    """
    from cost_engine import rollup

    got = rollup.rollup_duckdb(one_long_sample(), 60, max_gap_s=3780).filter(pl.col("covered_s") > 0).sort("bucket_start")
    assert got.height == 64
    assert (got["covered_s"][0], got["covered_s"][-1]) == pytest.approx((30.0, 30.0))
    assert got["covered_s"].sum() == pytest.approx(3780.0)
    assert got["joules"].sum() == pytest.approx(378_000.0)
    with pytest.raises(ValueError, match="more than 63 buckets of 60 s"):
        rollup.parameters(60, max_gap_s=3781)


def test_kills_a_rollup_that_closes_the_callers_connection():
    """rollup_duckdb on a DuckDB connection the caller passes leaves it open for the caller (and
    closes only the one it opened itself): after the rollup the caller's connection still
    answers a query.

    Mutant (rollup._duckdb_runs: `if not own: close`): the caller's connection is closed.
    """
    import duckdb

    from cost_engine import rollup

    con = duckdb.connect()
    got = rollup.rollup_duckdb(one_long_sample(), 60, max_gap_s=3780, con=con)
    assert got["covered_s"].sum() == pytest.approx(3780.0)
    assert con.execute("SELECT 41 + 1").fetchone() == (42,)
    con.close()


# ---------------------------------------------------------------- holdout 3 (issue 25)


def test_kills_a_direct_cost_spread_past_its_last_day():
    """Two days (10-01 and 10-02, UTC). A direct $10 row of A1 from 10-01 00:00 to 12:00 lies in
    10-01 only: A1 $10, the trend $10 on 10-01 and $0 on 10-02.

    Mutant (allocation.slot_range: last slot = search - 1 + 2): the row also meets day 10-02, where
    its part is 00:00 - 12:00 of the day before, -12 h of 12: -$10 there, A1 $0 in all.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 2), "owner": "A1"}],
                    costs=[{"cost_id": "d", "category": "software", "amount": 10.0, "owner": "A1",
                            "start": ts(1, 0), "end": ts(1, 12)}])
    rep = report(b, period=TWO_DAYS)
    assert by(rep, "by_project", "project") == pytest.approx({"A1": 10.0})
    assert {r["day"]: r["cost"] for r in rep["trend"]} == pytest.approx({"2026-10-01": 10.0, "2026-10-02": 0.0})


def test_kills_the_outside_gap_listing_six_rows():
    """Six $1 rows of pool p lie wholly before the period (09-30): they count 0, and the gap names
    the first five by id (o1 to o5) after their number.

    Mutant (allocation.spread_costs: `head(6)`): o6 is named too.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    costs=[{"cost_id": f"o{i}", "category": "network", "amount": 1.0, "pool": "p",
                            "driver": "capacity_hours", "start": ts(30, 0), "end": ts(30, 12)} for i in range(1, 7)])
    rep = report(b)
    assert gaps(rep, "costs outside the period") == [
        "6 cost rows lie outside the period and count 0: o1, o2, o3, o4, o5"]


def test_kills_twenty_one_rows_named_not_spread_by_a_segment_driver():
    """Pool p's only card g0 enters service at 12:00. 21 network rows of pool p by capacity hours,
    c01 to c21, all 00:00-12:00, meet no capacity: none can be spread (all idle), and the gaps
    name the first 20 by id.

    Mutant (allocation.spread_costs: `head(21)`): 21 gaps.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p", "in_service_start": ts(1, 12)}],
                    costs=[{"cost_id": f"c{i:02d}", "category": "network", "amount": 1.0, "pool": "p",
                            "driver": "capacity_hours", "start": ts(1, 0), "end": ts(1, 12)} for i in range(1, 22)])
    rep = report(b)
    named = gaps(rep, "cost not spread")
    assert len(named) == 20 and named[0].startswith("cost c01:") and named[-1].startswith("cost c20:")
    reconciled(rep, 21.0)
    assert rep["reconciliation"]["idle"] == pytest.approx(21.0)


def test_kills_cards_frame_that_takes_an_empty_inventory_for_one():
    """ledger.cards_frame without `has_inventory` decides from the inventory's rows: an empty one
    is no inventory, so the cards are those the allocations name (g7), in service only while
    held (00:00-02:00), and the flag comes back False.

    Mutant (`inventory.height >= 0`): an empty inventory counts, no card is known.
    """
    from cost_engine.contract import empty
    from cost_engine.ledger import cards_frame, resolve_period

    b = make_bundle(allocations=[{"allocation_id": "a", "gpu_id": "g7", "start": ts(1, 0), "end": ts(1, 2), "owner": "A1"}])
    cards, has_inventory = cards_frame(empty("inventory"), b["allocations"], resolve_period(make_config(), None))
    assert has_inventory is False
    assert cards["gpu_id"].to_list() == ["g7"]


def test_kills_backlog_shares_of_one_and_ties_in_reverse():
    """g0 and g1 in pool p, A1 holds g0 00:00-06:00: 18 h free on g0 and 24 h on g1 (no demand),
    and on node n1 (g1) maintenance 00:00-06:00 takes 6 of g1's 24. Idle hours: no demand 36,
    maintenance 6, 42 in all: shares 36/42 = 0.857143 and 6/42 = 0.142857, summing to 1.

    Ties: with g1 also under a 06:00-12:00 degraded-hardware event, degraded hardware and
    maintenance both have 6 h (no demand 18 + 12 = 30 h); the backlog lists equal hours by cause
    name (degraded_hardware, maintenance).

    Mutants (idle.backlog): `sum() and 1.0` divides by 1 (shares 36 and 6); a descending cause
    order lists maintenance first.
    """
    from cost_engine import idle

    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p", "node": "n0"}, {"gpu_id": "g1", "pool": "p", "node": "n1"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 6), "owner": "A1"}],
                    events=[{"start": ts(1, 0), "end": ts(1, 6), "kind": "maintenance", "node": "n1"}])
    comp = compute(b, make_config())
    bl = idle.backlog(idle_detail_of(comp))
    assert dict(zip(bl["cause"], bl["share_of_idle"])) == pytest.approx({"no_demand": 36 / 42, "maintenance": 6 / 42})
    b2 = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p", "node": "n0"}, {"gpu_id": "g1", "pool": "p", "node": "n1"}],
                     allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 6), "owner": "A1"}],
                     events=[{"start": ts(1, 0), "end": ts(1, 6), "kind": "maintenance", "node": "n1"},
                             {"start": ts(1, 6), "end": ts(1, 12), "kind": "degraded_hardware", "gpu_id": "g1"}])
    bl = idle.backlog(idle_detail_of(compute(b2, make_config())))
    assert bl["cause"].to_list() == ["no_demand", "degraded_hardware", "maintenance"]
    assert bl["gpu_hours"].to_list() == pytest.approx([30.0, 6.0, 6.0])


def idle_detail_of(comp):
    from cost_engine.report import idle_detail

    return idle_detail(comp)


def test_kills_idle_by_pool_ties_listed_in_reverse_pool_order():
    """Pools a and b each have one free card all day: 24 h of no demand each, at the same cost
    ($0: no prices). Per (kind, cause, pool) equal rows are listed by pool name: a, then b.

    Mutant (idle.by_cause: the keys sorted descending): b, then a.
    """
    from cost_engine import idle

    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "a"}, {"gpu_id": "g1", "pool": "b"}])
    t = idle.by_cause(idle_detail_of(compute(b, make_config())), ("pool",))
    assert list(zip(t["cause"], t["pool"], t["gpu_hours"])) == [("no_demand", "a", 24.0), ("no_demand", "b", 24.0)]


def test_kills_underutilized_energy_cost_that_adds_the_oversized_part():
    """Job J holds g0 and g1 00:00-02:00 at 1000 W (hourly samples, gap limit 1 h). g0 is busy
    00:00-01:00 and inactive 01:00-02:00; g1 is inactive both hours. g1's first hour is
    oversized request (its sibling worked), its second underutilized, like g0's second hour.
    Each idle hour draws 1 kWh x 1.3 x 1.2 = 1.56 kWh x $0.12 = $0.1872: oversized request
    $0.1872, underutilized 2 x $0.1872 = $0.3744.

    Mutant (idle.classify: the underutilized energy cost = rest + oversized instead of rest -
    oversized): g1's underutilized hour costs 3 x $0.1872, underutilized $0.7488.
    """
    tele = [{"ts": ts(1, h), "gpu_id": g, "util_pct": u, "power_w": 1000.0}
            for h, us in ((0, (90.0, 0.0)), (1, (0.0, 0.0))) for g, u in zip(("g0", "g1"), us)]
    tele += [{"ts": ts(1, 2), "gpu_id": g, "util_pct": 0.0, "power_w": 0.0} for g in ("g0", "g1")]
    b = make_bundle(inventory=[{"gpu_id": g, "pool": "p"} for g in ("g0", "g1")],
                    allocations=[{"allocation_id": f"a{g}", "gpu_id": g, "start": ts(1, 0), "end": ts(1, 2),
                                  "owner": "A1", "job_id": "J"} for g in ("g0", "g1")],
                    telemetry=tele)
    rep = report(b, activity={"max_sample_gap_s": 3600})
    held = {r["cause"]: (r["gpu_hours"], r["cost"]) for r in rep["idle"] if r["kind"] == "allocated"}
    assert held == {"oversized_request": pytest.approx((1.0, 0.1872)), "underutilized": pytest.approx((2.0, 0.3744))}


def test_kills_a_request_at_exactly_the_latency_slo_counted_bad():
    """SLO: latency 30,000 ms (the default). Model m (served, $24): r1 took exactly 30,000 ms and
    met it; r2 took 30,001 ms and missed it. 100 output tokens each: 100 good tokens of 200,
    SLO attainment 1/2, $24 / 100 x 1e6 = $240,000 per million good tokens.

    Mutant (tokens._resolve_batch: latency < SLO): r1 misses too, no good token, attainment 0.
    """
    rep = report(served([{"request_id": f"r{i}", "ts": ts(1, 2), "owner": "A1", "model": "m", "input_tokens": 0,
                          "output_tokens": 100, "latency_ms": ms} for i, ms in ((1, 30_000.0), (2, 30_001.0))]))
    m = {r["model"]: r for r in rep["by_model"]}["m"]
    assert (m["good_tokens"], m["slo_attainment"]) == (100, pytest.approx(0.5))
    assert m["cost_per_million_good_tokens"] == pytest.approx(240_000.0)


def test_kills_a_model_carbon_in_units_of_1001_grams():
    """Model m served on g0 00:00-12:00 at 1 kW (carbon_bundle) under a 400 g/kWh tariff all day:
    12 x 1.56 kWh x 400 g = 7,488 g = 7.488 kg of CO2e.

    Mutant (tokens.model_table: grams / 1001): 7.4805 kg.
    """
    b = carbon_bundle([{"start": ts(1, 0), "end": ts(2, 0), "price_per_kwh": 0.1, "carbon_g_per_kwh": 400.0}],
                      owners=(("svc", 0, 12),))
    b.tables["allocations"] = b["allocations"].with_columns(pl.lit("inference").alias("workload"), pl.lit("m").alias("model"))
    rep = report(b, activity={"max_sample_gap_s": 3600})
    assert {r["model"]: r["carbon_kg"] for r in rep["by_model"]} == {"m": pytest.approx(7.488)}


def test_kills_models_without_requests_named_as_missing_phase_time():
    """Split by phase time (the default). Model m (served, $24) has one request with its phase
    times; model n is served on g1 and nobody called it. No split fell back to token weights:
    no "phase time missing" gap.

    Mutant (tokens.model_table: models with requests OR without phase time): n is named.
    """
    also = [{"allocation_id": "n", "gpu_id": "g1", "start": ts(1, 0), "end": ts(2, 0), "owner": "svc",
             "workload": "inference", "model": "n"}]
    rep = report(served([{"request_id": "r", "ts": ts(1, 2), "owner": "A1", "model": "m", "input_tokens": 100,
                          "output_tokens": 100, "prefill_ms": 100.0, "decode_ms": 900.0}], also=also))
    assert {r["model"] for r in rep["by_model"]} == {"m", "n"}
    assert gaps(rep, "phase time missing") == []


def test_kills_the_no_allocation_gap_for_models_with_one_hour():
    """Model m is served on g0 00:00-01:00 (1 allocated GPU-hour) and called once; model x is
    called once and served by nothing. The gap names x only.

    Mutant (tokens.model_table: models with exactly 1 allocated hour): names m instead.
    """
    rep = report(served([{"request_id": r, "ts": ts(1, 0.5), "owner": "A1", "model": model, "input_tokens": 0,
                          "output_tokens": 10} for r, model in (("r1", "m"), ("r2", "x"))],
                        allocation_end=ts(1, 1)))
    assert gaps(rep, "model without serving allocations") == ["requests for models no inference allocation serves: x"]


def test_kills_a_trend_day_with_one_output_token_without_a_price():
    """Model m is served all day ($24); its one request has 1 output token: the trend's 10-01 price
    is $24 / 1 x 1e6 = $24,000,000 per million output tokens.

    Mutant (tokens.model_trend: a price only above 1 token): unknown.
    """
    (row,) = report(served([{"request_id": "r", "ts": ts(1, 2), "owner": "A1", "model": "m", "input_tokens": 0,
                             "output_tokens": 1}]))["model_trend"]
    assert row["cost_per_million_output_tokens"] == pytest.approx(24_000_000.0)


def test_kills_idle_joules_of_a_split_sample_divided_by_its_part():
    """A1 holds g0 00:00-02:00; samples at 00:30 and 01:30 read 0 % at 1000 W, a last one at 02:30
    (gap limit 1 h). A tariff changes at 01:00, so g0 is cut there: the 00:30 sample's 1 kWh is
    split 0.5 / 0.5 across it, and of the 01:30 sample 0.5 kWh falls before the allocation ends.
    Held idle (underutilized): 1.5 h covered and inactive, 1.5 kWh of GPU energy.

    Mutant (activity: a piece's idle joules = joules / its fraction): 2 + 2 + 2 = 6 kWh.
    """
    tele = [{"ts": ts(1, h), "gpu_id": "g0", "util_pct": 0.0, "power_w": 1000.0} for h in (0.5, 1.5, 2.5)]
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 2), "owner": "A1"}],
                    telemetry=tele,
                    tariffs=[{"start": ts(1, 0), "end": ts(1, 1), "price_per_kwh": 0.1},
                             {"start": ts(1, 1), "end": ts(2, 0), "price_per_kwh": 0.2}])
    rep = report(b, activity={"max_sample_gap_s": 3600})
    held = {r["cause"]: (r["gpu_hours"], r["energy_kwh_gpu"]) for r in rep["idle"] if r["kind"] == "allocated"}
    assert held == {"underutilized": pytest.approx((1.5, 1.5))}


def test_kills_a_straddling_sample_expanded_into_the_next_card():
    """A1 holds g0 00:00-00:30, so g0's intervals are [00:00, 00:30) and [00:30, 24:00); g1 is
    free all day without telemetry. g0's one sample, at 00:15 (1000 W, gap limit 30 min), lasts
    to 00:45 across g0's edge: 0.5 kWh in all, 0.25 h of it inside A1's allocation. Telemetry
    covers 0.25 of A1's 0.5 allocated hours (coverage 0.5); g1 has no energy.

    Mutant (activity.pieces: a straddling sample expanded to e_b + 1 as well): the interval after
    g0's last is g1's first, [00:00, 24:00), which the sample's whole 30 min overlap: they land on
    g1 as well, and the GPU energy doubles to 1 kWh.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}, {"gpu_id": "g1", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 0.5), "owner": "A1"}],
                    telemetry=[{"ts": "2026-10-01T00:15:00Z", "gpu_id": "g0", "util_pct": 50.0, "power_w": 1000.0}])
    rep = report(b, activity={"max_sample_gap_s": 1800})
    assert rep["totals"]["energy_kwh_gpu"] == pytest.approx(0.5)
    assert rep["totals"]["telemetry_coverage"] == pytest.approx(0.5)


def test_kills_a_card_read_that_keeps_a_sample_at_its_end():
    """A card's samples over [start, end) (the drill-down's telemetry): g0 sampled at 00:00, 01:00
    and 02:00; asked for [00:00, 02:00) the frame source gives the first two, as the store does.

    Mutant (telemetry.FrameTelemetry.card: ts <= end): the 02:00 sample as well.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    telemetry=[{"ts": ts(1, h), "gpu_id": "g0", "util_pct": 50.0, "power_w": 300.0} for h in (0, 1, 2)])
    comp = compute(b, make_config())
    got = comp.telemetry.card("g0", DAY0, DAY0 + timedelta(hours=2))
    assert [t.hour for t in got["ts"].to_list()] == [0, 1]


def test_kills_the_rates_without_cards_gap_inverted_or_raised_for_a_rate_not_in_force():
    """Card g0 in pool p with a $1 per card-hour rate all day: 24 card-hours, $24, all idle. A $5
    rate for pool `ghost`, which has no card, bills nothing (no capacity) and is named in the gaps.
    A `ghost` rate that ends exactly at the period's start is not in force in it: no gap.

    Mutants: the gap raised only when every rate's pool has cards (`if not unknown`); a rate
    whose span inside the period is empty kept (`ce >= cs`), so the expired one raises the gap.
    """
    own = {"pool": "p", "price_per_gpu_hour": 1.0, "start": ts(1, 0), "end": ts(2, 0)}
    inv = [{"gpu_id": "g0", "pool": "p"}]
    rep = report(make_bundle(inventory=inv, allocations=[], rates=[
        own, {"pool": "ghost", "price_per_gpu_hour": 5.0, "start": ts(1, 0), "end": ts(2, 0)}]))
    assert gaps(rep, "rates without cards") == ["rates for pools with no cards in the inventory: ['ghost']"]
    reconciled(rep, 24.0)
    rep = report(make_bundle(inventory=inv, allocations=[], rates=[
        own, {"pool": "ghost", "price_per_gpu_hour": 5.0, "start": ts(30, 0), "end": ts(1, 0)}]))
    assert gaps(rep, "rates without cards") == []
    reconciled(rep, 24.0)
    rep = report(make_bundle(inventory=inv, allocations=[], rates=[own]))
    assert gaps(rep, "rates without cards") == []


def test_kills_a_cost_row_reaching_back_into_the_slot_before_its_start():
    """Period 10-01 .. 10-04 UTC (3 days). A direct cost of A1, $24 from 10-02 12:00 to 10-03
    12:00: 12 h on Oct 2 and 12 h on Oct 3, so $12 and $12, and Oct 1 none of it. A1 holds g0 on
    Oct 2 01:00-02:00 (no other cost, so the trend is this row alone).

    Mutant (a row's first slot taken one slot early): the row also meets Oct 1, whose part is
    min(ce, Oct 2 00:00) - max(cs, Oct 1 00:00) = -12 h, f = -0.5: Oct 1 -$12, and A1 $12 in all.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(2, 1), "end": ts(2, 2), "owner": "A1"}],
        costs=[{"cost_id": "d", "category": "other", "amount": 24.0, "owner": "A1", "start": ts(2, 12),
                "end": "2026-10-03T12:00:00Z"}],
    )
    period = {"start": datetime(2026, 10, 1, tzinfo=timezone.utc), "end": datetime(2026, 10, 4, tzinfo=timezone.utc)}
    rep = report(b, period=period)
    trend = {t["day"]: t["cost"] for t in rep["trend"]}
    assert trend.get("2026-10-01", 0.0) == pytest.approx(0.0)
    assert (trend["2026-10-02"], trend["2026-10-03"]) == (pytest.approx(12.0), pytest.approx(12.0))
    assert by(rep, "by_project", "project") == pytest.approx({"A1": 24.0})
    reconciled(rep, 24.0)


def test_kills_a_tokens_cost_spread_over_requests_of_no_tokens():
    """$100 other by tokens over the day; the only request (A1, 01:00) has no input, cached or
    output tokens: no token weight in the row's span, so the row is kept whole in idle ($100)
    and the gap names it.

    Mutant (rows of weight 0 kept, `w >= 0`): the row is spread with f = 0 / 0 (NaN) and no
    gap is raised.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 1), "owner": "A1"}],
        requests=[{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 0,
                   "output_tokens": 0}],
        costs=[{"cost_id": "t", "category": "other", "amount": 100.0, "driver": "tokens",
                "start": ts(1, 0), "end": ts(2, 0)}],
    )
    rep = report(b, boundary=NO_POWER)
    assert gaps(rep, "cost not spread") == ["cost t: no tokens during its span; kept as idle"]
    assert rep["reconciliation"]["idle"] == pytest.approx(100.0)
    reconciled(rep, 100.0)


def test_kills_an_even_cost_weighed_against_its_slot_hours_instead_of_by_them():
    """Period 10-01 .. 10-03 UTC (2 days). A shared $36 `other` row spread evenly (driver
    `even`) from 10-01 12:00 to 10-03 00:00: 36 h, 12 on Oct 1 and 24 on Oct 2. A1 is the only
    project with usage (g0 on Oct 1 01:00-02:00), so all $36 is A1's, by time: Oct 1 $12, Oct 2
    $24 (the slots are 12 h and 24 h long).

    Mutant (a slot's weight = share / its hours): 1/12 against 1/24 gives Oct 1 two thirds,
    $24, and Oct 2 $12; A1's total is still $36.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 1), "end": ts(1, 2), "owner": "A1"}],
        costs=[{"cost_id": "e", "category": "other", "amount": 36.0, "driver": "even", "start": ts(1, 12),
                "end": "2026-10-03T00:00:00Z"}],
    )
    rep = report(b, period=TWO_DAYS, boundary=NO_POWER)
    trend = {t["day"]: t["cost"] for t in rep["trend"]}
    assert (trend["2026-10-01"], trend["2026-10-02"]) == (pytest.approx(12.0), pytest.approx(36.0 - 12.0))
    assert by(rep, "by_project", "project") == pytest.approx({"A1": 36.0})
    reconciled(rep, 36.0)


def test_kills_a_rates_charges_exported_as_a_cost_rows():
    """Card g0 in pool p, a $2 per card-hour rate all day: $48 of rate; a $24 depreciation row
    over the day spread by capacity hours: $24 of cost; all idle. The money rows (and so the
    FOCUS charges built from them) name their origins `rate` and `cost`.

    Mutants (rate rows priced as cost rows, or cost rows as rates): all $72 under one origin.
    """
    from cost_engine.exporters import focus_charges

    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}], allocations=[],
                    rates=[{"pool": "p", "price_per_gpu_hour": 2.0, "start": ts(1, 0), "end": ts(2, 0)}],
                    costs=[{"cost_id": "dep", "category": "depreciation", "amount": 24.0, "start": ts(1, 0),
                            "end": ts(2, 0)}])
    comp = compute(b, make_config())
    got = dict(comp.money.group_by("origin").agg(pl.col("amount").sum()).rows())
    assert got == {"rate": pytest.approx(48.0), "cost": pytest.approx(24.0)}
    charges = focus_charges.charges(comp)
    assert dict(charges.group_by("origin").agg(pl.col("amount").sum()).rows()) == {
        "rate": pytest.approx(48.0), "cost": pytest.approx(24.0)}


def test_kills_a_requests_cost_reaching_into_the_slot_after_its_end():
    """$10 `other` by requests from 00:00 to 12:00. A1 sends one request at 06:00, B1 one at
    18:00, after the row's end: the row's slot (00:00-12:00, cut at its own end) holds A1's
    request only, so A1 $10 and B1 none of it.

    Mutant (a row's slots run one past its last): the 12:00-24:00 slot's request counts too,
    A1 $5 and B1 $5.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 1), "owner": "A1"}],
        owners=[{"tenant": "A", "project": "A1"}, {"tenant": "B", "project": "B1"}],
        requests=[{"request_id": "r1", "ts": ts(1, 6), "owner": "A1", "model": "m", "input_tokens": 10, "output_tokens": 0},
                  {"request_id": "r2", "ts": ts(1, 18), "owner": "B1", "model": "m", "input_tokens": 10, "output_tokens": 0}],
        costs=[{"cost_id": "q", "category": "other", "amount": 10.0, "driver": "requests", "start": ts(1, 0),
                "end": ts(1, 12)}],
    )
    rep = report(b, boundary=NO_POWER)
    assert by(rep, "by_project", "project").get("B1", 0.0) == pytest.approx(0.0)
    assert by(rep, "by_project", "project")["A1"] == pytest.approx(10.0)
    reconciled(rep, 10.0)


# --- ledger (full run `full6`) ----------------------------------------------------------------


def test_kills_the_free_part_of_a_card_held_at_a_quarter_share_counted_as_more_than_the_card():
    """g0 (pool p, $1 per card-hour all day); A holds a quarter of it (share 0.25) 00:00-04:00.
    Allocated 0.25 x 4 h = 1 GPU-hour, $1 to A. The card's free part: 0.75 x 4 h while A holds
    its quarter, then the whole card 04:00-24:00, 20 h: 23 GPU-hours unallocated (no demand),
    $23 idle. Available 24 GPU-hours, allocation rate 1/24; input $24.

    Mutant (ledger.build_ledger: a free piece's share `1 - share_sum` -> `1 + share_sum`): the
    free part of 00:00-04:00 counts 1.25 cards, 25 GPU-hours unallocated, 26 available."""
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "owner": "A", "share": 0.25,
                                  "start": ts(1, 0), "end": ts(1, 4)}],
                    rates=[{"pool": "p", "price_per_gpu_hour": 1.0}])
    rep = report(b)
    t = rep["totals"]
    assert (t["allocated_gpu_hours"], t["unallocated_gpu_hours"], t["available_gpu_hours"]) == pytest.approx((1.0, 23.0, 24.0))
    assert t["allocation_rate"] == pytest.approx(1 / 24)
    assert [(i["kind"], i["cause"], i["gpu_hours"], i["cost"]) for i in rep["idle"]] == [
        ("unallocated", "no_demand", pytest.approx(23.0), pytest.approx(23.0))]
    assert by(rep, "by_project", "project") == {"A": pytest.approx(1.0)}
    reconciled(rep, 24.0)


def test_kills_a_card_without_an_inventory_counted_as_two():
    """No inventory: g0 is known only from A's allocation 00:00-04:00, one whole card (capacity 1,
    the contract's default) held 4 h: 4 allocated GPU-hours, one day of the trend; available
    capacity unknown (null), never invented.

    Mutant (ledger.cards_frame: a card named only by allocations given capacity 2): 8 GPU-hours."""
    b = make_bundle(allocations=[{"allocation_id": "a", "gpu_id": "g0", "owner": "A", "start": ts(1, 0), "end": ts(1, 4)}])
    rep = report(b)
    assert rep["totals"]["allocated_gpu_hours"] == pytest.approx(4.0)
    assert rep["totals"]["available_gpu_hours"] is None
    assert by(rep, "by_project", "project", "allocated_gpu_hours") == {"A": pytest.approx(4.0)}
    assert [d["allocated_gpu_hours"] for d in rep["trend"]] == [pytest.approx(4.0)]


def test_kills_a_card_retired_at_the_period_start_offered_as_a_pool_filter():
    """g1 (pool q) left service at 10-01 00:00, the period's start, and its last allocation ended
    then: it has no time in the period, so pool q is not among the period's pools, and the
    sidebar's pool filter offers only p (g0, held by A 00:00-04:00: 4 GPU-hours; q's $2 rate
    bills nothing, p's $1 bills 24 card-hours, $24).

    Mutant (ledger.clip: rows kept where end >= start): g1 stays a card with [00:00, 00:00) in
    service, and q is offered as a filter of a period it has no part in."""
    from cost_engine.views_filters import filter_options

    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}, {"gpu_id": "g1", "pool": "q", "in_service_end": ts(1, 0)}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "owner": "A", "start": ts(1, 0), "end": ts(1, 4)},
                                 {"allocation_id": "z", "gpu_id": "g1", "owner": "B", "start": ts(30, 20),
                                  "end": ts(1, 0)}],
                    rates=[{"pool": "p", "price_per_gpu_hour": 1.0}, {"pool": "q", "price_per_gpu_hour": 2.0}])
    comp = compute(b, make_config())
    assert filter_options(comp)["pools"] == ["p"]
    assert comp.ledger.cards["gpu_id"].to_list() == ["g0"]
    rep = build_report(comp)
    assert rep["totals"]["allocated_gpu_hours"] == pytest.approx(4.0)
    reconciled(rep, 24.0)


def test_kills_a_sample_exactly_at_the_busy_threshold_counted_inactive():
    """Threshold mode, busy at util >= 5 % (the default). g0 is held by A1 00:00-01:00 and sampled at
    00:00 and 00:30 at exactly 5 % (gap cap 1,800 s): both samples are busy, 1 active GPU-hour of
    1 allocated, so no allocated idle time at all.

    Mutant (activity.interval_activity: busy at util > threshold): 0 active hours, and the hour
    shows as 1 GPU-hour of underutilized idle.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 1), "owner": "A1"}],
        telemetry=[{"ts": ts(1, h / 2), "gpu_id": "g0", "util_pct": 5.0, "power_w": 200.0} for h in range(2)],
        owners=[{"tenant": "A", "project": "A1"}],
    )
    rep = report(b, activity={"max_sample_gap_s": 1800})
    assert rep["totals"]["active_gpu_hours"] == pytest.approx(1.0)
    assert by(rep, "by_project", "project", "active_gpu_hours") == {"A1": pytest.approx(1.0)}
    assert [r for r in rep["idle"] if r["kind"] == "allocated"] == []


def test_kills_the_oversized_cause_keyed_by_minute_alone_across_jobs():
    """Two multi-card jobs run at once, 00:00-01:00, sampled every 30 min at 200 W (gap cap
    1,800 s): j1 holds g0 and g1, both at 0 %; j2 holds g2 at 100 % and g3 at 0 %.
      g3 idles while its sibling g2 works: 1 GPU-hour of oversized_request, 0.2 kWh;
      g0 and g1 idle with no busy sibling in their own job: 2 GPU-hours underutilized, 0.4 kWh.

    Mutant (activity._oversized: the (job, minute) key built with 1 >> 32 = 0, so it is the minute
    alone): g2's busy minutes become every job's, and g0 and g1 turn oversized too: 3 GPU-hours.
    """
    jobs = {"g0": ("j1", 0.0), "g1": ("j1", 0.0), "g2": ("j2", 100.0), "g3": ("j2", 0.0)}
    b = make_bundle(
        inventory=[{"gpu_id": g, "pool": "p"} for g in jobs],
        allocations=[{"allocation_id": f"a-{g}", "gpu_id": g, "start": ts(1, 0), "end": ts(1, 1), "owner": "A1",
                      "job_id": j} for g, (j, _) in jobs.items()],
        telemetry=[{"ts": ts(1, h / 2), "gpu_id": g, "util_pct": u, "power_w": 200.0}
                   for g, (_, u) in jobs.items() for h in range(2)],
        owners=[{"tenant": "A", "project": "A1"}],
    )
    rep = report(b, activity={"max_sample_gap_s": 1800}, boundary=NO_POWER)
    held = {r["cause"]: (r["gpu_hours"], r["energy_kwh_gpu"]) for r in rep["idle"] if r["kind"] == "allocated"}
    assert held == {"oversized_request": pytest.approx((1.0, 0.2)), "underutilized": pytest.approx((2.0, 0.4))}
    assert rep["totals"]["active_gpu_hours"] == pytest.approx(1.0)


def test_kills_a_pool_priced_only_outside_the_period_taken_as_reached():
    """g0 (pool p) is held by A 00:00-04:00 on 10-01. p's only rate is for 10-05 and its only cost
    row ($30 network) for 10-05 too: neither prices any of the period's held time, so no cost
    input of the period reaches p. A's cost and the fleet's are unknown (null), and the gap
    `cost unknown` names p.

    A network row of p in force on 10-01 ($30) does reach p, whatever the boundary
    (docs/engine.md, choice 20): under a boundary without network it counts $0, a known $0,
    and no gap. With a rate in force instead ($1 per card-hour from 09-30 on, open end) the
    fleet costs 24 card-hours x $1 = $24, A's 4 held hours $4.

    Mutants (report.uncosted_pools): rows taken whatever their window (the code before this
    test): p reached by the rows of 10-05, the fleet $0 instead of unknown; pools reached taken
    as those named by a cost row *and* a rate (`&` instead of `|`): the network row alone no
    longer reaches p, and the boundary's $0 turns unknown. (A window that only touches the
    period is clipped to nothing by ledger.clip, like every row the spread reads: $0 for the
    touching rows is its mutant, `end >= start`.)
    """
    held = {"inventory": [{"gpu_id": "g0", "pool": "p"}],
            "allocations": [{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 4), "owner": "A"}]}

    def network(day):
        return [{"cost_id": "x", "category": "network", "amount": 30.0, "pool": "p", "start": ts(day, 0),
                 "end": ts(day + 1, 0)}]

    rep = report(make_bundle(**held, rates=[{"pool": "p", "price_per_gpu_hour": 1.0, "start": ts(5, 0),
                                             "end": ts(6, 0)}], costs=network(5)))
    assert rep["totals"]["cost"] is None
    assert by(rep, "by_project", "project") == {"A": None}
    assert [d.split(":")[0] for d in gaps(rep, "cost unknown")] == [
        "no cost row, rate or measured energy of the period reaches pool(s) p"]
    # Windows that only touch the period's edges: a rate from 10-02 00:00 (the period's end) and
    # a cost row that ends at 10-01 00:00 (its start) price none of it either.
    touching = make_bundle(**held, rates=[{"pool": "p", "price_per_gpu_hour": 1.0, "start": ts(2, 0)}],
                           costs=[{**network(1)[0], "start": ts(30, 0), "end": ts(1, 0)}])
    assert report(touching)["totals"]["cost"] is None

    rep = report(make_bundle(**held, costs=network(1)),
                 boundary={"name": "custom", "categories": [c for c in CATEGORIES if c != "network"]})
    assert rep["totals"]["cost"] == 0.0
    assert by(rep, "by_project", "project") == {"A": 0.0}
    assert gaps(rep, "cost unknown") == []

    rep = report(make_bundle(**held, rates=[{"pool": "p", "price_per_gpu_hour": 1.0, "start": ts(30, 0)}]))
    assert rep["totals"]["cost"] == pytest.approx(24.0)
    assert by(rep, "by_project", "project") == {"A": pytest.approx(4.0)}
    assert gaps(rep, "cost unknown") == []



def test_kills_pools_and_owners_without_allocated_hours_taken_as_uncosted():
    """Pools p (g0), q (g1) and r (g2 of capacity 0, g3), 10-01. A rate prices p only, $1 per
    card-hour: the fleet's input is g0's 24 card-hours, $24. A holds g0 00:00-04:00 ($4); B holds
    g2 00:00-04:00, a card of no capacity, so 0 allocated GPU-hours; C holds g3 00:00-04:00
    (4 GPU-hours in r); nobody holds g1.
      Pools with allocated time: p and r. No cost input reaches r: the gap `cost unknown` names r
      alone (q has no allocated time), and C's cost is unknown. B held no GPU-hour of r: nothing
      of r's unknown cost is B's, so B's cost is a known $0. A's is $4.

    Mutants (report.uncosted_pools: pools of segments with alloc_h >= 0, so every pool with a
    card: the gap names q and r; report.owner_table: owners of segments with alloc_h >= 0 in an
    uncosted pool made unknown: B's $0 turns null).
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}, {"gpu_id": "g1", "pool": "q"},
                   {"gpu_id": "g2", "pool": "r", "capacity": 0.0}, {"gpu_id": "g3", "pool": "r"}],
        allocations=[{"allocation_id": o, "gpu_id": g, "start": ts(1, 0), "end": ts(1, 4), "owner": o}
                     for o, g in (("A", "g0"), ("B", "g2"), ("C", "g3"))],
        rates=[{"pool": "p", "price_per_gpu_hour": 1.0}],
    )
    rep = report(b)
    assert [d.split(":")[0] for d in gaps(rep, "cost unknown")] == [
        "no cost row, rate or measured energy of the period reaches pool(s) r"]
    assert rep["totals"]["cost"] == pytest.approx(24.0)
    assert by(rep, "by_project", "project") == {"A": pytest.approx(4.0), "B": 0.0, "C": None}
    assert by(rep, "by_project", "project", "allocated_gpu_hours") == {"A": pytest.approx(4.0), "B": 0.0,
                                                                        "C": pytest.approx(4.0)}


def test_kills_an_owner_held_half_an_hour_given_no_cost_per_allocated_hour():
    """A holds g0 (pool p, $1 per card-hour) 00:00-00:30: 0.5 allocated GPU-hours costing $0.50, so
    A's cost per allocated GPU-hour is $0.50 / 0.5 = $1.00.

    Mutant (report.owner_table: the ratio only above 1 allocated GPU-hour): null.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 0.5),
                                  "owner": "A"}],
                    rates=[{"pool": "p", "price_per_gpu_hour": 1.0}])
    rows = {r["project"]: r for r in report(b)["by_project"]}
    assert rows["A"]["cost"] == pytest.approx(0.5)
    assert rows["A"]["cost_per_allocated_gpu_hour"] == pytest.approx(1.0)


def test_kills_a_trend_day_without_telemetry_given_zero_active_hours():
    """Period 10-01 to 10-03. A holds g0 both days; g0 is sampled at 10-01 00:00 and 00:30 at 100 %
    (gap cap 1,800 s): 1 active GPU-hour on 10-01; 10-02 has 24 held hours and no sample, so its
    active hours are unknown (null), not 0.

    Mutant (report.trend: active hours known where held covered hours are >= 0): 0.0 on 10-02.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(3, 0),
                                  "owner": "A"}],
                    telemetry=[{"ts": ts(1, h / 2), "gpu_id": "g0", "util_pct": 100.0} for h in range(2)])
    rep = report(b, period=TWO_DAYS, activity={"max_sample_gap_s": 1800})
    assert [(d["day"], d["allocated_gpu_hours"], d["active_gpu_hours"]) for d in rep["trend"]] == [
        ("2026-10-01", pytest.approx(24.0), pytest.approx(1.0)), ("2026-10-02", pytest.approx(24.0), None)]


def test_kills_an_energy_cost_outside_the_boundary_taken_as_unknown():
    """A holds g0 00:00-04:00; no telemetry, no power row; the boundary leaves power out. Energy is
    not priced by measurement inside this boundary, so the energy cost is a known $0 (the fleet's
    and A's), though the kWh are unknown (null: nothing was measured).

    Mutant (report.energy_priced_by_measurement: `or` instead of `and`, so "no power row" alone
    makes energy priced by measurement): the energy cost turns unknown.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 4),
                                  "owner": "A"}],
                    rates=[{"pool": "p", "price_per_gpu_hour": 1.0}])
    rep = report(b, boundary=NO_POWER)
    assert rep["totals"]["energy_cost"] == 0.0
    assert rep["totals"]["energy_kwh_gpu"] is None
    assert by(rep, "by_project", "project", "energy_cost") == {"A": 0.0}


def test_kills_an_owner_held_half_an_hour_without_telemetry_given_a_known_energy_cost():
    """A holds g0 00:00-00:30 (0.5 allocated GPU-hours, $1 per card-hour rate); power is in the
    boundary, there is no power row and no telemetry, so energy is priced by measurement and
    nothing was measured: A's energy cost is unknown (null), not $0. B holds g1 00:00-04:00 the
    same way: unknown too.

    Mutant (report.owner_table: an owner unmetered only above 1 allocated GPU-hour): A's energy
    cost reads $0.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}, {"gpu_id": "g1", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 0.5),
                                  "owner": "A"},
                                 {"allocation_id": "b", "gpu_id": "g1", "start": ts(1, 0), "end": ts(1, 4),
                                  "owner": "B"}],
                    rates=[{"pool": "p", "price_per_gpu_hour": 1.0}])
    rep = report(b)
    assert by(rep, "by_project", "project", "energy_cost") == {"A": None, "B": None}
    assert by(rep, "by_project", "project") == {"A": pytest.approx(0.5), "B": pytest.approx(4.0)}


def test_kills_a_multi_card_job_without_samples_in_the_period_crashing_the_oversized_cause():
    """Job j1 holds g0 and g1 10-01 00:00-04:00; the only telemetry is of 09-30 (before the
    period), so no window of the period has a sample of a held card: 8 allocated GPU-hours, active
    hours unknown, no oversized time.

    Mutant (activity.interval_activity: `overs or job_codes is not None`): with jobs known and no
    oversized frame, pl.concat([]) raises.
    """
    b = make_bundle(
        inventory=[{"gpu_id": g, "pool": "p"} for g in ("g0", "g1")],
        allocations=[{"allocation_id": f"a-{g}", "gpu_id": g, "start": ts(1, 0), "end": ts(1, 4), "owner": "A1",
                      "job_id": "j1"} for g in ("g0", "g1")],
        telemetry=[{"ts": ts(30, 12), "gpu_id": "g0", "util_pct": 100.0}],
        owners=[{"tenant": "A", "project": "A1"}],
    )
    rep = report(b)
    assert rep["totals"]["allocated_gpu_hours"] == pytest.approx(8.0)
    assert rep["totals"]["active_gpu_hours"] is None
    assert [r for r in rep["idle"] if r["cause"] == "oversized_request"] == []


# ------------------------------------------------- the eight tokens survivors of full10 (issue 25)


def test_kills_the_summaries_of_request_batches_merged_as_the_first_batch_alone(monkeypatch):
    """Model m costs $24 (served); A1 sends r1 at 01:00 (100 output tokens) and B1 sends r2 at 02:00
    (300 output tokens). Resolved in batches of one request (engine.REQUEST_SLICE_ROWS = 1), the
    two batch summaries fold into one: m served 400 output tokens in 2 requests, $24 x 1e6 / 400 =
    $60,000 per million tokens; the recharge by tokens gives A1 100/400 of $24 = $6 and B1 $18.

    Mutant (tokens.merge_summaries returning the first part when there are two): 100 tokens,
    1 request, $240,000 per million, and all $24 on A1.
    """
    from cost_engine import engine

    monkeypatch.setattr(engine, "REQUEST_SLICE_ROWS", 1)
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 0,
                 "output_tokens": 100},
                {"request_id": "r2", "ts": ts(1, 2), "owner": "B1", "model": "m", "input_tokens": 0,
                 "output_tokens": 300}])
    rep = report(b)
    m = {r["model"]: r for r in rep["by_model"]}["m"]
    assert (m["output_tokens"], m["requests"]) == (400, 2)
    assert m["cost_per_million_tokens"] == pytest.approx(60_000.0)
    assert by(rep, "by_project", "project") == {"A1": pytest.approx(6.0), "B1": pytest.approx(18.0),
                                                "svc": pytest.approx(0.0)}


def test_kills_a_request_at_the_period_end_counted_in_the_period():
    """Period 10-01 00:00 to 10-02 00:00 (half-open). Model m costs $24 (served); A1 sends r1 at
    01:00 (100 output tokens) and r2 exactly at 10-02 00:00 (300 output tokens): r2 starts at the
    period's end, so it belongs to the next period. m: 100 output tokens, 1 request, $240,000 per
    million tokens.

    Mutant (tokens.in_period keeping requests at ts <= end): 400 tokens, 2 requests, $60,000.
    """
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 0,
                 "output_tokens": 100},
                {"request_id": "r2", "ts": ts(2, 0), "owner": "A1", "model": "m", "input_tokens": 0,
                 "output_tokens": 300}])
    rep = report(b)
    m = {r["model"]: r for r in rep["by_model"]}["m"]
    assert (m["output_tokens"], m["requests"]) == (100, 1)
    assert m["cost_per_million_tokens"] == pytest.approx(240_000.0)
    assert rep["totals"]["output_tokens"] == 100


def test_kills_a_time_to_first_token_exactly_at_the_slo_taken_as_missing_it():
    """The SLO is ttft <= 2,000 ms and latency <= 30,000 ms (the defaults). Model m costs $24
    (served). A1's r1 has ttft exactly 2,000 ms and latency 5,000 ms, status ok: it meets the SLO,
    so its 100 output tokens are good. r2 (ttft 2,001 ms) misses it: 300 tokens, not good.
    Good tokens 100, $24 x 1e6 / 100 = $240,000 per million good tokens; SLO attainment 1 of 2.

    Mutant (tokens._resolve_batch: ttft < SLO): no good token, the cost per million good tokens
    unknown, attainment 0.
    """
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 0,
                 "output_tokens": 100, "ttft_ms": 2000.0, "latency_ms": 5000.0},
                {"request_id": "r2", "ts": ts(1, 2), "owner": "A1", "model": "m", "input_tokens": 0,
                 "output_tokens": 300, "ttft_ms": 2001.0, "latency_ms": 5000.0}])
    row = compute(b, make_config()).models.row(0, named=True)
    assert (row["good_tokens"], row["good_requests"], row["requests"]) == (100, 1, 2)
    assert row["cost_per_million_good_tokens"] == pytest.approx(240_000.0)
    assert row["slo_attainment"] == pytest.approx(0.5)


def test_kills_callers_without_tokens_given_a_share_of_the_recharge():
    """Model m costs $24 (served); its only caller A1 sent one request of 0 input and 0 output
    tokens (recharge by weighted tokens, the default). No caller has weight, so nothing is moved:
    the $24 stays on the service owner svc, and A1 (listed: it sent a request) is charged $0.

    Mutant (tokens.recharge keeping callers of weight >= 0): A1's share is 0 / 0 (NaN), and the
    $24 becomes NaN on A1 (the report prints no cost for svc).
    """
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 0,
                 "output_tokens": 0}])
    comp = compute(b, make_config())
    assert comp.money["amount"].is_nan().sum() == 0
    rep = build_report(comp)
    assert by(rep, "by_project", "project") == {"svc": pytest.approx(24.0), "A1": pytest.approx(0.0)}
    reconciled(rep, 24.0)


def test_kills_a_model_without_tokens_given_an_infinite_cost_per_million_tokens():
    """Model m is served all day ($24) without telemetry, and nobody sent it a request. Every
    cost per million tokens of m is unknown (null) in the engine's model table, which the
    dashboard reads: $24 over 0 tokens is no figure. Its energy is unknown too (no telemetry:
    kWh, facility kWh, average power null, not 0).

    Mutants (tokens.model_table: a cost per million over 0 tokens or more, $24 / 0 = inf; energy
    figures kept where 0 s of the model's time was metered, 0 kWh).
    """
    row = compute(served([]), make_config()).models.row(0, named=True)
    assert row["cost"] == pytest.approx(24.0)
    for c in ("cost_per_million_tokens", "cost_per_million_input_tokens", "cost_per_million_output_tokens",
              "cost_per_million_uncached_input_tokens", "cost_per_million_cached_input_tokens",
              "cost_per_million_good_tokens"):
        assert row[c] is None, c
    for c in ("energy_kwh_gpu", "energy_kwh_facility", "avg_power_w_per_gpu"):
        assert row[c] is None, c


def test_kills_input_tokens_of_weight_zero_given_the_whole_model_cost():
    """Token weights input 0, cached input 0, output 1 (the user's choice: input is free). Model m
    costs $24 (served); A1 sent 100 input tokens and no output token. The input/output split of
    the cost follows the weights (no request has phase times): input weighs 0 and output 0, so
    the input share is 0 / 0, taken as 0 (input carries none of the cost): $0 per million input
    tokens, while the cost per million tokens of any kind is $24 x 1e6 / 100 = $240,000. Output:
    0 tokens, unknown.

    Mutant (tokens.model_table: the 0 / 0 input share filled with 1): $240,000 per million input
    tokens, against weights that price input at nothing.
    """
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 100,
                 "output_tokens": 0}])
    cfg = make_config(allocation={"token_weights": {"input": 0.0, "cached_input": 0.0, "output": 1.0}})
    row = compute(b, cfg).models.row(0, named=True)
    assert row["cost_per_million_tokens"] == pytest.approx(240_000.0)
    assert row["cost_per_million_input_tokens"] == pytest.approx(0.0)
    assert row["cost_per_million_output_tokens"] is None


def test_kills_a_retry_share_over_zero_requests():
    """Model m costs $24 (served). A1's only record is a usage bucket from 10-01 23:00 to 10-02
    01:00 (2 h) of 1 request, 100 output tokens, attempt 1: the period keeps its first hour,
    floor(1 x 0.5) = 0 requests and floor(100 x 0.5) = 50 tokens. The source says which try its
    requests were, but the period holds 0 requests: the retry share (and SLO attainment, error
    share) is unknown (null), not 0 / 0.

    Mutant (tokens.model_table: a retry share over requests >= 0): NaN.
    """
    b = served([{"request_id": "b1", "ts": ts(1, 23), "end": ts(2, 1), "owner": "A1", "model": "m",
                 "requests": 1, "input_tokens": 0, "output_tokens": 100, "attempt": 1}])
    row = compute(b, make_config()).models.row(0, named=True)
    assert (row["requests"], row["output_tokens"]) == (0, 50)
    assert row["retry_share"] is None
    assert row["slo_attainment"] is None and row["error_share"] is None


def test_kills_a_model_day_without_output_tokens_given_an_infinite_cost_per_million():
    """Model m is served on g0 all day ($24 for 10-01); A1 sent it one request of 100 input tokens
    and no output token. The day's cost per million output tokens is $24 over 0 output tokens: no
    figure (null in model_trend), not infinity; its tokens are 100.

    Mutant (tokens.model_trend: the cost per million output tokens where output tokens >= 0):
    $24 / 0 x 1e6 = inf.
    """
    from cost_engine import tokens

    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 100,
                 "output_tokens": 0}])
    comp = compute(b, make_config())
    (day,) = tokens.model_trend(comp.money_before_recharge, comp.seg, comp.request_summary,
                                comp.request_hours).iter_rows(named=True)
    assert (day["cost"], day["tokens"], day["output_tokens"]) == (pytest.approx(24.0), 100, 0)
    assert day["cost_per_million_output_tokens"] is None


def test_kills_the_cache_hit_rate_of_one_input_token_taken_as_unknown():
    """Model m costs $24 (served); A1 sent it one request of 1 cached input token, 0 uncached and
    10 output tokens. Its cache hit rate is 1 cached / 1 input token = 1.0.

    Mutant (tokens.model_table: the rate only over more than 1 input token): unknown.
    """
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 0,
                 "cached_input_tokens": 1, "output_tokens": 10}])
    row = compute(b, make_config()).models.row(0, named=True)
    assert (row["input_tokens"], row["cached_input_tokens"]) == (0, 1)
    assert row["cache_hit_rate"] == pytest.approx(1.0)


def test_kills_a_request_with_prefill_but_no_decode_time_taken_as_having_both():
    """Model m costs $24 (served); phase-time split (the default). A1's r1: 100 input, 100 output
    tokens, prefill 1,000 ms, decode 3,000 ms; r2: 100 input, 100 output, prefill 2,000 ms and no
    decode time. Only r1 has both phases: input share 1,000 / (1,000 + 3,000) = 0.25, so input
    $6 over 200 input tokens = $30,000 per million, output $18 over 200 = $90,000 per million;
    the gaps say the phase time is missing for some requests of m.

    Mutant (tokens.summarize: a request with either phase time counted as having both): prefill
    3,000 ms, decode 3,000 ms, share 0.5, $60,000 per million of each, and no gap.
    """
    b = served([{"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 100,
                 "output_tokens": 100, "prefill_ms": 1000.0, "decode_ms": 3000.0},
                {"request_id": "r2", "ts": ts(1, 2), "owner": "A1", "model": "m", "input_tokens": 100,
                 "output_tokens": 100, "prefill_ms": 2000.0}])
    rep = report(b)
    m = {r["model"]: r for r in rep["by_model"]}["m"]
    assert m["cost_per_million_input_tokens"] == pytest.approx(30_000.0)
    assert m["cost_per_million_output_tokens"] == pytest.approx(90_000.0)
    assert gaps(rep, "phase time missing")


def test_kills_overlapping_events_of_one_kind_that_end_the_kind_too_early():
    """g0 (pool p, no telemetry) is free all day at $1 per card-hour: $24, all idle. Two
    maintenance windows of the pool overlap, 02:00-06:00 and 04:00-08:00, and a third runs from
    22:00 past the period's end (to 10-02 02:00). Maintenance holds 02:00-08:00 and 22:00-24:00:
    8 h, $8; no demand the other 16 h, $16. Both to the microsecond (rel 1e-12).

    Mutants (intervals.Precedence: an interval's end counted as -2 in force: after 06:00 neither
    of the two is taken as in force and the count stays below zero, so the third is lost too: 4 h,
    $4; Precedence.won: a rank's time before its key's first breakpoint read as 1 instead of 0:
    8 h less a microsecond or two).
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}], allocations=[],
                    rates=[{"pool": "p", "price_per_gpu_hour": 1.0}],
                    events=[{"start": ts(1, 2), "end": ts(1, 6), "pool": "p", "kind": "maintenance"},
                            {"start": ts(1, 4), "end": ts(1, 8), "pool": "p", "kind": "maintenance"},
                            {"start": ts(1, 22), "end": ts(2, 2), "pool": "p", "kind": "maintenance"}])
    rep = report(b)
    assert idle_costs(rep) == pytest.approx({("unallocated", "maintenance"): 8.0, ("unallocated", "no_demand"): 16.0},
                                            rel=1e-12)
    hours = {(r["kind"], r["cause"]): r["gpu_hours"] for r in rep["idle"]}
    assert hours == pytest.approx({("unallocated", "maintenance"): 8.0, ("unallocated", "no_demand"): 16.0},
                                  rel=1e-12)
    reconciled(rep, 24.0)


def test_kills_the_price_of_a_free_segment_ending_between_breakpoints_scaled_by_a_million_squared():
    """g0 (pool p, no telemetry) is free 00:00-12:00 and held by A1 12:00-24:00, at $1 per
    card-hour. A maintenance window of the pool runs 02:00-04:00. The free segment's $12 is idle:
    maintenance 2 h, $2; no demand 10 h, $10. The segment ends at 12:00, where neither the
    pool's events nor its prices have a breakpoint, so its last part (04:00-12:00) is priced from
    the breakpoint before it.

    Mutant (intervals.WeightedPrecedence.weighted: that last part's price multiplied by 1e6
    instead of divided, $ per hour x microseconds): no demand's price share is ~1 and
    maintenance's ~0.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}],
                    allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 12), "end": ts(2, 0),
                                  "owner": "A1"}],
                    owners=[{"tenant": "A", "project": "A1"}],
                    rates=[{"pool": "p", "price_per_gpu_hour": 1.0}],
                    events=[{"start": ts(1, 2), "end": ts(1, 4), "pool": "p", "kind": "maintenance"}])
    rep = report(b)
    assert idle_costs(rep) == pytest.approx({("unallocated", "maintenance"): 2.0, ("unallocated", "no_demand"): 10.0},
                                            rel=1e-12)
    reconciled(rep, 24.0)


def test_kills_the_price_of_causes_read_from_one_dollar_before_the_first_price():
    """g0 (pool p, no telemetry) is free all day; the pool's only rate is $1 per card-hour from
    06:00 to 24:00: $18, all idle. A maintenance window of the pool runs 08:00-10:00. The free
    segment starts at 00:00, before any breakpoint of the pool's prices or events. Priced by the
    rates in force: maintenance 2 h x $1 = $2, no demand the other 16 priced hours, $16 (the six
    unpriced hours cost nothing).

    Mutant (intervals.WeightedPrecedence.weighted: a rank's priced time before the key's first
    breakpoint read as 1 instead of 0): each rank's price integral starts from 1, and the split of
    the $18 moves.
    """
    b = make_bundle(inventory=[{"gpu_id": "g0", "pool": "p"}], allocations=[],
                    rates=[{"pool": "p", "price_per_gpu_hour": 1.0, "start": ts(1, 6), "end": ts(2, 0)}],
                    events=[{"start": ts(1, 8), "end": ts(1, 10), "pool": "p", "kind": "maintenance"}])
    rep = report(b)
    assert idle_costs(rep) == pytest.approx({("unallocated", "maintenance"): 2.0, ("unallocated", "no_demand"): 16.0},
                                            rel=1e-12)
    reconciled(rep, 18.0)
