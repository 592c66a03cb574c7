"""Idle views: causes, backlog, pools, cards, the allocations behind a cause and a card's timeline."""

from __future__ import annotations

import math
from datetime import date, timedelta
from zoneinfo import ZoneInfo

import polars as pl

from . import activity, report
from .engine import Computation
from .views_filters import Filters, TIMELINE_POINTS, apply_filters
from .views_headline import totals


def idle_detail(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Every idle piece with card, owner, day and cost (the engine's report.idle_detail)."""
    return report.idle_detail(apply_filters(comp, filters))


def idle_backlog(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Idle by cause as a backlog: kind, cause, GPU-hours, energy, cost, share, top offenders, action."""
    from . import idle

    d = idle_detail(comp, filters)
    if not hasattr(idle, "backlog"):
        return report.idle_table(apply_filters(comp, filters))
    b = idle.backlog(d)
    if "top_offenders" in b.columns:
        # Cards are named by node and a short id (jobs keep their ids): readable, still traceable.
        names = {g: lab for g, lab in card_label(comp).items()}
        b = b.with_columns(
            pl.col("top_offenders").list.eval(pl.element().replace(names)).alias("top_offenders")
        )
    return b


def idle_summary(comp: Computation, filters: Filters | None = None) -> dict:
    """Idle GPU-hours and cost, unallocated and allocated, and the idle rate."""
    t = idle_by_cause(comp, filters)
    tot = totals(comp, filters)

    def pick(kind: str, col: str) -> float:
        return float(t.filter(pl.col("kind") == kind)[col].sum() or 0.0)

    return {
        "unallocated_gpu_hours": pick("unallocated", "gpu_hours"),
        "allocated_gpu_hours": pick("allocated", "gpu_hours"),
        "unallocated_cost": pick("unallocated", "cost"),
        "allocated_cost": pick("allocated", "cost"),
        "idle_energy_kwh_gpu": float(t["energy_kwh_gpu"].sum() or 0.0),
        "idle_rate": tot["idle_rate"],
        "causes": t.height,
    }


def idle_by_cause(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Idle GPU-hours, energy and cost per (kind, cause): the report's idle rows."""
    return report.idle_table(apply_filters(comp, filters))


def idle_daily(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Idle GPU-hours, energy and cost per day (period time zone) and cause, for a stacked chart."""
    d = idle_detail(comp, filters)
    return (
        d.group_by("day", "kind", "cause")
        .agg(pl.col("gpu_hours").sum(), pl.col("energy_kwh_gpu").sum(), pl.col("cost").sum())
        .sort(["day", "kind", "cause"], descending=[False, True, False])
    )


def week_start(comp: Computation) -> date:
    """First day (period time zone) of the period's last 7 x 24 hours: "this week"."""
    tz = ZoneInfo(comp.period.timezone)
    first = comp.period.start.astimezone(tz).date()
    return max(first, (comp.period.end - timedelta(days=7)).astimezone(tz).date())


def idle_this_week(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Idle GPU-hours and cost by cause over the period's last seven days."""
    d = idle_detail(comp, filters).filter(pl.col("day") >= week_start(comp))
    return (
        d.group_by("kind", "cause")
        .agg(pl.col("gpu_hours").sum(), pl.col("energy_kwh_gpu").sum(), pl.col("cost").sum())
        .sort(["gpu_hours", "cause"], descending=[True, False])
    )


def idle_by_pool(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Idle GPU-hours and cost per pool, accelerator and cause."""
    d = idle_detail(comp, filters)
    return (
        d.group_by("pool", "accelerator", "kind", "cause")
        .agg(pl.col("gpu_hours").sum(), pl.col("energy_kwh_gpu").sum(), pl.col("cost").sum())
        .sort(["pool", "accelerator", "gpu_hours"], descending=[False, False, True], nulls_last=True)
    )


def idle_cards(comp: Computation, filters: Filters | None, cause: str, kind: str | None = None) -> pl.DataFrame:
    """The cards behind an idle cause: GPU-hours, energy and cost each, most idle first."""
    d = idle_detail(comp, filters).filter(pl.col("cause") == cause)
    if kind is not None:
        d = d.filter(pl.col("kind") == kind)
    return (
        d.group_by("gpu_id", "node", "pool", "accelerator")
        .agg(
            pl.col("gpu_hours").sum(), pl.col("energy_kwh_gpu").sum(), pl.col("cost").sum(),
            pl.col("allocation_id").drop_nulls().n_unique().alias("allocations"),
        )
        .sort(["gpu_hours", "gpu_id"], descending=[True, False])
    )


def idle_allocations(comp: Computation, filters: Filters | None, cause: str, kind: str | None = None) -> pl.DataFrame:
    """The allocations behind an idle cause (allocated idle): owner, job, idle hours and cost."""
    d = idle_detail(comp, filters).filter((pl.col("cause") == cause) & pl.col("allocation_id").is_not_null())
    if kind is not None:
        d = d.filter(pl.col("kind") == kind)
    tz = comp.period.timezone
    return (
        d.group_by("allocation_id")
        .agg(
            pl.col("tenant").first(), pl.col("project").first(), pl.col("job_id").first(),
            pl.col("workload").first(), pl.col("model").first(), pl.col("gpu_id").first(), pl.col("node").first(),
            pl.col("t0").min().dt.convert_time_zone(tz).alias("first_idle"),
            pl.col("t1").max().dt.convert_time_zone(tz).alias("last_idle"),
            pl.col("gpu_hours").sum().alias("idle_gpu_hours"), pl.col("energy_kwh_gpu").sum(), pl.col("cost").sum(),
        )
        .sort(["idle_gpu_hours", "allocation_id"], descending=[True, False])
    )


def card_label(comp: Computation) -> dict[str, str]:
    """gpu_id -> a readable label: node · accelerator · short id."""
    out = {}
    for r in comp.ledger.cards.iter_rows(named=True):
        gid = r["gpu_id"]
        short = gid if len(gid) <= 16 else gid[:12] + "…"
        parts = [p for p in (r.get("node"), short) if p]
        out[gid] = " · ".join(parts)
    return out


def card_timeline(comp: Computation, gpu_id: str, max_points: int = TIMELINE_POINTS) -> pl.DataFrame:
    """A card's telemetry over the period (period time zone): util and power, averaged into
    at most `max_points` buckets (time-weighted), so the browser gets a bounded series.

    The card's raw samples are read from the computation's telemetry source (the store, for
    a store), one card and one period only. A tenant-scoped source holds only the samples of
    the time its tenants held the card, and each sample's interval is cut where that ends."""
    p = comp.period
    tz = p.timezone
    gap = comp.config.activity.max_sample_gap_s
    raw = comp.telemetry.card(gpu_id, p.start, p.end + timedelta(seconds=gap))
    s = activity.sample_intervals(raw, gap).filter(pl.col("ts") < p.end)
    held = comp.telemetry.held(gpu_id)
    if held is not None and s.height:
        s = (
            s.sort("ts").join_asof(held.sort("t0"), left_on="ts", right_on="t0", strategy="backward")
            .with_columns(pl.min_horizontal("t_end", "t1").alias("t_end"))
            .with_columns(((pl.col("t_end") - pl.col("ts")).dt.total_microseconds() / 1e6).alias("dt_s"))
            .filter(pl.col("dt_s") > 0)
        )
    if s.height == 0:
        return pl.DataFrame(schema={"ts": pl.Datetime("us", tz), "util_pct": pl.Float64, "power_w": pl.Float64})
    span_s = max((p.end - p.start).total_seconds(), 1.0)
    every_s = max(60, math.ceil(span_s / max_points / 60) * 60)
    w = pl.col("dt_s")
    out = (
        s.with_columns(pl.col("ts").dt.truncate(f"{every_s}s").alias("bucket"))
        .group_by("bucket")
        .agg(
            ((pl.col("util_pct") * w).sum() / w.sum()).alias("util_pct"),
            pl.when(pl.col("power_w").is_not_null().any())
            .then((pl.col("power_w") * w).filter(pl.col("power_w").is_not_null()).sum()
                  / w.filter(pl.col("power_w").is_not_null()).sum())
            .alias("power_w"),
        )
        .sort("bucket")
        .select(pl.col("bucket").dt.convert_time_zone(tz).alias("ts"), "util_pct", "power_w")
    )
    return out


def card_allocations(comp: Computation, gpu_id: str) -> pl.DataFrame:
    """The allocations held on a card in the period, clipped to it, with their owners."""
    p = comp.period
    tz = p.timezone
    a = comp.allocations.filter(pl.col("gpu_id") == gpu_id)
    return (
        a.select(
            "allocation_id", "tenant", "project", "workload", "job_id", "model", "share",
            pl.max_horizontal(pl.col("start"), pl.lit(p.start)).dt.convert_time_zone(tz).alias("start"),
            pl.min_horizontal(pl.col("end"), pl.lit(p.end)).dt.convert_time_zone(tz).alias("end"),
        )
        .filter(pl.col("end") > pl.col("start"))
        .sort("start")
    )
