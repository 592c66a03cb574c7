"""Property: for any accepted bundle, every input dollar lands in exactly one bucket and no
allocated hour is counted twice.

The input side is summed by the test itself from the raw `costs`, `rates` x capacity and
telemetry (measured energy at the tariffs) tables (tests/oracles.py), never taken from the
engine's frames: a wrong spread would otherwise reconcile with itself. The bundles span two
days (the period in UTC or Berlin time), tenants with several projects, cached tokens, rates
and cost rows that start before and end after the period, and overlapping events and waits.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cost_engine.contract import CATEGORIES, DRIVERS
from cost_engine.engine import compute
from cost_engine.report import build_report
from tests import oracles
from tests.helpers import DAY0, draw_event, make_bundle, make_config

QUARTER = timedelta(minutes=15)
N_Q = 2 * 96  # quarter hours in the two-day period
PROJECTS = ["A1", "A2", "B1", "acct_x"]  # tenant A has two projects; acct_x maps nowhere


def at(q: int):
    """An instant on a quarter-hour grid relative to 2026-10-01 00:00Z (may lie outside the period)."""
    return DAY0 + q * QUARTER


@st.composite
def bundles(draw):
    n_cards = draw(st.integers(1, 3))
    cards = [
        {"gpu_id": f"g{i}", "pool": draw(st.sampled_from(["p0", "p1"])), "node": f"n{i % 2}",
         "capacity": draw(st.sampled_from([1.0, 3 / 7, 0.5]))}
        for i in range(n_cards)
    ]
    span = st.tuples(st.integers(-48, N_Q + 24), st.integers(1, 120))
    allocs = []
    for i in range(draw(st.integers(0, 8))):
        start, dur = draw(span)
        inference = draw(st.booleans())
        allocs.append({
            "allocation_id": f"a{i}", "gpu_id": f"g{draw(st.integers(0, n_cards - 1))}",
            "start": at(start), "end": at(start + dur),
            "owner": draw(st.sampled_from(PROJECTS)),
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
        for q in range(-4, N_Q + 4, draw(st.sampled_from([2, 4, 8]))):
            power = draw(st.one_of(st.none(), st.floats(50, 700)))
            energy = 0.0 if draw(st.integers(0, 30)) == 0 else energy + 900 * (power or 100)
            tele.append({"ts": at(q), "gpu_id": f"g{c}", "util_pct": draw(st.floats(0, 100)),
                         "power_w": power, "energy_j": draw(st.sampled_from([energy, None]))})
    costs = []
    for i in range(draw(st.integers(0, 6))):
        start = draw(st.integers(-96, N_Q + 24))
        costs.append({
            "cost_id": f"c{i}", "category": draw(st.sampled_from(CATEGORIES)),
            "amount": draw(st.floats(0, 1000)), "start": at(start), "end": at(start + draw(st.integers(1, 400))),
            "pool": draw(st.sampled_from([None, "p0", "p1", "p9"])),
            "driver": draw(st.sampled_from([None, *DRIVERS])),
            "owner": draw(st.sampled_from([None, None, None, "A1", "k_unmapped"])),
        })
    rates = []
    for _ in range(draw(st.integers(0, 2))):
        start, dur = draw(st.tuples(st.integers(-96, N_Q), st.integers(1, 400)))
        rates.append({"pool": draw(st.sampled_from(["p0", "p1"])), "price_per_gpu_hour": draw(st.floats(0, 5)),
                      "start": draw(st.sampled_from([at(start), None])),
                      "end": draw(st.sampled_from([at(start + dur), None]))})
    events = []
    for _ in range(draw(st.integers(0, 6))):
        events.append(draw_event(draw, span, at, n_cards, ["n0", "n1"], ["p0", "p1"]))
    queue = []
    for i in range(draw(st.integers(0, 4))):
        start, dur = draw(span)
        queue.append({"job_id": f"q{i}", "pool": draw(st.sampled_from(["p0", "p1"])), "submit": at(start),
                      "start": draw(st.sampled_from([at(start + dur), None])),
                      "reason": draw(st.sampled_from(["quota", "resources", "priority"]))})
    reqs = [{"request_id": f"r{i}", "ts": at(draw(st.integers(-4, N_Q + 4))),
             "owner": draw(st.sampled_from(["A1", "A2", "B1", "key_z"])), "model": draw(st.sampled_from(["m", "n"])),
             "input_tokens": draw(st.integers(0, 5000)), "output_tokens": draw(st.integers(0, 5000)),
             "cached_input_tokens": draw(st.integers(0, 20000))}
            for i in range(draw(st.integers(0, 6)))]
    tariffs = []
    if draw(st.booleans()):
        tariffs = [{"start": at(q), "end": at(q + 24), "price_per_kwh": draw(st.floats(0, 0.5))}
                   for q in range(-24, N_Q + 24, 24)]
    bundle = make_bundle(
        inventory=cards, allocations=allocs, telemetry=tele, costs=costs, rates=rates, requests=reqs,
        tariffs=tariffs, events=events, queue=queue,
        owners=[{"tenant": "A", "project": "A1"}, {"tenant": "A", "project": "A2"}, {"tenant": "B", "project": "B1"}],
        aliases=[{"source": "gateway", "key": "key_a", "project": "A1"}],
    )
    berlin = draw(st.booleans())
    start = datetime(2026, 9, 30, 22, tzinfo=timezone.utc) if berlin else DAY0
    config = make_config(
        period={"start": start, "end": start + N_Q * QUARTER, "timezone": "Europe/Berlin" if berlin else "UTC"},
        activity={"mode": draw(st.sampled_from(["threshold", "weighted"])), "max_sample_gap_s": 1800},
        allocation={
            "idle": draw(st.sampled_from(["separate", "proportional"])),
            "inference_recharge": draw(st.sampled_from(["none", "tokens", "requests"])),
            "shares": draw(st.sampled_from([{}, {"A": 0.5, "B1": 0.5}, {"A": 0.75, "B": 0.25}])),
        },
    )
    return bundle, config


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(bundles())
def test_every_dollar_lands_once_and_no_hour_twice(case):
    bundle, config = case
    comp = compute(bundle, config)
    rep = build_report(comp)
    rc = rep["reconciliation"]
    oracles.assert_input_reconciles(rep, bundle, config)
    assert min(rc["attributed"], rc["idle"], rc["unattributed"]) >= -1e-9
    # Tenants are the sum of their projects, and the projects, idle and unattributed the input.
    # An owner's cost is unknown (null) only where no money reached it at all (report.uncosted_pools):
    # it adds nothing to either side, and a tenant is unknown exactly when all its projects are.
    def known(rows):
        return sum(r["cost"] for r in rows if r["cost"] is not None)

    assert known(rep["by_tenant"]) == pytest.approx(known(rep["by_project"]), abs=1e-6)
    assert known(rep["by_project"]) == pytest.approx(rc["attributed"], rel=1e-9, abs=1e-6)
    unknown_tenants = {r["tenant"] for r in rep["by_tenant"] if r["cost"] is None}
    assert unknown_tenants == {t for t in {r["tenant"] for r in rep["by_project"]}
                               if all(p["cost"] is None for p in rep["by_project"] if p["tenant"] == t)}
    assert sum(r["cost"] for r in rep["trend"]) == pytest.approx(rc["input_cost"], rel=1e-9, abs=1e-6)

    # No allocated hour twice: per card, held card-hours never exceed its capacity x time.
    per_card = comp.seg.group_by("gpu_id").agg(pl.col("alloc_h").sum(), pl.col("cap_h").sum())
    assert (per_card["alloc_h"] <= per_card["cap_h"] + 1e-9).all()
    t = rep["totals"]
    assert t["allocated_gpu_hours"] <= t["available_gpu_hours"] + 1e-9
    # Available capacity-hours from the inventory alone: capacity x the period's 48 hours.
    assert t["available_gpu_hours"] == pytest.approx(sum(c * 48 for c in bundle["inventory"]["capacity"]), rel=1e-9)
    # Allocated hours split exactly into projects and unattributed keys.
    by_project = sum(r["allocated_gpu_hours"] for r in rep["by_project"])
    unattributed = comp.seg.filter(pl.col("allocation_id").is_not_null() & pl.col("project").is_null())["alloc_h"].sum()
    assert by_project + unattributed == pytest.approx(t["allocated_gpu_hours"], abs=1e-9)
