"""Idle: idle GPU-hours and cost by cause over time and as a backlog, by pool and accelerator;
a cause's cards and allocations; a card's telemetry with its allocations.

URL: ?cause=no_demand[&kind=unallocated][&gpu=GPU-...] reopens a cause and a card.
"""

from __future__ import annotations

import polars as pl
import streamlit as st

from cost_engine import charts
from pages import common

ctx = common.context()
common.header(ctx, "Idle")
qp = st.query_params
cur = ctx.currency

s = ctx.view("idle_summary")
c = st.columns(5)
c[0].metric("Idle rate", common.fmt(s["idle_rate"], "ratio"), border=True, help="1 - active / available GPU-hours")
c[1].metric("Free GPU-h", common.fmt(s["unallocated_gpu_hours"], "GPU-h"), border=True,
            help="Unallocated: capacity nobody held, by cause (no demand, quota, fragmentation, maintenance, "
                 "degraded hardware).")
c[2].metric(f"Free cost ({cur})", common.fmt(s["unallocated_cost"], cur), border=True,
            help="What the unallocated time cost: the reconciliation's idle bucket under idle = separate.")
c[3].metric("Held idle GPU-h", common.fmt(s["allocated_gpu_hours"], "GPU-h"), border=True,
            help="Allocated but below the activity rule: network, storage, data loading, oversized requests, "
                 "underuse.")
c[4].metric(f"Held idle cost ({cur})", common.fmt(s["allocated_cost"], cur), border=True,
            help="Stays with the owner who reserved the cards; shown for analysis.")

measure = st.segmented_control("Measure", ["gpu_hours", "cost"], default="gpu_hours", required=True,
                               format_func={"gpu_hours": "GPU-hours", "cost": f"Cost ({cur})"}.get, key="idle_measure")
measure = measure or "gpu_hours"
common.chart(charts.idle_stacked(ctx.view("idle_daily"), measure, ctx.timezone), f"idle_daily_{measure}",
             name=f"idle-by-day-{measure}")

st.subheader("Backlog: idle by cause")
backlog: pl.DataFrame = ctx.view("idle_backlog")
if backlog.height == 0:
    st.info("No idle time in this selection.")
    st.stop()
causes = backlog.select("kind", "cause", "gpu_hours", "cost").rows(named=True)
options = [f"{r['kind']}:{r['cause']}" for r in causes]
by_option = {f"{r['kind']}:{r['cause']}": r for r in causes}
wanted, wanted_kind = qp.get("cause"), qp.get("kind")
default = next(
    (o for o in options if o.split(":", 1)[1] == wanted and wanted_kind in (None, o.split(":", 1)[0])), None
)
picked = st.pills(
    "Causes (pick one for its cards, allocations and telemetry)", options, default=default,
    key=f"cause_pick_{default}",
    format_func=lambda o: f"{o.split(':', 1)[1]} · {by_option[o]['gpu_hours']:,.1f} GPU-h ({o.split(':', 1)[0]})",
)
if picked != default:
    if picked:
        kind, cause = picked.split(":", 1)
        qp.from_dict({"cause": cause, "kind": kind})
    else:
        qp.clear()
    st.rerun()
common.table(backlog, "idle_backlog", name="idle-backlog")

st.subheader("By pool and accelerator")
by_pool = ctx.view("idle_by_pool")
common.chart(charts.idle_by_pool(by_pool, "gpu_hours"), "idle_by_pool", name="idle-by-pool")
with st.expander("Table: idle by pool, accelerator and cause"):
    common.table(by_pool, "idle_by_pool_table", name="idle-by-pool")

if picked:
    kind, cause = picked.split(":", 1)
    st.subheader(f"Behind {common.md(cause)} ({kind})")
    cards = ctx.view("idle_cards", cause, kind)
    labels = ctx.raw("card_label")
    st.caption(f"{cards.height} cards · {cards['gpu_hours'].sum():,.1f} idle GPU-hours · "
               f"{cards['cost'].sum():,.2f} {cur}. Select a card for its telemetry.")
    state = common.table(cards, f"idle_cards_{cause}_{kind}", name=f"idle-cards-{cause}", on_select="rerun",
                         selection_mode="single-row")
    i = common.selected_row(state)
    if i is not None and i < cards.height and cards["gpu_id"][i] != qp.get("gpu"):
        qp["gpu"] = cards["gpu_id"][i]
        st.rerun()
    if kind == "allocated":
        st.markdown("**Allocations behind this cause**")
        common.table(ctx.view("idle_allocations", cause, kind), f"idle_allocs_{cause}",
                     name=f"idle-allocations-{cause}")

    st.subheader("Card telemetry")
    ids = cards["gpu_id"].to_list()
    gpu = qp.get("gpu")
    if gpu not in ids:
        gpu = ids[0] if ids else None
    if gpu:
        chosen = st.selectbox("Card", ids, index=ids.index(gpu), format_func=lambda g: labels.get(g, g),
                              key=f"card_{cause}_{kind}_{gpu}")
        if chosen != gpu:
            qp["gpu"] = chosen
            st.rerun()
        timeline = ctx.raw("card_timeline", gpu)
        allocations = ctx.raw("card_allocations", gpu)
        common.chart(charts.card_timeline(timeline, allocations, labels.get(gpu, gpu), ctx.timezone),
                     "card_timeline", name=f"telemetry-{gpu}")
        if allocations.height:
            common.table(allocations, "card_allocations", name=f"allocations-{gpu}")
else:
    st.caption("Pick a cause above to list the cards and allocations behind it and a card's telemetry.")
