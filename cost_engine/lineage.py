"""Lineage: the raw records (allocations, cost rows, requests) behind any tenant, project or model figure."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from .engine import Computation
from .intervals import StepIntegral


@dataclass
class Explanation:
    allocations: pl.DataFrame  # allocation_id, gpu_id, model, workload, allocated_gpu_hours, active_gpu_hours, cost
    costs: pl.DataFrame  # cost_id, category, origin, cost (what each input record contributed)
    requests: pl.DataFrame  # request_id, ts, model, tokens, status
    total_cost: float


_MONEY_COLS = ("allocation_id", "s_idx", "gpu_id", "model", "workload", "category", "origin", "driver", "cost_id", "amount")
_REQUEST_COLS = ("request_id", "ts", "model", "owner", "source", "project", "input_tokens", "cached_input_tokens",
                 "output_tokens", "requests", "status", "good")


def _filter(tenant: str | None, project: str | None, model: str | None, unset: tuple[str, ...] = ()) -> pl.Expr:
    e = pl.lit(True)
    for c in unset:
        e = e & pl.col(c).is_null()
    if tenant is not None:
        e = e & (pl.col("tenant") == tenant)
    if project is not None:
        e = e & (pl.col("project") == project)
    if model is not None:
        e = e & (pl.col("model") == model)
    return e


def explain(
    comp: Computation, *, tenant: str | None = None, project: str | None = None, model: str | None = None,
    unset: tuple[str, ...] = (),
) -> Explanation:
    """Records behind the figure of a tenant, a project or a model (any combination narrows it).
    `unset` names columns (tenant, project, model) that must be empty: the owner that gathers what
    no value names (the allocations without a model, say).

    For a model the cost is that of the allocations serving it (before recharge); for an owner,
    the cost that landed on it (after recharge and idle chargeback).
    """
    if unset and not set(unset) <= {"tenant", "project", "model"}:
        raise ValueError(f"unset: {unset!r} (tenant, project or model)")
    if model is not None and tenant is None and project is None and not unset:
        m_frame, m_where = comp.money_before_recharge, (
            (pl.col("model") == model) & (pl.col("workload") == "inference") & (pl.col("dest") != "idle")
        )
        s_where = (pl.col("model") == model) & (pl.col("workload") == "inference")
        r_where = pl.col("model") == model
    else:
        f = _filter(tenant, project, model, unset)
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
    # Segment money is a segment's quantity per second x the integral of the prices in force
    # over its time (allocation._segment_money). So each money row, divided by that integral,
    # is the entity's quantity per second on that segment; summed over the entity's segments
    # it is a step function of time, and a cost row's part is its price x the integral of that
    # function over the row's span: running integrals, no segment meets a cost row.
    seg_money = money.filter(
        pl.col("s_idx").is_not_null() & pl.col("cost_id").is_null() & ~pl.col("origin").str.starts_with("energy")
    )
    parts = []
    rates = comp.cost_rates
    if seg_money.height and rates.height:
        keys = ["driver", "category"]
        j = seg_money.group_by("s_idx", *keys).agg(pl.col("amount").sum())
        where = comp.seg.select("s_idx", "pool", "t0", "t1").sort("s_idx")
        if where["s_idx"].equals(pl.Series("s_idx", range(where.height), dtype=where.schema["s_idx"])):
            j = j.with_columns(*(where[c].gather(j["s_idx"]) for c in ("pool", "t0", "t1")))
        else:  # s_idx not dense (a scoped computation): join
            j = j.join(where, on="s_idx")
        pooled_rates = rates.filter(pl.col("pool").is_not_null())
        fleet_rates = rates.filter(pl.col("pool").is_null())
        j = StepIntegral.of(pooled_rates, ["pool", *keys], "cs", "ce", "rate").integral(
            j.filter(pl.col("pool").is_not_null()), "t0", "t1", "_rp"
        ).vstack(j.filter(pl.col("pool").is_null()).with_columns(pl.lit(0.0).alias("_rp")))
        j = StepIntegral.of(fleet_rates, keys, "cs", "ce", "rate").integral(j, "t0", "t1", "_rf")
        j = j.with_columns((pl.col("amount") / (pl.col("_rp") + pl.col("_rf"))).alias("a")).filter(pl.col("a").is_finite())
        found = [
            StepIntegral.of(j.filter(pl.col("pool").is_not_null()), ["pool", *keys], "t0", "t1", "a").integral(
                pooled_rates.join(j.select("pool", *keys).unique(), on=["pool", *keys], how="semi"), "cs", "ce", "_q"
            ),
            StepIntegral.of(j, keys, "t0", "t1", "a").integral(
                fleet_rates.join(j.select(keys).unique(), on=keys, how="semi"), "cs", "ce", "_q"
            ),
        ]
        parts.append(
            pl.concat(found)
            .select("cost_id", "category", (pl.col("rate") * pl.col("_q")).alias("cost"))
            .filter(pl.col("cost") != 0)
            .with_columns(
                pl.when(pl.col("cost_id").str.starts_with("rate:")).then(pl.lit("rate")).otherwise(pl.lit("cost")).alias("origin")
            )
        )
    cols = ["cost_id", "category", "origin", "cost"]
    out = pl.concat([named.select(cols), energy.select(cols), *[p.select(cols) for p in parts]])
    return out.group_by("cost_id", "category", "origin").agg(pl.col("cost").sum()).sort(
        ["cost", "cost_id"], descending=[True, False]
    )


NEAR_MATCHES = 5  # names suggested for a misspelt one


def unknown_names(
    comp: Computation, *, tenant: str | None = None, project: str | None = None, model: str | None = None
) -> list[str]:
    """One message per asked name that nothing in the computation carries, with the nearest known names.

    A misspelt project would otherwise explain as "cost 0.00", which reads as a real figure.
    """
    from difflib import get_close_matches

    projects = comp.ownership.projects
    known = {
        "tenant": (projects["tenant"], comp.money["tenant"]),
        "project": (projects["project"], comp.money["project"]),
        "model": (comp.allocations["model"], comp.requests["model"]),
    }
    out = []
    for kind, name in (("tenant", tenant), ("project", project), ("model", model)):
        if name is None:
            continue
        names = pl.concat([s.cast(pl.String).rename(kind) for s in known[kind]]).drop_nulls().unique().sort().to_list()
        if name in names:
            continue
        near = get_close_matches(name, names, n=NEAR_MATCHES, cutoff=0.6)
        if near:
            hint = "did you mean " + ", ".join(near) + "?"
        else:
            shown = names[:20]
            hint = f"known {kind}s: " + (", ".join(shown) + (f" and {len(names) - len(shown)} more" if len(names) > 20 else "")
                                         if names else "none")
        out.append(f"unknown {kind} {name!r}; {hint}")
    return out
