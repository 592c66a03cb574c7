"""Unit economics: $/1M input, cached input, output and good tokens per model against a target, SLO
attainment, cache hit rate and the input/output mix."""

from __future__ import annotations

import math

import streamlit as st

from cost_engine import charts
from pages import common

ctx = common.context()
common.header(ctx, "Unit economics")
cur = ctx.currency

u = ctx.view("unit_totals")
default_target = round(u["cost_per_million_tokens"], 2) if u["cost_per_million_tokens"] else 1.0
# The target lives in the URL (?target=1.5), so a link shows the same comparison.
try:
    target = float(st.query_params.get("target") or default_target)
except ValueError:
    target = float(default_target)
target = target if math.isfinite(target) and target >= 0 else float(default_target)
st.session_state["unit_target"] = target
st.number_input(f"Target cost per 1M tokens ({cur})", min_value=0.0, step=1.0, key="unit_target",
                on_change=lambda: common.set_page_params(target=repr(float(st.session_state["unit_target"]))),
                help="Default: the fleet's current cost per 1M tokens.")

g = common.metric_grid(5, "unit_metrics")
g.metric(f"{cur} per 1M tokens", common.fmt(u["cost_per_million_tokens"], cur), border=True,
         help="Sum of model costs / their input + cached + output tokens.")
g.metric(f"{cur} per 1M good", common.fmt(u["cost_per_million_good_tokens"], cur), border=True,
         help="Good tokens: status ok and within the SLO (TTFT and latency).")
g.metric("Good-token share", common.fmt(u["good_token_share"], "ratio"), border=True)
g.metric("Cache hit rate", common.fmt(u["cache_hit_rate"], "ratio"), border=True,
         help="Cached input tokens / all input tokens.")
g.metric("Token volume", common.fmt(float(u["tokens"]), "tokens"), border=True)

frame = ctx.view("unit_economics", target)
common.chart(charts.unit_costs(frame, target, cur), "unit_costs", name="cost-per-million-tokens")
grid = st.grid(2, min_column_width=420, key="unit_mix")
with grid.cell():
    common.chart(charts.token_mix(frame), "token_mix", name="token-mix")
with grid.cell():
    st.caption(
        "Cost / target = model cost per 1M tokens / target (below 1 meets it). Input cost is the model cost times the "
        "prefill share of its phase time (or the token weights); within it, cached tokens carry their "
        "token weight relative to uncached ones, so input and cached input each get their own $/1M."
    )
    common.table(frame, "unit_economics", name="unit-economics")
