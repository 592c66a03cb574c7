"""The request summary (tokens.summarize) stands in exactly for the resolved requests.

Requests are resolved once against the finest slots any boundary and drivers can make
(allocation.request_slots) and summed per tokens.SUMMARY_KEYS; the spread, the recharge, the
by-model table and the report read the summary, with its fine slots mapped onto the slots of the
rules in force (allocation.coarse_slots). So a rule change that leaves the period, the token
weights and the SLO alone (a boundary switch, new drivers) resolves no request again, and the
figures are those of requests resolved against that rule's own slots.
"""

from __future__ import annotations

import math
from datetime import timedelta

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cost_engine import allocation, token_sources, tokens
from cost_engine.engine import compute
from cost_engine.report import build_report
from tests.helpers import DAY0, make_bundle, make_config, ts
from tests.test_rule_memo import assert_same

OWNERS = [{"tenant": "T1", "project": "A"}, {"tenant": "T1", "project": "B"}, {"tenant": "T2", "project": "C"}]


def two_rows_bundle(requests: list[dict]):
    """Two fleet-wide rows spread by tokens over 2026-10-01 (UTC): `power` $48 over the whole
    day and `network` $120 over 06:00-18:00 only. Under the fully loaded boundary the day is cut
    at 06:00 and 18:00 (the network row's edges); under energy_only it is one slot."""
    return make_bundle(
        allocations=[],
        costs=[
            {"cost_id": "pwr", "category": "power", "amount": 48.0, "start": ts(1, 0), "end": ts(2, 0),
             "driver": "tokens"},
            {"cost_id": "net", "category": "network", "amount": 120.0, "start": ts(1, 6), "end": ts(1, 18),
             "driver": "tokens"},
        ],
        requests=requests,
        owners=OWNERS,
    )


def req(rid: str, hour: float, owner: str, tokens_in: int, **extra) -> dict:
    return {"request_id": rid, "ts": ts(1, hour), "owner": owner, "model": "m", "input_tokens": tokens_in,
            "output_tokens": 0, **extra}


WEIGHTS = {"allocation": {"token_weights": {"input": 1.0, "cached_input": 0.1, "output": 4.0}}}


def project_cost(rep: dict) -> dict[str, float]:
    return {r["project"]: r["cost"] for r in rep["by_project"]}


def test_a_boundary_switch_maps_the_summary_onto_the_new_slots_without_resolving_again():
    """Requests (input weight 1): A 100 tokens at 03:00, B 300 at 09:00, A 200 at 20:00.

    energy_only (one slot for the day): power $48 by tokens, A 300 and B 300 -> A $24, B $24.
    Then fully_loaded from the same memo: power as before (A $24, B $24) and network $120 over
    06:00-18:00, where only B's 300 tokens fall -> B $120 more: A $24, B $144.
    Had the requests kept the energy_only slot, network would be spread over the whole day's
    tokens: A $60, B $60 (so B $84) - the figure this test would catch.
    """
    bundle = two_rows_bundle([req("r1", 3, "A", 100), req("r2", 9, "B", 300), req("r3", 20, "A", 200)])
    memo: dict = {}
    narrow = compute(bundle, make_config(boundary={"name": "energy_only"}, **WEIGHTS), memo=memo)
    assert project_cost(build_report(narrow)) == pytest.approx({"A": 24.0, "B": 24.0})
    full = compute(bundle, make_config(**WEIGHTS), memo=memo)
    assert full.requests is narrow.requests  # not one request resolved again
    assert project_cost(build_report(full)) == pytest.approx({"A": 24.0, "B": 144.0})
    # Fine slots 00-06, 06-18, 18-24; under energy_only all three map onto slot 0.
    assert sorted(narrow.request_summary.select("fslot", "slot").unique().rows()) == [(0, 0), (1, 0), (2, 0)]
    assert sorted(full.request_summary.select("fslot", "slot").unique().rows()) == [(0, 0), (1, 1), (2, 2)]
    fresh = compute(bundle, make_config(**WEIGHTS))
    assert_same(build_report(full), build_report(fresh))


def test_the_summary_keeps_every_figure_the_report_reads():
    """Four requests of model m (token weights 1 / 0.1 / 4; SLO ttft 500 ms, latency 5000 ms):

    - r1 A: 100 in, 10 cached, 20 out, ok, ttft 100, latency 900, prefill 40 + decode 60, try 1;
    - r2 A: 50 in, 0 cached, 30 out, error, try 2 (a retry), no ttft: fails the SLO by status;
    - r3 B: 10 in, 0 cached, 5 out, ok, ttft 800 (> 500: not good), prefill 1, no decode;
    - r4 key "k9" (no project): 40 in, 0 cached, 0 out, ok, no latency or ttft: good.

    Tokens in 200, cached 10, out 55; requests 4; good tokens r1 130 + r4 40 = 170; good
    requests 2 -> SLO attainment 2/4 = 0.5; failed 1 -> error share 0.25; retried 1 -> retry
    share 0.25; two requests lack ttft or latency (r2, r4): the gap says 2. Phase time only from
    r1 (r3 lacks decode): prefill 40 / 100 ms -> input cost share 0.4 (the gap names m: not every
    request has both). The unmapped key k9 carries 1 record. By project: A 150 in, 10 cached,
    50 out, good 130; B 10 in, 5 out, good 0.
    """
    rows = [
        req("r1", 1, "A", 100, cached_input_tokens=10, output_tokens=20, ttft_ms=100.0, latency_ms=900.0,
            prefill_ms=40.0, decode_ms=60.0, attempt=1),
        req("r2", 2, "A", 50, output_tokens=30, status="error", latency_ms=900.0, attempt=2),
        req("r3", 3, "B", 10, output_tokens=5, ttft_ms=800.0, latency_ms=900.0, prefill_ms=1.0),
        req("r4", 4, "k9", 40),
    ]
    bundle = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "svc", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 10), "owner": "C",
                      "workload": "inference", "model": "m"}],
        costs=[{"cost_id": "dep", "category": "depreciation", "amount": 240.0, "start": ts(1), "end": ts(2)}],
        requests=rows, owners=OWNERS,
    )
    comp = compute(bundle, make_config(slo={"ttft_ms": 500.0, "latency_ms": 5000.0}, **WEIGHTS))
    rep = build_report(comp)
    t = rep["totals"]
    assert (t["input_tokens"], t["cached_input_tokens"], t["output_tokens"], t["requests"], t["good_tokens"]) == (
        200, 10, 55, 4, 170)
    (m,) = rep["by_model"]
    assert (m["slo_attainment"], m["error_share"], m["retry_share"]) == (0.5, 0.25, 0.25)
    assert comp.models["input_cost_share"].item() == pytest.approx(0.4)
    gaps = dict((g["what"], g["detail"]) for g in rep["gaps"])
    assert gaps["latency missing"].startswith("2 requests") and gaps["phase time missing"].endswith("m")
    assert {(u["key"], u["records"]) for u in rep["unattributed"]} == {("k9", 1)}
    by = {r["project"]: (r["input_tokens"], r["cached_input_tokens"], r["output_tokens"], r["good_tokens"])
          for r in rep["by_project"] if r["project"] in ("A", "B")}
    assert by == {"A": (150, 10, 50, 130), "B": (10, 0, 5, 0)}
    assert rep["trend"][0]["requests"] == 4
    assert rep["model_trend"][0]["tokens"] == 130 + 80 + 15 + 40
    # Three callers on one day and slot: one summary row each; four hours with traffic (01-04 UTC).
    assert comp.request_summary.height == 3 and comp.request_summary["records"].sum() == 4
    assert comp.request_hours["hour"].dt.hour().sort().to_list() == [1, 2, 3, 4]


# --- the property: the summary's figures are the rows' figures under any rules -------------------

CATS = ("power", "network", "depreciation", "storage")
DRIVERS = (None, "tokens", "requests", "even", "gpu_hours")
BOUNDARIES = ("fully_loaded", "energy_only", "narrow", "rental")


@st.composite
def bundles(draw):
    """A day with 0-4 fleet-wide cost rows at any minute (some crossing the period's edges), and
    1-12 requests at any second from owners with a project or none, some of them usage buckets
    crossing midnight or the period's start, statuses, tries, latencies and phase times."""
    minute = st.integers(-120, 26 * 60)
    costs = []
    for i in range(draw(st.integers(0, 4))):
        a, d = draw(minute), draw(st.integers(1, 20 * 60))
        costs.append({"cost_id": f"c{i}", "category": draw(st.sampled_from(CATS)), "amount": float(draw(st.integers(1, 500))),
                      "start": DAY0 + timedelta(minutes=a), "end": DAY0 + timedelta(minutes=a + d),
                      "driver": draw(st.sampled_from(DRIVERS))})
    rows = []
    for i in range(draw(st.integers(1, 12))):
        t = DAY0 + timedelta(seconds=draw(st.integers(-3600, 86_399)))
        r = {"request_id": f"r{i}", "ts": t, "owner": draw(st.sampled_from(["A", "B", "C", "k1", "k2"])),
             "source": draw(st.sampled_from(["gateway", "litellm"])), "model": draw(st.sampled_from(["m", "n"])),
             "input_tokens": draw(st.integers(0, 1000)), "cached_input_tokens": draw(st.integers(0, 50)),
             "output_tokens": draw(st.integers(0, 1000)),
             "status": draw(st.sampled_from(["ok", "ok", "error", "timeout"])),
             "ttft_ms": draw(st.one_of(st.none(), st.floats(0, 2000))),
             "latency_ms": draw(st.one_of(st.none(), st.floats(0, 9000))),
             "prefill_ms": draw(st.one_of(st.none(), st.floats(0, 500))),
             "decode_ms": draw(st.one_of(st.none(), st.floats(0, 500))),
             "attempt": draw(st.one_of(st.none(), st.integers(1, 3)))}
        if draw(st.booleans()):  # a usage bucket of many requests over [ts, end)
            r["end"] = t + timedelta(seconds=draw(st.integers(1, 8 * 3600)))
            r["requests"] = draw(st.integers(1, 40))
        rows.append(r)
    return make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "svc", "gpu_id": "g0", "start": ts(1, 2), "end": ts(1, 20), "owner": "C",
                      "workload": "inference", "model": "m"}],
        costs=costs, requests=rows, owners=OWNERS,
    )


def row_figures(comp) -> dict:
    """The request figures as the engine computed them from the resolved rows before the summary."""
    r = comp.requests
    own = r.filter(pl.col("project").is_not_null())
    return {
        "tokens": r.select(pl.col(*tokens.TOKEN_COLS, "requests").sum()).row(0),
        "good": r.select(pl.col("tokens").filter(pl.col("good")).sum()).item(),
        "by_model": sorted(r.group_by("model").agg(
            pl.col("requests").filter(pl.col("good")).sum(), pl.col("requests").filter(pl.col("status") != "ok").sum()
            .alias("f"), pl.col("requests").filter(pl.col("attempt") > 1).sum().alias("a")).rows()),
        "by_project": sorted(own.group_by("tenant", "project").agg(pl.col(*tokens.TOKEN_COLS).sum()).rows()),
        "unmapped": sorted(r.filter(pl.col("project").is_null()).group_by("source", "owner").len().rows()),
        "hours": sorted(r.select("model", pl.col("ts").dt.truncate("1h")).unique().rows()),
    }


def summary_figures(comp) -> dict:
    s = comp.request_summary
    own = s.filter(pl.col("project").is_not_null())
    return {
        "tokens": s.select(pl.col(*tokens.TOKEN_COLS, "requests").sum()).row(0),
        "good": s["good_tokens"].sum(),
        "by_model": sorted(s.group_by("model").agg(pl.col("good_requests", "failed_requests", "retried_requests").sum())
                           .rows()),
        "by_project": sorted(own.group_by("tenant", "project").agg(pl.col(*tokens.TOKEN_COLS).sum()).rows()),
        "unmapped": sorted(s.filter(pl.col("project").is_null()).group_by("source", "owner")
                           .agg(pl.col("records").sum()).rows()),
        "hours": sorted(comp.request_hours.select("model", "hour").unique().rows()),
    }


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bundle=bundles(), first=st.sampled_from(BOUNDARIES), then=st.sampled_from(BOUNDARIES),
       drivers=st.sampled_from([{}, {"network": "tokens", "storage": "requests"}, {"power": "even"}]))
def test_summary_figures_equal_the_rows_figures_under_any_rules(bundle, first, then, drivers):
    memo: dict = {}
    cfg1 = make_config(boundary={"name": first}, **WEIGHTS)
    cfg2 = make_config(boundary={"name": then}, allocation={"drivers": drivers, **WEIGHTS["allocation"]})
    compute(bundle, cfg1, memo=memo)
    reused = compute(bundle, cfg2, memo=memo)
    fresh = compute(bundle, cfg2)
    # The report from the reused summary is the report computed from scratch.
    assert_same(build_report(reused), build_report(fresh))
    # Every request figure from the summary is the one the resolved rows give.
    assert summary_figures(fresh) == row_figures(fresh)
    # The spread's weights per (slot, caller) equal those of requests resolved against the rule's
    # own slots (the path before the summary).
    slots = allocation.project_slots(bundle["costs"], fresh.period, cfg2)
    # The rows another source bills for the same model and hours stay out on both paths.
    plan = token_sources.plan(token_sources.coverage(bundle["requests"], fresh.period), cfg2, fresh.period)
    direct = tokens.prepare_requests(bundle["requests"], fresh.period, cfg2, fresh.ownership.resolve, slots,
                                     keep=lambda b: token_sources.split(b, plan)[0])
    keys = ["fslot", "project", "tenant", "owner", "source"]
    want = direct.group_by(keys).agg(pl.col("tokens_w", "requests").sum()).sort(keys, nulls_last=True)
    got = fresh.request_summary.group_by(pl.col("slot").alias("fslot"), *keys[1:]).agg(
        pl.col("tokens_w", "requests").sum()).sort(keys, nulls_last=True)
    assert want.select(keys).rows() == got.select(keys).rows()
    assert want["requests"].to_list() == got["requests"].to_list()
    assert all(close(a, b) for a, b in zip(want["tokens_w"], got["tokens_w"]))
