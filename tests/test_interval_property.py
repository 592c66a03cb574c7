"""Properties on bundles with many queue waits, events and cost spans (issue 15), checked against
oracles the test computes itself from the raw tables, never from the engine's frames:

- every input dollar lands once: the input side is summed from the `costs` rows (pro rata to
  their overlap with the period) and the `rates` x in-service capacity-hours (tests/oracles.py);
- idle hours and cost by cause equal a brute-force classification of every quarter hour of every
  card (first match wins) at the capacity prices in force then, and no hour is counted twice;
- nothing depends on where the ledger is cut: cutting every card at every quarter hour changes no
  figure of the report (with telemetry too, whose input side adds the measured energy summed from
  the samples at the tariffs in force).
"""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cost_engine.engine as engine
from cost_engine.contract import CATEGORIES, TS
from cost_engine.engine import compute
from cost_engine.report import build_report
from tests import oracles
from tests.helpers import DAY0, draw_event, make_bundle, make_config

Q = timedelta(minutes=15)
N_Q = 96  # quarter hours in the one-day period
POOLS = ("p0", "p1")
NODES = ("n0", "n1", "n2")


def at(q: int):
    return DAY0 + q * Q


@st.composite
def bundles(draw, telemetry: bool):
    n_cards = draw(st.integers(1, 5))
    cards = [{"gpu_id": f"g{i}", "pool": draw(st.sampled_from(POOLS)), "node": draw(st.sampled_from(NODES)),
              "capacity": draw(st.sampled_from([1.0, 0.5, 3 / 7]))} for i in range(n_cards)]
    span = st.tuples(st.integers(-16, N_Q + 8), st.integers(1, 60))
    allocs = []
    for i in range(draw(st.integers(0, 8))):
        s, d = draw(span)
        allocs.append({"allocation_id": f"a{i}", "gpu_id": f"g{draw(st.integers(0, n_cards - 1))}",
                       "start": at(s), "end": at(s + d), "owner": draw(st.sampled_from(["A1", "A2", "B1", "k_x"])),
                       "share": draw(st.sampled_from([0.25, 0.5, 1.0])), "job_id": draw(st.sampled_from(["j1", "j2", None]))})
    queue = []
    for i in range(draw(st.integers(0, 12))):
        s, d = draw(span)
        queue.append({"job_id": f"q{i}", "pool": draw(st.sampled_from(POOLS)), "submit": at(s),
                      "start": draw(st.sampled_from([at(s + d), None])),
                      "reason": draw(st.sampled_from(["quota", "resources", "priority", "dependency", "other"]))})
    events = []
    for _ in range(draw(st.integers(0, 10))):
        events.append(draw_event(draw, span, at, n_cards, NODES, POOLS))
    costs = []
    for i in range(draw(st.integers(0, 8))):
        s, d = draw(span)
        costs.append({"cost_id": f"c{i}", "category": draw(st.sampled_from(CATEGORIES)),
                      "amount": draw(st.floats(0, 1000)), "start": at(s), "end": at(s + d),
                      "pool": draw(st.sampled_from([None, "p0", "p1", "p9"])),
                      "driver": draw(st.sampled_from([None, "capacity_hours", "gpu_hours", "even", "active_hours",
                                                      "energy"])),
                      "owner": draw(st.sampled_from([None, None, None, "A1", "k_unmapped"]))})
    rates = []
    for _ in range(draw(st.integers(0, 2))):
        s, d = draw(span)
        rates.append({"pool": draw(st.sampled_from(POOLS)), "price_per_gpu_hour": draw(st.floats(0, 5)),
                      "start": draw(st.sampled_from([at(s), None])), "end": draw(st.sampled_from([at(s + d), None]))})
    tele = []
    if telemetry:
        for c in range(n_cards):
            if draw(st.booleans()):
                for q in range(-2, N_Q + 2, draw(st.sampled_from([1, 2]))):
                    tele.append({"ts": at(q), "gpu_id": f"g{c}", "util_pct": draw(st.sampled_from([0.0, 3.0, 50.0, 100.0])),
                                 "power_w": draw(st.sampled_from([None, 80.0, 400.0]))})
    tariffs = [{"start": at(q), "end": at(q + 16), "price_per_kwh": 0.05 + 0.01 * q / 16} for q in range(0, N_Q, 16)]
    bundle = make_bundle(
        inventory=cards, allocations=allocs, queue=queue, events=events, costs=costs, rates=rates, telemetry=tele,
        tariffs=tariffs if telemetry else [],
        owners=[{"tenant": "A", "project": "A1"}, {"tenant": "A", "project": "A2"}, {"tenant": "B", "project": "B1"}],
    )
    config = make_config(
        activity={"mode": draw(st.sampled_from(["threshold", "weighted"])), "max_sample_gap_s": 1800},
        allocation={"idle": draw(st.sampled_from(["separate", "proportional"]))},
    )
    return bundle, config


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bundles(telemetry=False))
def test_dollars_and_idle_hours_match_the_raw_tables(case):
    bundle, config = case
    comp = compute(bundle, config)
    rep = build_report(comp)
    oracles.assert_input_reconciles(rep, bundle, config)
    got = {r["cause"]: (r["gpu_hours"], r["cost"]) for r in rep["idle"] if r["kind"] == "unallocated"}
    hours, cost = oracles.idle_by_cause(bundle, config, Q)
    assert set(got) == {k for k, v in hours.items() if v > 0}
    for cause in hours:
        assert got.get(cause, (0.0, 0.0))[0] == pytest.approx(hours[cause], rel=1e-9, abs=1e-9)
        assert got.get(cause, (0.0, 0.0))[1] == pytest.approx(cost[cause], rel=1e-9, abs=1e-6)
    per_card = comp.seg.group_by("gpu_id").agg(pl.col("alloc_h").sum(), pl.col("cap_h").sum())
    assert (per_card["alloc_h"] <= per_card["cap_h"] + 1e-9).all()


def _close(a, b, path=""):
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            if k not in ("gaps", "rejected", "idle_backlog"):
                _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        if a and isinstance(a[0], dict):
            # Rows are ordered by cost; rows of (nearly) equal cost may swap: match them by their names.
            def name(r):
                return tuple(sorted((k, str(v)) for k, v in r.items() if not isinstance(v, (float, int)) or isinstance(v, bool)))

            a, b = sorted(a, key=name), sorted(b, key=name)
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-9), path
    else:
        assert a == b, path


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bundles(telemetry=True))
def test_no_figure_depends_on_where_the_ledger_is_cut(case):
    bundle, config = case
    plain = build_report(compute(bundle, config))
    quarters = pl.DataFrame({"t": pl.Series([at(q) for q in range(1, N_Q)], dtype=TS)})
    original = engine.card_cuts

    def every_quarter(b, cards, cfg, period, sampled):
        return pl.concat([original(b, cards, cfg, period, sampled), cards.select("gpu_id").join(quarters, how="cross")])

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine, "card_cuts", every_quarter)
        fine = build_report(compute(bundle, config))
    _close(plain, fine)
    rc = plain["reconciliation"]
    # With telemetry the input side includes measured energy at the tariffs, summed from the samples.
    assert rc["input_cost"] == pytest.approx(oracles.input_cost(bundle, config), rel=1e-9, abs=1e-6)
    assert abs(rc["difference"]) <= 1e-6 * max(1.0, rc["input_cost"])
