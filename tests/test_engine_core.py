"""Engine core: GPU-hours, clipping, conflicts, drivers, boundaries, ownership, reconciliation.

Every figure is computed by hand in the test's docstring. Period: 2026-10-01 00:00Z to
2026-10-02 00:00Z (24 h) unless said otherwise.
"""

from __future__ import annotations

import pytest

from cost_engine.contract import CATEGORIES
from cost_engine.engine import compute
from cost_engine.report import build_report
from tests.helpers import make_bundle, make_config, ts


def run(bundle, config=None):
    return build_report(compute(bundle, config or make_config()))


def rows_by(rep, table, key):
    return {r[key]: r for r in rep[table]}


def assert_reconciled(rep):
    rc = rep["reconciliation"]
    assert abs(rc["difference"]) <= 1e-6 * max(1.0, rc["input_cost"])
    assert rc["attributed"] + rc["idle"] + rc["unattributed"] == pytest.approx(rc["input_cost"], abs=1e-6)


# ---------------------------------------------------------------- seed 000 worked examples


def test_seed000_eight_cards_three_hours_is_24_gpu_hours():
    """8 cards held for 3 hours: 8 x 3 = 24 allocated GPU-hours (seed 000)."""
    b = make_bundle(
        inventory=[{"gpu_id": f"g{i}", "pool": "p"} for i in range(8)],
        allocations=[
            {"allocation_id": f"a{i}", "gpu_id": f"g{i}", "start": ts(1, 0), "end": ts(1, 3), "owner": "train"}
            for i in range(8)
        ],
    )
    rep = run(b)
    assert rep["totals"]["allocated_gpu_hours"] == pytest.approx(24.0)
    # 8 cards x 24 h = 192 available; 192 - 24 = 168 unallocated.
    assert rep["totals"]["available_gpu_hours"] == pytest.approx(192.0)
    assert rep["totals"]["unallocated_gpu_hours"] == pytest.approx(168.0)


def test_seed000_tenant_rollup_is_sum_of_projects():
    """Project A1 uses 10 cards x 10 h = 100 GPU-hours, A2 5 cards x 10 h = 50: tenant A = 150."""
    allocs = [
        {"allocation_id": f"a1-{i}", "gpu_id": f"g{i}", "start": ts(1, 0), "end": ts(1, 10), "owner": "A1"}
        for i in range(10)
    ] + [
        {"allocation_id": f"a2-{i}", "gpu_id": f"g{10 + i}", "start": ts(1, 0), "end": ts(1, 10), "owner": "A2"}
        for i in range(5)
    ]
    b = make_bundle(
        inventory=[{"gpu_id": f"g{i}", "pool": "p"} for i in range(15)],
        allocations=allocs,
        owners=[{"tenant": "A", "project": "A1"}, {"tenant": "A", "project": "A2"}],
    )
    rep = run(b)
    proj = {r["project"]: r["allocated_gpu_hours"] for r in rep["by_project"]}
    assert proj == pytest.approx({"A1": 100.0, "A2": 50.0})
    assert rows_by(rep, "by_tenant", "tenant")["A"]["allocated_gpu_hours"] == pytest.approx(150.0)


def test_seed000_model_on_four_dedicated_cards_for_ten_hours():
    """Model X on 4 dedicated cards for 10 hours: 4 x 10 = 40 GPU-hours attributed to X."""
    b = make_bundle(
        inventory=[{"gpu_id": f"g{i}", "pool": "p"} for i in range(4)],
        allocations=[
            {"allocation_id": f"x{i}", "gpu_id": f"g{i}", "start": ts(1, 2), "end": ts(1, 12), "owner": "svc",
             "workload": "inference", "model": "X"}
            for i in range(4)
        ],
    )
    rep = run(b)
    assert rows_by(rep, "by_model", "model")["X"]["allocated_gpu_hours"] == pytest.approx(40.0)


def test_seed000_two_dollars_per_million_tokens():
    """$600 of cost in a day for a model serving 300,000,000 tokens: $2 per million.

    Rate: 4 cards x 24 h = 96 card-hours at $6.25 = $600, all held by the model's service.
    Tokens: 100M input + 50M cached + 150M output = 300M. 600 / 300M x 1e6 = $2.00.
    """
    b = make_bundle(
        inventory=[{"gpu_id": f"g{i}", "pool": "p"} for i in range(4)],
        allocations=[
            {"allocation_id": f"x{i}", "gpu_id": f"g{i}", "start": ts(1, 0), "end": ts(2, 0), "owner": "svc",
             "workload": "inference", "model": "X"}
            for i in range(4)
        ],
        rates=[{"pool": "p", "price_per_gpu_hour": 6.25}],
        requests=[{"request_id": "bucket-1", "ts": ts(1, 0), "end": ts(2, 0), "owner": "svc", "model": "X",
                   "input_tokens": 100_000_000, "cached_input_tokens": 50_000_000, "output_tokens": 150_000_000,
                   "requests": 1000}],
    )
    rep = run(b)
    assert rows_by(rep, "by_model", "model")["X"]["cost"] == pytest.approx(600.0)
    assert rows_by(rep, "by_model", "model")["X"]["cost_per_million_tokens"] == pytest.approx(2.0)
    assert rep["totals"]["cost_per_million_tokens"] == pytest.approx(2.0)
    assert_reconciled(rep)


# ---------------------------------------------------------------- drivers

def driver_bundle(cost_row: dict, **extra):
    """Two cards in pool p for 24 h (48 card-hours).

    A1 (tenant A) holds g0 00:00-12:00 (12 h): util 100 % and 400 W for hours 0-5, util 0 % and
    100 W for hours 6-11. B1 (tenant B) holds g1 00:00-06:00 (6 h): util 50 %, 200 W.
    Samples are hourly and stand for one hour (max_sample_gap_s = 3600).
      allocated: A 12, B 6 (18)        active (>= 5 %): A 6, B 6 (12)
      util-weighted hours: A 6 x 1.0 = 6, B 6 x 0.5 = 3 (9)
      GPU energy: A 6 x 0.4 + 6 x 0.1 = 3.0 kWh, B 6 x 0.2 = 1.2 kWh (4.2)
    Requests: A1 sends 3 requests (1000 in, 1000 out in total: weighted 1000 + 4 x 1000 = 5000),
    B1 sends 1 (5000 in, 0 out: weighted 5000).
    """
    tele = [{"ts": ts(1, h), "gpu_id": "g0", "util_pct": 100.0 if h < 6 else 0.0,
             "power_w": 400.0 if h < 6 else 100.0} for h in range(12)]
    tele += [{"ts": ts(1, h), "gpu_id": "g1", "util_pct": 50.0, "power_w": 200.0} for h in range(6)]
    reqs = [
        {"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 500, "output_tokens": 500},
        {"request_id": "r2", "ts": ts(1, 2), "owner": "A1", "model": "m", "input_tokens": 500, "output_tokens": 250},
        {"request_id": "r3", "ts": ts(1, 3), "owner": "A1", "model": "m", "input_tokens": 0, "output_tokens": 250},
        {"request_id": "r4", "ts": ts(1, 4), "owner": "B1", "model": "m", "input_tokens": 5000, "output_tokens": 0},
    ]
    tables = dict(
        inventory=[{"gpu_id": "g0", "pool": "p"}, {"gpu_id": "g1", "pool": "p"}],
        allocations=[
            {"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 12), "owner": "A1"},
            {"allocation_id": "b", "gpu_id": "g1", "start": ts(1, 0), "end": ts(1, 6), "owner": "B1"},
        ],
        telemetry=tele,
        requests=reqs,
        owners=[{"tenant": "A", "project": "A1"}, {"tenant": "B", "project": "B1"}],
        costs=[{"cost_id": "c", "start": ts(1, 0), "end": ts(2, 0), **cost_row}],
    )
    tables.update(extra)
    return make_bundle(**tables)


NO_POWER = [c for c in CATEGORIES if c != "power"]


def driver_config(**kw):
    """Hourly samples; the boundary leaves out power so measured energy adds no cost unless asked."""
    kw.setdefault("boundary", {"name": "custom", "categories": NO_POWER})
    return make_config(activity={"max_sample_gap_s": 3600}, **kw)


def tenant_costs(rep):
    return {r["tenant"]: r["cost"] for r in rep["by_tenant"]}


def test_driver_capacity_hours_leaves_unheld_capacity_idle():
    """$480 depreciation over 48 card-hours = $10/card-hour: A 12 h = 120, B 6 h = 60, idle 30 h = 300."""
    rep = run(driver_bundle({"category": "depreciation", "amount": 480.0, "pool": "p"}), driver_config())
    assert tenant_costs(rep) == pytest.approx({"A": 120.0, "B": 60.0})
    assert rep["reconciliation"]["idle"] == pytest.approx(300.0)
    assert_reconciled(rep)


def test_driver_gpu_hours():
    """$180 network over 18 allocated GPU-hours = $10/h: A 120, B 60, nothing idle."""
    rep = run(driver_bundle({"category": "network", "amount": 180.0}), driver_config())
    assert tenant_costs(rep) == pytest.approx({"A": 120.0, "B": 60.0})
    assert rep["reconciliation"]["idle"] == pytest.approx(0.0)


def test_driver_active_hours():
    """$120 over 12 active hours (A 6, B 6) = $10/h: A 60, B 60."""
    rep = run(driver_bundle({"category": "other", "amount": 120.0, "driver": "active_hours"}), driver_config())
    assert tenant_costs(rep) == pytest.approx({"A": 60.0, "B": 60.0})
    assert rep["totals"]["active_gpu_hours"] == pytest.approx(12.0)


def test_driver_utilization():
    """$90 over 9 util-weighted hours (A 6, B 3): A 60, B 30."""
    rep = run(driver_bundle({"category": "other", "amount": 90.0, "driver": "utilization"}), driver_config())
    assert tenant_costs(rep) == pytest.approx({"A": 60.0, "B": 30.0})


def test_driver_energy_for_a_power_row_without_double_count():
    """A $42 power row spread by measured energy: A 3.0 kWh, B 1.2 kWh of 4.2 -> A 30, B 12.

    The row covers the period, so measured energy is not priced again: input cost is 42.
    """
    rep = run(driver_bundle({"category": "power", "amount": 42.0}), driver_config(boundary={"name": "fully_loaded"}))
    assert tenant_costs(rep) == pytest.approx({"A": 30.0, "B": 12.0})
    assert rep["reconciliation"]["input_cost"] == pytest.approx(42.0)
    assert rep["totals"]["energy_kwh_gpu"] == pytest.approx(4.2)
    # facility = 4.2 x 1.3 x 1.2 = 6.552 kWh
    assert rep["totals"]["energy_kwh_facility"] == pytest.approx(6.552)


def test_driver_tokens():
    """$100 by weighted tokens: A1 5000, B1 5000 -> 50 / 50."""
    rep = run(driver_bundle({"category": "other", "amount": 100.0, "driver": "tokens"}), driver_config())
    assert tenant_costs(rep) == pytest.approx({"A": 50.0, "B": 50.0})


def test_driver_requests():
    """$40 by requests: A1 3, B1 1 -> A 30, B 10."""
    rep = run(driver_bundle({"category": "other", "amount": 40.0, "driver": "requests"}), driver_config())
    assert tenant_costs(rep) == pytest.approx({"A": 30.0, "B": 10.0})


def test_driver_shares_by_tenant():
    """$100 by fixed shares A 0.75, B 0.25 -> A 75, B 25."""
    cfg = driver_config(allocation={"shares": {"A": 0.75, "B": 0.25}})
    rep = run(driver_bundle({"category": "software", "amount": 100.0, "driver": "shares"}), cfg)
    assert tenant_costs(rep) == pytest.approx({"A": 75.0, "B": 25.0})


def test_driver_even():
    """$100 evenly over projects with usage (A1, B1) -> 50 / 50."""
    rep = run(driver_bundle({"category": "software", "amount": 100.0, "driver": "even"}), driver_config())
    assert tenant_costs(rep) == pytest.approx({"A": 50.0, "B": 50.0})


def test_config_driver_override_applies_to_a_category():
    """drivers = {software = "even"} makes a $100 software row (default gpu_hours 12:6) split 50/50."""
    cfg = driver_config(allocation={"drivers": {"software": "even"}})
    rep = run(driver_bundle({"category": "software", "amount": 100.0}), cfg)
    assert tenant_costs(rep) == pytest.approx({"A": 50.0, "B": 50.0})


def test_rates_price_capacity_hours():
    """A rate of $2/card-hour on pool p: 48 card-hours = $96; A 12 h = 24, B 6 h = 12, idle 60."""
    b = driver_bundle({"category": "other", "amount": 0.0}, rates=[{"pool": "p", "price_per_gpu_hour": 2.0}])
    rep = run(b, driver_config())
    assert tenant_costs(rep) == pytest.approx({"A": 24.0, "B": 12.0})
    assert rep["reconciliation"]["idle"] == pytest.approx(60.0)
    assert rep["reconciliation"]["input_cost"] == pytest.approx(96.0)


def test_measured_energy_priced_by_flat_price_without_power_row():
    """No power row: facility kWh x $0.12. A 3.0 x 1.56 = 4.68 kWh -> $0.5616; B 1.2 x 1.56 = 1.872 -> $0.22464."""
    rep = run(driver_bundle({"category": "other", "amount": 0.0}), driver_config(boundary={"name": "fully_loaded"}))
    assert tenant_costs(rep) == pytest.approx({"A": 0.5616, "B": 0.22464})
    assert rep["totals"]["energy_cost"] == pytest.approx(0.5616 + 0.22464)


# ---------------------------------------------------------------- time and conflicts


def test_clipping_at_both_period_edges():
    """One card; A holds 09-30 18:00 -> 10-01 06:00 (6 h inside), B 10-01 20:00 -> 10-02 08:00 (4 h inside).

    A cost of $96 spans 09-30 00:00 -> 10-02 00:00 (48 h): 24 h inside -> $48 counts.
    capacity_hours: 24 card-hours -> $2/h: A 12, B 8, idle 14 h = 28.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[
            {"allocation_id": "a", "gpu_id": "g0", "start": ts(30, 18), "end": ts(1, 6), "owner": "A"},
            {"allocation_id": "b", "gpu_id": "g0", "start": ts(1, 20), "end": "2026-10-02T08:00:00Z", "owner": "B"},
        ],
        costs=[{"cost_id": "c", "category": "depreciation", "amount": 96.0, "start": ts(30, 0), "end": ts(2, 0)}],
    )
    rep = run(b)
    assert {r["project"]: r["allocated_gpu_hours"] for r in rep["by_project"]} == pytest.approx({"A": 6.0, "B": 4.0})
    assert tenant_costs(rep) == pytest.approx({"A": 12.0, "B": 8.0})
    assert rep["reconciliation"]["input_cost"] == pytest.approx(48.0)
    assert rep["reconciliation"]["idle"] == pytest.approx(28.0)


def test_over_allocation_is_split_pro_rata_and_reported():
    """a1 holds g0 00:00-02:00 and a2 01:00-03:00, both share 1: the hour 01:00-02:00 is split 0.5/0.5.

    a1 = 1 + 0.5 = 1.5 h, a2 = 0.5 + 1 = 1.5 h; allocated = 3 h, not 4.
    """
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[
            {"allocation_id": "a1", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 2), "owner": "A"},
            {"allocation_id": "a2", "gpu_id": "g0", "start": ts(1, 1), "end": ts(1, 3), "owner": "B"},
        ],
    )
    rep = run(b)
    assert rep["totals"]["allocated_gpu_hours"] == pytest.approx(3.0)
    assert {r["project"]: r["allocated_gpu_hours"] for r in rep["by_project"]} == pytest.approx({"A": 1.5, "B": 1.5})
    assert any(g["what"] == "over-allocation" and "g0" in g["detail"] for g in rep["gaps"])


def test_mig_capacity_and_time_sliced_shares():
    """A MIG instance of capacity 3/7 held 7 h = 3 GPU-hours; a card shared 0.5 + 0.5 for 4 h = 2 + 2."""
    b = make_bundle(
        inventory=[{"gpu_id": "mig0", "pool": "m", "capacity": 3 / 7}, {"gpu_id": "g0", "pool": "p"}],
        allocations=[
            {"allocation_id": "m", "gpu_id": "mig0", "start": ts(1, 0), "end": ts(1, 7), "owner": "A"},
            {"allocation_id": "s1", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 4), "owner": "B", "share": 0.5},
            {"allocation_id": "s2", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 4), "owner": "C", "share": 0.5},
        ],
    )
    rep = run(b)
    assert {r["project"]: r["allocated_gpu_hours"] for r in rep["by_project"]} == pytest.approx(
        {"A": 3.0, "B": 2.0, "C": 2.0}
    )
    # available: 3/7 x 24 + 24 = 34.2857...
    assert rep["totals"]["available_gpu_hours"] == pytest.approx(24 * 3 / 7 + 24)


# ---------------------------------------------------------------- idle treatment, boundary, ownership


def test_idle_proportional_moves_pool_idle_onto_owners():
    """capacity_hours $480: A 120, B 60, idle 300. Proportional by allocated hours 12:6 moves
    300 x 12/18 = 200 to A and 100 to B: A 320, B 160, idle 0."""
    cfg = driver_config(allocation={"idle": "proportional"})
    rep = run(driver_bundle({"category": "depreciation", "amount": 480.0, "pool": "p"}), cfg)
    assert tenant_costs(rep) == pytest.approx({"A": 320.0, "B": 160.0})
    assert rep["reconciliation"]["idle"] == pytest.approx(0.0)
    assert_reconciled(rep)


@pytest.mark.parametrize(
    ("boundary", "expected"),
    [
        ({"name": "energy_only"}, 30.0),  # power 30
        ({"name": "narrow"}, 50.0),  # depreciation 20 + power 30
        ({"name": "rental"}, 10.0),  # gpu_rental 10
        ({"name": "fully_loaded"}, 100.0),  # 10 + 20 + 30 + 40
        ({"name": "custom", "categories": ["network"]}, 40.0),
    ],
)
def test_boundary_presets_select_categories(boundary, expected):
    """Rows: gpu_rental $10, depreciation $20, power $30, network $40 over the period."""
    rows = [("gpu_rental", 10.0), ("depreciation", 20.0), ("power", 30.0), ("network", 40.0)]
    b = driver_bundle({"category": "other", "amount": 0.0})
    b.tables["costs"] = make_bundle(costs=[
        {"cost_id": c, "category": c, "amount": a, "start": ts(1, 0), "end": ts(2, 0)} for c, a in rows
    ])["costs"]
    rep = run(b, driver_config(boundary=boundary))
    assert rep["reconciliation"]["input_cost"] == pytest.approx(expected)
    assert rep["totals"]["cost"] == pytest.approx(expected)
    assert_reconciled(rep)


def test_unmapped_key_lands_in_unattributed_named_by_source_and_key():
    """capacity_hours $240 over 1 card x 24 h = $10/h. acct_a -> A1 via alias holds 6 h (60);
    acct_x maps nowhere and holds 3 h (30): unattributed scheduler:acct_x 30; idle 15 h = 150."""
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[
            {"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 6), "owner": "acct_a"},
            {"allocation_id": "x", "gpu_id": "g0", "start": ts(1, 6), "end": ts(1, 9), "owner": "acct_x"},
        ],
        owners=[{"tenant": "A", "project": "A1"}],
        aliases=[{"source": "scheduler", "key": "acct_a", "project": "A1"}],
        costs=[{"cost_id": "c", "category": "depreciation", "amount": 240.0, "start": ts(1, 0), "end": ts(2, 0)}],
    )
    rep = run(b)
    assert tenant_costs(rep) == pytest.approx({"A": 60.0})
    assert rep["unattributed"] == [{"source": "scheduler", "key": "acct_x", "cost": pytest.approx(30.0), "records": 1}]
    assert rep["reconciliation"]["unattributed"] == pytest.approx(30.0)
    assert rep["reconciliation"]["idle"] == pytest.approx(150.0)


def test_direct_cost_goes_to_its_owner():
    """A $70 dataset purchase with owner PRJ-9 (finance) -> alias -> B1 carries all of it. No
    other cost reaches pool p (the boundary leaves out power): A, which no cost reached, has an
    unknown cost, not $0."""
    b = driver_bundle({"category": "other", "amount": 70.0, "owner": "PRJ-9", "source": "finance"},
                      aliases=[{"source": "finance", "key": "PRJ-9", "project": "B1"}])
    rep = run(b, driver_config())
    assert tenant_costs(rep) == {"A": None, "B": pytest.approx(70.0)}


def test_inference_recharge_by_tokens_moves_model_cost_to_callers():
    """Model m served by svc on g0 all day at $1/h = $24. Callers: A1 weighted 5000, B1 5000 -> 12 / 12.

    by_model keeps the model's cost ($24); by_tenant shows it where it landed.
    """
    b = driver_bundle({"category": "other", "amount": 0.0},
                      inventory=[{"gpu_id": "g0", "pool": "p"}],
                      allocations=[{"allocation_id": "s", "gpu_id": "g0", "start": ts(1, 0), "end": ts(2, 0),
                                    "owner": "svc", "workload": "inference", "model": "m"}],
                      telemetry=[],
                      owners=[{"tenant": "A", "project": "A1"}, {"tenant": "B", "project": "B1"},
                              {"tenant": "S", "project": "svc"}],
                      rates=[{"pool": "p", "price_per_gpu_hour": 1.0}])
    rep = run(b, driver_config())
    # S still holds the card (its hours show) but carries no cost after the recharge.
    assert tenant_costs(rep) == pytest.approx({"A": 12.0, "B": 12.0, "S": 0.0})
    assert rows_by(rep, "by_model", "model")["m"]["cost"] == pytest.approx(24.0)
    rep_none = run(b, driver_config(allocation={"inference_recharge": "none"}))
    assert tenant_costs(rep_none) == pytest.approx({"A": 0.0, "B": 0.0, "S": 24.0})


def test_daily_trend_spreads_costs_over_their_days():
    """Period 10-01 .. 10-03 (2 days). A direct $48 cost of A spanning both days lands $24 a day;
    a $96 depreciation row over the 2-card pool ($1 per card-hour) gives $48 a day."""
    from datetime import datetime, timezone

    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}, {"gpu_id": "g1", "pool": "p"}],
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 6), "owner": "A"}],
        costs=[{"cost_id": "d", "category": "other", "amount": 48.0, "start": ts(1, 0), "end": ts(3, 0), "owner": "A"},
               {"cost_id": "c", "category": "depreciation", "amount": 96.0, "start": ts(1, 0), "end": ts(3, 0)}],
    )
    cfg = make_config(period={"start": datetime(2026, 10, 1, tzinfo=timezone.utc),
                              "end": datetime(2026, 10, 3, tzinfo=timezone.utc)})
    rep = run(b, cfg)
    assert [(t["day"], t["cost"]) for t in rep["trend"]] == [
        ("2026-10-01", pytest.approx(24.0 + 48.0)), ("2026-10-02", pytest.approx(24.0 + 48.0))]


def test_an_empty_inventory_is_still_an_inventory():
    """An inventory file whose rows were all rejected leaves no known card: every allocation's
    card is unknown and rejected by name, and capacity is 0, not "unknown"."""
    from cost_engine.bundle import Bundle
    from cost_engine.contract import empty, make_frame

    allocs = make_frame("allocations", [
        {"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 2), "owner": "A"}])
    b = Bundle.from_frames({"inventory": empty("inventory"), "allocations": allocs})
    rep = run(b)
    assert rep["totals"]["available_gpu_hours"] == 0.0
    assert rep["totals"]["allocated_gpu_hours"] == 0.0
    assert any("allocation a: gpu_id g0 is not in the inventory" in r["reason"] for r in rep["rejected"])


def test_lineage_splits_a_project_cost_back_onto_its_cost_rows_with_mixed_and_single_drivers():
    """Pool p, two cards, one day. Project a holds g0 00-24 (24 GPU-h), project b holds g1
    00-12 (12 GPU-h); g1 is unallocated 12-24.

    network (two drivers in force together, so each segment's quantities weigh the rates):
      n1 $36 by gpu_hours: 36 GPU-h -> $1/GPU-h: a 24, b 12;
      n2 $48 by capacity_hours: 48 card-hours -> $1/card-h: a 24, b 12, idle 12.
    storage (one driver, so the split is rate_i / sum of rates):
      s1 $18 and s2 $18, both by gpu_hours: $0.5 + $0.5 per GPU-h: a 12 + 12, b 6 + 6.
    explain(a) = n1 24 + n2 24 + s1 12 + s2 12 = $72; explain(b) = 12 + 12 + 6 + 6 = $36.
    """
    from cost_engine import lineage

    day = {"start": ts(1, 0), "end": ts(2, 0)}
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}, {"gpu_id": "g1", "pool": "p"}],
        allocations=[
            {"allocation_id": "x", "gpu_id": "g0", "start": ts(1, 0), "end": ts(2, 0), "owner": "a"},
            {"allocation_id": "y", "gpu_id": "g1", "start": ts(1, 0), "end": ts(1, 12), "owner": "b"},
        ],
        costs=[
            {"cost_id": "n1", "category": "network", "amount": 36.0, "pool": "p", "driver": "gpu_hours", **day},
            {"cost_id": "n2", "category": "network", "amount": 48.0, "pool": "p", "driver": "capacity_hours", **day},
            {"cost_id": "s1", "category": "storage", "amount": 18.0, "pool": "p", "driver": "gpu_hours", **day},
            {"cost_id": "s2", "category": "storage", "amount": 18.0, "pool": "p", "driver": "gpu_hours", **day},
        ],
    )
    comp = compute(b, make_config())
    for project, want in (("a", {"n1": 24.0, "n2": 24.0, "s1": 12.0, "s2": 12.0}),
                          ("b", {"n1": 12.0, "n2": 12.0, "s1": 6.0, "s2": 6.0})):
        ex = lineage.explain(comp, project=project)
        got = {r["cost_id"]: r["cost"] for r in ex.costs.iter_rows(named=True)}
        assert got == pytest.approx(want)
        assert ex.total_cost == pytest.approx(sum(want.values()))
