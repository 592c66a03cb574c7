"""The card-time ledger: each card's in-service time cut into segments with exactly one holder each.

Every GPU-hour, joule and dollar of the engine is a sum over these segments, so nothing is
counted twice and reconciliation holds by construction (see docs/engine.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import polars as pl

from . import future
from .config import Config
from .contract import TS

US_PER_S = 1_000_000


@dataclass(frozen=True)
class Period:
    start: datetime
    end: datetime
    timezone: str
    currency: str

    @property
    def hours(self) -> float:
        return (self.end - self.start).total_seconds() / 3600


def resolve_period(config: Config, allocations: pl.DataFrame, now: datetime | None = None) -> Period:
    """The reporting period: the config's, or the whole UTC days the allocations cover.

    Future-dated allocations (future.py; `now` defaults to the wall clock) do not define it: one
    job dated 2099 would stretch it to 73 years. They stay in the data, counted for their part
    inside the period, and the report names them in its gaps."""
    p = config.period
    start, end = p.start, p.end
    if start is None or end is None:
        if allocations.height == 0:
            raise ValueError("no period in the config and no allocations to infer one from")
        t = future.clock(now)
        dated = allocations.filter(~future.is_future("allocations", t))
        if dated.height == 0:
            raise ValueError(f"no period in the config and every allocation ({allocations.height:,}) is future-dated "
                             f"(after {t:%Y-%m-%d} + 1 day): give [period] start and end")
        lo = dated["start"].min()
        hi = dated["end"].max()
        day0 = datetime(lo.year, lo.month, lo.day, tzinfo=timezone.utc)
        day1 = datetime(hi.year, hi.month, hi.day, tzinfo=timezone.utc)
        if day1 < hi:
            day1 += timedelta(days=1)
        start = start or day0
        end = end or day1
        if end <= start:
            raise ValueError(f"inferred period is empty: {start} .. {end}")
    return Period(start=start, end=end, timezone=p.timezone, currency=p.currency)


def seconds(expr: pl.Expr) -> pl.Expr:
    """A duration expression in seconds as Float64."""
    return expr.dt.total_microseconds().cast(pl.Float64) / US_PER_S


def split_by(segments: pl.DataFrame, every: str, name: str = "bucket") -> pl.DataFrame:
    """Segments cut at `every` edges (e.g. "1h"): one row per (segment, bucket) with `f`, the
    fraction of the segment's time inside that bucket (quantities scale by `f`)."""
    s = segments.with_columns(
        pl.datetime_ranges(pl.col("t0").dt.truncate(every), pl.col("t1"), every, closed="left").alias(name)
    ).explode(name)
    end = pl.col(name).dt.offset_by(every)
    return s.with_columns(
        (seconds(pl.min_horizontal(end, pl.col("t1")) - pl.max_horizontal(pl.col(name), pl.col("t0")))
         / pl.col("dur_s")).alias("f")
    ).filter(pl.col("f") > 0)


def clip(frame: pl.DataFrame, start: str, end: str, lo, hi) -> pl.DataFrame:
    """Clip [start, end) to [lo, hi) and drop rows that fall outside entirely."""
    lo_e = lo if isinstance(lo, pl.Expr) else pl.lit(lo, dtype=TS)
    hi_e = hi if isinstance(hi, pl.Expr) else pl.lit(hi, dtype=TS)
    return frame.with_columns(
        pl.max_horizontal(pl.col(start), lo_e).alias(start),
        pl.min_horizontal(pl.col(end), hi_e).alias(end),
    ).filter(pl.col(end) > pl.col(start))


def day_edges(period: Period) -> list[datetime]:
    """Midnights of period.timezone inside the period, as UTC instants."""
    from zoneinfo import ZoneInfo

    tz = ZoneInfo(period.timezone)
    local = period.start.astimezone(tz)
    day = datetime(local.year, local.month, local.day, tzinfo=tz)
    out = []
    while True:
        day = (day.replace(tzinfo=None) + timedelta(days=1)).replace(tzinfo=tz)
        # Re-normalise through UTC so DST days are 23 or 25 hours long.
        utc = day.astimezone(timezone.utc)
        if utc >= period.end:
            break
        out.append(utc)
    return out


def cards_frame(
    inventory: pl.DataFrame, allocations: pl.DataFrame, period: Period, has_inventory: bool | None = None
) -> tuple[pl.DataFrame, bool]:
    """Cards with their in-service window clipped to the period.

    Without an inventory the cards are the ones allocations name, "in service" only while
    allocated: available capacity is then unknown (a gap), never invented. An inventory that
    exists but holds no valid card is still an inventory: every allocation's card is unknown.
    """
    if has_inventory is None:
        has_inventory = inventory.height > 0
    if has_inventory:
        cards = inventory.with_columns(
            pl.col("in_service_start").fill_null(pl.lit(period.start, dtype=TS)).alias("svc_start"),
            pl.col("in_service_end").fill_null(pl.lit(period.end, dtype=TS)).alias("svc_end"),
            pl.col("capacity").fill_null(1.0),
        )
        cards = clip(cards, "svc_start", "svc_end", period.start, period.end)
        return cards.select("gpu_id", "pool", "node", "accelerator", "capacity", "svc_start", "svc_end"), True
    cards = (
        clip(allocations, "start", "end", period.start, period.end)
        .group_by("gpu_id")
        .agg(pl.col("start").min().alias("svc_start"), pl.col("end").max().alias("svc_end"))
        .with_columns(
            pl.lit(None, dtype=pl.String).alias("pool"),
            pl.lit(None, dtype=pl.String).alias("node"),
            pl.lit(None, dtype=pl.String).alias("accelerator"),
            pl.lit(1.0).alias("capacity"),
        )
    )
    return cards.select("gpu_id", "pool", "node", "accelerator", "capacity", "svc_start", "svc_end"), False


def mig_over_parent(inventory: pl.DataFrame, cards: pl.DataFrame) -> pl.DataFrame:
    """Physical cards whose MIG instances (inventory rows naming them in `parent_gpu_id`), with
    the card's own row when it is listed too, hold more than one whole card at some instant.

    `cards`: cards_frame's (in-service windows clipped to the period). A sweep over the windows'
    edges per parent (an instance re-cut over time is not counted twice). Returns parent, the
    most capacity at once (`capacity`), when it is first reached (`t`), the instances (`n`) and
    whether the card has a row of its own (`listed`).
    """
    out = pl.Schema({"parent": pl.String, "capacity": pl.Float64, "t": TS, "n": pl.UInt32, "listed": pl.Boolean})
    if "parent_gpu_id" not in inventory.columns or cards.height == 0:
        return pl.DataFrame(schema=out)
    links = inventory.select("gpu_id", pl.col("parent_gpu_id").cast(pl.String).alias("parent")).filter(
        pl.col("parent").is_not_null() & (pl.col("parent") != pl.col("gpu_id"))).unique("gpu_id")
    if links.height == 0:
        return pl.DataFrame(schema=out)
    members = pl.concat([
        cards.join(links, on="gpu_id"),
        cards.join(links.select(pl.col("parent").alias("gpu_id")).unique(), on="gpu_id")
        .with_columns(pl.col("gpu_id").alias("parent")),
    ]).select("parent", "gpu_id", "capacity", "svc_start", "svc_end").filter(pl.col("svc_end") > pl.col("svc_start"))
    edges = pl.concat([
        members.select("parent", pl.col("svc_start").alias("t"), pl.col("capacity").alias("d")),
        members.select("parent", pl.col("svc_end").alias("t"), (-pl.col("capacity")).alias("d")),
    ]).sort("parent", "t", "d")  # at one instant, what leaves goes before what comes
    held = edges.with_columns(pl.col("d").cum_sum().over("parent").alias("capacity"))
    n = members.group_by("parent").agg((pl.col("gpu_id") != pl.col("parent")).sum().alias("n"),
                                       (pl.col("gpu_id") == pl.col("parent")).any().alias("listed"))
    peak = held.sort("parent", "capacity", "t", descending=[False, True, False]).group_by(
        "parent", maintain_order=True).first()
    # 1e-6: 3/7 + 4/7 is a whole card, whatever the float rounding.
    return peak.filter(pl.col("capacity") > 1.0 + 1e-6).join(n, on="parent").select(
        "parent", "capacity", "t", pl.col("n").cast(pl.UInt32), "listed").sort("parent")


@dataclass
class Ledger:
    """The segments and what they were cut from."""

    period: Period
    cards: pl.DataFrame  # gpu_id, pool, node, accelerator, capacity, svc_start, svc_end
    has_inventory: bool
    # elementary intervals: e_idx, gpu_id, t0, t1, dur_s, day, share_sum
    intervals: pl.DataFrame
    # segments: s_idx, e_idx, gpu_id, pool, node, accelerator, capacity, t0, t1, dur_s, day,
    #           allocation_id (null = unallocated), eff (share after conflict split), cap_h
    segments: pl.DataFrame
    conflicts: pl.DataFrame  # gpu_id, t0, t1, share_sum


def day_cuts(cards: pl.DataFrame, period: Period) -> pl.DataFrame:
    """(gpu_id, t): every card cut at the midnights of period.timezone, the one bucket edge
    every daily figure needs (cards x days, linear in each)."""
    days = pl.DataFrame({"t": pl.Series(day_edges(period), dtype=TS)})
    return cards.select("gpu_id").join(days, how="cross")


def build_ledger(
    cards: pl.DataFrame,
    has_inventory: bool,
    allocations: pl.DataFrame,
    period: Period,
    cuts: pl.DataFrame | None = None,
) -> Ledger:
    """Cut each card's in-service time at the instants that concern it and give each piece its holders.

    `allocations` must already be clipped to the period and restricted to known cards.
    A card is cut at its in-service edges, its allocations' edges, the midnights of the
    period's time zone and the instants in `cuts` (gpu_id, t) that concern it (events on
    it or its node, and the edges the engine needs where it has telemetry: see
    engine.card_cuts). Nothing cuts every card at once, so the segments grow with the
    records, not with cards x records.
    """
    # Clip allocations to their card's in-service window (time outside it has no capacity).
    alloc = (
        allocations.join(cards.select("gpu_id", "svc_start", "svc_end"), on="gpu_id", how="inner")
        .with_columns(
            pl.max_horizontal("start", "svc_start").alias("a0"),
            pl.min_horizontal("end", "svc_end").alias("a1"),
        )
        .filter(pl.col("a1") > pl.col("a0"))
    )
    extra = [day_cuts(cards, period)]
    if cuts is not None and cuts.height:
        extra.append(cuts.select("gpu_id", pl.col("t").cast(TS)))
    inner = (
        pl.concat(extra)
        .join(cards.select("gpu_id", "svc_start", "svc_end"), on="gpu_id")
        .filter((pl.col("t") > pl.col("svc_start")) & (pl.col("t") < pl.col("svc_end")))
        .select("gpu_id", "t")
    )
    card_points = pl.concat(
        [
            cards.select("gpu_id", pl.col("svc_start").alias("t")),
            cards.select("gpu_id", pl.col("svc_end").alias("t")),
            alloc.select("gpu_id", pl.col("a0").alias("t")),
            alloc.select("gpu_id", pl.col("a1").alias("t")),
            inner,
        ]
    )
    intervals = (
        card_points.unique()
        .sort("gpu_id", "t")
        .with_columns(pl.col("t").shift(-1).over("gpu_id").alias("t1"))
        .drop_nulls("t1")
        .rename({"t": "t0"})
        # Without an inventory a card is "in service" only while held: drop the holes.
        .join(cards.select("gpu_id", "svc_start", "svc_end"), on="gpu_id")
        .filter((pl.col("t0") >= pl.col("svc_start")) & (pl.col("t1") <= pl.col("svc_end")))
        .drop("svc_start", "svc_end")
        .sort("gpu_id", "t0")
        .with_row_index("e_idx")
        .with_columns(pl.col("e_idx").cast(pl.Int64), seconds(pl.col("t1") - pl.col("t0")).alias("dur_s"))
    )
    intervals = intervals.with_columns(
        pl.col("t0").dt.convert_time_zone(period.timezone).dt.date().alias("day")
    )

    # Each allocation covers a contiguous run of intervals of its card: find the first and
    # last by exact edge match, then expand the index range (linear in the output).
    first = intervals.select("gpu_id", pl.col("t0").alias("a0"), pl.col("e_idx").alias("e_first"))
    last = intervals.select("gpu_id", pl.col("t1").alias("a1"), pl.col("e_idx").alias("e_last"))
    held = (
        alloc.select("allocation_id", "gpu_id", "a0", "a1", "share")
        .join(first, on=["gpu_id", "a0"], how="left")
        .join(last, on=["gpu_id", "a1"], how="left")
    )
    held = (
        held.drop_nulls(["e_first", "e_last"])
        .with_columns(pl.int_ranges("e_first", pl.col("e_last") + 1).alias("e_idx"))
        .explode("e_idx")
        .select("e_idx", "allocation_id", "share")
    )
    sums = held.group_by("e_idx").agg(pl.col("share").sum().alias("share_sum"))
    intervals = intervals.join(sums, on="e_idx", how="left").with_columns(pl.col("share_sum").fill_null(0.0))

    # Over-allocated instants are split pro rata to the shares (nothing counted twice).
    held = held.join(intervals.select("e_idx", "share_sum"), on="e_idx").with_columns(
        pl.when(pl.col("share_sum") > 1.0)
        .then(pl.col("share") / pl.col("share_sum"))
        .otherwise(pl.col("share"))
        .alias("eff")
    )
    free = intervals.filter(pl.col("share_sum") < 1.0 - 1e-12).select(
        "e_idx", pl.lit(None, dtype=pl.String).alias("allocation_id"), (1.0 - pl.col("share_sum")).alias("eff")
    )
    if not has_inventory:
        # Capacity is unknown: the unheld part of a card is not "available", so it is not idle.
        free = free.clear()

    card_cols = cards.select("gpu_id", "pool", "node", "accelerator", "capacity")
    segments = (
        pl.concat([held.select("e_idx", "allocation_id", "eff"), free])
        .join(intervals.select("e_idx", "gpu_id", "t0", "t1", "dur_s", "day"), on="e_idx")
        .join(card_cols, on="gpu_id")
        .sort("e_idx", "allocation_id", nulls_last=True)
        .with_row_index("s_idx")
        .with_columns(
            pl.col("s_idx").cast(pl.Int64),
            (pl.col("capacity") * pl.col("eff") * pl.col("dur_s") / 3600).alias("cap_h"),
        )
    )
    conflicts = intervals.filter(pl.col("share_sum") > 1.0 + 1e-9).select("gpu_id", "t0", "t1", "share_sum")
    return Ledger(
        period=period,
        cards=cards,
        has_inventory=has_inventory,
        intervals=intervals,
        segments=segments,
        conflicts=conflicts,
    )
