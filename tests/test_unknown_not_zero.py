"""Unknown is not zero (issue 20): an energy cost, an energy or CO2e figure, or an owner's cost
whose inputs are missing is null in the report and "unknown" / "—" where it is shown, never 0.

Every figure is computed by hand in the test's docstring."""

from __future__ import annotations

import polars as pl
import pytest

from cost_engine import views
from cost_engine.cli import render_summary
from cost_engine.engine import compute
from cost_engine.report import build_report
from tests.helpers import make_bundle, make_config, ts


def _one_card_no_telemetry(**extra):
    """Card g0 in pool p, no telemetry; A1 (tenant A) holds it 00:00-12:00 (12 h); $48
    depreciation for the day in p."""
    return make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a1", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 12), "owner": "A1"}],
        owners=[{"tenant": "A", "project": "A1"}],
        costs=[{"cost_id": "dep", "category": "depreciation", "amount": 48.0, "start": ts(1), "end": ts(2),
                "pool": "p"}, *extra.pop("costs", [])],
        **extra,
    )


def test_energy_cost_with_nothing_measured_and_no_power_row_is_unknown():
    """Power is inside the default boundary and no power row exists, so the energy cost would be
    measured kWh x price; no sample measured anything: energy cost, kWh and CO2e are unknown in
    the totals, per owner, per day and in the CLI text (it printed `energy cost 0.00`). The
    depreciation is known: $48 / 24 card-hours = $2/h, A1 12 h = $24."""
    # The tariff carries a carbon intensity: CO2e is still unknown, as no energy was measured.
    tariff = [{"start": ts(1), "end": ts(2), "price_per_kwh": 0.2, "carbon_g_per_kwh": 400.0}]
    comp = compute(_one_card_no_telemetry(tariffs=tariff), make_config())
    rep = build_report(comp)
    t = rep["totals"]
    assert t["energy_cost"] is None and t["energy_kwh_gpu"] is None and t["carbon_kg"] is None
    a = rep["by_tenant"][0]
    assert a["tenant"] == "A" and a["cost"] == pytest.approx(24.0) and a["energy_cost"] is None
    day = views.energy_daily(comp)
    assert day.height == 1
    assert day.select("energy_kwh_gpu", "energy_kwh_facility", "energy_cost", "co2e_kg").row(0) == (
        None, None, None, None)
    text = render_summary(rep)
    assert "energy cost unknown" in text and "energy cost 0.00" not in text


def test_energy_cost_from_a_power_row_is_known_without_telemetry():
    """The same card with a $12 power row for the day: the energy cost is read from the row, not
    measured, so it is known: $12 (no energy to spread it by, so it stays idle: A1 pays $24 of
    depreciation only)."""
    b = _one_card_no_telemetry(costs=[{"cost_id": "pw", "category": "power", "amount": 12.0, "start": ts(1),
                                       "end": ts(2), "pool": "p"}])
    comp = compute(b, make_config())
    rep = build_report(comp)
    assert rep["totals"]["energy_cost"] == pytest.approx(12.0)
    assert rep["totals"]["energy_kwh_gpu"] is None
    assert rep["by_tenant"][0]["cost"] == pytest.approx(24.0)
    assert views.energy_daily(comp)["energy_cost"].to_list() == [pytest.approx(12.0)]


def _two_pools(*more_costs: dict):
    """gA in pool A with $48 depreciation for the day, gB in pool B; A1 holds gA and B1 holds gB
    00:00-12:00; no telemetry."""
    return make_bundle(
        inventory=[{"gpu_id": "gA", "pool": "A"}, {"gpu_id": "gB", "pool": "B"}],
        allocations=[{"allocation_id": "a", "gpu_id": "gA", "start": ts(1, 0), "end": ts(1, 12), "owner": "A1"},
                     {"allocation_id": "b", "gpu_id": "gB", "start": ts(1, 0), "end": ts(1, 12), "owner": "B1"}],
        owners=[{"tenant": "A", "project": "A1"}, {"tenant": "B", "project": "B1"}],
        costs=[{"cost_id": "dep", "category": "depreciation", "amount": 48.0, "start": ts(1), "end": ts(2),
                "pool": "A"}, *more_costs],
    )


def test_an_owner_on_a_pool_no_cost_reaches_has_an_unknown_cost():
    """gA in pool A ($48 depreciation for the day: $2 per card-hour), gB in pool B with no cost
    row, no rate, no telemetry (so no measured energy either). A1 (tenant A) holds gA 00-12:
    12 h x $2 = $24. B1 (tenant B) holds gB 00-12: its cost is unknown, not $0, and a gap names
    pool B. Input cost $48 = A1 $24 + idle $24 (gA's free 12 h)."""
    comp = compute(_two_pools(), make_config())
    rep = build_report(comp)
    by = {r["tenant"]: r for r in rep["by_tenant"]}
    assert by["A"]["cost"] == pytest.approx(24.0)
    assert by["B"]["cost"] is None and by["B"]["allocated_gpu_hours"] == pytest.approx(12.0)
    assert [r["tenant"] for r in rep["by_tenant"]] == ["A", "B"]  # unknown sorts last, not first
    assert rep["reconciliation"]["attributed"] == pytest.approx(24.0)
    assert rep["reconciliation"]["idle"] == pytest.approx(24.0)
    gap = [g["detail"] for g in rep["gaps"] if g["what"] == "cost unknown"]
    assert len(gap) == 1 and "pool(s) B:" in gap[0]
    ranked = views.rankings(comp, None, "project")
    assert dict(zip(ranked["project"].to_list(), ranked["cost"].to_list())) == {"A1": pytest.approx(24.0), "B1": None}
    text = render_summary(rep)
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("B "))
    assert "unknown" in line and "12.0 GPU-h" in line
    # A fleet-wide cost row reaches pool B too: B1's cost is then known. $48 fleet-wide over 48
    # card-hours = $1/h on top: A1 24 + 12 = $36, B1 12 h x $1 = $12.
    fleet = {"cost_id": "fac", "category": "facility", "amount": 48.0, "start": ts(1), "end": ts(2)}
    rep2 = build_report(compute(_two_pools(fleet), make_config()))
    assert {r["tenant"]: r["cost"] for r in rep2["by_tenant"]} == {"A": pytest.approx(36.0), "B": pytest.approx(12.0)}
    assert not [g for g in rep2["gaps"] if g["what"] == "cost unknown"]


def test_the_sample_platform_tenant_costs_a_known_zero_its_cost_is_recharged():
    """In the sample fleet the platform tenant (project shared-inference) holds the a100-infer
    cards that serve the models, and inference_recharge = tokens passes all of that cost to the
    callers: its 0 is a known zero, not missing inputs (a100-infer has cost rows). Without the
    recharge its cost is exactly what the callers were recharged (owners and unattributed keys):
    the money moves, none appears or vanishes."""
    from cost_engine import api
    from tests.dashboard_support import SAMPLE

    comp = api.run(SAMPLE)
    rep = build_report(comp)
    platform = next(r for r in rep["by_tenant"] if r["tenant"] == "platform")
    assert platform["cost"] == 0.0 and platform["allocated_gpu_hours"] > 1000
    assert not [g for g in rep["gaps"] if g["what"] == "cost unknown"]
    recharged = float(comp.money.filter(pl.col("origin").str.contains("recharge", literal=True))["amount"].sum())
    cfg = comp.config.model_copy(update={"allocation": comp.config.allocation.model_copy(
        update={"inference_recharge": "none"})})
    rep_none = build_report(api.run(SAMPLE, config=cfg))
    platform_none = next(r for r in rep_none["by_tenant"] if r["tenant"] == "platform")
    assert recharged > 2000 and platform_none["cost"] == pytest.approx(recharged, rel=1e-9)


def test_co2e_without_a_carbon_intensity_is_unknown_with_energy_measured():
    """Telemetry at 100 W for 1 h on g0 (held by A1 00:00-01:00): 0.1 kWh GPU, measured; the
    tariff has a price and no carbon intensity: CO2e is unknown in the totals, per owner and
    per day, while the energy is known (0.1 kWh)."""
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a1", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 1), "owner": "A1"}],
        owners=[{"tenant": "A", "project": "A1"}],
        telemetry=[{"ts": ts(1, 0), "gpu_id": "g0", "util_pct": 50.0, "power_w": 100.0}],
        tariffs=[{"start": ts(1), "end": ts(2), "price_per_kwh": 0.2}],
    )
    comp = compute(b, make_config(activity={"max_sample_gap_s": 3600}))
    rep = build_report(comp)
    assert rep["totals"]["energy_kwh_gpu"] == pytest.approx(0.1)
    assert rep["totals"]["carbon_kg"] is None and rep["by_tenant"][0]["carbon_kg"] is None
    day = views.energy_daily(comp)
    assert day["energy_kwh_gpu"].to_list() == [pytest.approx(0.1)] and day["co2e_kg"].to_list() == [None]
    assert views.energy_totals(comp)["carbon_kg"] is None


def test_a_fleet_with_no_cost_input_at_all_has_an_unknown_total_cost():
    """g0 in pool p, no cost row, no rate, no telemetry (no measured energy); A1 holds it
    00:00-06:00 of the 24 h day. Nothing prices anything: the total cost and both costs per
    GPU-hour are unknown (the report said cost 0.00 and $0.00 per GPU-hour), A1's cost is
    unknown, and the gap `cost unknown` names pool p. The input side is a fact about the inputs:
    $0 in, $0 attributed, nothing lost (difference 0).

    With one $24 depreciation row for p (the whole day) the total is known: $24, $24 / 24 available
    GPU-hours = $1 per GPU-hour, $24 / 6 allocated GPU-hours = $4 per allocated GPU-hour."""
    def fleet(*costs):
        return make_bundle(
            inventory=[{"gpu_id": "g0", "pool": "p"}], owners=[{"tenant": "A", "project": "A1"}],
            allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 6), "owner": "A1"}],
            costs=list(costs))

    comp = compute(fleet(), make_config())
    rep = build_report(comp)
    t = rep["totals"]
    cards = {r["key"]: r for r in views.kpi_cards(comp).iter_rows(named=True)}
    assert cards["cost"]["value"] is None and "no cost row, rate or measured energy" in cards["cost"]["detail"]
    assert (t["cost"], t["cost_per_gpu_hour"], t["cost_per_allocated_gpu_hour"]) == (None, None, None)
    assert t["allocated_gpu_hours"] == pytest.approx(6.0)
    assert [r["cost"] for r in rep["by_project"]] == [None]
    assert [g["what"] for g in rep["gaps"]].count("cost unknown") == 1
    assert rep["reconciliation"]["input_cost"] == 0.0 and rep["reconciliation"]["difference"] == 0.0
    assert "cost         unknown" in render_summary(rep)
    dep = {"cost_id": "dep", "category": "depreciation", "amount": 24.0, "start": ts(1), "end": ts(2), "pool": "p"}
    t2 = build_report(compute(fleet(dep), make_config()))["totals"]
    assert (t2["cost"], t2["cost_per_gpu_hour"], t2["cost_per_allocated_gpu_hour"]) == (
        pytest.approx(24.0), pytest.approx(1.0), pytest.approx(4.0))
