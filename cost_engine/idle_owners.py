"""Idle causes and owners, each seen from the other: the owners behind a cause (Idle page ->
Rankings) and the causes of the idle time an owner held (Rankings -> Idle page).

Both read the idle pieces of the engine (`views.idle_detail`, the report's idle lineage), so
their hours and costs add up to the idle figures of the same view.
"""

from __future__ import annotations

import polars as pl

from . import views
from .engine import Computation


def cause_owners(comp: Computation, filters: views.Filters | None, cause: str, kind: str | None = None
                 ) -> pl.DataFrame:
    """The owners (tenant, project) who held the cards while they idled for `cause`, most
    idle first: idle GPU-hours, energy, cost and allocations. Free (unallocated) idle has no
    owner: an empty frame."""
    d = views.idle_detail(comp, filters).filter((pl.col("cause") == cause) & pl.col("project").is_not_null())
    if kind is not None:
        d = d.filter(pl.col("kind") == kind)
    return (
        d.group_by("tenant", "project")
        .agg(pl.col("gpu_hours").sum().alias("idle_gpu_hours"), pl.col("energy_kwh_gpu").sum(), pl.col("cost").sum(),
             pl.col("allocation_id").drop_nulls().n_unique().alias("allocations"))
        .sort(["idle_gpu_hours", "tenant", "project"], descending=[True, False, False])
    )


def owner_idle(comp: Computation, filters: views.Filters | None, tenant: str, project: str | None = None
               ) -> pl.DataFrame:
    """The idle time a tenant (or one of its projects) held, by kind and cause: GPU-hours,
    energy and cost, most first."""
    d = views.idle_detail(comp, filters).filter(pl.col("tenant") == tenant)
    if project is not None:
        d = d.filter(pl.col("project") == project)
    return (
        d.group_by("kind", "cause")
        .agg(pl.col("gpu_hours").sum(), pl.col("energy_kwh_gpu").sum(), pl.col("cost").sum())
        .sort(["gpu_hours", "cause"], descending=[True, False])
    )
