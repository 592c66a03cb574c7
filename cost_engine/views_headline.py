"""The dashboard's headline figures: totals, KPI cards, reconciliation, trend and the readable
formatting of a value."""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from . import coverage, report
from .contract import IDLE, UNATTRIBUTED
from .engine import Computation
from .views_filters import Filters, TOKEN_COLS, apply_filters


def totals(comp: Computation, filters: Filters | None = None) -> dict:
    """The report's totals under the filters (unfiltered: exactly report.totals)."""
    return report.totals(apply_filters(comp, filters))


def _num(v: Any) -> float | None:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return None
    return float(v)


def kpi_cards(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """The overview's headline figures: key, label, value, unit, detail (one row per card)."""
    t = totals(comp, filters)
    cur = comp.period.currency
    tokens_all = sum(t[c] or 0 for c in TOKEN_COLS)
    rows = [
        ("allocated_gpu_hours", "Allocated GPU-h", t["allocated_gpu_hours"], "GPU-h",
         f"Total accelerator hours allocated to owners; active {_fmt(t['active_gpu_hours'])} GPU-h."),
        ("available_gpu_hours", "Available GPU-h", t["available_gpu_hours"], "GPU-h",
         "Card-hours of capacity in service in the period."),
        ("allocation_rate", "Allocated / available", t["allocation_rate"], "ratio",
         f"{_fmt(t['allocated_gpu_hours'], 0)} of {_fmt(t['available_gpu_hours'], 0)} GPU-h allocated."),
        ("idle_rate", "Idle rate", t["idle_rate"], "ratio", "1 - active / available GPU-hours."),
        ("cost_per_gpu_hour", f"{cur} per GPU-hour", t["cost_per_gpu_hour"], f"{cur}/GPU-h",
         f"Cost / available GPU-hours; per allocated GPU-hour {_fmt(t['cost_per_allocated_gpu_hour'], 3)}."),
        ("cost", f"Total cost ({cur})", t["cost"], cur, f"Inside the boundary; energy cost {_fmt(t['energy_cost'], 2)}."),
        ("tokens", "Tokens", float(tokens_all), "tokens",
         f"Input + cached + output tokens of {_fmt(t['requests'], 0)} requests."),
        ("cost_per_million_tokens", f"{cur} per 1M tokens", t["cost_per_million_tokens"], f"{cur}/1M tokens",
         f"Model cost / tokens served; per 1M good tokens {_fmt(t['cost_per_million_good_tokens'], 3)}."),
        ("energy_kwh_gpu", "GPU energy (kWh)", t["energy_kwh_gpu"], "kWh",
         f"Measured GPU energy; facility {_fmt(t['energy_kwh_facility'])} kWh."),
        ("output_tokens_per_joule", "Tokens per joule", t["output_tokens_per_joule"], "tokens/J",
         "Output tokens / GPU joules of the allocations that served them."),
    ]
    return pl.DataFrame(
        [{"key": k, "label": lab, "value": _num(v), "unit": u, "detail": d if _num(v) is not None else _unknown(k)}
         for k, lab, v, u, d in rows],
        schema={"key": pl.String, "label": pl.String, "value": pl.Float64, "unit": pl.String, "detail": pl.String},
    )


# Why a headline figure is unknown (shown as "—" with this as its tooltip), never 0.
UNKNOWN = {
    "idle_rate": "Unknown: no telemetry covers the allocated time, so active hours (and the idle rate) cannot be "
                 "measured; or there is no inventory to measure available hours against.",
    "available_gpu_hours": "Unknown: the bundle has no inventory, so capacity in service is not known.",
    "allocation_rate": "Unknown: the bundle has no inventory, so capacity in service is not known.",
    "cost_per_gpu_hour": "Unknown: no cost row, rate or measured energy prices the cards held (the gap 'cost unknown' "
                         "names their pools), or the bundle has no inventory, so capacity in service is not known.",
    "cost": "Unknown: no cost row, rate or measured energy prices the cards held (the gap 'cost unknown' on the "
            "Data page names their pools).",
    "energy_kwh_gpu": "Unknown: no telemetry sample reports power or an energy counter.",
    "output_tokens_per_joule": "Unknown: no energy was measured on the allocations that served the tokens.",
    "cost_per_million_tokens": "Unknown: no model with cost served tokens in the period.",
}


def _unknown(key: str) -> str:
    return UNKNOWN.get(key, "Unknown: the inputs this figure needs are missing (see the gaps on the Data page).")


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "—"
    return f"{v:,.{digits}f}"


def _pct(v: Any) -> str:
    return "—" if v is None else f"{100 * v:.1f} %"


def format_value(value: float | None, unit: str) -> str:
    """How a KPI card shows its value (shared by pages and the review pack): compact, unit-free."""
    if value is None:
        return "—"
    if unit == "ratio":
        return f"{100 * value:.1f} %"
    if unit == "tokens/J":
        return f"{value:.4f}"
    a = abs(value)
    if a >= 1e9:
        return f"{value / 1e9:,.2f} B"
    if a >= 1e6:
        return f"{value / 1e6:,.2f} M"
    if unit in ("tokens", "GPU-h", "kWh"):
        return f"{value:,.0f}" if a >= 1000 else f"{value:,.1f}"
    return f"{value:,.2f}" if a >= 10 else f"{value:,.3f}"


def reconciliation(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Where the money landed: owners, idle, unattributed (unfiltered: the report's reconciliation)."""
    fc = apply_filters(comp, filters)
    if fc is comp:
        return pl.DataFrame([report.reconciliation(comp)])
    m = fc.money
    by = {d: float(m.filter(pl.col("dest") == d)["amount"].sum()) for d in ("owner", IDLE, UNATTRIBUTED)}
    return pl.DataFrame([{"input_cost": float(m["amount"].sum()), "attributed": by["owner"], "idle": by[IDLE],
                          "unattributed": by[UNATTRIBUTED], "difference": 0.0}])


def trend(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Daily figures in the period's time zone (report.trend), plus cost per allocated GPU-hour."""
    t = report.trend(apply_filters(comp, filters))
    return t.with_columns(
        pl.when(pl.col("allocated_gpu_hours") > 0)
        .then(pl.col("cost") / pl.col("allocated_gpu_hours"))
        .alias("cost_per_allocated_gpu_hour"),
        pl.sum_horizontal(*TOKEN_COLS).alias("tokens"),
    )


def by_category(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    fc = apply_filters(comp, filters)
    return fc.inputs.group_by("category").agg(pl.col("amount").sum().alias("cost")).sort(
        ["cost", "category"], descending=[True, False]
    )


def gaps(comp: Computation) -> pl.DataFrame:
    """The report's gaps: the engine's, what no cost reaches, and the spans no rate or tariff covers."""
    more = [*report.cost_gaps(comp), *coverage.partial(comp, report.energy_priced_by_measurement(comp)).gaps]
    return pl.DataFrame([{"what": w, "detail": d} for w, d in [*comp.gaps, *more]],
                        schema={"what": pl.String, "detail": pl.String})
