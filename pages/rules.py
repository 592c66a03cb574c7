"""Rules: the cost boundary, drivers per category, idle treatment, activity rule, PUE and server
factor, SLO; saved as the TOML config; and the same owners under two rule sets side by side."""

from __future__ import annotations

import polars as pl
import streamlit as st

from cost_engine import charts, labels, view_state, views
from cost_engine.access import AccessError
from cost_engine.config import (BOUNDARY_PRESETS, MAX_FACTOR, MAX_PRICE_PER_KWH, MAX_SAMPLE_GAP_S, MAX_SLO_MS,
                                ConfigError, dump_config, parse_config)
from cost_engine.rules_file import rules_path, write_rules
from cost_engine.contract import CATEGORIES, DRIVERS
from pages import common

ctx = common.context()
common.header(ctx, "Rules")
ss = st.session_state
a = ctx.config  # rule set A: what the dashboard uses now
st.caption("Rule set **A** is what the dashboard uses now (the source's config with the sidebar's boundary and "
           "period). Edit rule set **B** below: the comparison shows the same owners under both.")

BOUNDARIES = [*BOUNDARY_PRESETS, "custom"]
defaults = {
    "r_boundary": a.boundary.name,
    "r_categories": list(a.boundary.included),
    "r_idle": a.allocation.idle,
    "r_recharge": a.allocation.inference_recharge,
    "r_split": a.allocation.token_split,
    "r_mode": a.activity.mode,
    "r_threshold": float(a.activity.threshold_pct),
    "r_gap": float(a.activity.max_sample_gap_s),
    "r_pue": float(a.energy.pue),
    "r_server": float(a.energy.server_overhead),
    "r_price": float(a.energy.flat_price_per_kwh),
    "r_ttft": float(a.slo.ttft_ms),
    "r_latency": float(a.slo.latency_ms),
}
for k, v in defaults.items():
    ss.setdefault(k, v)


def reset_b() -> None:
    for k, v in defaults.items():
        ss[k] = v
    ss["r_drivers_nonce"] = ss.get("r_drivers_nonce", 0) + 1


with st.container(border=True):
    st.markdown("**Rule set B**")
    c1, c2 = st.columns([1, 2])
    c1.radio("Boundary", BOUNDARIES, key="r_boundary", horizontal=False, help="energy_only = power; narrow = depreciation + power; "
             "rental = gpu_rental; fully_loaded = every category; custom = pick them.")
    if ss["r_boundary"] == "custom":
        c2.multiselect("Categories in the boundary", list(CATEGORIES), key="r_categories")
    else:
        c2.markdown("Categories: " + ", ".join(BOUNDARY_PRESETS[ss["r_boundary"]]))
    c1, c2, c3 = st.columns(3)
    c1.radio("Idle capacity", ["separate", "proportional"], key="r_idle", horizontal=True,
             help="separate: its own line, by cause; proportional: charged to each pool's owners by GPU-hours.")
    c2.radio("Inference recharge", ["tokens", "requests", "none"], key="r_recharge", horizontal=True,
             help="Move model cost onto the projects that sent the requests.")
    c3.radio("Input/output split", ["phase_time", "weights"], key="r_split", horizontal=True)
    c1, c2, c3 = st.columns(3)
    c1.radio("Activity rule", ["threshold", "weighted"], key="r_mode", horizontal=True)
    c2.number_input("Threshold (util %)", 0.0, 100.0, key="r_threshold", step=1.0)
    # The inputs' bounds are the config's own (cost_engine.config), so any valid config fits them.
    c3.number_input("Max sample gap (s)", 1.0, MAX_SAMPLE_GAP_S, key="r_gap", step=30.0)
    c1, c2, c3 = st.columns(3)
    c1.number_input("PUE", 1.0, MAX_FACTOR, key="r_pue", step=0.05)
    c2.number_input("Server overhead (GPU -> server)", 1.0, MAX_FACTOR, key="r_server", step=0.05)
    c3.number_input("Flat price per kWh (no tariff)", 0.0, MAX_PRICE_PER_KWH, key="r_price", step=0.01)
    c1, c2, _ = st.columns(3)
    c1.number_input("SLO: time to first token (ms)", 1.0, MAX_SLO_MS, key="r_ttft", step=100.0)
    c2.number_input("SLO: latency (ms)", 1.0, MAX_SLO_MS, key="r_latency", step=1000.0)
    st.markdown("Drivers per category")
    drivers_in = views.drivers_table(a)
    drivers = st.data_editor(
        drivers_in, hide_index=True, key=f"r_drivers_{ss.get('r_drivers_nonce', 0)}",
        disabled=["category", "default", "included"],
        column_config={"driver": st.column_config.SelectboxColumn("driver", options=list(DRIVERS), required=True)},
    )
    st.button("Reset B to A", on_click=reset_b, type="tertiary")

dframe = drivers if isinstance(drivers, pl.DataFrame) else pl.from_pandas(drivers)
overrides = {r["category"]: r["driver"] for r in dframe.iter_rows(named=True) if r["driver"] != r["default"]}
try:
    b = views.config_with(
        a,
        boundary=ss["r_boundary"],
        categories=ss["r_categories"] if ss["r_boundary"] == "custom" else None,
        drivers=overrides if overrides or a.allocation.drivers else None,
        idle=ss["r_idle"], inference_recharge=ss["r_recharge"], token_split=ss["r_split"],
        activity_mode=ss["r_mode"], threshold_pct=ss["r_threshold"], max_sample_gap_s=ss["r_gap"],
        pue=ss["r_pue"], server_overhead=ss["r_server"], flat_price_per_kwh=ss["r_price"],
        ttft_ms=ss["r_ttft"], latency_ms=ss["r_latency"],
    )
except (ConfigError, ValueError) as exc:
    st.error(f"Rule set B is not valid: {exc}")
    st.stop()

# The rules to save or apply keep the source's own period (the sidebar narrows it per view).
data = b.model_dump(exclude_none=True)
data["period"] = ctx.base_config.period.model_dump(exclude_none=True)
rules_b = parse_config(data)
toml_text = dump_config(rules_b)

st.subheader("Save")
c1, c2, c3 = st.columns(3)
c1.download_button("Download ailedger.toml", toml_text, file_name="ailedger.toml", mime="application/toml",
                   key="rules_download", on_click="ignore", icon=":material/download:")
cfg_path = rules_path(ctx.path)
admin = common.is_admin()
# The file is every user's (and the CLI's) config: write_rules refuses anyone but an admin;
# the button only says so up front.
if c2.button(f"Write to {cfg_path.name} beside the source", key="rules_write", icon=":material/save:",
             disabled=not admin, help=None if admin else "Only administrators can change the shared rules; "
             "download the TOML or use B in this session instead."):
    try:
        write_rules(ctx.path, rules_b, common.current_principal())
    except (OSError, AccessError) as exc:
        st.error(f"Could not write {cfg_path}: {exc}")
    else:
        common.set_state(rules=view_state.Rules())  # the view follows the file now
        ss["rules_note"] = f"Wrote {cfg_path}; the dashboard now uses it."
        st.rerun()


def apply_b() -> None:
    """B becomes the view's rules: in the URL, so a copied link carries them."""
    common.set_state(rules=view_state.rules_of(rules_b, ctx.base_config))


c3.button("Use B in the dashboard (this view and its link)", on_click=apply_b, key="rules_apply",
          icon=":material/check:")
if ss.get("rules_note"):
    st.success(ss.pop("rules_note"))
with st.expander("TOML of rule set B"):
    st.code(toml_text, language="toml")

st.subheader("A vs B for the same owners")
comp_a, comp_b = ctx.comp, common.computation(b)
if b == a:
    st.info("B equals A: change a rule above to compare.")
totals = views.compare_totals(comp_a, comp_b, ctx.filters)
names = {m: labels.column(m, ctx.currency) for m in totals["measure"].to_list()}
ratios = [m for m in names if labels.unit_of(m) == "ratio"]  # shown in % (their label says so)
shown = totals.with_columns(
    *(pl.when(pl.col("measure").is_in(ratios)).then(pl.col(c) * 100).otherwise(pl.col(c)).alias(c)
      for c in ("a", "b", "difference")),
    pl.col("measure").replace(names),
)
common.table(shown, "compare_totals", name="rules-compare-totals",
             title="Totals under rule set A and B",
             column_config={"a": st.column_config.NumberColumn("A (current)", format="%.3f"),
                            "b": st.column_config.NumberColumn("B (edited)", format="%.3f"),
                            "difference": st.column_config.NumberColumn("Difference", format="%+.3f")})
level = st.segmented_control("Owners", ["tenant", "project"], default="tenant", required=True,
                             format_func={"tenant": "By tenant", "project": "By project"}.get, key="r_level") or "tenant"
frame = views.compare_rules(comp_a, comp_b, level, ctx.filters)
common.chart(charts.compare_rules(frame, level, ctx.currency, "A (current)", "B (edited)"), f"compare_{level}",
             name=f"rules-compare-{level}")
common.table(frame, f"compare_{level}_table", name=f"rules-compare-{level}", title=f"Cost per {level} under A and B")
