"""Unit economics: $/1M input, cached input, output and good tokens per model against a target, SLO
attainment, cache hit rate and the input/output mix."""

from __future__ import annotations

import streamlit as st

from cost_engine import charts
from pages import common

ctx = common.context()
common.header(ctx, "Unit economics")
cur = ctx.currency

u = ctx.view("unit_totals")
default_target = round(u["cost_per_million_tokens"], 2) if u["cost_per_million_tokens"] else 1.0
target = st.number_input(f"Target cost per 1M tokens ({cur})", min_value=0.0, value=float(default_target), step=1.0,
                         key="unit_target", help="Default: the fleet's current cost per 1M tokens.")

c = st.columns(5)
c[0].metric(f"{cur} per 1M tokens", common.fmt(u["cost_per_million_tokens"], cur), border=True,
            help="Sum of model costs / their input + cached + output tokens.")
c[1].metric(f"{cur} per 1M good", common.fmt(u["cost_per_million_good_tokens"], cur), border=True,
            help="Good tokens: status ok and within the SLO (TTFT and latency).")
c[2].metric("Good-token share", common.fmt(u["good_token_share"], "ratio"), border=True)
c[3].metric("Cache hit rate", common.fmt(u["cache_hit_rate"], "ratio"), border=True,
            help="Cached input tokens / all input tokens.")
c[4].metric("Token volume", common.fmt(float(u["tokens"]), "tokens"), border=True)

frame = ctx.view("unit_economics", target)
common.chart(charts.unit_costs(frame, target, cur), "unit_costs", name="cost-per-million-tokens")
left, right = st.columns([2, 3])
with left:
    common.chart(charts.token_mix(frame), "token_mix", name="token-mix")
with right:
    st.caption(
        "`vs_target` = model cost per 1M tokens / target (below 1 meets it). Input cost is the model cost times the "
        "prefill share of its phase time (or the token weights); within it, cached tokens carry their "
        "token weight relative to uncached ones, so input and cached input each get their own $/1M."
    )
    common.table(frame, "unit_economics", name="unit-economics")
