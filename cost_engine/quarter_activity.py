"""The telemetry stage from the quarter-hour rollup: buckets where they stand in exactly, raw samples elsewhere.

A card's quarter (a "cell") stands in for its raw samples when one tariff part of one ledger
interval holds the whole quarter: the rollup cut its samples at the quarter's edges exactly as
`activity.pieces` cuts them at interval edges, so its sums are that part's sums over the quarter.
The other cells are read raw:

- a cell that a ledger or tariff edge cuts ("dirty");
- a cell with a piece of a sample whose energy counter is not believed (`peak_w` above the
  card's ceiling, `peak_ratio` above the ratio, `low_ratio` below its inverse: power_limits) or
  whose power reading is not (`peak_power_w` above the ceiling): its joules are the raw path's,
  which the rollup cannot know; such a cell is dirty for the jobs' masks too;
- for the oversized-request cause, a job's quarter the bit masks cannot decide: the masks tell,
  per card, the minutes (of the samples' starts) with busy and with inactive pieces; a card's
  inactive time counts whole when every inactive minute has a busy sibling, and not at all when
  none has. Deciding needs the job's cells of the quarter and of its two neighbours free of edges
  (the carried piece of a quarter belongs to a minute of the quarter before); a job's quarter that
  fails either test is read raw for every card of the job, with the cells around it read as
  context (busy siblings, the samples that cross into it) but not counted.

Raw cells are summed by the raw path's own functions over the parts clipped to those cells, so
the two paths add the same pieces (to float rounding: relative 1e-9 is asserted by the tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import polars as pl

from .config import Activity
from .contract import TS
from .quarter_store import Rollup
from .quarters import MAX_GAP_S, Q_US

_BITS = 15  # minutes in a quarter
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# 2**i for a minute i (Polars has no shift operator on expressions).
_POW2 = pl.Series("pow2", [1 << i for i in range(_BITS)], dtype=pl.Int64)
# Counted raw cells per window of the raw path (each brings its neighbours, ~15 samples a cell).
RAW_CELLS_PER_WINDOW = 40_000
# Rollup cells per window of quarters (all cards): a month of a fleet's cells is never in memory.
ROLLUP_CELLS_PER_WINDOW = 500_000
_MASKS = ("bmask", "imask", "cmin", "cbusy", "cidle")
_SUMS = ("covered_s", "active_s", "util_s", "idle_util_s", "joules", "idle_joules", "energy_s")


def _us(t: datetime) -> int:
    return (t - _EPOCH) // (datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=timezone.utc) - _EPOCH)


def usable(rollup: Rollup | None, rule: Activity, start: datetime, end: datetime) -> bool:
    """The rollup can serve this period: it exists and the period's edges fall on quarter hours."""
    return (rollup is not None and rule.max_sample_gap_s <= MAX_GAP_S
            and _us(start) % Q_US == 0 and _us(end) % Q_US == 0)


def sampled_cards(rollup: Rollup, start: datetime, end: datetime, reader=None) -> pl.Series:
    """The card ids with a sample in [start, end) (start need not be aligned; end is). A rollup
    read per window is asked through `reader` (the store's telemetry reader)."""
    a, b = _us(start), _us(end)
    if rollup.cells is None:
        assert reader is not None and rollup.names is not None
        return reader.rollup_sampled(rollup.names, a, b)
    c, names = rollup.coded()
    got = c.filter(
        (pl.col("samples") > 0) & (pl.col("q") * Q_US < b)
        & (((pl.col("q") * Q_US) >= a) | ((pl.col("q") == a // Q_US) & (pl.col("last_us") >= a)))
    )
    # Names are sorted, so sorted indices give sorted ids.
    return names.gather(got.get_column("gpu_id").unique().sort()).rename("gpu_id")


@dataclass
class Quarters:
    """What the rollup path adds to the raw path's lists (per tariff part, card codes)."""

    aggs: list[pl.DataFrame]
    overs: list[pl.DataFrame]
    energy: list[pl.DataFrame]
    resets: list[pl.DataFrame]
    samples: int
    outside: int
    raw_cells: int  # cells read from raw samples (counted)
    cells: int  # cells from the rollup
    undecided: pl.DataFrame  # gpu_id, q: cells a rollup without raw samples could not stand in for
    implausible: list[pl.DataFrame]  # the raw path's rows of samples whose counter was not believed


def run(
    reader,
    rollup: Rollup,
    codes: pl.DataFrame,
    iv_parts: pl.DataFrame,
    jobs: pl.DataFrame | None,
    rule: Activity,
    start: datetime,
    end: datetime,
    known: pl.Series,
    raw_sums,
    max_w: pl.Series | None = None,
    ratio: float | None = None,
) -> Quarters:
    """The telemetry sums per part from the rollup and, for the cells it cannot stand in for, raw samples.

    `iv_parts` (e_idx = part, gpu_id = card code, t0, t1) numbered in (card, time) order; `jobs`
    (e_idx = part, job_id = job code) for the multi-card jobs; `raw_sums(samples, intervals,
    counted)` is the raw path's per-window work (activity.interval_activity's), returning the
    per-part and per-(part, job) frames for the counted pieces, the samples whose counter was not
    believed and the samples' joules per (card, quarter). `max_w` (the ceiling by card code) and
    `ratio`: the cells whose counter is not believed are read raw (power_limits).

    The cells are taken a window of quarters at a time (about ROLLUP_CELLS_PER_WINDOW cells),
    with one quarter either side: what decides a quarter's masks is in its own cells and its
    neighbours' (see _decide), so each window's sums are those of one pass over all cells and
    they just add up, in bounded memory.
    """
    p0, p1 = _us(start), _us(end)
    whole, ids = rollup.coded() if rollup.cells is not None else (None, rollup.names)
    assert ids is not None
    # The rollup's card index -> the engine's card code (null: not a card of the ledger), and
    # whether the card is known: looked up by position, no join over the cells.
    named = pl.DataFrame({"gpu_id": ids})
    gc_of = named.join(codes.select("gpu_id", "gc"), on="gpu_id", how="left", maintain_order="left").get_column("gc")
    is_known = named.select(pl.col("gpu_id").is_in(known.implode())).to_series()
    if whole is not None:
        outside = int(whole.filter(~pl.lit(is_known).gather(pl.col("gpu_id"))).get_column("samples").sum() or 0)
    else:
        outside = reader.rollup_samples(ids.filter(~is_known))

    def cells_in(qa: int, qb: int) -> pl.DataFrame:
        """The cells of the ledger's cards in quarters [qa, qb), gpu_id as the engine's card code."""
        got = (whole.filter((pl.col("q") >= qa) & (pl.col("q") < qb)) if whole is not None
               else reader.rollup_window(ids, qa, qb))
        return got.with_columns(pl.lit(gc_of).gather(pl.col("gpu_id")).alias("gpu_id")).filter(
            pl.col("gpu_id").is_not_null())

    first_q, q0, q1 = (p0 - int(rule.max_sample_gap_s * 1_000_000)) // Q_US, p0 // Q_US, p1 // Q_US
    resets = rollup.resets.join(codes, on="gpu_id").filter(
        (pl.col("t_us") >= first_q * Q_US) & (pl.col("t_us") < p1)
    ).select(pl.col("gc").alias("gpu_id"),
             *[pl.col(c).cast(pl.Datetime("us")).dt.replace_time_zone("UTC").alias(n) for c, n in
               (("t_us", "ts"), ("end_us", "t_end"))])

    parts = iv_parts.select("e_idx", "gpu_id", pl.col("t0").dt.epoch("us").alias("a"),
                            pl.col("t1").dt.epoch("us").alias("b"))
    # Quarters wholly inside one part, as runs [qa, qb) per part; the quarters an edge cuts.
    runs = parts.with_columns((-((-pl.col("a")) // Q_US)).alias("qa"), (pl.col("b") // Q_US).alias("qb")).filter(
        pl.col("qb") > pl.col("qa")).select("gpu_id", pl.col("qa").alias("q"), "qb", "e_idx").sort("gpu_id", "q")
    dirty = pl.concat([
        parts.filter(pl.col("a") % Q_US != 0).select("gpu_id", (pl.col("a") // Q_US).alias("q"), "e_idx"),
        parts.filter(pl.col("b") % Q_US != 0).select("gpu_id", ((pl.col("b") - 1) // Q_US).alias("q"), "e_idx"),
    ]).unique()
    job_cards = pl.DataFrame(schema={"job_id": pl.UInt32, "gpu_id": pl.UInt32})
    if jobs is not None and jobs.height:
        jobs = jobs.select("e_idx", pl.col("job_id").cast(pl.UInt32))
        n_jobs = jobs.group_by("e_idx").agg(pl.len().alias("n"))
        single = jobs.join(n_jobs.filter(pl.col("n") == 1), on="e_idx", how="semi")
        multi = jobs.join(n_jobs.filter(pl.col("n") > 1), on="e_idx", how="semi")
        dirty_jobs = dirty.join(jobs, on="e_idx").select("job_id", "q")
        job_cards = jobs.join(parts.select("e_idx", "gpu_id"), on="e_idx").select("job_id", "gpu_id").unique()
    else:
        jobs = None

    samples, n_raw, n_rolled = 0, 0, 0
    aggs: list[pl.DataFrame] = []
    over: list[pl.DataFrame] = []
    energy: list[pl.DataFrame] = []
    undecided = [dirty.select("gpu_id", "q").clear()]
    bad: list[pl.DataFrame] = []
    ceiling = pl.lit(max_w).gather(pl.col("gpu_id")) if max_w is not None and max_w.len() else pl.lit(float("inf"))
    r = float("inf") if ratio is None else ratio
    # The raw path's tests (power_limits) on the cell's extremes: a cell with any unbelieved
    # piece, or a power reading above the ceiling, is read raw (low_ratio x r < 1: its form there).
    unbelieved = (pl.col("peak_w").gt(ceiling).fill_null(False) | pl.col("peak_ratio").gt(r).fill_null(False)
                  | (pl.col("low_ratio") * r).lt(1.0).fill_null(False) | pl.col("peak_power_w").gt(ceiling).fill_null(False))
    if first_q < q0:  # samples starting before the period that reach into it
        samples += int(cells_in(first_q, q0).get_column("samples").sum() or 0)
    step = max(1, ROLLUP_CELLS_PER_WINDOW // max(1, ids.len()))
    for wa in range(q0, q1, step):
        wb = min(wa + step, q1)
        inner = (pl.col("q") >= wa) & (pl.col("q") < wb)
        c = cells_in(max(wa - 1, q0), min(wb + 1, q1)).with_columns(unbelieved.alias("_bad"))
        if rollup.external:
            # No raw samples to bill those cells by power x time: their energy is unknown.
            c = c.with_columns(pl.when(pl.col("_bad")).then(0.0).otherwise(pl.col(n)).alias(n)
                               for n in ("joules", "idle_joules", "energy_s"))
        mid = c.filter(inner)
        samples += int(mid.get_column("samples").sum() or 0)
        flagged = mid.filter(pl.col("_bad")).select("gpu_id", "q")
        energy.append(mid.filter(pl.col("start_j").is_not_null() & ~pl.col("_bad")).select(
            "gpu_id", (pl.col("q") * Q_US).cast(pl.Datetime("us")).dt.replace_time_zone("UTC").alias("bucket"),
            pl.col("start_j").alias("joules")))
        del mid
        # Only what the parts need from here on (every copy of the cells counts).
        c = c.select("gpu_id", "q", *_SUMS, "idle_s", *_MASKS, "_bad").sort("gpu_id", "q")
        exact = c.join_asof(runs, on="q", by="gpu_id", strategy="backward", check_sortedness=False).filter(
            pl.col("e_idx").is_not_null() & (pl.col("q") < pl.col("qb"))).drop("qb")
        if not rollup.external:
            c = c.clear()  # only a rollup without raw samples spreads the other cells from it
        # Cells whose counter is not believed count as cut (also those either side of the window,
        # for the jobs' mask decisions).
        w_dirty = exact.filter(pl.col("_bad")).select("gpu_id", "q", "e_idx")

        raw = pl.concat([dirty.filter(inner).select("gpu_id", "q"), flagged])
        raw_jq = pl.DataFrame(schema={"job_id": pl.UInt32, "q": pl.Int64})
        decided = None
        if jobs is not None:
            # Job cells the rollup may stand in for (narrow: the masks and the inactive sums).
            held = exact.select("gpu_id", "q", "e_idx", *_MASKS, "idle_s", "idle_util_s", "idle_joules").join(
                single, on="e_idx")
            # A job's quarter is dirty when one of its cards is cut inside it, or when a card's
            # quarter belongs to several multi-card jobs at once.
            jq_dirty = pl.concat([
                dirty_jobs.filter((pl.col("q") >= wa - 1) & (pl.col("q") <= wb)),
                w_dirty.join(jobs, on="e_idx").select("job_id", "q"),
                exact.select("e_idx", "q").join(multi, on="e_idx").select("job_id", "q"),
            ]).unique()
            # Deciding a quarter reads the masks of its neighbours too.
            jq_bad = pl.concat([jq_dirty.with_columns(pl.col("q") + d) for d in (-1, 0, 1)]).unique()
            # The cells either side of the window only inform its quarters' decisions.
            decided, undecided_jq = _decide(held, jq_bad)
            decided, held = decided.filter(inner), held.filter(inner)
            raw_jq = pl.concat([jq_dirty.filter(inner), held.join(jq_bad, on=["job_id", "q"], how="semi")
                                .select("job_id", "q"), undecided_jq.filter(inner)]).unique()
            raw = pl.concat([raw, held.join(raw_jq, on=["job_id", "q"], how="semi").select("gpu_id", "q")])
            del held
        raw = raw.unique()
        # What the rollup stands in for: exact cells of the window not read raw.
        from_rollup = exact.filter(inner).join(raw, on=["gpu_id", "q"], how="anti")
        del exact
        aggs.append(from_rollup.group_by("e_idx").agg(pl.col(_SUMS).sum()))
        n_rolled += from_rollup.height
        n_raw += raw.height
        del from_rollup
        if decided is not None:
            keep = decided.join(raw, on=["gpu_id", "q"], how="anti")
            over.append(keep.group_by("e_idx", "job_id").agg(
                pl.col("idle_s").sum().alias("over_s"), pl.col("idle_util_s").sum().alias("over_util_s"),
                pl.col("idle_joules").fill_null(0.0).sum().alias("over_j")))
        _raw_windows(reader, rollup, c, raw, raw_jq, job_cards, parts, codes, raw_sums, aggs, over, undecided,
                     flagged, energy, bad)
    undecided_f = pl.concat(undecided)
    names = codes.select(pl.col("gc").alias("gpu_id"), pl.col("gpu_id").alias("name"))
    undecided_f = undecided_f.join(names, on="gpu_id").select(pl.col("name").alias("gpu_id"), "q").sort("gpu_id", "q")
    return Quarters(aggs, over, energy, [resets], samples, outside, n_raw, n_rolled, undecided_f, bad)


def _raw_windows(reader, rollup, c, raw, raw_jq, job_cards, parts, codes, raw_sums, aggs, over, undecided,
                 flagged, energy, bad) -> None:
    """The raw cells in windows of quarters (about RAW_CELLS_PER_WINDOW counted cells each): a
    cell needs only its neighbours, so the windows' sums just add up, in bounded memory.
    Appends to aggs, over, undecided, and for the `flagged` cells (counter not believed) to
    energy (their samples' joules per quarter, in place of the rollup's) and bad."""
    qs = raw.get_column("q").sort()
    edges = [qs[i] for i in range(0, qs.len(), RAW_CELLS_PER_WINDOW)] + ([qs[-1] + 1] if qs.len() else [])
    for qa, qb in zip(edges, edges[1:]):
        r_w = raw.filter((pl.col("q") >= qa) & (pl.col("q") < qb))
        use, clipped = _clip(r_w, raw_jq.filter((pl.col("q") >= qa) & (pl.col("q") < qb)), job_cards, parts)
        if rollup.external:
            # No raw samples here: spread those cells by time and name them in the gaps.
            aggs += _prorated(clipped, c)
            undecided.append(pl.concat([clipped.filter(pl.col("counted")).select("gpu_id", "q"),
                                        flagged.filter((pl.col("q") >= qa) & (pl.col("q") < qb))]).unique())
        elif use.height:
            a2, o2, b2, e2 = _raw_cells(reader, use, clipped, codes, raw_sums)
            aggs += a2
            over += o2
            mine = flagged.filter((pl.col("q") >= qa) & (pl.col("q") < qb))
            if mine.height:
                # The rows of samples with a piece in a flagged cell: a sample of a cell read only
                # for its neighbours' successors may lack its own successor here.
                bad += [pl.concat([b.join(mine, left_on=["gpu_id", q], right_on=["gpu_id", "q"], how="semi")
                                   for q in (pl.col("ts").dt.epoch("us") // Q_US,
                                             (pl.col("t_end").dt.epoch("us") - 1) // Q_US)]) for b in b2]
                energy += [e.join(mine, left_on=["gpu_id", (pl.col("bucket").dt.epoch("us") // Q_US)],
                                  right_on=["gpu_id", "q"], how="semi") for e in e2]


def _bit(i: pl.Expr) -> pl.Expr:
    """2**i for minute numbers 0..14."""
    return pl.lit(_POW2).gather(i)


def _decide(held: pl.DataFrame, jq_bad: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Job cells whose inactive time the masks decide: (those counted whole, undecided job quarters).

    Per job, card and quarter, B = the minutes of the quarter with a busy piece of that card in
    the job: its own busy mask (a busy sample that crosses into the next quarter starts in this
    one, so its carried piece there marks no other minute). A minute has a busy sibling for card
    g when two cards are busy then, or one that is not g. `held` has one row per card and quarter
    (a quarter lies in one part, of one job); sorted by (job, card, quarter), a card's previous
    quarter is its neighbour in the frame, so no join is needed to find it.
    """
    if held.height == 0:
        return held.select("gpu_id", "q", "e_idx", "job_id", "idle_s", "idle_util_s", "idle_joules"), jq_bad.clear()
    q0 = held.get_column("q").min() - 1
    h = held.sort("job_id", "gpu_id", "q")
    job, card, q = pl.col("job_id"), pl.col("gpu_id"), pl.col("q")
    carried_busy = pl.col("cbusy") & pl.col("cmin").is_not_null()
    carry_bit = pl.when(carried_busy).then(_bit((pl.col("cmin") + _BITS).fill_null(0))).otherwise(0)
    same_prev = (job.shift(1) == job) & (card.shift(1) == card) & (q.shift(1) == q - 1)
    # One Int64 key per (job, quarter): job code x 2^24 + quarters since the first.
    jq = job.cast(pl.Int64) * (1 << 24) + (q - q0)
    h = h.with_columns(
        pl.col("bmask").cast(pl.Int64).alias("own"),  # the store keeps masks narrow (Int16)
        same_prev.fill_null(False).alias("same_prev"),
        carry_bit.alias("carry_bit"),
        jq.alias("jq"),
    )
    # A card busy in a carried piece of a quarter whose previous quarter it does not hold.
    orphan = h.filter(~pl.col("same_prev") & (pl.col("carry_bit") > 0)).select(
        (pl.col("jq") - 1).alias("jq"), pl.col("carry_bit").alias("own"))
    counts = pl.concat([h.select("jq", "own"), orphan]).group_by("jq").agg(
        [((pl.col("own") // (1 << i)) % 2).sum().alias(f"n{i}") for i in range(_BITS)])
    counts = counts.select(
        "jq",
        pl.sum_horizontal([(pl.col(f"n{i}") >= 2).cast(pl.Int64) * (1 << i) for i in range(_BITS)]).alias("multi"),
        pl.sum_horizontal([(pl.col(f"n{i}") >= 1).cast(pl.Int64) * (1 << i) for i in range(_BITS)]).alias("any"),
    )
    bad = jq_bad.select((pl.col("job_id").cast(pl.Int64) * (1 << 24) + (pl.col("q") - q0)).alias("jq"))
    h = h.with_columns(
        pl.when(pl.col("same_prev")).then(pl.col("own").shift(1)).otherwise(pl.col("carry_bit")).alias("own_prev")
    ).join(bad, on="jq", how="anti")
    cells = (
        h.join(counts, on="jq", how="left")
        .join(counts.select((pl.col("jq") + 1).alias("jq"), pl.col("multi").alias("multi_prev"),
                            pl.col("any").alias("any_prev")), on="jq", how="left")
        .with_columns(pl.col("multi", "any", "multi_prev", "any_prev").fill_null(0))
    )
    cover = pl.col("multi") | (pl.col("any") & ~pl.col("own"))
    cover_prev = pl.col("multi_prev") | (pl.col("any_prev") & ~pl.col("own_prev"))
    carried = pl.col("cidle") & pl.col("cmin").is_not_null()
    c_bit = ((cover_prev // _bit((pl.col("cmin") + _BITS).fill_null(0))) % 2) == 1
    cells = cells.with_columns(
        ((pl.col("imask") & ~cover) == 0).alias("all_in"), ((pl.col("imask") & cover) == 0).alias("none_in"),
        carried.alias("carried"), c_bit.alias("c_bit"),
    ).with_columns(
        (pl.col("all_in") & (~pl.col("carried") | pl.col("c_bit"))).alias("all"),
        (pl.col("none_in") & (~pl.col("carried") | ~pl.col("c_bit"))).alias("none"),
    )
    counted = cells.filter(pl.col("all") & ~pl.col("none")).select(
        "gpu_id", "q", "e_idx", "job_id", "idle_s", "idle_util_s", "idle_joules")
    undecided = cells.filter(~pl.col("all") & ~pl.col("none")).select("job_id", "q").unique()
    return counted, undecided


def _clip(raw, raw_jq, job_cards, parts) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(cells to read, parts clipped to them). The cells are the raw ones (counted) and those
    around them (context, whether or not a part meets them: a sample starting before a period
    crosses into it); the clipped parts: e_idx (new, in (card, time) order), gpu_id, q, part,
    counted, t0, t1."""
    context = pl.concat([
        raw.with_columns(pl.col("q") + d) for d in (-1, 1)
    ] + [raw_jq.join(job_cards, on="job_id").select("gpu_id", (pl.col("q") + d).alias("q")) for d in (-1, 0, 1)]
    ).unique().join(raw, on=["gpu_id", "q"], how="anti")
    use = pl.concat([raw.with_columns(pl.lit(True).alias("counted")),
                     context.with_columns(pl.lit(False).alias("counted"))]).sort("gpu_id", "q")
    # A part meets a quarter from the one holding the quarter's start to the one holding its last
    # instant (parts are numbered in (card, time) order).
    ps = parts.sort("gpu_id", "a")
    lo = use.with_columns((pl.col("q") * Q_US).alias("qs")).join_asof(
        ps.select("gpu_id", pl.col("a").alias("qs"), pl.col("e_idx").alias("e0")), on="qs", by="gpu_id",
        strategy="backward", check_sortedness=False)
    hi = lo.with_columns(((pl.col("q") + 1) * Q_US - 1).alias("ql")).sort("gpu_id", "ql").join_asof(
        ps.select("gpu_id", pl.col("a").alias("ql"), pl.col("e_idx").alias("e1")), on="ql", by="gpu_id",
        strategy="backward", check_sortedness=False)
    first = ps.group_by("gpu_id").agg(pl.col("e_idx").min().alias("emin"))
    return use.select("gpu_id", "q"), (
        hi.drop_nulls("e1").join(first, on="gpu_id").with_columns(pl.coalesce("e0", "emin").alias("e0"))
        .with_columns(pl.int_ranges("e0", pl.col("e1") + 1).alias("part")).explode("part")
        .join(ps.select(pl.col("e_idx").alias("part"), "a", "b"), on="part")
        .with_columns(pl.max_horizontal("a", "qs").alias("t0"), pl.min_horizontal("b", pl.col("ql") + 1).alias("t1"))
        .filter(pl.col("t1") > pl.col("t0"))
        .sort("gpu_id", "t0")
        .select("gpu_id", "q", "part", "counted", "t0", "t1")
        .with_row_index("e_idx").with_columns(pl.col("e_idx").cast(pl.Int64))
    )


def _raw_cells(reader, use, clipped, codes, raw_sums) -> tuple[list[pl.DataFrame], list[pl.DataFrame]]:
    """Per-part sums of the raw cells from their samples (context pieces inform, never count)."""
    # Samples of the cells and of the quarter after each (the successors of their last samples).
    read = pl.concat([use, use.with_columns(pl.col("q") + 1)]).unique()
    names = codes.select(pl.col("gc").alias("gpu_id"), pl.col("gpu_id").alias("name"))
    want = read.join(names, on="gpu_id").select(pl.col("name").alias("gpu_id"), "q")
    tele = reader.quarters(want, codes).sort("gpu_id", "ts")
    ts = [pl.col(c).cast(pl.Datetime("us")).dt.replace_time_zone("UTC").cast(TS) for c in ("t0", "t1")]
    return raw_sums(tele, clipped.select("e_idx", "gpu_id", "part", "counted", *ts))


def _prorated(clipped: pl.DataFrame, cells: pl.DataFrame) -> list[pl.DataFrame]:
    """Without raw samples (a rollup made elsewhere): a raw cell's sums spread over its parts by time."""
    share = (pl.col("t1") - pl.col("t0")).cast(pl.Float64) / Q_US
    got = clipped.filter(pl.col("counted")).join(cells, on=["gpu_id", "q"])
    return [got.group_by(pl.col("part").alias("e_idx")).agg((pl.col(c) * share).sum() for c in _SUMS)]


__all__ = ["usable", "sampled_cards", "run", "Quarters"]
