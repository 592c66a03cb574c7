"""Views over the period a person picked: the daily figures in day, week or month buckets
with the buckets the period covers only in part marked, and the KPI cards against the
previous period.

Buckets re-add the engine's daily rows (`views.trend`, `views.idle_daily`,
`views.energy_daily`, local days of period.timezone); ratios are recomputed from the sums,
never averaged. A bucket is partial when the period (clipped to the data) holds only some
of its hours: the first week of a period starting on a Wednesday, or a day the data starts
at 02:00; it is drawn and listed as partial, so a short bucket is not read as a collapse.
"""

from __future__ import annotations

import polars as pl

from . import period_choice, views
from .engine import Computation

# Whether a rise of the figure is good (normal), bad (inverse) or neither (off), for deltas.
DELTA_COLOR = {
    "cost": "inverse", "cost_per_gpu_hour": "inverse", "idle_rate": "inverse", "cost_per_million_tokens": "inverse",
    "allocation_rate": "normal", "output_tokens_per_joule": "normal",
}


def _rebucket(frame: pl.DataFrame, comp: Computation, grain: str, keys: tuple[str, ...] = (),
              known: tuple[str, ...] = ()) -> pl.DataFrame:
    """Sum a frame of daily rows into buckets (joined to every bucket of the period, with
    hours_full, hours_in_data and partial); `known` columns stay null when all their days are."""
    p = comp.period
    grid = period_choice.buckets(p.start, p.end, p.timezone, grain)
    sums = [c for c, d in frame.schema.items() if c not in ("day", *keys) and d.is_numeric()]
    agg = frame.group_by(period_choice.bucket_expr(pl.col("day"), grain).alias("bucket"), *keys).agg(
        *(pl.when(pl.col(c).is_not_null().any()).then(pl.col(c).sum()).alias(c) if c in known else pl.col(c).sum()
          for c in sums)
    )
    if keys:
        return agg.join(grid, on="bucket", how="inner").sort("bucket", *keys)
    out = grid.join(agg, on="bucket", how="left")
    return out.with_columns(pl.col(c).fill_null(0) for c in sums if c not in known).sort("bucket")


def trend_buckets(comp: Computation, filters: views.Filters | None = None, grain: str = "day") -> pl.DataFrame:
    """The trend (cost, available / allocated / active GPU-hours, energy, tokens, requests) per
    day, week or month of the period, with hours_full, hours_in_data and partial per bucket."""
    t = views.trend(comp, filters).drop("cost_per_allocated_gpu_hour")
    out = _rebucket(t, comp, grain, known=("active_gpu_hours", "energy_kwh_gpu"))
    return out.with_columns(
        pl.when(pl.col("allocated_gpu_hours") > 0).then(pl.col("cost") / pl.col("allocated_gpu_hours"))
        .alias("cost_per_allocated_gpu_hour")
    )


def idle_buckets(comp: Computation, filters: views.Filters | None = None, grain: str = "day") -> pl.DataFrame:
    """Idle GPU-hours, energy and cost per bucket, kind and cause (views.idle_daily re-added)."""
    return _rebucket(views.idle_daily(comp, filters), comp, grain, keys=("kind", "cause"))


def energy_buckets(comp: Computation, filters: views.Filters | None = None, grain: str = "day") -> pl.DataFrame:
    """GPU and facility kWh, energy cost, CO2e and output tokens per bucket (views.energy_daily)."""
    e = views.energy_daily(comp, filters)
    return _rebucket(e, comp, grain, known=("energy_kwh_gpu", "energy_kwh_facility", "energy_cost", "co2e_kg"))


def partial_note(frame: pl.DataFrame) -> str | None:
    """A sentence naming the partial buckets of a bucket frame, or None when there are none."""
    if "partial" not in frame.columns:
        return None
    p = frame.filter(pl.col("partial")).unique("bucket").sort("bucket")
    if p.height == 0:
        return None
    parts = [f"{r['bucket']} ({r['hours_in_data']:.0f} of {r['hours_full']:.0f} h)" for r in p.iter_rows(named=True)]
    return "Partial buckets (the period or the data covers only part of them): " + ", ".join(parts) + "."


def kpi_deltas(now: pl.DataFrame, before: pl.DataFrame) -> pl.DataFrame:
    """The KPI cards (views.kpi_cards) against the previous period's: key, previous, delta
    (ratios in percentage points, other figures as a relative change), text and colour.
    A delta whose either side is unknown, or whose previous value is 0, is null."""
    b = before.select("key", pl.col("value").alias("previous"))
    t = now.select("key", "value", "unit").join(b, on="key", how="left")
    rows = []
    for r in t.iter_rows(named=True):
        v, p = r["value"], r["previous"]
        delta = text = None
        if v is not None and p is not None:
            if r["unit"] == "ratio":
                delta = v - p
                text = f"{100 * delta:+.1f} pp"
            elif p != 0:
                delta = (v - p) / abs(p)
                text = f"{100 * delta:+.1f} %"
        rows.append({"key": r["key"], "previous": p, "delta": delta, "text": text,
                     "color": DELTA_COLOR.get(r["key"], "off")})
    return pl.DataFrame(rows, schema={"key": pl.String, "previous": pl.Float64, "delta": pl.Float64,
                                      "text": pl.String, "color": pl.String})


# Each table's time span (start, end); end None: a point in time. Inventory and the
# ownership tables are not about a time, queue rows count by their submit time.
_SPANS = {"allocations": ("start", "end"), "costs": ("start", "end"), "rates": ("start", "end"),
          "tariffs": ("start", "end"), "events": ("start", "end"), "queue": ("submit", None),
          "requests": ("ts", "end"), "telemetry": ("ts", None)}


def validation_report(comp: Computation, filters: views.Filters | None = None) -> pl.DataFrame:
    """Per contract table: present, accepted, rejected (views.validation_summary, telemetry
    counted where it is kept) and the rows outside the period. Filters do not apply: the report
    is of the source."""
    rows = views.validation_summary(comp.bundle, views.telemetry_rows(comp))
    return rows.join(outside_period(comp), on="table", how="left")


def outside_period(comp: Computation) -> pl.DataFrame:
    """Per table: accepted rows that lie wholly outside the period [start, end) (they are
    kept, and count in no figure of this period). Null for a table the source keeps in the
    store (telemetry, requests of a store): not counted here."""
    p = comp.period
    lo, hi = pl.lit(p.start), pl.lit(p.end)
    rows = []
    for table, (start, end) in _SPANS.items():
        frame = comp.bundle[table]
        if table in comp.bundle.held_rows or start not in frame.columns:
            rows.append({"table": table, "outside_period": None})
            continue
        if end is None or end not in frame.columns:
            out = (pl.col(start) < lo) | (pl.col(start) >= hi)
        else:
            out = (pl.col(start) >= hi) | (pl.col(end).fill_null(pl.col(start)) <= lo)
        rows.append({"table": table, "outside_period": int(frame.select(out.fill_null(False).sum()).item())})
    return pl.DataFrame(rows, schema={"table": pl.String, "outside_period": pl.Int64})
