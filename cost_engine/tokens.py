"""Tokens under the same owners: request weights, good tokens, inference recharge and per-model figures."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import polars as pl

from .bundle import release_pages
from .config import Config
from .contract import IDLE, TS
from .ledger import Period, split_by

TOKEN_COLS = ("input_tokens", "cached_input_tokens", "output_tokens")


def prepare_requests(
    requests: pl.DataFrame | Iterable[pl.DataFrame], period: Period, config: Config, resolve, slots: pl.DataFrame,
    keep: Callable[[pl.DataFrame], pl.DataFrame] | None = None,
) -> pl.DataFrame:
    """Requests in the period with owner resolved, weighted tokens, the good flag and their slot
    (`fslot`: the number of the `slots` slot holding each; the engine passes
    allocation.request_slots, which no rule of the boundary or drivers changes).

    `requests` is a frame, or batches of one (a store hands a month of millions over in batches,
    so the raw rows are never all in memory beside the resolved ones). The rows keep the order
    they came in: everything downstream sums them, and lineage sorts the ones it shows.
    `keep`, when given, is applied to each resolved batch as it is made (the engine spills big
    ones to memory-mapped files: bundle.spill_folder).
    """
    g0 = slots.sort("g0")
    batches = [requests] if isinstance(requests, pl.DataFrame) else requests
    kept = keep or (lambda frame: frame)
    parts = [kept(_resolve_batch(b, period, config, resolve, g0)) for b in batches]
    if not parts:
        from .contract import schema

        parts = [_resolve_batch(pl.DataFrame(schema=schema("requests")), period, config, resolve, g0)]
    return pl.concat(parts, rechunk=False)


def request_sums(plan: pl.LazyFrame) -> pl.DataFrame:
    """A sum (or distinct) over the resolved requests, collected on Polars' streaming engine.

    At fleet scale there are millions of requests: the in-memory group-by materialises every
    filtered expression for all rows at once, and the requests' mapped pages (see
    bundle.spill_folder) are let go again once the scan is done.
    """
    out = plan.collect(engine="streaming")
    release_pages()
    return out


# The grain of the request summary: every figure the engine and the report read from requests
# groups by some of these (the spread by slot and caller, the recharge by model and caller, the
# report by tenant, project, day and model), so summing them is exact. The hours with traffic
# (model_trend's occupancy) are kept apart, per model and tenant (what views narrow by): an hour
# key would make the summary as long as the requests wherever callers are many.
SUMMARY_KEYS = ("model", "project", "tenant", "owner", "source", "fslot", "day")


def summarize(requests: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """The resolved requests summed per SUMMARY_KEYS: what every request figure of the engine and
    the report is computed from (a few thousand rows where the requests are millions).

    Besides the sums of the counts: `good_tokens`, `good_requests` (meeting the SLO),
    `failed_requests` (status not ok), `retried_requests` (attempt > 1), `has_attempts` (some
    request says which try it was), `prefill_ms`/`decode_ms` summed over the requests that carry
    both and `all_phase` (every request does), `records` (rows: each bucket row is one record)
    and `no_latency` (rows without ttft or latency). Summaries of parts of the requests (the
    batches they are resolved in) fold into the summary of the whole with `merge_summaries`.
    """
    has_phase = pl.col("prefill_ms").is_not_null() & pl.col("decode_ms").is_not_null()
    # Project and tenant follow from (owner, source): not keys to hash.
    return request_sums(requests.lazy().group_by("model", "owner", "source", "fslot", "day").agg(
        pl.col("project", "tenant").first(),
        pl.col(*TOKEN_COLS, "requests", "tokens", "tokens_w").sum(),
        pl.col("tokens").filter(pl.col("good")).sum().alias("good_tokens"),
        pl.col("requests").filter(pl.col("good")).sum().alias("good_requests"),
        pl.col("requests").filter(pl.col("status") != "ok").sum().alias("failed_requests"),
        pl.col("requests").filter(pl.col("attempt") > 1).sum().alias("retried_requests"),
        pl.col("attempt").is_not_null().any().alias("has_attempts"),
        pl.col("prefill_ms").filter(has_phase).sum(),
        pl.col("decode_ms").filter(has_phase).sum(),
        has_phase.all().alias("all_phase"),
        pl.len().cast(pl.Int64).alias("records"),
        (pl.col("latency_ms").is_null() | pl.col("ttft_ms").is_null()).sum().cast(pl.Int64).alias("no_latency"),
    ).select(_SUMMARY_COLS))


def busy_hours(requests: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """The UTC hours (`hour`, truncated `ts`) in which each model got a request from each tenant."""
    # The hour as an integer (ts is UTC, so this is its truncation to the hour).
    got = request_sums(requests.lazy().select("model", "tenant", (pl.col("ts").dt.epoch("us") // _HOUR_US)
                                              .alias("hour")).unique())
    return got.with_columns((pl.col("hour") * _HOUR_US).cast(TS).alias("hour"))


def merge_summaries(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """One summary from the summaries of parts of the requests: sums added, flags combined."""
    if len(parts) == 1:
        return parts[0]
    return pl.concat(parts).group_by("model", "owner", "source", "fslot", "day").agg(
        pl.col("project", "tenant").first(), pl.col(*_SUMMED).sum(), pl.col("has_attempts").any(),
        pl.col("all_phase").all(),
    ).select(_SUMMARY_COLS)


_HOUR_US = 3_600_000_000
_SUMMED = (*TOKEN_COLS, "requests", "tokens", "tokens_w", "good_tokens", "good_requests", "failed_requests",
           "retried_requests", "prefill_ms", "decode_ms", "records", "no_latency")
_SUMMARY_COLS = (*SUMMARY_KEYS, *_SUMMED, "has_attempts", "all_phase")


# Columns a usage bucket counts over its whole [ts, end): pro-rated to the part inside the period.
_COUNTS = ("input_tokens", "cached_input_tokens", "output_tokens", "requests")
_PHASES = ("prefill_ms", "decode_ms")


def in_period(requests: pl.LazyFrame, period: Period) -> pl.LazyFrame:
    """Requests of the period: a request counts when it starts inside it; a usage bucket
    (`end` after `ts`, standing for many requests) counts for its overlap with the period, like
    every other interval: its counts are pro-rated by time and kept whole numbers, the in-period
    part of a count X being floor(X x (e - ts) / D) - floor(X x (s - ts) / D) for the overlap
    [s, e) of a bucket of duration D, so the parts of one bucket in adjacent periods add up to
    X exactly. The part counts at its start inside the period (`ts` = s) for slots and days."""
    p0, p1 = pl.lit(period.start), pl.lit(period.end)
    bucket = pl.col("end").is_not_null() & (pl.col("end") > pl.col("ts"))
    r = requests.filter((pl.col("ts") < p1) & ((pl.col("ts") >= p0) | (bucket & (pl.col("end") > p0))))
    dur = (pl.col("end") - pl.col("ts")).dt.total_microseconds().cast(pl.Float64)
    lo = ((pl.max_horizontal("ts", p0) - pl.col("ts")).dt.total_microseconds().cast(pl.Float64) / dur)
    hi = ((pl.min_horizontal("end", p1) - pl.col("ts")).dt.total_microseconds().cast(pl.Float64) / dur)
    whole = (pl.col("ts") >= p0) & (pl.col("end") <= p1)
    part = bucket & ~whole
    return r.with_columns(
        *(pl.when(part).then(((pl.col(c) * hi).floor() - (pl.col(c) * lo).floor()).cast(pl.Int64)).otherwise(pl.col(c))
          .alias(c) for c in _COUNTS),
        *(pl.when(part).then(pl.col(c) * (hi - lo)).otherwise(pl.col(c)).alias(c) for c in _PHASES),
        pl.when(part).then(pl.max_horizontal("ts", p0)).otherwise(pl.col("ts")).alias("ts"),
    )


def _resolve_batch(batch: pl.DataFrame, period: Period, config: Config, resolve, g0: pl.DataFrame) -> pl.DataFrame:
    w = config.allocation.token_weights
    slo = config.slo
    # Owners are resolved once per distinct (owner, source) and joined on in one step: a
    # batch has a few hundred keys, and three string joins per row would copy every request.
    keys = resolve(batch.select("owner", "source").unique())
    r = in_period(batch.lazy(), period)
    r = r.join(keys.lazy(), on=["owner", "source"], how="left", nulls_equal=True).with_columns(
        (
            w.input * pl.col("input_tokens")
            + w.cached_input * pl.col("cached_input_tokens")
            + w.output * pl.col("output_tokens")
        ).alias("tokens_w"),
        (pl.col("input_tokens") + pl.col("cached_input_tokens") + pl.col("output_tokens")).alias("tokens"),
        (
            (pl.col("status") == "ok")
            & (pl.col("ttft_ms").is_null() | (pl.col("ttft_ms") <= slo.ttft_ms))
            & (pl.col("latency_ms").is_null() | (pl.col("latency_ms") <= slo.latency_ms))
        ).alias("good"),
    ).collect()
    # The slot holding each request: the last slot starting at or before it. A binary search,
    # so batches need neither a sort nor a join.
    k = g0["g0"].search_sorted(r["ts"], side="right").cast(pl.Int64) - 1
    slot = g0["slot"].gather(k.clip(lower_bound=0)) if g0.height else pl.Series([None] * r.height, dtype=pl.Int64)
    # One chunk per batch: a frame whose columns are chunked differently is copied whole
    # (rechunked) by Polars on the next select.
    return r.with_columns(
        pl.when(pl.lit(k) >= 0).then(pl.lit(slot)).alias("fslot"),
        pl.col("ts").dt.convert_time_zone(period.timezone).dt.date().alias("day"),
    ).rechunk()


@dataclass
class Recharge:
    money: pl.DataFrame  # the money after the recharge (MONEY_SCHEMA)
    # What each caller key that maps to no project was charged, per model: source, key, model,
    # amount. In `money` those callers are one unattributed line per model row (u_key null).
    unmapped: pl.DataFrame
    gaps: list[tuple[str, str]] = field(default_factory=list)


# Above this many recharged rows (model rows x calling projects) a model's rows are summed per
# pool, day, category, origin, driver and cost row before they are split (see recharge()).
RECHARGE_DETAIL_ROWS = 2_000_000
# What a summed model row keeps: every money column but the card-time ones and the destination.
_COARSE_KEYS = ("pool", "model", "workload", "day", "category", "origin", "driver", "cost_id")


UNMAPPED_CALLERS = pl.Schema({"source": pl.String, "key": pl.String, "model": pl.String, "amount": pl.Float64})


def recharge(money: pl.DataFrame, requests: pl.DataFrame, config: Config) -> Recharge:
    """Move the cost of inference allocations onto the projects that sent the model's requests
    (`requests`: their summary, summarize()).

    A model with cost and no requests keeps its cost on the service owner. Rows keep their
    allocation_id and model, so the moved cost stays explainable.

    The model's rows are split once per project that called it, and once more for all the
    callers that map to no project together: a gateway log can carry a million distinct
    unmapped keys, and a copy of every model row per key would be model rows x keys. What each
    such key was charged is kept per (key, model) in `Recharge.unmapped` instead, so the cost
    grows with the records, not with their product.
    """
    mode = config.allocation.inference_recharge
    none = Recharge(money, pl.DataFrame(schema=UNMAPPED_CALLERS))
    if mode == "none" or requests.height == 0:
        return none
    col = "tokens_w" if mode == "tokens" else "requests"
    callers = (
        requests.group_by("model", "project", "tenant", "source", "owner").agg(pl.col(col).sum().alias("w"))
        .filter(pl.col("w") > 0)
        .with_columns((pl.col("w") / pl.col("w").sum().over("model")).alias("f"))
    )
    # One share per (model, project): a project's keys (aliases) are one destination; the
    # unmapped keys of a model together are one more (project null).
    weights = callers.group_by("model", "project", "tenant").agg(pl.col("f").sum())
    served = set(weights["model"].unique().to_list())
    # fill_null: rows without a workload (project-level costs) are never moved, and never lost.
    is_model = (
        (pl.col("workload") == "inference") & pl.col("model").is_in(sorted(served)) & (pl.col("dest") != IDLE)
    ).fill_null(False)
    if not money.select(is_model.any()).item():
        return none
    # Lazy, so the rows that stay are not copied once more before the concatenation.
    lm = money.lazy()
    served_rows = lm.filter(is_model)
    # Every model row is copied once per calling project: model rows x projects. A few hundred
    # projects is small; thousands of projects calling a model with many allocation rows is
    # not (2,000 projects on a sparse 8,192-card bundle passed 8 GB). Past the limit the model's
    # rows are summed per pool, day, category and cost row first: the same money per project,
    # day, pool and category, without the allocation and card-time detail (said in gaps).
    pairs = served_rows.group_by("model").len().join(
        weights.lazy().group_by("model").len(name="p"), on="model"
    ).select((pl.col("len") * pl.col("p")).sum()).collect().item()
    gaps: list[tuple[str, str]] = []
    if pairs and pairs > RECHARGE_DETAIL_ROWS:
        served_rows = served_rows.group_by(*_COARSE_KEYS, maintain_order=True).agg(pl.col("amount").sum()).with_columns(
            pl.lit(None, dtype=pl.String).alias("allocation_id"), pl.lit(None, dtype=pl.Int64).alias("s_idx"),
            pl.lit(None, dtype=pl.String).alias("gpu_id"), *(pl.lit(None, dtype=pl.String).alias(c) for c in
                                                              ("tenant", "project", "u_source", "u_key", "dest")),
        )
        gaps.append(("recharge detail", f"inference recharge onto {weights.height:,} callers would copy each model "
                     f"row once per caller ({pairs:,} rows): recharged cost is kept per pool, day, category and cost "
                     "row, so an owner's lineage and FOCUS rows do not list the serving allocations of recharged cost"))
    moved = (
        served_rows.drop("tenant", "project", "u_source", "u_key", "dest")
        .join(weights.lazy(), on="model")
        .with_columns(
            (pl.col("amount") * pl.col("f")).alias("amount"),
            pl.when(pl.col("project").is_null()).then(pl.lit("unattributed")).otherwise(pl.lit("owner")).alias("dest"),
            pl.lit(None, dtype=pl.String).alias("u_source"),
            pl.lit(None, dtype=pl.String).alias("u_key"),
            (pl.col("origin") + pl.lit("+recharge")).alias("origin"),
        )
        .select(money.columns)
    )
    cost = lm.filter(is_model).group_by("model").agg(pl.col("amount").sum().alias("c"))
    unmapped = (
        callers.lazy().filter(pl.col("project").is_null()).join(cost, on="model")
        .select("source", pl.col("owner").alias("key"), "model", (pl.col("f") * pl.col("c")).alias("amount"))
    )
    out, unmapped = pl.collect_all([pl.concat([lm.filter(~is_model), moved]), unmapped])
    return Recharge(out, unmapped, gaps)


def model_table(
    money_before_recharge: pl.DataFrame, seg: pl.DataFrame, requests: pl.DataFrame, config: Config
) -> tuple[pl.DataFrame, list[tuple[str, str]]]:
    """by_model: cost of the allocations serving each model, its tokens and unit costs
    (`requests`: the request summary, summarize())."""
    gaps: list[tuple[str, str]] = []
    serving = (pl.col("workload") == "inference") & pl.col("model").is_not_null()
    # Lazy: the filters read only the columns the sums need, not every money or segment column.
    cost = money_before_recharge.lazy().filter(serving & (pl.col("dest") != IDLE)).group_by("model").agg(
        pl.col("amount").sum().alias("cost"),
        pl.col("amount").filter(pl.col("category") == "power").sum().alias("energy_cost"),
    ).collect()
    hours = seg.lazy().filter(serving).group_by("model").agg(
        pl.col("alloc_h").sum().alias("allocated_gpu_hours"),
        pl.col("active_h").sum().alias("active_gpu_hours"),
        pl.col("covered_h").sum().alias("_covered"),
        pl.col("energy_s").sum().alias("_energy_s"),
        pl.col("joules").sum().alias("joules"),
        pl.col("kwh_gpu").sum().alias("energy_kwh_gpu"),
        pl.col("kwh_fac").sum().alias("energy_kwh_facility"),
        pl.col("carbon_g").sum().truediv(1000).alias("carbon_kg"),
        pl.col("carbon_known").any().alias("_carbon_known"),
        # Seconds the serving cards were held, weighted by capacity: the denominator of average power.
        (pl.col("alloc_h") * 3600).sum().alias("_held_s"),
    ).collect()
    w = config.allocation.token_weights
    tok = requests.group_by("model").agg(
        pl.col(*TOKEN_COLS, "requests", "good_tokens", "good_requests", "failed_requests", "retried_requests",
               "prefill_ms", "decode_ms").sum(),
        pl.col("has_attempts").any(),
        pl.col("all_phase").all(),
    )
    t = cost.join(hours, on="model", how="full", coalesce=True).join(tok, on="model", how="full", coalesce=True)
    t = t.with_columns(
        pl.col("cost", "energy_cost", "allocated_gpu_hours", "active_gpu_hours", "joules", "energy_kwh_gpu",
               "energy_kwh_facility", "carbon_kg", "_held_s", "_covered", "_energy_s").fill_null(0.0),
        pl.col(*TOKEN_COLS, "requests", "good_tokens", "good_requests", "failed_requests", "retried_requests")
        .fill_null(0),
    )
    in_tok = pl.col("input_tokens") + pl.col("cached_input_tokens")
    weights_in = w.input * pl.col("input_tokens") + w.cached_input * pl.col("cached_input_tokens")
    weights_out = w.output * pl.col("output_tokens")
    by_weights = weights_in / (weights_in + weights_out)
    if config.allocation.token_split == "phase_time":
        phase_total = pl.col("prefill_ms") + pl.col("decode_ms")
        input_share = pl.when(phase_total > 0).then(pl.col("prefill_ms") / phase_total).otherwise(by_weights)
        missing = t.filter((pl.col("requests") > 0) & ~pl.col("all_phase").fill_null(False))
        if missing.height:
            gaps.append(
                ("phase time missing", "input/output split fell back to token weights for some requests of: "
                 + ", ".join(missing["model"].sort().to_list()))
            )
    else:
        input_share = by_weights
    tokens_all = in_tok + pl.col("output_tokens")
    per_m = lambda num, den: pl.when(den > 0).then(num / den * 1e6).otherwise(None)  # noqa: E731
    t = t.with_columns(input_share.fill_nan(0.0).fill_null(0.0).alias("input_cost_share"))
    # Within the input cost, cached tokens carry their weight relative to uncached ones.
    cached_w = w.cached_input * pl.col("cached_input_tokens")
    t = t.with_columns(
        pl.when(weights_in > 0).then(cached_w / weights_in).otherwise(0.0).alias("_cached_part")
    )
    t = t.with_columns(
        per_m(pl.col("cost"), tokens_all).alias("cost_per_million_tokens"),
        per_m(pl.col("cost") * pl.col("input_cost_share"), in_tok).alias("cost_per_million_input_tokens"),
        per_m(pl.col("cost") * (1 - pl.col("input_cost_share")), pl.col("output_tokens")).alias(
            "cost_per_million_output_tokens"
        ),
        per_m(pl.col("cost") * pl.col("input_cost_share") * (1 - pl.col("_cached_part")), pl.col("input_tokens"))
        .alias("cost_per_million_uncached_input_tokens"),
        per_m(pl.col("cost") * pl.col("input_cost_share") * pl.col("_cached_part"), pl.col("cached_input_tokens"))
        .alias("cost_per_million_cached_input_tokens"),
        per_m(pl.col("cost"), pl.col("good_tokens")).alias("cost_per_million_good_tokens"),
        pl.when(pl.col("joules") > 0).then(pl.col("output_tokens") / pl.col("joules")).alias("output_tokens_per_joule"),
        pl.when(pl.col("joules") > 0)
        .then(pl.col("output_tokens") / (pl.col("joules") * config.energy.server_overhead * config.energy.pue))
        .alias("output_tokens_per_joule_facility"),
        pl.when(pl.col("_held_s") > 0).then(pl.col("joules") / pl.col("_held_s")).alias("avg_power_w_per_gpu"),
        pl.when(in_tok > 0).then(pl.col("cached_input_tokens") / in_tok).alias("cache_hit_rate"),
        pl.when(pl.col("requests") > 0).then(pl.col("good_requests") / pl.col("requests")).alias("slo_attainment"),
        pl.when(pl.col("requests") > 0).then(pl.col("failed_requests") / pl.col("requests")).alias("error_share"),
        # Retries are known only where the source says which try a request was (`attempt`).
        pl.when((pl.col("requests") > 0) & pl.col("has_attempts").fill_null(False))
        .then(pl.col("retried_requests") / pl.col("requests"))
        .alias("retry_share"),
    )
    no_alloc = t.filter((pl.col("allocated_gpu_hours") == 0) & (pl.col("requests") > 0))
    if no_alloc.height:
        gaps.append(("model without serving allocations", "requests for models no inference allocation serves: "
                     + ", ".join(no_alloc["model"].to_list())))
    # Unknown is not zero: a model whose cards had no telemetry has unknown activity and energy.
    t = t.with_columns(
        pl.when(pl.col("_covered") > 0).then(pl.col("active_gpu_hours")).alias("active_gpu_hours"),
        *(pl.when(pl.col("_energy_s") > 0).then(pl.col(c)).alias(c)
          for c in ("energy_kwh_gpu", "energy_kwh_facility", "carbon_kg", "avg_power_w_per_gpu")),
    ).with_columns(
        # CO2e is unknown (not 0 kg) where no tariff gave the model's energy a carbon intensity.
        pl.when(pl.col("_carbon_known").fill_null(False)).then(pl.col("carbon_kg")).alias("carbon_kg"),
    )
    out = t.drop("all_phase", "prefill_ms", "decode_ms", "_held_s", "_cached_part", "has_attempts", "_covered",
                 "_energy_s", "_carbon_known").sort(
        "cost", "model", descending=[True, False]
    )
    return out, gaps


def model_trend(money_before_recharge: pl.DataFrame, seg: pl.DataFrame, requests: pl.DataFrame,
                hours: pl.DataFrame) -> pl.DataFrame:
    """Daily unit economics per model: $/1M output tokens, tokens per joule, occupancy
    (`requests`: the request summary, summarize(); `hours`: the hours with traffic, busy_hours()).

    Occupancy = allocated GPU-hours of the model's cards in hours that saw at least one request,
    over all its allocated GPU-hours (hours with no token are paid for all the same).
    """
    serving = (pl.col("workload") == "inference") & pl.col("model").is_not_null()
    cost = (
        money_before_recharge.lazy().filter(serving & (pl.col("dest") != IDLE))
        .group_by("model", "day")
        .agg(pl.col("amount").sum().alias("cost"))
        .collect()
    )
    s = seg.filter(serving).select("model", "day", "t0", "t1", "dur_s", "alloc_h", "joules", "covered_h")
    # Unknown is not zero: a model-day none of whose held time has telemetry has no energy figure.
    energy = s.group_by("model", "day").agg(
        pl.when(pl.col("covered_h").fill_null(0.0).sum() > 0).then(pl.col("joules").sum()).alias("joules"))
    # Split held time at hour edges to see which hours had traffic.
    hourly = split_by(s, "1h", "hour").with_columns((pl.col("f") * pl.col("alloc_h")).alias("h"))
    busy = hours.select("model", "hour").unique().with_columns(pl.lit(True).alias("busy"))
    occ = (
        hourly.join(busy, on=["model", "hour"], how="left")
        .group_by("model", "day")
        .agg(
            pl.col("h").filter(pl.col("busy").fill_null(False)).sum().alias("gpu_hours_with_tokens"),
            pl.col("h").filter(~pl.col("busy").fill_null(False)).sum().alias("gpu_hours_without_tokens"),
        )
    )
    tok = requests.group_by("model", "day").agg(pl.col("output_tokens").sum(), pl.col("tokens").sum())
    t = (
        cost.join(energy, on=["model", "day"], how="full", coalesce=True)
        .join(occ, on=["model", "day"], how="full", coalesce=True)
        .join(tok, on=["model", "day"], how="full", coalesce=True)
        .with_columns(pl.col("cost", "gpu_hours_with_tokens", "gpu_hours_without_tokens").fill_null(0.0),
                      pl.col("output_tokens", "tokens").fill_null(0))
    )
    held = pl.col("gpu_hours_with_tokens") + pl.col("gpu_hours_without_tokens")
    return t.with_columns(
        pl.when(pl.col("output_tokens") > 0).then(pl.col("cost") / pl.col("output_tokens") * 1e6)
        .alias("cost_per_million_output_tokens"),
        pl.when(pl.col("joules") > 0).then(pl.col("output_tokens") / pl.col("joules")).alias("output_tokens_per_joule"),
        pl.when(held > 0).then(pl.col("gpu_hours_with_tokens") / held).alias("occupancy"),
    ).sort("model", "day")
