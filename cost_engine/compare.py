"""Two periods of one source side by side: configs, computations, the decomposition and the records behind it.

The CLI (`ailedger diff`) and the dashboard's Compare page both come here: the engine runs once
per period (`views.config_with` sets the period, `api.run` computes), `diff` decomposes the
change, and the records behind an effect are read with `views.records` (the engine's lineage).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import polars as pl

from . import api, diff, views
from .config import Config, load_config
from .engine import Computation

Span = tuple[datetime, datetime]


def period_config(base: Config, span: Span) -> Config:
    """`base` with its period set to [start, end) (UTC instants); everything else unchanged."""
    return views.config_with(base, period_start=span[0], period_end=span[1])


def parse_spans(config: Config, base: str, period: str) -> tuple[Span, Span]:
    """The two periods as written on the command line, cut in the config's time zone."""
    tz = config.period.timezone
    return diff.parse_span(base, tz), diff.parse_span(period, tz)


def run_periods(source: str | Path, config: Config | None, base: Span, period: Span,
                config_path: str | Path | None = None) -> tuple[Computation, Computation]:
    """The source computed for the base period and for the new one, under the same rules."""
    cfg = config if config is not None else load_config(api.find_config(source, config_path))
    return (api.run(source, config=period_config(cfg, base)), api.run(source, config=period_config(cfg, period)))


def compare_periods(comp_base: Computation, comp_new: Computation, filters: views.Filters | None = None,
                    by: str = "tenant") -> diff.Diff:
    """The change between the two computations (narrowed by the sidebar's filters) and its effects."""
    a, b = views.apply_filters(comp_base, filters), views.apply_filters(comp_new, filters)
    alloc = comp_new.config.allocation
    w = alloc.token_weights
    return diff.decompose(diff.facts(a, by), diff.facts(b, by), by=by, recharge=alloc.inference_recharge,
                          token_weights=(w.input, w.cached_input, w.output))


def _who(by: str, key: str, filters: views.Filters | None, pool: str | None = None,
         accelerator: str | None = None, model: str | None = None) -> tuple[dict[str, Any], views.Filters | None]:
    """views.records' arguments for an owner of the dimension (a pool narrows by filter), narrowed
    to a pool and accelerator (GPU time) or a model (serving) when given: one of effect_scopes."""
    f = (filters or views.NO_FILTERS).model_dump()
    who: dict[str, Any] = {}
    if by == "pool":
        f["pools"] = (key,)
    elif key == diff.NONE_KEY:
        who["unset"] = (by,)  # the owner gathering what names no tenant / project / model
    else:
        who[by] = key
    if pool is not None:
        f["pools"] = (pool,)
    if accelerator is not None:
        f["accelerators"] = (accelerator,)
    if model is not None and by != "model":
        who["model"] = model
    return who, views.Filters(**f)


def compare_records(comp_base: Computation, comp_new: Computation, filters: views.Filters | None,
                    source: str | Path | None, *, by: str, key: str, table: views.RecordTable, page: int = 0,
                    page_size: int = 25, scope: Mapping[str, Any] | None = None
                    ) -> tuple[views.RecordsPage, views.RecordsPage]:
    """One page of the records (allocations, requests or cost rows) behind an owner's figure in
    each period: what its effects were computed from (views.records, i.e. the engine's lineage).
    `scope` (a row of effect_scopes) narrows them to the pool and accelerator or the model that
    carries an effect."""
    sc = scope or {}
    who, f = _who(by, key, filters, sc.get("pool"), sc.get("accelerator"), sc.get("model"))
    base, new = (views.records(c, f, source, table=table, page=page, page_size=page_size, **who)
                 for c in (comp_base, comp_new))
    return base, new


SCOPE_SCHEMA = {"scope": pl.String, "pool": pl.String, "accelerator": pl.String, "model": pl.String,
                "value": pl.Float64}


def effect_scopes(d: diff.Diff, key: str, effect: str) -> pl.DataFrame:
    """Where one owner's effect sits, in the units its records can be narrowed to: a pool and
    accelerator for GPU time, a model for serving; largest first. `scope` is a label (unique per
    row: the page keeps it in the URL); pool, accelerator and model are compare_records' scope."""
    el = d.elements.filter((pl.col("key") == key) & (pl.col(effect).abs() > 1e-9))
    gpu = el.filter(pl.col("chain") == "gpu").group_by("pool", "accelerator").agg(
        pl.col(effect).sum().alias("value")).with_columns(
        pl.concat_str(pl.lit("pool "), pl.col("pool").fill_null(diff.NONE_KEY),
                      pl.when(pl.col("accelerator").is_not_null()).then(pl.lit(" · ") + pl.col("accelerator"))
                      .otherwise(pl.lit(""))).alias("scope"),
        pl.lit(None, dtype=pl.String).alias("model"))
    serving = el.filter(pl.col("chain") == "serving").group_by("model").agg(
        pl.col(effect).sum().alias("value")).with_columns(
        (pl.lit("model ") + pl.col("model")).alias("scope"), pl.lit(None, dtype=pl.String).alias("pool"),
        pl.lit(None, dtype=pl.String).alias("accelerator"))
    out = pl.concat([gpu.select(list(SCOPE_SCHEMA)), serving.select(list(SCOPE_SCHEMA))]).cast(SCOPE_SCHEMA)
    return out.filter(pl.col("value").abs() > 1e-9).sort([pl.col("value").abs(), pl.col("scope")],
                                                          descending=[True, False])


def effect_tables(effect: str) -> tuple[str, ...]:
    """The record tables an effect is traced to (allocations for GPU time, requests for serving...)."""
    return diff.EFFECT[effect].records


def default_days(comp: Computation) -> tuple[tuple[date, date], tuple[date, date]]:
    """The two periods the Compare page opens with: the last two whole calendar months when the
    source spans them, else its first and last n whole days (n = half the days), in its time zone."""
    first, last = whole_days(comp)
    month_end = date(last.year, last.month, 1) - timedelta(days=1)
    if (last + timedelta(days=1)).day == 1:  # the period ends with a whole month
        month_end = last
    new_start = date(month_end.year, month_end.month, 1)
    base_end = new_start - timedelta(days=1)
    base_start = date(base_end.year, base_end.month, 1)
    if base_start >= first:
        return (base_start, base_end), (new_start, month_end)
    n = max(1, ((last - first).days + 1) // 2)
    return (first, first + timedelta(days=n - 1)), (last - timedelta(days=n - 1), last)


def whole_days(comp: Computation) -> tuple[date, date]:
    """The first and last whole day of the computation's period in its time zone (the days it
    touches when it covers no whole day)."""
    tz = ZoneInfo(comp.period.timezone)
    start, end = comp.period.start.astimezone(tz), comp.period.end.astimezone(tz)
    first = start.date() if start.time() == datetime.min.time() else start.date() + timedelta(days=1)
    last = end.date() - timedelta(days=1)
    if first > last:
        return views.period_days(comp)
    return first, last


def day_span(comp: Computation, days: tuple[date, date]) -> Span:
    """Whole days [first, last] in the computation's time zone, as UTC instants [start, end)."""
    tz = ZoneInfo(comp.period.timezone)
    first, last = days
    s = datetime(first.year, first.month, first.day, tzinfo=tz)
    e = datetime(last.year, last.month, last.day, tzinfo=tz) + timedelta(days=1)
    return s.astimezone(ZoneInfo("UTC")), e.astimezone(ZoneInfo("UTC"))


BY_NAMES = {"tenant": "tenants", "project": "projects", "model": "models", "pool": "pools"}


def effect_label(effect: str, by: str) -> str:
    """An effect's label; new and gone name the dimension (`New tenants in the period`)."""
    if effect in ("new", "gone"):
        return f"{effect.capitalize()} {BY_NAMES[by]} in the period"
    return diff.EFFECT[effect].label


def effect_summary(d: diff.Diff, n: int = 2) -> pl.DataFrame:
    """The effects with their labels (`short` for a chart axis), notes and the owners carrying most
    of each (`mainly`): what the CLI prints, the page tabulates and charts.waterfall draws."""
    rows = []
    for r in d.effects.iter_rows(named=True):
        k = r["effect"]
        o = d.owners.filter((pl.col("kind") == "owner") & pl.col(k).is_not_null() & (pl.col(k).abs() > 0.005))
        o = o.sort(pl.col(k).abs(), descending=True).head(n)
        mainly = ", ".join(f"{x['key']} {x[k]:+,.2f}" for x in o.iter_rows(named=True))
        short = f"{k.capitalize()} {BY_NAMES[d.by]}" if k in ("new", "gone") else diff.EFFECT[k].short
        rows.append({"effect": k, "label": effect_label(k, d.by), "short": short, "value": r["value"],
                     "mainly": mainly or None, "note": r["note"]})
    return pl.DataFrame(rows, schema={"effect": pl.String, "label": pl.String, "short": pl.String,
                                      "value": pl.Float64, "mainly": pl.String, "note": pl.String})
