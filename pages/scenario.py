"""Scenario planner page: cloud API vs rented vs owned GPUs; layout only, every figure comes from cost_engine.scenario."""

from __future__ import annotations

import hashlib
from pathlib import Path

import plotly.graph_objects as go
import streamlit as st

from cost_engine import charts, labels
from cost_engine import scenario as sl
from pages import common

common.through_router()  # a first request straight to /scenario still gets the router and sidebar

DEFAULT_SCENARIO = Path(__file__).resolve().parent.parent / "sample_data" / "scenario.toml"

st.title("Scenario planner")
st.caption(
    "One workload priced as a hosted API, rented GPUs, owned GPUs (new or secondary) and hybrids: "
    "$ per 1M tokens, monthly cost by TCO category, sensitivity and break-even. See docs/scenario.md."
)

uploaded = st.file_uploader("Scenario TOML (default: sample_data/scenario.toml)", type=["toml"])
if uploaded is not None:
    text, source = uploaded.getvalue().decode("utf-8"), uploaded.name
else:
    text, source = DEFAULT_SCENARIO.read_text(encoding="utf-8"), DEFAULT_SCENARIO.name
try:
    loaded = sl.parse_scenario_text(text, source)
except sl.ScenarioError as exc:
    st.error(str(exc))
    st.stop()
calibrated = st.toggle(
    "Calibrate from my fleet",
    help="Fill throughput, utilization, power, prices and monthly volumes from the open source's measured figures.",
)
if calibrated:
    from cost_engine.calibration import calibrate_from_report

    loaded, filled = calibrate_from_report(loaded, common.report())
    st.caption("Measured figures used, and where each came from:")
    common.table(filled, "scenario_calibration", about=[("scenario", source)], title="Calibration from the fleet")
tag = hashlib.sha1((text + str(calibrated)).encode("utf-8")).hexdigest()[:10]

# ---- Inputs ---------------------------------------------------------------
st.subheader(f"Inputs: {loaded.name}")
# A section's inputs are drawn only while it is open (most of the page's drawing otherwise). The
# values last submitted live in `kept`, not in the widgets: Streamlit forgets the state of a
# widget that is not drawn, and a closed section must keep its edits.
kept: dict[str, float | int] = st.session_state.setdefault(f"scenario-edits-{tag}", {})
edits: dict[str, dict[str, float | int]] = {}
with st.form(f"scenario-inputs-{tag}"):
    for section, fields in sl.editable_numbers(loaded).items():
        box = common.lazy_expander(section, f"{tag}:open:{section}", expanded=section == "workload")
        edits[section] = {field: kept.get(f"{section}:{field}", value) for field, value in fields.items()}
        if not box.open:
            continue
        with box:
            cols = st.columns(3)
            for i, field in enumerate(fields):
                key, value = f"{tag}:{section}:{field}", edits[section][field]
                with cols[i % 3]:
                    text = labels.humanize(field)
                    if sl.is_integer_field(field):
                        edits[section][field] = int(st.number_input(text, value=int(value), step=1, key=key,
                                                                    help=f"`{field}` in the TOML"))
                    else:
                        edits[section][field] = float(st.number_input(text, value=float(value), format="%g", key=key,
                                                                      help=f"`{field}` in the TOML"))
            kept.update({f"{section}:{field}": v for field, v in edits[section].items()})
    st.form_submit_button("Recalculate")

try:
    scenario = sl.apply_edits(loaded, edits)
except sl.ScenarioError as exc:
    st.error(f"{exc} (showing the file's values)")
    scenario = loaded

summary = sl.workload_summary(scenario)
about = [("scenario", loaded.name), ("file", source), ("currency", scenario.currency)]
g = common.metric_grid(4, "scenario_metrics")
g.metric("Tokens / month", labels.compact(summary["tokens_per_month"]), border=True,
         help=f"Exact: {summary['tokens_per_month']:,.0f} tokens.")
g.metric("Output tokens/s (avg / peak)",
         f"{summary['avg_output_tokens_per_s']:,.0f} / {summary['peak_output_tokens_per_s']:,.0f}", border=True)
g.metric("Peak to average", f"{summary['peak_to_average']:.2f}x", border=True)
g.metric("Horizon", f"{summary['months']} months, {summary['growth_per_month']:.1%}/month", border=True)

# ---- Results --------------------------------------------------------------
results = sl.evaluate(scenario)
frame = sl.results_frame(results)
st.subheader("Results (first month)")
common.table(frame, "scenario_results", name="scenario-results", about=about, title="Scenario results (first month)")

names = [r.name for r in results]
# Option names and the currency come from the scenario file: chart text escaped (charts.label),
# so an exported SVG or HTML shows them as written, never as a live link.
shown, cur = charts.labels(names), charts.label(scenario.currency)
bar = go.Figure(
    go.Bar(
        x=shown,
        y=[r.cost_per_million_tokens for r in results],
        text=[f"{r.cost_per_million_tokens:.4f}" if r.cost_per_million_tokens is not None else "" for r in results],
        name="$ / 1M tokens",
    )
)
bar.update_layout(title=f"Cost per 1M tokens, blended ({cur})",
                  yaxis_title=f"{cur} per 1M tokens", height=380)
common.chart(bar, "scenario_bar", name="scenario-cost-per-million", about=about)

stack = go.Figure(
    [go.Bar(x=shown, y=[r.breakdown[cat] for r in results], name=labels.humanize(cat)) for cat in sl.CATEGORIES]
)
stack.update_layout(barmode="stack", title=f"Monthly cost by TCO category ({cur})",
                    yaxis={"title": f"Cost per month ({cur})", "tickformat": ",.0f"}, height=380)
common.chart(stack, "scenario_stack", name="scenario-monthly-cost", about=about)

notes = [f"**{r.name}**: {n}" for r in results for n in r.notes]
if notes:
    with st.expander("Notes"):
        st.markdown("\n".join(f"- {n}" for n in notes))

# ---- Sensitivity ----------------------------------------------------------
st.subheader("Sensitivity")
param = st.selectbox(
    "Parameter",
    list(sl.SWEEP_PARAMETERS),
    format_func=lambda p: f"{labels.humanize(p)}: {sl.SWEEP_PARAMETERS[p]}",
    key="scenario-sweep-param",
)
try:
    swept = sl.sweep(scenario, param, sl.default_sweep_values(scenario, param))
except sl.ScenarioError as exc:
    st.error(str(exc))
else:
    metric = "horizon_cost_per_million_tokens" if param == "growth" else "cost_per_million_tokens"
    lines = go.Figure()
    for name, part in swept.partition_by("option", as_dict=True, maintain_order=True).items():
        lines.add_trace(
            go.Scatter(x=part["value"].to_list(), y=part[metric].to_list(), mode="lines+markers",
                       name=charts.label(name[0]))
        )
    lines.update_layout(title=f"{charts.label(labels.column(metric, scenario.currency))} by "
                              f"{labels.humanize(param).lower()}",
                        xaxis_title=labels.humanize(param), yaxis_title=charts.label(labels.column(metric, scenario.currency)),
                        height=400)
    common.chart(lines, "scenario_sweep", name=f"scenario-sweep-{param}", about=about)
    box = common.lazy_expander("Sweep table", "scenario-sweep-table-open")
    if box.open:
        with box:
            common.table(swept, "scenario_sweep_table", name=f"scenario-sweep-{param}", about=about,
                         title=f"Sweep of {labels.humanize(param).lower()}")

# ---- Break-even -----------------------------------------------------------
st.subheader("Break-even")
if len(names) >= 2:
    ca, cb = st.columns(2)
    a = ca.selectbox("Option A", names, index=0, key="scenario-be-a")
    b = cb.selectbox("Option B", names, index=min(len(names) - 1, 2), key="scenario-be-b")
    if a == b:
        st.info("Pick two different options.")
    else:
        be = sl.break_even(scenario, a, b)
        m1, m2 = st.columns(2)
        if be.volume_tokens is not None:
            m1.metric("Break-even volume (tokens/month)", labels.compact(be.volume_tokens),
                      f"{be.volume_scale:.3g}x scenario", help=f"Exact: {be.volume_tokens:,.0f} tokens per month.")
            m1.caption(
                f"{be.cheaper_below} cheaper below, {be.cheaper_above} above; monthly cost there: "
                f"{a} {be.monthly_cost_a:,.0f}, {b} {be.monthly_cost_b:,.0f}"
                + (" (costs swap at a card step)" if be.at_card_step else "")
            )
        else:
            m1.metric("Break-even volume", "none")
            m1.caption(be.volume_reason or "")
        if be.month is not None:
            m2.metric("Cumulative costs cross in month", str(be.month))
            m2.caption(
                f"cumulative cash then: {a} {be.cumulative_a:,.0f}, {b} {be.cumulative_b:,.0f}; "
                f"{be.cheaper_before} cheaper before"
            )
        else:
            m2.metric("Cumulative costs cross", "never")
            m2.caption(be.month_reason or "")
        cum = sl.cumulative_costs(scenario, [a, b])
        fig = go.Figure()
        for name, part in cum.partition_by("option", as_dict=True, maintain_order=True).items():
            fig.add_trace(go.Scatter(x=part["month"].to_list(), y=part["cumulative_cash"].to_list(),
                                     name=charts.label(name[0])))
        fig.update_layout(title="Cumulative cash (capex when bought, residual at end of life)", xaxis_title="month",
                          yaxis={"title": f"Cumulative cash ({cur})", "tickformat": ",.0f"}, height=380)
        common.chart(fig, "scenario_cumulative", name="scenario-cumulative-cash", about=about)
else:
    st.info("Break-even needs at least two options.")
