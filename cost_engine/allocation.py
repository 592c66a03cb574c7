"""Money onto owners: cost rows, rates and measured energy spread by drivers over ledger segments.

Every input dollar ends in exactly one destination row: an owner's project, `idle`
(unallocated capacity) or `unattributed` (an owner key that maps to no project).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from .config import Config
from .contract import DEFAULT_DRIVER, IDLE, TS, UNATTRIBUTED
from .ledger import Period, seconds

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
    cost_rates: pl.DataFrame  # cost_id, pool, k0, k1, driver, category, rate (for lineage)
    gaps: list[tuple[str, str]]


def driver_of(config: Config) -> pl.Expr:
    """The driver of a cost row: its own, else the config override, else the category default."""
    overrides = dict(DEFAULT_DRIVER) | dict(config.allocation.drivers)
    return pl.coalesce(pl.col("driver"), pl.col("category").replace_strict(overrides, default="gpu_hours"))


def slot_range(frame: pl.DataFrame, slots: pl.DataFrame, start: str, end: str) -> pl.DataFrame:
    """Add k0, k1 (first and last slot index) for spans whose edges are global cut points."""
    return frame.join(
        slots.select(pl.col("g0").alias(start), pl.col("slot").alias("k0")), on=start, how="left"
    ).join(slots.select(pl.col("g1").alias(end), pl.col("slot").alias("k1")), on=end, how="left")


# Segment columns that money rows keep or need to find their destination.
_SEG_KEEP = ("s_idx", "gpu_id", "pool", "slot", "day", "allocation_id", "owner", "source", "project", "tenant",
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


def spread_costs(
    seg: pl.DataFrame,
    costs: pl.DataFrame,
    rates: pl.DataFrame,
    project_weights: pl.DataFrame,
    slots: pl.DataFrame,
    period: Period,
    config: Config,
    resolve,
) -> Spread:
    """Spread every input cost within the boundary.

    seg: enriched ledger segments (s_idx, pool, slot, day, allocation_id, owner, source, project,
         tenant, model, workload, gpu_id, cap_h, alloc_h, active_h, util_h, kwh_fac, energy_cost).
    project_weights: (slot, project, tenant, owner, source, tokens_w, requests) per request slot,
         for the tokens and requests drivers.
    resolve: Ownership.resolve, for direct costs.
    """
    gaps: list[tuple[str, str]] = []
    included = set(config.boundary.included)
    p0 = pl.lit(period.start, dtype=TS)
    p1 = pl.lit(period.end, dtype=TS)
    slot_day = slots.with_columns(pl.col("g0").dt.convert_time_zone(period.timezone).dt.date().alias("day"))

    # ---- cost rows: the part inside the period, pro rata to time --------------------------
    c = costs.filter(pl.col("category").is_in(sorted(included))).with_columns(
        pl.max_horizontal("start", p0).alias("cs"), pl.min_horizontal("end", p1).alias("ce")
    )
    outside = c.filter(pl.col("ce") <= pl.col("cs"))
    if outside.height:
        gaps.append(
            ("costs outside the period", f"{outside.height} cost rows lie outside the period and count 0: "
             + ", ".join(outside["cost_id"].head(5).to_list()))
        )
    c = c.filter(pl.col("ce") > pl.col("cs")).with_columns(
        (pl.col("amount") * seconds(pl.col("ce") - pl.col("cs")) / seconds(pl.col("end") - pl.col("start"))).alias(
            "amount_in"
        ),
        driver_of(config).alias("drv"),
    )
    c = slot_range(c, slots, "cs", "ce")
    inputs = [c.select(pl.lit("cost").alias("origin"), pl.col("cost_id").alias("id"), "category", "pool",
                       pl.col("amount_in").alias("amount"))]
    pieces: list[pl.DataFrame] = []

    # Direct costs: the owner named on the row carries all of it, spread over its days by time.
    direct = c.filter(pl.col("owner").is_not_null())
    if direct.height:
        d = resolve(direct.with_columns(pl.col("source").fill_null("finance")))
        d = d.with_columns(pl.lit(None, dtype=pl.String).alias("allocation_id"))
        d = (
            destination(d)
            .with_columns(pl.int_ranges("k0", pl.col("k1") + 1).alias("slot"))
            .explode("slot")
            .join(slot_day.select("slot", "day", (seconds(pl.col("g1") - pl.col("g0"))).alias("slot_s")), on="slot")
            .with_columns((pl.col("amount_in") * pl.col("slot_s") / pl.col("slot_s").sum().over("cost_id")).alias("amount"))
        )
        pieces.append(_money_frame(d.with_columns(pl.lit("direct").alias("origin"))))
    shared = c.filter(pl.col("owner").is_null())

    # ---- segment drivers: rate per driver unit within (pool or fleet, span) ----------------
    seg_costs = shared.filter(pl.col("drv").is_in(list(SEGMENT_DRIVERS)))
    qcols = list(SEGMENT_DRIVERS.values())
    q_pool = seg.group_by("pool", "slot").agg(pl.col(qcols).sum())
    q_fleet = seg.group_by("slot").agg(pl.col(qcols).sum())
    cost_rates = pl.DataFrame(
        schema={"cost_id": pl.String, "pool": pl.String, "k0": pl.Int64, "k1": pl.Int64, "driver": pl.String,
                "category": pl.String, "rate": pl.Float64}
    )
    if seg_costs.height:
        ex = seg_costs.with_columns(pl.int_ranges("k0", pl.col("k1") + 1).alias("slot")).explode("slot")
        pooled = ex.filter(pl.col("pool").is_not_null()).join(q_pool, on=["pool", "slot"], how="left")
        fleet = ex.filter(pl.col("pool").is_null()).join(q_fleet, on="slot", how="left")
        q_expr = pl.lit(0.0)
        for drv, col in SEGMENT_DRIVERS.items():
            q_expr = pl.when(pl.col("drv") == drv).then(pl.col(col).fill_null(0.0)).otherwise(q_expr)
        tot = (
            pl.concat([pooled, fleet], how="diagonal_relaxed")
            .with_columns(q_expr.alias("q"))
            .group_by("cost_id")
            .agg(pl.col("q").sum().alias("Q"))
        )
        seg_costs = seg_costs.join(tot, on="cost_id", how="left").with_columns(pl.col("Q").fill_null(0.0))
        unspread = seg_costs.filter(pl.col("Q") <= 0)
        for row in unspread.select("cost_id", "drv", "pool").head(20).iter_rows():
            gaps.append(("cost not spread", f"cost {row[0]}: no {row[1]} in {row[2] or 'the fleet'} during its span; kept as idle"))
        pieces.append(_unspread(unspread, slot_day))
        cost_rates = seg_costs.filter(pl.col("Q") > 0).select(
            "cost_id", "pool", "k0", "k1", pl.col("drv").alias("driver"), "category",
            (pl.col("amount_in") / pl.col("Q")).alias("rate"),
        )

    # Rates: a price per card-hour of capacity, so the rate per capacity_hours unit is the price.
    r = rates.filter(pl.col("category").is_in(sorted(included)))
    rate_rows = pl.DataFrame(schema=cost_rates.schema)
    if r.height:
        r = r.with_columns(
            pl.max_horizontal(pl.col("start").fill_null(p0), p0).alias("cs"),
            pl.min_horizontal(pl.col("end").fill_null(p1), p1).alias("ce"),
        ).filter(pl.col("ce") > pl.col("cs"))
        r = slot_range(r, slots, "cs", "ce").with_row_index("i")
        rate_rows = r.select(
            (pl.lit("rate:") + pl.col("pool") + pl.lit(":") + pl.col("i").cast(pl.String)).alias("cost_id"),
            "pool", "k0", "k1", pl.lit("capacity_hours").alias("driver"), "category",
            pl.col("price_per_gpu_hour").alias("rate"),
        )
        unknown = set(rate_rows["pool"].unique().to_list()) - set(seg["pool"].drop_nulls().unique().to_list())
        if unknown:
            gaps.append(("rates without cards", f"rates for pools with no cards in the inventory: {sorted(unknown)}"))

    all_rates = pl.concat([cost_rates, rate_rows])
    if all_rates.height:
        ex = (
            all_rates.with_columns(pl.int_ranges("k0", pl.col("k1") + 1).alias("slot"))
            .explode("slot")
            .with_columns(pl.col("cost_id").str.starts_with("rate:").alias("is_rate"))
            .group_by("pool", "slot", "driver", "category", "is_rate")
            .agg(pl.col("rate").sum())
        )
        # Only the columns a money row keeps (plus the driver quantities): segments carry ~40
        # columns, and this join has one row per segment and rate in force.
        seg_q = seg.lazy().select(*_SEG_KEEP, *SEGMENT_DRIVERS.values())
        ex = ex.lazy()
        on_seg = pl.concat(
            [
                seg_q.join(ex.filter(pl.col("pool").is_not_null()), on=["pool", "slot"]),
                seg_q.join(ex.filter(pl.col("pool").is_null()).drop("pool"), on="slot"),
            ],
            how="diagonal_relaxed",
        )
        q_expr = pl.lit(0.0)
        for drv, col in SEGMENT_DRIVERS.items():
            q_expr = pl.when(pl.col("driver") == drv).then(pl.col(col)).otherwise(q_expr)
        on_seg = on_seg.with_columns(
            (pl.col("rate") * q_expr).alias("amount"),
            pl.when(pl.col("is_rate")).then(pl.lit("rate")).otherwise(pl.lit("cost")).alias("origin"),
        )
        rate_in = on_seg.filter(pl.col("is_rate")).group_by("category", "pool").agg(pl.col("amount").sum()).select(
            pl.lit("rate").alias("origin"), (pl.lit("rate:") + pl.col("pool")).alias("id"), "category", "pool",
            "amount",
        )
        # One plan for both: the join is computed once and only money columns materialise.
        rate_in, spread_money = pl.collect_all([rate_in, _money_frame(destination(on_seg.filter(pl.col("amount") != 0)))])
        inputs.append(rate_in)
        pieces.append(spread_money)

    # ---- measured energy: priced where no power cost row covers the time -----------------
    if "power" in included:
        covered = set()
        for k0, k1 in shared.filter(pl.col("category") == "power").select("k0", "k1").iter_rows():
            covered.update(range(k0, k1 + 1))
        measured = seg.filter(~pl.col("slot").is_in(sorted(covered)) & (pl.col("kwh_fac") > 0)).select(
            *_SEG_KEEP, "energy_cost"
        ).with_columns(
            pl.col("energy_cost").alias("amount"),
            pl.lit("power").alias("category"),
            pl.lit("energy").alias("origin"),
            pl.lit("measured_energy").alias("driver"),
        )
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
        pieces.append(_spread_by_project(proj_costs, project_weights, seg, slots, slot_day, config, gaps))

    money = pl.concat([pl.DataFrame(schema=MONEY_SCHEMA), *(p for p in pieces if p.height)], how="vertical")
    inputs_df = pl.concat([i.select("origin", "id", "category", "pool", pl.col("amount").cast(pl.Float64)) for i in inputs])
    return Spread(money=money, inputs=inputs_df, cost_rates=pl.concat([cost_rates, rate_rows]), gaps=gaps)


def _unspread(rows: pl.DataFrame, slot_day: pl.DataFrame) -> pl.DataFrame:
    """Costs with no driver quantity in their scope: kept whole in idle, never dropped."""
    if rows.height == 0:
        return pl.DataFrame(schema=MONEY_SCHEMA)
    out = rows.join(slot_day.select(pl.col("slot").alias("k0"), "day"), on="k0", how="left").with_columns(
        pl.lit(IDLE).alias("dest"), pl.lit("unspread").alias("origin"), pl.col("amount_in").alias("amount"),
        pl.col("drv").alias("driver"),
    )
    return _money_frame(out)


def _spread_by_project(
    costs: pl.DataFrame,
    weights: pl.DataFrame,
    seg: pl.DataFrame,
    slots: pl.DataFrame,
    slot_day: pl.DataFrame,
    config: Config,
    gaps: list[tuple[str, str]],
) -> pl.DataFrame:
    """Spread cost rows over projects by tokens, requests, fixed shares or evenly."""
    slot_h = slots.select("slot", (seconds(pl.col("g1") - pl.col("g0")) / 3600).alias("slot_h"))
    # Who counts for `even`: projects with any usage (allocations or requests) in the period.
    users = pl.concat(
        [
            seg.filter(pl.col("project").is_not_null()).select("project", "tenant").unique(),
            weights.filter(pl.col("project").is_not_null()).select("project", "tenant").unique(),
        ]
    ).unique()
    shares = _share_table(config, users, gaps)
    out = []
    ex = costs.with_columns(pl.int_ranges("k0", pl.col("k1") + 1).alias("slot")).explode("slot")
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
        missing = part.filter(~pl.col("cost_id").is_in(sorted(got))).unique("cost_id")
        for cid in missing["cost_id"].head(20).to_list():
            gaps.append(("cost not spread", f"cost {cid}: no {drv} during its span; kept as idle"))
        out.append(_unspread(missing, slot_day))
        rows = rows.with_columns(
            (pl.col("amount_in") * pl.col("f")).alias("amount"),
            pl.lit("cost").alias("origin"),
            pl.col("drv").alias("driver"),
            pl.lit(None, dtype=pl.String).alias("allocation_id"),
        ).join(slot_day.select("slot", "day"), on="slot", how="left")
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
