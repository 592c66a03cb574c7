"""Overview: the fleet at a glance on one screen: capacity, idle, unit costs, tokens, energy,
spend by tenant, idle this week and the trend by day, week or month (partial buckets marked),
with the change against the previous period, plus the review pack."""

from pathlib import Path

import polars as pl
import streamlit as st

from cost_engine import exporters, exports_meta, period_views
from cost_engine.exporters import review_pack
from pages import common

ctx = common.context()
common.header(ctx, "Overview")

# Firing alerts first: the budgets' and the config's [alerts] (the Budgets page has the detail).
firing = common.budget_views(ctx)["alerts"].filter(pl.col("state") == "firing")
if firing.height:
    with st.container(border=True, key="firing_alerts"):
        st.markdown(f"**{firing.height} alert{'s' if firing.height > 1 else ''} firing**")
        for r in firing.iter_rows(named=True):
            st.warning(common.md(f"{r['rule']} · {r['subject']}: {r['message']}"), icon=":material/notifications:")
        try:
            st.page_link("pages/budgets.py", label="Budgets: burn-down, forecasts and every alert",
                         icon=":material/savings:")
        except st.errors.StreamlitAPIException:  # the page runs on its own, without the router
            pass

cards = ctx.view("kpi_cards")
# One grid of ten cards, five a row on a wide screen, fewer (never cut) on a narrow one.
common.kpi_row(ctx, ["allocated_gpu_hours", "available_gpu_hours", "allocation_rate", "idle_rate", "cost_per_gpu_hour",
                     "cost", "tokens", "cost_per_million_tokens", "energy_kwh_gpu", "output_tokens_per_joule"],
               cards, per_row=5)
if ctx.previous_note:
    st.caption(common.md(ctx.previous_note))
elif ctx.previous is not None:
    st.caption("The small figures under each value: the change against the previous period of the same length "
               "(percentage points for rates). Hover a card for the previous value.")

figs = ctx.overview_figures()
grid = st.grid(2, min_column_width=420, key="overview_charts")  # one per row on a narrow screen
with grid.cell():
    common.chart(figs["spend_by_tenant"], "spend_by_tenant", name="spend-by-tenant")
with grid.cell():
    common.chart(figs["idle_this_week"], "idle_this_week", name="idle-this-week")
common.chart(figs["trend"], "trend", name=f"trend-by-{ctx.grain}")
note = period_views.partial_note(ctx.view("trend_buckets", ctx.grain))
if note:
    st.caption(note)

st.subheader("Spend by tenant (top ten)")
top = ctx.view("top_tenants", 10)
common.table(
    top.select("tenant", "cost", "allocated_gpu_hours", "active_gpu_hours", "avg_util_pct", "energy_kwh_gpu",
               "tokens", "cost_per_million_tokens"),
    "top_tenants", name="spend-by-tenant", title="Spend by tenant (top ten)",
)
try:
    st.page_link("pages/rankings.py", label="Rankings: drill any tenant down to its projects, models, jobs and "
                 "raw records", icon=":material/leaderboard:", query_params=common.link_query(ctx))
except st.errors.StreamlitAPIException:  # the page runs on its own, without the router
    pass

rec = ctx.view("reconciliation").row(0, named=True)
st.caption(
    f"Reconciliation ({ctx.currency}): input {rec['input_cost']:,.2f} = owners {rec['attributed']:,.2f} + "
    f"idle {rec['idle']:,.2f} + unattributed {rec['unattributed']:,.2f} (difference {round(rec['difference'], 6) + 0.0:.6f})."
)

st.subheader("Review pack")
st.caption("One zip: " + ", ".join(f"`{n}`" for n in review_pack.REVIEW_PACK_FILES))
st.download_button(
    "Download the review pack",
    data=lambda: review_pack.build_review_pack(ctx.comp, ctx.filters, source_label=Path(ctx.path).name,
                                               data_version=ctx.export_context().data_version),
    file_name=exports_meta.file_name("ailedger-review-pack", ctx.export_context(), "zip"),
    mime="application/zip",
    key="review_pack",
    on_click="ignore",
    disabled=exporters.unavailable_reason() is not None,
    help=None if exporters.available() else
    f"The review pack's chart images cannot be made here: {exporters.unavailable_reason()}.",
    icon=":material/folder_zip:",
    type="primary",
)
