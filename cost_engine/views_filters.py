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
LACKS = {"pools": "costs without a pool", "accelerators": "costs not on a card (no accelerator)",
         "workloads": "costs without a workload (idle capacity, direct charges)",
         "tenants": "costs without a tenant (idle capacity, unattributed)"}


def left_out(comp: Computation, filters: Filters | None) -> pl.DataFrame:
    """What each active filter leaves out whatever values it names: the money, under the other
    filters, of rows that have no value of its dimension (a filter keeps the values it names,
    so selecting every value still drops these). Columns: filter, what, amount; one row per
    active filter with a non-zero amount. Selecting every value of one filter plus this amount
    is the unfiltered total."""
    rows: list[dict[str, Any]] = []
    if filters is None or filters.empty:
        return pl.DataFrame(rows, schema={"filter": pl.Utf8, "what": pl.Utf8, "amount": pl.Float64})
    cards = comp.ledger.cards
    for name in LACKS:
        if not getattr(filters, name):
            continue
        money = apply_filters(comp, filters.model_copy(update={name: ()})).money
        if name in ("pools", "accelerators"):
            col = "pool" if name == "pools" else "accelerator"
            blank_cards = cards.filter(pl.col(col).is_null())["gpu_id"].to_list()
            lacks = pl.col("gpu_id").is_null() | _isin("gpu_id", blank_cards)
            if name == "pools":  # a row spread without a card passes by its own pool
                lacks = (pl.col("gpu_id").is_null() & pl.col("pool").is_null()) | _isin("gpu_id", blank_cards)
        else:
            lacks = pl.col(name.removesuffix("s")).is_null()
        amount = float(money.filter(lacks)["amount"].sum())
        if amount:
            rows.append({"filter": name, "what": LACKS[name], "amount": amount})
    return pl.DataFrame(rows, schema={"filter": pl.Utf8, "what": pl.Utf8, "amount": pl.Float64})


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
