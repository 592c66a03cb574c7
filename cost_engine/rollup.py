"""Telemetry rollup: raw samples -> one row per card per fixed time bucket, in one SQL definition.

This is the stage that grows with raw telemetry (docs/scale.md). It runs on DuckDB by default
(`rollup_duckdb` into a frame, `rollup_duckdb_to_parquet` into files without passing through
Python memory) and on Apache Spark (`rollup_spark`) from the same SQL text, `ROLLUP_SQL`,
so a fleet too big for one machine can be rolled up on a cluster and the (much smaller)
rollup handed to the engine. The engine does not read it yet.

Input relation `telemetry_us(gpu_id, t_us, util_pct, power_w, energy_j)`, `t_us` the sample
time in epoch microseconds. That conversion (and back) is the only dialect-specific step and
lives in the two adapters below: DuckDB `epoch_us(ts)`, Spark `unix_micros(ts)`.

Sample semantics are the engine's (docs/engine.md, cost_engine/activity.py): a sample stands
for `[ts, next ts of the card)`, capped at `max_gap_s`; its energy is the counter delta to
the next sample when the interval is not capped and the delta is >= 0, otherwise (counter
reset, capped gap, no counter) `power_w x seconds`; unknown without either. A sample that
crosses a bucket edge is cut there: time, util-seconds and power-joules go to each bucket by
overlap, the counter energy pro rata to the overlap.

Output, one row per (gpu_id, bucket_start), buckets `[k * width, (k + 1) * width)` aligned to
the Unix epoch:

    samples          samples whose ts falls in the bucket
    covered_s        seconds covered by samples
    util_s           sum of util_pct x seconds (mean util = util_s / covered_s)
    mean_util_pct    time-weighted mean util over covered_s
    max_util_pct     highest util_pct of a sample overlapping the bucket
    active_s         seconds of samples with util_pct >= threshold_pct (the engine's
                     `threshold` activity rule, applied per sample before rolling up)
    power_j          sum of power_w x seconds (null when no sample had power)
    joules           energy by the engine's rule (counter deltas, power x time on resets)
    energy_s         seconds whose energy is known
    energy_first_j   energy counter of the first sample in the bucket that has one
    energy_last_j    energy counter of the last sample in the bucket that has one
    counter_resets   samples in the bucket whose next counter reading went down

Parameters (DuckDB binds them; Spark gets them as literals after an int()/float() cast,
never as text): `$width_us` bucket width, `$max_gap_us` sample cap, both in microseconds;
`$threshold` the activity threshold in percent.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import polars as pl

US = 1_000_000
# A sample is cut into at most this many bucket pieces (see _OFFSETS): max_gap_s <= 63 x width_s.
MAX_PIECES = 64

# Parameters, typed explicitly (DuckDB would otherwise infer INTEGER from the context).
_W = "CAST($width_us AS BIGINT)"
_GAP = "CAST($max_gap_us AS BIGINT)"
_THR = "CAST($threshold AS DOUBLE)"
# Offsets 0..63: the buckets a sample that crosses bucket edges is spread over.
_OFFSETS = "(VALUES " + ", ".join(f"({k})" for k in range(MAX_PIECES)) + ") AS o(k)"

# Each sample's interval [t_us, end_us) and counter delta, by the engine's rule (also the
# start of quarters.py's rollup, which the report reads).
INTERVALS_SQL = f"""
WITH s AS (
    SELECT gpu_id, t_us, util_pct, power_w, energy_j,
           LEAD(t_us) OVER (PARTITION BY gpu_id ORDER BY t_us) AS next_us,
           LEAD(energy_j) OVER (PARTITION BY gpu_id ORDER BY t_us) AS next_j,
           LEAD(power_w) OVER (PARTITION BY gpu_id ORDER BY t_us) AS next_p
    FROM telemetry_us
),
iv AS (
    SELECT gpu_id, t_us, util_pct, power_w, energy_j,
           CASE WHEN next_us IS NOT NULL AND next_us <= t_us + {_GAP} THEN next_us
                ELSE t_us + {_GAP} END AS end_us,
           CASE WHEN next_us IS NOT NULL AND next_us <= t_us + {_GAP} THEN next_j - energy_j END AS delta_j,
           CASE WHEN next_us IS NOT NULL AND next_us <= t_us + {_GAP} THEN next_p END AS next_p
    FROM s
)"""

ROLLUP_SQL = INTERVALS_SQL + f""",
smp AS (
    SELECT gpu_id, t_us, end_us, util_pct, power_w, energy_j,
           CAST(end_us - t_us AS DOUBLE) / 1e6 AS dt_s,
           CASE WHEN delta_j >= 0 THEN delta_j
                WHEN power_w IS NOT NULL THEN power_w * (CAST(end_us - t_us AS DOUBLE) / 1e6) END AS joules,
           CASE WHEN delta_j < 0 THEN 1 ELSE 0 END AS reset,
           t_us - (t_us % {_W}) AS b0,
           (end_us - 1) - ((end_us - 1) % {_W}) AS b1
    FROM iv
    WHERE end_us > t_us
),
pieces AS (
    SELECT gpu_id, b0 AS bucket_us, 1 AS first_piece, CAST(end_us - t_us AS DOUBLE) / 1e6 AS ov_s,
           t_us, dt_s, util_pct, power_w, energy_j, joules, reset
    FROM smp
    WHERE b1 = b0
    UNION ALL
    SELECT gpu_id, b0 + o.k * {_W} AS bucket_us, CASE WHEN o.k = 0 THEN 1 ELSE 0 END AS first_piece,
           CAST(LEAST(end_us, b0 + (o.k + 1) * {_W}) - GREATEST(t_us, b0 + o.k * {_W}) AS DOUBLE)
               / 1e6 AS ov_s,
           t_us, dt_s, util_pct, power_w, energy_j, joules, reset
    FROM smp CROSS JOIN {_OFFSETS}
    WHERE smp.b1 > smp.b0 AND smp.b0 + o.k * {_W} <= smp.b1
)
SELECT gpu_id,
       bucket_us,
       CAST(SUM(first_piece) AS BIGINT) AS samples,
       SUM(ov_s) AS covered_s,
       SUM(util_pct * ov_s) AS util_s,
       SUM(util_pct * ov_s) / SUM(ov_s) AS mean_util_pct,
       MAX(util_pct) AS max_util_pct,
       SUM(CASE WHEN util_pct >= {_THR} THEN ov_s ELSE 0.0 END) AS active_s,
       SUM(power_w * ov_s) AS power_j,
       SUM(joules * ov_s / dt_s) AS joules,
       SUM(CASE WHEN joules IS NOT NULL THEN ov_s ELSE 0.0 END) AS energy_s,
       MIN_BY(energy_j, CASE WHEN first_piece = 1 AND energy_j IS NOT NULL THEN t_us END) AS energy_first_j,
       MAX_BY(energy_j, CASE WHEN first_piece = 1 AND energy_j IS NOT NULL THEN t_us END) AS energy_last_j,
       CAST(SUM(CASE WHEN first_piece = 1 THEN reset ELSE 0 END) AS BIGINT) AS counter_resets
FROM pieces
GROUP BY gpu_id, bucket_us
"""

ROLLUP_SCHEMA = pl.Schema(
    {
        "gpu_id": pl.String,
        "bucket_start": pl.Datetime("us", "UTC"),
        "samples": pl.Int64,
        "covered_s": pl.Float64,
        "util_s": pl.Float64,
        "mean_util_pct": pl.Float64,
        "max_util_pct": pl.Float64,
        "active_s": pl.Float64,
        "power_j": pl.Float64,
        "joules": pl.Float64,
        "energy_s": pl.Float64,
        "energy_first_j": pl.Float64,
        "energy_last_j": pl.Float64,
        "counter_resets": pl.Int64,
    }
)


def parameters(width_s: float, max_gap_s: float = 300.0, threshold_pct: float = 5.0) -> dict[str, Any]:
    """Checked SQL parameters: whole microseconds for the widths, a finite float threshold."""
    width_us = int(round(float(width_s) * US))
    gap_us = int(round(float(max_gap_s) * US))
    threshold = float(threshold_pct)
    if width_us <= 0:
        raise ValueError(f"bucket width must be positive, got {width_s!r}")
    if gap_us <= 0:
        raise ValueError(f"max_gap_s must be positive, got {max_gap_s!r}")
    if gap_us > (MAX_PIECES - 1) * width_us:
        raise ValueError(f"max_gap_s {max_gap_s} is more than {MAX_PIECES - 1} buckets of {width_s} s")
    if not math.isfinite(threshold):
        raise ValueError(f"threshold_pct must be a finite number, got {threshold_pct!r}")
    return {"width_us": width_us, "max_gap_us": gap_us, "threshold": threshold}


def spark_sql(width_s: float, max_gap_s: float = 300.0, threshold_pct: float = 5.0) -> str:
    """ROLLUP_SQL with its parameters written in as numeric literals (int()/float() values only)."""
    p = parameters(width_s, max_gap_s, threshold_pct)
    sql = ROLLUP_SQL
    # Longest names first so `$width_us` never clips another name; values are numbers, not text.
    for name in sorted(p, key=len, reverse=True):
        v = p[name]
        literal = str(int(v)) if isinstance(v, int) else repr(float(v))
        sql = sql.replace("$" + name, literal)
    assert "$" not in sql
    return sql


def _finish(frame: pl.DataFrame) -> pl.DataFrame:
    """Engine output (bucket_us as epoch microseconds) -> ROLLUP_SCHEMA, sorted by card and bucket."""
    if frame.height == 0:
        return pl.DataFrame(schema=ROLLUP_SCHEMA)
    out = frame.with_columns(
        pl.from_epoch(pl.col("bucket_us").cast(pl.Int64), time_unit="us").dt.replace_time_zone("UTC").alias("bucket_start")
    )
    return out.select([pl.col(n).cast(d) for n, d in ROLLUP_SCHEMA.items()]).sort("gpu_id", "bucket_start")


def _duckdb_runs(source: str | Path | pl.DataFrame, width_s: float, max_gap_s: float, threshold_pct: float,
                 con: Any, card_chunks: int):
    """Context manager yielding (connection, [(sql, params) per card slice]) for the DuckDB adapter."""
    import contextlib

    import duckdb

    if int(card_chunks) < 1:
        raise ValueError(f"card_chunks must be >= 1, got {card_chunks!r}")
    chunks = int(card_chunks)
    params = parameters(width_s, max_gap_s, threshold_pct)

    @contextlib.contextmanager
    def runs():
        own = con is None
        c = duckdb.connect() if own else con
        registered = None
        try:
            if isinstance(source, pl.DataFrame):
                registered = "_rollup_telemetry_in"
                c.register(registered, source.select("ts", "gpu_id", "util_pct", "power_w", "energy_j").to_arrow())
                src, p = registered, params
            else:
                src, p = "read_parquet($path)", {**params, "path": str(source)}
            out = []
            for i in range(chunks):
                where = "" if chunks == 1 else f" WHERE hash(gpu_id) % {chunks} = {i}"  # ints, not user text
                sql = (
                    "WITH telemetry_us AS (SELECT gpu_id, epoch_us(ts) AS t_us, CAST(util_pct AS DOUBLE) AS util_pct, "
                    "CAST(power_w AS DOUBLE) AS power_w, CAST(energy_j AS DOUBLE) AS energy_j "
                    f"FROM {src}{where}),\n" + ROLLUP_SQL.strip().removeprefix("WITH")
                )
                out.append((sql, p))
            yield c, out
        finally:
            if registered is not None:
                c.unregister(registered)
            if own:
                c.close()

    return runs()


def rollup_duckdb(
    source: str | Path | pl.DataFrame,
    width_s: float,
    *,
    max_gap_s: float = 300.0,
    threshold_pct: float = 5.0,
    con: Any = None,
    card_chunks: int = 1,
) -> pl.DataFrame:
    """The rollup on DuckDB, from a telemetry Parquet file (path or glob) or a telemetry frame.

    The frame (or file) needs ts (timestamp with time zone), gpu_id, util_pct, power_w,
    energy_j; other columns are ignored. `con` reuses a DuckDB connection (default: a new
    in-memory one). `card_chunks` > 1 runs the rollup once per slice of the cards (by a
    hash of gpu_id): the per-card window then holds 1/card_chunks of the telemetry at a
    time, which bounds memory at the cost of one more scan of the source per slice. Cards
    never span slices, so the result is the same.
    """
    with _duckdb_runs(source, width_s, max_gap_s, threshold_pct, con, card_chunks) as (c, runs):
        parts = []
        for sql, params in runs:
            got = pl.from_arrow(c.sql(sql, params=params).to_arrow_table())
            assert isinstance(got, pl.DataFrame)
            parts.append(got)
    return _finish(pl.concat(parts) if len(parts) > 1 else parts[0])


def rollup_duckdb_to_parquet(
    source: str | Path | pl.DataFrame,
    out_dir: str | Path,
    width_s: float,
    *,
    max_gap_s: float = 300.0,
    threshold_pct: float = 5.0,
    con: Any = None,
    card_chunks: int = 8,
) -> Path:
    """The rollup written by DuckDB straight to Parquet (`out_dir/part-<i>.parquet`, ROLLUP_SCHEMA).

    Nothing passes through Python memory: with card slices the process stays small whatever
    the telemetry size (about 0.6 GB for 16 M samples). Read it back with
    `pl.read_parquet(out_dir / "*.parquet")`.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("part-*.parquet"):
        old.unlink()
    cols = ", ".join(
        "make_timestamp(bucket_us) AT TIME ZONE 'UTC' AS bucket_start" if n == "bucket_start" else n
        for n in ROLLUP_SCHEMA
    )
    with _duckdb_runs(source, width_s, max_gap_s, threshold_pct, con, card_chunks) as (c, runs):
        for i, (sql, params) in enumerate(runs):
            target = str(out / f"part-{i:04d}.parquet").replace("'", "''")
            c.execute(
                f"COPY (SELECT {cols} FROM ({sql}) ORDER BY gpu_id, bucket_us) TO '{target}' (FORMAT parquet)",
                params,
            )
    return out


def rollup_spark(
    spark: Any,
    parquet_path: str | Path,
    width_s: float,
    *,
    max_gap_s: float = 300.0,
    threshold_pct: float = 5.0,
) -> pl.DataFrame:
    """The same rollup on Apache Spark (pyspark SparkSession), from telemetry Parquet.

    The result is collected to the driver as a polars frame; on a real fleet write it to
    Parquet from Spark instead (`spark.sql(spark_sql(...)).write.parquet(...)`).
    """
    sql = spark_sql(width_s, max_gap_s, threshold_pct)
    spark.read.parquet(str(parquet_path)).selectExpr(
        "gpu_id",
        "unix_micros(ts) AS t_us",
        "CAST(util_pct AS DOUBLE) AS util_pct",
        "CAST(power_w AS DOUBLE) AS power_w",
        "CAST(energy_j AS DOUBLE) AS energy_j",
    ).createOrReplaceTempView("telemetry_us")
    result = spark.sql(sql)
    got = pl.from_arrow(result.toArrow())
    assert isinstance(got, pl.DataFrame)
    return _finish(got)


__all__ = ["ROLLUP_SQL", "ROLLUP_SCHEMA", "parameters", "spark_sql", "rollup_duckdb", "rollup_duckdb_to_parquet",
           "rollup_spark"]
