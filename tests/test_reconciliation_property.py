"""Property: for any accepted bundle, every input dollar lands in exactly one bucket and no
allocated hour is counted twice."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cost_engine.contract import CATEGORIES, DRIVERS
from cost_engine.engine import compute
from cost_engine.report import build_report
from tests.helpers import DAY0, make_bundle, make_config

QUARTER = timedelta(minutes=15)


def at(q: int):
    """An instant on a quarter-hour grid relative to the period start (may lie outside it)."""
    return DAY0 + q * QUARTER


@st.composite
def bundles(draw):
    n_cards = draw(st.integers(1, 3))
    cards = [
        {"gpu_id": f"g{i}", "pool": draw(st.sampled_from(["p0", "p1"])),
         "capacity": draw(st.sampled_from([1.0, 3 / 7, 0.5]))}
        for i in range(n_cards)
    ]
    allocs = []
    for i in range(draw(st.integers(0, 8))):
        start = draw(st.integers(-24, 110))
        dur = draw(st.integers(1, 48))
        inference = draw(st.booleans())
        allocs.append({
            "allocation_id": f"a{i}", "gpu_id": f"g{draw(st.integers(0, n_cards - 1))}",
            "start": at(start), "end": at(start + dur),
            "owner": draw(st.sampled_from(["A1", "B1", "acct_x"])),
            "share": draw(st.sampled_from([0.25, 0.5, 1.0])),
            "workload": "inference" if inference else "training",
            "model": draw(st.sampled_from(["m", "n"])) if inference else None,
            "job_id": draw(st.sampled_from(["j1", "j2", None])),
        })
    if not allocs:
        allocs.append({"allocation_id": "a0", "gpu_id": "g0", "start": at(4), "end": at(8), "owner": "A1"})
    tele = []
    for c in range(n_cards):
        energy = 0.0
        for q in range(-4, 100, draw(st.sampled_from([2, 4]))):
            power = draw(st.one_of(st.none(), st.floats(50, 700)))
            energy = 0.0 if draw(st.integers(0, 30)) == 0 else energy + 900 * (power or 100)
            tele.append({"ts": at(q), "gpu_id": f"g{c}", "util_pct": draw(st.floats(0, 100)),
                         "power_w": power, "energy_j": draw(st.sampled_from([energy, None]))})
    costs = []
    for i in range(draw(st.integers(0, 5))):
        start = draw(st.integers(-40, 100))
        costs.append({
            "cost_id": f"c{i}", "category": draw(st.sampled_from(CATEGORIES)),
            "amount": draw(st.floats(0, 1000)), "start": at(start), "end": at(start + draw(st.integers(1, 120))),
            "pool": draw(st.sampled_from([None, "p0", "p1", "p9"])),
            "driver": draw(st.sampled_from([None, *DRIVERS])),
            "owner": draw(st.sampled_from([None, None, None, "A1", "k_unmapped"])),
        })
    rates = [{"pool": draw(st.sampled_from(["p0", "p1"])), "price_per_gpu_hour": draw(st.floats(0, 5))}
             for _ in range(draw(st.integers(0, 2)))]
    reqs = [{"request_id": f"r{i}", "ts": at(draw(st.integers(-4, 100))),
             "owner": draw(st.sampled_from(["A1", "B1", "key_z"])), "model": draw(st.sampled_from(["m", "n"])),
             "input_tokens": draw(st.integers(0, 5000)), "output_tokens": draw(st.integers(0, 5000)),
             "cached_input_tokens": draw(st.integers(0, 100))}
            for i in range(draw(st.integers(0, 5)))]
    tariffs = []
    if draw(st.booleans()):
        tariffs = [{"start": at(q), "end": at(q + 24), "price_per_kwh": draw(st.floats(0, 0.5))} for q in range(0, 96, 24)]
    bundle = make_bundle(
        inventory=cards, allocations=allocs, telemetry=tele, costs=costs, rates=rates, requests=reqs,
        tariffs=tariffs,
        owners=[{"tenant": "A", "project": "A1"}, {"tenant": "B", "project": "B1"}],
        aliases=[{"source": "gateway", "key": "key_a", "project": "A1"}],
    )
    config = make_config(
        activity={"mode": draw(st.sampled_from(["threshold", "weighted"])), "max_sample_gap_s": 1800},
        allocation={
            "idle": draw(st.sampled_from(["separate", "proportional"])),
            "inference_recharge": draw(st.sampled_from(["none", "tokens", "requests"])),
            "shares": draw(st.sampled_from([{}, {"A": 0.5, "B1": 0.5}])),
        },
    )
    return bundle, config


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bundles())
def test_every_dollar_lands_once_and_no_hour_twice(case):
    bundle, config = case
    comp = compute(bundle, config)
    rep = build_report(comp)
    rc = rep["reconciliation"]
    assert abs(rc["difference"]) <= 1e-6 * max(1.0, rc["input_cost"])
    assert min(rc["attributed"], rc["idle"], rc["unattributed"]) >= -1e-9

    # No allocated hour twice: per card, held card-hours never exceed its capacity x time.
    per_card = comp.seg.group_by("gpu_id").agg(pl.col("alloc_h").sum(), pl.col("cap_h").sum())
    assert (per_card["alloc_h"] <= per_card["cap_h"] + 1e-9).all()
    t = rep["totals"]
    assert t["allocated_gpu_hours"] <= t["available_gpu_hours"] + 1e-9
    # Allocated hours split exactly into projects and unattributed keys.
    by_project = sum(r["allocated_gpu_hours"] for r in rep["by_project"])
    unattributed = comp.seg.filter(pl.col("allocation_id").is_not_null() & pl.col("project").is_null())["alloc_h"].sum()
    assert by_project + unattributed == __import__("pytest").approx(t["allocated_gpu_hours"], abs=1e-9)
    # Tenants are the sum of their projects.
    assert sum(r["cost"] for r in rep["by_tenant"]) == __import__("pytest").approx(
        sum(r["cost"] for r in rep["by_project"]), abs=1e-6)
