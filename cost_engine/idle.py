"""Idle card-time classified by cause (first match wins), so an idle rate becomes a backlog."""

from __future__ import annotations

import polars as pl

from .contract import TS
from .ledger import Period

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
        .select("s_idx", "kind", "cause", "gpu_hours", "idle_frac")
    )

    held = seg.filter(pl.col("allocation_id").is_not_null()).with_columns(
        (pl.col("covered_h") - pl.col("active_h")).clip(lower_bound=0.0).alias("gpu_hours")
    )
    # oversized_request: this card idle while another card of the same job worked at that time.
    sib = (
        held.filter(pl.col("job_id").is_not_null())
        .group_by("job_id", "t0", "t1")
        .agg(pl.col("active_h").max().alias("sib_active"), pl.len().alias("n"))
    )
    hev = _event_hits(held, events, ALLOCATED_EVENT_KINDS)
    held = (
        held.filter(pl.col("gpu_hours") > 0)
        .join(hev, on="s_idx", how="left")
        .join(sib, on=["job_id", "t0", "t1"], how="left")
        .with_columns(
            pl.when(pl.col("rank").is_not_null())
            .then(pl.col("rank").replace_strict(dict(enumerate(ALLOCATED_EVENT_KINDS)), return_dtype=pl.String))
            .when((pl.col("n") > 1) & (pl.col("active_h") <= 0) & (pl.col("sib_active") > 0))
            .then(pl.lit("oversized_request"))
            .otherwise(pl.lit("underutilized"))
            .alias("cause"),
            pl.lit("allocated").alias("kind"),
            (pl.col("gpu_hours") / pl.col("cap_h")).alias("idle_frac"),
        )
        .select("s_idx", "kind", "cause", "gpu_hours", "idle_frac")
    )
    return pl.concat([free, held])
