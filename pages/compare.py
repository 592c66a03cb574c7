"""Compare: why the cost changed between two periods — effects that add up exactly to the change,
a waterfall from the base total to the new one, a drill-down per owner, and the records behind it.

State lives in the URL (shareable, reopens at the same place):
    ?base=YYYY-MM-DD..YYYY-MM-DD&new=YYYY-MM-DD..YYYY-MM-DD&by=tenant|project|model|pool
     [&owner=KEY][&effect=EFFECT][&within=pool P · ACCELERATOR|model M][&table=allocations|requests|costs][&page=N]
"""

from __future__ import annotations

from datetime import date

import polars as pl
import streamlit as st

from cost_engine import charts, compare, diff, views
from pages import common

ctx = common.context()
qp = st.query_params
ss = st.session_state
ss.setdefault("cmp_nonce", 0)
nonce = ss["cmp_nonce"]
cur = ctx.currency
TABLES = {"allocations": "Allocations", "requests": "Requests", "costs": "Cost rows"}
PAGE_SIZE = 25
ALL = "(all)"

st.title("Compare")
st.caption(f"boundary **{ctx.config.boundary.name}** · {cur} · {ctx.filters.describe()} · days in "
           f"{ctx.timezone}; the two periods are chosen here (the sidebar's period does not apply)")


def nav(**params: object) -> None:
    """New query parameters and fresh widgets (no stale selection)."""
    ss["cmp_nonce"] = ss.get("cmp_nonce", 0) + 1
    qp.from_dict({k: str(v) for k, v in params.items() if v not in (None, "")})


def _days(text: str | None, default: tuple[date, date], first: date, last: date) -> tuple[date, date]:
    try:
        a, b = (date.fromisoformat(p) for p in (text or "").split(".."))
    except ValueError:
        return default
    a, b = max(a, first), min(b, last)
    return (a, b) if a <= b else default


@st.cache_data(show_spinner="Computing both periods…", max_entries=32)
def _diff(path: str, version: str, cfg_a: str, cfg_b: str, filters_json: str, by: str) -> diff.Diff:
    a, b = common._computation(path, version, cfg_a), common._computation(path, version, cfg_b)
    return compare.compare_periods(a, b, views.Filters.model_validate_json(filters_json), by)


@st.cache_data(show_spinner=False, max_entries=64)
def _records(path: str, version: str, cfg_a: str, cfg_b: str, filters_json: str, by: str, key: str, table: str,
             page: int, pool: str | None, accelerator: str | None,
             model: str | None) -> tuple[views.RecordsPage, views.RecordsPage]:
    a, b = common._computation(path, version, cfg_a), common._computation(path, version, cfg_b)
    return compare.compare_records(a, b, views.Filters.model_validate_json(filters_json), path, by=by, key=key,
                                   table=table, page=page, page_size=PAGE_SIZE,
                                   scope={"pool": pool, "accelerator": accelerator, "model": model})


# ---- the two periods and the dimension ------------------------------------------------------
full = common.computation(ctx.base_config)
first, last = views.period_days(full)
default_base, default_new = compare.default_days(full)
base_days = _days(qp.get("base"), default_base, first, last)
# `new`, not `period`: the sidebar keeps its own period preset under `period` in the same URL.
new_days = _days(qp.get("new"), default_new, first, last)
by = qp.get("by", "tenant")
by = by if by in diff.BY else "tenant"
owner = qp.get("owner")
state = {"base": f"{base_days[0]}..{base_days[1]}", "new": f"{new_days[0]}..{new_days[1]}", "by": by}

def _pick_days(name: str, key: str) -> None:
    v = ss.get(key)
    if isinstance(v, (list, tuple)) and len(v) == 2:  # a range is complete once both ends are picked
        nav(**{**state, name: f"{v[0]}..{v[1]}"})


def _pick_by(key: str) -> None:
    nav(**{**state, "by": ss.get(key) or by})  # another dimension starts at the top: no owner


# Widget keys carry the state they show, so a URL opened or changed elsewhere gets fresh widgets.
tag = f"{state['base']}_{state['new']}_{by}_{nonce}"
c1, c2, c3 = st.columns([2, 2, 3])
c1.date_input("Base period", value=base_days, min_value=first, max_value=last, key=f"cmp_base_{tag}",
              on_change=_pick_days, args=("base", f"cmp_base_{tag}"))
c2.date_input("Period", value=new_days, min_value=first, max_value=last, key=f"cmp_period_{tag}",
              on_change=_pick_days, args=("new", f"cmp_period_{tag}"))
c3.segmented_control("Split by", list(diff.BY), default=by, required=True, key=f"cmp_by_{tag}",
                     format_func=lambda b: b.capitalize(), on_change=_pick_by, args=(f"cmp_by_{tag}",))
if base_days == new_days:
    st.info("The two periods are the same days: pick a different base period or period to see a change.")

cfg_a = compare.period_config(ctx.config, compare.day_span(full, base_days)).model_dump_json()
cfg_b = compare.period_config(ctx.config, compare.day_span(full, new_days)).model_dump_json()
d = _diff(ctx.path, ctx.version, cfg_a, cfg_b, ctx.filters.key(), by)
base_name = f"base {base_days[0]:%d %b}–{base_days[1]:%d %b}"
new_name = f"period {new_days[0]:%d %b}–{new_days[1]:%d %b}"

m = st.columns(4)
m[0].metric(f"Base total ({cur})", common.fmt(d.base_total, cur), border=True,
            help=f"{base_days[0]} to {base_days[1]} (both included). Exact: {d.base_total:,.6f}.")
m[1].metric(f"Period total ({cur})", common.fmt(d.new_total, cur), border=True,
            help=f"{new_days[0]} to {new_days[1]} (both included). Exact: {d.new_total:,.6f}.")
m[2].metric(f"Change ({cur})", f"{d.change:+,.2f}", border=True,
            delta=None if not d.base_total else f"{d.change / d.base_total:+.1%}", delta_color="inverse",
            help="Period total - base total; the effects below add up to it.")
m[3].metric("Residual", f"{d.residual:.1e}", border=True,
            help=f"Change - sum of the effects: 0 to rounding. Method: {d.method}.")

effect_rows = compare.effect_summary(d)
common.chart(charts.waterfall(effect_rows, d.base_total, d.new_total, cur, base_name, new_name),
             "compare_waterfall", name="why-the-cost-changed")
for note in d.notes:
    st.info(common.md(note))
st.caption("Each effect is what one factor's change moved, with the others in between both periods (LMDI: "
           "docs/engine.md). Effects of 0 are hidden in the chart, and its value axis starts near the smaller "
           "total, not at 0.")
effect_table = effect_rows.filter(
    pl.col("value").is_null() | (pl.col("value").abs() > 1e-9) | pl.col("note").is_not_null()
).select("label", pl.col("value").alias("cost_change"), pl.col("mainly").fill_null(""), pl.col("note").fill_null(""))
common.table(effect_table, "compare_effects", name="compare-effects",
             column_config=common.money_columns(effect_table, ["cost_change"]))

# ---- per owner ------------------------------------------------------------------------------
st.subheader(f"By {by}")
st.caption(f"Select a {by} to see why its cost changed and the records behind it.")
keys = d.effects["effect"].to_list()
shown_effects = [k for k in keys if d.owners[k].drop_nulls().abs().sum() > 1e-9 or d.owners[k].null_count()]
cols = ["key", *(["tenant"] if by == "project" else []), "status", "base_cost", "new_cost", "change", *shown_effects]
owners = d.owners.filter(pl.col("kind") == "owner")
owner_table = owners.select(cols).rename({"key": by, "change": "cost_change"})
sel = common.table(owner_table, f"compare_owners_{by}_{nonce}", name=f"compare-by-{by}", on_select="rerun",
                   selection_mode="single-row",
                   column_config=common.money_columns(owner_table, ["cost_change", *shown_effects]))
i = common.selected_row(sel)
if i is not None and i < owners.height:
    nav(**state, owner=owners.row(i, named=True)["key"])
    st.rerun()
lines = d.owners.filter(pl.col("kind") != "owner")
if lines.height:
    st.caption("Not any owner's: " + "; ".join(
        f"{r['kind']} {r['base_cost']:,.2f} → {r['new_cost']:,.2f} ({r['change']:+,.2f})"
        for r in lines.iter_rows(named=True)))

row = d.owner(owner) if owner else None
if owner and row is None:
    st.warning(f"No {by} {common.md(owner)} in either period (check the periods and the sidebar filters).")
if row is not None:
    st.subheader(common.md(f"Why {by} {owner} changed"))
    own = d.owner_effects(owner).with_columns(effect_rows["label"], effect_rows["short"])
    common.chart(charts.waterfall(own, row["base_cost"], row["new_cost"], cur, base_name, new_name,
                                  title=f"{charts.label(owner)}: why the cost changed ({charts.label(cur)})"),
                 "compare_owner_waterfall", name=f"why-{owner}-changed")
    st.button("Back to all", key=f"cmp_back_{nonce}", on_click=nav, kwargs=state, type="tertiary",
              icon=":material/arrow_back:")
    el = d.elements.filter(pl.col("key") == owner)
    el_effects = [k for k in keys if el[k].abs().sum() > 1e-9]
    st.markdown("**What carries each effect** (pool, accelerator and cost category for GPU time; model and token "
                "kind for serving)")
    el_table = el.select("chain", "pool", "accelerator", "category", "part", "model", "kind", "base_cost",
                         "new_cost", pl.col("change").alias("cost_change"), *el_effects)
    common.table(el_table, f"compare_elements_{nonce}", name=f"compare-{owner}-elements",
                 column_config=common.money_columns(el_table, ["cost_change", *el_effects]))
    # The records behind one effect, in both periods (the engine's lineage: views.records).
    nonzero = [k for k in keys if (row.get(k) or 0) != 0 and diff.EFFECT[k].records]
    if nonzero:
        effect = qp.get("effect")
        effect = effect if effect in nonzero else nonzero[0]
        c1, c2, c3 = st.columns([3, 3, 2])
        here = {**state, "owner": owner}
        scopes = compare.effect_scopes(d, owner, effect)
        within = qp.get("within")
        within = within if within in scopes["scope"].to_list() else None

        def _pick_effect(key: str) -> None:
            picked = ss.get(key) or effect
            nav(**here, effect=picked, table=diff.EFFECT[picked].records[0])

        def _pick_table(key: str) -> None:
            nav(**here, effect=effect, table=ss.get(key) or table, within=within)

        def _pick_within(key: str) -> None:
            picked = ss.get(key)
            nav(**here, effect=effect, table=table, within=None if picked == ALL else picked)

        c1.selectbox("Records behind the effect", nonzero, index=nonzero.index(effect),
                     format_func=lambda k: compare.effect_label(k, by), key=f"cmp_effect_{nonce}",
                     on_change=_pick_effect, args=(f"cmp_effect_{nonce}",))
        # Where the effect sits (a pool and accelerator, or a model): its records only.
        values = dict(zip(scopes["scope"].to_list(), scopes["value"].to_list()))
        options = [ALL, *values]
        c2.selectbox("Within", options, index=options.index(within or ALL), key=f"cmp_within_{nonce}",
                     format_func=lambda s: f"all of {owner}" if s == ALL else f"{s} ({values[s]:+,.2f})",
                     on_change=_pick_within, args=(f"cmp_within_{nonce}",),
                     help="The pool and accelerator (GPU time) or the model (serving) carrying the effect: "
                          "narrow the records to it.")
        tables = list(diff.EFFECT[effect].records)
        table = qp.get("table")
        table = table if table in tables else tables[0]
        c3.segmented_control("Records", tables, default=table, format_func=TABLES.get, required=True,
                             key=f"cmp_table_{nonce}", on_change=_pick_table, args=(f"cmp_table_{nonce}",))
        page_no = max(0, int(qp.get("page", "1")) - 1) if qp.get("page", "1").isdigit() else 0
        scope = scopes.filter(pl.col("scope") == within).row(0, named=True) if within else None
        pb, pn = _records(ctx.path, ctx.version, cfg_a, cfg_b, ctx.filters.key(), by, owner, table, page_no,
                          scope["pool"] if scope else None, scope["accelerator"] if scope else None,
                          scope["model"] if scope else None)
        left, right = st.columns(2)
        for col, p, title in ((left, pb, "Base period"), (right, pn, "Period")):
            with col:
                st.markdown(f"**{title}**: {p.total:,} {TABLES[table].lower()} · page {p.page + 1} of {p.pages}")
                if p.total:
                    common.table(p.rows, f"cmp_rec_{title}_{table}_{p.page}_{nonce}",
                                 name=f"{table}-{owner}-{title.lower().replace(' ', '-')}-page{p.page + 1}")
                else:
                    st.caption("none")
        pages = max(pb.pages, pn.pages)
        base_q = {**state, "owner": owner, "effect": effect, "table": table, "within": within}
        prev_col, next_col, _ = st.columns([1, 1, 6])
        prev_col.button("Previous", key=f"cmp_prev_{nonce}", disabled=page_no == 0, icon=":material/chevron_left:",
                        on_click=nav, kwargs={**base_q, "page": page_no})
        next_col.button("Next", key=f"cmp_next_{nonce}", disabled=page_no + 1 >= pages,
                        icon=":material/chevron_right:", on_click=nav, kwargs={**base_q, "page": page_no + 2})
