"""Idle: idle GPU-hours and cost by cause over time (day, week or month buckets, partial ones
marked) and as a backlog with its suggested actions, by pool and accelerator; a cause's cards,
allocations and the owners behind it (linked to their Rankings page); a card's telemetry with
its allocations.

URL (with the shared view keys): ?cause=no_demand[&kind=unallocated][&gpu=GPU-...][&owner=PROJECT]
[&measure=cost] reopens a cause, a card, one owner's allocations and the measure.
"""

from __future__ import annotations

import polars as pl
import streamlit as st

from cost_engine import charts, labels, period_views
from pages import common

ctx = common.context()
common.header(ctx, "Idle")
qp = st.query_params
cur = ctx.currency
PAGE_KEYS = ("cause", "kind", "gpu", "owner", "measure")


def page_params(**changes: object) -> dict:
    """This page's URL keys with some changed (None drops one)."""
    keep = {k: qp.get(k) for k in PAGE_KEYS if qp.get(k)}
    keep.update(changes)
    return keep


s = ctx.view("idle_summary")
g = common.metric_grid(5, "idle_metrics")
g.metric("Idle rate", common.fmt(s["idle_rate"], "ratio"), border=True, help="1 - active / available GPU-hours")
g.metric("Free GPU-h", common.fmt(s["unallocated_gpu_hours"], "GPU-h"), border=True,
         help="Unallocated: capacity nobody held, by cause (no demand, quota, fragmentation, maintenance, "
              "degraded hardware).")
g.metric(f"Free cost ({cur})", common.fmt(s["unallocated_cost"], cur), border=True,
         help="What the unallocated time cost: the reconciliation's idle bucket under idle = separate.")
g.metric("Held idle GPU-h", common.fmt(s["allocated_gpu_hours"], "GPU-h"), border=True,
         help="Allocated but below the activity rule: network, storage, data loading, oversized requests, "
              "underuse.")
g.metric(f"Held idle cost ({cur})", common.fmt(s["allocated_cost"], cur), border=True,
         help="Stays with the owner who reserved the cards; shown for analysis.")

measure = qp.get("measure") if qp.get("measure") in ("gpu_hours", "cost") else "gpu_hours"
st.session_state["idle_measure"] = measure
st.segmented_control("Measure", ["gpu_hours", "cost"], required=True, key="idle_measure",
                     format_func={"gpu_hours": "GPU-hours", "cost": f"Cost ({cur})"}.get,
                     on_change=lambda: common.set_page_params(**page_params(
                         measure=None if st.session_state["idle_measure"] == "gpu_hours" else "cost")))
buckets = ctx.view("idle_buckets", ctx.grain)
common.chart(charts.idle_stacked(buckets, measure, ctx.timezone, cur, ctx.grain), f"idle_daily_{measure}",
             name=f"idle-by-{ctx.grain}-{measure}")
note = period_views.partial_note(buckets)
if note:
    st.caption(note)

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
    "Causes (pick one for its cards, allocations, owners and telemetry)", options, default=default,
    key=f"cause_pick_{default}",
    format_func=lambda o: f"{labels.cause_kind(o.split(':', 1)[1], o.split(':', 1)[0])} · "
                          f"{by_option[o]['gpu_hours']:,.1f} GPU-h",
)
if picked != default:
    if picked:
        kind, cause = picked.split(":", 1)
        common.set_page_params(cause=cause, kind=kind, measure=qp.get("measure"))
    else:
        common.set_page_params(measure=qp.get("measure"))
    st.rerun()
# The suggested action next to the cause, so it reads without scrolling sideways.
order = ["kind", "cause", "action", "gpu_hours", "cost", "share_of_idle", "energy_kwh_gpu", "top_offenders"]
common.table(backlog.select([c for c in order if c in backlog.columns]
                            + [c for c in backlog.columns if c not in order]),
             "idle_backlog", name="idle-backlog", title="Idle backlog by cause")

st.subheader("By pool and accelerator")
by_pool = ctx.view("idle_by_pool")
common.chart(charts.idle_by_pool(by_pool, "gpu_hours", cur), "idle_by_pool", name="idle-by-pool")
box = common.lazy_expander("Table: idle by pool, accelerator and cause", "idle_by_pool_open")
if box.open:
    with box:
        common.table(by_pool, "idle_by_pool_table", name="idle-by-pool", title="Idle by pool, accelerator and cause")

if picked:
    kind, cause = picked.split(":", 1)
    st.subheader(f"Behind {common.md(labels.cause_kind(cause, kind))}")
    cards = ctx.view("idle_cards", cause, kind)
    card_names = ctx.raw("card_label")
    st.caption(f"{cards.height} cards · {cards['gpu_hours'].sum():,.1f} idle GPU-hours · "
               f"{cards['cost'].sum():,.2f} {cur}. Select a card for its telemetry.")
    state = common.table(cards, f"idle_cards_{cause}_{kind}", name=f"idle-cards-{cause}", on_select="rerun",
                         selection_mode="single-row", title=f"Cards behind {labels.cause(cause)}")
    i = common.selected_row(state)
    if i is not None and i < cards.height and cards["gpu_id"][i] != qp.get("gpu"):
        common.set_page_params(**page_params(gpu=cards["gpu_id"][i]))
        st.rerun()
    if kind == "allocated":
        owners = ctx.view("cause_owners", cause, kind)
        st.markdown("**Owners behind this cause**")
        st.caption("Who held the cards while they idled for this cause; open an owner on the Rankings page "
                   "(its jobs, models and records), or list only its allocations below.")
        common.table(
            owners.with_columns(
                pl.Series("rankings", [ctx.link("rankings", level="project", tenant=r["tenant"], project=r["project"])
                                       for r in owners.iter_rows(named=True)], dtype=pl.String),
                pl.Series("only", [ctx.link("idle", **page_params(owner=r["project"], gpu=None))
                                   for r in owners.iter_rows(named=True)], dtype=pl.String),
            ),
            f"idle_owners_{cause}", name=f"idle-owners-{cause}", title=f"Owners behind {labels.cause(cause)}",
            column_config={"rankings": st.column_config.LinkColumn("Rankings", display_text="open the owner ›"),
                           "only": st.column_config.LinkColumn("Allocations", display_text="only this owner ›")},
        )
        allocs = ctx.view("idle_allocations", cause, kind)
        owner = qp.get("owner")
        if owner:
            allocs = allocs.filter(pl.col("project") == owner)
            st.markdown(f"**Allocations of {common.md(owner)} behind this cause**")
            st.button("Show every owner's allocations", type="tertiary",
                      on_click=lambda: common.set_page_params(**page_params(owner=None)))
        else:
            st.markdown("**Allocations behind this cause**")
        common.table(allocs, f"idle_allocs_{cause}", name=f"idle-allocations-{cause}",
                     title=f"Allocations behind {labels.cause(cause)}")

    st.subheader("Card telemetry")
    ids = cards["gpu_id"].to_list()
    gpu = qp.get("gpu")
    if gpu not in ids:
        gpu = ids[0] if ids else None
    if gpu:
        chosen = st.selectbox("Card", ids, index=ids.index(gpu), format_func=lambda g: card_names.get(g, g),
                              key=f"card_{cause}_{kind}_{gpu}")
        if chosen != gpu:
            common.set_page_params(**page_params(gpu=chosen))
            st.rerun()
        timeline = ctx.raw("card_timeline", gpu)
        allocations = ctx.raw("card_allocations", gpu)
        common.chart(charts.card_timeline(timeline, allocations, card_names.get(gpu, gpu), ctx.timezone),
                     "card_timeline", name=f"telemetry-{gpu}")
        if allocations.height:
            common.table(allocations, "card_allocations", name=f"allocations-{gpu}", title=f"Allocations on {gpu}")
else:
    st.caption("Pick a cause above to list the cards, allocations and owners behind it and a card's telemetry.")
