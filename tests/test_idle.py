"""Idle time by cause, quotas and the capacity picture (issue 4); hand-computed in docstrings."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from cost_engine.api import run
from cost_engine.engine import compute
from cost_engine.idle import capacity_over_time
from cost_engine.report import build_report
from tests.helpers import make_bundle, make_config, ts

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data" / "fleet-week"


def causes(rep, kind):
    return {r["cause"]: r for r in rep["idle"] if r["kind"] == kind}


DEPRECIATION = [{"cost_id": "dep", "category": "depreciation", "amount": 240.0, "start": ts(1, 0), "end": ts(2, 0)}]


def test_each_unallocated_cause():
    """One free card g0 (node n0, pool p) all day; $240 depreciation = $10 per card-hour.

    degraded_hardware event on g0 00-02 -> 2 h ($20); maintenance on node n0 02-04 -> 2 h ($20);
    a quota job pending in p 04-06 -> 2 h quota ($20); a resources job pending 06-09 -> 3 h
    fragmentation ($30); the other 15 h no_demand ($150). Idle total = $240 = reconciliation idle.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p", "node": "n0"}],
        allocations=[],
        events=[{"start": ts(1, 0), "end": ts(1, 2), "kind": "degraded_hardware", "gpu_id": "g0"},
                {"start": ts(1, 2), "end": ts(1, 4), "kind": "maintenance", "node": "n0"}],
        queue=[{"job_id": "q1", "pool": "p", "submit": ts(1, 4), "start": ts(1, 6), "reason": "quota", "gpus": 1},
               {"job_id": "q2", "pool": "p", "submit": ts(1, 6), "start": ts(1, 9), "reason": "resources",
                "gpus": 2}],
        costs=DEPRECIATION,
    )
    rep = build_report(compute(b, make_config()))
    got = {c: (r["gpu_hours"], r["cost"]) for c, r in causes(rep, "unallocated").items()}
    assert got == {
        "degraded_hardware": pytest.approx((2.0, 20.0)),
        "maintenance": pytest.approx((2.0, 20.0)),
        "quota": pytest.approx((2.0, 20.0)),
        "fragmentation": pytest.approx((3.0, 30.0)),
        "no_demand": pytest.approx((15.0, 150.0)),
    }
    assert sum(r["cost"] for r in causes(rep, "unallocated").values()) == pytest.approx(rep["reconciliation"]["idle"])


def test_overlapping_rules_first_match_wins():
    """Overlaps on one free card: degraded 00-03, maintenance 01-04, quota pending 00-05,
    resources pending 00-06. First match wins: degraded 3 h, maintenance 1 h (03-04), quota 1 h
    (04-05), fragmentation 1 h (05-06), no_demand 18 h."""
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p", "node": "n0"}],
        allocations=[],
        events=[{"start": ts(1, 0), "end": ts(1, 3), "kind": "degraded_hardware", "gpu_id": "g0"},
                {"start": ts(1, 1), "end": ts(1, 4), "kind": "maintenance", "pool": "p"}],
        queue=[{"job_id": "q1", "pool": "p", "submit": ts(1, 0), "start": ts(1, 5), "reason": "quota"},
               {"job_id": "q2", "pool": "p", "submit": ts(1, 0), "start": ts(1, 6), "reason": "resources"}],
    )
    rep = build_report(compute(b, make_config()))
    assert {c: r["gpu_hours"] for c, r in causes(rep, "unallocated").items()} == pytest.approx(
        {"degraded_hardware": 3.0, "maintenance": 1.0, "quota": 1.0, "fragmentation": 1.0, "no_demand": 18.0}
    )


def allocated_idle_bundle(**extra: list[dict]):
    """Job j1 (A1) holds g0 (node n0) and g1 (node n1), 00:00-10:00; samples every 30 min.

    g0 is inactive (util 0) from 00 to 08 and busy 08-10; g1 is busy 00-06 and 08-10, idle 06-08.
    Events: network_bottleneck on pool p 00-01, storage_bottleneck on node n0 01-02,
    data_loading on g0 02-03, degraded_hardware on g0 03-04.
    g0: 00-01 network, 01-02 storage, 02-03 data_loading, 03-04 degraded (1 h each); 04-06 idle
    while g1 works -> oversized_request 2 h; 06-08 both idle -> underutilized 2 h.
    g1: 06-08 idle while g0 idle too -> underutilized 2 h (the events hit g1 only when it is
    busy, or not at all). Underutilized total 4 h.
    """
    def util(card, h):
        if card == "g0":
            return 90.0 if h >= 8 else 0.0
        return 0.0 if 6 <= h < 8 else 90.0

    tele = [{"ts": ts(1, h / 2), "gpu_id": g, "util_pct": util(g, h / 2), "power_w": 300.0}
            for g in ("g0", "g1") for h in range(20)]
    return make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p", "node": "n0"}, {"gpu_id": "g1", "pool": "p", "node": "n1"}],
        allocations=[{"allocation_id": f"a-{g}", "gpu_id": g, "start": ts(1, 0), "end": ts(1, 10), "owner": "A1",
                      "job_id": "j1"} for g in ("g0", "g1")],
        telemetry=tele,
        events=[{"start": ts(1, 0), "end": ts(1, 1), "kind": "network_bottleneck", "pool": "p"},
                {"start": ts(1, 1), "end": ts(1, 2), "kind": "storage_bottleneck", "node": "n0"},
                {"start": ts(1, 2), "end": ts(1, 3), "kind": "data_loading", "gpu_id": "g0"},
                {"start": ts(1, 3), "end": ts(1, 4), "kind": "degraded_hardware", "gpu_id": "g0"}],
        owners=[{"tenant": "A", "project": "A1"}],
        costs=DEPRECIATION,
        **extra,
    )


def test_each_allocated_cause_with_cost_and_energy():
    """See allocated_idle_bundle. $240 over 2 cards x 24 h = $5 per card-hour, so each idle
    GPU-hour of a held card carries $5; 300 W -> 0.3 kWh per idle GPU-hour. The boundary is
    depreciation only, so measured energy adds no cost."""
    cfg = make_config(activity={"max_sample_gap_s": 1800}, boundary={"name": "custom", "categories": ["depreciation"]})
    rep = build_report(compute(allocated_idle_bundle(), cfg))
    got = causes(rep, "allocated")
    expected_hours = {"network_bottleneck": 1.0, "storage_bottleneck": 1.0, "data_loading": 1.0,
                      "degraded_hardware": 1.0, "oversized_request": 2.0, "underutilized": 4.0}
    assert {c: r["gpu_hours"] for c, r in got.items()} == pytest.approx(expected_hours)
    assert {c: r["cost"] for c, r in got.items()} == pytest.approx({c: 5.0 * h for c, h in expected_hours.items()})
    assert {c: r["energy_kwh_gpu"] for c, r in got.items()} == pytest.approx(
        {c: 0.3 * h for c, h in expected_hours.items()})
    backlog = {r["cause"]: r for r in rep["idle_backlog"]}
    assert backlog["oversized_request"]["top_offenders"] == ["j1"]
    assert "fewer cards" in backlog["oversized_request"]["action"]


def test_tariff_edges_inside_a_job_leave_its_idle_causes_whole():
    """allocated_idle_bundle with a tariff from 05:15 to 07:15: its edges cut g0's 05:00-05:30
    sample (oversized) and the 07:00-07:30 samples of both cards (underutilized) inside the
    telemetry stage. The hours and energy by cause are unchanged: oversized 2 h, underutilized
    4 h, 0.3 kWh per idle GPU-hour; the cost (depreciation only, $5 per card-hour) too."""
    b = allocated_idle_bundle(tariffs=[{"start": ts(1, 5.25), "end": ts(1, 7.25), "price_per_kwh": 0.30}])
    cfg = make_config(activity={"max_sample_gap_s": 1800}, boundary={"name": "custom", "categories": ["depreciation"]})
    got = causes(build_report(compute(b, cfg)), "allocated")
    assert got["oversized_request"]["gpu_hours"] == pytest.approx(2.0)
    assert got["underutilized"]["gpu_hours"] == pytest.approx(4.0)
    assert got["oversized_request"]["energy_kwh_gpu"] == pytest.approx(0.6)
    assert got["oversized_request"]["cost"] == pytest.approx(10.0)


def test_mig_instances_share_one_card_and_add_up():
    """Physical card split into MIG instances of 3/7, 3/7 and 1/7 (g.a, g.b, g.c) for 24 h.

    A (tenant T, quota 0.5 card in pool m) holds g.a all day (3/7 x 24 = 10.2857 h) and g.c
    06-12 (1/7 x 6 = 0.8571 h). available = 24 x (3/7 + 3/7 + 1/7) = 24 card-hours, the physical
    card; idle (unallocated) = 24 - 10.2857 - 0.8571 = 12.8571 h.
    Quota use: peak 3/7 + 1/7 = 4/7 = 0.5714 card (06-12) -> 114.3 % of the 0.5 quota;
    average (10.2857 + 0.8571) / 24 = 0.4643 card.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g.a", "pool": "m", "capacity": 3 / 7}, {"gpu_id": "g.b", "pool": "m", "capacity": 3 / 7},
                   {"gpu_id": "g.c", "pool": "m", "capacity": 1 / 7}],
        allocations=[{"allocation_id": "x", "gpu_id": "g.a", "start": ts(1, 0), "end": ts(2, 0), "owner": "A"},
                     {"allocation_id": "y", "gpu_id": "g.c", "start": ts(1, 6), "end": ts(1, 12), "owner": "A"}],
        owners=[{"tenant": "T", "project": "A"}],
        quotas=[{"tenant": "T", "pool": "m", "gpus": 0.5}],
    )
    rep = build_report(compute(b, make_config()))
    t = rep["totals"]
    assert t["available_gpu_hours"] == pytest.approx(24.0)
    assert t["allocated_gpu_hours"] == pytest.approx(24 * 3 / 7 + 6 / 7)
    idle_h = sum(r["gpu_hours"] for r in rep["idle"] if r["kind"] == "unallocated")
    assert idle_h + t["allocated_gpu_hours"] == pytest.approx(24.0)
    q = rep["quotas"]["rows"][0]
    assert (q["tenant"], q["pool"], q["quota"]) == ("T", "m", 0.5)
    assert q["peak_allocated"] == pytest.approx(4 / 7)
    assert q["avg_allocated"] == pytest.approx((24 * 3 / 7 + 6 / 7) / 24)
    assert "3/7" in rep["quotas"]["unit"]


def test_capacity_over_time_hourly():
    """Two cards, A holds g0 00:30-02:00: hour 00 allocated 0.5 of 2 available, hour 01 1 of 2."""
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}, {"gpu_id": "g1", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0.5), "end": ts(1, 2), "owner": "A"}],
    )
    cap = capacity_over_time(compute(b, make_config()).seg).sort("bucket")
    assert cap.height == 24
    assert cap["available_gpu_hours"].to_list()[:3] == pytest.approx([2.0, 2.0, 2.0])
    assert cap["allocated_gpu_hours"].to_list()[:3] == pytest.approx([0.5, 1.0, 0.0])
    assert cap["allocation_ratio"].to_list()[:2] == pytest.approx([0.25, 0.5])


def test_telemetry_gap_is_coverage_not_idle():
    """A holds g0 00-04 with samples only for 00-02 (util 90): 2 h covered, 2 h without telemetry.
    Coverage 50 %; the uncovered 2 h are neither active nor allocated idle."""
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 4), "owner": "A"}],
        telemetry=[{"ts": ts(1, h / 2), "gpu_id": "g0", "util_pct": 90.0} for h in range(4)],
    )
    rep = build_report(compute(b, make_config(activity={"max_sample_gap_s": 1800})))
    assert rep["totals"]["telemetry_coverage"] == pytest.approx(0.5)
    assert rep["totals"]["active_gpu_hours"] == pytest.approx(2.0)
    assert causes(rep, "allocated") == {}


def test_sample_bundle_lists_idle_by_cause_and_unallocated_equals_idle_bucket():
    """The committed sample fleet: every unallocated cause it was built with appears, and the
    unallocated idle cost adds up to the reconciliation's idle figure."""
    rep = build_report(run(SAMPLE))
    un = causes(rep, "unallocated")
    assert {"no_demand", "quota", "fragmentation", "maintenance", "degraded_hardware"} <= set(un)
    assert {"oversized_request", "storage_bottleneck", "data_loading", "underutilized"} <= set(causes(rep, "allocated"))
    assert sum(r["cost"] for r in un.values()) == pytest.approx(rep["reconciliation"]["idle"], rel=1e-9)
    assert all(r["gpu_hours"] > 0 and r["cost"] >= 0 for r in rep["idle"])
    # maintenance: the generator leaves node h100-node-02 (4 cards) free 08:00-12:00 on 10-09:
    # 4 cards x 4 h = 16 card-hours of maintenance idle.
    maint = pl.DataFrame(rep["idle"]).filter(pl.col("cause") == "maintenance")["gpu_hours"].item()
    assert maint == pytest.approx(4.0 * 4)


def _priced_idle_bundle(costs):
    """One card g0 all day; A1 holds it 00:00-02:00 (no job). Samples every 30 min: util 0 at
    100 W except 01:00-02:00, util 90 at 500 W. Tariffs: $0.10/kWh all day except $0.40 for
    01:00-02:00, so the hour the card worked is the dear one."""
    tele = [{"ts": ts(1, h / 2), "gpu_id": "g0", "util_pct": 90.0 if 2 <= h < 4 else 0.0,
             "power_w": 500.0 if 2 <= h < 4 else 100.0} for h in range(48)]
    return make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p", "node": "n0"}],
        allocations=[{"allocation_id": "a0", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 2), "owner": "A1"}],
        telemetry=tele,
        tariffs=[{"start": ts(1, 0), "end": ts(1, 1), "price_per_kwh": 0.10},
                 {"start": ts(1, 1), "end": ts(1, 2), "price_per_kwh": 0.40},
                 {"start": ts(1, 2), "end": ts(2, 0), "price_per_kwh": 0.10}],
        owners=[{"tenant": "A", "project": "A1"}],
        costs=costs,
    )


PRICED_CFG = {"activity": {"max_sample_gap_s": 1800}, "energy": {"server_overhead": 1.0, "pue": 1.0}}


def test_held_idle_energy_is_priced_when_it_was_drawn():
    """$240 depreciation = $10 per card-hour; measured energy priced by tariff (PUE and overhead 1).

    A1's 2 h: 00-01 idle at 100 W = 0.1 kWh x $0.10 = $0.01; 01-02 busy at 500 W = 0.5 kWh x
    $0.40 = $0.20. A1 pays $20 + $0.21 = $20.21. Free 02-24: 22 h x $10 + 2.2 kWh x $0.10 =
    $220.22 idle. Input $240.43.

    Held idle (underutilized, 1 GPU-hour) costs its hour of depreciation, $10, plus the energy
    drawn while idle at the price then, $0.01: $10.01. (Half of the 2-hour segment's cost
    would be $10.105: the idle hour would pay half of the dear hour's energy.) Tariff edges do
    not cut the ledger: g0 has two segments, 00-02 and 02-24.
    """
    comp = compute(_priced_idle_bundle(DEPRECIATION), make_config(**PRICED_CFG))
    rep = build_report(comp)
    assert comp.seg.height == 2
    rc = rep["reconciliation"]
    assert rc["input_cost"] == pytest.approx(240.43)
    assert rc["idle"] == pytest.approx(220.22)
    assert rc["attributed"] == pytest.approx(20.21)
    held = causes(rep, "allocated")
    assert set(held) == {"underutilized"}
    assert held["underutilized"]["gpu_hours"] == pytest.approx(1.0)
    assert held["underutilized"]["energy_kwh_gpu"] == pytest.approx(0.1)
    assert held["underutilized"]["cost"] == pytest.approx(10.01)
    assert causes(rep, "unallocated")["no_demand"]["cost"] == pytest.approx(220.22)


def test_held_idle_share_of_a_power_row_follows_its_joules():
    """A $24 power row spread by energy replaces the measured energy; depreciation as above.

    Energy: A1 0.1 + 0.5 = 0.6 kWh, free time 2.2 kWh, 2.8 kWh in all. A1's segment gets
    $24 x 0.6 / 2.8 = $5.142857 of power; its idle hour drew 0.1 of those 0.6 kWh, so held idle
    costs $10 + $24 x 0.1 / 2.8 = $10.857143 (by time it would be $10 + $2.571429).
    """
    power = [{"cost_id": "pw", "category": "power", "amount": 24.0, "start": ts(1, 0), "end": ts(2, 0)}]
    rep = build_report(compute(_priced_idle_bundle(DEPRECIATION + power), make_config(**PRICED_CFG)))
    assert rep["reconciliation"]["input_cost"] == pytest.approx(264.0)
    assert rep["reconciliation"]["attributed"] == pytest.approx(20 + 24 * 0.6 / 2.8)
    assert causes(rep, "allocated")["underutilized"]["cost"] == pytest.approx(10 + 24 * 0.1 / 2.8)
