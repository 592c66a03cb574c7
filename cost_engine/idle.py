"""Idle card-time classified by cause (first match wins), so an idle rate becomes a backlog."""

from __future__ import annotations

import polars as pl

from .contract import TS
from .intervals import Precedence, StepIntegral, WeightedPrecedence, micros
from .ledger import Period, split_by

UNALLOCATED_EVENT_KINDS = ("degraded_hardware", "maintenance")
ALLOCATED_EVENT_KINDS = ("network_bottleneck", "storage_bottleneck", "data_loading", "degraded_hardware")


# Queue reasons that explain free cards, in precedence order after the unallocated events.
QUEUE_CAUSES = {"quota": "quota", "resources": "fragmentation"}


def _ranked_events(events: pl.DataFrame, kinds: tuple[str, ...], cards: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Events of `kinds` with their precedence rank: (gpu_id, start, end, rank) for those scoped
    to a card or its node (one row per card of the node) and (pool, start, end, rank) for those
    scoped to a pool."""
    ev = events.filter(pl.col("kind").is_in(list(kinds))).with_columns(
        pl.col("kind").replace_strict({k: i for i, k in enumerate(kinds)}, return_dtype=pl.Int64).alias("rank")
    )
    cols = ("start", "end", "rank")
    on_card = pl.concat(
        [
            ev.filter(pl.col("gpu_id").is_not_null()).select("gpu_id", *cols),
            ev.filter(pl.col("node").is_not_null()).select("node", *cols).join(cards.select("gpu_id", "node"), on="node")
            .select("gpu_id", *cols),
        ]
    )
    on_pool = ev.filter(pl.col("pool").is_not_null()).select("pool", *cols)
    return on_card, on_pool


def _cause_shares(pieces: pl.DataFrame, on_card: pl.DataFrame, on_pool: pl.DataFrame, n: int,
                  prices: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per piece (s_idx, gpu_id, pool, t0, t1) the share of its time won by each of n ranked causes.

    Two precedence timelines (intervals.Precedence) say how long each rank was the first match:
    the card's own (events on it or its node) and its pool's. A card is cut at every event on
    it or its node (engine.card_cuts), so the card's timeline covers a piece wholly or not at
    all, and the time won by a rank <= k is the larger of the two timelines' (m_k). Cause k
    gets m_k - m_(k-1) of the piece; returns s_idx, level (0..n-1; n = none of them), share.

    With `prices` (pool, cs, ce, rate: the price per capacity-hour of the rows in force), also
    `price_share`: the part of what those prices charged the piece that fell in each cause's
    time (intervals.WeightedPrecedence), so a price that changes inside a free segment is paid
    by the cause that held the time then.
    """
    q = pieces.select("s_idx", "gpu_id", "pool", "t0", "t1")
    q = Precedence.of(on_card, "gpu_id", n).won(q, "t0", "t1", "_c")
    pool_line = Precedence.of(on_pool, "pool", n)
    q = pool_line.won(q, "t0", "t1", "_p")
    dur = (micros("t1") - micros("t0")).cast(pl.Float64)
    card = [pl.sum_horizontal(*(f"_c{r}" for r in range(k + 1))) for k in range(n)]
    m = [pl.max_horizontal(card[k], pl.sum_horizontal(*(f"_p{r}" for r in range(k + 1)))) for k in range(n)]

    def shares(m: list[pl.Expr], total: pl.Expr, name: str) -> list[pl.Expr]:
        out = [(m[0] / total).alias(f"{name}0")]
        out += [((m[k] - m[k - 1]) / total).alias(f"{name}{k}") for k in range(1, n)]
        return out + [(1.0 - m[n - 1] / total).alias(f"{name}{n}")]

    cols = shares(m, dur, "_s")
    if prices is not None:
        q = WeightedPrecedence.of(pool_line, StepIntegral.of(prices, "pool", "cs", "ce", "rate")).weighted(
            q, "t0", "t1", "_v"
        )
        paid = pl.sum_horizontal(*(f"_v{r}" for r in range(n + 1)))
        # Where the card's own cause covers the piece, it takes everything the prices charged.
        money = [pl.when(card[k] > 0).then(paid).otherwise(pl.sum_horizontal(*(f"_v{r}" for r in range(k + 1))))
                 for k in range(n)]
        cols += [pl.when(paid > 0).then(e).otherwise(pl.col(f"_s{k}")).alias(f"_m{k}")
                 for k, e in enumerate(shares(money, paid, "_x"))]
    wide = q.with_columns(cols[: n + 1]).with_columns(cols[n + 1:])
    return pl.concat(
        [wide.select("s_idx", pl.lit(k, dtype=pl.Int64).alias("level"), pl.col(f"_s{k}").alias("share"),
                     pl.col(f"_m{k}" if prices is not None else f"_s{k}").alias("price_share"))
         for k in range(n + 1)]
    ).filter((pl.col("share") > 0) | (pl.col("price_share") > 0))


def _capacity_prices(cost_rates: pl.DataFrame | None, free: pl.DataFrame) -> pl.DataFrame | None:
    """(pool, cs, ce, rate): the price per capacity-hour of every rate and capacity_hours cost row
    in force in each pool (fleet-wide rows once per pool of a free segment)."""
    if cost_rates is None:
        return None
    cap = cost_rates.filter(pl.col("driver") == "capacity_hours")
    pools = free.select("pool").drop_nulls().unique()
    return pl.concat([
        cap.filter(pl.col("pool").is_not_null()).select("pool", "cs", "ce", "rate"),
        cap.filter(pl.col("pool").is_null()).select("cs", "ce", "rate").join(pools, how="cross").select("pool", "cs", "ce", "rate"),
    ])


def classify(seg: pl.DataFrame, events: pl.DataFrame, queue: pl.DataFrame, period: Period,
             cards: pl.DataFrame | None = None, cost_rates: pl.DataFrame | None = None) -> pl.DataFrame:
    """Idle pieces of the ledger with their cause.

    Returns rows (s_idx, kind, cause, gpu_hours, idle_frac, energy_kwh_gpu, tariff_cost: the piece's
    GPU joules priced at the tariff in force when drawn, as facility energy; util_hours: the
    piece's util-weighted hours, what money spread by utilization paid for; price_frac: the
    piece's part of its segment's capacity-hours money, by the prices in force in its time,
    given `cost_rates` (allocation.Spread.cost_rates)): the unallocated
    segments and the inactive part of allocated segments (covered time below the activity
    rule), a segment split between causes by the share of its time each cause wins. A queue
    wait or a pool's event does not cut a card that has no telemetry: its free time is
    spread evenly over the segment, so the cause's share of the time is exact, and a card
    with telemetry is cut at those edges (engine.card_cuts) so its energy is too.
    """
    if cards is None:
        cards = seg.select("gpu_id", "node").unique()
    kwh = 1 / 3_600_000.0

    # Unallocated: degraded hardware, maintenance, then jobs waiting on quota / resources.
    free = seg.filter(pl.col("allocation_id").is_null())
    un_kinds = (*UNALLOCATED_EVENT_KINDS, *QUEUE_CAUSES.values())
    on_card, on_pool = _ranked_events(events, UNALLOCATED_EVENT_KINDS, cards)
    waits = queue.filter(pl.col("reason").is_in(list(QUEUE_CAUSES))).select(
        "pool",
        pl.col("submit").alias("start"),
        pl.col("start").fill_null(pl.lit(period.end, dtype=TS)).alias("end"),
        (pl.col("reason").replace_strict({r: i for i, r in enumerate(QUEUE_CAUSES)}, return_dtype=pl.Int64)
         + len(UNALLOCATED_EVENT_KINDS)).alias("rank"),
    )
    on_pool = pl.concat([on_pool, waits])
    names = pl.col("level").replace_strict(dict(enumerate((*un_kinds, "no_demand"))), return_dtype=pl.String)
    free = (
        _cause_shares(free, on_card, on_pool, len(un_kinds), _capacity_prices(cost_rates, free))
        .join(free.select("s_idx", "cap_h", "kwh_gpu", "energy_cost"), on="s_idx")
        .select(
            "s_idx",
            pl.lit("unallocated").alias("kind"),
            names.alias("cause"),
            (pl.col("cap_h") * pl.col("share")).alias("gpu_hours"),
            pl.col("share").alias("idle_frac"),
            (pl.col("kwh_gpu") * pl.col("share")).alias("energy_kwh_gpu"),
            (pl.col("energy_cost") * pl.col("share")).alias("tariff_cost"),
            pl.lit(0.0).alias("util_hours"),
            pl.col("price_share").alias("price_frac"),
        )
    )

    # Allocated but inactive: bottleneck and hardware events, then oversized requests.
    held = seg.filter(pl.col("allocation_id").is_not_null()).with_columns(
        (pl.col("covered_h") - pl.col("active_h")).clip(lower_bound=0.0).alias("inactive_h")
    ).filter(pl.col("inactive_h") > 0)
    on_card, on_pool = _ranked_events(events, ALLOCATED_EVENT_KINDS, cards)
    n = len(ALLOCATED_EVENT_KINDS)
    shares = _cause_shares(held, on_card, on_pool, n).join(
        held.select("s_idx", "inactive_h", "idle_joules", "idle_energy_cost", "idle_util_h", "oversized_h",
                    "oversized_joules", "oversized_energy_cost", "oversized_util_h"),
        on="s_idx",
    )
    by_event = shares.filter(pl.col("level") < n).select(
        "s_idx",
        pl.col("level").replace_strict(dict(enumerate(ALLOCATED_EVENT_KINDS)), return_dtype=pl.String).alias("cause"),
        (pl.col("inactive_h") * pl.col("share")).alias("gpu_hours"),
        (pl.col("idle_joules") * pl.col("share") * kwh).alias("energy_kwh_gpu"),
        (pl.col("idle_energy_cost") * pl.col("share")).alias("tariff_cost"),
        (pl.col("idle_util_h") * pl.col("share")).alias("util_hours"),
    )
    # Without an event: the part idle while a sibling card of the job worked is oversized_request,
    # the rest underutilized. The telemetry stage prices the oversized joules at the tariff
    # they were drawn at, so neither cause's energy cost depends on where the ledger is cut.
    rest = shares.filter(pl.col("level") == n).with_columns(
        (pl.col("share") * pl.min_horizontal("oversized_h", "inactive_h")).alias("over_h"),
        (pl.col("share") * pl.min_horizontal("oversized_joules", "idle_joules")).alias("over_j"),
        (pl.col("share") * pl.min_horizontal("oversized_energy_cost", "idle_energy_cost")).alias("over_c"),
        (pl.col("share") * pl.min_horizontal("oversized_util_h", "idle_util_h")).alias("over_u"),
        (pl.col("share") * pl.col("inactive_h")).alias("rest_h"),
        (pl.col("share") * pl.col("idle_joules")).alias("rest_j"),
        (pl.col("share") * pl.col("idle_energy_cost")).alias("rest_c"),
        (pl.col("share") * pl.col("idle_util_h")).alias("rest_u"),
    )
    oversized = rest.filter(pl.col("over_h") > 0).select(
        "s_idx", pl.lit("oversized_request").alias("cause"), pl.col("over_h").alias("gpu_hours"),
        (pl.col("over_j") * kwh).alias("energy_kwh_gpu"), pl.col("over_c").alias("tariff_cost"),
        pl.col("over_u").alias("util_hours"),
    )
    under = rest.filter(pl.col("rest_h") - pl.col("over_h") > 1e-12).select(
        "s_idx", pl.lit("underutilized").alias("cause"), (pl.col("rest_h") - pl.col("over_h")).alias("gpu_hours"),
        ((pl.col("rest_j") - pl.col("over_j")).clip(lower_bound=0.0) * kwh).alias("energy_kwh_gpu"),
        (pl.col("rest_c") - pl.col("over_c")).clip(lower_bound=0.0).alias("tariff_cost"),
        (pl.col("rest_u") - pl.col("over_u")).clip(lower_bound=0.0).alias("util_hours"),
    )
    held = (
        pl.concat([by_event, oversized, under])
        .join(seg.select("s_idx", "cap_h"), on="s_idx")
        .with_columns(pl.lit("allocated").alias("kind"), (pl.col("gpu_hours") / pl.col("cap_h")).alias("idle_frac"))
        .with_columns(pl.col("idle_frac").alias("price_frac"))
        .select("s_idx", "kind", "cause", "gpu_hours", "idle_frac", "energy_kwh_gpu", "tariff_cost", "util_hours",
                "price_frac")
    )
    return pl.concat([free, held])


# One line per cause: what to do about it (the backlog's "suggested action").
# Drivers that spread money by energy rather than time (allocation.spread_costs).
ENERGY_DRIVERS = ("energy", "measured_energy")
# Drivers that spread money by what the card did (active time, utilization), not by time held.
ACTIVITY_DRIVERS = ("active_hours", "utilization")

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
    time cost whatever the idle treatment. Unallocated idle carries what its cause's time cost: the
    capacity prices in force while that cause held the free card (`price_frac`, see classify), and
    of the rest of its segment's money the share of the time the cause won.
    Allocated idle carries the holder's cost of that time, each dollar by what it paid for:
    time-driven money by the piece's share of the segment's time; money spread by active hours
    none (it paid for active time); money spread by utilization by the piece's share of the
    segment's util-weighted hours; money spread by energy by the
    piece's share of the segment's joules; measured energy by the joules drawn while inactive,
    priced at the tariff in force when they were drawn (each piece's `tariff_cost`: the
    oversized-request part is priced sample by sample in the telemetry stage). So a held card that idled through a cheap hour and
    worked through a dear one is not charged the average price for its idle time.
    """
    by_driver = pl.col("driver")
    seg_cost = (
        money.lazy().filter(pl.col("s_idx").is_not_null())
        .group_by("s_idx")
        .agg(
            pl.col("amount").sum().alias("seg_cost"),
            pl.col("amount").filter(~by_driver.is_in((*ENERGY_DRIVERS, *ACTIVITY_DRIVERS)).fill_null(False)).sum()
            .alias("_time"),
            pl.col("amount").filter(by_driver == "utilization").sum().alias("_by_util"),
            pl.col("amount").filter(by_driver == "energy").sum().alias("_by_j"),
            pl.col("amount").filter(by_driver == "measured_energy").sum().alias("_measured"),
            pl.col("amount").filter(by_driver == "capacity_hours").sum().alias("_capacity"),
        )
        .collect()
    )
    cols = ["s_idx", "gpu_id", "pool", "node", "accelerator", "allocation_id", "job_id", "owner", "source",
            "tenant", "project", "model", "workload", "day", "t0", "t1"]
    kwh = 1 / 3_600_000.0
    piece_j = pl.col("energy_kwh_gpu") / kwh

    def share(num: pl.Expr, den: pl.Expr) -> pl.Expr:
        return pl.when(den > 0).then(num / den).otherwise(0.0)

    # Measured energy money of a segment is its tariff-priced energy where no power bill covers
    # it: the piece pays its own tariff-priced joules in that proportion.
    # A free piece pays the capacity prices in force in its own time (price_frac); the rest of
    # its segment's money (energy: a card with telemetry is cut at every cause's edge) by time.
    free_cost = (pl.col("seg_cost") - pl.col("_capacity")) * pl.col("idle_frac") + pl.col("_capacity") * pl.col("price_frac")
    # Money spread by active hours paid for active time only: held idle carries none of it.
    held_cost = (
        pl.col("_time") * pl.col("idle_frac")
        + pl.col("_by_util") * share(pl.col("util_hours"), pl.col("_util_h"))
        + pl.col("_by_j") * share(piece_j, pl.col("_joules"))
        + pl.col("_measured") * share(pl.col("tariff_cost"), pl.col("_energy_cost"))
    )
    return (
        pieces.join(seg.select(*cols, pl.col("joules").alias("_joules"), pl.col("energy_cost").alias("_energy_cost"),
                               pl.col("util_h").alias("_util_h")),
                    on="s_idx")
        .join(seg_cost, on="s_idx", how="left")
        .with_columns(pl.col("seg_cost", "_time", "_by_util", "_by_j", "_measured", "_capacity").fill_null(0.0))
        .with_columns(
            pl.when(pl.col("kind") == "unallocated").then(free_cost).otherwise(held_cost).alias("cost")
        )
        .drop("seg_cost", "_time", "_by_util", "_by_j", "_measured", "_capacity", "_joules", "_energy_cost", "_util_h",
              "tariff_cost", "util_hours", "price_frac")
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
