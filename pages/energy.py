"""Energy: GPU and facility kWh, energy cost under the tariff, power against a site cap,
tokens per joule by model, and CO2e where the tariffs carry a carbon intensity."""

from __future__ import annotations

import math

import streamlit as st

from cost_engine import charts, views
from pages import common

ctx = common.context()
common.header(ctx, "Energy")
cur = ctx.currency

e = ctx.view("energy_totals")
c = st.columns(3)
c[0].metric("GPU energy (kWh)", common.fmt(e["energy_kwh_gpu"], "kWh"), border=True, help="Measured at the cards.")
c[1].metric("Facility energy (kWh)", common.fmt(e["energy_kwh_facility"], "kWh"), border=True, help=e["method"])
c[2].metric(f"Energy cost ({cur})", common.fmt(e["energy_cost"], cur), border=True,
            help="The power category: measured facility kWh x the tariff in force, or a power cost row spread by energy.")
c = st.columns(3)
c[0].metric("Average GPU power (kW)", "—" if e["avg_power_w"] is None else f"{e['avg_power_w'] / 1000:,.2f}",
            border=True)
c[1].metric("CO2e (kg)", "—" if e["carbon_kg"] is None else f"{e['carbon_kg']:,.1f}", border=True,
            help="Facility kWh x the tariff's carbon_g_per_kwh; '—' when the tariffs carry none.")
c[2].metric("Output tokens per joule", common.fmt(e["output_tokens_per_joule"], "tokens/J"), border=True,
            help="Output tokens / GPU joules of the allocations that served them.")

daily = ctx.view("energy_daily")
common.chart(charts.energy_daily(daily, cur, ctx.timezone), "energy_daily", name="energy-by-day")

st.subheader("Power against a site cap")
every = st.segmented_control("Bucket", ["15m", "1h", "1d"], default="1h", required=True, key="power_every") or "1h"
peak = ctx.view("power_profile", None, every)
peak_kw = float(peak["facility_kw"].max()) if peak.height else 0.0
default_cap = float(max(1, math.ceil(peak_kw * 0.9))) if peak_kw else 10.0
cap = st.number_input("Site cap (facility kW)", min_value=0.0, value=default_cap, step=1.0, key="site_cap_kw",
                      help="Default: 90 % of the peak, rounded up, so the chart shows where the fleet would hit it.")
profile = ctx.view("power_profile", cap, every)
summary = views.power_cap_summary(profile, every)
c = st.columns(4)
c[0].metric("Peak facility power", "—" if summary["peak_kw"] is None else f"{summary['peak_kw']:,.1f} kW", border=True)
c[1].metric("Mean facility power", "—" if summary["mean_kw"] is None else f"{summary['mean_kw']:,.1f} kW", border=True)
c[2].metric("Hours over the cap", f"{summary['hours_over_cap']:,.2f} h", border=True)
c[3].metric("Energy above the cap", f"{summary['kwh_over_cap']:,.1f} kWh", border=True)
common.chart(charts.power_vs_cap(profile, ctx.timezone), "power_vs_cap", name="power-vs-cap")

left, right = st.columns(2)
with left:
    st.subheader("Tokens per joule by model")
    models = ctx.view("model_energy")
    common.chart(charts.tokens_per_joule(models), "tokens_per_joule", name="tokens-per-joule")
    common.table(models, "model_energy", name="model-energy")
with right:
    st.subheader("CO2e")
    common.chart(charts.co2e_daily(daily, ctx.timezone), "co2e_daily", name="co2e-by-day")
    common.table(daily, "energy_daily_table", name="energy-by-day")
