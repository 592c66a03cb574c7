"""Rules views: a config with the page's choices applied, periods, and two rule sets compared."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Any, Literal
from zoneinfo import ZoneInfo

import polars as pl

from . import report
from .config import BOUNDARY_PRESETS, Config, parse_config
from .contract import CATEGORIES
from .engine import Computation
from .views_filters import Filters, apply_filters
from .views_headline import _num, totals


def config_with(base: Config, **changes: Any) -> Config:
    """A copy of `base` with rule changes applied, validated by the config's own parser.

    Keywords: boundary (preset name or "custom"), categories (with custom), drivers (dict),
    idle, inference_recharge, token_split, activity_mode, threshold_pct, max_sample_gap_s,
    pue, server_overhead, flat_price_per_kwh, ttft_ms, latency_ms, period_start, period_end.
    Unknown keywords raise; None leaves a value as it is.
    """
    data = base.model_dump(exclude_none=True)
    where = {
        "idle": ("allocation", "idle"),
        "inference_recharge": ("allocation", "inference_recharge"),
        "token_split": ("allocation", "token_split"),
        "drivers": ("allocation", "drivers"),
        "activity_mode": ("activity", "mode"),
        "threshold_pct": ("activity", "threshold_pct"),
        "max_sample_gap_s": ("activity", "max_sample_gap_s"),
        "pue": ("energy", "pue"),
        "server_overhead": ("energy", "server_overhead"),
        "flat_price_per_kwh": ("energy", "flat_price_per_kwh"),
        "ttft_ms": ("slo", "ttft_ms"),
        "latency_ms": ("slo", "latency_ms"),
        "period_start": ("period", "start"),
        "period_end": ("period", "end"),
    }
    for k, v in changes.items():
        if v is None:
            continue
        if k == "boundary":
            data["boundary"] = {"name": v}
            if v == "custom":
                cats = changes.get("categories") or base.boundary.included
                data["boundary"]["categories"] = [c for c in CATEGORIES if c in set(cats)]
        elif k == "categories":
            if changes.get("boundary") is None:
                data["boundary"] = {"name": "custom", "categories": [c for c in CATEGORIES if c in set(v)]}
        elif k in where:
            sec, key = where[k]
            data.setdefault(sec, {})[key] = dict(v) if isinstance(v, dict) else v
        else:
            raise TypeError(f"config_with: unknown rule {k!r}")
    b = data.get("boundary", {})
    # A custom boundary that equals a preset is that preset.
    if b.get("name") == "custom":
        for name, cats in BOUNDARY_PRESETS.items():
            if tuple(b.get("categories") or ()) == tuple(cats):
                data["boundary"] = {"name": name}
                break
    return parse_config(data)


def period_config(base: Config, comp: Computation, start: date | None, end: date | None) -> Config:
    """`base` with the period narrowed to whole days [start, end] in the period's time zone."""
    tz = ZoneInfo(comp.period.timezone)
    s = e = None
    if start is not None:
        s = datetime(start.year, start.month, start.day, tzinfo=tz).astimezone(timezone.utc)
        s = max(s, comp.period.start)
    if end is not None:
        e = (datetime(end.year, end.month, end.day, tzinfo=tz) + timedelta(days=1)).astimezone(timezone.utc)
        e = min(e, comp.period.end)
    if s is not None and e is not None and e <= s:
        return base
    return config_with(base, period_start=s, period_end=e)


def period_days(comp: Computation) -> tuple[date, date]:
    """First and last day of the period in its time zone."""
    tz = ZoneInfo(comp.period.timezone)
    return (
        comp.period.start.astimezone(tz).date(),
        (comp.period.end - timedelta(microseconds=1)).astimezone(tz).date(),
    )


def compare_rules(comp_a: Computation, comp_b: Computation, level: Literal["tenant", "project"] = "tenant",
                  filters: Filters | None = None) -> pl.DataFrame:
    """The same owners under rule set A and B: cost, allocated GPU-hours, and the difference."""
    keys = ["tenant"] if level == "tenant" else ["tenant", "project"]
    a = report.owner_table(apply_filters(comp_a, filters), keys).select(*keys, pl.col("cost").alias("cost_a"))
    b = report.owner_table(apply_filters(comp_b, filters), keys).select(*keys, pl.col("cost").alias("cost_b"))
    t = a.join(b, on=keys, how="full", coalesce=True).with_columns(pl.col("cost_a", "cost_b").fill_null(0.0))
    return t.with_columns(
        (pl.col("cost_b") - pl.col("cost_a")).alias("difference"),
        pl.when(pl.col("cost_a") != 0).then((pl.col("cost_b") - pl.col("cost_a")) / pl.col("cost_a")).alias("change"),
    ).sort(["cost_a", *keys], descending=[True] + [False] * len(keys))


def compare_totals(comp_a: Computation, comp_b: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Headline totals under A and B side by side."""
    ta, tb = totals(comp_a, filters), totals(comp_b, filters)
    keys = ["cost", "cost_per_gpu_hour", "cost_per_allocated_gpu_hour", "cost_per_million_tokens",
            "active_gpu_hours", "idle_rate", "energy_kwh_facility", "energy_cost"]
    rows = []
    for k in keys:
        a, b = _num(ta.get(k)), _num(tb.get(k))
        rows.append({"measure": k, "a": a, "b": b, "difference": None if a is None or b is None else b - a})
    ra, rb = report.reconciliation(comp_a), report.reconciliation(comp_b)
    for k in ("attributed", "idle", "unattributed"):
        rows.append({"measure": f"{k}_cost", "a": ra[k], "b": rb[k], "difference": rb[k] - ra[k]})
    return pl.DataFrame(rows, schema={"measure": pl.String, "a": pl.Float64, "b": pl.Float64, "difference": pl.Float64})


def drivers_table(config: Config) -> pl.DataFrame:
    """Each cost category with its default driver and the one in force."""
    from .contract import DEFAULT_DRIVER

    over = config.allocation.drivers
    return pl.DataFrame(
        [{"category": c, "default": DEFAULT_DRIVER[c], "driver": over.get(c, DEFAULT_DRIVER[c]),
          "included": c in config.boundary.included} for c in CATEGORIES],
        schema={"category": pl.String, "default": pl.String, "driver": pl.String, "included": pl.Boolean},
    )
