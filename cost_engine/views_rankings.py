"""Rankings by tenant, project and model, and a project's models, jobs and services."""

from __future__ import annotations

from typing import Literal

import polars as pl

from . import report
from .engine import Computation
from .views_filters import Filters, TOKEN_COLS, apply_filters


RankLevel = Literal["tenant", "project", "model"]


SORTS = {
    "cost": "cost",
    "gpu_hours": "allocated_gpu_hours",
    "tokens": "tokens",
    "cost_per_million_tokens": "cost_per_million_tokens",
}


def _display_names(comp: Computation) -> pl.DataFrame:
    return comp.ownership.projects.select("project", "display_name")


def rankings(
    comp: Computation, filters: Filters | None = None, level: RankLevel = "tenant", sort: str = "cost",
    tenant: str | None = None,
) -> pl.DataFrame:
    """Tenant, project or model ranking (report's by_tenant / by_project / by_model rows).

    `sort`: cost | gpu_hours | tokens | cost_per_million_tokens, highest first (nulls last).
    `tenant` narrows a project ranking to one tenant (the drill-down's second level).
    """
    fc = apply_filters(comp, filters)
    if level == "tenant":
        t = report.owner_table(fc, ["tenant"])
    elif level == "project":
        t = report.owner_table(fc, ["tenant", "project"])
        if tenant is not None:
            t = t.filter(pl.col("tenant") == tenant)
        t = t.join(_display_names(fc), on="project", how="left").select(
            "tenant", "project", "display_name", pl.exclude("tenant", "project", "display_name")
        )
    elif level == "model":
        t = fc.models.select(
            "model", "cost", "allocated_gpu_hours", "active_gpu_hours", *TOKEN_COLS, "requests", "good_tokens",
            "cost_per_million_tokens", "cost_per_million_input_tokens", "cost_per_million_output_tokens",
            "cost_per_million_good_tokens", "output_tokens_per_joule", "energy_kwh_gpu", "cache_hit_rate",
            "slo_attainment", "error_share",
        )
    else:
        raise ValueError(f"unknown ranking level {level!r}")
    t = t.with_columns(pl.sum_horizontal(*TOKEN_COLS).alias("tokens"))
    if sort not in SORTS:
        raise ValueError(f"unknown sort {sort!r}; one of {list(SORTS)}")
    name = t.columns[0] if level != "project" else "project"
    return t.sort([SORTS[sort], name], descending=[True, False], nulls_last=True)


def top_tenants(comp: Computation, filters: Filters | None = None, n: int = 10) -> pl.DataFrame:
    return rankings(comp, filters, "tenant").head(n)


def _project_money(fc: Computation, tenant: str, project: str) -> pl.DataFrame:
    return fc.money.filter((pl.col("dest") == "owner") & (pl.col("tenant") == tenant) & (pl.col("project") == project))


def project_models(comp: Computation, filters: Filters | None, tenant: str, project: str) -> pl.DataFrame:
    """Per model: what the project paid for it (recharged inference or own serving) and its tokens."""
    fc = apply_filters(comp, filters)
    m = _project_money(fc, tenant, project).filter(pl.col("model").is_not_null())
    cost = m.group_by("model").agg(
        pl.col("amount").sum().alias("cost"),
        pl.col("amount").filter(pl.col("origin").str.contains("recharge")).sum().alias("recharged_cost"),
    )
    req = fc.requests.filter((pl.col("tenant") == tenant) & (pl.col("project") == project))
    tok = req.group_by("model").agg(
        *(pl.col(c).sum() for c in TOKEN_COLS), pl.col("requests").sum(),
        pl.col("tokens").filter(pl.col("good")).sum().alias("good_tokens"),
    )
    t = cost.join(tok, on="model", how="full", coalesce=True).with_columns(
        pl.col("cost", "recharged_cost").fill_null(0.0), pl.col(*TOKEN_COLS, "requests", "good_tokens").fill_null(0)
    )
    all_tok = pl.sum_horizontal(*TOKEN_COLS)
    return t.with_columns(
        all_tok.alias("tokens"),
        pl.when(all_tok > 0).then(pl.col("recharged_cost") / all_tok * 1e6).alias("cost_per_million_tokens"),
    ).sort(["cost", "model"], descending=[True, False])


def _jobs(fc: Computation, tenant: str, project: str, inference: bool) -> pl.DataFrame:
    serving = (pl.col("workload") == "inference").fill_null(False)
    seg = fc.seg.filter((pl.col("tenant") == tenant) & (pl.col("project") == project) & (serving if inference else ~serving))
    key = pl.coalesce("job_id", "allocation_id").alias("job")
    hours = seg.group_by(key).agg(
        pl.col("workload").first(), pl.col("model").first(), pl.col("pool").first(),
        pl.col("gpu_id").n_unique().alias("cards"), pl.col("allocation_id").n_unique().alias("allocations"),
        pl.col("t0").min().alias("first"), pl.col("t1").max().alias("last"),
        pl.col("alloc_h").sum().alias("allocated_gpu_hours"), pl.col("active_h").sum().alias("active_gpu_hours"),
        pl.col("kwh_gpu").sum().alias("energy_kwh_gpu"),
    )
    ids = fc.allocations.select("allocation_id", key)
    money = fc.money.filter(
        (pl.col("dest") == "owner") & (pl.col("tenant") == tenant) & (pl.col("project") == project)
        & pl.col("allocation_id").is_not_null()
    ).join(ids, on="allocation_id", how="inner").group_by("job").agg(pl.col("amount").sum().alias("cost"))
    tz = fc.period.timezone
    return (
        hours.join(money, on="job", how="left")
        .with_columns(
            pl.col("cost").fill_null(0.0),
            pl.col("first").dt.convert_time_zone(tz), pl.col("last").dt.convert_time_zone(tz),
        )
        .sort(["cost", "job"], descending=[True, False])
    )


def project_jobs(comp: Computation, filters: Filters | None, tenant: str, project: str) -> pl.DataFrame:
    """The project's jobs (training, fine-tuning, batch, interactive...): cards, hours, energy, cost."""
    return _jobs(apply_filters(comp, filters), tenant, project, inference=False)


def project_services(comp: Computation, filters: Filters | None, tenant: str, project: str) -> pl.DataFrame:
    """The project's inference services (allocations serving a model): cards, hours, cost kept."""
    return _jobs(apply_filters(comp, filters), tenant, project, inference=True)
