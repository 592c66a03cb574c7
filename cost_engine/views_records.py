"""Raw records behind a figure, page by page, with the lineage that ties them to it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import polars as pl

from . import lineage, record_via
from .bundle import Bundle
from .contract import RECORD_KEYS
from .engine import Computation
from .views_filters import Filters, MAX_PAGE_SIZE, TOKEN_COLS, apply_filters


RecordTable = Literal["allocations", "requests", "costs"]


@dataclass(frozen=True)
class RecordsPage:
    """One page of the raw records behind a figure, and where it sits in the whole list."""

    rows: pl.DataFrame
    total: int
    page: int
    page_size: int
    # "store" (DuckDB, bound parameters), "memory" (the bundle's frames) or "scoped" (a scoped
    # user's cost rows: their own rows whole and their share of shared ones, access.scoped_costs)
    backend: str

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.page_size))


def source_is_store(source: str | Path | None) -> bool:
    if source is None:
        return False
    from . import store

    p = Path(source)
    return p.is_file() and store.is_store(p)


def _record_contributions(
    fc: Computation, table: RecordTable, tenant: str | None, project: str | None, model: str | None,
    unset: tuple[str, ...] = (),
) -> tuple[pl.DataFrame, str]:
    """(ordered contributions frame, its id column) for the figure of tenant/project/model."""
    e = lineage.explain(fc, tenant=tenant, project=project, model=model, unset=unset)
    if table == "allocations":
        c = e.allocations.select(
            "allocation_id", "allocated_gpu_hours", "active_gpu_hours", pl.col("cost").alias("attributed_cost")
        )
        via = record_via.allocation_via(fc, tenant=tenant, project=project, model=model)
        return c.join(via, on="allocation_id", how="left", maintain_order="left"), "allocation_id"
    if table == "requests":
        c = e.requests.select(
            "request_id", "project", pl.sum_horizontal(*TOKEN_COLS).alias("tokens"), "good"
        )
        return c, "request_id"
    if table == "costs":
        c = e.costs.select("cost_id", "category", "origin", pl.col("cost").alias("attributed_cost"))
        return record_via.cost_via(fc, c), "cost_id"
    raise ValueError(f"unknown record table {table!r}")


def records(
    comp: Computation,
    filters: Filters | None,
    source: str | Path | None,
    *,
    table: RecordTable,
    tenant: str | None = None,
    project: str | None = None,
    model: str | None = None,
    page: int = 0,
    page_size: int = 50,
    unset: tuple[str, ...] = (),
) -> RecordsPage:
    """One page of the raw records (allocations, requests or cost rows) behind an owner's or a model's figure.

    The engine's lineage says which records made the figure and what each contributed; only the
    ids of the requested page are then read: from the DuckDB store with bound parameters
    (`store.query_records(ids=...)`) when `source` is a store, else from the bundle's frames.
    Allocations come highest cost first, requests by time, cost rows highest contribution first.
    Cost contributions that are not a costs-table row (rates, measured energy) show with their
    lineage fields only. `unset`: lineage.explain's columns that must be empty.

    A scoped computation's cost rows come from its own bundle, whatever the source: a row shared
    with other tenants is there as their share (`record` "share": amount, the driver that shared
    it, the cost_id), never the stored row, so page and download show the same on a store and a
    bundle folder (access.scoped_costs).
    """
    page_size = max(1, min(int(page_size), MAX_PAGE_SIZE))
    fc = apply_filters(comp, filters)
    contrib, id_col = _record_contributions(fc, table, tenant, project, model, unset)
    total = contrib.height
    page = max(0, min(int(page), max(0, math.ceil(total / page_size) - 1)))
    chunk = contrib.slice(page * page_size, page_size).with_row_index("_order")
    ids = [i for i in chunk[id_col].to_list() if i is not None]
    shares = table == "costs" and fc.scoped_to is not None
    use_store = source_is_store(source) and not shares
    raw = _raw_records(fc.bundle, source if use_store else None, table, ids)
    on = id_col
    rows = chunk.join(raw, on=on, how="left", suffix="_raw").sort("_order").drop("_order")
    if table == "costs":
        rows = rows.drop([c for c in rows.columns if c.endswith("_raw")])
    tz = fc.period.timezone
    rows = rows.with_columns(
        pl.col(c).dt.convert_time_zone(tz) for c, d in rows.schema.items() if isinstance(d, pl.Datetime)
    )
    backend = "scoped" if shares else "store" if use_store else "memory"
    return RecordsPage(rows=rows, total=total, page=page, page_size=page_size, backend=backend)


def lineage_summary(
    comp: Computation, filters: Filters | None, *, tenant: str | None = None, project: str | None = None,
    model: str | None = None,
) -> dict:
    """How many records of each kind made a figure, and the cost they carry (lineage.explain)."""
    e = lineage.explain(apply_filters(comp, filters), tenant=tenant, project=project, model=model)
    return {
        "allocations": e.allocations.height,
        "requests": e.requests.height,
        "costs": e.costs.height,
        "total_cost": e.total_cost,
        "allocated_gpu_hours": float(e.allocations["allocated_gpu_hours"].sum() or 0.0),
        "tokens": int(e.requests.select(pl.sum_horizontal(*TOKEN_COLS).sum()).item() or 0) if e.requests.height else 0,
    }


def _raw_records(bundle: Bundle, store_path: str | Path | None, table: str, ids: list[str]) -> pl.DataFrame:
    key = RECORD_KEYS[table][0]
    if store_path is not None:
        from . import store

        if not ids:
            return store.query_records(store_path, table, ids=[], limit=0)
        return store.query_records(store_path, table, ids=ids, limit=len(ids))
    frame = bundle[table]
    return frame.filter(pl.col(key).is_in(ids))
