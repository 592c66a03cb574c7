"""Dashboard views: every table a page shows, as `(comp, filters, ...) -> pl.DataFrame`.

Pages lay out; this module computes. Each view narrows the Computation with `Filters`
(pool, accelerator, workload, tenant) and then reuses the report's own aggregations
(`report.totals`, `report.owner_table`, `report.trend`, `report.idle_detail`, ...), so an
unfiltered view gives exactly the report's figures.

How a filter narrows each frame (a row lacking the filtered dimension does not pass):
- card-time (segments, idle pieces, telemetry samples): the card's pool and accelerator,
  the holder's workload and tenant; with a workload or tenant filter, unallocated card-time
  drops out (it has neither), so "available" becomes that workload's or tenant's held time;
- money rows: the card's pool and accelerator (a row spread without a card, e.g. a fleet-wide
  or direct cost, passes a pool filter by its own pool and never passes an accelerator filter),
  the row's workload and tenant (idle and unattributed money have no tenant);
- requests: the tenant that sent them; pool and accelerator through the models served on
  those cards; a workload filter keeps them only when it includes `inference`.

Nothing here imports streamlit: the dashboard, the exporters and the tests call it alike.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo

import polars as pl
from pydantic import BaseModel, ConfigDict, field_validator

from . import activity, lineage, record_via, report, tokens
from .bundle import Bundle
from .config import BOUNDARY_PRESETS, Config, parse_config
from .contract import CATEGORIES, IDLE, RECORD_KEYS, TABLE_NAMES, UNATTRIBUTED
from .engine import Computation

TOKEN_COLS = tokens.TOKEN_COLS
MAX_PAGE_SIZE = 200
TIMELINE_POINTS = 1500


# ----------------------------------------------------------------------------------- filters


class Filters(BaseModel):
    """What the sidebar narrows every page to; an empty tuple means "all"."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pools: tuple[str, ...] = ()
    accelerators: tuple[str, ...] = ()
    workloads: tuple[str, ...] = ()
    tenants: tuple[str, ...] = ()

    @field_validator("pools", "accelerators", "workloads", "tenants", mode="before")
    @classmethod
    def _sorted_unique(cls, v: Any) -> tuple[str, ...]:
        if v is None:
            return ()
        if isinstance(v, str):
            v = [v]
        return tuple(sorted({str(x) for x in v}))

    @property
    def empty(self) -> bool:
        return not (self.pools or self.accelerators or self.workloads or self.tenants)

    def key(self) -> str:
        """A stable text key (cache keys, file names)."""
        return self.model_dump_json()

    def describe(self) -> str:
        parts = [f"{k}: {', '.join(v)}" for k, v in self.model_dump().items() if v]
        return "; ".join(parts) if parts else "no filters"


NO_FILTERS = Filters()


def filter_options(comp: Computation) -> dict[str, list[str]]:
    """The values each sidebar filter can take in this computation."""
    cards = comp.ledger.cards
    # unique() before to_list(): the sidebar runs this on every rerun, over millions of requests.
    tenants = set(comp.ownership.projects["tenant"].drop_nulls().unique().to_list())
    tenants |= set(comp.seg["tenant"].drop_nulls().unique().to_list())
    tenants |= set(comp.requests["tenant"].drop_nulls().unique().to_list())
    return {
        "pools": sorted(cards["pool"].drop_nulls().unique().to_list()),
        "accelerators": sorted(cards["accelerator"].drop_nulls().unique().to_list()),
        "workloads": sorted(comp.allocations["workload"].drop_nulls().unique().to_list()),
        "tenants": sorted(tenants),
    }


def _isin(col: str, values: Iterable[str]) -> pl.Expr:
    return pl.col(col).is_in(list(values)).fill_null(False)


# id(comp) -> {filters key: filtered computation}; entries go when the computation does.
_FILTERED: dict[int, dict[str, Computation]] = {}


def apply_filters(comp: Computation, filters: Filters | None) -> Computation:
    """The computation narrowed to the filters (the same object when there are none).

    Every frame a view reads is narrowed; `inputs` becomes the narrowed money (so the cost
    total is what landed inside the filter), and the by-model table is recomputed by the
    engine's own `tokens.model_table` over the narrowed frames.
    """
    if filters is None or filters.empty:
        return comp
    memo = _FILTERED.get(id(comp))
    if memo is None:
        memo = _FILTERED[id(comp)] = {}
        weakref.finalize(comp, _FILTERED.pop, id(comp), None)
    hit = memo.get(filters.key())
    if hit is not None:
        return hit

    f = filters
    cards = comp.ledger.cards
    if f.pools:
        cards = cards.filter(_isin("pool", f.pools))
    if f.accelerators:
        cards = cards.filter(_isin("accelerator", f.accelerators))
    gpus = cards["gpu_id"].to_list()

    def held(frame: pl.DataFrame) -> pl.DataFrame:
        out = frame.filter(_isin("gpu_id", gpus)) if (f.pools or f.accelerators) else frame
        if f.workloads:
            out = out.filter(_isin("workload", f.workloads))
        if f.tenants:
            out = out.filter(_isin("tenant", f.tenants))
        return out

    def money(frame: pl.DataFrame) -> pl.DataFrame:
        out = frame
        if f.accelerators:
            out = out.filter(_isin("gpu_id", gpus))
        elif f.pools:
            out = out.filter(
                _isin("gpu_id", gpus) | (pl.col("gpu_id").is_null() & _isin("pool", f.pools))
            )
        if f.workloads:
            out = out.filter(_isin("workload", f.workloads))
        if f.tenants:
            out = out.filter(_isin("tenant", f.tenants))
        return out

    seg = held(comp.seg)
    req = comp.requests
    if f.tenants:
        req = req.filter(_isin("tenant", f.tenants))
    if f.pools or f.accelerators:
        served = (
            comp.seg.filter(_isin("gpu_id", gpus) & (pl.col("workload") == "inference"))["model"]
            .drop_nulls()
            .unique()
            .to_list()
        )
        req = req.filter(_isin("model", served))
    if f.workloads and "inference" not in f.workloads:
        req = req.head(0)

    m_final = money(comp.money)
    m_before = money(comp.money_before_recharge)
    extra: dict[str, Any] = {}
    if hasattr(comp, "money_spread"):
        extra["money_spread"] = money(comp.money_spread)
    models, _ = tokens.model_table(m_before, seg, req, comp.config)
    inputs = m_final.group_by("origin", "cost_id", "category", "pool").agg(pl.col("amount").sum()).rename(
        {"cost_id": "id"}
    ).select("origin", "id", "category", "pool", "amount")
    out = dataclasses.replace(
        comp,
        ledger=dataclasses.replace(comp.ledger, cards=cards),
        seg=seg,
        money=m_final,
        unmapped_callers=_unmapped_within(comp.unmapped_callers, comp.money, m_final),
        money_before_recharge=m_before,
        inputs=inputs,
        requests=req,
        models=models,
        idle=comp.idle.join(seg.select("s_idx"), on="s_idx", how="semi"),
        card_energy=comp.card_energy.filter(_isin("gpu_id", gpus)) if (f.pools or f.accelerators) else comp.card_energy,
        telemetry=comp.telemetry.only(sorted(gpus)) if (f.pools or f.accelerators) else comp.telemetry,
        allocations=held(comp.allocations),
        **extra,
    )
    if len(memo) > 16:
        memo.clear()
    memo[filters.key()] = out
    return out


def _unmapped_within(unmapped: pl.DataFrame, money: pl.DataFrame, narrowed: pl.DataFrame) -> pl.DataFrame:
    """What each unmapped caller key paid per model, scaled to the part of the model's recharged
    money the filters keep (their collapsed line in `money`: unattributed, u_key null)."""
    line = (pl.col("dest") == "unattributed") & pl.col("u_key").is_null()
    kept = narrowed.filter(line).group_by("model").agg(pl.col("amount").sum().alias("kept"))
    whole = money.filter(line).group_by("model").agg(pl.col("amount").sum().alias("whole"))
    ratio = whole.join(kept, on="model", how="left").select(
        "model", pl.when(pl.col("whole") != 0).then(pl.col("kept").fill_null(0.0) / pl.col("whole")).otherwise(0.0).alias("r")
    )
    return unmapped.join(ratio, on="model", how="left").with_columns(
        (pl.col("amount") * pl.col("r").fill_null(0.0)).alias("amount")
    ).drop("r").filter(pl.col("amount") != 0)


# ------------------------------------------------------------------------------ headline figures


def totals(comp: Computation, filters: Filters | None = None) -> dict:
    """The report's totals under the filters (unfiltered: exactly report.totals)."""
    return report.totals(apply_filters(comp, filters))


def _num(v: Any) -> float | None:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return None
    return float(v)


def kpi_cards(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """The overview's headline figures: key, label, value, unit, detail (one row per card)."""
    t = totals(comp, filters)
    cur = comp.period.currency
    tokens_all = sum(t[c] or 0 for c in TOKEN_COLS)
    rows = [
        ("allocated_gpu_hours", "Allocated GPU-h", t["allocated_gpu_hours"], "GPU-h",
         f"Total accelerator hours allocated to owners; active {_fmt(t['active_gpu_hours'])} GPU-h."),
        ("available_gpu_hours", "Available GPU-h", t["available_gpu_hours"], "GPU-h",
         "Card-hours of capacity in service in the period."),
        ("allocation_rate", "Allocated / available", t["allocation_rate"], "ratio",
         f"{_fmt(t['allocated_gpu_hours'], 0)} of {_fmt(t['available_gpu_hours'], 0)} GPU-h allocated."),
        ("idle_rate", "Idle rate", t["idle_rate"], "ratio", "1 - active / available GPU-hours."),
        ("cost_per_gpu_hour", f"{cur} per GPU-hour", t["cost_per_gpu_hour"], f"{cur}/GPU-h",
         f"Cost / available GPU-hours; per allocated GPU-hour {_fmt(t['cost_per_allocated_gpu_hour'], 3)}."),
        ("cost", f"Total cost ({cur})", t["cost"], cur, f"Inside the boundary; energy cost {_fmt(t['energy_cost'], 2)}."),
        ("tokens", "Tokens", float(tokens_all), "tokens",
         f"Input + cached + output tokens of {_fmt(t['requests'], 0)} requests."),
        ("cost_per_million_tokens", f"{cur} per 1M tokens", t["cost_per_million_tokens"], f"{cur}/1M tokens",
         f"Model cost / tokens served; per 1M good tokens {_fmt(t['cost_per_million_good_tokens'], 3)}."),
        ("energy_kwh_gpu", "GPU energy (kWh)", t["energy_kwh_gpu"], "kWh",
         f"Measured GPU energy; facility {_fmt(t['energy_kwh_facility'])} kWh."),
        ("output_tokens_per_joule", "Tokens per joule", t["output_tokens_per_joule"], "tokens/J",
         "Output tokens / GPU joules of the allocations that served them."),
    ]
    return pl.DataFrame(
        [{"key": k, "label": lab, "value": _num(v), "unit": u, "detail": d if _num(v) is not None else _unknown(k)}
         for k, lab, v, u, d in rows],
        schema={"key": pl.String, "label": pl.String, "value": pl.Float64, "unit": pl.String, "detail": pl.String},
    )


# Why a headline figure is unknown (shown as "—" with this as its tooltip), never 0.
UNKNOWN = {
    "idle_rate": "Unknown: no telemetry covers the allocated time, so active hours (and the idle rate) cannot be "
                 "measured; or there is no inventory to measure available hours against.",
    "available_gpu_hours": "Unknown: the bundle has no inventory, so capacity in service is not known.",
    "allocation_rate": "Unknown: the bundle has no inventory, so capacity in service is not known.",
    "cost_per_gpu_hour": "Unknown: the bundle has no inventory, so capacity in service is not known.",
    "energy_kwh_gpu": "Unknown: no telemetry sample reports power or an energy counter.",
    "output_tokens_per_joule": "Unknown: no energy was measured on the allocations that served the tokens.",
    "cost_per_million_tokens": "Unknown: no model with cost served tokens in the period.",
}


def _unknown(key: str) -> str:
    return UNKNOWN.get(key, "Unknown: the inputs this figure needs are missing (see the gaps on the Data page).")


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "—"
    return f"{v:,.{digits}f}"


def _pct(v: Any) -> str:
    return "—" if v is None else f"{100 * v:.1f} %"


def format_value(value: float | None, unit: str) -> str:
    """How a KPI card shows its value (shared by pages and the review pack): compact, unit-free."""
    if value is None:
        return "—"
    if unit == "ratio":
        return f"{100 * value:.1f} %"
    if unit == "tokens/J":
        return f"{value:.4f}"
    a = abs(value)
    if a >= 1e9:
        return f"{value / 1e9:,.2f} B"
    if a >= 1e6:
        return f"{value / 1e6:,.2f} M"
    if unit in ("tokens", "GPU-h", "kWh"):
        return f"{value:,.0f}" if a >= 1000 else f"{value:,.1f}"
    return f"{value:,.2f}" if a >= 10 else f"{value:,.3f}"


def reconciliation(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Where the money landed: owners, idle, unattributed (unfiltered: the report's reconciliation)."""
    fc = apply_filters(comp, filters)
    if fc is comp:
        return pl.DataFrame([report.reconciliation(comp)])
    m = fc.money
    by = {d: float(m.filter(pl.col("dest") == d)["amount"].sum()) for d in ("owner", IDLE, UNATTRIBUTED)}
    return pl.DataFrame([{"input_cost": float(m["amount"].sum()), "attributed": by["owner"], "idle": by[IDLE],
                          "unattributed": by[UNATTRIBUTED], "difference": 0.0}])


def trend(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Daily figures in the period's time zone (report.trend), plus cost per allocated GPU-hour."""
    t = report.trend(apply_filters(comp, filters))
    return t.with_columns(
        pl.when(pl.col("allocated_gpu_hours") > 0)
        .then(pl.col("cost") / pl.col("allocated_gpu_hours"))
        .alias("cost_per_allocated_gpu_hour"),
        pl.sum_horizontal(*TOKEN_COLS).alias("tokens"),
    )


def by_category(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    fc = apply_filters(comp, filters)
    return fc.inputs.group_by("category").agg(pl.col("amount").sum().alias("cost")).sort(
        ["cost", "category"], descending=[True, False]
    )


def gaps(comp: Computation) -> pl.DataFrame:
    return pl.DataFrame([{"what": w, "detail": d} for w, d in comp.gaps], schema={"what": pl.String, "detail": pl.String})


# ------------------------------------------------------------------------------------ rankings

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


# --------------------------------------------------------------------------- raw records (paged)

RecordTable = Literal["allocations", "requests", "costs"]


@dataclass(frozen=True)
class RecordsPage:
    """One page of the raw records behind a figure, and where it sits in the whole list."""

    rows: pl.DataFrame
    total: int
    page: int
    page_size: int
    backend: str  # "store" (DuckDB, bound parameters) or "memory" (the bundle's frames)

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
    """
    page_size = max(1, min(int(page_size), MAX_PAGE_SIZE))
    fc = apply_filters(comp, filters)
    contrib, id_col = _record_contributions(fc, table, tenant, project, model, unset)
    total = contrib.height
    page = max(0, min(int(page), max(0, math.ceil(total / page_size) - 1)))
    chunk = contrib.slice(page * page_size, page_size).with_row_index("_order")
    ids = [i for i in chunk[id_col].to_list() if i is not None]
    use_store = source_is_store(source)
    raw = _raw_records(fc.bundle, source if use_store else None, table, ids)
    on = id_col
    rows = chunk.join(raw, on=on, how="left", suffix="_raw").sort("_order").drop("_order")
    if table == "costs":
        rows = rows.drop([c for c in rows.columns if c.endswith("_raw")])
    tz = fc.period.timezone
    rows = rows.with_columns(
        pl.col(c).dt.convert_time_zone(tz) for c, d in rows.schema.items() if isinstance(d, pl.Datetime)
    )
    return RecordsPage(rows=rows, total=total, page=page, page_size=page_size, backend="store" if use_store else "memory")


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


# ----------------------------------------------------------------------------------------- idle


def idle_detail(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Every idle piece with card, owner, day and cost (the engine's report.idle_detail)."""
    return report.idle_detail(apply_filters(comp, filters))


def idle_backlog(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Idle by cause as a backlog: kind, cause, GPU-hours, energy, cost, share, top offenders, action."""
    from . import idle

    d = idle_detail(comp, filters)
    if not hasattr(idle, "backlog"):
        return report.idle_table(apply_filters(comp, filters))
    b = idle.backlog(d)
    if "top_offenders" in b.columns:
        # Cards are named by node and a short id (jobs keep their ids): readable, still traceable.
        names = {g: lab for g, lab in card_label(comp).items()}
        b = b.with_columns(
            pl.col("top_offenders").list.eval(pl.element().replace(names)).alias("top_offenders")
        )
    return b


def idle_summary(comp: Computation, filters: Filters | None = None) -> dict:
    """Idle GPU-hours and cost, unallocated and allocated, and the idle rate."""
    t = idle_by_cause(comp, filters)
    tot = totals(comp, filters)

    def pick(kind: str, col: str) -> float:
        return float(t.filter(pl.col("kind") == kind)[col].sum() or 0.0)

    return {
        "unallocated_gpu_hours": pick("unallocated", "gpu_hours"),
        "allocated_gpu_hours": pick("allocated", "gpu_hours"),
        "unallocated_cost": pick("unallocated", "cost"),
        "allocated_cost": pick("allocated", "cost"),
        "idle_energy_kwh_gpu": float(t["energy_kwh_gpu"].sum() or 0.0),
        "idle_rate": tot["idle_rate"],
        "causes": t.height,
    }


def idle_by_cause(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Idle GPU-hours, energy and cost per (kind, cause): the report's idle rows."""
    return report.idle_table(apply_filters(comp, filters))


def idle_daily(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Idle GPU-hours, energy and cost per day (period time zone) and cause, for a stacked chart."""
    d = idle_detail(comp, filters)
    return (
        d.group_by("day", "kind", "cause")
        .agg(pl.col("gpu_hours").sum(), pl.col("energy_kwh_gpu").sum(), pl.col("cost").sum())
        .sort(["day", "kind", "cause"], descending=[False, True, False])
    )


def week_start(comp: Computation) -> date:
    """First day (period time zone) of the period's last 7 x 24 hours: "this week"."""
    tz = ZoneInfo(comp.period.timezone)
    first = comp.period.start.astimezone(tz).date()
    return max(first, (comp.period.end - timedelta(days=7)).astimezone(tz).date())


def idle_this_week(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Idle GPU-hours and cost by cause over the period's last seven days."""
    d = idle_detail(comp, filters).filter(pl.col("day") >= week_start(comp))
    return (
        d.group_by("kind", "cause")
        .agg(pl.col("gpu_hours").sum(), pl.col("energy_kwh_gpu").sum(), pl.col("cost").sum())
        .sort(["gpu_hours", "cause"], descending=[True, False])
    )


def idle_by_pool(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Idle GPU-hours and cost per pool, accelerator and cause."""
    d = idle_detail(comp, filters)
    return (
        d.group_by("pool", "accelerator", "kind", "cause")
        .agg(pl.col("gpu_hours").sum(), pl.col("energy_kwh_gpu").sum(), pl.col("cost").sum())
        .sort(["pool", "accelerator", "gpu_hours"], descending=[False, False, True], nulls_last=True)
    )


def idle_cards(comp: Computation, filters: Filters | None, cause: str, kind: str | None = None) -> pl.DataFrame:
    """The cards behind an idle cause: GPU-hours, energy and cost each, most idle first."""
    d = idle_detail(comp, filters).filter(pl.col("cause") == cause)
    if kind is not None:
        d = d.filter(pl.col("kind") == kind)
    return (
        d.group_by("gpu_id", "node", "pool", "accelerator")
        .agg(
            pl.col("gpu_hours").sum(), pl.col("energy_kwh_gpu").sum(), pl.col("cost").sum(),
            pl.col("allocation_id").drop_nulls().n_unique().alias("allocations"),
        )
        .sort(["gpu_hours", "gpu_id"], descending=[True, False])
    )


def idle_allocations(comp: Computation, filters: Filters | None, cause: str, kind: str | None = None) -> pl.DataFrame:
    """The allocations behind an idle cause (allocated idle): owner, job, idle hours and cost."""
    d = idle_detail(comp, filters).filter((pl.col("cause") == cause) & pl.col("allocation_id").is_not_null())
    if kind is not None:
        d = d.filter(pl.col("kind") == kind)
    tz = comp.period.timezone
    return (
        d.group_by("allocation_id")
        .agg(
            pl.col("tenant").first(), pl.col("project").first(), pl.col("job_id").first(),
            pl.col("workload").first(), pl.col("model").first(), pl.col("gpu_id").first(), pl.col("node").first(),
            pl.col("t0").min().dt.convert_time_zone(tz).alias("first_idle"),
            pl.col("t1").max().dt.convert_time_zone(tz).alias("last_idle"),
            pl.col("gpu_hours").sum().alias("idle_gpu_hours"), pl.col("energy_kwh_gpu").sum(), pl.col("cost").sum(),
        )
        .sort(["idle_gpu_hours", "allocation_id"], descending=[True, False])
    )


def card_label(comp: Computation) -> dict[str, str]:
    """gpu_id -> a readable label: node · accelerator · short id."""
    out = {}
    for r in comp.ledger.cards.iter_rows(named=True):
        gid = r["gpu_id"]
        short = gid if len(gid) <= 16 else gid[:12] + "…"
        parts = [p for p in (r.get("node"), short) if p]
        out[gid] = " · ".join(parts)
    return out


def card_timeline(comp: Computation, gpu_id: str, max_points: int = TIMELINE_POINTS) -> pl.DataFrame:
    """A card's telemetry over the period (period time zone): util and power, averaged into
    at most `max_points` buckets (time-weighted), so the browser gets a bounded series.

    The card's raw samples are read from the computation's telemetry source (the store, for
    a store), one card and one period only. A tenant-scoped source holds only the samples of
    the time its tenants held the card, and each sample's interval is cut where that ends."""
    p = comp.period
    tz = p.timezone
    gap = comp.config.activity.max_sample_gap_s
    raw = comp.telemetry.card(gpu_id, p.start, p.end + timedelta(seconds=gap))
    s = activity.sample_intervals(raw, gap).filter(pl.col("ts") < p.end)
    held = comp.telemetry.held(gpu_id)
    if held is not None and s.height:
        s = (
            s.sort("ts").join_asof(held.sort("t0"), left_on="ts", right_on="t0", strategy="backward")
            .with_columns(pl.min_horizontal("t_end", "t1").alias("t_end"))
            .with_columns(((pl.col("t_end") - pl.col("ts")).dt.total_microseconds() / 1e6).alias("dt_s"))
            .filter(pl.col("dt_s") > 0)
        )
    if s.height == 0:
        return pl.DataFrame(schema={"ts": pl.Datetime("us", tz), "util_pct": pl.Float64, "power_w": pl.Float64})
    span_s = max((p.end - p.start).total_seconds(), 1.0)
    every_s = max(60, math.ceil(span_s / max_points / 60) * 60)
    w = pl.col("dt_s")
    out = (
        s.with_columns(pl.col("ts").dt.truncate(f"{every_s}s").alias("bucket"))
        .group_by("bucket")
        .agg(
            ((pl.col("util_pct") * w).sum() / w.sum()).alias("util_pct"),
            pl.when(pl.col("power_w").is_not_null().any())
            .then((pl.col("power_w") * w).filter(pl.col("power_w").is_not_null()).sum()
                  / w.filter(pl.col("power_w").is_not_null()).sum())
            .alias("power_w"),
        )
        .sort("bucket")
        .select(pl.col("bucket").dt.convert_time_zone(tz).alias("ts"), "util_pct", "power_w")
    )
    return out


def card_allocations(comp: Computation, gpu_id: str) -> pl.DataFrame:
    """The allocations held on a card in the period, clipped to it, with their owners."""
    p = comp.period
    tz = p.timezone
    a = comp.allocations.filter(pl.col("gpu_id") == gpu_id)
    return (
        a.select(
            "allocation_id", "tenant", "project", "workload", "job_id", "model", "share",
            pl.max_horizontal(pl.col("start"), pl.lit(p.start)).dt.convert_time_zone(tz).alias("start"),
            pl.min_horizontal(pl.col("end"), pl.lit(p.end)).dt.convert_time_zone(tz).alias("end"),
        )
        .filter(pl.col("end") > pl.col("start"))
        .sort("start")
    )


# --------------------------------------------------------------------------------------- energy


def energy_daily(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Per day: GPU and facility kWh, energy cost (power category), CO2e where tariffs carry it, tokens.

    Unknown is not zero: a day no sample measured has unknown energy and CO2e, and an unknown
    energy cost too where that cost would be measured energy x price (no power cost row)."""
    fc = apply_filters(comp, filters)
    s = fc.seg.group_by("day").agg(
        pl.col("kwh_gpu").sum().alias("energy_kwh_gpu"),
        pl.col("kwh_fac").sum().alias("energy_kwh_facility"),
        (pl.col("carbon_g").sum() / 1000).alias("co2e_kg"),
        pl.col("carbon_known").any().alias("_has_carbon"),
        (pl.col("energy_s").sum() > 0).alias("_metered"),
    )
    c = fc.money.filter(pl.col("category") == "power").group_by("day").agg(pl.col("amount").sum().alias("energy_cost"))
    r = fc.requests.group_by("day").agg(pl.col("output_tokens").sum())
    t = s.join(c, on="day", how="full", coalesce=True).join(r, on="day", how="full", coalesce=True).drop_nulls("day")
    metered = pl.col("_metered").fill_null(False)
    cost_known = metered | (pl.col("energy_cost") != 0) | pl.lit(not report.energy_priced_by_measurement(fc))
    return t.with_columns(
        pl.col("energy_kwh_gpu", "energy_kwh_facility", "energy_cost").fill_null(0.0),
        pl.col("output_tokens").fill_null(0),
    ).with_columns(
        *(pl.when(metered).then(pl.col(k)).alias(k) for k in ("energy_kwh_gpu", "energy_kwh_facility")),
        pl.when(cost_known).then(pl.col("energy_cost")).alias("energy_cost"),
        pl.when(metered & pl.col("_has_carbon").fill_null(False)).then(pl.col("co2e_kg")).alias("co2e_kg"),
    ).drop("_has_carbon", "_metered").sort("day")


def power_profile(
    comp: Computation, filters: Filters | None = None, cap_kw: float | None = None, every: str = "1h"
) -> pl.DataFrame:
    """Average GPU and facility power per time bucket (period time zone) against a site cap.

    GPU power = measured joules of the samples starting in the bucket / bucket length;
    facility power applies the config's server_overhead and PUE (the same allocation method
    as facility kWh). Buckets are UTC-aligned multiples of the engine's quarter-hour card
    energy (`Computation.card_energy`), so `every` is 15m or a multiple of it.
    """
    fc = apply_filters(comp, filters)
    e = fc.config.energy
    tz = fc.period.timezone
    s = fc.card_energy.rename({"bucket": "ts"})
    if (_amount(every) * {"m": 60, "h": 3600, "d": 86400}[every[-1]]) % 900:
        raise ValueError(f"power profile bucket {every!r}: use 15m or a multiple of it")
    seconds = pl.duration(**{_unit(every): _amount(every)}).dt.total_seconds()
    if s.height == 0:
        return pl.DataFrame(schema={"ts": pl.Datetime("us", tz), "gpu_kw": pl.Float64, "facility_kw": pl.Float64,
                                    "cap_kw": pl.Float64, "over_cap": pl.Boolean})
    out = (
        s.group_by(pl.col("ts").dt.truncate(every).alias("bucket"))
        .agg(pl.col("joules").sum())
        .sort("bucket")
        .with_columns((pl.col("joules") / seconds / 1000).alias("gpu_kw"))
        .with_columns((pl.col("gpu_kw") * e.server_overhead * e.pue).alias("facility_kw"))
        .select(pl.col("bucket").dt.convert_time_zone(tz).alias("ts"), "gpu_kw", "facility_kw")
    )
    cap = pl.lit(cap_kw, dtype=pl.Float64)
    return out.with_columns(cap.alias("cap_kw"), (pl.col("facility_kw") > cap).fill_null(False).alias("over_cap"))


def _unit(every: str) -> str:
    return {"m": "minutes", "h": "hours", "d": "days"}[every[-1]]


def _amount(every: str) -> int:
    return int(every[:-1])


def power_cap_summary(profile: pl.DataFrame, every: str = "1h") -> dict:
    """Peak and mean facility power, buckets over the cap and the energy above it (kWh)."""
    if profile.height == 0:
        return {"peak_kw": None, "mean_kw": None, "hours_over_cap": 0.0, "kwh_over_cap": 0.0, "cap_kw": None}
    h = _amount(every) * {"m": 1 / 60, "h": 1.0, "d": 24.0}[every[-1]]
    cap = profile["cap_kw"][0]
    over = profile.filter(pl.col("over_cap"))
    return {
        "peak_kw": float(profile["facility_kw"].max()),
        "mean_kw": float(profile["facility_kw"].mean()),
        "hours_over_cap": over.height * h,
        "kwh_over_cap": float(((over["facility_kw"] - cap) * h).sum()) if cap is not None else 0.0,
        "cap_kw": cap,
    }


def model_energy(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Per model: GPU energy of the serving allocations, output tokens and tokens per joule."""
    fc = apply_filters(comp, filters)
    return fc.models.select(
        "model", "energy_kwh_gpu", "output_tokens", "output_tokens_per_joule", "output_tokens_per_joule_facility",
        "allocated_gpu_hours", "cost",
    ).sort(["output_tokens_per_joule", "model"], descending=[True, False], nulls_last=True)


def energy_totals(comp: Computation, filters: Filters | None = None) -> dict:
    t = totals(comp, filters)
    fc = apply_filters(comp, filters)
    has_carbon = fc.seg["carbon_known"].any() if fc.seg.height else False
    return {
        "energy_kwh_gpu": t["energy_kwh_gpu"],
        "energy_kwh_facility": t["energy_kwh_facility"],
        "energy_cost": t["energy_cost"],
        "avg_power_w": t.get("avg_power_w"),
        "carbon_kg": t.get("carbon_kg") if has_carbon else None,
        "output_tokens_per_joule": t["output_tokens_per_joule"],
        "method": f"facility = GPU kWh x server_overhead {fc.config.energy.server_overhead:g} x PUE {fc.config.energy.pue:g}",
    }


# ------------------------------------------------------------------------------- unit economics


def unit_economics(comp: Computation, filters: Filters | None = None, target: float | None = None) -> pl.DataFrame:
    """Per model: $/1M tokens (all, input incl. cached, output, good), SLO attainment, cache hit
    rate, the token mix, and the gap to a target $/1M tokens (`vs_target` = cost / target)."""
    fc = apply_filters(comp, filters)
    m = fc.models
    all_tok = pl.sum_horizontal(*TOKEN_COLS)
    t = m.select(
        "model", "cost", "requests", *TOKEN_COLS, "good_tokens",
        "cost_per_million_tokens", "cost_per_million_input_tokens", "cost_per_million_uncached_input_tokens",
        "cost_per_million_cached_input_tokens", "cost_per_million_output_tokens",
        "cost_per_million_good_tokens", "slo_attainment", "cache_hit_rate", "error_share",
        pl.when(all_tok > 0).then(pl.col("input_tokens") / all_tok).alias("input_share"),
        pl.when(all_tok > 0).then(pl.col("cached_input_tokens") / all_tok).alias("cached_share"),
        pl.when(all_tok > 0).then(pl.col("output_tokens") / all_tok).alias("output_share"),
    )
    tgt = pl.lit(target, dtype=pl.Float64)
    t = t.with_columns(
        tgt.alias("target"),
        pl.when(tgt > 0).then(pl.col("cost_per_million_tokens") / tgt).alias("vs_target"),
        (pl.col("cost_per_million_tokens") <= tgt).alias("meets_target"),
    )
    return t.sort(["cost_per_million_tokens", "model"], nulls_last=True)


def unit_totals(comp: Computation, filters: Filters | None = None) -> dict:
    """Fleet-level unit economics: $/1M tokens (all, good), good-token share, cache hit rate."""
    t = totals(comp, filters)
    tok = sum(t[c] or 0 for c in TOKEN_COLS)
    cached_in = (t["input_tokens"] or 0) + (t["cached_input_tokens"] or 0)
    return {
        "cost_per_million_tokens": t["cost_per_million_tokens"],
        "cost_per_million_good_tokens": t["cost_per_million_good_tokens"],
        "tokens": tok,
        "good_token_share": (t["good_tokens"] / tok) if tok else None,
        "cache_hit_rate": (t["cached_input_tokens"] / cached_in) if cached_in else None,
        "requests": t["requests"],
        "output_tokens_per_joule": t["output_tokens_per_joule"],
    }


# ----------------------------------------------------------------------------------------- data


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


# ---------------------------------------------------------------------------------------- rules


def config_with(base: Config, **changes: Any) -> Config:
    """A copy of `base` with rule changes applied, validated by the config's own parser.

    Keywords: boundary (preset name or "custom"), categories (with custom), drivers (dict),
    idle, inference_recharge, token_split, activity_mode, threshold_pct, max_sample_gap_s,
    pue, server_overhead, flat_price_per_kwh, ttft_ms, latency_ms, period_start, period_end.
    Unknown keywords raise; None leaves a value as it is.
    """
    data = base.model_dump(exclude_none=True)
    where = {
        "idle": ("allocation", "idle"),
        "inference_recharge": ("allocation", "inference_recharge"),
        "token_split": ("allocation", "token_split"),
        "drivers": ("allocation", "drivers"),
        "activity_mode": ("activity", "mode"),
        "threshold_pct": ("activity", "threshold_pct"),
        "max_sample_gap_s": ("activity", "max_sample_gap_s"),
        "pue": ("energy", "pue"),
        "server_overhead": ("energy", "server_overhead"),
        "flat_price_per_kwh": ("energy", "flat_price_per_kwh"),
        "ttft_ms": ("slo", "ttft_ms"),
        "latency_ms": ("slo", "latency_ms"),
        "period_start": ("period", "start"),
        "period_end": ("period", "end"),
    }
    for k, v in changes.items():
        if v is None:
            continue
        if k == "boundary":
            data["boundary"] = {"name": v}
            if v == "custom":
                cats = changes.get("categories") or base.boundary.included
                data["boundary"]["categories"] = [c for c in CATEGORIES if c in set(cats)]
        elif k == "categories":
            if changes.get("boundary") is None:
                data["boundary"] = {"name": "custom", "categories": [c for c in CATEGORIES if c in set(v)]}
        elif k in where:
            sec, key = where[k]
            data.setdefault(sec, {})[key] = dict(v) if isinstance(v, dict) else v
        else:
            raise TypeError(f"config_with: unknown rule {k!r}")
    b = data.get("boundary", {})
    # A custom boundary that equals a preset is that preset.
    if b.get("name") == "custom":
        for name, cats in BOUNDARY_PRESETS.items():
            if tuple(b.get("categories") or ()) == tuple(cats):
                data["boundary"] = {"name": name}
                break
    return parse_config(data)


def period_config(base: Config, comp: Computation, start: date | None, end: date | None) -> Config:
    """`base` with the period narrowed to whole days [start, end] in the period's time zone."""
    tz = ZoneInfo(comp.period.timezone)
    s = e = None
    if start is not None:
        s = datetime(start.year, start.month, start.day, tzinfo=tz).astimezone(timezone.utc)
        s = max(s, comp.period.start)
    if end is not None:
        e = (datetime(end.year, end.month, end.day, tzinfo=tz) + timedelta(days=1)).astimezone(timezone.utc)
        e = min(e, comp.period.end)
    if s is not None and e is not None and e <= s:
        return base
    return config_with(base, period_start=s, period_end=e)


def period_days(comp: Computation) -> tuple[date, date]:
    """First and last day of the period in its time zone."""
    tz = ZoneInfo(comp.period.timezone)
    return (
        comp.period.start.astimezone(tz).date(),
        (comp.period.end - timedelta(microseconds=1)).astimezone(tz).date(),
    )


def compare_rules(comp_a: Computation, comp_b: Computation, level: Literal["tenant", "project"] = "tenant",
                  filters: Filters | None = None) -> pl.DataFrame:
    """The same owners under rule set A and B: cost, allocated GPU-hours, and the difference."""
    keys = ["tenant"] if level == "tenant" else ["tenant", "project"]
    a = report.owner_table(apply_filters(comp_a, filters), keys).select(*keys, pl.col("cost").alias("cost_a"))
    b = report.owner_table(apply_filters(comp_b, filters), keys).select(*keys, pl.col("cost").alias("cost_b"))
    t = a.join(b, on=keys, how="full", coalesce=True).with_columns(pl.col("cost_a", "cost_b").fill_null(0.0))
    return t.with_columns(
        (pl.col("cost_b") - pl.col("cost_a")).alias("difference"),
        pl.when(pl.col("cost_a") != 0).then((pl.col("cost_b") - pl.col("cost_a")) / pl.col("cost_a")).alias("change"),
    ).sort(["cost_a", *keys], descending=[True] + [False] * len(keys))


def compare_totals(comp_a: Computation, comp_b: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Headline totals under A and B side by side."""
    ta, tb = totals(comp_a, filters), totals(comp_b, filters)
    keys = ["cost", "cost_per_gpu_hour", "cost_per_allocated_gpu_hour", "cost_per_million_tokens",
            "active_gpu_hours", "idle_rate", "energy_kwh_facility", "energy_cost"]
    rows = []
    for k in keys:
        a, b = _num(ta.get(k)), _num(tb.get(k))
        rows.append({"measure": k, "a": a, "b": b, "difference": None if a is None or b is None else b - a})
    ra, rb = report.reconciliation(comp_a), report.reconciliation(comp_b)
    for k in ("attributed", "idle", "unattributed"):
        rows.append({"measure": f"{k}_cost", "a": ra[k], "b": rb[k], "difference": rb[k] - ra[k]})
    return pl.DataFrame(rows, schema={"measure": pl.String, "a": pl.Float64, "b": pl.Float64, "difference": pl.Float64})


def drivers_table(config: Config) -> pl.DataFrame:
    """Each cost category with its default driver and the one in force."""
    from .contract import DEFAULT_DRIVER

    over = config.allocation.drivers
    return pl.DataFrame(
        [{"category": c, "default": DEFAULT_DRIVER[c], "driver": over.get(c, DEFAULT_DRIVER[c]),
          "included": c in config.boundary.included} for c in CATEGORIES],
        schema={"category": pl.String, "default": pl.String, "driver": pl.String, "included": pl.Boolean},
    )

