"""Idle card-time classified by cause (first match wins), so an idle rate becomes a backlog."""

from __future__ import annotations

import polars as pl

from .contract import TS
from .ledger import Period, split_by

UNALLOCATED_EVENT_KINDS = ("degraded_hardware", "maintenance")
ALLOCATED_EVENT_KINDS = ("network_bottleneck", "storage_bottleneck", "data_loading", "degraded_hardware")


def _event_hits(seg: pl.DataFrame, events: pl.DataFrame, kinds: tuple[str, ...]) -> pl.DataFrame:
    """(s_idx, kind_rank) for segments covered by an event of the given kinds, by card, node or pool."""
    ev = events.filter(pl.col("kind").is_in(list(kinds))).with_columns(
        pl.col("kind").replace_strict({k: i for i, k in enumerate(kinds)}, return_dtype=pl.Int64).alias("rank")
    )
    if ev.height == 0:
        return pl.DataFrame(schema={"s_idx": pl.Int64, "rank": pl.Int64})
    keyed = []
    for scope in ("gpu_id", "node", "pool"):
        e = ev.filter(pl.col(scope).is_not_null()).select(scope, pl.col("start").alias("ev0"), pl.col("end").alias("ev1"), "rank")
        if e.height:
            keyed.append(
                seg.select("s_idx", scope, "t0", "t1")
                .join(e, on=scope)
                # Event edges are cut points of the ledger, so a segment is inside or outside.
                .filter((pl.col("t0") >= pl.col("ev0")) & (pl.col("t1") <= pl.col("ev1")))
                .select("s_idx", "rank")
            )
    if not keyed:
        return pl.DataFrame(schema={"s_idx": pl.Int64, "rank": pl.Int64})
    return pl.concat(keyed).group_by("s_idx").agg(pl.col("rank").min())


def _queue_hits(seg: pl.DataFrame, queue: pl.DataFrame, period: Period) -> pl.DataFrame:
    """(s_idx, qrank) for unallocated segments while a job waited in the same pool: 0 quota, 1 resources."""
    q = queue.filter(pl.col("reason").is_in(["quota", "resources"])).select(
        "pool",
        pl.col("submit").alias("q0"),
        pl.col("start").fill_null(pl.lit(period.end, dtype=TS)).alias("q1"),
        pl.when(pl.col("reason") == "quota").then(0).otherwise(1).cast(pl.Int64).alias("qrank"),
    )
    if q.height == 0:
        return pl.DataFrame(schema={"s_idx": pl.Int64, "qrank": pl.Int64})
    return (
        seg.select("s_idx", "pool", "t0", "t1")
        .join(q, on="pool")
        .filter((pl.col("t0") >= pl.col("q0")) & (pl.col("t1") <= pl.col("q1")))
        .group_by("s_idx")
        .agg(pl.col("qrank").min())
    )


def classify(seg: pl.DataFrame, events: pl.DataFrame, queue: pl.DataFrame, period: Period) -> pl.DataFrame:
    """Idle pieces of the ledger with their cause.

    Returns rows (s_idx, kind, cause, gpu_hours, idle_frac): `unallocated` segments whole,
    and the inactive part of allocated segments (covered time below the activity rule).
    """
    free = seg.filter(pl.col("allocation_id").is_null())
    ev = _event_hits(free, events, UNALLOCATED_EVENT_KINDS)
    qh = _queue_hits(free, queue, period)
    free = (
        free.select("s_idx", "cap_h")
        .join(ev, on="s_idx", how="left")
        .join(qh, on="s_idx", how="left")
        .with_columns(
            pl.when(pl.col("rank").is_not_null())
            .then(pl.col("rank").replace_strict(dict(enumerate(UNALLOCATED_EVENT_KINDS)), return_dtype=pl.String))
            .when(pl.col("qrank") == 0)
            .then(pl.lit("quota"))
            .when(pl.col("qrank") == 1)
            .then(pl.lit("fragmentation"))
            .otherwise(pl.lit("no_demand"))
            .alias("cause"),
            pl.lit("unallocated").alias("kind"),
            pl.col("cap_h").alias("gpu_hours"),
            pl.lit(1.0).alias("idle_frac"),
        )
        .join(seg.select("s_idx", "kwh_gpu"), on="s_idx")
        .rename({"kwh_gpu": "energy_kwh_gpu"})
        .select("s_idx", "kind", "cause", "gpu_hours", "idle_frac", "energy_kwh_gpu")
    )

    held = seg.filter(pl.col("allocation_id").is_not_null()).with_columns(
        (pl.col("covered_h") - pl.col("active_h")).clip(lower_bound=0.0).alias("inactive_h")
    )
    hev = _event_hits(held, events, ALLOCATED_EVENT_KINDS)
    held = held.filter(pl.col("inactive_h") > 0).join(hev, on="s_idx", how="left")
    kwh = 1 / 3_600_000.0
    by_event = held.filter(pl.col("rank").is_not_null()).select(
        "s_idx",
        pl.col("rank").replace_strict(dict(enumerate(ALLOCATED_EVENT_KINDS)), return_dtype=pl.String).alias("cause"),
        pl.col("inactive_h").alias("gpu_hours"),
        (pl.col("idle_joules") * kwh).alias("energy_kwh_gpu"),
    )
    # Without an event: the part idle while a sibling card of the job worked is oversized_request,
    # the rest underutilized.
    rest = held.filter(pl.col("rank").is_null()).with_columns(
        pl.min_horizontal("oversized_h", "inactive_h").alias("over_h"),
        pl.min_horizontal("oversized_joules", "idle_joules").alias("over_j"),
    )
    oversized = rest.filter(pl.col("over_h") > 0).select(
        "s_idx", pl.lit("oversized_request").alias("cause"), pl.col("over_h").alias("gpu_hours"),
        (pl.col("over_j") * kwh).alias("energy_kwh_gpu"),
    )
    under = rest.filter(pl.col("inactive_h") - pl.col("over_h") > 1e-12).select(
        "s_idx", pl.lit("underutilized").alias("cause"), (pl.col("inactive_h") - pl.col("over_h")).alias("gpu_hours"),
        ((pl.col("idle_joules") - pl.col("over_j")).clip(lower_bound=0.0) * kwh).alias("energy_kwh_gpu"),
    )
    held = (
        pl.concat([by_event, oversized, under])
        .join(seg.select("s_idx", "cap_h"), on="s_idx")
        .with_columns(pl.lit("allocated").alias("kind"), (pl.col("gpu_hours") / pl.col("cap_h")).alias("idle_frac"))
        .select("s_idx", "kind", "cause", "gpu_hours", "idle_frac", "energy_kwh_gpu")
    )
    return pl.concat([free, held])


# One line per cause: what to do about it (the backlog's "suggested action").
# Drivers that spread money by energy rather than time (allocation.spread_costs).
ENERGY_DRIVERS = ("energy", "measured_energy")

ACTIONS = {
    "no_demand": "shrink, lend out or re-price the pool: cards sat free with nothing queued",
    "quota": "raise or rebalance quotas: jobs waited on quota while cards were free",
    "fragmentation": "consolidate placement or allow smaller shapes: free cards fit no queued job",
    "maintenance": "shorten maintenance windows or move them off-peak",
    "degraded_hardware": "repair or replace the cards listed",
    "network_bottleneck": "check the fabric for the jobs listed",
    "storage_bottleneck": "add storage bandwidth or cache datasets for the jobs listed",
    "data_loading": "tune data loaders (workers, prefetch, caching) for the jobs listed",
    "oversized_request": "request fewer cards: jobs listed",
    "underutilized": "right-size, batch or share the allocations listed",
}

CAPACITY_UNIT = (
    "capacity units: a whole card = 1; a MIG instance or fractional card counts as its capacity "
    "(e.g. 3g.40gb on a 7-slice card = 3/7), so quotas, allocation and idle add up to physical cards"
)


def detail(seg: pl.DataFrame, pieces: pl.DataFrame, money: pl.DataFrame) -> pl.DataFrame:
    """Idle pieces with their card, pool, owner, day and cost: the lineage of every idle figure.

    `money` is the spread before any idle chargeback, so an idle piece shows what that idle
    time cost whatever the idle treatment. Unallocated idle carries all of its segment's money.
    Allocated idle carries the holder's cost of that time, each dollar by what it paid for:
    time-driven money by the piece's share of the segment's time; money spread by energy by the
    piece's share of the segment's joules; measured energy by the joules drawn while inactive,
    priced at the tariff in force when they were drawn (`idle_energy_cost`), split between the
    causes of that segment by their joules. So a held card that idled through a cheap hour and
    worked through a dear one is not charged the average price for its idle time.
    """
    by_driver = pl.col("driver")
    seg_cost = (
        money.lazy().filter(pl.col("s_idx").is_not_null())
        .group_by("s_idx")
        .agg(
            pl.col("amount").sum().alias("seg_cost"),
            pl.col("amount").filter(~by_driver.is_in(ENERGY_DRIVERS).fill_null(False)).sum().alias("_time"),
            pl.col("amount").filter(by_driver == "energy").sum().alias("_by_j"),
            pl.col("amount").filter(by_driver == "measured_energy").sum().alias("_measured"),
        )
        .collect()
    )
    cols = ["s_idx", "gpu_id", "pool", "node", "accelerator", "allocation_id", "job_id", "owner", "source",
            "tenant", "project", "model", "workload", "day", "t0", "t1"]
    kwh = 1 / 3_600_000.0
    piece_j = pl.col("energy_kwh_gpu") / kwh

    def share(num: pl.Expr, den: pl.Expr) -> pl.Expr:
        return pl.when(den > 0).then(num / den).otherwise(0.0)

    held_cost = (
        pl.col("_time") * pl.col("idle_frac")
        + pl.col("_by_j") * share(piece_j, pl.col("_joules"))
        + pl.col("_measured") * share(pl.col("_idle_energy_cost"), pl.col("_energy_cost"))
        * share(piece_j, pl.col("_idle_joules"))
    )
    return (
        pieces.join(seg.select(*cols, pl.col("joules").alias("_joules"), pl.col("idle_joules").alias("_idle_joules"),
                               pl.col("energy_cost").alias("_energy_cost"),
                               pl.col("idle_energy_cost").alias("_idle_energy_cost")), on="s_idx")
        .join(seg_cost, on="s_idx", how="left")
        .with_columns(pl.col("seg_cost", "_time", "_by_j", "_measured").fill_null(0.0))
        .with_columns(
            pl.when(pl.col("kind") == "unallocated").then(pl.col("seg_cost")).otherwise(held_cost).alias("cost")
        )
        .drop("seg_cost", "_time", "_by_j", "_measured", "_joules", "_idle_joules", "_energy_cost",
              "_idle_energy_cost")
    )


def by_cause(idle_detail: pl.DataFrame, keys: tuple[str, ...] = ()) -> pl.DataFrame:
    """GPU-hours, GPU energy and cost per (kind, cause[, keys])."""
    return (
        idle_detail.group_by("kind", "cause", *keys)
        .agg(pl.col("gpu_hours").sum(), pl.col("energy_kwh_gpu").sum(), pl.col("cost").sum())
        .sort(["kind", "cost", "cause", *keys], descending=[True, True, False] + [False] * len(keys))
    )


def backlog(idle_detail: pl.DataFrame, top: int = 5) -> pl.DataFrame:
    """The idle backlog: cause, GPU-hours, cost, share of idle hours, top offenders, action."""
    t = by_cause(idle_detail)
    total = t["gpu_hours"].sum() or 1.0
    # Offenders: jobs (or allocations) for allocated idle, cards for unallocated idle.
    who = idle_detail.with_columns(
        pl.when(pl.col("kind") == "allocated")
        .then(pl.coalesce("job_id", "allocation_id"))
        .otherwise(pl.col("gpu_id"))
        .alias("offender")
    )
    off = (
        who.group_by("kind", "cause", "offender")
        .agg(pl.col("gpu_hours").sum())
        .sort(["gpu_hours", "offender"], descending=[True, False])
        .group_by("kind", "cause", maintain_order=True)
        .agg(pl.col("offender").head(top).alias("top_offenders"))
    )
    return (
        t.join(off, on=["kind", "cause"], how="left")
        .with_columns(
            (pl.col("gpu_hours") / total).alias("share_of_idle"),
            pl.col("cause").replace_strict(ACTIONS, default="").alias("action"),
        )
        .sort(["gpu_hours", "cause"], descending=[True, False])
    )


def capacity_over_time(seg: pl.DataFrame, every: str = "1h") -> pl.DataFrame:
    """Per pool and hour: available, allocated and active GPU-hours and the allocation ratio.

    Segments are split at hour edges; active time inside a segment is taken as spread evenly
    over it (segments are cut at every tariff, cost and day edge, so they are short).
    """
    s = split_by(seg.select("pool", "t0", "t1", "cap_h", "alloc_h", "active_h", "dur_s"), every)
    return (
        s.group_by("pool", "bucket")
        .agg(
            (pl.col("cap_h") * pl.col("f")).sum().alias("available_gpu_hours"),
            (pl.col("alloc_h") * pl.col("f")).sum().alias("allocated_gpu_hours"),
            (pl.col("active_h") * pl.col("f")).sum().alias("active_gpu_hours"),
        )
        .with_columns(
            pl.when(pl.col("available_gpu_hours") > 0)
            .then(pl.col("allocated_gpu_hours") / pl.col("available_gpu_hours"))
            .alias("allocation_ratio")
        )
        .sort("pool", "bucket")
    )


def quota_use(seg: pl.DataFrame, quotas: pl.DataFrame, period_hours: float) -> pl.DataFrame:
    """Per tenant and pool: quota vs average and peak allocated capacity (capacity units)."""
    held = seg.filter(pl.col("allocation_id").is_not_null() & pl.col("tenant").is_not_null())
    avg = held.group_by("tenant", "pool").agg((pl.col("alloc_h").sum() / period_hours).alias("avg_allocated"))
    # Peak: sweep the +capacity / -capacity steps of every held segment in time order.
    steps = pl.concat(
        [
            held.select("tenant", "pool", pl.col("t0").alias("t"), (pl.col("capacity") * pl.col("eff")).alias("d")),
            held.select("tenant", "pool", pl.col("t1").alias("t"), -(pl.col("capacity") * pl.col("eff")).alias("d")),
        ]
    )
    peak = (
        steps.group_by("tenant", "pool", "t")
        .agg(pl.col("d").sum())
        .sort("tenant", "pool", "t")
        .with_columns(pl.col("d").cum_sum().over("tenant", "pool").alias("level"))
        .group_by("tenant", "pool")
        .agg(pl.col("level").max().alias("peak_allocated"))
    )
    use = avg.join(peak, on=["tenant", "pool"], how="full", coalesce=True)
    q = quotas.select("tenant", "pool", pl.col("gpus").alias("quota"))
    out = q.join(use, on=["tenant", "pool"], how="full", coalesce=True).with_columns(
        pl.col("avg_allocated", "peak_allocated").fill_null(0.0)
    )
    return out.with_columns(
        pl.when(pl.col("quota") > 0).then(pl.col("peak_allocated") / pl.col("quota")).alias("peak_quota_use"),
        pl.when(pl.col("quota") > 0).then(pl.col("avg_allocated") / pl.col("quota")).alias("avg_quota_use"),
    ).sort("tenant", "pool")
