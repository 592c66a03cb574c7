"""What held cards cost per hour: recent pool rates, the cost committed by allocations that run
past the report time, and each tenant's burn rate right now.

A pool's rate is what its owners were charged per allocated GPU-hour over the last days before
the report time (per cost category, so a budget can count only its own categories). Held
card-time after the report time is priced at that rate: a running allocation (or a reservation
starting after the data) is cost that will be booked whatever the forecast says. The burn rate
prices the allocations open at the report time the same way, with the energy part taken from
the cards' last power readings when the telemetry (a live collector's, say) has them.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from .contract import TS, UNATTRIBUTED
from .engine import Computation
from .periods import local_date

RATE_DAYS = 7  # days before the report time a pool's rate per allocated GPU-hour is measured on
ENERGY = "power"  # the category measured energy is booked under

RATES_SCHEMA = pl.Schema({"pool": pl.String, "category": pl.String, "rate": pl.Float64})
HELD_SCHEMA = pl.Schema(
    {"allocation_id": pl.String, "tenant": pl.String, "project": pl.String, "gpu_id": pl.String,
     "pool": pl.String, "share": pl.Float64, "weight": pl.Float64, "start": TS, "end": TS}
)
BURN_SCHEMA = pl.Schema(
    {"tenant": pl.String, "cost_per_hour": pl.Float64, "allocations": pl.Int64, "gpus": pl.Float64,
     "live_cards": pl.Int64, "basis": pl.String}
)


def pool_rates(comp: Computation, as_of: datetime, days: int = RATE_DAYS) -> pl.DataFrame:
    """Per pool and category: owners' cost per allocated GPU-hour over the `days` local days
    before as_of (pool, category, rate). Direct costs (no pool) carry no rate."""
    recent = _recent(comp, as_of, days)
    cost = (
        comp.money.lazy()
        .filter((pl.col("dest") == "owner") & pl.col("pool").is_not_null() & recent)
        .group_by("pool", "category")
        .agg(pl.col("amount").sum())
    )
    held = comp.seg.lazy().filter(recent).group_by("pool").agg(pl.col("alloc_h").sum())
    return (
        cost.join(held, on="pool")
        .filter(pl.col("alloc_h") > 0)
        .select("pool", "category", (pl.col("amount") / pl.col("alloc_h")).alias("rate"))
        .sort("pool", "category")
        .collect()
    )


def held_after(comp: Computation, as_of: datetime, still_open: pl.Series | None = None) -> pl.DataFrame:
    """Allocations that hold card-time after as_of and are known at as_of: running then, or
    starting after the data (reservations). Each with its owner, card, pool, share of the card
    and weight (card capacity x share: GPU-hours per hour held).

    `still_open`: allocation ids held at as_of although their recorded end is not after it
    (cut_at_export: closed by the export, not by the job).

    A model service's card-time is the callers' under inference recharge (as the engine books
    it): its rows go to the projects that paid for the model over the RATE_DAYS before as_of,
    in those shares; a model nobody called then stays with the service's owner.
    """
    alloc = comp.bundle["allocations"]
    t = pl.lit(as_of, TS)
    known = (pl.col("start") <= t) | (pl.col("start") >= pl.lit(comp.period.end, TS))
    running = pl.col("end") > t
    if still_open is not None and still_open.len():
        running = running | pl.col("allocation_id").is_in(still_open.implode())
    a = alloc.filter(running & known)
    if a.height == 0:
        return pl.DataFrame(schema=HELD_SCHEMA)
    a = comp.ownership.resolve(
        a.select("allocation_id", "owner", "source", "gpu_id", "share", "start", "end", "workload", "model"))
    a = a.join(_cards(comp), on="gpu_id", how="left").with_columns(
        (pl.col("capacity").fill_null(1.0) * pl.col("share")).alias("weight"))
    if comp.config.allocation.inference_recharge != "none":
        callers = _callers(comp, as_of)
        served = (pl.col("workload") == "inference") & pl.col("model").is_in(callers["model"].unique().implode())
        moved = (
            a.filter(served).drop("tenant", "project").join(callers, on="model")
            .with_columns(pl.col("weight") * pl.col("f"), pl.col("share") * pl.col("f"))
        )
        a = pl.concat([a.filter(~served.fill_null(False)), moved.select(a.columns)])
    return a.select(list(HELD_SCHEMA)).cast(dict(HELD_SCHEMA))


def _callers(comp: Computation, as_of: datetime) -> pl.DataFrame:
    """(model, tenant, project, f): who paid each model's recharged cost recently, as shares."""
    recharged = pl.col("origin").str.contains("recharge", literal=True) & pl.col("model").is_not_null()
    return (
        comp.money.lazy()
        .filter(recharged & _recent(comp, as_of))
        .group_by("model", "tenant", "project")
        .agg(pl.col("amount").sum())
        .filter(pl.col("amount") > 0)
        .with_columns((pl.col("amount") / pl.col("amount").sum().over("model")).alias("f"))
        .select("model", "tenant", "project", "f")
        .collect()
    )


def _recent(comp: Computation, as_of: datetime, days: int = RATE_DAYS) -> pl.Expr:
    """Money rows of the `days` local days up to as_of."""
    last = local_date(as_of - timedelta(microseconds=1), comp.period.timezone)
    return pl.col("day").is_between(last - timedelta(days=days - 1), last)


def _cards(comp: Computation) -> pl.DataFrame:
    """gpu_id -> pool, capacity: the ledger's cards, then the inventory's (cards in service later)."""
    seen = comp.ledger.cards.select("gpu_id", "pool", "capacity")
    inv = comp.bundle["inventory"].select("gpu_id", "pool", "capacity")
    return pl.concat([seen, inv]).unique("gpu_id", keep="first")


def burn_rate(comp: Computation, as_of: datetime, rates: pl.DataFrame | None = None) -> pl.DataFrame:
    """$/hour per tenant from the allocations open at as_of (BURN_SCHEMA), highest first.

    Each open allocation costs weight x its pool's rate per GPU-hour; the energy part of the rate
    is replaced by the card's last power reading (share of it: the allocation's share) x the
    facility factor x the tariff then, when the card has a reading within max_sample_gap_s
    before as_of. `basis` says which: "live power" for a tenant with any card read live, else
    "recent average". A pool without a recent rate leaves the tenant's figure unknown (null).
    """
    rates = rates if rates is not None else pool_rates(comp, as_of)
    # An export closes the jobs still running at its own time (slurm: End "Unknown" becomes
    # --end-at; kube: the window's end): they were running when the data was taken, the data's
    # latest word on "now". So they count as open (export_cut).
    held = held_after(comp, as_of, cut_at_export(comp, as_of)).filter(pl.col("start") <= pl.lit(as_of, TS))
    if held.height == 0:
        return pl.DataFrame(schema=BURN_SCHEMA)
    per_pool = rates.group_by("pool").agg(
        pl.col("rate").filter(pl.col("category") != ENERGY).sum().alias("rate_other"),
        pl.col("rate").filter(pl.col("category") == ENERGY).sum().alias("rate_energy"),
    )
    live = last_power(comp, as_of, held["gpu_id"].unique().to_list())
    e = comp.config.energy
    price = energy_price(comp, as_of)
    rows = (
        held.join(per_pool, on="pool", how="left")
        .join(live, on="gpu_id", how="left")
        .with_columns(
            # kW of the card x facility factor x $/kWh = $/h of facility energy, the allocation's share of it
            (pl.col("power_w") / 1000 * e.server_overhead * e.pue * price * pl.col("share")).alias("live_energy"),
        )
        .with_columns(
            (pl.col("weight") * pl.col("rate_other")
             + pl.coalesce(pl.col("live_energy"), pl.col("weight") * pl.col("rate_energy").fill_null(0.0))
             ).alias("cost_per_hour")
        )
    )
    return (
        rows.with_columns(pl.col("tenant").fill_null(UNATTRIBUTED))
        .group_by("tenant")
        .agg(
            # One pool without a rate makes the tenant's total unknown, not smaller.
            pl.when(pl.col("rate_other").is_null().any()).then(None).otherwise(pl.col("cost_per_hour").sum())
            .alias("cost_per_hour"),
            pl.len().cast(pl.Int64).alias("allocations"),
            pl.col("weight").sum().alias("gpus"),
            pl.col("gpu_id").filter(pl.col("live_energy").is_not_null()).n_unique().cast(pl.Int64).alias("live_cards"),
        )
        .with_columns(
            pl.when(pl.col("live_cards") > 0).then(pl.lit("live power")).otherwise(pl.lit("recent average"))
            .alias("basis")
        )
        .select(list(BURN_SCHEMA))
        .sort("cost_per_hour", "tenant", descending=[True, False], nulls_last=True)
    )


def cut_at_export(comp: Computation, at: datetime) -> pl.Series:
    """allocation_id of the allocations an export closed at its own time, as seen from `at`: per
    allocation source whose data ends at or before `at` (none of its allocations runs past
    `at`), those ending exactly where its latest one ends. A job that truly finished on that
    very instant cannot be told from one the export cut there, and counts too."""
    a = comp.bundle["allocations"].filter(pl.col("start") < pl.lit(at, TS))
    last = pl.col("end").max().over("source")
    return a.filter((last <= pl.lit(at, TS)) & (pl.col("end") == last))["allocation_id"]


def last_power(comp: Computation, as_of: datetime, gpu_ids: list[str]) -> pl.DataFrame:
    """(gpu_id, power_w) of each card's last sample with a power reading in the max_sample_gap_s
    before as_of: the readings that still stand for the present (a sample covers until the next,
    capped at the gap)."""
    schema = {"gpu_id": pl.String, "power_w": pl.Float64}
    if not gpu_ids:
        return pl.DataFrame(schema=schema)
    gap = timedelta(seconds=comp.config.activity.max_sample_gap_s)
    codes = pl.DataFrame({"gpu_id": gpu_ids, "gc": gpu_ids})
    with comp.telemetry.reader() as r:
        samples = r.window(as_of - gap, as_of, codes)
    return (
        samples.filter(pl.col("power_w").is_not_null())
        .sort("ts")
        .group_by("gpu_id")
        .agg(pl.col("power_w").last())
        .cast(schema)
    )


def energy_price(comp: Computation, at: datetime) -> float:
    """$/kWh in force at `at`: the tariff covering it, else the flat price."""
    t = comp.bundle["tariffs"].filter((pl.col("start") <= at) & (pl.col("end") > at)).sort("start")
    return float(t["price_per_kwh"][-1]) if t.height else comp.config.energy.flat_price_per_kwh
