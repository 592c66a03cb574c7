"""Plotly figure builders for the dashboard and the exports (no streamlit here).

Each builder takes a frame from `cost_engine.views` and returns a `go.Figure`; the data go
in as plain lists (so the figure's JSON spec carries readable x/y values), times as local
wall-clock strings in the period's time zone (the axis title names the zone).

Names that come from the data (tenants, projects, models, pools...) pass through `label()`:
Plotly renders a small HTML subset in text, so `<`, `>` and `&` are written as entities
and a name like `<b>x</b>` or `<script>` shows as the literal text. The currency (from the
config) gets the same; a `title` handed to a builder is chart text: its caller escapes the
data in it with `label()` (exports_meta.titled escapes its title and subtitle itself).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import date, datetime
from typing import Any

import plotly.graph_objects as go
import polars as pl

from . import labels as words

TEMPLATE = "plotly_white"
EXPORT_WIDTH = 1100
EXPORT_HEIGHT = 520

# One colour per idle cause, the same on every chart.
CAUSE_COLORS = {
    "no_demand": "#9aa5b1",
    "quota": "#f0a202",
    "fragmentation": "#f18805",
    "maintenance": "#7b8cde",
    "degraded_hardware": "#d62828",
    "network_bottleneck": "#5e60ce",
    "storage_bottleneck": "#4ea8de",
    "data_loading": "#48bfe3",
    "oversized_request": "#e76f51",
    "underutilized": "#2a9d8f",
}
A_COLOR, B_COLOR = "#4361ee", "#f72585"
COST_COLOR, HOURS_COLOR, ACTIVE_COLOR, ENERGY_COLOR = "#4361ee", "#2a9d8f", "#8ac926", "#f4a261"


def label(value: Any) -> str:
    """A data value as chart text: HTML-significant characters as entities, None as '(none)'."""
    if value is None:
        return "(none)"
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def labels(values: Iterable[Any]) -> list[str]:
    return [label(v) for v in values]


def _nums(s: pl.Series) -> list[float | None]:
    return [None if v is None else float(v) for v in s.to_list()]


def _when(values: Iterable[Any]) -> list[str]:
    """Dates and (zone-aware) datetimes as local wall-clock strings Plotly reads as dates."""
    out = []
    for v in values:
        if isinstance(v, datetime):
            out.append(v.strftime("%Y-%m-%d %H:%M:%S"))
        elif isinstance(v, date):
            out.append(v.isoformat())
        else:
            out.append(str(v))
    return out


def _layout(fig: go.Figure, title: str, **kw: Any) -> go.Figure:
    """Title top left; the legend under the title (few series) or under the plot (many), so it
    never sits on the title and never squeezes the plot on a narrow screen."""
    n = sum(1 for t in fig.data if t.showlegend is not False and (t.name or "") != "")
    if n > 4:
        # Below the x axis (its title included); plotly grows the bottom margin to fit it.
        legend = {"orientation": "h", "yanchor": "top", "y": -0.22, "xanchor": "left", "x": 0.0,
                  "font": {"size": 11}}
        top = 60
    else:
        legend = {"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0.0}
        top = 60 if n <= 1 else (85 if n <= 2 else 100)
    _white(fig)
    fig.update_layout(
        title={"text": title, "x": 0.01, "xanchor": "left", "y": 0.98, "yanchor": "top", "yref": "container"},
        margin={"l": 60, "r": 30, "t": top, "b": 50},
        legend=legend,
        showlegend=n > 1,
        hoverlabel={"namelength": -1},
        **kw,
    )
    return fig


def _white(fig: go.Figure) -> None:
    """Give the figure the TEMPLATE. A named template is validated property by property on
    every assignment (~25 ms of CPU a chart, most of a chart's cost on a page); the built-in
    one is trusted as it is, as plotly itself does when it applies its default template."""
    import plotly.io as pio

    fig.layout._validate = False
    try:
        fig.layout.template = pio.templates[TEMPLATE]
    finally:
        fig.layout._validate = True


def _money_axis(currency: str, title: str = "Cost") -> dict:
    """A cost axis: its title names the currency, ticks are grouped (38,000 not 38k)."""
    return {"title": f"{title} ({currency})", "tickformat": ",.0f", "rangemode": "tozero"}


def _buckets(frame: pl.DataFrame) -> tuple[str, list[Any], list[bool], list[str]]:
    """The bucket column of a daily or bucketed frame, its values, partial flags and hover notes."""
    col = "bucket" if "bucket" in frame.columns else "day"
    partial = frame["partial"].to_list() if "partial" in frame.columns else [False] * frame.height
    notes = []
    for i in range(frame.height):
        if partial[i] and "hours_in_data" in frame.columns:
            notes.append(f"partial: {frame['hours_in_data'][i]:.0f} of {frame['hours_full'][i]:.0f} h")
        else:
            notes.append("")
    return col, frame[col].to_list(), [bool(p) for p in partial], notes


def _date_axis(grain: str, timezone: str, n: int) -> dict:
    fmt = {"day": "%a %d %b", "week": "week of %d %b", "month": "%b %Y"}.get(grain, "%a %d %b")
    step = {"day": 86400000, "week": 7 * 86400000, "month": "M1"}.get(grain)
    return {"title": f"{grain} ({timezone})", "type": "date", "tickformat": fmt, "dtick": step if n <= 16 else None}


def _mark_partial(fig: go.Figure, x: list[str], partial: list[bool], notes: list[str]) -> None:
    """Label each partial bucket above the plot, so a short bar is not read as a collapse."""
    for xi, p, note in zip(x, partial, notes):
        if p:
            fig.add_annotation(x=xi, y=1.0, xref="x", yref="paper", yanchor="bottom", text="partial",
                               hovertext=note, showarrow=False, font={"size": 10, "color": "#b45309"})


def _empty(title: str, message: str = "no data for this selection") -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font={"size": 14})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, title)


# ------------------------------------------------------------------------------------ overview


def spend_by_tenant(frame: pl.DataFrame, currency: str = "USD", top: int = 10) -> go.Figure:
    """Horizontal bars of cost per tenant, highest at the top (views.top_tenants)."""
    currency = label(currency)  # from the config: chart text like any name
    title = f"Spend by tenant (top {top}, {currency})"
    t = frame.head(top)
    if t.height == 0:
        return _empty(title)
    t = t.reverse()
    fig = go.Figure(
        go.Bar(
            x=_nums(t["cost"]), y=labels(t["tenant"]), orientation="h", marker_color=COST_COLOR,
            customdata=_nums(t["allocated_gpu_hours"]), text=_nums(t["cost"]), texttemplate="%{x:,.0f}",
            textposition="auto",
            hovertemplate="%{y}<br>cost %{x:,.2f}<br>%{customdata:,.1f} GPU-h<extra></extra>",
            name="cost",
        )
    )
    return _layout(fig, title, xaxis=_money_axis(currency), yaxis={"automargin": True})


def trend(frame: pl.DataFrame, currency: str = "USD", timezone: str = "UTC", grain: str = "day") -> go.Figure:
    """Cost per bucket (bars) and allocated / active GPU-hours (lines, right axis).

    `frame`: views.trend (days) or period_views.trend_buckets (days, weeks or months, with
    `partial`): a partial bucket's bar is hatched and labelled "partial"."""
    currency = label(currency)  # from the config: chart text like any name
    title = {"day": "Trend by day", "week": "Trend by week", "month": "Trend by month"}.get(grain, "Trend")
    if frame.height == 0:
        return _empty(title)
    col, values, partial, notes = _buckets(frame)
    x = _when(values)
    fig = go.Figure()
    fig.add_bar(x=x, y=_nums(frame["cost"]), name=f"cost ({currency})", marker_color=COST_COLOR, opacity=0.8,
                marker_pattern_shape=["/" if p else "" for p in partial], customdata=notes,
                hovertemplate="%{x}<br>%{y:,.2f} " + currency + "<br>%{customdata}<extra></extra>")
    fig.add_scatter(x=x, y=_nums(frame["allocated_gpu_hours"]), name="allocated GPU-h", yaxis="y2",
                    mode="lines+markers", line={"color": HOURS_COLOR})
    fig.add_scatter(x=x, y=_nums(frame["active_gpu_hours"]), name="active GPU-h", yaxis="y2",
                    mode="lines+markers", line={"color": ACTIVE_COLOR, "dash": "dot"})
    _mark_partial(fig, x, partial, notes)
    return _layout(
        fig, title,
        xaxis=_date_axis(grain, timezone, len(x)),
        yaxis=_money_axis(currency),
        yaxis2={"title": "GPU-hours", "overlaying": "y", "side": "right", "rangemode": "tozero", "showgrid": False,
                "tickmode": "auto", "tickformat": ",.0f"},
    )


def idle_by_cause(frame: pl.DataFrame, measure: str = "gpu_hours", title: str = "Idle GPU-hours by cause",
                  currency: str = "USD") -> go.Figure:
    """One bar per idle cause and kind, coloured by cause; the legend names the causes (held
    idle hatched), so the chart reads without the table."""
    currency = label(currency)  # from the config: chart text like any name
    if frame.height == 0 or frame[measure].sum() == 0:
        return _empty(title, "no idle time in this selection")
    t = frame.filter(pl.col(measure) > 0).sort(measure, descending=True)
    fig = go.Figure()
    for r in t.iter_rows(named=True):
        name = words.cause_kind(r["cause"], r["kind"])
        fig.add_bar(
            x=[label(name)], y=[float(r[measure])], name=label(name),
            marker_color=CAUSE_COLORS.get(r["cause"], "#888"),
            marker_pattern_shape="" if r["kind"] == "unallocated" else "/",
            customdata=[[r["kind"], r["cause"]]],
            hovertemplate="%{x}<br>%{y:,.1f}<extra></extra>",
        )
    unit = "GPU-hours" if measure == "gpu_hours" else f"Cost ({currency})"
    return _layout(fig, title, yaxis_title=unit, xaxis={"title": "cause (held idle hatched)", "showticklabels": False},
                   barmode="relative")


# ------------------------------------------------------------------------------------ rankings


def ranking_bar(frame: pl.DataFrame, name_col: str, value_col: str, title: str, unit: str = "",
                top: int = 20) -> go.Figure:
    """Horizontal bars of one measure per owner or model, highest at the top, each labelled
    with its value; the axis title names the unit (the currency for costs)."""
    t = frame.filter(pl.col(value_col).is_not_null()).head(top) if value_col in frame.columns else frame.head(0)
    if t.height == 0:
        return _empty(title)
    t = t.reverse()
    vals = _nums(t[value_col])
    fmt = ",.0f" if value_col in ("tokens", "allocated_gpu_hours") else ",.2f"
    fig = go.Figure(
        go.Bar(x=vals, y=labels(t[name_col]), orientation="h", marker_color=COST_COLOR, name=value_col,
               text=vals, texttemplate="%{x:" + fmt + "}", textposition="auto", cliponaxis=False,
               hovertemplate="%{y}<br>%{x:" + fmt + "} " + label(unit) + "<extra></extra>")
    )
    axis_title = label(unit) if unit else words.column(value_col)
    return _layout(fig, title, xaxis={"title": axis_title, "tickformat": ",.0f" if unit else None},
                   yaxis={"automargin": True}, height=max(320, 40 + 28 * t.height))


# ---------------------------------------------------------------------------------------- idle


def idle_stacked(frame: pl.DataFrame, measure: str = "gpu_hours", timezone: str = "UTC", currency: str = "USD",
                 grain: str = "day") -> go.Figure:
    """Idle per bucket stacked by cause (views.idle_daily or period_views.idle_buckets)."""
    currency = label(currency)  # from the config: chart text like any name
    unit = "GPU-hours" if measure == "gpu_hours" else (f"Cost ({currency})" if measure == "cost" else "kWh")
    title = f"Idle {'GPU-hours' if measure == 'gpu_hours' else measure} by {grain} and cause"
    if frame.height == 0:
        return _empty(title, "no idle time in this selection")
    col = "bucket" if "bucket" in frame.columns else "day"
    days = sorted(frame[col].unique().to_list())
    x = _when(days)
    fig = go.Figure()
    by = frame.group_by("kind", "cause").agg(pl.col(measure).sum()).sort(measure, descending=True)
    for kind, cause in by.select("kind", "cause").iter_rows():
        c = frame.filter((pl.col("kind") == kind) & (pl.col("cause") == cause))
        vals = dict(zip(c[col].to_list(), c[measure].to_list()))
        fig.add_bar(
            x=x, y=[float(vals.get(d, 0.0) or 0.0) for d in days], name=label(words.cause_kind(cause, kind)),
            marker_color=CAUSE_COLORS.get(cause, "#888"), marker_pattern_shape="" if kind == "unallocated" else "/",
        )
    if "partial" in frame.columns:
        flags = frame.group_by(col).agg(pl.col("partial").first(), pl.col("hours_in_data").first(),
                                        pl.col("hours_full").first()).sort(col)
        _, _, partial, notes = _buckets(flags)
        _mark_partial(fig, _when(flags[col]), partial, notes)
    return _layout(fig, title, barmode="stack", yaxis={"title": unit, "tickformat": ",.0f"},
                   xaxis=_date_axis(grain, timezone, len(days)))


def idle_by_pool(frame: pl.DataFrame, measure: str = "gpu_hours", currency: str = "USD") -> go.Figure:
    """Idle per pool / accelerator, stacked by cause (views.idle_by_pool)."""
    currency = label(currency)  # from the config: chart text like any name
    title = "Idle GPU-hours by pool and accelerator" if measure == "gpu_hours" else "Idle cost by pool and accelerator"
    if frame.height == 0:
        return _empty(title, "no idle time in this selection")
    f = frame.with_columns(
        pl.concat_str([pl.col("pool").fill_null("(none)"), pl.col("accelerator").fill_null("?")], separator=" · ").alias("where")
    )
    wheres = f.group_by("where").agg(pl.col(measure).sum()).sort(measure)["where"].to_list()
    # Pool over accelerator on two lines: a one-line label took half the plot at 800 px.
    ticks = [label(w).replace(" · ", "<br>", 1) for w in wheres]
    fig = go.Figure()
    for kind, cause in f.select("kind", "cause").unique().sort("kind", "cause", descending=[True, False]).iter_rows():
        c = f.filter((pl.col("kind") == kind) & (pl.col("cause") == cause))
        vals = dict(zip(c["where"].to_list(), c[measure].to_list()))
        fig.add_bar(
            y=ticks, x=[float(vals.get(w, 0.0) or 0.0) for w in wheres], orientation="h",
            name=label(words.cause_kind(cause, kind)), marker_color=CAUSE_COLORS.get(cause, "#888"),
            marker_pattern_shape="" if kind == "unallocated" else "/",
        )
    return _layout(fig, title, barmode="stack",
                   xaxis={"title": "GPU-hours" if measure == "gpu_hours" else f"Cost ({currency})",
                          "tickformat": ",.0f"},
                   yaxis={"automargin": True}, height=max(400, 240 + 56 * len(wheres)))  # two-line labels


def card_timeline(timeline: pl.DataFrame, allocations: pl.DataFrame, card: str, timezone: str = "UTC") -> go.Figure:
    """A card's utilisation and power over time with its allocations as shaded bands."""
    title = f"Telemetry of {label(card)}"
    if timeline.height == 0 and allocations.height == 0:
        return _empty(title, "no telemetry and no allocations for this card")
    fig = go.Figure()
    if timeline.height:
        x = _when(timeline["ts"])
        fig.add_scatter(x=x, y=_nums(timeline["util_pct"]), name="util %", mode="lines", line={"color": HOURS_COLOR})
        if timeline["power_w"].is_not_null().any():
            fig.add_scatter(x=x, y=_nums(timeline["power_w"]), name="power W", mode="lines", yaxis="y2",
                            line={"color": ENERGY_COLOR, "width": 1})
    palette = ["rgba(67,97,238,0.12)", "rgba(247,37,133,0.12)", "rgba(42,157,143,0.14)", "rgba(244,162,97,0.16)"]
    for i, a in enumerate(allocations.iter_rows(named=True)):
        owner = a.get("project") or a.get("tenant") or "(unmapped)"
        # Labels only when they cannot pile up; the markers' hover names every allocation.
        note = {}
        if allocations.height <= 4:
            note = {"annotation_text": label(f"{owner} · {a.get('job_id') or a['allocation_id']}"),
                    "annotation_position": "top left", "annotation_font_size": 10}
        fig.add_vrect(
            x0=_when([a["start"]])[0], x1=_when([a["end"]])[0], fillcolor=palette[i % len(palette)], line_width=0,
            layer="below", **note,
        )
    # An invisible trace lists the allocations in the legend/hover for readers of the spec.
    if allocations.height:
        fig.add_scatter(
            x=_when(allocations["start"]), y=[100.0] * allocations.height, mode="markers", name="allocation start",
            marker={"symbol": "triangle-down", "size": 9, "color": "#333"},
            text=labels(allocations["allocation_id"]),
            customdata=[
                f"{label(r.get('project') or r.get('tenant') or '(unmapped)')} · {label(r.get('job_id') or '')}"
                for r in allocations.iter_rows(named=True)
            ],
            hovertemplate="%{text}<br>%{customdata}<br>from %{x}<extra></extra>",
        )
    return _layout(
        fig, title,
        xaxis={"title": f"time ({timezone})", "type": "date"},
        yaxis={"title": "util %", "range": [0, 105]},
        yaxis2={"title": "power W", "overlaying": "y", "side": "right", "rangemode": "tozero", "showgrid": False,
                "tickmode": "auto"},
    )


# -------------------------------------------------------------------------------------- energy


def energy_daily(frame: pl.DataFrame, currency: str = "USD", timezone: str = "UTC", grain: str = "day") -> go.Figure:
    """GPU and facility kWh per bucket (bars) and energy cost (line, right axis)
    (views.energy_daily or period_views.energy_buckets, partial buckets marked)."""
    currency = label(currency)  # from the config: chart text like any name
    title = f"Energy by {grain}"
    if frame.height == 0:
        return _empty(title)
    col, values, partial, notes = _buckets(frame)
    x = _when(values)
    fig = go.Figure()
    pattern = ["/" if p else "" for p in partial]
    fig.add_bar(x=x, y=_nums(frame["energy_kwh_gpu"]), name="GPU kWh", marker_color=ENERGY_COLOR,
                marker_pattern_shape=pattern)
    fig.add_bar(x=x, y=_nums(frame["energy_kwh_facility"]), name="facility kWh", marker_color="#e9c46a",
                marker_pattern_shape=pattern)
    fig.add_scatter(x=x, y=_nums(frame["energy_cost"]), name=f"energy cost ({currency})", yaxis="y2",
                    mode="lines+markers", line={"color": COST_COLOR})
    _mark_partial(fig, x, partial, notes)
    return _layout(
        fig, title, barmode="group",
        xaxis=_date_axis(grain, timezone, len(x)),
        yaxis={"title": "kWh", "tickformat": ",.0f"},
        yaxis2={"title": f"Energy cost ({currency})", "overlaying": "y", "side": "right", "rangemode": "tozero",
                "showgrid": False, "tickmode": "auto", "tickformat": ",.0f"},
    )


def co2e_daily(frame: pl.DataFrame, timezone: str = "UTC", grain: str = "day") -> go.Figure:
    title = f"CO2e by {grain} (facility energy x grid carbon intensity)"
    if frame.height == 0 or frame["co2e_kg"].is_null().all():
        return _empty(title, "no tariff carries a carbon intensity, or no energy was measured")
    col, values, partial, notes = _buckets(frame)
    x = _when(values)
    fig = go.Figure(go.Bar(x=x, y=_nums(frame["co2e_kg"]), name="kg CO2e", marker_color="#6c757d",
                           marker_pattern_shape=["/" if p else "" for p in partial]))
    _mark_partial(fig, x, partial, notes)
    return _layout(fig, title, yaxis_title="kg CO2e", xaxis=_date_axis(grain, timezone, len(x)))


def power_vs_cap(frame: pl.DataFrame, timezone: str = "UTC") -> go.Figure:
    """Facility and GPU power over time against the site cap (views.power_profile)."""
    title = "Power against the site cap"
    if frame.height == 0:
        return _empty(title, "no power telemetry")
    x = _when(frame["ts"])
    fig = go.Figure()
    fig.add_scatter(x=x, y=_nums(frame["facility_kw"]), name="facility kW", mode="lines", line={"color": COST_COLOR},
                    fill="tozeroy", fillcolor="rgba(67,97,238,0.08)")
    fig.add_scatter(x=x, y=_nums(frame["gpu_kw"]), name="GPU kW", mode="lines", line={"color": ENERGY_COLOR})
    cap = frame["cap_kw"][0] if "cap_kw" in frame.columns else None
    if cap is not None:
        fig.add_scatter(x=[x[0], x[-1]], y=[float(cap), float(cap)], name="site cap", mode="lines",
                        line={"color": "#d62828", "dash": "dash"})
        over = frame.filter(pl.col("over_cap"))
        if over.height:
            fig.add_scatter(x=_when(over["ts"]), y=_nums(over["facility_kw"]), name="over the cap", mode="markers",
                            marker={"color": "#d62828", "size": 6})
    return _layout(fig, title, yaxis_title="kW", xaxis={"title": f"time ({timezone})", "type": "date"})


def tokens_per_joule(frame: pl.DataFrame) -> go.Figure:
    """Output tokens per joule per model, GPU-only and facility (views.model_energy)."""
    title = "Output tokens per joule by model"
    t = frame.filter(pl.col("output_tokens_per_joule").is_not_null())
    if t.height == 0:
        return _empty(title, "no model with both tokens and measured energy")
    fig = go.Figure()
    fig.add_bar(x=labels(t["model"]), y=_nums(t["output_tokens_per_joule"]), name="per GPU joule", marker_color=ENERGY_COLOR)
    fig.add_bar(x=labels(t["model"]), y=_nums(t["output_tokens_per_joule_facility"]), name="per facility joule",
                marker_color="#e9c46a")
    return _layout(fig, title, barmode="group", yaxis_title="output tokens / J")


# ------------------------------------------------------------------------------ unit economics


def unit_costs(frame: pl.DataFrame, target: float | None = None, currency: str = "USD") -> go.Figure:
    """$/1M tokens per model (all, uncached input, cached input, output, good) against a target."""
    currency = label(currency)  # from the config: chart text like any name
    title = f"Cost per 1M tokens by model ({currency})"
    if frame.height == 0:
        return _empty(title, "no model served tokens in this selection")
    x = labels(frame["model"])
    fig = go.Figure()
    for col, name, color in (
        ("cost_per_million_tokens", "all tokens", COST_COLOR),
        ("cost_per_million_uncached_input_tokens", "input", "#4cc9f0"),
        ("cost_per_million_cached_input_tokens", "cached input", "#90e0ef"),
        ("cost_per_million_output_tokens", "output", "#f72585"),
        ("cost_per_million_good_tokens", "good tokens", HOURS_COLOR),
    ):
        fig.add_bar(x=x, y=_nums(frame[col]), name=name, marker_color=color)
    if target is not None and target > 0:
        # On a log axis the line takes the value and the annotation its exponent (plotly.js).
        fig.add_shape(type="line", xref="paper", x0=0, x1=1, yref="y", y0=float(target), y1=float(target),
                      line={"color": "#d62828", "dash": "dash"})
        fig.add_annotation(xref="paper", x=0, yref="y", y=math.log10(float(target)), text=f"target {target:,.2f}",
                           showarrow=False, xanchor="left", yanchor="bottom", font={"color": "#d62828"})
    return _layout(fig, title, barmode="group",
                   yaxis={"title": f"{currency} / 1M tokens (log scale)", "type": "log"})


def token_mix(frame: pl.DataFrame) -> go.Figure:
    """Share of input, cached input and output tokens per model (stacked to 100 %)."""
    title = "Token mix by model"
    if frame.height == 0:
        return _empty(title)
    x = labels(frame["model"])
    fig = go.Figure()
    for col, name, color in (("input_share", "input", "#4cc9f0"), ("cached_share", "cached input", "#b8c0ff"),
                             ("output_share", "output", "#f72585")):
        fig.add_bar(x=x, y=_nums(frame[col]), name=name, marker_color=color)
    return _layout(fig, title, barmode="stack", yaxis={"title": "share of tokens", "tickformat": ".0%"})


# --------------------------------------------------------------------------------------- rules


def compare_rules(frame: pl.DataFrame, name_col: str, currency: str = "USD", a_name: str = "A",
                  b_name: str = "B") -> go.Figure:
    """Cost per owner under rule sets A and B (views.compare_rules)."""
    currency = label(currency)  # from the config: chart text like any name
    title = f"Cost under {label(a_name)} vs {label(b_name)} ({currency})"
    if frame.height == 0:
        return _empty(title)
    names = frame[name_col] if name_col in frame.columns else frame["tenant"]
    if name_col == "project" and "tenant" in frame.columns:
        names = frame.select(pl.concat_str([pl.col("tenant").fill_null("?"), pl.col("project").fill_null("?")],
                                           separator=" / "))[:, 0]
    x = labels(names)
    fig = go.Figure()
    fig.add_bar(x=x, y=_nums(frame["cost_a"]), name=label(a_name), marker_color=A_COLOR)
    fig.add_bar(x=x, y=_nums(frame["cost_b"]), name=label(b_name), marker_color=B_COLOR)
    return _layout(fig, title, barmode="group", yaxis=_money_axis(currency))


# ------------------------------------------------------------------------------------- compare

UP_COLOR, DOWN_COLOR, TOTAL_COLOR = "#d62828", "#2a9d8f", "#4361ee"


def waterfall(effects: pl.DataFrame, base_total: float, new_total: float, currency: str = "USD",
              base_name: str = "base", new_name: str = "period", title: str | None = None) -> go.Figure:
    """From the base total to the new total, one bar per effect (compare.effect_summary: `label`,
    optional `short` for the axis, `value`; the effects add up to the change). Effects of 0 are
    left out; an unknown effect (null value) is named under the chart, never drawn as 0. The
    value axis spans the bars' ends, not from 0, so a small change stays readable."""
    currency = label(currency)  # from the config: chart text like any name
    title = title or f"Why the cost changed ({currency})"
    axis = "short" if "short" in effects.columns else "label"
    shown = effects.filter(pl.col("value").is_not_null() & (pl.col("value").abs() > 1e-9))
    unknown = effects.filter(pl.col("value").is_null())
    x = [label(base_name), *labels(shown[axis]), label(new_name)]
    values = [float(v) for v in shown["value"].to_list()]
    y = [float(base_total), *values, float(new_total)]
    measure = ["absolute", *(["relative"] * shown.height), "total"]
    text = [f"{base_total:,.2f}", *(f"{v:+,.2f}" for v in values), f"{new_total:,.2f}"]
    hover = [label(base_name), *labels(shown["label"]), label(new_name)]
    fig = go.Figure(go.Waterfall(
        x=x, y=y, measure=measure, text=text, textposition="outside", customdata=hover,
        hovertemplate="%{customdata}<br>%{y:+,.2f}<extra></extra>", name="cost",
        increasing={"marker": {"color": UP_COLOR}}, decreasing={"marker": {"color": DOWN_COLOR}},
        totals={"marker": {"color": TOTAL_COLOR}}, connector={"line": {"color": "#9aa5b1", "width": 1}},
    ))
    if unknown.height:
        fig.add_annotation(
            text="unknown, not drawn: " + ", ".join(labels(unknown[axis])),
            showarrow=False, x=0.0, y=-0.2, xref="paper", yref="paper", xanchor="left", font={"size": 12},
        )
    ends = [float(base_total)]
    for v in values:
        ends.append(ends[-1] + v)
    lo, hi = min(*ends, float(new_total)), max(*ends, float(new_total))
    pad = max(hi - lo, 1e-9 + 0.01 * max(abs(hi), abs(lo))) * 0.25
    low = lo - pad if lo - pad > 0 or lo < 0 else 0.0
    fig = _layout(fig, title, yaxis={"title": currency, "range": [low, hi + pad], "tickformat": ",.0f"},
                  xaxis={"automargin": True})
    fig.update_layout(margin={"b": 110 if unknown.height else 80})
    return fig


# ---------------------------------------------------------------------------------------- data


def coverage(frame: pl.DataFrame) -> go.Figure:
    """Allocated GPU-hours with and without telemetry per pool (views.telemetry_coverage)."""
    title = "Telemetry coverage of allocated GPU-hours"
    if frame.height == 0:
        return _empty(title)
    names = labels(
        frame.select(pl.concat_str([pl.col("pool").fill_null("(none)"), pl.col("accelerator").fill_null("?")],
                                   separator=" · "))[:, 0]
    )
    fig = go.Figure()
    fig.add_bar(y=names, x=_nums(frame["covered_gpu_hours"]), name="with telemetry", orientation="h",
                marker_color=HOURS_COLOR)
    fig.add_bar(y=names, x=_nums(frame["uncovered_gpu_hours"]), name="no telemetry", orientation="h",
                marker_color="#d62828")
    return _layout(fig, title, barmode="stack", xaxis_title="GPU-hours", yaxis={"automargin": True})


def budget_burndown(path: pl.DataFrame, amount: float | None, name: str, currency: str = "USD",
                    timezone: str = "UTC") -> go.Figure:
    """Budget left day by day (budgets.evaluate's path for one budget): booked days solid, the
    forecast dashed with its 80 % and 95 % bands, zero marked."""
    currency = label(currency)  # from the config: chart text like any name
    title = f"Burn-down: {label(name)} ({currency} left)"
    if path.height == 0 or amount is None:
        return _empty(title, "no figures for this budget (see its note)")
    days = _when(path["day"])
    left = lambda col: [None if v is None else amount - v for v in _nums(path[col])]  # noqa: E731
    fig = go.Figure()
    bands = (("spent_hi95", "spent_lo95", 0.12, "95 %"), ("spent_hi80", "spent_lo80", 0.25, "80 %"))
    for hi, lo, opacity, what in bands:
        fig.add_scatter(x=days, y=left(lo), mode="lines", line={"width": 0}, showlegend=False, hoverinfo="skip")
        fig.add_scatter(x=days, y=left(hi), mode="lines", line={"width": 0}, fill="tonexty",
                        fillcolor=f"rgba(67,97,238,{opacity})", name=f"{what} interval",
                        hovertemplate="%{x}<br>" + what + " low end %{y:,.2f}<extra></extra>")
    kind = path["kind"].to_list()
    remaining = _nums(path["remaining"])
    solid = [v if k == "booked" else None for k, v in zip(kind, remaining)]
    # Forecast days dashed, joined to the booked days next to them (days before the data, then after it).
    near = [k == "forecast" or "forecast" in kind[max(i - 1, 0):i + 2] for i, k in enumerate(kind)]
    dashed = [v if n else None for n, v in zip(near, remaining)]
    fig.add_scatter(x=days, y=dashed, mode="lines", line={"color": COST_COLOR, "dash": "dash"}, name="forecast",
                    hovertemplate="%{x}<br>left %{y:,.2f}<extra></extra>")
    fig.add_scatter(x=days, y=solid, mode="lines+markers", line={"color": COST_COLOR}, name="booked",
                    hovertemplate="%{x}<br>left %{y:,.2f}<extra></extra>")
    fig.add_hline(y=0, line={"color": "#d62828", "width": 1})
    return _layout(fig, title, xaxis={"title": f"day ({timezone})", "type": "date"},
                   yaxis={"title": f"{currency} left"})


def figure_spec(fig: go.Figure) -> dict:
    """The figure as a plain dict (what the browser receives)."""
    return fig.to_plotly_json()
