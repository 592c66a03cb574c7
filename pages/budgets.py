"""Budgets: each budget's booked, committed and forecast cost, its burn-down with the forecast's
interval bands, the alerts of the config's [alerts], the burn rate right now, and (for
administrators) the budgets table to edit."""

from zoneinfo import ZoneInfo

import polars as pl
import streamlit as st

from cost_engine import budgets, charts, uploads
from cost_engine.access import AccessError
from pages import common

ss = st.session_state
ctx = common.context()
st.title("Budgets")
b = common.budget_views(ctx)
status: pl.DataFrame = b["status"]
base = common.base_computation(ctx)
tz, cur = base.period.timezone, base.period.currency
st.caption(
    f"As of **{b['as_of'].astimezone(ZoneInfo(tz)):%Y-%m-%d %H:%M}** ({tz}) · "
    f"{cur} · the source's own rules and all its data (the sidebar's period, boundary and filters do not apply "
    "to budgets). Forecast: docs/budgets.md."
)

alerts: pl.DataFrame = b["alerts"]
firing = alerts.filter(pl.col("state") == "firing")
cols = st.columns(4)
cols[0].metric("Budgets in force", f"{status.height}", border=True,
               help="Rows the budgets file had but validation refused count too, as unknown.")
cols[1].metric("Over budget (projected)", f"{status.filter(pl.col('status') == 'over').height}", border=True)
cols[2].metric("At risk (80 % interval)", f"{status.filter(pl.col('status') == 'at risk').height}", border=True)
cols[3].metric("Alerts firing", f"{firing.height}", border=True)

st.subheader("Budgets")
if status.height == 0:
    st.info("No budget in force at the report time." + (" Not in force: " + ", ".join(b["inactive"]) if b["inactive"]
                                                         else " Add one below (administrators) or as a budgets file."))
else:
    said = pl.struct("status", "note").map_elements(lambda r: budgets.status_text(r["status"], r["note"]),
                                                    return_dtype=pl.String)
    shown = status.select(
        "budget_id", said.alias("status"), "level", "owner", "period_kind",
        pl.col("window_start").dt.convert_time_zone(tz).dt.date().alias("from"),
        (pl.col("window_end") - pl.duration(microseconds=1)).dt.convert_time_zone(tz).dt.date().alias("to"),
        "amount", "booked", "committed", "forecast", "projected", "lo80", "hi80", "lo95", "hi95",
        "projected_share", "model", "history_days", "days_left", "note",
    )
    money = {"amount": "amount", "booked": "booked", "committed": "committed", "forecast": "forecast",
             "projected": "projected", "lo80": "80 % low", "hi80": "80 % high", "lo95": "95 % low",
             "hi95": "95 % high"}
    common.table(shown, "budget_status", name="budgets", column_config={
        "projected_share": st.column_config.NumberColumn("of budget", format="percent"),
        **{c: st.column_config.NumberColumn(name, format="%.2f") for c, name in money.items()},
        "days_left": st.column_config.NumberColumn("days to forecast", format="%.1f"),
        "history_days": st.column_config.NumberColumn("history days"),
    })

    st.subheader("Burn-down")
    # A row validation refused has no span to draw: the table above says why.
    drawn = status.filter(pl.col("window_start").is_not_null())
    ids = drawn["budget_id"].to_list()
    label = {r["budget_id"]: f"{r['budget_id']} · {r['level']} {r['owner']} · {r['status']}"
             for r in drawn.iter_rows(named=True)}
    if drawn.height == 0:
        st.caption("No budget with a span to draw.")
    else:
        chosen = st.selectbox("Budget", ids, format_func=lambda i: label[i], key="burndown_budget")
        row = status.filter(pl.col("budget_id") == chosen).row(0, named=True)
        path = b["path"].filter(pl.col("budget_id") == chosen)
        common.chart(charts.budget_burndown(path, row["amount"], f"{row['budget_id']} ({row['owner']})", cur, tz),
                     "budget_burndown", name=f"burndown-{chosen}")
        if row["projected"] is not None:
            st.caption(common.md(
                f"Projected {row['projected']:,.2f} of {row['amount']:,.2f} {cur}: booked {row['booked']:,.2f} + "
                f"the larger of forecast {row['forecast']:,.2f} and committed {row['committed']:,.2f}. Model: {row['model']} on "
                f"{row['history_days']} days of history; {row['days_left']:.1f} days forecast."))
        else:
            st.warning(common.md(f"Unknown: {row['note']}"))

st.subheader("Alerts")
if alerts.height == 0:
    st.caption("No rule in [alerts] applies (budgets' forecast check is on by default; see docs/budgets.md).")
else:
    common.table(alerts.select("state", "rule", "subject", "value", "threshold", "unit", "message"), "alerts",
                 name="alerts", column_config={"value": st.column_config.NumberColumn("value", format="%.2f"),
                                               "threshold": st.column_config.NumberColumn("threshold", format="%.2f")})

st.subheader("Burn rate now")
st.caption(f"{cur} per hour of the allocations open at "
           f"{b['live_at'].astimezone(ZoneInfo(tz)):%Y-%m-%d %H:%M} ({tz}), priced at each pool's rate over the last "
           "7 days; the energy part from the cards' last power readings where the telemetry has them.")
common.table(b["burn"], "burn_rate", name="burn-rate", column_config={
    "cost_per_hour": st.column_config.NumberColumn(f"{cur}/h", format="%.2f"),
    "gpus": st.column_config.NumberColumn("GPUs held", format="%.2f"),
})

st.subheader("Edit budgets")
if not common.is_admin():
    st.caption("Budgets are set by administrators; you see the budgets of your tenants.")
else:
    current = base.bundle["budgets"]
    where = "the store (ingest with replace; a removed row stays stored: give it an end to retire it)" if ctx.is_store \
        else "the folder's budgets file"
    st.caption(f"One row per budget: a tenant or a project, month / quarter / custom (custom needs start and end, "
               f"UTC), amount, currency, an optional boundary preset and categories separated by ';'. Saved to {where}.")
    edited = st.data_editor(
        current, key=f"budget_editor_{ctx.version}", num_rows="dynamic", hide_index=True,
        column_config={
            "budget_id": st.column_config.TextColumn("budget_id", required=True),
            "period_kind": st.column_config.SelectboxColumn("period_kind", options=["month", "quarter", "custom"],
                                                            required=True),
            "amount": st.column_config.NumberColumn("amount", min_value=0.0, format="%.2f", required=True),
            "boundary": st.column_config.SelectboxColumn(
                "boundary", options=["energy_only", "narrow", "rental", "fully_loaded", "custom"]),
            "start": st.column_config.DatetimeColumn("start (UTC)", timezone="UTC"),
            "end": st.column_config.DatetimeColumn("end (UTC)", timezone="UTC"),
        },
    )
    if st.button("Save budgets", type="primary", key="save_budgets"):
        frame = edited if isinstance(edited, pl.DataFrame) else pl.from_pandas(edited)
        try:
            result = uploads.save_budgets(ctx.path, frame, current, principal=common.current_principal(),
                                          config=ctx.base_config)
        except (uploads.UploadError, AccessError, ValueError) as exc:
            st.error(common.md(f"Not saved: {exc}"))
        else:
            ss["budget_note"] = f"Saved {result.written} budget rows to {result.target}."
            st.rerun()
    if ss.get("budget_note"):
        st.success(common.md(ss.pop("budget_note")))
