"""Issue 20 in the engine: period presets in whole local days, day / week / month buckets with
partial ones marked, KPI deltas against the previous period, rows outside the period, the
"via" of a raw record, readable labels, and exports that say what they show."""

from __future__ import annotations

import io
from datetime import date, datetime, timezone
from types import SimpleNamespace

import polars as pl
import pytest

from cost_engine import api, exports_meta, labels, period_choice, period_views, views
from cost_engine.config import load_config
from tests.dashboard_support import SAMPLE, write_html_bundle

UTC = timezone.utc
# The sample fleet: 2026-10-05T00:00Z .. 2026-10-12T00:00Z, i.e. 02:00 to 02:00 in Berlin (CEST).
SPAN = period_choice.DataSpan(datetime(2026, 10, 5, tzinfo=UTC), datetime(2026, 10, 12, tzinfo=UTC), "Europe/Berlin")


# ------------------------------------------------------------------------------------ presets


def test_the_data_span_in_local_days():
    assert (SPAN.first_day, SPAN.last_day) == (date(2026, 10, 5), date(2026, 10, 12))
    # 10-05 starts at 02:00 and 10-12 ends at 02:00: the whole days are 10-06 .. 10-11
    assert (SPAN.first_whole, SPAN.last_whole) == (date(2026, 10, 6), date(2026, 10, 11))
    # local midnight of 10-06 in CEST (UTC+2) is 10-05T22:00Z
    assert SPAN.window(date(2026, 10, 6), date(2026, 10, 11)) == (datetime(2026, 10, 5, 22, tzinfo=UTC),
                                                                  datetime(2026, 10, 11, 22, tzinfo=UTC))
    assert SPAN.covers(date(2026, 10, 6), date(2026, 10, 11)) and not SPAN.covers(date(2026, 10, 5), date(2026, 10, 6))


@pytest.mark.parametrize(("preset", "first", "last", "note"), [
    ("whole_days", date(2026, 10, 6), date(2026, 10, 11), None),
    ("all_data", date(2026, 10, 5), date(2026, 10, 12), None),
    # counted back from the last whole day 10-11: 10-05 .. 10-11 (7 days)
    ("last_7_days", date(2026, 10, 5), date(2026, 10, 11), None),
    ("last_30_days", date(2026, 10, 5), date(2026, 10, 11), "asks for 2026-09-12 to 2026-10-11"),
    ("month_to_date", date(2026, 10, 5), date(2026, 10, 11), "asks for 2026-10-01 to 2026-10-11"),
    # September is not in the data: the whole days, said so
    ("last_month", date(2026, 10, 6), date(2026, 10, 11), "(2026-09-01 to 2026-09-30) is not in the data"),
    ("last_quarter", date(2026, 10, 6), date(2026, 10, 11), "(2026-07-01 to 2026-09-30) is not in the data"),
])
def test_presets_resolve_to_local_days_inside_the_data(preset, first, last, note):
    got = period_choice.resolve(preset, SPAN)
    assert (got.first, got.last) == (first, last)
    assert (got.note is None) if note is None else (note in got.note)


def test_custom_periods_are_clipped_and_ordered():
    got = period_choice.resolve("custom", SPAN, date(2026, 10, 20), date(2026, 10, 9))
    assert (got.preset, got.first, got.last) == ("custom", date(2026, 10, 9), date(2026, 10, 12))
    assert "the data holds 2026-10-09 to 2026-10-12" in got.note
    missing = period_choice.resolve("custom", SPAN, None, None)
    assert missing.preset == "whole_days" and "without dates" in missing.note


def test_the_previous_period():
    six = period_choice.Chosen("whole_days", date(2026, 10, 6), date(2026, 10, 11))
    assert period_choice.previous(six) == (date(2026, 9, 30), date(2026, 10, 5))  # the 6 days before
    month = period_choice.Chosen("last_month", date(2026, 9, 1), date(2026, 9, 30))
    assert period_choice.previous(month) == (date(2026, 8, 1), date(2026, 8, 31))
    # month to date on the 11th: the 1st .. 11th of the month before
    mtd = period_choice.Chosen("month_to_date", date(2026, 10, 1), date(2026, 10, 11))
    assert period_choice.previous(mtd) == (date(2026, 9, 1), date(2026, 9, 11))
    # ... never longer than that month: 03-01 .. 03-31 -> 02-01 .. 02-28
    mtd = period_choice.Chosen("month_to_date", date(2026, 3, 1), date(2026, 3, 31))
    assert period_choice.previous(mtd) == (date(2026, 2, 1), date(2026, 2, 28))


# ------------------------------------------------------------------------------------ buckets


def test_partial_days_are_marked():
    b = period_choice.buckets(SPAN.start, SPAN.end, SPAN.timezone, "day")
    assert b["bucket"].to_list() == [date(2026, 10, d) for d in range(5, 13)]
    # 10-05 from 02:00: 22 of 24 h; 10-12 until 02:00: 2 of 24 h
    assert b.filter(pl.col("partial")).rows() == [(date(2026, 10, 5), 24.0, 22.0, True),
                                                  (date(2026, 10, 12), 24.0, 2.0, True)]
    s, e = SPAN.window(SPAN.first_whole, SPAN.last_whole)
    assert not period_choice.buckets(s, e, SPAN.timezone, "day")["partial"].any()


def test_weeks_months_and_clock_changes():
    w = period_choice.buckets(SPAN.start, SPAN.end, SPAN.timezone, "week")
    # 2026-10-05 is a Monday: week 10-05 holds 168 - 2 = 166 h of data, week 10-12 holds 2 h
    assert w.rows() == [(date(2026, 10, 5), 168.0, 166.0, True), (date(2026, 10, 12), 168.0, 2.0, True)]
    m = period_choice.buckets(SPAN.start, SPAN.end, SPAN.timezone, "month")
    # October 2026 in Berlin: 31 days, one of them 25 h long (10-25, back to CET): 745 h
    assert m.rows() == [(date(2026, 10, 1), 745.0, 168.0, True)]
    # 10-25 local midnight (CEST) = 10-24T22Z; 10-27 local midnight (CET) = 10-26T23Z
    d = period_choice.buckets(datetime(2026, 10, 24, 22, tzinfo=UTC), datetime(2026, 10, 26, 23, tzinfo=UTC),
                              "Europe/Berlin", "day")
    assert d.rows() == [(date(2026, 10, 25), 25.0, 25.0, False), (date(2026, 10, 26), 24.0, 24.0, False)]


def test_rebucketing_sums_days_and_keeps_unknown_unknown():
    """Days 10-05 .. 10-12 with cost 1..8; active GPU-hours 1.0 a day, unknown on 10-12.
    Weeks: 10-05 holds 1+2+...+7 = 28 and active 7 x 1.0 = 7.0; 10-12 holds 8 and active
    unknown (null, not 0), both partial."""
    days = pl.DataFrame({
        "day": [date(2026, 10, d) for d in range(5, 13)],
        "cost": [float(i) for i in range(1, 9)],
        "active_gpu_hours": [1.0] * 7 + [None],
    })
    comp = SimpleNamespace(period=SimpleNamespace(start=SPAN.start, end=SPAN.end, timezone=SPAN.timezone))
    w = period_views._rebucket(days, comp, "week", known=("active_gpu_hours",))
    assert w.select("bucket", "cost", "active_gpu_hours", "partial").rows() == [
        (date(2026, 10, 5), 28.0, 7.0, True), (date(2026, 10, 12), 8.0, None, True)]
    assert period_views.partial_note(w) == ("Partial buckets (the period or the data covers only part of them): "
                                            "2026-10-05 (166 of 168 h), 2026-10-12 (2 of 168 h).")


def test_trend_buckets_add_up_to_the_days(comp):
    days = views.trend(comp)
    for grain in ("day", "week", "month"):
        b = period_views.trend_buckets(comp, None, grain)
        assert b["cost"].sum() == pytest.approx(days["cost"].sum(), rel=1e-12)
        assert b["allocated_gpu_hours"].sum() == pytest.approx(days["allocated_gpu_hours"].sum(), rel=1e-12)
        # a ratio is recomputed from the sums, never averaged
        r = b.row(0, named=True)
        assert r["cost_per_allocated_gpu_hour"] == pytest.approx(r["cost"] / r["allocated_gpu_hours"])


def test_kpi_deltas():
    """cost 120 vs 100: +20.0 %; idle rate 0.30 vs 0.25: +5.0 pp; tokens vs 0: no delta;
    energy unknown now: no delta (unknown is not zero)."""
    now = pl.DataFrame({"key": ["cost", "idle_rate", "tokens", "energy_kwh_gpu"],
                        "value": [120.0, 0.30, 50.0, None], "unit": ["USD", "ratio", "tokens", "kWh"]})
    before = pl.DataFrame({"key": ["cost", "idle_rate", "tokens", "energy_kwh_gpu"],
                           "value": [100.0, 0.25, 0.0, 10.0]})
    d = {r["key"]: r for r in period_views.kpi_deltas(now, before).iter_rows(named=True)}
    assert d["cost"]["text"] == "+20.0 %" and d["cost"]["delta"] == pytest.approx(0.2)
    assert d["cost"]["color"] == "inverse"  # a rise in cost is bad
    assert d["idle_rate"]["text"] == "+5.0 pp" and d["idle_rate"]["delta"] == pytest.approx(0.05)
    assert d["tokens"]["delta"] is None and d["tokens"]["text"] is None
    assert d["energy_kwh_gpu"]["delta"] is None and d["energy_kwh_gpu"]["previous"] == 10.0


def test_rows_outside_the_period_are_counted(tmp_path):
    """The one-day HTML bundle (UTC) with the period cut to 12:00 .. 24:00: allocation a-1
    (00:00-12:00) lies wholly before it; requests at hours 1 + i % 16 for i < 40 fall before
    12:00 for i % 16 <= 10: 11 + 11 + 8 = 30; telemetry every 5 min on 2 cards before 12:00:
    2 x 12 x 12 = 288; the cost rows cover the whole day."""
    folder = write_html_bundle(tmp_path / "b")
    cfg = views.config_with(load_config(folder / "ailedger.toml"), period_start=datetime(2026, 10, 1, 12, tzinfo=UTC))
    out = dict(period_views.outside_period(api.run(folder, config=cfg)).iter_rows())
    assert (out["allocations"], out["requests"], out["telemetry"], out["costs"]) == (1, 30, 288, 0)


# ---------------------------------------------------------------------------------------- via


def test_recharged_records_say_where_their_cost_came_from(comp):
    """Item 9: rlhf's largest allocation records carried 0.0 GPU-h and $384.96: the inference
    recharge of the model served by shared-inference (owner key ns-inference)."""
    recs = views.records(comp, None, None, table="allocations", tenant="research", project="rlhf").rows
    top = recs.row(0, named=True)
    assert top["allocated_gpu_hours"] == 0.0 and top["attributed_cost"] == pytest.approx(384.96, abs=0.005)
    assert top["via"] == "recharge from shared-inference (ns-inference · llama-3.1-70b · by tokens)"
    own = recs.filter(pl.col("allocated_gpu_hours") > 0)
    assert own.height and set(own["via"]) == {"own use"}
    costs = views.records(comp, None, None, table="costs", tenant="research", project="rlhf").rows
    via = dict(zip(costs["cost_id"], costs["via"]))
    assert via["cost-direct-001"] == "direct charge" and via["measured energy"] == "measured energy"
    assert via["cost-011"] == "shared by driver gpu hours"


def test_idle_shares_name_their_amounts(comp):
    """Under idle = proportional an allocation's figure mixes own use and an idle share: both are
    named with their amounts, which add up to what the record contributed (to the cent)."""
    c = api.run(SAMPLE, config=views.config_with(comp.config, idle="proportional"))
    recs = views.records(c, None, None, table="allocations", tenant="research", project="rlhf", page_size=200).rows
    mixed = recs.filter(pl.col("via").str.contains("; "))
    assert mixed.height > 0
    for r in mixed.iter_rows(named=True):
        parts = dict(p.rsplit(" ", 1) for p in r["via"].split("; "))
        assert set(parts) == {"idle share", "own use"}
        assert sum(float(v) for v in parts.values()) == pytest.approx(r["attributed_cost"], abs=0.011)


# ------------------------------------------------------------------------------------- labels


def test_readable_labels():
    assert labels.compact(3.8e10) == "38.0 B" and labels.compact(2.5e6) == "2.5 M" and labels.compact(950) == "950"
    assert labels.compact(float("inf")) == "—" and labels.compact(None) == "—"
    assert labels.humanize("gpu_rental") == "GPU rental"
    assert labels.column("cost", "EUR") == "Cost (EUR)"
    assert labels.cause_kind("degraded_hardware", "unallocated") == "Degraded hardware (free)"
    f = labels.readable_values(pl.DataFrame({"cause": ["no_demand"], "kind": ["allocated"], "n": [1]}))
    assert f.row(0) == ("No demand", "held", 1)


# ------------------------------------------------------------------------------------ exports


@pytest.fixture(scope="module")
def days_comp(comp):
    """The sample over its whole local days, rental: 2026-10-06 .. 2026-10-11 Europe/Berlin."""
    s, e = SPAN.window(SPAN.first_whole, SPAN.last_whole)
    return api.run(SAMPLE, config=views.config_with(comp.config, period_start=s, period_end=e, boundary="rental"))


def test_exports_name_their_view(days_comp):
    ctx = exports_meta.context_of(days_comp, views.Filters(pools=["h100-train"]), source="ledger.duckdb",
                                  data_version="3f2a9c1d")
    assert exports_meta.file_name("project-ranking", ctx, "png") == (
        "project-ranking_2026-10-06_2026-10-11_rental_filtered.png")
    assert ctx.subtitle() == ("2026-10-06 to 2026-10-11, whole days in Europe/Berlin · boundary rental · "
                              "idle separate · recharge tokens · pools: h100-train · source ledger.duckdb · "
                              "data 3f2a9c1d")
    fig = exports_meta.titled(views_chart(days_comp), "Spend", ctx)
    assert fig.layout.title.text == "Spend" and fig.layout.title.subtitle.text == ctx.subtitle()


def test_export_names_carry_idle_treatment_and_recharge(days_comp):
    """Issue 42 item 7. On main a ranking CSV under idle proportional and one under idle separate
    got one name. The rules that are not the defaults (idle separate, recharge tokens) are in it."""
    rules = [("separate", "tokens"), ("proportional", "tokens"), ("separate", "requests"),
             ("proportional", "none")]
    import dataclasses

    ctx = exports_meta.context_of(days_comp)
    names = [exports_meta.file_name("project-ranking", dataclasses.replace(ctx, idle=i, recharge=r), "csv")
             for i, r in rules]
    assert names == [
        "project-ranking_2026-10-06_2026-10-11_rental.csv",
        "project-ranking_2026-10-06_2026-10-11_rental_idle-proportional.csv",
        "project-ranking_2026-10-06_2026-10-11_rental_recharge-requests.csv",
        "project-ranking_2026-10-06_2026-10-11_rental_idle-proportional_recharge-none.csv",
    ]


def views_chart(c):
    from cost_engine import charts

    return charts.spend_by_tenant(views.top_tenants(c, None, 10), c.period.currency)


def test_csv_for_people_and_for_machines(days_comp):
    ctx = exports_meta.context_of(days_comp, source="ledger.duckdb", data_version="3f2a9c1d")
    frame = pl.DataFrame({"tenant": ["research"], "cost": [12.5], "idle_rate": [0.25], "cause": ["no_demand"]})
    text = exports_meta.csv_for_people(frame, ctx, "Demo", now=datetime(2026, 10, 12, 8, tzinfo=UTC)).decode()
    head = [ln for ln in text.splitlines() if ln.startswith("#")]
    assert head[:4] == ["# Table: Demo", "# Period: 2026-10-06 to 2026-10-11, whole days in Europe/Berlin",
                        "# Boundary: rental (gpu_rental)", "# Idle treatment: separate"]
    assert head[-1].startswith("# Exported: 2026-10-12 08:00 UTC by ailedger ")
    body = pl.read_csv(io.StringIO(text), comment_prefix="#")
    # headers with units, the idle rate in percent (0.25 -> 25.0), the cause in words
    assert body.columns == ["Tenant", "Cost (USD)", "Idle rate (%)", "Cause"]
    assert body.row(0) == ("research", 12.5, 25.0, "No demand")
    raw = exports_meta.csv_for_machines(frame).decode().splitlines()
    assert raw[0] == "tenant,cost,idle_rate,cause" and raw[1] == "research,12.5,0.25,no_demand"
    pq = pl.read_parquet(io.BytesIO(exports_meta.parquet_with_context(frame, ctx, "Demo")))
    assert pq.equals(frame)
    import pyarrow.parquet as papq

    meta = papq.read_metadata(io.BytesIO(exports_meta.parquet_with_context(frame, ctx, "Demo"))).metadata
    assert meta[b"ailedger.table"] == b"Demo" and b"whole days in Europe/Berlin" in meta[b"ailedger.context"]
