"""Telemetry samples laid onto the ledger's intervals: covered, active and util-weighted time, joules."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING
from datetime import datetime, timedelta

import polars as pl

from . import quarter_activity
from .config import Activity
from .contract import TS
from .ledger import seconds
from .power_limits import believed_power, implausible_counter
from .tariffs import Bands
from .telemetry import TelemetrySource

if TYPE_CHECKING:
    from .quarter_store import Rollup


def sample_intervals(telemetry: pl.DataFrame, max_gap_s: float, *, presorted: bool = False,
                     max_w: pl.Expr | float | None = None, ratio: float | None = None) -> pl.DataFrame:
    """Each sample stands for [ts, next ts) of its card, capped at max_gap_s; with its joules.

    Energy: the counter delta when both ends exist, the interval is not capped and the
    delta is >= 0; otherwise (reset, no counter, capped gap) power x time; unknown when
    neither exists. `presorted`: the rows already come sorted by (gpu_id, ts).

    `max_w` (the card's power ceiling, an expression over the rows or one number) and `ratio`
    (power_limits): a counter delta implying too much power, or too little for the card's
    readings (`low`), is `implausible` and the sample uses power x time instead (unknown without
    power); a power reading above the ceiling (`power_bad`) is not used (the counter where it is
    believed, else unknown). None checks nothing.
    """
    cap = pl.duration(microseconds=int(max_gap_s * 1_000_000))
    t = telemetry if presorted else telemetry.sort("gpu_id", "ts")
    # The next row is the card's next sample unless the card changes there (cheaper than .over).
    same = pl.col("gpu_id").shift(-1) == pl.col("gpu_id")
    t = t.with_columns(
        pl.when(same).then(pl.col("ts").shift(-1)).alias("next_ts"),
        pl.when(same).then(pl.col("energy_j").shift(-1)).alias("next_energy_j"),
        pl.when(same).then(pl.col("power_w").shift(-1)).alias("next_power_w"),
    )
    t = t.with_columns(
        pl.min_horizontal(pl.col("next_ts"), pl.col("ts") + cap).alias("t_end"),
        (pl.col("next_ts").is_not_null() & (pl.col("next_ts") <= pl.col("ts") + cap)).alias("uncapped"),
    ).with_columns(seconds(pl.col("t_end") - pl.col("ts")).alias("dt_s"))
    delta = pl.col("next_energy_j") - pl.col("energy_j")
    counter = pl.col("uncapped") & delta.is_not_null() & (delta >= 0)
    if max_w is None and ratio is None:
        bad, low, power, power_bad = pl.lit(False), pl.lit(False), pl.col("power_w"), pl.lit(False)
        low_ref = pl.lit(None, pl.Float64)
    else:
        limit = pl.lit(float("inf")) if max_w is None else (pl.lit(max_w) if isinstance(max_w, (int, float)) else max_w)
        # A reading above the ceiling is believed nowhere: not billed, not a reference for the counter.
        t = t.with_columns(limit.alias("_max_w"))
        limit = pl.col("_max_w")
        if t.select((pl.col("power_w") > limit).any()).item():
            t = t.with_columns(believed_power(pl.col("power_w"), limit).alias("_p"),
                               believed_power(pl.col("next_power_w"), limit).alias("_np"))
            power, next_power = pl.col("_p"), pl.col("_np")
        else:  # the common case: every reading is believed, and the columns are used as they are
            power, next_power = pl.col("power_w"), pl.col("next_power_w")
        high, too_low = implausible_counter(delta, pl.col("dt_s"), power, next_power, limit,
                                            float("inf") if ratio is None else ratio)
        low_ref = pl.min_horizontal(power, next_power)
        bad, low, power_bad = counter & (high | too_low), counter & too_low, (pl.col("power_w") > limit).fill_null(False)
    t = t.with_columns(bad.alias("implausible"), low.alias("low"), power_bad.alias("power_bad"))
    counter_ok = counter & ~pl.col("implausible")
    t = t.with_columns(
        pl.when(counter_ok)
        .then(delta)
        .when(power.is_not_null())
        .then(power * pl.col("dt_s"))
        .otherwise(None)
        .alias("joules"),
        (pl.col("uncapped") & delta.is_not_null() & (delta < 0)).alias("counter_reset"),
        pl.when(pl.col("implausible")).then(delta / pl.col("dt_s")).alias("implied_w"),
        pl.when(pl.col("low")).then(low_ref).alias("low_ref_w"),  # the reading a counter too low failed
    )
    return t.filter(pl.col("dt_s") > 0).select(
        "gpu_id", "ts", "t_end", "dt_s", "util_pct", "power_w", "joules", "counter_reset", "implausible", "implied_w",
        "low", "low_ref_w", "power_bad",
    )


def unbelieved(samples: pl.DataFrame) -> pl.DataFrame:
    """The IMPLAUSIBLE rows of sample_intervals' output: one per sample whose counter is not
    believed (kind high / low, implied_w the power it implies; power_w the sample's reading, for
    kind low the smaller of the two it failed against) and one per sample whose power reading is
    not (kind power, implied_w the reading)."""
    s = samples.filter(pl.col("implausible") | pl.col("power_bad"))
    counter = s.filter(pl.col("implausible")).select(
        "gpu_id", "ts", "t_end", pl.when(pl.col("low")).then(pl.lit("low")).otherwise(pl.lit("high")).alias("kind"),
        "implied_w", pl.coalesce("low_ref_w", "power_w").alias("power_w"), "joules")
    power = s.filter(pl.col("power_bad")).select("gpu_id", "ts", "t_end", pl.lit("power").alias("kind"),
                                                 pl.col("power_w").alias("implied_w"), "power_w", "joules")
    return pl.concat([counter, power])


def pieces(samples: pl.DataFrame, intervals: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Cut sample intervals at the ledger's interval edges: one row per (sample, interval) overlap.

    Most samples sit inside one interval; only those straddling an edge are expanded, so the
    cost is linear in the telemetry (sorted as-of joins, no range join over all pairs).
    Returned in two parts: samples wholly inside one interval (in sample order, so e_idx
    ascends when e_idx follows (gpu_id, t0), as the ledger numbers them) and the rest.
    """
    iv = intervals.select("e_idx", "gpu_id", "t0", "t1").sort("gpu_id", "t0")
    # sample_intervals returns samples sorted by (gpu_id, ts): no re-sort needed.
    s = samples.join_asof(
        iv.select("gpu_id", pl.col("t0").alias("ts"), pl.col("e_idx").alias("e_a"), pl.col("t1").alias("a_t1")),
        on="ts",
        by="gpu_id",
        strategy="backward",
        check_sortedness=False,  # both sides are sorted by (gpu_id, time)
    )
    # The common case: the sample lies wholly inside the interval holding its start.
    inside = pl.col("e_a").is_not_null() & (pl.col("t_end") <= pl.col("a_t1"))
    simple = s.filter(inside).select(
        pl.exclude("e_a", "a_t1", "t_end"), pl.col("e_a").alias("e_idx"), pl.col("dt_s").alias("ov_s"),
        pl.lit(1.0).alias("frac"), pl.col("ts").alias("p0"), pl.col("t_end").alias("p1"),
    )
    # The rest straddles an edge (or starts before the card's first interval, or in a hole):
    # find the interval holding its last instant and expand the range between.
    rest = s.filter(~inside).drop("a_t1")
    if rest.height == 0:
        return simple, simple.clear()
    rest = rest.with_columns((pl.col("t_end") - pl.duration(microseconds=1)).alias("t_last")).sort("gpu_id", "t_last")
    rest = rest.join_asof(
        iv.select("gpu_id", pl.col("t0").alias("t_last"), pl.col("e_idx").alias("e_b")),
        on="t_last",
        by="gpu_id",
        strategy="backward",
        check_sortedness=False,  # sorted just above
    )
    firsts = iv.group_by("gpu_id").agg(pl.col("e_idx").min().alias("e_min"))
    spread = (
        rest.drop_nulls("e_b")
        .join(firsts, on="gpu_id", how="left")
        .with_columns(pl.coalesce("e_a", "e_min").alias("e_a"))
        .with_columns(pl.int_ranges("e_a", pl.col("e_b") + 1).alias("e_idx"))
        .explode("e_idx")
        .drop("e_a", "e_b", "e_min", "t_last")
        .join(iv.select("e_idx", "t0", "t1"), on="e_idx")
        .with_columns(pl.max_horizontal("ts", "t0").alias("p0"), pl.min_horizontal("t_end", "t1").alias("p1"))
        .with_columns(seconds(pl.col("p1") - pl.col("p0")).alias("ov_s"))
        .filter(pl.col("ov_s") > 0)
        .with_columns((pl.col("ov_s") / pl.col("dt_s")).alias("frac"))
        .drop("t0", "t1")
    )
    return simple, spread.select(simple.columns)


# Samples read per window of time: the telemetry stage holds one window at a time, so its
# memory is bounded by this, not by the fleet or the period.
WINDOW_ROWS = 2_000_000
# Window edges fall on quarter hours (UTC): a minute (oversized detection) and a quarter-hour
# energy bucket (power profile) never straddle two windows.
ALIGN = timedelta(minutes=15)


@dataclass
class TelemetryActivity:
    """What the telemetry stage hands the engine (nothing per sample survives it)."""

    per_interval: pl.DataFrame  # e_idx, covered_s, active_s, util_s, idle_util_s, joules, idle_joules, energy_s,
    #                             price_j, idle_price_j, carbon_j (0 without bands)
    oversized: pl.DataFrame  # e_idx, job_id, over_s, over_util_s, over_j, over_price_j (J x price per kWh)
    card_energy: pl.DataFrame  # gpu_id (Enum), bucket (15 min, UTC), joules: samples starting in the bucket
    resets: pl.DataFrame  # gpu_id, ts, t_end: each sample interval over which the energy counter went backwards
    # gpu_id, ts, t_end, kind, implied_w, power_w, joules (null: unknown): each sample interval whose
    # counter delta (kind high / low) or power reading (kind power) was not believed (power_limits)
    implausible: pl.DataFrame
    samples: int  # samples of the ledger's cards that started inside a window
    outside: int  # rows of the source whose card is not in `known` (ignored)
    # gpu_id, q (UTC quarter hour number): quarters a rollup without raw samples behind it (made
    # on Spark) could not stand in for; their sums are spread by time (quarter_activity).
    undecided: pl.DataFrame | None = None


def windows(start: datetime, end: datetime, max_gap_s: float, rows: int, window_rows: int = WINDOW_ROWS) -> list[tuple[datetime, datetime]]:
    """Consecutive [a, b) windows covering [start - max gap, end), each holding about window_rows samples.

    A sample starting before `start - max gap` cannot reach the period, one starting at or after
    `end` is outside it. Inner edges are quarter-hour aligned (UTC).
    """
    first = _floor(start - timedelta(seconds=max_gap_s))
    n = max(1, math.ceil(rows / max(window_rows, 1)))
    width = ALIGN * max(1, math.ceil((end - first) / ALIGN / n))
    edges = [first]
    while edges[-1] + width < end:
        edges.append(edges[-1] + width)
    edges.append(end)
    return list(zip(edges, edges[1:]))


def _floor(t: datetime) -> datetime:
    epoch = datetime(1970, 1, 1, tzinfo=t.tzinfo)
    return epoch + ALIGN * ((t - epoch) // ALIGN)


def interval_activity(
    source: TelemetrySource,
    intervals: pl.DataFrame,
    rule: Activity,
    period_start: datetime,
    period_end: datetime,
    jobs: pl.DataFrame | None = None,
    window_rows: int | None = None,
    known: pl.Series | None = None,
    bands: Bands | None = None,
    rollup: "Rollup | None" = None,
    ceilings: pl.DataFrame | None = None,
    ratio: float | None = None,
) -> TelemetryActivity:
    """Per ledger interval: covered_s, active_s, util_s (util% x s), joules, energy-known seconds.

    Telemetry is read one window of time at a time (plus max_sample_gap_s beyond it, so the
    last samples of a window find their successor); each sample belongs to the window holding
    its start. Everything computed per sample is summed per interval (or per job and minute,
    or per card and quarter hour) inside its window, so the windows' results just add up:
    the same figures as one pass over all samples, in bounded memory.

    `jobs` (e_idx, job_id) names the multi-card job holding each interval; for those, the
    inactive seconds during which another card of the same job was busy are counted too
    (the oversized-request idle cause), at sample resolution. `bands` (the tariffs) price each
    joule by the band it was drawn in: per interval `price_j` (J x price per kWh),
    `idle_price_j` (the same for the joules drawn while inactive) and `carbon_j` (J x g/kWh);
    without bands all three are 0.
    `known`: the card ids the `outside` count is taken against (default: the intervals' cards);
    one reader serves both. `rollup`: the store's quarter-hour rollup for this rule; where the
    period allows it, its cells stand in for the raw samples wherever they can
    (`quarter_activity`), with the same results. `ceilings` (gpu_id, max_w) and `ratio`: what an
    energy counter may claim (power_limits); a card without a ceiling is checked by `ratio` only.
    """
    # Work on integer card codes: sorts, as-of joins and group-bys over millions of samples are
    # several times cheaper than on UUID strings, and every copy is smaller.
    codes = intervals.select("gpu_id").unique().sort("gpu_id").with_row_index("gc")
    # Each card's power ceiling by its code, looked up by position (a gather, no join per sample).
    max_w = (codes.join(ceilings, on="gpu_id", how="left", maintain_order="left").get_column("max_w")
             .fill_null(float("inf")) if ceilings is not None else pl.Series("max_w", [float("inf")] * codes.height))
    check = Check(max_w, ratio)
    iv_all = intervals.select("e_idx", "gpu_id", "t0", "t1").join(codes, on="gpu_id").select(
        "e_idx", pl.col("gc").alias("gpu_id"), "t0", "t1"
    ).sort("gpu_id", "t0")
    # Samples are summed over the intervals cut at the tariff bands' edges ("parts", numbered in
    # (card, time) order like the ledger's intervals), so each part has one price; the parts are
    # folded back into their intervals at the end.
    parts = (bands or Bands.flat(0.0)).split(iv_all).with_row_index("part").with_columns(pl.col("part").cast(pl.Int64))
    iv_parts = parts.select(pl.col("part").alias("e_idx"), "gpu_id", "t0", "t1")
    of_part = parts.select("part", pl.col("e_idx").alias("parent"), "price", "carbon")
    if jobs is not None and jobs.height == 0:
        jobs = None
    job_codes = None
    job_parts = None
    if jobs is not None:
        # Integer job codes for the per-minute group-bys too; mapped back at the end.
        job_codes = jobs.select("job_id").unique().sort("job_id").with_row_index("jc")
        jobs = (
            jobs.join(job_codes, on="job_id")
            .join(parts.select("part", "e_idx"), on="e_idx")
            .select(pl.col("part").alias("e_idx"), pl.col("jc").alias("job_id"))
        )
        job_parts = jobs
        jobs = _JobIndex.of(jobs, parts.height)
    if rule.mode == "threshold":
        busy = pl.when(pl.col("util_pct") >= rule.threshold_pct).then(1.0).otherwise(0.0)
        # An inactive sample (below the threshold) still had some utilization.
        idle_util = pl.col("util_pct") * (1.0 - busy)
    else:
        busy = pl.col("util_pct") / 100.0
        # Util-weighted: the inactive fraction of a sample is the part that did no work.
        idle_util = pl.lit(0.0)
    aggs, overs, energy, resets, bad = [], [], [], [], []
    n_samples = 0
    if quarter_activity.usable(rollup, rule, period_start, period_end):
        assert rollup is not None

        def raw_sums(tele: pl.DataFrame, clipped: pl.DataFrame) -> tuple[list[pl.DataFrame], ...]:
            # Pieces over the parts clipped to the raw cells; context pieces tell the oversized
            # cause which siblings were busy but are not counted. Also each sample's quarter-hour
            # joules and the samples whose counter was not believed (the caller keeps those of
            # the cells it counts).
            samples = check.intervals(tele, rule.max_sample_gap_s)
            simple, spread = pieces(samples.select("gpu_id", "ts", "t_end", "dt_s", "util_pct", "joules"),
                                    clipped.select("e_idx", "gpu_id", "t0", "t1"))
            p = pl.concat([simple, spread])
            p = p.with_columns(clipped["part"].gather(p["e_idx"]).alias("e_idx"),
                               clipped["counted"].gather(p["e_idx"]).alias("counted"))
            a = [_per_interval(p.filter(pl.col("counted")), busy, idle_util)]
            o = [_oversized(p, busy, idle_util, jobs)] if jobs is not None else []
            return a, o, [unbelieved(samples)], [
                _card_energy(samples, period_start, period_end)]

        with source.reader() as r:
            qa = quarter_activity.run(r, rollup, codes, iv_parts, job_parts, rule, period_start, period_end,
                                      codes["gpu_id"] if known is None else known, raw_sums, check.max_w, ratio)
        aggs, overs, energy, resets, bad = qa.aggs, qa.overs, qa.energy, qa.resets, qa.implausible
        n_samples, outside = qa.samples, qa.outside
        undecided = qa.undecided
    else:
        undecided = None
        outside, n_samples = _raw_windows(source, codes, iv_parts, jobs, rule, busy, idle_util, period_start,
                                          period_end, window_rows, known, aggs, overs, energy, resets, bad, check)
    out = intervals.select("e_idx")
    if aggs:
        agg = (
            pl.concat(aggs).group_by("e_idx").agg(pl.all().sum())
            .join(of_part, left_on="e_idx", right_on="part")
            .select(
                pl.col("parent").alias("e_idx"), *_ACTIVITY,
                (pl.col("joules") * pl.col("price")).alias("price_j"),
                (pl.col("idle_joules") * pl.col("price")).alias("idle_price_j"),
                (pl.col("joules") * pl.col("carbon")).alias("carbon_j"),
            )
            .group_by("e_idx").agg(pl.all().sum())
        )
        out = out.join(agg, on="e_idx", how="left")
    out = out.with_columns(
        (pl.col(c) if c in out.columns else pl.lit(None, pl.Float64)).fill_null(0.0).alias(c)
        for c in (*_ACTIVITY, *_PRICED)
    )
    oversized = empty_oversized()
    if overs and job_codes is not None:
        oversized = (
            pl.concat(overs)
            .join(of_part, left_on="e_idx", right_on="part")
            .group_by("parent", "job_id").agg(
                pl.col("over_s", "over_util_s", "over_j").sum(),
                (pl.col("over_j") * pl.col("price")).sum().alias("over_price_j"),
            )
            .join(job_codes, left_on="job_id", right_on="jc")
            .select(pl.col("parent").alias("e_idx"), pl.col("job_id_right").alias("job_id"), "over_s", "over_util_s",
                    "over_j", "over_price_j")
        )
    card = pl.Enum(codes["gpu_id"])
    names = codes.select(pl.col("gc"), pl.col("gpu_id").cast(card).alias("name"))
    card_energy = (
        pl.concat(energy).join(names, left_on="gpu_id", right_on="gc").select(pl.col("name").alias("gpu_id"), "bucket", "joules")
        if energy else pl.DataFrame(schema={"gpu_id": card, "bucket": TS, "joules": pl.Float64})
    ).sort("gpu_id", "bucket")
    resets_f = (
        pl.concat(resets).join(codes, left_on="gpu_id", right_on="gc").select(pl.col("gpu_id_right").alias("gpu_id"), "ts", "t_end")
        if resets else pl.DataFrame(schema={"gpu_id": pl.String, "ts": TS, "t_end": TS})
    ).sort("gpu_id", "ts")
    bad_f = (
        pl.concat(bad).join(codes, left_on="gpu_id", right_on="gc")
        .filter((pl.col("t_end") > period_start) & (pl.col("ts") < period_end))
        .select(pl.col("gpu_id_right").alias("gpu_id"), *IMPLAUSIBLE[1:]).unique(["gpu_id", "ts", "kind"])
        if bad else pl.DataFrame(schema=IMPLAUSIBLE_SCHEMA)
    ).sort("gpu_id", "ts")
    return TelemetryActivity(out, oversized, card_energy, resets_f, bad_f, n_samples, outside, undecided)


IMPLAUSIBLE = ("gpu_id", "ts", "t_end", "kind", "implied_w", "power_w", "joules")
IMPLAUSIBLE_SCHEMA = pl.Schema({"gpu_id": pl.String, "ts": TS, "t_end": TS, "kind": pl.String, "implied_w": pl.Float64,
                                "power_w": pl.Float64, "joules": pl.Float64})


@dataclass(frozen=True)
class Check:
    """What an energy counter may claim, per card code (power_limits): the ceiling by code, the ratio."""

    max_w: pl.Series  # indexed by card code
    ratio: float | None

    def intervals(self, tele: pl.DataFrame, max_gap_s: float) -> pl.DataFrame:
        """sample_intervals of coded, presorted samples with the counter checked."""
        limit = pl.lit(self.max_w).gather(pl.col("gpu_id")) if self.max_w.len() else None
        return sample_intervals(tele, max_gap_s, presorted=True, max_w=limit, ratio=self.ratio)



def _raw_windows(source, codes, iv_parts, jobs, rule, busy, idle_util, period_start, period_end, window_rows, known,
                 aggs, overs, energy, resets, bad, check) -> tuple[int, int]:
    """The raw path: every sample read window by window; appends to the lists, returns (outside, samples)."""
    cap = timedelta(seconds=rule.max_sample_gap_s)
    n_samples = 0
    with source.reader() as r:
        outside = r.outside(codes["gpu_id"] if known is None else known)
        spans = windows(period_start, period_end, rule.max_sample_gap_s, r.count(), window_rows or WINDOW_ROWS)
        for a, b in spans:
            tele = _by_card_and_time(r.window(a, b + cap, codes), a, b + cap, codes.height)
            samples = check.intervals(tele, rule.max_sample_gap_s).filter(pl.col("ts") < b)
            del tele
            n_samples += samples.height
            if samples.height == 0:
                continue
            resets.append(samples.filter(pl.col("counter_reset")).select("gpu_id", "ts", "t_end"))
            bad.append(unbelieved(samples))
            energy.append(_card_energy(samples, period_start, period_end))
            iv = iv_parts.filter((pl.col("t1") > a) & (pl.col("t0") < b + cap))
            simple, spread = pieces(samples.select("gpu_id", "ts", "t_end", "dt_s", "util_pct", "joules"), iv)
            del samples
            # Samples come sorted by card and time and the parts are numbered the same way, so
            # the simple pieces' part numbers ascend: a sorted group-by is ~3x cheaper.
            if simple["e_idx"].is_sorted():
                simple = simple.with_columns(pl.col("e_idx").set_sorted())
            aggs += [_per_interval(simple, busy, idle_util), _per_interval(spread, busy, idle_util)]
            if jobs is not None:
                overs.append(_oversized(pl.concat([simple, spread]), busy, idle_util, jobs))
            del simple, spread
    return outside, n_samples

def _by_card_and_time(tele: pl.DataFrame, a: datetime, b: datetime, n_cards: int) -> pl.DataFrame:
    """Samples of a window [a, b) sorted by (card code, ts).

    When code and microseconds since `a` fit one Int64 together (windows at fleet scale are
    about a day), sort on that single key: about 3x cheaper than a two-column sort.
    """
    span_us = int((b - a) / timedelta(microseconds=1)) + 1
    shift = span_us.bit_length()
    if shift + max(n_cards, 1).bit_length() > 62:
        return tele.sort("gpu_id", "ts")
    a_us = int((a - datetime(1970, 1, 1, tzinfo=a.tzinfo)) / timedelta(microseconds=1))
    key = tele.select(pl.col("gpu_id").cast(pl.Int64) * (1 << shift) + (pl.col("ts").dt.epoch("us") - a_us)).to_series()
    if key.is_sorted():  # a store filled card by card often hands them over in order already
        return tele
    return tele.with_columns(key.alias("__k")).sort("__k").drop("__k")


def _card_energy(samples: pl.DataFrame, start: datetime, end: datetime) -> pl.DataFrame:
    """Joules of the samples starting in each (card, quarter hour) of the period.

    Samples are sorted by (card code, ts), so one integer key (code, quarter) ascends with
    them and the group-by runs on sorted keys.
    """
    q = 900_000_000  # a quarter hour in microseconds
    quarter = pl.col("ts").dt.epoch("us") // q
    s = samples.filter(pl.col("joules").is_not_null() & (pl.col("ts") >= start) & (pl.col("ts") < end))
    if s.height == 0:
        return pl.DataFrame(schema={"gpu_id": samples.schema["gpu_id"], "bucket": TS, "joules": pl.Float64})
    q0 = s.select(quarter.min()).item()
    key = (pl.col("gpu_id").cast(pl.Int64) * (1 << 32) + (quarter - q0)).alias("k")
    g = s.select(key, "joules").with_columns(pl.col("k").set_sorted()).group_by("k").agg(pl.col("joules").sum())
    return g.select(
        (pl.col("k") // (1 << 32)).cast(samples.schema["gpu_id"]).alias("gpu_id"),
        ((pl.col("k") % (1 << 32) + q0) * q).cast(pl.Datetime("us")).dt.replace_time_zone("UTC").alias("bucket"),
        "joules",
    )


_ACTIVITY = ("covered_s", "active_s", "util_s", "idle_util_s", "joules", "idle_joules", "energy_s")
_PRICED = ("price_j", "idle_price_j", "carbon_j")


def _per_interval(p: pl.DataFrame, busy: pl.Expr, idle_util: pl.Expr) -> pl.DataFrame:
    """Per e_idx (here a tariff part of an interval) the sums the engine keeps."""
    return p.group_by("e_idx").agg(
        pl.col("ov_s").sum().alias("covered_s"),
        (pl.col("ov_s") * busy).sum().alias("active_s"),
        (pl.col("ov_s") * pl.col("util_pct")).sum().alias("util_s"),
        # Util-seconds of the inactive part: what money spread by utilization paid for idle time.
        (pl.col("ov_s") * idle_util).sum().alias("idle_util_s"),
        (pl.col("joules") * pl.col("frac")).sum().alias("joules"),
        # Joules drawn while inactive: what allocated idle time cost in energy.
        (pl.col("joules") * pl.col("frac") * (1.0 - busy)).sum().alias("idle_joules"),
        pl.when(pl.col("joules").is_not_null()).then(pl.col("ov_s")).otherwise(0.0).sum().alias("energy_s"),
    )


@dataclass(frozen=True)
class _JobIndex:
    """Job codes by e_idx, to attach to millions of pieces by a gather instead of a hash join.

    `dense[e]` is the job of interval e when it has exactly one; the few intervals held by
    several multi-card jobs at once keep a small frame and a join.
    """

    dense: pl.Series  # job code (UInt32) or null, indexed by e_idx
    shared: pl.DataFrame  # e_idx, job_id for intervals with more than one job

    @classmethod
    def of(cls, jobs: pl.DataFrame, n_intervals: int) -> "_JobIndex":
        n = jobs.group_by("e_idx").agg(pl.len().alias("n"))
        one = jobs.join(n.filter(pl.col("n") == 1), on="e_idx", how="semi")
        size = max(n_intervals, int(jobs["e_idx"].max() or 0) + 1)
        dense = (
            pl.DataFrame({"e_idx": pl.int_range(size, eager=True, dtype=pl.Int64)})
            .join(one, on="e_idx", how="left", maintain_order="left")["job_id"]
        )
        shared = jobs.join(n.filter(pl.col("n") > 1), on="e_idx", how="semi")
        return cls(dense, shared)

    def attach(self, pieces: pl.DataFrame) -> pl.DataFrame:
        """The pieces that belong to a job, with job_id (a piece of a shared interval once per job)."""
        one = pieces.with_columns(self.dense.gather(pieces["e_idx"]).alias("job_id")).filter(pl.col("job_id").is_not_null())
        if self.shared.height == 0:
            return one
        return pl.concat([one, pieces.join(self.shared, on="e_idx")])


def _oversized(p: pl.DataFrame, busy: pl.Expr, idle_util: pl.Expr, jobs: _JobIndex) -> pl.DataFrame:
    """Inactive seconds of a card while a sibling card of the same job was busy (same minute).

    Per (job, UTC minute): the lowest and the highest busy card. An inactive piece of card g
    counts when another card was busy, that is when either of them is not g (both are g only
    when g alone was busy). One group-by and one join, on a single integer key (job code, minute).
    Returns e_idx, job_id (the job code), over_s, over_j.
    """
    extra = ["counted"] if "counted" in p.columns else []
    jp = jobs.attach(p.select("e_idx", "gpu_id", "ts", "ov_s", "joules", "frac", busy.alias("busy"),
                              idle_util.alias("idle_util"), *extra))
    if jp.height == 0:
        return jp.select("e_idx", "job_id", pl.lit(0.0).alias("over_s"), pl.lit(0.0).alias("over_util_s"),
                         pl.lit(0.0).alias("over_j"))
    minute = pl.col("ts").dt.epoch("us") // 60_000_000
    m0 = jp.select(minute.min()).item()
    # job code x 2^32 + minute since the window's first: one Int64 key.
    jp = jp.with_columns((pl.col("job_id").cast(pl.Int64) * (1 << 32) + (minute - m0)).alias("jm"))
    by_minute = jp.filter(pl.col("busy") > 0).group_by("jm").agg(
        pl.col("gpu_id").min().alias("lo_busy"), pl.col("gpu_id").max().alias("hi_busy")
    )
    # Context pieces (the quarter path's neighbours of raw cells) tell who was busy, never count.
    counted = pl.col("counted") if "counted" in jp.columns else pl.lit(True)
    idle = (
        jp.filter((pl.col("busy") < 1) & counted)
        .join(by_minute, on="jm")
        .filter((pl.col("lo_busy") != pl.col("gpu_id")) | (pl.col("hi_busy") != pl.col("gpu_id")))
    )
    return idle.group_by("e_idx", "job_id").agg(
        (pl.col("ov_s") * (1 - pl.col("busy"))).sum().alias("over_s"),
        (pl.col("ov_s") * pl.col("idle_util")).sum().alias("over_util_s"),
        (pl.col("joules").fill_null(0.0) * pl.col("frac") * (1 - pl.col("busy"))).sum().alias("over_j"),
    )


def empty_oversized() -> pl.DataFrame:
    return pl.DataFrame(schema={"e_idx": pl.Int64, "job_id": pl.String, "over_s": pl.Float64,
                                "over_util_s": pl.Float64, "over_j": pl.Float64, "over_price_j": pl.Float64})


__all__ = ["sample_intervals", "unbelieved", "pieces", "windows", "interval_activity", "TelemetryActivity", "empty_oversized"]
