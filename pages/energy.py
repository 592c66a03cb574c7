"""Energy: GPU and facility kWh, energy cost under the tariff, power against a site cap,
tokens per joule by model, and CO2e where the tariffs carry a carbon intensity."""

from __future__ import annotations

import math

import streamlit as st

from cost_engine import charts, period_views, views
from pages import common

ctx = common.context()
common.header(ctx, "Energy")
cur = ctx.currency

e = ctx.view("energy_totals")
g = common.metric_grid(3, "energy_metrics")
g.metric("GPU energy (kWh)", common.fmt(e["energy_kwh_gpu"], "kWh"), border=True, help="Measured at the cards.")
g.metric("Facility energy (kWh)", common.fmt(e["energy_kwh_facility"], "kWh"), border=True, help=e["method"])
g.metric(f"Energy cost ({cur})", common.fmt(e["energy_cost"], cur), border=True,
         help="The power category: measured facility kWh x the tariff in force, or a power cost row spread by energy.")
g.metric("Average GPU power (kW)", "—" if e["avg_power_w"] is None else f"{e['avg_power_w'] / 1000:,.2f}",
         border=True)
g.metric("CO2e (kg)", "—" if e["carbon_kg"] is None else f"{e['carbon_kg']:,.1f}", border=True,
         help="Facility kWh x the tariff's carbon_g_per_kwh; '—' when the tariffs carry none.")
g.metric("Output tokens per joule", common.fmt(e["output_tokens_per_joule"], "tokens/J"), border=True,
         help="Output tokens / GPU joules of the allocations that served them.")

qp = st.query_params


def page_params(**changes: object) -> dict:
    keep = {k: qp.get(k) for k in ("power", "cap") if qp.get(k)}
    keep.update(changes)
    return keep


daily = ctx.view("energy_buckets", ctx.grain)
common.chart(charts.energy_daily(daily, cur, ctx.timezone, ctx.grain), "energy_daily", name=f"energy-by-{ctx.grain}")
note = period_views.partial_note(daily)
if note:
    st.caption(note)

st.subheader("Power against a site cap")
# Bucket and cap live in the URL (?power=15m&cap=12), so a link shows the same chart.
every = qp.get("power") if qp.get("power") in ("15m", "1h", "1d") else "1h"
st.session_state["power_every"] = every
st.segmented_control("Bucket", ["15m", "1h", "1d"], required=True, key="power_every",
                     on_change=lambda: common.set_page_params(**page_params(power=st.session_state["power_every"])))
peak = ctx.view("power_profile", None, every)
peak_kw = float(peak["facility_kw"].max()) if peak.height else 0.0
default_cap = float(max(1, math.ceil(peak_kw * 0.9))) if peak_kw else 10.0
try:
    cap = float(qp.get("cap") or default_cap)
except ValueError:
    cap = default_cap
cap = cap if math.isfinite(cap) and cap >= 0 else default_cap
st.session_state["site_cap_kw"] = cap
st.number_input("Site cap (facility kW)", min_value=0.0, step=1.0, key="site_cap_kw",
                on_change=lambda: common.set_page_params(**page_params(cap=repr(float(st.session_state["site_cap_kw"])))),
                help="Default: 90 % of the peak, rounded up, so the chart shows where the fleet would hit it.")
profile = ctx.view("power_profile", cap, every)
summary = views.power_cap_summary(profile, every)
g = common.metric_grid(4, "power_metrics")
g.metric("Peak facility power", "—" if summary["peak_kw"] is None else f"{summary['peak_kw']:,.1f} kW", border=True)
g.metric("Mean facility power", "—" if summary["mean_kw"] is None else f"{summary['mean_kw']:,.1f} kW", border=True)
g.metric("Hours over the cap", f"{summary['hours_over_cap']:,.2f} h", border=True)
g.metric("Energy above the cap", f"{summary['kwh_over_cap']:,.1f} kWh", border=True)
common.chart(charts.power_vs_cap(profile, ctx.timezone), "power_vs_cap", name="power-vs-cap")

grid = st.grid(2, min_column_width=420, key="energy_models")
with grid.cell():
    st.subheader("Tokens per joule by model")
    models = ctx.view("model_energy")
    common.chart(charts.tokens_per_joule(models), "tokens_per_joule", name="tokens-per-joule")
    common.table(models, "model_energy", name="model-energy", title="Energy and tokens per joule by model")
with grid.cell():
    st.subheader("CO2e")
    common.chart(charts.co2e_daily(daily, ctx.timezone, ctx.grain), "co2e_daily", name=f"co2e-by-{ctx.grain}")
    common.table(daily, "energy_daily_table", name=f"energy-by-{ctx.grain}", title=f"Energy by {ctx.grain}")
