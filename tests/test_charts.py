"""cost_engine.charts: each builder draws the view's numbers (checked through the figure spec),
handles empty frames, and writes data names as inert text."""

from __future__ import annotations

import json
import math

import plotly.graph_objects as go
import polars as pl
import pytest

from cost_engine import api, charts, labels, views
from tests.dashboard_support import EVIL_MODEL, EVIL_TENANT, write_html_bundle


def spec(fig: go.Figure) -> dict:
    """What the browser gets (the JSON Streamlit sends), parsed back."""
    return json.loads(fig.to_json())


def approx_list(a, b):
    return len(a) == len(b) and all(
        (x is None and y is None) or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9) for x, y in zip(a, b)
    )


def test_spend_by_tenant_spec(comp, rep):
    s = spec(charts.spend_by_tenant(views.top_tenants(comp), "USD"))
    bar = s["data"][0]
    want = rep["by_tenant"][:10][::-1]
    assert bar["type"] == "bar" and bar["orientation"] == "h"
    assert bar["y"] == [r["tenant"] for r in want]
    assert approx_list(bar["x"], [r["cost"] for r in want])
    assert "USD" in s["layout"]["title"]["text"]
    assert "bdata" not in json.dumps(s)  # plain lists: readable specs


def test_trend_spec(comp, rep):
    s = spec(charts.trend(views.trend(comp), "USD", comp.period.timezone))
    names = [t["name"] for t in s["data"]]
    assert names[0].startswith("cost") and "allocated GPU-h" in names
    assert s["data"][0]["x"] == [r["day"] for r in rep["trend"]]
    assert approx_list(s["data"][0]["y"], [r["cost"] for r in rep["trend"]])
    assert approx_list(s["data"][1]["y"], [r["allocated_gpu_hours"] for r in rep["trend"]])
    assert s["layout"]["yaxis2"]["overlaying"] == "y"
    assert comp.period.timezone in s["layout"]["xaxis"]["title"]["text"]


def test_idle_charts(comp, rep):
    by_cause = views.idle_by_cause(comp)
    s = spec(charts.idle_by_cause(by_cause))
    # one bar per cause and kind, its legend entry naming both in words ("No demand (free)")
    got = {t["name"]: t["y"][0] for t in s["data"]}
    for r in rep["idle"]:
        if r["gpu_hours"] > 0:
            assert math.isclose(got[labels.cause_kind(r["cause"], r["kind"])], r["gpu_hours"], rel_tol=1e-9)
    assert len(got) == sum(1 for r in rep["idle"] if r["gpu_hours"] > 0)
    daily = views.idle_daily(comp)
    s = spec(charts.idle_stacked(daily, "gpu_hours", comp.period.timezone))
    assert s["layout"]["barmode"] == "stack"
    total = sum(sum(t["y"]) for t in s["data"])
    assert math.isclose(total, daily["gpu_hours"].sum(), rel_tol=1e-9)
    s = spec(charts.idle_stacked(daily, "cost"))
    assert math.isclose(sum(sum(t["y"]) for t in s["data"]), daily["cost"].sum(), rel_tol=1e-9)
    pool = views.idle_by_pool(comp)
    s = spec(charts.idle_by_pool(pool))
    assert math.isclose(sum(sum(t["x"]) for t in s["data"]), pool["gpu_hours"].sum(), rel_tol=1e-9)
    assert any("h100-train" in y for t in s["data"] for y in t["y"])


def test_ranking_bar_and_compare(comp):
    frame = views.rankings(comp, None, "model", "cost_per_million_tokens")
    s = spec(charts.ranking_bar(frame, "model", "cost_per_million_tokens", "Models", "USD / 1M tokens"))
    assert s["data"][0]["y"][-1] == frame["model"][0]  # highest at the top
    cmp = views.compare_rules(comp, comp, "project")
    s = spec(charts.compare_rules(cmp, "project", "USD", "A", "B"))
    assert [t["name"] for t in s["data"]] == ["A", "B"]
    assert all(" / " in x for x in s["data"][0]["x"])


def test_card_timeline_spec(comp):
    gpu = comp.ledger.cards.filter(pl.col("pool") == "h100-train")["gpu_id"][0]
    tl, allocs = views.card_timeline(comp, gpu), views.card_allocations(comp, gpu)
    s = spec(charts.card_timeline(tl, allocs, "card", comp.period.timezone))
    names = [t["name"] for t in s["data"]]
    assert names[:2] == ["util %", "power W"]
    assert len(s["layout"]["shapes"]) == allocs.height  # one band per allocation
    assert approx_list(s["data"][0]["y"], tl["util_pct"].to_list())
    assert "+" not in s["data"][0]["x"][0]  # local wall-clock strings, no offsets for plotly.js


def test_energy_and_unit_charts(comp, rep):
    daily = views.energy_daily(comp)
    s = spec(charts.energy_daily(daily, "USD", comp.period.timezone))
    assert approx_list(s["data"][0]["y"], daily["energy_kwh_gpu"].to_list())
    assert approx_list(s["data"][2]["y"], daily["energy_cost"].to_list())
    prof = views.power_profile(comp, None, cap_kw=12.0)
    s = spec(charts.power_vs_cap(prof))
    cap = next(t for t in s["data"] if t["name"] == "site cap")
    assert cap["y"] == [12.0, 12.0]
    assert any(t["name"] == "over the cap" for t in s["data"]) == bool(prof["over_cap"].any())
    s = spec(charts.tokens_per_joule(views.model_energy(comp)))
    by = {r["model"]: r["output_tokens_per_joule"] for r in rep["by_model"]}
    for x, y in zip(s["data"][0]["x"], s["data"][0]["y"]):
        assert math.isclose(y, by[x], rel_tol=1e-9)
    ue = views.unit_economics(comp, None, 70.0)
    s = spec(charts.unit_costs(ue, 70.0, "USD"))
    assert s["layout"]["yaxis"]["type"] == "log"
    assert s["layout"]["shapes"][0]["y0"] == 70.0
    assert 10 ** s["layout"]["annotations"][0]["y"] == pytest.approx(70.0)  # log axis: annotations take the exponent
    assert approx_list(s["data"][0]["y"], ue["cost_per_million_tokens"].to_list())
    s = spec(charts.token_mix(ue))
    for i in range(ue.height):
        assert math.isclose(sum(t["y"][i] for t in s["data"]), 1.0, rel_tol=1e-9)
    s = spec(charts.co2e_daily(daily))
    assert approx_list(s["data"][0]["y"], daily["co2e_kg"].to_list())
    s = spec(charts.coverage(views.telemetry_coverage(comp)))
    assert len(s["data"]) == 2


def test_empty_frames_draw_a_message():
    empty = pl.DataFrame(schema={"tenant": pl.String, "cost": pl.Float64, "allocated_gpu_hours": pl.Float64})
    s = spec(charts.spend_by_tenant(empty))
    assert s["data"] == [] and "no data" in s["layout"]["annotations"][0]["text"]
    idle = pl.DataFrame(schema={"kind": pl.String, "cause": pl.String, "gpu_hours": pl.Float64})
    assert spec(charts.idle_by_cause(idle))["data"] == []
    carbonless = pl.DataFrame({"day": [None], "co2e_kg": [None]}, schema={"day": pl.Date, "co2e_kg": pl.Float64})
    assert "carbon" in spec(charts.co2e_daily(carbonless))["layout"]["annotations"][0]["text"]


def test_names_with_html_are_inert(tmp_path):
    comp = api.run(write_html_bundle(tmp_path / "evil"))
    figs = [
        charts.spend_by_tenant(views.top_tenants(comp)),
        charts.ranking_bar(views.rankings(comp, None, "model"), "model", "cost", "Models"),
        charts.unit_costs(views.unit_economics(comp, None, 10.0), 10.0),
    ]
    for fig in figs:
        text = json.dumps(charts.figure_spec(fig), default=str)  # to_json writes < as \u003c: no test
        assert "<script" not in text and "<img" not in text
    s = spec(figs[0])
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in s["data"][0]["y"]
    assert charts.label(EVIL_TENANT) == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert charts.label(EVIL_MODEL).startswith("&lt;img")
    assert charts.label("a & b") == "a &amp; b" and charts.label(None) == "(none)"


def test_legend_never_sits_on_the_title(comp):
    # many series: the legend goes under the plot (a side legend squeezed the plot at 800 px)
    many = spec(charts.idle_stacked(views.idle_daily(comp)))
    assert many["layout"]["legend"]["orientation"] == "h" and many["layout"]["legend"]["y"] < 0
    few = spec(charts.trend(views.trend(comp)))
    assert few["layout"]["legend"]["orientation"] == "h" and few["layout"]["margin"]["t"] >= 85
