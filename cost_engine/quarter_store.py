"""The quarter-hour rollup kept in the store: refreshed after each ingest, read only when it is current.

Two tables beside the contract tables, `telemetry_rollup` (quarters.CELL_SCHEMA) and
`telemetry_rollup_resets` (gpu_id, t_us), and two meta keys: `rollup_rule` (the activity rule it
was made for, quarters.rule_key) and `rollup_ingests` (the last ingest id and the ingest count
it includes: the part of `store.data_version` that changes with each ingest). `refresh` runs
after an ingest has committed, in its own transaction: it recomputes the quarters the new
telemetry rows touch (one range of quarters per card, from the quarter before the first new
sample to the quarter after the last) and records the ingests it now includes. A reader's
connection sees one committed state, so `load` returns the rollup only when it was made for
exactly the data the same connection sees and for the report's rule; otherwise None and the
engine reads raw samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl

from . import quarters
from .config import Activity

TABLE = "telemetry_rollup"
RESETS = "telemetry_rollup_resets"
# Telemetry rows recomputed per statement: bounds DuckDB's window over the samples.
CHUNK_ROWS = 8_000_000

_SQL_TYPE = {
    n: "VARCHAR" if d == pl.String else "BIGINT" if d == pl.Int64 else "BOOLEAN" if d == pl.Boolean else "DOUBLE"
    for n, d in quarters.CELL_SCHEMA.items()
}
_DDL = {
    TABLE: ", ".join(f"{n} {t}" for n, t in _SQL_TYPE.items()),
    RESETS: "gpu_id VARCHAR, t_us BIGINT, end_us BIGINT",
}
_COLS = ", ".join(quarters.CELL_SCHEMA)
# The rollup SQL's columns as stored (its q_us is the quarter's start in microseconds).
_FROM_SQL = ", ".join(f"c.q_us // {quarters.Q_US} AS q" if n == "q" else f"c.{n}" for n in quarters.CELL_SCHEMA)


def _create_tables(con: duckdb.DuckDBPyConnection) -> None:
    """The rollup's tables, with the columns a later version added to a table stored before it
    (filled with nulls; the rule key's version keeps such rows from being read)."""
    for name, ddl in _DDL.items():
        con.execute(f"CREATE TABLE IF NOT EXISTS {name} ({ddl})")
    for n, t in _SQL_TYPE.items():
        con.execute(f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS {n} {t}")


@dataclass(frozen=True)
class Refreshed:
    cards: int  # cards whose quarters were recomputed
    cells: int  # rows written
    full: bool  # rebuilt from scratch (no rollup yet, or another rule)


def _ingests(con: duckdb.DuckDBPyConnection) -> str:
    from . import store

    row = store._one(con, "SELECT coalesce(max(id), 0), count(*) FROM ingests")
    assert row is not None
    return f"{row[0]}:{row[1]}"


def refresh(db_path: str | Path, rule: Activity, *, chunk_rows: int = CHUNK_ROWS) -> Refreshed:
    """Bring the store's rollup up to its data for `rule` (after an ingest, outside its transaction)."""
    from . import store

    quarters.check_rule(rule)
    con = store._open(Path(db_path), read_only=False)
    try:
        con.execute(f"SET memory_limit = '{store.INGEST_MEMORY_LIMIT}'")
        con.execute("BEGIN TRANSACTION")
        try:
            done = _refresh(con, rule, chunk_rows)
            con.execute("COMMIT")
            return done
        except BaseException:
            store._rollback(con)
            raise
    finally:
        con.close()


def _refresh(con: duckdb.DuckDBPyConnection, rule: Activity, chunk_rows: int) -> Refreshed:
    from . import store

    _create_tables(con)
    key = quarters.rule_key(rule)
    now = _ingests(con)
    full = store._meta(con, "rollup_rule") != key or store._meta(con, "rollup_ingests") is None
    if full and store._meta(con, "rollup_external") == "1":
        # A rollup made elsewhere has no raw samples here to be rebuilt from: leave it (stale for
        # this rule, so a report under it reads what raw samples there are).
        return Refreshed(cards=0, cells=0, full=False)
    if not store._has_table(con, "telemetry"):
        ranges = pl.DataFrame(schema={"gpu_id": pl.String, "lo": pl.Int64, "hi": pl.Int64, "n": pl.Int64})
    else:
        since = 0 if full else int(str(store._meta(con, "rollup_ingests")).split(":")[0])
        got = pl.from_arrow(con.sql(
            "SELECT gpu_id, min(epoch_us(ts)) AS lo, max(epoch_us(ts)) AS hi, count(*) AS n FROM telemetry "
            "WHERE _ingest_id > ? GROUP BY gpu_id ORDER BY gpu_id", params=[since]).to_arrow_table())
        assert isinstance(got, pl.DataFrame)
        ranges = got
    if full:
        con.execute(f"DELETE FROM {TABLE}")
        con.execute(f"DELETE FROM {RESETS}")
    cells = 0
    if ranges.height:
        # Quarters whose rows can change: from the one holding the sample before the first new one
        # (it starts at most a gap earlier, a gap is at most a quarter) to the one after the last.
        ranges = ranges.with_columns(
            (pl.col("lo") // quarters.Q_US - 1).alias("qa"), (pl.col("hi") // quarters.Q_US + 1).alias("qb"),
        ).with_columns(
            # Samples read: from a quarter before (their predecessors' pieces) to one after (successors).
            ((pl.col("qa") - 1) * quarters.Q_US).alias("read_lo"), ((pl.col("qb") + 2) * quarters.Q_US).alias("read_hi"),
            # Cards grouped so that each statement reads about chunk_rows samples.
            (pl.col("n").cum_sum() // max(1, chunk_rows)).alias("chunk"),
        )
        smp_sql, params = quarters.duckdb_sql(quarters.SAMPLES_SQL, rule)
        tail, _ = quarters.duckdb_sql(quarters.CELLS_TAIL, rule)
        con.register("_rollup_ranges", ranges.select("gpu_id", "qa", "qb", "read_lo", "read_hi", "chunk").to_arrow())
        # The slices' cells wait in a temporary table and land in one insert in quarter order (below).
        con.execute(f"CREATE OR REPLACE TEMP TABLE _rollup_new AS SELECT {_COLS} FROM {TABLE} LIMIT 0")
        try:
            for chunk in ranges["chunk"].unique().sort().to_list():
                p = {**params, "chunk": int(chunk)}
                c = {"chunk": int(chunk)}
                # The samples once per slice of cards (a temporary table), then the cells and the
                # resets from them: each sample's interval and joules are computed once.
                con.execute(
                    "CREATE OR REPLACE TEMP TABLE _rollup_smp AS "
                    "WITH _r AS (SELECT * FROM _rollup_ranges WHERE chunk = $chunk),\n"
                    "telemetry_us AS (SELECT t.gpu_id, epoch_us(t.ts) AS t_us, CAST(t.util_pct AS DOUBLE) AS util_pct, "
                    "CAST(t.power_w AS DOUBLE) AS power_w, CAST(t.energy_j AS DOUBLE) AS energy_j FROM telemetry t "
                    "JOIN _r ON _r.gpu_id = t.gpu_id "
                    "WHERE t.ts >= make_timestamp(_r.read_lo) AT TIME ZONE 'UTC' "
                    "AND t.ts < make_timestamp(_r.read_hi) AT TIME ZONE 'UTC'),\n"
                    + smp_sql.strip().removeprefix("WITH") + "\nSELECT * FROM smp", p)
                if not full:
                    con.execute(f"DELETE FROM {TABLE} r USING _rollup_ranges g WHERE g.chunk = $chunk "
                                "AND r.gpu_id = g.gpu_id AND r.q BETWEEN g.qa AND g.qb", c)
                    con.execute(f"DELETE FROM {RESETS} r USING _rollup_ranges g WHERE g.chunk = $chunk "
                                f"AND r.gpu_id = g.gpu_id AND r.t_us >= g.qa * {quarters.Q_US} "
                                f"AND r.t_us < (g.qb + 1) * {quarters.Q_US}", c)
                row = store._one(con,
                    f"INSERT INTO _rollup_new ({_COLS}) SELECT {_FROM_SQL} "
                    f"FROM (WITH smp AS (SELECT * FROM _rollup_smp){tail}) c JOIN _rollup_ranges g "
                    f"ON g.chunk = $chunk AND g.gpu_id = c.gpu_id "
                    f"WHERE c.q_us // {quarters.Q_US} BETWEEN g.qa AND g.qb", c)
                cells += int(row[0]) if row else 0
                con.execute(
                    f"INSERT INTO {RESETS} SELECT c.gpu_id, c.t_us, c.end_us FROM _rollup_smp c JOIN _rollup_ranges g "
                    f"ON g.chunk = $chunk AND g.gpu_id = c.gpu_id "
                    f"WHERE c.reset = 1 AND c.t_us >= g.qa * {quarters.Q_US} AND c.t_us < (g.qb + 1) * {quarters.Q_US}", c)
            con.execute("DROP TABLE IF EXISTS _rollup_smp")
            _append_in_quarter_order(con, "_rollup_new")
        finally:
            con.execute("DROP TABLE IF EXISTS _rollup_new")
            con.unregister("_rollup_ranges")
    store._set_meta(con, "rollup_rule", key)
    store._set_meta(con, "rollup_ingests", now)
    return Refreshed(cards=ranges.height, cells=cells, full=full)


def _append_in_quarter_order(con: duckdb.DuckDBPyConnection, source: str) -> int:
    """Append the cells of `source` sorted by (quarter, card). Each slice of cards spans every
    quarter the refresh covers; appended slice by slice, every row group would span them all and
    each window read (`window`) would scan them: windows x cells, which grows with days squared
    (a whole rebuild, or an incremental refresh after a month of telemetry came in at once).
    Sorted, DuckDB's min/max per row group skips all but the window's own, and an incremental
    refresh keeps that order: its row groups span only the quarters it recomputed. Returns the
    cells appended."""
    from . import store

    row = store._one(con, f"INSERT INTO {TABLE} ({_COLS}) SELECT {_COLS} FROM {source} ORDER BY q, gpu_id")
    return int(row[0]) if row else 0


def stored_rule(db_path: str | Path) -> Activity | None:
    """The activity rule the store's rollup was made for (None: the store has no rollup)."""
    from . import store

    with store.connect(db_path) as con:
        key = store._meta(con, "rollup_rule") if store._has_table(con, "meta") else None
    if key is None:
        return None
    return quarters.rule_of(key)


def ingest_rollup(db_path: str | Path, folder: str | Path) -> int:
    """Store a rollup folder (made by `ailedger rollup`, on Spark or DuckDB) as the store's rollup.

    Its cells replace the stored ones of the same cards and quarters; it goes with the data the
    store holds now (the last ingest). When the store holds no raw telemetry, the rollup is marked
    external: a report spreads the quarters it cannot stand in for by time and names them in gaps.
    Returns the cells stored.
    """
    from . import store

    key = quarters.read_manifest(folder)
    quarters.check_rule(quarters.rule_of(key))
    cells_glob, resets_glob = str(Path(folder) / "cells" / "*.parquet"), str(Path(folder) / "resets" / "*.parquet")
    con = store._open(Path(db_path), read_only=False)
    try:
        con.execute("BEGIN TRANSACTION")
        try:
            _create_tables(con)
            if store._meta(con, "rollup_rule") not in (None, key):
                con.execute(f"DELETE FROM {TABLE}")
                con.execute(f"DELETE FROM {RESETS}")
            cols = ", ".join(f"CAST({f'q_us // {quarters.Q_US}' if n == 'q' else n} AS {t}) AS {n}"
                             for n, t in _SQL_TYPE.items())
            con.execute(f"CREATE TEMP TABLE _rollup_in AS SELECT {cols} FROM read_parquet($p)", {"p": cells_glob})
            span = "SELECT gpu_id, min(q) AS qa, max(q) AS qb FROM _rollup_in GROUP BY gpu_id"
            con.execute(f"DELETE FROM {TABLE} r USING ({span}) g WHERE r.gpu_id = g.gpu_id AND r.q BETWEEN g.qa AND g.qb")
            con.execute(f"DELETE FROM {RESETS} r USING ({span}) g WHERE r.gpu_id = g.gpu_id "
                        f"AND r.t_us >= g.qa * {quarters.Q_US} AND r.t_us < (g.qb + 1) * {quarters.Q_US}")
            stored = _append_in_quarter_order(con, "_rollup_in")
            con.execute(f"INSERT INTO {RESETS} SELECT CAST(gpu_id AS VARCHAR), CAST(t_us AS BIGINT), CAST(end_us AS BIGINT) "
                        "FROM read_parquet($p)",
                        {"p": resets_glob})
            con.execute("DROP TABLE _rollup_in")
            raw = store._has_table(con, "telemetry") and (store._one(con, "SELECT count(*) FROM telemetry") or [0])[0] > 0
            store._set_meta(con, "rollup_rule", key)
            store._set_meta(con, "rollup_ingests", _ingests(con))
            store._set_meta(con, "rollup_external", "0" if raw else "1")
            con.execute("COMMIT")
            return stored
        except BaseException:
            store._rollback(con)
            raise
    finally:
        con.close()


@dataclass(frozen=True)
class Rollup:
    """A rollup that goes with the data it is read beside: cells (CELL_SCHEMA) and resets.

    With `names`, the cells' gpu_id is a UInt32 index into `names` (sorted card ids) and the
    cells hold only the columns the engine reads (`READ`), masks as small integers: the store's
    rollup is millions of rows, and string ids would be most of their size and of every join's
    cost. Without `names` (tests, bundles), gpu_id is the card id itself.

    `cells` None: the store's rollup, read a window of quarters at a time (`window`, through the
    telemetry reader) so that a month of a fleet's cells is never in memory at once."""

    cells: pl.DataFrame | None
    resets: pl.DataFrame
    external: bool = False  # made elsewhere (Spark): the store holds no raw samples behind it
    names: pl.Series | None = None

    def coded(self) -> tuple[pl.DataFrame, pl.Series]:
        """(cells with gpu_id as a UInt32 index into the names, the sorted names)."""
        assert self.cells is not None, "a rollup read per window has no cells in memory"
        if self.names is not None:
            return self.cells, self.names
        names = self.cells.get_column("gpu_id").unique().sort()
        idx = pl.DataFrame({"gpu_id": names}).with_row_index("_i")
        cells = self.cells.join(idx, on="gpu_id").drop("gpu_id").rename({"_i": "gpu_id"})
        return cells.select("gpu_id", *[c for c in cells.columns if c != "gpu_id"]), names


# The columns of a cell the engine reads, and the narrow types they are read in.
READ = pl.Schema({
    "gpu_id": pl.UInt32, "q": pl.Int64, "samples": pl.Int64, "last_us": pl.Int64,
    **{n: pl.Float64 for n in ("covered_s", "active_s", "idle_s", "util_s", "idle_util_s", "joules",
                               "idle_joules", "energy_s", "start_j")},
    "bmask": pl.Int16, "imask": pl.Int16, "cmin": pl.Int8, "cbusy": pl.Boolean, "cidle": pl.Boolean,
    "peak_w": pl.Float64, "peak_ratio": pl.Float64, "low_ratio": pl.Float64, "peak_power_w": pl.Float64,
})
_READ_SQL = {pl.UInt32: "UINTEGER", pl.Int64: "BIGINT", pl.Float64: "DOUBLE", pl.Int16: "SMALLINT", pl.Int8: "TINYINT",
             pl.Boolean: "BOOLEAN"}


def load(con: duckdb.DuckDBPyConnection, rule: Activity, gpu_ids: tuple[str, ...] | None = None,
         whole: bool = False) -> Rollup | None:
    """The store's rollup when it was made for this connection's data and for `rule`, else None.

    Its cells are read by window (`window`) unless `whole`: then all of them now."""
    from . import store

    if rule.max_sample_gap_s > quarters.MAX_GAP_S or not math.isfinite(rule.threshold_pct):
        return None
    if not (store._has_table(con, TABLE) and store._has_table(con, "ingests")):
        return None
    if store._meta(con, "rollup_rule") != quarters.rule_key(rule) or store._meta(con, "rollup_ingests") != _ingests(con):
        return None
    where, params = ("", []) if gpu_ids is None else (" WHERE gpu_id IN (SELECT unnest(?))", [list(gpu_ids)])
    rows = con.sql(f"SELECT DISTINCT gpu_id FROM {TABLE}{where} ORDER BY gpu_id", params=params).fetchall()
    names = pl.Series("gpu_id", [r[0] for r in rows], dtype=pl.String)
    cells = window(con, names, None, None) if whole else None
    res = pl.from_arrow(con.sql(f"SELECT {', '.join(quarters.RESET_SCHEMA)} FROM {RESETS}{where}",
                                params=params).to_arrow_table())
    assert isinstance(res, pl.DataFrame)
    resets = res.cast(dict(quarters.RESET_SCHEMA)) if res.height else pl.DataFrame(schema=quarters.RESET_SCHEMA)
    return Rollup(cells, resets, store._meta(con, "rollup_external") == "1", names)


def window(con: duckdb.DuckDBPyConnection, names: pl.Series, qa: int | None, qb: int | None) -> pl.DataFrame:
    """The cells of the cards in `names` with a quarter in [qa, qb) (None: unbounded), gpu_id
    coded as the index into `names` (READ)."""
    # Card ids to their index in SQL (a join against the few thousand names), so no id string
    # of the millions of cells crosses into Python.
    con.register("_rollup_names", pl.DataFrame({"gpu_id": names}).with_row_index("i").to_arrow())
    try:
        cols = ", ".join("n.i AS gpu_id" if n == "gpu_id" else f"CAST(c.{n} AS {_READ_SQL[d]}) AS {n}"
                         for n, d in READ.items())
        # Bounds as constants (no coalesce over the column), so the scan prunes row groups by q.
        bounds = [("c.q >= ?", qa), ("c.q < ?", qb)]
        where = " AND ".join(c for c, v in bounds if v is not None) or "TRUE"
        got = pl.from_arrow(con.sql(
            f"SELECT {cols} FROM {TABLE} c JOIN _rollup_names n ON n.gpu_id = c.gpu_id WHERE {where}",
            params=[v for _, v in bounds if v is not None]).to_arrow_table())
    finally:
        con.unregister("_rollup_names")
    assert isinstance(got, pl.DataFrame)
    return got.cast(dict(READ)) if got.height else pl.DataFrame(schema=READ)


def sampled(con: duckdb.DuckDBPyConnection, names: pl.Series, a_us: int, b_us: int) -> pl.Series:
    """The cards of `names` with a sample in [a_us, b_us) (b on a quarter edge), sorted: as
    quarter_activity.sampled_cards over the cells in memory."""
    con.register("_rollup_names", pl.DataFrame({"gpu_id": names}).to_arrow())
    try:
        rows = con.sql(
            f"SELECT DISTINCT c.gpu_id FROM {TABLE} c JOIN _rollup_names n ON n.gpu_id = c.gpu_id "
            f"WHERE c.samples > 0 AND c.q * {quarters.Q_US} < $b "
            f"AND (c.q * {quarters.Q_US} >= $a OR (c.q = $qa AND c.last_us >= $a)) "
            # The same quarters as constant bounds on q, which the scan can prune row groups by.
            "AND c.q >= $qa AND c.q < $qb",
            params={"a": a_us, "b": b_us, "qa": a_us // quarters.Q_US,
                    "qb": -(-b_us // quarters.Q_US)}).fetchall()
    finally:
        con.unregister("_rollup_names")
    return pl.Series("gpu_id", [r[0] for r in rows], dtype=pl.String).sort()


def samples_of(con: duckdb.DuckDBPyConnection, names: pl.Series) -> int:
    """How many samples the rollup counts for the cards in `names`, all quarters."""
    if names.len() == 0:
        return 0
    row = con.sql(f"SELECT coalesce(sum(samples), 0) FROM {TABLE} WHERE gpu_id IN (SELECT unnest(?))",
                  params=[names.to_list()]).fetchall()
    return int(row[0][0]) if row else 0


__all__ = ["TABLE", "RESETS", "Refreshed", "Rollup", "refresh", "load", "window", "sampled", "samples_of",
           "stored_rule", "ingest_rollup"]
