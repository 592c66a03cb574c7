"""Why a raw record carries cost to an owner's figure (the "Via" column of the drill-down):
own use, a recharge from the owner serving a model, an idle share, a direct charge, measured
energy or a cost shared by a driver, so a record with 0 GPU-hours and a cost is explained."""

from __future__ import annotations

import polars as pl

from .engine import Computation


def allocation_via(comp: Computation, *, tenant: str | None = None, project: str | None = None,
                   model: str | None = None) -> pl.DataFrame:
    """Why each allocation carries cost to an owner's figure: `own use`, `recharge from X
    (model, by tokens)` (inference cost moved onto the callers), `idle share` (idle charged to
    owners), several joined with their amounts. A model's figure is its serving allocations."""
    if model is not None and tenant is None and project is None:
        a = comp.allocations.filter(pl.col("model") == model).select("allocation_id")
        return a.with_columns(pl.lit(f"serving {model}").alias("via"))
    where = pl.col("dest") == "owner"
    for col, val in (("tenant", tenant), ("project", project), ("model", model)):
        if val is not None:
            where = where & (pl.col(col) == val)
    kind = (
        pl.when(pl.col("origin").str.contains("+recharge", literal=True)).then(pl.lit("recharge"))
        .when(pl.col("origin").str.contains("+idle", literal=True)).then(pl.lit("idle"))
        .otherwise(pl.lit("own"))
    )
    m = (
        comp.money.lazy().filter(where & pl.col("allocation_id").is_not_null())
        .group_by("allocation_id", kind.alias("kind")).agg(pl.col("amount").sum())
        .collect()
        .join(comp.allocations.select("allocation_id", pl.col("project").alias("a_project"), "owner",
                                      pl.col("model").alias("a_model")), on="allocation_id", how="left")
    )
    mode = comp.config.allocation.inference_recharge
    text = (
        pl.when(pl.col("kind") == "own").then(pl.lit("own use"))
        .when(pl.col("kind") == "idle").then(pl.lit("idle share"))
        .otherwise(pl.concat_str([pl.lit("recharge from "), pl.coalesce("a_project", "owner", pl.lit("?")),
                                  pl.lit(" ("), pl.col("owner").fill_null("?"), pl.lit(" · "),
                                  pl.col("a_model").fill_null("?"), pl.lit(f" · by {mode})")]))
    )
    cents = (pl.col("amount").abs() * 100).round(0).cast(pl.Int64)
    money = pl.concat_str([pl.when(pl.col("amount") < 0).then(pl.lit("-")).otherwise(pl.lit("")),
                           (cents // 100).cast(pl.String), pl.lit("."), (cents % 100).cast(pl.String).str.zfill(2)])
    m = m.with_columns(text.alias("t"), money.alias("m")).sort("allocation_id", "amount", descending=[False, True])
    return m.group_by("allocation_id", maintain_order=True).agg(
        pl.when(pl.len() == 1).then(pl.col("t").first())
        .otherwise(pl.concat_str([pl.col("t"), pl.lit(" "), pl.col("m")]).str.join("; "))
        .alias("via")
    )


def cost_via(comp: Computation, costs: pl.DataFrame) -> pl.DataFrame:
    """`costs` (cost_id, origin, ...) with `via`: a direct charge, measured energy, or the
    driver that shared the cost row (from the engine's cost rates)."""
    drivers = comp.cost_rates.group_by("cost_id").agg(pl.col("driver").first().alias("_driver"))
    return (
        costs.join(drivers, on="cost_id", how="left", maintain_order="left")
        .with_columns(
            pl.when(pl.col("origin").str.starts_with("direct")).then(pl.lit("direct charge"))
            .when(pl.col("origin").str.starts_with("energy")).then(pl.lit("measured energy"))
            .when(pl.col("_driver").is_not_null())
            .then(pl.lit("shared by driver ") + pl.col("_driver").str.replace_all("_", " "))
            .otherwise(pl.col("origin"))
            .alias("via")
        )
        .drop("_driver")
    )
