"""The telemetry rollup (cost_engine/rollup.py): hand-computed buckets on DuckDB, and Spark == DuckDB."""

from __future__ import annotations

import inspect
import os
import re
import shutil
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from cost_engine import rollup
from cost_engine.activity import sample_intervals
from cost_engine.config import Activity
from cost_engine.rollup import ROLLUP_SCHEMA, rollup_duckdb

T0 = datetime(2026, 10, 1, tzinfo=timezone.utc)  # a multiple of 60 s since the epoch
WIDTH_S = 60
MAX_GAP_S = 90
FLEET_WEEK = Path(__file__).resolve().parents[1] / "sample_data" / "fleet-week" / "telemetry.parquet"


def _telemetry() -> pl.DataFrame:
    # (seconds after T0, gpu_id, util_pct, power_w, energy_j)
    rows = [
        (0, "A", 10.0, 100.0, 1000.0),
        (30, "A", 50.0, 200.0, 4000.0),
        (90, "A", 0.0, 50.0, 500.0),  # counter went down: A's 30 s sample is a reset
        (150, "A", 100.0, 300.0, 2000.0),
        (400, "A", 20.0, None, None),  # 250 s after the last one: A's 150 s sample is capped
        (0, "B", 4.9, 60.0, 10.0),
        (60, "B", 5.0, 60.0, 3610.0),
    ]
    return pl.DataFrame(
        {
            "ts": [T0 + timedelta(seconds=r[0]) for r in rows],
            "gpu_id": [r[1] for r in rows],
            "util_pct": [r[2] for r in rows],
            "power_w": [r[3] for r in rows],
            "energy_j": [r[4] for r in rows],
            "mem_used_mib": [0.0] * len(rows),  # ignored by the rollup
        },
        schema={"ts": pl.Datetime("us", "UTC"), "gpu_id": pl.String, "util_pct": pl.Float64,
                "power_w": pl.Float64, "energy_j": pl.Float64, "mem_used_mib": pl.Float64},
    )


def _expected() -> pl.DataFrame:
    """Hand-computed rollup of _telemetry() at 60 s buckets, max_gap 90 s, threshold 5 %.

    Sample intervals ([ts, next ts) capped at 90 s) and their energy:
      A0   [0, 30)    util 10  P 100  counter 4000 - 1000             = 3000 J
      A30  [30, 90)   util 50  P 200  counter 500 - 4000 < 0: reset -> 200 W x 60 s = 12000 J
      A90  [90, 150)  util 0   P 50   counter 2000 - 500              = 1500 J
      A150 [150, 240) util 100 P 300  next sample 250 s later: capped -> 300 W x 90 s = 27000 J
      A400 [400, 490) util 20  no power, no counter (last sample: capped)   -> unknown
      B0   [0, 60)    util 4.9 P 60   counter 3610 - 10               = 3600 J
      B60  [60, 150)  util 5   P 60   last sample: capped -> 60 W x 90 s = 5400 J
    Cut at the 60 s edges (counter energy pro rata to the overlap):
      A, bucket 0:   A0 30 s + A30 30 s. samples 2, covered 60, util_s 10x30 + 50x30 = 1800, mean 30,
                     max 50, active 60, power_j 100x30 + 200x30 = 9000, joules 3000 + 12000/2 = 9000,
                     energy_s 60, counter first 1000 last 4000, resets 1 (A30 starts here).
      A, bucket 60:  A30 30 s + A90 30 s. samples 1, covered 60, util_s 1500, mean 25, max 50,
                     active 30 (util 0 is below 5), power_j 6000 + 1500 = 7500, joules 6000 + 750 = 6750,
                     energy_s 60, counter 500 / 500, resets 0.
      A, bucket 120: A90 30 s + A150 30 s. samples 1, covered 60, util_s 3000, mean 50, max 100,
                     active 30, power_j 1500 + 9000 = 10500, joules 750 + 9000 = 9750, energy_s 60,
                     counter 2000 / 2000, resets 0.
      A, bucket 180: A150 60 s. samples 0, covered 60, util_s 6000, mean 100, max 100, active 60,
                     power_j 18000, joules 18000, energy_s 60, no counter read here, resets 0.
      A, bucket 360: A400 20 s. samples 1, covered 20, util_s 400, mean 20, max 20, active 20,
                     power_j and joules unknown, energy_s 0, counter unknown.
      A, bucket 420: A400 60 s. samples 0, covered 60, util_s 1200, mean 20, max 20, active 60, unknown energy.
      A, bucket 480: A400 10 s. samples 0, covered 10, util_s 200, mean 20, max 20, active 10, unknown energy.
      B, bucket 0:   B0 60 s. samples 1, covered 60, util_s 294, mean 4.9, max 4.9, active 0 (4.9 < 5),
                     power_j 3600, joules 3600, energy_s 60, counter 10 / 10.
      B, bucket 60:  B60 60 s. samples 1, covered 60, util_s 300, mean 5, max 5, active 60 (5 >= 5),
                     power_j 3600, joules 5400 x 60/90 = 3600, energy_s 60, counter 3610 / 3610.
      B, bucket 120: B60 30 s. samples 0, covered 30, util_s 150, mean 5, max 5, active 30,
                     power_j 1800, joules 1800, energy_s 30, no counter read here.
    """
    n = None
    rows = [
        # gpu, bucket, samples, covered, util_s, mean, max, active, power_j, joules, energy_s, first, last, resets
        ("A", 0, 2, 60.0, 1800.0, 30.0, 50.0, 60.0, 9000.0, 9000.0, 60.0, 1000.0, 4000.0, 1),
        ("A", 60, 1, 60.0, 1500.0, 25.0, 50.0, 30.0, 7500.0, 6750.0, 60.0, 500.0, 500.0, 0),
        ("A", 120, 1, 60.0, 3000.0, 50.0, 100.0, 30.0, 10500.0, 9750.0, 60.0, 2000.0, 2000.0, 0),
        ("A", 180, 0, 60.0, 6000.0, 100.0, 100.0, 60.0, 18000.0, 18000.0, 60.0, n, n, 0),
        ("A", 360, 1, 20.0, 400.0, 20.0, 20.0, 20.0, n, n, 0.0, n, n, 0),
        ("A", 420, 0, 60.0, 1200.0, 20.0, 20.0, 60.0, n, n, 0.0, n, n, 0),
        ("A", 480, 0, 10.0, 200.0, 20.0, 20.0, 10.0, n, n, 0.0, n, n, 0),
        ("B", 0, 1, 60.0, 294.0, 4.9, 4.9, 0.0, 3600.0, 3600.0, 60.0, 10.0, 10.0, 0),
        ("B", 60, 1, 60.0, 300.0, 5.0, 5.0, 60.0, 3600.0, 3600.0, 60.0, 3610.0, 3610.0, 0),
        ("B", 120, 0, 30.0, 150.0, 5.0, 5.0, 30.0, 1800.0, 1800.0, 30.0, n, n, 0),
    ]
    cols = list(ROLLUP_SCHEMA)
    data = {c: [r[i] for r in rows] for i, c in enumerate(cols)}
    data["bucket_start"] = [T0 + timedelta(seconds=s) for s in data["bucket_start"]]
    return pl.DataFrame(data, schema=ROLLUP_SCHEMA)


def _check(got: pl.DataFrame, want: pl.DataFrame) -> None:
    assert_frame_equal(got, want, check_exact=False, rel_tol=1e-9, abs_tol=1e-6)


def test_rollup_duckdb_hand_computed():
    got = rollup_duckdb(_telemetry(), WIDTH_S, max_gap_s=MAX_GAP_S, threshold_pct=5.0)
    assert got.schema == ROLLUP_SCHEMA
    _check(got, _expected())


def test_rollup_duckdb_from_parquet_equals_from_frame(tmp_path):
    path = tmp_path / "telemetry.parquet"
    _telemetry().write_parquet(path)
    _check(rollup_duckdb(path, WIDTH_S, max_gap_s=MAX_GAP_S), _expected())
    # Slicing the cards (bounded memory) gives the same rollup: two slices (one card each, as
    # the hash of A and B falls) and three (one of them empty).
    _check(rollup_duckdb(path, WIDTH_S, max_gap_s=MAX_GAP_S, card_chunks=2), _expected())
    _check(rollup_duckdb(path, WIDTH_S, max_gap_s=MAX_GAP_S, card_chunks=3), _expected())
    tel = pl.read_parquet(FLEET_WEEK)
    _check(rollup_duckdb(tel, 300, card_chunks=4), rollup_duckdb(tel, 300))


def test_rollup_duckdb_to_parquet(tmp_path):
    # Into a folder whose parent does not exist yet: both are made.
    out = rollup.rollup_duckdb_to_parquet(_telemetry(), tmp_path / "made" / "rollup", WIDTH_S, max_gap_s=MAX_GAP_S,
                                          card_chunks=2)
    got = pl.read_parquet(out / "*.parquet").sort("gpu_id", "bucket_start")
    assert got.schema == ROLLUP_SCHEMA
    _check(got, _expected())
    # Written again into the same folder in one slice: part-0001 of the first write is removed,
    # so the folder still reads as the rollup, not with card B twice.
    rollup.rollup_duckdb_to_parquet(_telemetry(), out, WIDTH_S, max_gap_s=MAX_GAP_S, card_chunks=1)
    assert sorted(p.name for p in out.glob("*.parquet")) == ["part-0000.parquet"]
    _check(pl.read_parquet(out / "*.parquet").sort("gpu_id", "bucket_start"), _expected())


def test_rollup_totals_equal_the_engine_sample_intervals():
    """Whatever the width, bucket sums give back the engine's per-sample time, util and energy."""
    tel = pl.read_parquet(FLEET_WEEK)
    s = sample_intervals(tel, 300)
    for width in (45, 300, 3600):
        r = rollup_duckdb(tel, width, max_gap_s=300)
        assert r["samples"].sum() == s.height
        assert r["counter_resets"].sum() == s["counter_reset"].sum() == 1
        assert r["covered_s"].sum() == pytest.approx(s["dt_s"].sum(), rel=1e-12)
        assert r["util_s"].sum() == pytest.approx((s["util_pct"] * s["dt_s"]).sum(), rel=1e-12)
        assert r["joules"].sum() == pytest.approx(s["joules"].sum(), rel=1e-12)
        # Buckets never hold more than their width of one card's time.
        assert r["covered_s"].max() <= width + 1e-9


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [(dict(width_s=0), "bucket width must be positive"), (dict(width_s=-60), "bucket width must be positive"),
     (dict(width_s=60, max_gap_s=0), "max_gap_s must be positive"),
     (dict(width_s=1, max_gap_s=300), "max_gap_s 300 is more than"),
     (dict(width_s=60, threshold_pct=float("nan")), "threshold_pct must be a finite number")],
)
def test_rollup_parameters_are_checked(kwargs, why):
    """Each bad parameter is refused for its own reason (a zero width is not let through to fail
    later as a gap wider than its buckets)."""
    with pytest.raises(ValueError, match=why):
        rollup.parameters(**kwargs)


def test_the_smallest_width_and_gap_are_one_microsecond():
    """Widths and gaps are whole microseconds: 1 us is the smallest of each that is positive, and
    is accepted (a gap of 1 us is one bucket of 1 us, within MAX_PIECES - 1 buckets)."""
    assert rollup.parameters(1e-6, max_gap_s=1e-6, threshold_pct=5.0) == {
        "width_us": 1, "max_gap_us": 1, "threshold": 5.0}


def test_spark_sql_has_numeric_literals_only():
    sql = rollup.spark_sql(300, max_gap_s=300, threshold_pct=5)
    assert "$" not in sql
    assert "CAST(300000000 AS BIGINT)" in sql and "CAST(5.0 AS DOUBLE)" in sql


class _RecordingSpark:
    """Just enough of a SparkSession for rollup_spark to hand over its SQL: the query is kept,
    and its result is an empty Arrow table."""

    def __init__(self):
        self.queries = []
        self.read = self

    def parquet(self, path):
        return self

    def selectExpr(self, *columns):
        return self

    def createOrReplaceTempView(self, name):
        self.view = name

    def sql(self, query):
        self.queries.append(query)
        return self

    def toArrow(self):
        return pl.DataFrame().to_arrow()


@pytest.mark.parametrize("entry", ["parameters", "spark_sql", "rollup_duckdb", "rollup_duckdb_to_parquet", "rollup_spark"])
def test_every_entry_points_defaults_are_the_engines_activity_defaults(entry):
    """A rollup made without a gap cap or threshold must be the one the engine's default activity
    rule reads (config.Activity: a sample capped at 300 s, busy from 5 %): every entry point of
    rollup.py defaults to those two values. A default of 301 s or 6 % would roll up other
    intervals or other busy samples than the engine counts, with no error anywhere."""
    engine = Activity()
    params = inspect.signature(getattr(rollup, entry)).parameters
    assert params["max_gap_s"].default == engine.max_sample_gap_s == 300.0
    assert params["threshold_pct"].default == engine.threshold_pct == 5.0


def test_kills_a_spark_rollup_whose_default_threshold_differs_from_duckdb():
    """rollup_spark without a threshold runs the SQL of the same defaults as rollup_duckdb and
    the engine: max gap 300 s, busy from 5 % (the literal CAST(5.0 AS DOUBLE)); for 60 s buckets
    the width is CAST(60000000 AS BIGINT) microseconds. Checked without Spark: the session here
    only records the query (the Spark run itself is the slow test below).

    Mutant (rollup_spark's default threshold 6 %): CAST(6.0 AS DOUBLE).
    """
    spark = _RecordingSpark()
    assert rollup.rollup_spark(spark, "unused.parquet", 60).height == 0
    assert spark.view == "telemetry_us"
    assert spark.queries == [rollup.spark_sql(60, max_gap_s=300.0, threshold_pct=5.0)]
    assert "CAST(60000000 AS BIGINT)" in spark.queries[0] and "CAST(5.0 AS DOUBLE)" in spark.queries[0]


# --------------------------------------------------------------------------- Spark


def _java_problem() -> str | None:
    """Why pyspark cannot start a JVM here (None when it can): Java 17+ from JAVA_HOME or PATH."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home and (Path(home) / "bin" / "java").is_file() else shutil.which("java")
    if java is None:
        return "no java on PATH or JAVA_HOME (pyspark needs Java 17+)"
    try:
        proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"java -version failed: {exc}"
    if proc.returncode != 0:
        return f"java -version exited {proc.returncode}"
    m = re.search(r'version "(\d+)', proc.stderr + proc.stdout)
    if m is None or int(m.group(1)) < 17:
        return f"pyspark needs Java 17+, {java} says: {(proc.stderr or proc.stdout).strip().splitlines()[:1]}"
    return None


def _need(reason: str | None) -> None:
    """Skip with the reason locally; in CI (CI=true) a missing Spark stack is a failure."""
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"Spark rollup test cannot run in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def spark():
    try:
        import pyspark  # noqa: F401
    except ImportError:
        _need("pyspark is not installed (pip install pyspark)")
    _need(_java_problem())
    from pyspark.sql import SparkSession

    saved = os.environ.get("SPARK_LOCAL_IP")
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # nothing beyond localhost
    session = (
        SparkSession.builder.master("local[2]")
        .appName("ailedger-rollup-test")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
        if saved is None:
            os.environ.pop("SPARK_LOCAL_IP", None)
        else:
            os.environ["SPARK_LOCAL_IP"] = saved


@pytest.mark.slow
def test_rollup_spark_equals_duckdb(spark, tmp_path):
    # The hand-made frame: Spark must give the hand-computed values too.
    small = tmp_path / "small.parquet"
    _telemetry().write_parquet(small)
    got = rollup.rollup_spark(spark, small, WIDTH_S, max_gap_s=MAX_GAP_S)
    _check(got, _expected())

    # A slice of the sample fleet: training, inference and MIG cards (no power or counter)
    # and the counter reset, over two days.
    tel = pl.read_parquet(FLEET_WEEK)
    cards = tel.group_by("gpu_id").agg(pl.col("energy_j").null_count().alias("nulls")).sort("gpu_id")
    keep = cards.filter(pl.col("nulls") == 0)["gpu_id"].head(6).to_list()
    keep += cards.filter(pl.col("nulls") > 0)["gpu_id"].head(2).to_list()
    reset_card = sample_intervals(tel, 300).filter(pl.col("counter_reset"))["gpu_id"].to_list()
    keep = sorted(set(keep) | set(reset_card))
    part = tmp_path / "fleet.parquet"
    first_days = pl.col("ts") < tel["ts"].min() + timedelta(days=2)  # holds the counter reset
    tel.filter(pl.col("gpu_id").is_in(keep) & first_days).write_parquet(part)
    # 45 s buckets cut every 60 s sample; 3,600 s with a 120 s cap changes every parameter.
    for width, gap in ((45, 300), (3600, 120)):
        duck = rollup_duckdb(part, width, max_gap_s=gap)
        sp = rollup.rollup_spark(spark, part, width, max_gap_s=gap)
        assert duck.height > 0
        assert sp.schema == duck.schema == ROLLUP_SCHEMA
        _check(sp, duck)
    assert duck["counter_resets"].sum() == 1
