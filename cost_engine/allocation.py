"""Money onto owners: cost rows, rates and measured energy spread by drivers over ledger segments.

Every input dollar ends in exactly one destination row: an owner's project, `idle`
(unallocated capacity) or `unattributed` (an owner key that maps to no project).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from .config import Config
from .contract import DEFAULT_DRIVER, IDLE, TS, UNATTRIBUTED
from .intervals import Coverage, StepIntegral, micros
from .ledger import Period, day_edges, seconds

# Drivers whose quantity lives on ledger segments (card-time), and the segment column holding it.
SEGMENT_DRIVERS = {
    "capacity_hours": "cap_h",
    "gpu_hours": "alloc_h",
    "active_hours": "active_h",
    "utilization": "util_h",
    "energy": "kwh_fac",
}
# Drivers whose quantity lives on projects (tokens sent, requests, fixed shares, presence).
PROJECT_DRIVERS = ("tokens", "requests", "shares", "even")

MONEY_SCHEMA = pl.Schema(
    {
        "dest": pl.String,  # owner | idle | unattributed
        "tenant": pl.String,
        "project": pl.String,
        "u_source": pl.String,  # for unattributed: the source and key that mapped nowhere
        "u_key": pl.String,
        "allocation_id": pl.String,
        "s_idx": pl.Int64,
        "gpu_id": pl.String,
        "pool": pl.String,
        "model": pl.String,
        "workload": pl.String,
        "day": pl.Date,
        "category": pl.String,
        "origin": pl.String,  # rate | cost | energy | direct | unspread
        "driver": pl.String,  # how it was spread (the FOCUS allocation method); null for direct costs
        "cost_id": pl.String,
        "amount": pl.Float64,
    }
)


@dataclass
class Spread:
    money: pl.DataFrame  # MONEY_SCHEMA
    inputs: pl.DataFrame  # origin, id, category, pool, amount (the input side of reconciliation)
    # Per cost row and rate row spread over segments: its price per driver unit while in force
    # (cost_id, pool (null = the fleet), cs, ce, driver, category, rate, is_rate), for lineage.
    cost_rates: pl.DataFrame
    gaps: list[tuple[str, str]]


COST_RATES_SCHEMA = pl.Schema(
    {"cost_id": pl.String, "pool": pl.String, "cs": TS, "ce": TS, "driver": pl.String, "category": pl.String,
     "rate": pl.Float64, "is_rate": pl.Boolean}
)


def driver_of(config: Config) -> pl.Expr:
    """The driver of a cost row: its own, else the config override, else the category default."""
    overrides = dict(DEFAULT_DRIVER) | dict(config.allocation.drivers)
    return pl.coalesce(pl.col("driver"), pl.col("category").replace_strict(overrides, default="gpu_hours"))


def in_boundary(costs: pl.DataFrame, period: Period, config: Config) -> pl.DataFrame:
    """Cost rows inside the boundary with `cs`/`ce` (their span clipped to the period, maybe
    empty), `drv` (their driver) and `amount_in` (the amount pro rata to the overlap)."""
    p0, p1 = pl.lit(period.start, dtype=TS), pl.lit(period.end, dtype=TS)
    c = costs.filter(pl.col("category").is_in(sorted(config.boundary.included))).with_columns(
        pl.max_horizontal("start", p0).alias("cs"), pl.min_horizontal("end", p1).alias("ce"), driver_of(config).alias("drv")
    )
    return c.with_columns(
        pl.when(pl.col("ce") > pl.col("cs"))
        .then(pl.col("amount") * seconds(pl.col("ce") - pl.col("cs")) / seconds(pl.col("end") - pl.col("start")))
        .otherwise(0.0)
        .alias("amount_in")
    )


# Segment columns that money rows keep or need to find their destination.
_SEG_KEEP = ("s_idx", "gpu_id", "pool", "day", "allocation_id", "owner", "source", "project", "tenant",
             "model", "workload")


def destination(frame: pl.DataFrame) -> pl.DataFrame:
    """dest/u_source/u_key from allocation_id, project and owner key columns."""
    return frame.with_columns(
        pl.when(pl.col("allocation_id").is_null() & pl.col("project").is_null() & pl.col("owner").is_null())
        .then(pl.lit(IDLE))
        .when(pl.col("project").is_null())
        .then(pl.lit(UNATTRIBUTED))
        .otherwise(pl.lit("owner"))
        .alias("dest"),
        pl.when(pl.col("project").is_null()).then(pl.col("source")).alias("u_source"),
        pl.when(pl.col("project").is_null()).then(pl.col("owner")).alias("u_key"),
    )


def _money_frame(frame: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame | pl.LazyFrame:
    names = frame.collect_schema().names() if isinstance(frame, pl.LazyFrame) else frame.columns
    cols = []
    for name, dtype in MONEY_SCHEMA.items():
        cols.append(pl.col(name).cast(dtype) if name in names else pl.lit(None, dtype=dtype).alias(name))
    return frame.select(cols)


def _quantity(driver: str | pl.Expr) -> pl.Expr:
    """The segment column holding a driver's quantity (for a literal driver or a `driver` column)."""
    if isinstance(driver, str):
        return pl.col(SEGMENT_DRIVERS[driver])
    q = pl.lit(0.0)
    for drv, col in SEGMENT_DRIVERS.items():
        q = pl.when(driver == drv).then(pl.col(col)).otherwise(q)
    return q


@dataclass(frozen=True)
class Quantities:
    """Each segment driver's quantity over time, per pool and for the fleet, as running integrals.

    A segment holds its quantity evenly over its time (capacity and allocated hours do; what
    telemetry measures is on cards that are cut wherever a cost row of theirs starts or ends:
    engine.card_cuts), so a pool's quantity inside any span is two look-ups.
    """

    pooled: StepIntegral  # keys pool, driver
    fleet: StepIntegral  # key driver

    @classmethod
    def of(cls, seg: pl.DataFrame, pooled: set[str], fleet: set[str]) -> "Quantities":
        """Running integrals of the drivers the pool-scoped rows use (`pooled`) and of those the
        fleet-wide rows use (`fleet`)."""

        def rows(drivers: set[str], where: pl.Expr) -> pl.DataFrame:
            parts = [
                seg.filter(where & (pl.col(SEGMENT_DRIVERS[d]) > 0)).select(
                    "pool", pl.lit(d).alias("driver"), "t0", "t1", (pl.col(SEGMENT_DRIVERS[d]) / pl.col("dur_s")).alias("q")
                )
                for d in sorted(drivers)
            ]
            return pl.concat(parts) if parts else pl.DataFrame(
                schema={"pool": pl.String, "driver": pl.String, "t0": TS, "t1": TS, "q": pl.Float64}
            )

        return cls(
            StepIntegral.of(rows(pooled, pl.col("pool").is_not_null()), ["pool", "driver"], "t0", "t1", "q"),
            StepIntegral.of(rows(fleet, pl.lit(True)), ["driver"], "t0", "t1", "q"),
        )

    def over(self, rows: pl.DataFrame, out: str = "Q") -> pl.DataFrame:
        """rows (pool or null for the fleet, driver, cs, ce) + `out`: the driver's quantity in
        the row's pool (or the fleet) during [cs, ce)."""
        pooled = self.pooled.integral(rows.filter(pl.col("pool").is_not_null()), "cs", "ce", out)
        fleet = self.fleet.integral(rows.filter(pl.col("pool").is_null()), "cs", "ce", out)
        return pl.concat([pooled, fleet])


def spread_costs(
    seg: pl.DataFrame,
    costs: pl.DataFrame,
    rates: pl.DataFrame,
    weights: pl.DataFrame,
    slots: pl.DataFrame,
    period: Period,
    config: Config,
    resolve,
) -> Spread:
    """Spread every input cost within the boundary.

    seg: enriched ledger segments (s_idx, pool, t0, t1, dur_s, day, allocation_id, owner, source,
         project, tenant, model, workload, gpu_id, cap_h, alloc_h, active_h, util_h, kwh_fac,
         energy_cost).
    weights: (slot, project, tenant, owner, source, tokens_w, requests) per request, for the
         tokens and requests drivers; `slots` are project_slots (the request's slot).
    resolve: Ownership.resolve, for direct costs.

    A cost row is spread over its driver's quantity inside its own span and pool (or the
    fleet): per row, a price per driver unit (amount / quantity in its span), and per
    segment, its quantity times the mean price in force over its time. Both are running
    integrals (intervals.StepIntegral), so nothing pairs cost rows with segments.
    """
    gaps: list[tuple[str, str]] = []
    c = in_boundary(costs, period, config)
    outside = c.filter(pl.col("ce") <= pl.col("cs"))
    if outside.height:
        gaps.append(
            ("costs outside the period", f"{outside.height} cost rows lie outside the period and count 0: "
             + ", ".join(outside["cost_id"].head(5).to_list()))
        )
    c = c.filter(pl.col("ce") > pl.col("cs"))
    inputs = [c.select(pl.lit("cost").alias("origin"), pl.col("cost_id").alias("id"), "category", "pool",
                       pl.col("amount_in").alias("amount"))]
    pieces: list[pl.DataFrame] = []

    # Direct costs: the owner named on the row carries all of it, spread over its days by time.
    direct = c.filter(pl.col("owner").is_not_null())
    if direct.height:
        d = resolve(direct.with_columns(pl.col("source").fill_null("finance")))
        d = destination(d.with_columns(pl.lit(None, dtype=pl.String).alias("allocation_id")))
        d = by_day(d, period).with_columns((pl.col("amount_in") * pl.col("f")).alias("amount"))
        pieces.append(_money_frame(d.with_columns(pl.lit("direct").alias("origin"))))
    shared = c.filter(pl.col("owner").is_null())

    # ---- segment drivers: a price per driver unit while each row is in force --------------
    seg_costs = shared.filter(pl.col("drv").is_in(list(SEGMENT_DRIVERS)))
    r = rates.filter(pl.col("category").is_in(sorted(config.boundary.included)))
    qty = Quantities.of(
        seg,
        pooled=set(seg_costs.filter(pl.col("pool").is_not_null())["drv"].to_list()) | ({"capacity_hours"} if r.height else set()),
        fleet=set(seg_costs.filter(pl.col("pool").is_null())["drv"].to_list()),
    )
    cost_rates = pl.DataFrame(schema=COST_RATES_SCHEMA)
    if seg_costs.height:
        seg_costs = qty.over(seg_costs.with_columns(pl.col("drv").alias("driver")))
        unspread = seg_costs.filter(pl.col("Q") <= 0).sort("cost_id")
        for row in unspread.select("cost_id", "drv", "pool").head(20).iter_rows():
            gaps.append(("cost not spread", f"cost {row[0]}: no {row[1]} in {row[2] or 'the fleet'} during its span; kept as idle"))
        pieces.append(_unspread(unspread, period))
        cost_rates = seg_costs.filter(pl.col("Q") > 0).select(
            "cost_id", "pool", "cs", "ce", "driver", "category", (pl.col("amount_in") / pl.col("Q")).alias("rate"),
            pl.lit(False).alias("is_rate"),
        )

    # Rates: a price per card-hour of capacity, so the rate per capacity_hours unit is the price.
    rate_rows = pl.DataFrame(schema=COST_RATES_SCHEMA)
    if r.height:
        p0, p1 = pl.lit(period.start, dtype=TS), pl.lit(period.end, dtype=TS)
        rate_rows = (
            r.with_row_index("i")
            .with_columns(
                pl.max_horizontal(pl.col("start").fill_null(p0), p0).alias("cs"),
                pl.min_horizontal(pl.col("end").fill_null(p1), p1).alias("ce"),
            )
            .filter(pl.col("ce") > pl.col("cs"))
            .select(
                (pl.lit("rate:") + pl.col("pool") + pl.lit(":") + pl.col("i").cast(pl.String)).alias("cost_id"),
                "pool", "cs", "ce", pl.lit("capacity_hours").alias("driver"), "category",
                pl.col("price_per_gpu_hour").cast(pl.Float64).alias("rate"), pl.lit(True).alias("is_rate"),
            )
        )
        unknown = set(rate_rows["pool"].unique().to_list()) - set(seg["pool"].drop_nulls().unique().to_list())
        if unknown:
            gaps.append(("rates without cards", f"rates for pools with no cards in the inventory: {sorted(unknown)}"))
        # What a rate bills: its price x the pool's capacity-hours while it is in force.
        billed = qty.over(rate_rows).group_by("category", "pool").agg((pl.col("rate") * pl.col("Q")).sum().alias("amount"))
        inputs.append(billed.select(pl.lit("rate").alias("origin"), (pl.lit("rate:") + pl.col("pool")).alias("id"),
                                    "category", "pool", "amount"))
    cost_rates = pl.concat([cost_rates, rate_rows])
    if cost_rates.height:
        pieces.append(_segment_money(seg, cost_rates))

    # ---- measured energy: priced where no power cost row of its pool covers the time --------
    if "power" in config.boundary.included:
        measured = _measured_energy(seg, shared.filter(pl.col("category") == "power"))
        if measured.height:
            pieces.append(_money_frame(destination(measured)))
            inputs.append(
                measured.group_by("pool").agg(pl.col("amount").sum()).select(
                    pl.lit("energy").alias("origin"), pl.lit("measured energy").alias("id"),
                    pl.lit("power").alias("category"), "pool", "amount",
                )
            )

    # ---- project drivers: tokens, requests, shares, even ----------------------------------
    proj_costs = shared.filter(pl.col("drv").is_in(list(PROJECT_DRIVERS)))
    if proj_costs.height:
        pieces.append(_spread_by_project(proj_costs, weights, slots, seg, period, config, gaps))

    money = pl.concat([pl.DataFrame(schema=MONEY_SCHEMA), *(p for p in pieces if p.height)], how="vertical")
    inputs_df = pl.concat([i.select("origin", "id", "category", "pool", pl.col("amount").cast(pl.Float64)) for i in inputs])
    return Spread(money=money, inputs=inputs_df, cost_rates=cost_rates, gaps=gaps)


def _segment_money(seg: pl.DataFrame, cost_rates: pl.DataFrame) -> pl.DataFrame:
    """Money per segment and (driver, category, rate or cost): the segment's quantity per second
    times the integral of the summed prices in force over its time.

    The prices of one (pool or fleet, driver, category, origin) add up to one step function of
    time; its running integral answers every segment with two look-ups. Rows: segments x the
    price groups of their pool, never segments x cost rows.
    """
    group = ["driver", "category", "is_rate"]
    pooled = cost_rates.filter(pl.col("pool").is_not_null())
    fleet = cost_rates.filter(pl.col("pool").is_null())
    seg_q = seg.select(*_SEG_KEEP, "t0", "t1", "dur_s", *SEGMENT_DRIVERS.values())
    parts = []
    for prices, keys in ((pooled, ["pool", *group]), (fleet, group)):
        if prices.height == 0:
            continue
        integral = StepIntegral.of(prices, keys, "cs", "ce", "rate")
        pairs = seg_q.join(prices.select(keys).unique(), on=[k for k in keys if k == "pool"] or None,
                           how="inner" if "pool" in keys else "cross")
        pairs = pairs.with_columns(_quantity(pl.col("driver")).alias("q")).filter(pl.col("q") > 0)
        pairs = integral.integral(pairs, "t0", "t1", "price_s")
        parts.append(
            pairs.with_columns(
                (pl.col("q") / pl.col("dur_s") * pl.col("price_s")).alias("amount"),
                pl.when(pl.col("is_rate")).then(pl.lit("rate")).otherwise(pl.lit("cost")).alias("origin"),
            ).filter(pl.col("amount") != 0)
        )
    if not parts:
        return pl.DataFrame(schema=MONEY_SCHEMA)
    return _money_frame(destination(pl.concat(parts)))


def _measured_energy(seg: pl.DataFrame, power_rows: pl.DataFrame) -> pl.DataFrame:
    """Segments' measured energy cost where no shared power cost row of their pool (or the fleet)
    is in force: there the bill is spread by energy instead, so energy is never paid twice."""
    used = seg.filter(pl.col("kwh_fac") > 0).select(*_SEG_KEEP, "t0", "t1", "energy_cost")
    if power_rows.height == 0 or used.height == 0:
        covered = used.with_columns(pl.lit(0.0).alias("share"))
    else:
        pools = used.select("pool").unique().drop_nulls()
        spans = pl.concat(
            [
                power_rows.filter(pl.col("pool").is_not_null()).select("pool", "cs", "ce"),
                # A fleet-wide power row covers every pool.
                power_rows.filter(pl.col("pool").is_null()).select("cs", "ce").join(pools, how="cross").select("pool", "cs", "ce"),
            ]
        )
        dur = micros("t1") - micros("t0")
        in_pool = Coverage.of(spans, "pool", "cs", "ce").covered(used.filter(pl.col("pool").is_not_null()), "t0", "t1")
        no_pool = Coverage.of(power_rows.filter(pl.col("pool").is_null()), [], "cs", "ce").covered(
            used.filter(pl.col("pool").is_null()), "t0", "t1"
        )
        covered = pl.concat([in_pool, no_pool]).with_columns((pl.col("covered_us") / dur).alias("share")).drop("covered_us")
    return covered.filter(pl.col("share") < 1).with_columns(
        (pl.col("energy_cost") * (1 - pl.col("share"))).alias("amount"),
        pl.lit("power").alias("category"),
        pl.lit("energy").alias("origin"),
        pl.lit("measured_energy").alias("driver"),
    ).drop("t0", "t1", "share", "energy_cost")


def project_slots(costs: pl.DataFrame, period: Period, config: Config) -> pl.DataFrame:
    """The slots the project drivers spread over: the period cut at its local midnights and at
    the edges of the shared cost rows spread by tokens, requests, shares or evenly (only
    those: nothing else cuts time for them)."""
    c = in_boundary(costs, period, config).filter(
        pl.col("owner").is_null() & pl.col("drv").is_in(list(PROJECT_DRIVERS)) & (pl.col("ce") > pl.col("cs"))
    )
    return time_slots(period, pl.concat([c["cs"], c["ce"]]))


def request_slots(costs: pl.DataFrame, period: Period) -> pl.DataFrame:
    """The finest slots any boundary and drivers can make: the period cut at its local midnights
    and at the edges of every shared cost row, whatever its category and driver. Every
    project_slots slot is a run of these, so requests resolved against them once serve any rule
    change (coarse_slots maps them)."""
    p0, p1 = pl.lit(period.start, dtype=TS), pl.lit(period.end, dtype=TS)
    c = costs.filter(pl.col("owner").is_null()).select(
        pl.max_horizontal("start", p0).alias("cs"), pl.min_horizontal("end", p1).alias("ce")
    ).filter(pl.col("ce") > pl.col("cs"))
    return time_slots(period, pl.concat([c["cs"], c["ce"]]))


def coarse_slots(fine: pl.DataFrame, slots: pl.DataFrame) -> pl.Series:
    """Per request_slots slot (by its number), the project_slots slot holding it: the last one
    starting at or before it (no project slot edge falls inside a fine slot)."""
    k = slots["g0"].search_sorted(fine["g0"], side="right").cast(pl.Int64) - 1
    return k.rename("slot")


def time_slots(period: Period, edges: pl.Series | None = None) -> pl.DataFrame:
    """[g0, g1) slots of the period cut at its local midnights and at `edges`: slot, g0, g1, day, slot_s."""
    cuts = [pl.Series("t", [period.start, period.end], dtype=TS), pl.Series("t", day_edges(period), dtype=TS)]
    if edges is not None:
        cuts.append(edges.cast(TS).rename("t"))
    g = pl.concat(cuts).to_frame().filter(
        (pl.col("t") >= pl.lit(period.start, dtype=TS)) & (pl.col("t") <= pl.lit(period.end, dtype=TS))
    ).unique().sort("t")
    return (
        g.with_columns(pl.col("t").shift(-1).alias("g1"))
        .rename({"t": "g0"})
        .drop_nulls("g1")
        .with_row_index("slot")
        .with_columns(
            pl.col("slot").cast(pl.Int64),
            pl.col("g0").dt.convert_time_zone(period.timezone).dt.date().alias("day"),
            seconds(pl.col("g1") - pl.col("g0")).alias("slot_s"),
        )
    )


def slot_range(frame: pl.DataFrame, slots: pl.DataFrame, start: str, end: str) -> pl.DataFrame:
    """Add k0, k1: the first and last slot of each [start, end), by binary search (the edges
    are slot edges, or fall inside a slot for a bare day split)."""
    g0 = slots["g0"]
    return frame.with_columns(
        (g0.search_sorted(frame[start], side="right").cast(pl.Int64) - 1).alias("k0"),
        (g0.search_sorted(frame[end], side="left").cast(pl.Int64) - 1).alias("k1"),
    )


def by_day(rows: pl.DataFrame, period: Period) -> pl.DataFrame:
    """Rows with a span [cs, ce) once per local day it touches, with `day` and `f`, the share of
    the span's time in that day (a direct cost is spread over its days by time)."""
    slots = time_slots(period)
    x = slot_range(rows, slots, "cs", "ce").with_columns(pl.int_ranges("k0", pl.col("k1") + 1).alias("slot")).explode("slot")
    x = x.join(slots.select("slot", "g0", "g1", "day"), on="slot")
    part = seconds(pl.min_horizontal("ce", "g1") - pl.max_horizontal("cs", "g0"))
    return x.with_columns((part / seconds(pl.col("ce") - pl.col("cs"))).alias("f")).drop("g0", "g1", "k0", "k1", "slot")


def _unspread(rows: pl.DataFrame, period: Period) -> pl.DataFrame:
    """Costs with no driver quantity in their scope: kept whole in idle, never dropped."""
    if rows.height == 0:
        return pl.DataFrame(schema=MONEY_SCHEMA)
    out = rows.with_columns(
        pl.lit(IDLE).alias("dest"), pl.lit("unspread").alias("origin"), pl.col("amount_in").alias("amount"),
        pl.col("drv").alias("driver"), pl.col("cs").dt.convert_time_zone(period.timezone).dt.date().alias("day"),
    )
    return _money_frame(out)


def _spread_by_project(
    costs: pl.DataFrame,
    weights: pl.DataFrame,
    slots: pl.DataFrame,
    seg: pl.DataFrame,
    period: Period,
    config: Config,
    gaps: list[tuple[str, str]],
) -> pl.DataFrame:
    """Spread cost rows over projects by tokens, requests, fixed shares or evenly.

    `slots` (project_slots) cut time at the local midnights and at these rows' own edges, so
    a row's weights are the requests inside its span (its money lands on the days they were
    sent); `weights` are the requests with their slot, summed per (slot, project) before any
    row meets them.
    """
    slot_h = slots.select("slot", (pl.col("slot_s") / 3600).alias("slot_h"))
    # Who counts for `even`: projects with any usage (allocations or requests) in the period.
    users = pl.concat(
        [
            seg.filter(pl.col("project").is_not_null()).select("project", "tenant").unique(),
            weights.filter(pl.col("project").is_not_null()).select("project", "tenant").unique(),
        ]
    ).unique()
    shares = _share_table(config, users, gaps)
    out = []
    ex = slot_range(costs, slots, "cs", "ce").with_columns(pl.int_ranges("k0", pl.col("k1") + 1).alias("slot")).explode("slot")
    for drv in PROJECT_DRIVERS:
        part = ex.filter(pl.col("drv") == drv)
        if part.height == 0:
            continue
        if drv in ("tokens", "requests"):
            col = "tokens_w" if drv == "tokens" else "requests"
            w = weights.group_by("slot", "project", "tenant", "owner", "source").agg(pl.col(col).sum().alias("w"))
            rows = part.drop("owner", "source").join(w, on="slot")
        else:
            table = shares if drv == "shares" else users.with_columns(pl.lit(1.0).alias("share"))
            rows = part.drop("owner", "source").join(slot_h, on="slot").join(
                table.with_columns(pl.lit(None, dtype=pl.String).alias("owner"),
                                   pl.lit(None, dtype=pl.String).alias("source")),
                how="cross",
            ).with_columns((pl.col("share") * pl.col("slot_h")).alias("w"))
        rows = rows.with_columns((pl.col("w") / pl.col("w").sum().over("cost_id")).alias("f")).filter(pl.col("w") > 0)
        got = set(rows["cost_id"].unique().to_list())
        missing = part.filter(~pl.col("cost_id").is_in(sorted(got))).unique("cost_id").sort("cost_id")
        for cid in missing["cost_id"].head(20).to_list():
            gaps.append(("cost not spread", f"cost {cid}: no {drv} during its span; kept as idle"))
        out.append(_unspread(missing, period))
        rows = rows.with_columns(
            (pl.col("amount_in") * pl.col("f")).alias("amount"),
            pl.lit("cost").alias("origin"),
            pl.col("drv").alias("driver"),
            pl.lit(None, dtype=pl.String).alias("allocation_id"),
        ).join(slots.select("slot", "day"), on="slot", how="left")
        out.append(_money_frame(destination(rows)))
    return pl.concat(out) if out else pl.DataFrame(schema=MONEY_SCHEMA)


def _share_table(config: Config, users: pl.DataFrame, gaps) -> pl.DataFrame:
    """Fixed shares from the config, keyed by project or tenant (a tenant's share is split
    evenly over its projects with usage); normalised to sum to 1."""
    rows = []
    for key, share in config.allocation.shares.items():
        as_project = users.filter(pl.col("project") == key)
        as_tenant = users.filter(pl.col("tenant") == key)
        if as_project.height:
            rows.append(as_project.with_columns(pl.lit(float(share)).alias("share")))
        elif as_tenant.height:
            rows.append(as_tenant.with_columns(pl.lit(float(share) / as_tenant.height).alias("share")))
        else:
            gaps.append(("share key unknown", f"allocation.shares key {key!r} is no project or tenant with usage"))
    if not rows:
        return users.clear().with_columns(pl.lit(0.0).alias("share"))
    t = pl.concat(rows).group_by("project", "tenant").agg(pl.col("share").sum())
    return t.with_columns(pl.col("share") / pl.col("share").sum())
