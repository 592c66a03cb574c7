"""Two systems counting the same tokens (a gateway's logs beside the model server's counters)
must count them once: find where request sources overlap per model, bill one, check the other.

Coverage is per model, source and UTC hour: each request row touches the hours from its start
to its end (a single request: its start's hour), inside the period. Per (model, source) the
hours merge into spans (sort and sweep); a sweep over the spans' edges per model finds where
two or more sources are active at once: the overlaps. In each hour the most preferred source
present is billed (`validation.token_source_order`, else DEFAULT_ORDER: the gateways, which
carry the caller, before the model servers' counters); the rows of every other source there
are kept out of the billed tokens and summed as a reconciliation check. Every step is a sort
and a sweep, or a binary search of a row's hour in sorted spans: the cost grows with the rows
(and their hours), never with a product of two sources' rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from .config import Config
from .contract import TS
from .ledger import Period

HOUR_US = 3_600_000_000
# Default billing preference: the gateways and API usage (they name the caller), then sources
# not listed here (alphabetically), then model servers' counters (`vllm`, or `kubernetes` when
# the namespace named the owner), which only say which server answered.
DEFAULT_FIRST = ("gateway", "litellm", "openai", "otel")
DEFAULT_LAST = ("vllm", "kubernetes")
SPANS = pl.Schema({"model": pl.String, "source": pl.String, "h0": pl.Int64, "h1": pl.Int64})
OVERLAPS = pl.Schema({"model": pl.String, "h0": pl.Int64, "h1": pl.Int64})
RECON = pl.Schema({"model": pl.String, "h0": pl.Int64, "h1": pl.Int64, "source": pl.String, "billed": pl.Boolean,
                   "input_tokens": pl.Int64, "cached_input_tokens": pl.Int64, "output_tokens": pl.Int64,
                   "requests": pl.Int64, "partly_shadowed": pl.Int64})
# Group numbers and hours share one sortable Int64 key (hours since 1970 stay below 2**32).
_KEY = 1 << 32


def coverage(requests: pl.DataFrame | pl.LazyFrame, period: Period) -> pl.DataFrame:
    """(model, source, h0, h1): the UTC hours [h0, h1) (hours since 1970) the request rows of
    the period touch, distinct: a few per model, source and hour, however many requests."""
    p0, p1 = pl.lit(period.start).cast(TS), pl.lit(period.end).cast(TS)
    bucket = pl.col("end").is_not_null() & (pl.col("end") > pl.col("ts"))
    s = pl.max_horizontal("ts", p0).dt.epoch("us")
    e = pl.min_horizontal("end", p1).dt.epoch("us")
    return requests.lazy().filter(
        (pl.col("ts") < p1) & ((pl.col("ts") >= p0) | (bucket & (pl.col("end") > p0)))
    ).select(
        "model", pl.col("source").fill_null("gateway"), (s // HOUR_US).alias("h0"),
        pl.when(bucket).then((e - 1) // HOUR_US + 1).otherwise(s // HOUR_US + 1).alias("h1"),
    ).unique().collect().cast(dict(SPANS))  # type: ignore[arg-type]


def merge(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Intervals [h0, h1) merged per key where they overlap or touch (sort, then sweep)."""
    if frame.height == 0:
        return frame.select(*keys, "h0", "h1")
    f = frame.sort(*keys, "h0").with_columns(pl.col("h1").cum_max().shift(1).over(keys).alias("_reach"))
    f = f.with_columns((pl.col("_reach").is_null() | (pl.col("h0") > pl.col("_reach"))).cum_sum().alias("_run"))
    return f.group_by(*keys, "_run", maintain_order=True).agg(pl.col("h0").min(), pl.col("h1").max()).drop("_run")


def rank(sources: Iterable[str], order: tuple[str, ...] | None) -> dict[str, int]:
    """Billing preference per source, 0 the most preferred: the configured order first, then
    the default one (DEFAULT_FIRST, other sources alphabetically, DEFAULT_LAST)."""
    def default(s: str) -> tuple:
        if s in DEFAULT_FIRST:
            return (0, DEFAULT_FIRST.index(s), s)
        if s in DEFAULT_LAST:
            return (2, DEFAULT_LAST.index(s), s)
        return (1, 0, s)

    given = order or ()
    keyed = sorted(set(sources), key=lambda s: (0, given.index(s), "") if s in given else (1, *default(s)))
    return {s: i for i, s in enumerate(keyed)}


@dataclass
class SourcePlan:
    """Where each model's sources overlap and which rows stay out of the billed tokens."""

    overlaps: pl.DataFrame  # model, h0, h1: hours where two or more sources count the model (disjoint per model)
    shadows: pl.DataFrame  # model, source, h0, h1: hours where a more preferred source of the model is present
    ranks: dict[str, int]
    configured: bool  # whether validation.token_source_order chose (else the default order did)
    add: bool  # validation.token_overlap = "add": every source billed, the overlap only reported
    end: datetime  # the period's end (where a bucket's hours stop)

    @property
    def empty(self) -> bool:
        return self.overlaps.height == 0


def plan(cov: pl.DataFrame, config: Config, period: Period) -> SourcePlan:
    """The overlaps and the shadowed hours of a coverage (coverage(); parts may be concatenated)."""
    v = config.validation
    spans = merge(cov.unique(), ["model", "source"])
    ranks = rank(spans["source"].unique().to_list(), v.token_source_order)
    # The sweep: +1 at each span's start, -1 at its end (ends first at equal hours, so spans that
    # only touch do not overlap); where two or more are active the model is counted twice.
    ev = pl.concat([spans.select("model", pl.col("h0").alias("t"), pl.lit(1).alias("d")),
                    spans.select("model", pl.col("h1").alias("t"), pl.lit(-1).alias("d"))]).sort("model", "t", "d")
    ev = ev.with_columns(pl.col("d").cum_sum().over("model").alias("n"),
                         pl.col("t").shift(-1).over("model").alias("t1"))
    seg = ev.filter((pl.col("n") >= 2) & (pl.col("t1") > pl.col("t"))).select(
        "model", pl.col("t").alias("h0"), pl.col("t1").alias("h1"))
    overlaps = merge(seg, ["model"]).cast(dict(OVERLAPS))  # type: ignore[arg-type]
    if v.token_overlap == "add" or overlaps.height == 0:
        shadows = pl.DataFrame(schema=SPANS)
    else:
        # A source's shadow: the spans of the model's more preferred sources, merged (a model has
        # a handful of sources: spans x sources rows at most).
        src = spans.select("model", "source").unique().with_columns(
            pl.col("source").replace_strict(ranks, return_dtype=pl.Int64).alias("r"))
        better = src.join(src, on="model", suffix="_b").filter(pl.col("r_b") < pl.col("r"))
        shade = better.select("model", "source", "source_b").join(
            spans.rename({"source": "source_b"}), on=["model", "source_b"]).select("model", "source", "h0", "h1")
        shadows = merge(shade, ["model", "source"]).cast(dict(SPANS))  # type: ignore[arg-type]
    return SourcePlan(overlaps, shadows, ranks, v.token_source_order is not None, v.token_overlap == "add",
                      period.end)


def _lookup(rows: pl.DataFrame, spans: pl.DataFrame, keys: list[str],
            hour: pl.Series) -> tuple[pl.Series, pl.DataFrame]:
    """(for each row the index of the span holding its hour, or null; the spans sorted by key
    and start, which the index points into): a binary search of (key group, hour) in the
    sorted span starts, in row order, like the engine's slot lookup."""
    n = rows.height
    if spans.height == 0 or n == 0:
        return pl.Series("_k", [None] * n, dtype=pl.Int64), spans
    groups = spans.select(keys).unique(maintain_order=True).with_row_index("_g").with_columns(
        pl.col("_g").cast(pl.Int64))
    sp = spans.join(groups, on=keys).sort("_g", "h0")
    start = sp["_g"] * _KEY + sp["h0"]
    g = rows.select(keys).join(groups, on=keys, how="left", maintain_order="left")["_g"]
    k = (start.search_sorted(g.fill_null(-1) * _KEY + hour, side="right").cast(pl.Int64) - 1).clip(lower_bound=0)
    hit = (g.is_not_null() & (sp["_g"].gather(k) == g) & (sp["h0"].gather(k) <= hour)
           & (hour < sp["h1"].gather(k)))
    found = pl.select(pl.when(pl.lit(hit.fill_null(False))).then(pl.lit(k))).to_series().alias("_k")
    return found, sp


def split(batch: pl.DataFrame, p: SourcePlan) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the batch without the rows a more preferred source counts, the batch's reconciliation:
    tokens per overlap, source and billed flag, RECON).

    `batch`: resolved requests (tokens.in_period has clipped `ts` to the period). A row stays
    out when every hour it spans lies in its source's shadow; a usage bucket reaching past the
    shadow is billed whole (counted in `partly_shadowed`, named in the gaps). A row belongs to
    the overlap holding its (in-period) start hour.
    """
    if p.empty or batch.height == 0:
        return batch, pl.DataFrame(schema=RECON)
    us = batch["ts"].dt.epoch("us")
    hour = (us // HOUR_US).cast(pl.Int64)
    bucket = batch.select((pl.col("end").is_not_null() & (pl.col("end") > pl.col("ts"))).fill_null(False)).to_series()
    end_us = batch.select(pl.min_horizontal("end", pl.lit(p.end).cast(TS)).dt.epoch("us")).to_series()
    last = pl.select(pl.when(pl.lit(bucket)).then((pl.lit(end_us) - 1) // HOUR_US + 1)
                     .otherwise(pl.lit(hour) + 1)).to_series()
    src = batch.select("model", pl.col("source").fill_null("gateway"))
    k_sh, sh = _lookup(src, p.shadows, ["model", "source"], hour)
    k_ov, ov = _lookup(src, p.overlaps, ["model"], hour)
    reach = sh["h1"].gather(k_sh.fill_null(0)) if sh.height else pl.Series([0] * batch.height, dtype=pl.Int64)
    inside = k_sh.is_not_null()
    shaded = (inside & (last <= reach)).fill_null(False)
    tagged = pl.concat([src, batch.select("input_tokens", "cached_input_tokens", "output_tokens", "requests")],
                       how="horizontal").with_columns(
        pl.lit(k_ov).alias("_k"), (~pl.lit(shaded)).alias("billed"), (pl.lit(inside) & ~pl.lit(shaded)).alias("_part"))
    part = tagged.filter(pl.col("_k").is_not_null()).group_by("model", "_k", "source", "billed").agg(
        pl.col("input_tokens", "cached_input_tokens", "output_tokens", "requests").sum(),
        pl.col("_part").sum().cast(pl.Int64).alias("partly_shadowed"))
    part = part.with_columns(ov["h0"].gather(part["_k"]).alias("h0"), ov["h1"].gather(part["_k"]).alias("h1")) \
        if part.height else part.with_columns(pl.lit(None, dtype=pl.Int64).alias("h0"),
                                              pl.lit(None, dtype=pl.Int64).alias("h1"))
    recon = part.select(list(RECON)).cast(dict(RECON))  # type: ignore[arg-type]
    return batch.filter(~pl.lit(shaded)), recon


def reconciliation(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """The reconciliation of the whole period from its batches' parts (split()): per model,
    overlap and source, its tokens, whether they were billed, and `difference_tokens`: a
    check source's tokens minus the billed tokens of the same overlap (null for billed rows)."""
    f = pl.concat([pl.DataFrame(schema=RECON), *parts]).group_by("model", "h0", "h1", "source", "billed").agg(
        pl.exclude("model", "h0", "h1", "source", "billed").sum())
    f = f.with_columns((pl.col("input_tokens") + pl.col("cached_input_tokens") + pl.col("output_tokens"))
                       .alias("tokens"))
    billed = pl.col("tokens").filter(pl.col("billed")).sum().over("model", "h0", "h1")
    f = f.with_columns(pl.when(~pl.col("billed")).then(pl.col("tokens") - billed).alias("difference_tokens"))
    return f.with_columns(
        (pl.col("h0") * HOUR_US).cast(TS).alias("start"), (pl.col("h1") * HOUR_US).cast(TS).alias("end"),
    ).sort("model", "h0", pl.col("billed"), "source", descending=[False, False, True, False]).select(
        "model", "start", "end", "source", "billed", "input_tokens", "cached_input_tokens", "output_tokens",
        "tokens", "requests", "difference_tokens", "partly_shadowed")


def gaps(recon: pl.DataFrame, p: SourcePlan) -> list[tuple[str, str]]:
    """The overlaps said in the gaps: always when the default order chose (or "add" billed
    all), and buckets billed whole though partly shadowed."""
    out: list[tuple[str, str]] = []
    if recon.height == 0:
        return out
    if not p.configured or p.add:
        spans = recon.group_by("model", "start", "end", maintain_order=True).agg(
            pl.col("source").filter(pl.col("billed")).unique().sort().alias("b"),
            pl.col("source").filter(~pl.col("billed")).unique().sort().alias("c"),
            pl.col("tokens").filter(pl.col("billed")).sum().alias("bt"),
            pl.col("tokens").filter(~pl.col("billed")).sum().alias("ct"))
        for r in spans.head(5).iter_rows(named=True):
            when = f"{r['start']:%Y-%m-%d %H:%M}Z to {r['end']:%Y-%m-%d %H:%M}Z"
            if not r["c"] and not p.add:
                continue  # every source billed somewhere in it (a bucket reaching past): said below
            if p.add:
                out.append(("token sources overlap", f"{r['model']}, {when}: {', '.join(r['b'])} all billed "
                            f"({r['bt']:,} tokens; validation.token_overlap = add)"))
            else:
                out.append(("token sources overlap", f"{r['model']}, {when}: {', '.join(r['b'])} billed "
                            f"({r['bt']:,} tokens), {', '.join(r['c'])} kept as a check ({r['ct']:,} tokens, "
                            f"difference {r['ct'] - r['bt']:+,}) by the default order; set "
                            "validation.token_source_order to choose"))
        if spans.height > 5:
            out.append(("token sources overlap", f"{spans.height - 5} more overlaps: see token_reconciliation"))
    partly = int(recon["partly_shadowed"].sum())
    if partly:
        out.append(("token sources overlap", f"{partly} usage buckets reach past the hours a preferred source "
                    "covers: billed whole, so those hours may count twice"))
    return out
