"""A card's ledger is cut only where something concerns it; queue waits, events and cost spans meet it by overlap (issue 15).

Every figure is computed by hand in the docstring. Cards have no telemetry unless a test says
so: a card without telemetry is never cut at a queue wait or a pool's cost span, and the share
of a segment's time a wait covers decides its idle cause.
"""

from __future__ import annotations

import polars as pl
import pytest

from cost_engine.engine import compute
from cost_engine.report import build_report
from cost_engine.lineage import explain
from tests.helpers import make_bundle, make_config, ts


def causes(rep, kind="unallocated"):
    return {r["cause"]: (r["gpu_hours"], r["cost"]) for r in rep["idle"] if r["kind"] == kind}


def cuts_of(comp, gpu_id):
    """The instants a card's ledger is cut at (its segments' starts after the first)."""
    t0 = comp.seg.filter(pl.col("gpu_id") == gpu_id)["t0"].unique().sort()
    return [f"{t:%H:%M}" for t in t0.to_list()[1:]]


def flat_telemetry(gpu_id, util=0.0):
    """Samples every 30 min all day (1800 s cap) at `util` %, 100 W: the card has telemetry."""
    return [{"ts": ts(1, h / 2), "gpu_id": gpu_id, "util_pct": util, "power_w": 100.0} for h in range(48)]


CONFIG = {"activity": {"max_sample_gap_s": 1800}}


def test_a_wait_in_pool_a_leaves_pool_b_uncut_and_no_demand():
    """Two free cards, gA in pool A and gB in pool B, both with telemetry; $48 depreciation per pool
    for the day ($2 per card-hour). A job waits in pool A on resources 06:00-12:00.

    gA (telemetry): cut at 06:00 and 12:00; 6 h fragmentation ($12), 18 h no_demand ($36).
    gB: not cut at all; 24 h no_demand ($48). Unallocated idle = $96 = input cost.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "gA", "pool": "A"}, {"gpu_id": "gB", "pool": "B"}],
        allocations=[],
        telemetry=flat_telemetry("gA") + flat_telemetry("gB"),
        queue=[{"job_id": "q1", "pool": "A", "submit": ts(1, 6), "start": ts(1, 12), "reason": "resources"}],
        costs=[{"cost_id": f"dep-{p}", "category": "depreciation", "amount": 48.0, "start": ts(1), "end": ts(2),
                "pool": p} for p in ("A", "B")],
    )
    comp = compute(b, make_config(boundary={"name": "custom", "categories": ["depreciation"]}, **CONFIG))
    assert cuts_of(comp, "gA") == ["06:00", "12:00"]
    assert cuts_of(comp, "gB") == []
    detail = build_report(comp)["idle_backlog"]
    by = {(r["cause"]): r for r in detail}
    assert by["fragmentation"]["gpu_hours"] == pytest.approx(6.0) and by["fragmentation"]["cost"] == pytest.approx(12.0)
    assert by["no_demand"]["gpu_hours"] == pytest.approx(42.0) and by["no_demand"]["cost"] == pytest.approx(84.0)
    pb = comp.idle.join(comp.seg.select("s_idx", "gpu_id"), on="s_idx").filter(pl.col("gpu_id") == "gB")
    assert pb["cause"].unique().to_list() == ["no_demand"] and pb["gpu_hours"].sum() == pytest.approx(24.0)


def test_a_wait_over_half_a_free_segment_gives_half_its_hours():
    """One card g0 without telemetry, pool p; depreciation $240 for the day = $10 per card-hour.
    Owner A1 holds it 00-08 and 16-24, so it is free 08-16 (one 8 h segment). A quota wait in p
    12:00-20:00 covers half of that segment and does not cut it.

    quota: 4 h, $40; no_demand: 4 h, $40; A1: 16 h, $160. Segments of g0: 00-08, 08-16, 16-24.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a1", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 8), "owner": "A1"},
                     {"allocation_id": "a2", "gpu_id": "g0", "start": ts(1, 16), "end": ts(2, 0), "owner": "A1"}],
        queue=[{"job_id": "q1", "pool": "p", "submit": ts(1, 12), "start": ts(1, 20), "reason": "quota"}],
        costs=[{"cost_id": "dep", "category": "depreciation", "amount": 240.0, "start": ts(1), "end": ts(2)}],
    )
    comp = compute(b, make_config())
    assert cuts_of(comp, "g0") == ["08:00", "16:00"]
    rep = build_report(comp)
    assert causes(rep) == {"quota": pytest.approx((4.0, 40.0)), "no_demand": pytest.approx((4.0, 40.0))}
    assert rep["by_project"][0]["cost"] == pytest.approx(160.0)
    assert rep["reconciliation"]["idle"] == pytest.approx(80.0)


def test_resources_half_of_a_segment_is_fragmentation():
    """As above with a resources wait 04:00-12:00 over a card free 00-24 (no allocations):
    fragmentation 8 h ($80), no_demand 16 h ($160); the card stays one segment."""
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[],
        queue=[{"job_id": "q1", "pool": "p", "submit": ts(1, 4), "start": ts(1, 12), "reason": "resources"}],
        costs=[{"cost_id": "dep", "category": "depreciation", "amount": 240.0, "start": ts(1), "end": ts(2)}],
    )
    comp = compute(b, make_config())
    assert cuts_of(comp, "g0") == []
    assert causes(build_report(comp)) == {"fragmentation": pytest.approx((8.0, 80.0)),
                                           "no_demand": pytest.approx((16.0, 160.0))}


def test_overlapping_waits_and_an_event_follow_the_precedence():
    """One free card g0 without telemetry, pool p, $10 per card-hour. Quota wait 02-10, resources
    wait 06-14, maintenance on pool p 08-12; none of them cuts the card.

    First match wins (maintenance, quota, resources, no_demand):
    maintenance 08-12 = 4 h ($40); quota 02-08 = 6 h ($60); fragmentation 12-14 = 2 h ($20)
    (06-08 is quota's, 10-12 maintenance's); no_demand 00-02 and 14-24 = 12 h ($120).
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p", "node": "n0"}],
        allocations=[],
        queue=[{"job_id": "q1", "pool": "p", "submit": ts(1, 2), "start": ts(1, 10), "reason": "quota"},
               {"job_id": "q2", "pool": "p", "submit": ts(1, 6), "start": ts(1, 14), "reason": "resources"}],
        events=[{"start": ts(1, 8), "end": ts(1, 12), "kind": "maintenance", "pool": "p"}],
        costs=[{"cost_id": "dep", "category": "depreciation", "amount": 240.0, "start": ts(1), "end": ts(2)}],
    )
    comp = compute(b, make_config())
    assert cuts_of(comp, "g0") == []
    assert causes(build_report(comp)) == {
        "maintenance": pytest.approx((4.0, 40.0)),
        "quota": pytest.approx((6.0, 60.0)),
        "fragmentation": pytest.approx((2.0, 20.0)),
        "no_demand": pytest.approx((12.0, 120.0)),
    }


def test_an_event_on_one_node_cuts_only_that_nodes_cards():
    """Cards g0, g1 on node n0 and g2 on node n1, all in pool p, free, no telemetry. A degraded
    hardware event on node n0 09:00-11:00 cuts g0 and g1 there, not g2.

    degraded_hardware: 2 cards x 2 h = 4 h; no_demand: 72 - 4 = 68 h.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p", "node": "n0"}, {"gpu_id": "g1", "pool": "p", "node": "n0"},
                   {"gpu_id": "g2", "pool": "p", "node": "n1"}],
        allocations=[],
        events=[{"start": ts(1, 9), "end": ts(1, 11), "kind": "degraded_hardware", "node": "n0"}],
    )
    comp = compute(b, make_config())
    assert cuts_of(comp, "g0") == ["09:00", "11:00"] and cuts_of(comp, "g1") == ["09:00", "11:00"]
    assert cuts_of(comp, "g2") == []
    assert {c: h for c, (h, _) in causes(build_report(comp)).items()} == pytest.approx(
        {"degraded_hardware": 4.0, "no_demand": 68.0})


def test_a_cost_span_of_one_pool_is_spread_by_overlap_without_cutting():
    """Pool A has gA0 and gA1, pool B has gB; no telemetry. Owner A1 holds gA0 00-12.
    A depreciation row of pool A, $120 for 06:00-18:00: 2 cards x 12 h = 24 card-hours, $5 each.

    A1 (gA0 06-12): 6 h x $5 = $30; idle (gA0 12-18, gA1 06-18): 18 h x $5 = $90. Nothing is
    cut at 06:00 or 18:00, and gB (pool B) receives nothing. The lineage of A1 names the row.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "gA0", "pool": "A"}, {"gpu_id": "gA1", "pool": "A"}, {"gpu_id": "gB", "pool": "B"}],
        allocations=[{"allocation_id": "a1", "gpu_id": "gA0", "start": ts(1, 0), "end": ts(1, 12), "owner": "A1"}],
        costs=[{"cost_id": "dep-A", "category": "depreciation", "amount": 120.0, "start": ts(1, 6), "end": ts(1, 18),
                "pool": "A"}],
    )
    comp = compute(b, make_config())
    assert cuts_of(comp, "gA0") == ["12:00"] and cuts_of(comp, "gA1") == [] and cuts_of(comp, "gB") == []
    rep = build_report(comp)
    assert rep["by_project"][0]["cost"] == pytest.approx(30.0)
    assert rep["reconciliation"]["idle"] == pytest.approx(90.0)
    assert comp.money.filter(pl.col("gpu_id") == "gB")["amount"].sum() == 0
    costs = explain(comp, project="A1").costs
    assert costs.select("cost_id", "cost").to_dicts() == [{"cost_id": "dep-A", "cost": pytest.approx(30.0)}]


def test_a_cost_span_cuts_only_its_pools_cards_with_telemetry():
    """Same fleet; a power row of pool A ($10, 06:00-18:00, spread by energy) and telemetry on gA1
    and gB at 100 W all day. The row's edges cut gA1 (pool A, telemetry), not gB (pool B) and not
    gA0 (no telemetry).

    gA1 draws 100 W x 12 h = 1.2 kWh GPU in the span, all of the pool's measured energy there:
    the $10 goes to idle (gA1 is free). Outside the span, measured energy is priced at the flat
    $0.12/kWh x 1.3 x 1.2 facility factor: gA1 00-06 and 18-24 = 1.2 kWh GPU = 1.872 kWh
    facility = $0.22464; gB all day 2.4 kWh = 3.744 kWh facility = $0.44928 (a pool-A power bill
    does not pay for pool B's energy).
    """
    b = make_bundle(
        inventory=[{"gpu_id": "gA0", "pool": "A"}, {"gpu_id": "gA1", "pool": "A"}, {"gpu_id": "gB", "pool": "B"}],
        allocations=[{"allocation_id": "a1", "gpu_id": "gA0", "start": ts(1, 0), "end": ts(1, 12), "owner": "A1"}],
        telemetry=flat_telemetry("gA1") + flat_telemetry("gB"),
        costs=[{"cost_id": "pow-A", "category": "power", "amount": 10.0, "start": ts(1, 6), "end": ts(1, 18),
                "pool": "A"}],
    )
    comp = compute(b, make_config(boundary={"name": "energy_only"}, **CONFIG))
    assert cuts_of(comp, "gA1") == ["06:00", "18:00"]
    assert cuts_of(comp, "gB") == [] and cuts_of(comp, "gA0") == ["12:00"]
    rep = build_report(comp)
    measured = comp.money.filter(pl.col("driver") == "measured_energy")
    assert measured.filter(pl.col("gpu_id") == "gA1")["amount"].sum() == pytest.approx(0.22464)
    assert measured.filter(pl.col("gpu_id") == "gB")["amount"].sum() == pytest.approx(0.44928)
    assert rep["reconciliation"]["input_cost"] == pytest.approx(10.0 + 0.22464 + 0.44928)
    assert rep["reconciliation"]["idle"] == pytest.approx(10.0 + 0.22464 + 0.44928)


def test_no_telemetry_means_unknown_activity_not_zero():
    """A bundle without telemetry: allocated hours are known (A1 holds g0 00-12 = 12 h), active
    hours, idle rate, energy and tokens per joule are unknown (null), never 0 or 100 %."""
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a1", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 12), "owner": "A1"}],
    )
    rep = build_report(compute(b, make_config()))
    t = rep["totals"]
    assert t["allocated_gpu_hours"] == pytest.approx(12.0) and t["available_gpu_hours"] == pytest.approx(24.0)
    assert t["active_gpu_hours"] is None and t["idle_rate"] is None and t["avg_util_pct"] is None
    assert t["energy_kwh_gpu"] is None and t["output_tokens_per_joule"] is None
    assert t["telemetry_coverage"] == 0.0  # coverage itself is known: nothing was measured
    assert rep["by_project"][0]["active_gpu_hours"] is None
    assert rep["by_project"][0]["allocated_gpu_hours"] == pytest.approx(12.0)


def test_a_usage_bucket_counts_for_its_overlap_with_the_period(tmp_path):
    """A usage bucket of 60 requests and 3,600 output tokens over 23:30 (Sep 30) - 00:30 overlaps
    the period (Oct 1) for half of its hour: 30 requests and floor(3600 x 1.0) - floor(3600 x 0.5)
    = 1,800 tokens, counted at 00:00. A bucket 23:59:59 - 00:00:01 (2 s, 1 request, 3 tokens):
    floor(3 x 1) - floor(3 x 0.5) = 2 tokens, floor(1) - floor(0.5) = 1 request. A bucket that
    ends at the period's start is not in it at all.

    A 1 us period at the start of an hourly bucket of 3,600 tokens gets floor(3600 x 1e-6/3600)
    = 0 tokens, not the whole hour (issue 17, item 10)."""
    def bucket(i, start, end, n, out):
        return {"request_id": f"b{i}", "ts": start, "end": end, "owner": "A1", "model": "m", "requests": n,
                "input_tokens": 0, "output_tokens": out}
    reqs = [bucket(1, "2026-09-30T23:30:00Z", "2026-10-01T00:30:00Z", 60, 3600),
            bucket(2, "2026-09-30T23:59:59Z", "2026-10-01T00:00:01Z", 1, 3),
            bucket(3, "2026-09-30T23:00:00Z", "2026-10-01T00:00:00Z", 10, 100)]
    b = make_bundle(allocations=[{"allocation_id": "a", "gpu_id": "g", "start": ts(1, 0), "end": ts(1, 1),
                                  "owner": "A1"}], requests=reqs)
    comp = compute(b, make_config())
    t = build_report(comp)["totals"]
    assert (t["requests"], t["output_tokens"]) == (31, 1802)
    assert comp.requests.sort("request_id")["ts"].dt.strftime("%H:%M:%S").to_list() == ["00:00:00", "00:00:00"]
    # From a store the buckets that start before the period are read too (store.request_batches).
    from cost_engine import api, store

    db = tmp_path / "s.duckdb"
    store.ingest(db, b)
    assert build_report(api.run(db, config=make_config()))["totals"]["output_tokens"] == 1802

    from datetime import datetime, timedelta, timezone
    start = datetime(2026, 10, 1, 1, tzinfo=timezone.utc)
    hourly = make_bundle(allocations=[{"allocation_id": "a", "gpu_id": "g", "start": ts(1, 0), "end": ts(1, 2),
                                       "owner": "A1"}],
                         requests=[bucket(4, "2026-10-01T01:00:00Z", "2026-10-01T02:00:00Z", 1, 3600)])
    tiny = make_config(period={"start": start, "end": start + timedelta(microseconds=1)})
    assert build_report(compute(hourly, tiny))["totals"]["output_tokens"] == 0
