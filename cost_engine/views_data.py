"""The Data page's views: telemetry rows and coverage, validation, rejections, unattributed keys, aliases."""

from __future__ import annotations

import polars as pl

from . import report
from .bundle import Bundle
from .contract import TABLE_NAMES
from .engine import Computation
from .views_filters import Filters, apply_filters


def telemetry_rows(comp: Computation) -> int:
    """Telemetry rows in the computation's source (the store's table when read from a store)."""
    with comp.telemetry.reader() as r:
        return r.count()


def validation_summary(bundle: Bundle, telemetry_rows: int | None = None) -> pl.DataFrame:
    """Per contract table: present in the source, rows accepted, rows rejected.

    `telemetry_rows`: the accepted telemetry count when the bundle does not hold the table
    (a store's telemetry stays in the store; see telemetry_rows). Other tables left in a store
    count as `Bundle.held_rows` says."""
    rej = bundle.rejected.group_by("table").agg(pl.len().cast(pl.Int64).alias("rejected"))
    rej_map = dict(zip(rej["table"].to_list(), rej["rejected"].to_list()))
    return pl.DataFrame(
        [
            {"table": t, "present": t in bundle.present,
             "accepted": telemetry_rows if t == "telemetry" and telemetry_rows is not None
             else bundle.held_rows.get(t, bundle[t].height),
             "rejected": int(rej_map.get(t, 0))}
            for t in TABLE_NAMES
        ],
        schema={"table": pl.String, "present": pl.Boolean, "accepted": pl.Int64, "rejected": pl.Int64},
    )


def rejections(bundle: Bundle, table: str | None = None) -> pl.DataFrame:
    r = bundle.rejected
    if table is not None:
        r = r.filter(pl.col("table") == table)
    return r


def telemetry_coverage(comp: Computation, filters: Filters | None = None, by: str = "pool") -> pl.DataFrame:
    """Allocated GPU-hours with and without telemetry, per pool (or per card with by="card")."""
    fc = apply_filters(comp, filters)
    keys = ["pool", "accelerator"] if by == "pool" else ["gpu_id", "node", "pool", "accelerator"]
    held = fc.seg.filter(pl.col("allocation_id").is_not_null())
    t = held.group_by(keys).agg(
        pl.col("alloc_h").sum().alias("allocated_gpu_hours"),
        pl.col("covered_h").sum().alias("covered_gpu_hours"),
    )
    return t.with_columns(
        (pl.col("allocated_gpu_hours") - pl.col("covered_gpu_hours")).clip(lower_bound=0).alias("uncovered_gpu_hours"),
        pl.when(pl.col("allocated_gpu_hours") > 0)
        .then(pl.col("covered_gpu_hours") / pl.col("allocated_gpu_hours"))
        .alias("coverage"),
    ).sort(["coverage", *keys], nulls_last=True)


def unattributed(comp: Computation) -> pl.DataFrame:
    """Owner keys that map to no project, with the cost they carry (report["unattributed"])."""
    rows = report.unattributed(comp)
    return pl.DataFrame(
        rows, schema={"source": pl.String, "key": pl.String, "cost": pl.Float64, "records": pl.Int64}, orient="row"
    ) if rows else pl.DataFrame(schema={"source": pl.String, "key": pl.String, "cost": pl.Float64, "records": pl.Int64})


def alias_table(comp: Computation) -> pl.DataFrame:
    """The alias table to edit: existing aliases, then each unmapped key with an empty project."""
    a = comp.bundle["aliases"].select("source", "key", "project").with_columns(pl.lit(False).alias("unmapped"))
    u = unattributed(comp).filter(pl.col("source").is_not_null() & pl.col("key").is_not_null())
    u = u.select("source", "key", pl.lit(None, dtype=pl.String).alias("project"), pl.lit(True).alias("unmapped"))
    u = u.join(a, on=["source", "key"], how="anti")
    return pl.concat([a, u]).sort(["unmapped", "source", "key"], descending=[True, False, False])


def projects(comp: Computation) -> list[str]:
    return sorted(comp.ownership.projects["project"].drop_nulls().unique().to_list())
