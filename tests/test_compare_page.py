"""The Compare page under AppTest: the figures it shows are the engine's decomposition of the same
two periods, the URL reopens an owner's drill-down, and the records behind it are lineage's."""

from __future__ import annotations

from datetime import date

import pytest
from streamlit.testing.v1 import AppTest

from cost_engine import compare, diff
from cost_engine.engine import compute
from tests.dashboard_support import APP, SAMPLE

TIMEOUT = 180
QUERY = {"base": "2026-10-06..2026-10-08", "new": "2026-10-09..2026-10-11", "by": "tenant"}


@pytest.fixture(autouse=True)
def sample_source(monkeypatch):
    monkeypatch.setenv("AILEDGER_SOURCE", str(SAMPLE))


@pytest.fixture(scope="module")
def periods(comp):
    """The sample week's days are cut in Europe/Berlin, as the page cuts them."""
    tz = comp.period.timezone
    a = compute(comp.bundle, compare.period_config(comp.config, diff.parse_span(QUERY["base"], tz)))
    b = compute(comp.bundle, compare.period_config(comp.config, diff.parse_span(QUERY["new"], tz)))
    return a, b


@pytest.fixture(scope="module")
def expected(periods) -> diff.Diff:
    return compare.compare_periods(*periods, by="tenant")


def open_compare(query: dict) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.run()
    at.switch_page("pages/compare.py")
    at.query_params.update(query)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_defaults_are_the_first_and_last_whole_days(comp):
    """The sample runs 2026-10-05 00:00Z to 10-12 00:00Z: in Berlin (UTC+2) its whole days are
    10-06 to 10-11, so the page opens on 10-06..10-08 against 10-09..10-11."""
    assert compare.default_days(comp) == ((date(2026, 10, 6), date(2026, 10, 8)),
                                          (date(2026, 10, 9), date(2026, 10, 11)))


def test_page_shows_the_decomposition(expected):
    at = open_compare(QUERY)
    m = {x.label: x.value for x in at.metric}
    assert m["Base total (USD)"] == f"{expected.base_total:,.2f}"
    assert m["Period total (USD)"] == f"{expected.new_total:,.2f}"
    assert m["Change (USD)"] == f"{expected.change:+,.2f}"
    effects = at.dataframe[0].value
    shown = dict(zip(effects["label"], effects["cost_change"]))
    for r in compare.effect_summary(expected).iter_rows(named=True):
        if r["value"] is not None and abs(r["value"]) > 1e-9:
            assert shown[r["label"]] == pytest.approx(r["value"])
    owners = at.dataframe[1].value
    assert set(owners["tenant"]) == set(expected.owners.filter(expected.owners["kind"] == "owner")["key"])
    assert sum(owners["cost_change"]) + sum(
        expected.owners.filter(expected.owners["kind"] != "owner")["change"]) == pytest.approx(expected.change)


def test_owner_drill_down_and_records(expected):
    at = open_compare({**QUERY, "owner": "research", "effect": "volume", "table": "allocations"})
    assert [s.value for s in at.subheader][-1] == "Why tenant research changed"
    research = expected.owner("research")
    elements = at.dataframe[2].value
    assert sum(elements["cost_change"]) == pytest.approx(research["change"])
    base, new = at.dataframe[3].value, at.dataframe[4].value
    assert {"allocation_id", "attributed_cost"} <= set(base.columns)
    assert any(str(i).startswith("alloc-") for i in new["allocation_id"])
    # Another effect's records: requests for a serving effect.
    at = open_compare({**QUERY, "owner": "research", "effect": "requests"})
    assert "request_id" in at.dataframe[3].value.columns


def test_changing_a_period_moves_the_url():
    at = open_compare(QUERY)
    at.date_input[0].set_value((date(2026, 10, 6), date(2026, 10, 7))).run()
    assert not at.exception
    assert at.query_params["base"] == "2026-10-06..2026-10-07"
    assert at.query_params["new"] == QUERY["new"]
    assert at.date_input[0].value == (date(2026, 10, 6), date(2026, 10, 7))


def test_records_within_where_the_effect_sits(expected, periods):
    """`within` narrows the records to the pool and accelerator (or the model) carrying the effect:
    research's volume effect on its largest pool shows only that pool's allocations, fewer than all
    of research's; "(all)" goes back to all of them."""
    import polars as pl

    scope = compare.effect_scopes(expected, "research", "volume").row(0, named=True)
    _, every = compare.compare_records(*periods, None, SAMPLE, by="tenant", key="research", table="allocations")
    _, narrowed = compare.compare_records(*periods, None, SAMPLE, by="tenant", key="research",
                                          table="allocations", scope=scope)
    assert 0 < narrowed.total < every.total
    at = open_compare({**QUERY, "owner": "research", "effect": "volume", "table": "allocations",
                       "within": scope["scope"]})
    picker = next(s for s in at.selectbox if s.label == "Within")
    assert picker.value == scope["scope"]
    assert any(m.value.startswith(f"**Period**: {narrowed.total:,} allocations ·") for m in at.markdown)
    inv = pl.read_csv(SAMPLE / "inventory.csv")
    cards = inv.filter((pl.col("pool") == scope["pool"]) & (pl.col("accelerator") == scope["accelerator"]))
    assert set(at.dataframe[4].value["gpu_id"]) <= set(cards["gpu_id"])
    picker.set_value("(all)").run()
    assert "within" not in at.query_params
    assert any(m.value.startswith(f"**Period**: {every.total:,} allocations ·") for m in at.markdown)
