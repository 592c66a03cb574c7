"""Lineage: the raw records (allocations, cost rows, requests) behind any tenant, project or model figure."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from .allocation import SEGMENT_DRIVERS
from .engine import Computation


@dataclass
class Explanation:
    allocations: pl.DataFrame  # allocation_id, gpu_id, model, workload, allocated_gpu_hours, active_gpu_hours, cost
    costs: pl.DataFrame  # cost_id, category, origin, cost (what each input record contributed)
    requests: pl.DataFrame  # request_id, ts, model, tokens, status
    total_cost: float


_MONEY_COLS = ("allocation_id", "s_idx", "gpu_id", "model", "workload", "category", "origin", "cost_id", "amount")
_REQUEST_COLS = ("request_id", "ts", "model", "owner", "source", "project", "input_tokens", "cached_input_tokens",
                 "output_tokens", "requests", "status", "good")


def _filter(tenant: str | None, project: str | None, model: str | None) -> pl.Expr:
    e = pl.lit(True)
    if tenant is not None:
        e = e & (pl.col("tenant") == tenant)
    if project is not None:
        e = e & (pl.col("project") == project)
    if model is not None:
        e = e & (pl.col("model") == model)
    return e


def explain(
    comp: Computation, *, tenant: str | None = None, project: str | None = None, model: str | None = None
) -> Explanation:
    """Records behind the figure of a tenant, a project or a model (any combination narrows it).

    For a model the cost is that of the allocations serving it (before recharge); for an owner,
    the cost that landed on it (after recharge and idle chargeback).
    """
    if model is not None and tenant is None and project is None:
        m_frame, m_where = comp.money_before_recharge, (
            (pl.col("model") == model) & (pl.col("workload") == "inference") & (pl.col("dest") != "idle")
        )
        s_where = (pl.col("model") == model) & (pl.col("workload") == "inference")
        r_where = pl.col("model") == model
    else:
        f = _filter(tenant, project, model)
        m_frame, m_where = comp.money, (pl.col("dest") == "owner") & f
        s_where = pl.col("project").is_not_null() & f
        r_where = pl.col("project").is_not_null() & f
    # Lazy with the columns used: the filters scan millions of money rows at fleet scale, and
    # only the entity's rows of a few columns are materialised.
    money = m_frame.lazy().filter(m_where).select(_MONEY_COLS).collect()
    seg = comp.seg.lazy().filter(s_where).select("allocation_id", "gpu_id", "alloc_h", "active_h").collect()
    reqs = comp.requests.lazy().filter(r_where).select(_REQUEST_COLS).collect()

    hours = seg.group_by("allocation_id").agg(
        pl.col("gpu_id").first(), pl.col("alloc_h").sum().alias("allocated_gpu_hours"),
        pl.col("active_h").sum().alias("active_gpu_hours"),
    )
    alloc_cost = money.filter(pl.col("allocation_id").is_not_null()).group_by("allocation_id").agg(
        pl.col("amount").sum().alias("cost"), pl.col("model").first(), pl.col("workload").first(),
        pl.col("gpu_id").first().alias("_gpu"),
    )
    allocations = (
        hours.join(alloc_cost, on="allocation_id", how="full", coalesce=True)
        .with_columns(
            pl.coalesce("gpu_id", "_gpu").alias("gpu_id"),
            pl.col("cost", "allocated_gpu_hours", "active_gpu_hours").fill_null(0.0),
        )
        .drop("_gpu")
        .join(comp.allocations.select("allocation_id", pl.col("model").alias("_m"), pl.col("workload").alias("_w"),
                                      "job_id", "owner", "source", "start", "end"), on="allocation_id", how="left")
        .with_columns(pl.coalesce("model", "_m").alias("model"), pl.coalesce("workload", "_w").alias("workload"))
        .drop("_m", "_w")
        .sort(["cost", "allocation_id"], descending=[True, False])
    )
    costs = _cost_contributions(comp, money)
    requests = reqs.sort("ts", "request_id")
    return Explanation(allocations=allocations, costs=costs, requests=requests,
                       total_cost=float(money["amount"].sum()))


def _cost_contributions(comp: Computation, money: pl.DataFrame) -> pl.DataFrame:
    """Split the entity's money rows back onto the input records (cost ids, rates, energy)."""
    named = money.filter(pl.col("cost_id").is_not_null()).group_by("cost_id", "category", "origin").agg(
        pl.col("amount").sum().alias("cost")
    )
    energy = money.filter(pl.col("origin").str.starts_with("energy")).group_by("category", "origin").agg(
        pl.col("amount").sum().alias("cost")
    ).with_columns(pl.lit("measured energy").alias("cost_id"))
    # Segment money was spread with one summed rate per (pool, slot, driver, category); divide
    # each segment's amount over the cost rows in force by their share of that rate x quantity.
    seg_money = money.filter(
        pl.col("s_idx").is_not_null() & pl.col("cost_id").is_null() & ~pl.col("origin").str.starts_with("energy")
    )
    parts = []
    if seg_money.height and comp.cost_rates.height:
        # Each money row's pool and slot, by its segment: a gather from the segments ordered by
        # s_idx (no join of the entity's money rows with every segment).
        where = comp.seg.select("s_idx", "pool", "slot").sort("s_idx")
        j = seg_money.select("s_idx", "category", "amount")
        if where["s_idx"].equals(pl.Series("s_idx", range(where.height), dtype=where.schema["s_idx"])):
            j = j.with_columns(where["pool"].gather(j["s_idx"]), where["slot"].gather(j["s_idx"]))
        else:  # s_idx not dense (a scoped computation): join
            j = j.join(where, on="s_idx")
        rates = comp.cost_rates.with_columns(pl.int_ranges("k0", pl.col("k1") + 1).alias("slot")).explode("slot")
        # The rate rows in force for each (pool, slot, category) the entity's segments touch.
        keys = j.select("pool", "slot", "category").unique()
        in_force = pl.concat(
            [
                keys.join(rates.filter(pl.col("pool").is_not_null()), on=["pool", "slot", "category"]),
                keys.join(rates.filter(pl.col("pool").is_null()).drop("pool"), on=["slot", "category"]),
            ],
            how="diagonal_relaxed",
        )
        # Where every rate in force spreads by the same driver, a segment's split is rate_i /
        # sum(rates) whatever its quantity: sum the segments first and split once per group.
        drivers = in_force.group_by("pool", "slot", "category").agg(pl.col("driver").n_unique().alias("n"))
        group = ["pool", "slot", "category"]
        single = drivers.filter(pl.col("n") == 1).drop("n")
        one = j.join(single, on=group, how="semi", nulls_equal=True).group_by(group).agg(pl.col("amount").sum())
        parts.append(
            one.join(in_force, on=group, nulls_equal=True)
            .with_columns((pl.col("amount") * pl.col("rate") / pl.col("rate").sum().over(group)).alias("cost"))
            .group_by("cost_id", "category").agg(pl.col("cost").sum())
        )
        # Mixed drivers: each segment's own quantities weigh the rates.
        mixed = j.join(single, on=group, how="anti", nulls_equal=True)
        if mixed.height:
            mixed = mixed.group_by("s_idx", "pool", "slot", "category").agg(pl.col("amount").sum()).join(
                comp.seg.select("s_idx", *SEGMENT_DRIVERS.values()), on="s_idx"
            )
            m = mixed.join(in_force, on=group, nulls_equal=True)
            qx = pl.lit(0.0)
            for drv, col in SEGMENT_DRIVERS.items():
                qx = pl.when(pl.col("driver") == drv).then(pl.col(col)).otherwise(qx)
            m = m.with_columns((pl.col("rate") * qx).alias("w")).with_columns(
                (pl.col("amount") * pl.col("w") / pl.col("w").sum().over("s_idx", "category")).alias("cost")
            )
            parts.append(m.group_by("cost_id", "category").agg(pl.col("cost").sum()))
        parts = [
            part.with_columns(
                pl.when(pl.col("cost_id").str.starts_with("rate:")).then(pl.lit("rate")).otherwise(pl.lit("cost")).alias("origin")
            )
            for part in parts
        ]
    cols = ["cost_id", "category", "origin", "cost"]
    out = pl.concat([named.select(cols), energy.select(cols), *[p.select(cols) for p in parts]])
    return out.group_by("cost_id", "category", "origin").agg(pl.col("cost").sum()).sort(
        ["cost", "cost_id"], descending=[True, False]
    )
