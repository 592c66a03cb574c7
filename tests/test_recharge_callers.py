"""Inference recharge onto callers that map to no project: one money line per model row for all
of them, each key's part kept per (key, model) (issue 17, item 5: a million distinct owners)."""

from __future__ import annotations

import polars as pl
import pytest

from cost_engine.engine import compute
from cost_engine.report import build_report
from tests.helpers import make_bundle, make_config, ts


def serving_bundle(unmapped_keys: int):
    """Card g0 (pool p) serves model m for project SVC 00:00-10:00; depreciation $240 for the
    day = $10 per card-hour, so the model costs 10 h x $10 = $100 and idle $140.

    Requests (tokens driver, input weight 1): project A1 sends 300 input tokens; `unmapped_keys`
    gateway keys send 200 tokens between them (k0 .. k{n-1}, equal shares).
    A1 pays 300/500 x $100 = $60; the unmapped keys $40 together, $40 / n each.
    """
    reqs = [{"request_id": "r-a1", "ts": ts(1, 1), "owner": "A1", "source": "gateway", "model": "m",
             "input_tokens": 300, "output_tokens": 0}]
    per_key = 200 // unmapped_keys
    reqs += [{"request_id": f"r-k{i}", "ts": ts(1, 2), "owner": f"k{i}", "source": "gateway", "model": "m",
              "input_tokens": per_key, "output_tokens": 0} for i in range(unmapped_keys)]
    return make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "svc", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 10), "owner": "SVC",
                      "workload": "inference", "model": "m"}],
        costs=[{"cost_id": "dep", "category": "depreciation", "amount": 240.0, "start": ts(1), "end": ts(2)}],
        requests=reqs,
        owners=[{"tenant": "T", "project": "SVC"}, {"tenant": "T", "project": "A1"}],
    )


def config():
    return make_config(allocation={"inference_recharge": "tokens", "token_weights": {"input": 1.0, "cached_input": 0.1,
                                                                                     "output": 4.0}})


def test_unmapped_callers_are_charged_per_key_and_are_one_line_in_the_money():
    """Two unmapped keys of 100 tokens each: $20 each in the report's unattributed list, $60 on
    A1, $140 idle; the money holds one unattributed line for both keys (u_key null)."""
    comp = compute(serving_bundle(2), config())
    rep = build_report(comp)
    assert {(u["key"], round(u["cost"], 9)) for u in rep["unattributed"]} == {("k0", 20.0), ("k1", 20.0)}
    assert rep["by_project"][0]["project"] == "A1" and rep["by_project"][0]["cost"] == pytest.approx(60.0)
    rc = rep["reconciliation"]
    assert (rc["attributed"], rc["unattributed"], rc["idle"]) == pytest.approx((60.0, 40.0, 140.0))
    lines = comp.money.filter(pl.col("dest") == "unattributed")
    assert lines.height == 1 and lines["u_key"].to_list() == [None] and lines["amount"].sum() == pytest.approx(40.0)


def test_money_rows_do_not_grow_with_the_number_of_unmapped_keys():
    """200 keys of 1 token each instead of 2 keys: the same $40 in 200 parts of $0.20, the same
    number of money rows (the model's rows x (A1 + one unmapped line))."""
    two, many = compute(serving_bundle(2), config()), compute(serving_bundle(200), config())
    assert many.money.height == two.money.height
    rep = build_report(many)
    assert len(rep["unattributed"]) == 200
    assert all(u["cost"] == pytest.approx(0.20) for u in rep["unattributed"])
    assert rep["reconciliation"]["unattributed"] == pytest.approx(40.0)


def test_many_callers_keep_the_money_without_the_card_time_detail(monkeypatch):
    """Past tokens.RECHARGE_DETAIL_ROWS (model rows x calling projects) the model's rows are
    summed per pool, day, category and cost row before the split. Forced here with a limit of 0:
    the money is the same as with the detail (A1 300/500 x $100 = $60, the two unmapped keys
    $20 each, idle $140), the recharged rows carry no allocation or segment, and a gap says so."""
    from cost_engine import tokens

    detailed = build_report(compute(serving_bundle(2), config()))
    monkeypatch.setattr(tokens, "RECHARGE_DETAIL_ROWS", 0)
    comp = compute(serving_bundle(2), config())
    rep = build_report(comp)
    assert rep["by_project"][0]["project"] == "A1" and rep["by_project"][0]["cost"] == pytest.approx(60.0)
    assert {(u["key"], round(u["cost"], 9)) for u in rep["unattributed"]} == {("k0", 20.0), ("k1", 20.0)}
    rc = rep["reconciliation"]
    assert (rc["attributed"], rc["unattributed"], rc["idle"]) == pytest.approx((60.0, 40.0, 140.0))
    assert rc == pytest.approx(detailed["reconciliation"])
    moved = comp.money.filter(pl.col("origin").str.contains("+recharge", literal=True))
    assert moved["amount"].sum() == pytest.approx(100.0)
    assert moved["allocation_id"].null_count() == moved.height and moved["s_idx"].null_count() == moved.height
    assert any(g[0] == "recharge detail" for g in comp.gaps)
