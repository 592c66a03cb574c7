"""Dashboard filters (pool, accelerator, workload, tenant) and how they narrow each frame of a Computation."""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Iterable
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, field_validator

from . import tokens
from .engine import Computation


TOKEN_COLS = tokens.TOKEN_COLS


MAX_PAGE_SIZE = 200


TIMELINE_POINTS = 1500


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
    req, summary, hours = comp.requests, comp.request_summary, comp.request_hours
    if f.tenants:
        req, summary, hours = (r.filter(_isin("tenant", f.tenants)) for r in (req, summary, hours))
    if f.pools or f.accelerators:
        served = (
            comp.seg.filter(_isin("gpu_id", gpus) & (pl.col("workload") == "inference"))["model"]
            .drop_nulls()
            .unique()
            .to_list()
        )
        req, summary, hours = (r.filter(_isin("model", served)) for r in (req, summary, hours))
    if f.workloads and "inference" not in f.workloads:
        req, summary, hours = req.head(0), summary.head(0), hours.head(0)

    m_final = money(comp.money)
    m_before = money(comp.money_before_recharge)
    extra: dict[str, Any] = {}
    if hasattr(comp, "money_spread"):
        extra["money_spread"] = money(comp.money_spread)
    models, _ = tokens.model_table(m_before, seg, summary, comp.config)
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
        request_summary=summary,
        request_hours=hours,
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


# What a money row lacks to pass a filter of each dimension whatever values it names.
LACKS = {"pools": "a pool", "accelerators": "a card (so no accelerator)", "workloads": "a workload",
         "tenants": "a tenant"}
_WHY = {"pools": "", "accelerators": "", "workloads": " (idle capacity, direct charges)",
        "tenants": " (idle capacity, unattributed)"}


def left_out(comp: Computation, filters: Filters | None) -> pl.DataFrame:
    """What the active filters leave out whatever values they name: the money of rows that have
    no value of an active filter's dimension and pass (or also lack) the others. A filter keeps
    the values it names, so selecting every value still drops these rows; with every value of
    each active filter selected, the filtered total plus these amounts is the unfiltered total.
    Columns: filter (the dimensions lacked, comma-joined), what, amount; one row per set of
    dimensions lacked, non-zero amounts only."""
    schema = {"filter": pl.Utf8, "what": pl.Utf8, "amount": pl.Float64}
    active = [n for n in LACKS if filters is not None and getattr(filters, n)]
    if not active:
        return pl.DataFrame(schema=schema)
    cards = comp.ledger.cards.select("gpu_id", pl.col("pool").alias("_card_pool"),
                                     pl.col("accelerator").alias("_card_acc"))
    m = comp.money.join(cards, on="gpu_id", how="left")
    # A row's value of each dimension as apply_filters reads it: the card's pool and accelerator
    # (a row spread without a card: its own pool, no accelerator), the row's workload and tenant.
    value = {"pools": pl.when(pl.col("gpu_id").is_null()).then(pl.col("pool")).otherwise(pl.col("_card_pool")),
             "accelerators": pl.col("_card_acc"), "workloads": pl.col("workload"), "tenants": pl.col("tenant")}
    lacks = {n: value[n].is_null() for n in active}
    kept_or_lacking = pl.all_horizontal([lacks[n] | value[n].is_in(list(getattr(filters, n))).fill_null(False)
                                         for n in active])
    out = (m.filter(kept_or_lacking & pl.any_horizontal(list(lacks.values())))
           .with_columns(pl.concat_str([pl.when(lacks[n]).then(pl.lit(n)) for n in active], separator=",",
                                       ignore_nulls=True).alias("filter"))
           .group_by("filter").agg(pl.col("amount").sum()).filter(pl.col("amount") != 0))
    rows = []
    for r in out.iter_rows(named=True):
        names = r["filter"].split(",")
        what = "costs without " + " or ".join(LACKS[n] for n in names) + (_WHY[names[0]] if len(names) == 1 else "")
        rows.append({"filter": r["filter"], "what": what, "amount": float(r["amount"])})
    rows.sort(key=lambda r: [list(LACKS).index(n) for n in r["filter"].split(",")])
    return pl.DataFrame(rows, schema=schema)


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
