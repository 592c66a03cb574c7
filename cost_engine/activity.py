"""Telemetry samples laid onto the ledger's intervals: covered, active and util-weighted time, joules."""

from __future__ import annotations

import polars as pl

from .config import Activity
from .ledger import seconds


def sample_intervals(telemetry: pl.DataFrame, max_gap_s: float) -> pl.DataFrame:
    """Each sample stands for [ts, next ts) of its card, capped at max_gap_s; with its joules.

    Energy: the counter delta when both ends exist, the interval is not capped and the
    delta is >= 0; otherwise (reset, no counter, capped gap) power x time; unknown when
    neither exists.
    """
    cap = pl.duration(microseconds=int(max_gap_s * 1_000_000))
    t = telemetry.sort("gpu_id", "ts").with_columns(
        pl.col("ts").shift(-1).over("gpu_id").alias("next_ts"),
        pl.col("energy_j").shift(-1).over("gpu_id").alias("next_energy_j"),
    )
    t = t.with_columns(
        pl.min_horizontal(pl.col("next_ts"), pl.col("ts") + cap).alias("t_end"),
        (pl.col("next_ts").is_not_null() & (pl.col("next_ts") <= pl.col("ts") + cap)).alias("uncapped"),
    ).with_columns(seconds(pl.col("t_end") - pl.col("ts")).alias("dt_s"))
    delta = pl.col("next_energy_j") - pl.col("energy_j")
    counter_ok = pl.col("uncapped") & delta.is_not_null() & (delta >= 0)
    t = t.with_columns(
        pl.when(counter_ok)
        .then(delta)
        .when(pl.col("power_w").is_not_null())
        .then(pl.col("power_w") * pl.col("dt_s"))
        .otherwise(None)
        .alias("joules"),
        (pl.col("uncapped") & delta.is_not_null() & (delta < 0)).alias("counter_reset"),
    )
    return t.filter(pl.col("dt_s") > 0).select(
        "gpu_id", "ts", "t_end", "dt_s", "util_pct", "power_w", "joules", "counter_reset"
    )


def pieces(samples: pl.DataFrame, intervals: pl.DataFrame) -> pl.DataFrame:
    """Cut sample intervals at the ledger's interval edges: one row per (sample, interval) overlap.

    Most samples sit inside one interval; only those straddling an edge are expanded, so the
    cost is linear in the telemetry (sorted as-of joins, no range join over all pairs).
    """
    iv = intervals.select("e_idx", "gpu_id", "t0", "t1").sort("gpu_id", "t0")
    # sample_intervals returns samples sorted by (gpu_id, ts): no re-sort needed.
    s = samples.join_asof(
        iv.select("gpu_id", pl.col("t0").alias("ts"), pl.col("e_idx").alias("e_a"), pl.col("t1").alias("a_t1")),
        on="ts",
        by="gpu_id",
        strategy="backward",
        check_sortedness=False,  # both sides are sorted by (gpu_id, time)
    )
    # The common case: the sample lies wholly inside the interval holding its start.
    inside = pl.col("e_a").is_not_null() & (pl.col("t_end") <= pl.col("a_t1"))
    simple = s.filter(inside).select(
        pl.exclude("e_a", "a_t1"), pl.col("e_a").alias("e_idx"), pl.col("dt_s").alias("ov_s"), pl.lit(1.0).alias("frac")
    )
    # The rest straddles an edge (or starts before the card's first interval, or in a hole):
    # find the interval holding its last instant and expand the range between.
    rest = s.filter(~inside).drop("a_t1")
    if rest.height == 0:
        return simple
    rest = rest.with_columns((pl.col("t_end") - pl.duration(microseconds=1)).alias("t_last")).sort("gpu_id", "t_last")
    rest = rest.join_asof(
        iv.select("gpu_id", pl.col("t0").alias("t_last"), pl.col("e_idx").alias("e_b")),
        on="t_last",
        by="gpu_id",
        strategy="backward",
        check_sortedness=False,  # sorted just above
    )
    firsts = iv.group_by("gpu_id").agg(pl.col("e_idx").min().alias("e_min"))
    spread = (
        rest.drop_nulls("e_b")
        .join(firsts, on="gpu_id", how="left")
        .with_columns(pl.coalesce("e_a", "e_min").alias("e_a"))
        .with_columns(pl.int_ranges("e_a", pl.col("e_b") + 1).alias("e_idx"))
        .explode("e_idx")
        .drop("e_a", "e_b", "e_min", "t_last")
        .join(iv.select("e_idx", "t0", "t1"), on="e_idx")
        .with_columns(seconds(pl.min_horizontal("t_end", "t1") - pl.max_horizontal("ts", "t0")).alias("ov_s"))
        .filter(pl.col("ov_s") > 0)
        .with_columns((pl.col("ov_s") / pl.col("dt_s")).alias("frac"))
        .drop("t0", "t1")
    )
    return pl.concat([simple, spread.select(simple.columns)])



def interval_activity(
    telemetry: pl.DataFrame, intervals: pl.DataFrame, rule: Activity, jobs: pl.DataFrame | None = None
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Per ledger interval: covered_s, active_s, util_s (util% x s), joules, energy-known seconds.

    `jobs` (e_idx, job_id) names the multi-card job holding each interval; for those, the
    inactive seconds during which another card of the same job was busy are counted too
    (the oversized-request idle cause), at sample resolution.
    Returns (per-interval frame, samples frame, oversized frame (e_idx, job_id, over_s, over_j)).
    """
    # Work on integer card codes: sorts, as-of joins and group-bys over tens of millions of
    # samples are several times cheaper than on UUID strings, and every copy is smaller.
    codes = intervals.select("gpu_id").unique().sort("gpu_id").with_row_index("gc")
    tele = (
        telemetry.select("ts", "gpu_id", "util_pct", "power_w", "energy_j")
        .join(codes, on="gpu_id", how="inner")
        .select(pl.col("gc").alias("gpu_id"), "ts", "util_pct", "power_w", "energy_j")
    )
    iv = intervals.select("e_idx", "gpu_id", "t0", "t1").join(codes, on="gpu_id").select(
        "e_idx", pl.col("gc").alias("gpu_id"), "t0", "t1"
    )
    samples = sample_intervals(tele, rule.max_sample_gap_s)
    p = pieces(samples, iv)
    if rule.mode == "threshold":
        busy = pl.when(pl.col("util_pct") >= rule.threshold_pct).then(1.0).otherwise(0.0)
    else:
        busy = pl.col("util_pct") / 100.0
    active = pl.col("ov_s") * busy
    agg = p.group_by("e_idx").agg(
        pl.col("ov_s").sum().alias("covered_s"),
        active.sum().alias("active_s"),
        (pl.col("ov_s") * pl.col("util_pct")).sum().alias("util_s"),
        (pl.col("joules") * pl.col("frac")).sum().alias("joules"),
        # Joules drawn while inactive: what allocated idle time cost in energy.
        (pl.col("joules") * pl.col("frac") * (1.0 - busy)).sum().alias("idle_joules"),
        pl.when(pl.col("joules").is_not_null()).then(pl.col("ov_s")).otherwise(0.0).sum().alias("energy_s"),
    )
    out = intervals.select("e_idx").join(agg, on="e_idx", how="left").with_columns(
        pl.col("covered_s", "active_s", "util_s", "joules", "idle_joules", "energy_s").fill_null(0.0)
    )
    names = dict(zip(codes["gc"].to_list(), codes["gpu_id"].to_list()))
    samples = samples.with_columns(pl.col("gpu_id").replace_strict(names, return_dtype=pl.String))
    return out, samples, _oversized(p, busy, jobs)


def _oversized(p: pl.DataFrame, busy: pl.Expr, jobs: pl.DataFrame | None) -> pl.DataFrame:
    """Inactive seconds of a card while a sibling card of the same job was busy (same minute)."""
    empty = pl.DataFrame(schema={"e_idx": pl.Int64, "job_id": pl.String, "over_s": pl.Float64, "over_j": pl.Float64})
    if jobs is None or jobs.height == 0:
        return empty
    jp = p.select("e_idx", "gpu_id", "ts", "ov_s", "joules", "frac", busy.alias("busy")).join(jobs, on="e_idx")
    jp = jp.with_columns(pl.col("ts").dt.truncate("1m").alias("minute"))
    # Per (job, minute): how many cards were busy, and whether this card was one of them.
    card_busy = jp.group_by("job_id", "minute", "gpu_id").agg((pl.col("busy") > 0).any().alias("self_busy"))
    n_busy = card_busy.group_by("job_id", "minute").agg(pl.col("self_busy").sum().alias("n_busy"))
    idle = (
        jp.filter(pl.col("busy") < 1)
        .join(card_busy, on=["job_id", "minute", "gpu_id"])
        .join(n_busy, on=["job_id", "minute"])
        .filter(pl.col("n_busy") - pl.col("self_busy").cast(pl.UInt32) > 0)
    )
    return idle.group_by("e_idx", "job_id").agg(
        (pl.col("ov_s") * (1 - pl.col("busy"))).sum().alias("over_s"),
        (pl.col("joules").fill_null(0.0) * pl.col("frac") * (1 - pl.col("busy"))).sum().alias("over_j"),
    )


def empty_oversized() -> pl.DataFrame:
    return _oversized(pl.DataFrame(), pl.lit(0.0), None)


def empty_activity(intervals: pl.DataFrame) -> pl.DataFrame:
    return intervals.select("e_idx").with_columns(
        *(pl.lit(0.0).alias(c) for c in ("covered_s", "active_s", "util_s", "joules", "idle_joules", "energy_s"))
    )


__all__ = ["sample_intervals", "pieces", "interval_activity", "empty_activity", "empty_oversized"]
