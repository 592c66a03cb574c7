"""Two systems counting the same tokens (a gateway's logs beside the model server's counters)
must count them once: find where request sources overlap per model, bill one, check the other.

Coverage is per model, source and UTC hour: each request row touches the hours from its start
to its end (a single request: its start's hour), inside the period. Per (model, source) the
hours merge into spans (sort and sweep); a sweep over the spans' edges per model finds where
two or more sources are active at once: the overlaps. In each hour the most preferred source
present is billed (`validation.token_source_order`, else DEFAULT_ORDER: the gateways, which
carry the caller, before the model servers' counters); the rows of every other source wholly
inside those hours are kept out of the billed tokens and summed as a reconciliation check.
Every step is a sort and a sweep, or a binary search of a row's time in sorted spans: the
cost grows with the rows (and their hours), never with a product of two sources' rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from .config import Config
from .contract import TS
from .intervals import islands
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
    f = frame.sort(*keys, "h0").with_columns(islands("h0", "h1", keys).alias("_run"))
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


def _grouped(rows: pl.DataFrame, spans: pl.DataFrame, keys: list[str]) -> tuple[pl.Series, pl.DataFrame]:
    """(each row's group number among the spans' keys, or null; the spans with theirs, sorted by
    group and start, with `_pre`: the hours of the group's spans before each)."""
    groups = spans.select(keys).unique(maintain_order=True).with_row_index("_g").with_columns(
        pl.col("_g").cast(pl.Int64))
    sp = spans.join(groups, on=keys).sort("_g", "h0").with_columns(
        ((pl.col("h1") - pl.col("h0")).cum_sum().over("_g") - (pl.col("h1") - pl.col("h0"))).alias("_pre"))
    g = rows.select(keys).join(groups, on=keys, how="left", maintain_order="left")["_g"]
    return g, sp


def _search(sp: pl.DataFrame, col: str, g: pl.Series, hour: pl.Series, side: str) -> pl.Series:
    """Binary search of (group, hour) in the spans' sorted (group, `col`) keys: an index into sp."""
    keys = sp["_g"] * _KEY + sp[col]
    return keys.search_sorted(g.fill_null(-1) * _KEY + hour, side=side).cast(pl.Int64)  # type: ignore[arg-type]


def _shadow_before(g: pl.Series, sp: pl.DataFrame, t: pl.Series) -> pl.Series:
    """Microseconds of the group's shadow spans before each time `t` (µs since 1970): the hours
    of the spans that start earlier, plus the part of the hour `t` falls in when it is shaded."""
    if sp.height == 0:
        return pl.Series([0] * len(t), dtype=pl.Int64)
    th = t // HOUR_US
    k = (_search(sp, "h0", g, th, "right") - 1).clip(lower_bound=0)
    h0, h1 = sp["h0"].gather(k), sp["h1"].gather(k)
    same = (g.is_not_null() & (sp["_g"].gather(k) == g) & (h0 <= th)).fill_null(False)
    hours = pl.select(pl.when(pl.lit(same)).then(pl.lit(sp["_pre"].gather(k)) + pl.min_horizontal(pl.lit(th), pl.lit(h1))
                                                 - pl.lit(h0)).otherwise(0)).to_series()
    inside = same & (th < h1)
    return hours * HOUR_US + pl.select(pl.when(pl.lit(inside)).then(pl.lit(t) - pl.lit(th) * HOUR_US)
                                       .otherwise(0)).to_series()


def split(batch: pl.DataFrame, p: SourcePlan) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the batch without the rows a more preferred source counts, the batch's reconciliation:
    tokens per overlap, source and billed flag, RECON).

    `batch`: resolved requests (tokens.in_period has clipped `ts` to the period). A request
    stands for its hour, a usage bucket for its [ts, end) inside the period. A row stays out
    when all of that lies in its source's shadow; a bucket only partly in it is billed whole
    (counted in `partly_shadowed`, named in the gaps: splitting it would guess how its tokens
    spread). A row belongs to the first overlap it meets.
    """
    if p.empty or batch.height == 0:
        return batch, pl.DataFrame(schema=RECON)
    spans = batch.select(
        "model", pl.col("source").fill_null("gateway"),
        (pl.col("end").is_not_null() & (pl.col("end") > pl.col("ts"))).fill_null(False).alias("_b"),
        pl.col("ts").dt.epoch("us").alias("_s"),
        pl.min_horizontal("end", pl.lit(p.end).cast(TS)).dt.epoch("us").alias("_e"),
    ).with_columns(
        pl.when("_b").then("_s").otherwise(pl.col("_s") // HOUR_US * HOUR_US).alias("_a"),
        pl.when("_b").then("_e").otherwise(pl.col("_s") // HOUR_US * HOUR_US + HOUR_US).alias("_z"),
    )
    a, z = spans["_a"], spans["_z"]
    g_sh, sh = _grouped(spans, p.shadows, ["model", "source"])
    shaded_us = _shadow_before(g_sh, sh, z) - _shadow_before(g_sh, sh, a)
    whole = (shaded_us >= z - a).fill_null(False)
    partly = ((shaded_us > 0) & ~whole).fill_null(False)
    # The first overlap the row meets: the first of its model ending after the row's start hour,
    # if it starts before the row's last hour.
    g_ov, ov = _grouped(spans, p.overlaps, ["model"])
    h_first, h_last = a // HOUR_US, (z - 1) // HOUR_US + 1
    j = _search(ov, "h1", g_ov, h_first, "right").clip(upper_bound=max(ov.height - 1, 0))
    met = (g_ov.is_not_null() & (ov["_g"].gather(j) == g_ov) & (ov["h0"].gather(j) < h_last)
           & (ov["h1"].gather(j) > h_first)).fill_null(False)
    tagged = pl.concat([spans.select("model", "source"),
                        batch.select("input_tokens", "cached_input_tokens", "output_tokens", "requests")],
                       how="horizontal").with_columns(
        pl.when(pl.lit(met)).then(pl.lit(j)).alias("_k"), (~pl.lit(whole)).alias("billed"), pl.lit(partly).alias("_part"))
    part = tagged.filter(pl.col("_k").is_not_null()).group_by("model", "_k", "source", "billed").agg(
        pl.col("input_tokens", "cached_input_tokens", "output_tokens", "requests").sum(),
        pl.col("_part").sum().cast(pl.Int64).alias("partly_shadowed"))
    part = part.with_columns(ov["h0"].gather(part["_k"]).alias("h0"), ov["h1"].gather(part["_k"]).alias("h1"))
    recon = part.select(list(RECON)).cast(dict(RECON))  # type: ignore[arg-type]
    return batch.filter(~pl.lit(whole)), recon


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
