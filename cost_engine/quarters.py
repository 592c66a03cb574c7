"""The exact quarter-hour rollup the engine reads instead of raw samples: one SQL text, kept in the store.

One row per card and UTC quarter hour (`q` = epoch seconds // 900) with the sums the telemetry
stage keeps per ledger interval, for one activity rule (mode, threshold, gap cap). A sample
stands for `[ts, next ts)` capped at the gap, exactly as in `activity.sample_intervals`; one
that crosses a quarter edge is cut there like a sample at a ledger edge (time, util and the
activity weight by overlap, its joules pro rata to the overlap), so where no ledger or tariff
edge falls inside a quarter, the quarter's row *is* the engine's sum over it. The gap cap is at
most 900 s here, so a sample reaches at most the next quarter: each row has at most one
"carried" piece (of the sample that started in the quarter before).

Per row, besides the sums: `bmask`/`imask`, bit i set when a piece of a sample starting in
minute i of the quarter was busy / inactive (`busy > 0` / `busy < 1`, the oversized-request
cause's test), and for the carried piece its start minute relative to the quarter (`cmin`,
-15..-1) and whether it was busy (`cbusy`) or inactive (`cidle`). `samples`, `first_us`,
`last_us` and `start_j` describe the samples *starting* in the quarter (the sample count, the
cards with samples in a window, the power profile). Counter resets are kept apart, one row
each (`RESETS_SQL`). `peak_w` and `peak_ratio`: the highest power a counter delta of a piece
in the quarter implies, and its highest ratio to the larger power reading at its sample's two
ends; `low_ratio`: the lowest ratio to the smaller reading (only where that reading is above
power_limits.LOW_FLOOR_W and the sample lasts at least LOW_MIN_S); `peak_power_w`: the highest
power reading at a piece's sample's two ends. The engine reads a quarter whose counter or power
reading it does not believe (power_limits) from raw samples, since the rule for that (the
card's ceiling, the ratio) is the report's, not the rollup's.

Input relation `telemetry_us(gpu_id, t_us, util_pct, power_w, energy_j)` as in `rollup.py`; the
SQL uses only what DuckDB and Spark SQL share (LEAD, CASE, LEAST, POWER, BIT_OR, BOOL_OR).
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from .config import Activity
from .power_limits import LOW_FLOOR_W, LOW_MIN_S
from .rollup import INTERVALS_SQL

Q_S = 900
Q_US = Q_S * 1_000_000
MIN_US = 60_000_000
# A sample reaches at most the next quarter only when it lasts at most a quarter.
MAX_GAP_S = float(Q_S)

CELL_SCHEMA = pl.Schema(
    {
        "gpu_id": pl.String,
        "q": pl.Int64,
        "samples": pl.Int64,
        "first_us": pl.Int64,
        "last_us": pl.Int64,
        "covered_s": pl.Float64,
        "active_s": pl.Float64,
        "idle_s": pl.Float64,
        "util_s": pl.Float64,
        "idle_util_s": pl.Float64,
        "joules": pl.Float64,
        "idle_joules": pl.Float64,
        "energy_s": pl.Float64,
        "start_j": pl.Float64,
        "bmask": pl.Int64,
        "imask": pl.Int64,
        "cmin": pl.Int64,
        "cbusy": pl.Boolean,
        "cidle": pl.Boolean,
        "peak_w": pl.Float64,
        "peak_ratio": pl.Float64,
        "low_ratio": pl.Float64,
        "peak_power_w": pl.Float64,
    }
)
RESET_SCHEMA = pl.Schema({"gpu_id": pl.String, "t_us": pl.Int64, "end_us": pl.Int64})

_Q = str(Q_US)
_M = str(MIN_US)
# The low-side counter test's floors (power_limits), as literals: the cells depend on them.
_LOW_US = str(int(LOW_MIN_S * 1_000_000))
_LOW_W = repr(float(LOW_FLOOR_W))

_SAMPLES = INTERVALS_SQL + f""",
smp AS (
    SELECT gpu_id, t_us, end_us, util_pct,
           CAST(end_us - t_us AS DOUBLE) / 1e6 AS dt_s,
           CASE WHEN delta_j >= 0 THEN delta_j
                WHEN power_w IS NOT NULL THEN power_w * (CAST(end_us - t_us AS DOUBLE) / 1e6) END AS joules,
           CASE WHEN delta_j < 0 THEN 1 ELSE 0 END AS reset,
           CASE WHEN delta_j >= 0 AND end_us > t_us THEN delta_j / (CAST(end_us - t_us AS DOUBLE) / 1e6) END AS cw,
           CASE WHEN delta_j >= 0 AND end_us > t_us AND GREATEST(power_w, next_p) > 0
                THEN delta_j / (CAST(end_us - t_us AS DOUBLE) / 1e6) / GREATEST(power_w, next_p) END AS cr,
           CASE WHEN delta_j >= 0 AND end_us - t_us >= {_LOW_US} AND LEAST(power_w, next_p) > {_LOW_W}
                THEN delta_j / (CAST(end_us - t_us AS DOUBLE) / 1e6) / LEAST(power_w, next_p) END AS lr,
           GREATEST(power_w, next_p) AS pr,
           $busy AS busy,
           $idle_util AS idle_util,
           t_us - (t_us % {_Q}) AS q0,
           t_us - (t_us % {_M}) AS m0
    FROM iv
)"""

# From the samples (`smp`, as _SAMPLES defines it) to one row per card and quarter.
CELLS_TAIL = f""",
pieces AS (
    SELECT gpu_id, q0 AS q_us, 1 AS first_piece, t_us, m0, util_pct, busy, idle_util, joules, reset, dt_s, cw, cr, lr, pr,
           CAST(LEAST(end_us, q0 + {_Q}) - t_us AS DOUBLE) / 1e6 AS ov_s
    FROM smp
    UNION ALL
    SELECT gpu_id, q0 + {_Q} AS q_us, 0 AS first_piece, t_us, m0, util_pct, busy, idle_util, joules, reset, dt_s, cw, cr, lr, pr,
           CAST(end_us - (q0 + {_Q}) AS DOUBLE) / 1e6 AS ov_s
    FROM smp
    WHERE end_us > q0 + {_Q}
),
marked AS (
    SELECT *, CAST((m0 - q_us) / {_M} AS BIGINT) AS moff FROM pieces
)
SELECT gpu_id,
       q_us,
       CAST(SUM(first_piece) AS BIGINT) AS samples,
       MIN(CASE WHEN first_piece = 1 THEN t_us END) AS first_us,
       MAX(CASE WHEN first_piece = 1 THEN t_us END) AS last_us,
       SUM(ov_s) AS covered_s,
       SUM(ov_s * busy) AS active_s,
       SUM(ov_s * (1.0 - busy)) AS idle_s,
       SUM(ov_s * util_pct) AS util_s,
       SUM(ov_s * idle_util) AS idle_util_s,
       SUM(joules * (ov_s / dt_s)) AS joules,
       SUM(joules * (ov_s / dt_s) * (1.0 - busy)) AS idle_joules,
       SUM(CASE WHEN joules IS NOT NULL THEN ov_s ELSE 0.0 END) AS energy_s,
       SUM(CASE WHEN first_piece = 1 THEN joules END) AS start_j,
       BIT_OR(CASE WHEN first_piece = 1 AND busy > 0 THEN CAST(POWER(2, moff) AS BIGINT) ELSE CAST(0 AS BIGINT) END)
           AS bmask,
       BIT_OR(CASE WHEN first_piece = 1 AND busy < 1 THEN CAST(POWER(2, moff) AS BIGINT) ELSE CAST(0 AS BIGINT) END)
           AS imask,
       MIN(CASE WHEN first_piece = 0 THEN moff END) AS cmin,
       COALESCE(BOOL_OR(first_piece = 0 AND busy > 0), FALSE) AS cbusy,
       COALESCE(BOOL_OR(first_piece = 0 AND busy < 1), FALSE) AS cidle,
       MAX(cw) AS peak_w,
       MAX(cr) AS peak_ratio,
       MIN(lr) AS low_ratio,
       MAX(pr) AS peak_power_w
FROM marked
GROUP BY gpu_id, q_us
"""
CELLS_SQL = _SAMPLES + CELLS_TAIL

SAMPLES_SQL = _SAMPLES
RESETS_SQL = _SAMPLES + """
SELECT gpu_id, t_us, end_us FROM smp WHERE reset = 1
"""


def check_rule(rule: Activity) -> None:
    """The rollup can stand for raw samples only when a sample reaches at most the next quarter."""
    if rule.max_sample_gap_s > MAX_GAP_S:
        raise ValueError(f"max_sample_gap_s {rule.max_sample_gap_s} is above {MAX_GAP_S:g} s: "
                         "the quarter-hour rollup cannot stand for such samples")


# The cells' version in the rule key: 2 added peak_w / peak_ratio, 3 low_ratio / peak_power_w. A
# rollup stored by an earlier version has another key, so it is never read (the raw path serves
# until the next refresh rebuilds it).
CELLS_VERSION = 3


def rule_key(rule: Activity) -> str:
    """The activity rule a rollup was made for, as stored beside it (with the cells' version)."""
    return (f"{rule.mode}:{float(rule.threshold_pct)!r}:{int(round(rule.max_sample_gap_s * 1_000_000))}"
            f":v{CELLS_VERSION}")


def _rule_sql(sql: str, rule: Activity) -> tuple[str, dict[str, Any]]:
    """The SQL for one rule: the activity weight per sample (`busy`) and the util-seconds of its
    inactive part (`idle_util`), as activity.interval_activity defines them; parameters bound."""
    check_rule(rule)
    thr = float(rule.threshold_pct)
    if not math.isfinite(thr):
        raise ValueError("threshold_pct must be finite")
    if rule.mode == "threshold":
        busy = "CASE WHEN util_pct >= CAST($threshold AS DOUBLE) THEN 1.0 ELSE 0.0 END"
        idle_util = "CASE WHEN util_pct >= CAST($threshold AS DOUBLE) THEN 0.0 ELSE util_pct END"
    else:
        busy = "util_pct / 100.0"
        idle_util = "0.0"
    out = sql.replace("$busy", busy).replace("$idle_util", idle_util)
    params: dict[str, Any] = {"max_gap_us": int(round(rule.max_sample_gap_s * 1_000_000))}
    if "$threshold" in out:
        params["threshold"] = thr
    return out, params


def duckdb_sql(sql: str, rule: Activity) -> tuple[str, dict[str, Any]]:
    return _rule_sql(sql, rule)


def spark_sql(sql: str, rule: Activity) -> str:
    """The text with its parameters written in as numeric literals (int()/float() values only)."""
    out, params = _rule_sql(sql, rule)
    for name in sorted(params, key=len, reverse=True):
        v = params[name]
        out = out.replace("$" + name, str(int(v)) if isinstance(v, int) else repr(float(v)))
    assert "$" not in out
    return out


def finish_cells(frame: pl.DataFrame) -> pl.DataFrame:
    """Engine output (q_us) -> CELL_SCHEMA."""
    if frame.height == 0:
        return pl.DataFrame(schema=CELL_SCHEMA)
    out = frame.with_columns((pl.col("q_us").cast(pl.Int64) // Q_US).alias("q"))
    return out.select([pl.col(n).cast(d) for n, d in CELL_SCHEMA.items()]).sort("gpu_id", "q")


def cells_duckdb(frame: pl.DataFrame, rule: Activity) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The rollup of a telemetry frame on DuckDB: (cells, resets). For tests and bundles."""
    import duckdb

    con = duckdb.connect()
    try:
        con.register("_t", frame.select("gpu_id", "ts", "util_pct", "power_w", "energy_j").to_arrow())
        head = ("WITH telemetry_us AS (SELECT gpu_id, epoch_us(ts) AS t_us, CAST(util_pct AS DOUBLE) AS util_pct, "
                "CAST(power_w AS DOUBLE) AS power_w, CAST(energy_j AS DOUBLE) AS energy_j FROM _t),\n")
        out = []
        for sql in (CELLS_SQL, RESETS_SQL):
            text, params = duckdb_sql(sql, rule)
            got = pl.from_arrow(con.sql(head + text.strip().removeprefix("WITH"), params=params).to_arrow_table())
            assert isinstance(got, pl.DataFrame)
            out.append(got)
    finally:
        con.close()
    resets = out[1].select(pl.col(n).cast(d) for n, d in RESET_SCHEMA.items()) if out[1].height else pl.DataFrame(
        schema=RESET_SCHEMA)
    return finish_cells(out[0]), resets




# --- a rollup folder: the format `ailedger rollup` writes and `ailedger ingest --rollup` reads ----
#   cells/*.parquet    CELLS_SQL's output (gpu_id, q_us, samples, ...)
#   resets/*.parquet   RESETS_SQL's output (gpu_id, t_us)
#   rollup.json        {"format": 3, "quarter_s": 900, "rule": rule_key(rule)}
FORMAT = 3  # 2: cells carry peak_w and peak_ratio; 3: also low_ratio and peak_power_w


def manifest(rule: Activity) -> str:
    import json

    return json.dumps({"format": FORMAT, "quarter_s": Q_S, "rule": rule_key(rule)}, sort_keys=True)


def read_manifest(folder) -> str:
    """The rule key of a rollup folder, after checking it is one this version reads."""
    import json
    from pathlib import Path

    path = Path(folder) / "rollup.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a rollup folder's manifest ({exc})") from exc
    if data.get("format") != FORMAT or data.get("quarter_s") != Q_S or not isinstance(data.get("rule"), str):
        raise ValueError(f"{path}: rollup format {data.get('format')!r} with {data.get('quarter_s')!r} s quarters "
                         f"is not format {FORMAT} with {Q_S} s quarters")
    return data["rule"]


def rule_of(key: str) -> Activity:
    mode, thr, gap_us = key.split(":")[:3]
    return Activity(mode=mode, threshold_pct=float(thr), max_sample_gap_s=int(gap_us) / 1_000_000)


def spark_rollup(spark: Any, telemetry_parquet: str, out_dir: str, rule: Activity) -> None:
    """The rollup on Apache Spark from telemetry Parquet to a rollup folder (any cluster: the
    window is per card, so the work shuffles by gpu_id). `out_dir` may be object storage."""
    spark.read.parquet(str(telemetry_parquet)).selectExpr(
        "gpu_id", "unix_micros(ts) AS t_us", "CAST(util_pct AS DOUBLE) AS util_pct",
        "CAST(power_w AS DOUBLE) AS power_w", "CAST(energy_j AS DOUBLE) AS energy_j",
    ).createOrReplaceTempView("telemetry_us")
    out = str(out_dir).rstrip("/")
    spark.sql(spark_sql(CELLS_SQL, rule)).write.mode("overwrite").parquet(out + "/cells")
    spark.sql(spark_sql(RESETS_SQL, rule)).write.mode("overwrite").parquet(out + "/resets")
    spark.createDataFrame([(manifest(rule),)], "m STRING").coalesce(1).write.mode("overwrite").text(out + "/_manifest")
    _place_manifest(out)


def _place_manifest(out: str) -> None:
    """Spark writes text as part files; a local folder gets rollup.json beside them."""
    from pathlib import Path

    folder = Path(out)
    if folder.is_dir():
        parts = sorted((folder / "_manifest").glob("part-*"))
        if parts:
            (folder / "rollup.json").write_text(parts[0].read_text(encoding="utf-8").strip(), encoding="utf-8")


def duckdb_rollup(telemetry_parquet: str, out_dir: str, rule: Activity) -> None:
    """The same rollup folder on DuckDB (one machine)."""
    from pathlib import Path

    import duckdb

    out = Path(out_dir)
    for sub in ("cells", "resets"):
        (out / sub).mkdir(parents=True, exist_ok=True)
        for old in (out / sub).glob("*.parquet"):
            old.unlink()
    con = duckdb.connect()
    try:
        head = ("WITH telemetry_us AS (SELECT gpu_id, epoch_us(ts) AS t_us, CAST(util_pct AS DOUBLE) AS util_pct, "
                "CAST(power_w AS DOUBLE) AS power_w, CAST(energy_j AS DOUBLE) AS energy_j FROM read_parquet($path)),\n")
        for sql, sub in ((CELLS_SQL, "cells"), (RESETS_SQL, "resets")):
            text, params = duckdb_sql(sql, rule)
            target = str(out / sub / "part-0.parquet").replace("'", "''")
            con.execute(f"COPY ({head}{text.strip().removeprefix('WITH')}) TO '{target}' (FORMAT parquet)",
                        {**params, "path": str(telemetry_parquet)})
    finally:
        con.close()
    (out / "rollup.json").write_text(manifest(rule), encoding="utf-8")


__all__ = ["SAMPLES_SQL", "CELLS_TAIL", "CELLS_SQL", "RESETS_SQL", "CELL_SCHEMA", "RESET_SCHEMA", "Q_S", "Q_US", "check_rule", "rule_key",
           "duckdb_sql", "spark_sql", "finish_cells", "cells_duckdb", "manifest", "read_manifest", "rule_of",
           "spark_rollup", "duckdb_rollup"]
