"""Overview: the fleet at a glance on one screen: capacity, idle, unit costs, tokens, energy,
spend by tenant, idle this week and the daily trend, plus the review pack."""

from pathlib import Path

import streamlit as st

from cost_engine import exporters
from cost_engine.exporters import review_pack
from pages import common

ctx = common.context()
common.header(ctx, "Overview")

cards = ctx.view("kpi_cards")
common.kpi_row(ctx, ["allocated_gpu_hours", "available_gpu_hours", "allocation_rate", "idle_rate", "cost_per_gpu_hour"],
               cards)
common.kpi_row(ctx, ["cost", "tokens", "cost_per_million_tokens", "energy_kwh_gpu", "output_tokens_per_joule"], cards)

figs = ctx.overview_figures()
left, right = st.columns(2)
with left:
    common.chart(figs["spend_by_tenant"], "spend_by_tenant", name="spend-by-tenant")
with right:
    common.chart(figs["idle_this_week"], "idle_this_week", name="idle-this-week")
common.chart(figs["trend"], "trend", name="trend-by-day")

st.subheader("Spend by tenant (top ten)")
top = ctx.view("top_tenants", 10)
common.table(
    top.select("tenant", "cost", "allocated_gpu_hours", "active_gpu_hours", "avg_util_pct", "energy_kwh_gpu",
               "tokens", "cost_per_million_tokens"),
    "top_tenants", name="spend-by-tenant",
)
try:
    st.page_link("pages/rankings.py", label="Rankings: drill any tenant down to its projects, models, jobs and "
                 "raw records", icon=":material/leaderboard:")
except st.errors.StreamlitAPIException:  # the page runs on its own, without the router
    pass

rec = ctx.view("reconciliation").row(0, named=True)
st.caption(
    f"Reconciliation ({ctx.currency}): input {rec['input_cost']:,.2f} = owners {rec['attributed']:,.2f} + "
    f"idle {rec['idle']:,.2f} + unattributed {rec['unattributed']:,.2f} (difference {rec['difference']:.6f})."
)

st.subheader("Review pack")
st.caption("One zip: " + ", ".join(f"`{n}`" for n in review_pack.REVIEW_PACK_FILES))
st.download_button(
    "Download the review pack",
    data=lambda: review_pack.build_review_pack(ctx.comp, ctx.filters, source_label=Path(ctx.path).name),
    file_name="ailedger-review-pack.zip",
    mime="application/zip",
    key="review_pack",
    on_click="ignore",
    disabled=not exporters.available(),
    help=None if exporters.available() else "Needs Chromium for the chart images.",
    icon=":material/folder_zip:",
    type="primary",
)
