"""Overview: the report's totals, tenant spend and the reconciliation on one screen."""

import polars as pl
import streamlit as st

from pages.common import report, source_path

rep = report()
t, cur = rep["totals"], rep["period"]["currency"]
st.title("Overview")
st.caption(f"{source_path()} · {rep['period']['start']} – {rep['period']['end']} ({rep['period']['timezone']}) · "
           f"boundary {rep['boundary']['name']}")


def fmt(v, spec=",.1f", suffix=""):
    return "–" if v is None else f"{v:{spec}}{suffix}"


c = st.columns(4)
c[0].metric("Available GPU-hours", fmt(t["available_gpu_hours"]))
c[1].metric("Allocated GPU-hours", fmt(t["allocated_gpu_hours"]))
c[2].metric("Active GPU-hours", fmt(t["active_gpu_hours"]))
c[3].metric("Idle rate", fmt(None if t["idle_rate"] is None else 100 * t["idle_rate"], ".1f", " %"))
c = st.columns(4)
c[0].metric(f"Cost ({cur})", fmt(t["cost"], ",.2f"))
c[1].metric("Cost per GPU-hour", fmt(t["cost_per_gpu_hour"], ",.3f"))
c[2].metric("Cost per 1M tokens", fmt(t["cost_per_million_tokens"], ",.3f"))
c[3].metric("Energy (kWh, GPU)", fmt(t["energy_kwh_gpu"], ",.1f"))

st.subheader("Spend by tenant")
st.dataframe(pl.DataFrame(rep["by_tenant"]).head(10), hide_index=True)
st.subheader("Reconciliation")
st.dataframe(pl.DataFrame([rep["reconciliation"]]), hide_index=True)
