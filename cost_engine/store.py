"""The embedded DuckDB store: bundles accumulate in one file, idempotently and all-or-nothing."""

from __future__ import annotations

import contextlib
import getpass
import itertools
import json
import os
import random
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa

from .bundle import Bundle, release_pages
from .store_files import (CREATING, clear_interrupted, damaged, describe_file, empty_duckdb, is_damage, looks_like_duckdb,
                          no_room, publish, truncated)
from . import future
from .future import FutureRows
from .continuation import SPANS
from .contract import RECORD_KEYS, REJECTED_SCHEMA, TABLE_NAMES, TABLES, empty, schema
from .token_sources import HOUR_US
from .token_sources import SPANS as SOURCE_HOURS

# ---------------------------------------------------------------------------------------------
# Layout
#
# One DuckDB table per contract table, named like it, with the canonical columns in contract
# order plus three bookkeeping columns:
#   _content_hash UHUGEINT     md5_number over the canonical columns (see _hash_expr)
#   _ingested_at  TIMESTAMPTZ  when the ingest that wrote the row started
#   _ingest_id    BIGINT       ingests.id of that ingest
# and five store tables:
#   meta(key, value)                                   schema_version, hash_version, store_id, created_at
#   ingests(id, ingested_at, replace, source, rows_in, inserted, unchanged, replaced, rejected, notes, tables,
#           user, files)                               user: who ingested (v2); files: sources and sha256 (v3)
#   rejected("table", "row", reason, file, ingest_id, seq)   the bundles' rejections, deduplicated
#   notes(what, detail, ingest_id, seq)                      the bundles' notes, deduplicated
#   present_tables("table", ingest_id)                       tables some ingested bundle had
#   superseded_<table>: the rows a replace overwrote, with _valid_to (the ingest that did; v3)
#   closes, late_ingests, late_effects, configs: month-end close and its trail (cost_engine/close.py; v3)
#
# Concurrency: DuckDB lets one process hold a file for writing, or any number of processes
# hold it read-only, never both; the loser gets "Could not set lock" (and a second connection
# with other settings inside one process gets "different configuration"). Every connection
# here is opened through _open, which waits for the other side with capped exponential
# backoff instead of failing: READ_WAIT_S for readers, WRITE_WAIT_S for ingests. A reader's
# connection sees one committed state for its whole life, so a read sees the store before
# or after an ingest, never half of one. See docs/store.md.
# ---------------------------------------------------------------------------------------------

SCHEMA_VERSION = 3
# Version of the content-hash formula; a change to _hash_expr needs a migration that rehashes.
HASH_VERSION = 1
DEFAULT_BATCH_ROWS = 1_000_000
INGEST_MEMORY_LIMIT = "1GB"  # DuckDB's memory cap during an ingest (a constant, never user input)
# How long a reader (load_bundle, data_version, query_records, ...) or an ingest waits for a
# store another connection holds, before StoreBusy.
READ_WAIT_S = float(os.environ.get("AILEDGER_STORE_READ_WAIT_S", "120"))
WRITE_WAIT_S = float(os.environ.get("AILEDGER_STORE_WRITE_WAIT_S", "600"))
_FIRST_DELAY_S = 0.005
_MAX_DELAY_S = 0.25

STORE_TABLES = ("meta", "ingests", "rejected", "notes", "present_tables", "closes", "late_ingests", "late_effects",
                "configs")
# Where a replace keeps the rows it overwrote (valid from their _ingest_id to _valid_to): see audit.py.
SUPERSEDED = "superseded_"
assert not set(STORE_TABLES) & set(TABLE_NAMES), "a contract table collides with a store table"
_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")
assert all(_IDENT.match(t) and all(_IDENT.match(c.name) for c in TABLES[t]) for t in TABLES)

_STORE_DDL = {
    "meta": "key VARCHAR PRIMARY KEY, value VARCHAR",
    "ingests": (
        'id BIGINT PRIMARY KEY, ingested_at TIMESTAMPTZ, "replace" BOOLEAN, source VARCHAR, rows_in BIGINT, '
        'inserted BIGINT, unchanged BIGINT, replaced BIGINT, rejected BIGINT, notes BIGINT, tables VARCHAR, '
        '"user" VARCHAR, files VARCHAR'
    ),
    "rejected": '"table" VARCHAR, "row" BIGINT, reason VARCHAR, file VARCHAR, ingest_id BIGINT, seq BIGINT',
    "notes": "what VARCHAR, detail VARCHAR, ingest_id BIGINT, seq BIGINT",
    "present_tables": '"table" VARCHAR PRIMARY KEY, ingest_id BIGINT',
    # Month-end close (cost_engine/close.py, docs/close.md): one row per close; reopening fills reopened_*.
    "closes": (
        'id BIGINT PRIMARY KEY, period VARCHAR, start TIMESTAMPTZ, "end" TIMESTAMPTZ, data_version BIGINT, '
        'closed_at TIMESTAMPTZ, "user" VARCHAR, accept_gaps BOOLEAN, gaps VARCHAR, config_sha256 VARCHAR, '
        'report VARCHAR, reopened_at TIMESTAMPTZ, reopened_by VARCHAR, reopen_why VARCHAR'
    ),
    "late_ingests": "ingest_id BIGINT, close_id BIGINT, post_to VARCHAR",
    "late_effects": "ingest_id BIGINT, close_id BIGINT, owner VARCHAR, cost_after DOUBLE, amount DOUBLE",
    "configs": "ingest_id BIGINT PRIMARY KEY, sha256 VARCHAR, text VARCHAR",
}

ProgressFn = Callable[[str, int, int], None]
Migration = Callable[[duckdb.DuckDBPyConnection], None]
BeforeCommit = Callable[[duckdb.DuckDBPyConnection, "IngestResult"], None]

# Schema migrations: MIGRATIONS[v] brings a store from version v to v + 1, inside the caller's
# transaction, without touching meta (migrate() bumps schema_version after each step).
# Pattern for the next one:
#
#     def _migrate_1_to_2(con: duckdb.DuckDBPyConnection) -> None:
#         """v2: what changed and why."""
#         con.execute('ALTER TABLE "allocations" ADD COLUMN ...')
#
#     MIGRATIONS[1] = _migrate_1_to_2      # and SCHEMA_VERSION = 3
#
# New nullable contract columns need no migration: _ensure_schema adds them, and the content
# hash skips NULL columns, so the rows already stored keep their hashes.


def _migrate_1_to_2(con: duckdb.DuckDBPyConnection) -> None:
    """v2: ingests.user records who ran each ingest (NULL for the ingests before v2)."""
    con.execute('ALTER TABLE ingests ADD COLUMN IF NOT EXISTS "user" VARCHAR')


def _migrate_2_to_3(con: duckdb.DuckDBPyConnection) -> None:
    """v3: ingests.files (the source files and their sha256); the superseded_<table> copies, the
    close tables and configs are created by _ensure_schema (CREATE TABLE IF NOT EXISTS)."""
    con.execute("ALTER TABLE ingests ADD COLUMN IF NOT EXISTS files VARCHAR")


MIGRATIONS: dict[int, Migration] = {1: _migrate_1_to_2, 2: _migrate_2_to_3}


class StoreError(ValueError):
    """The path is not a usable store (not one, or written by a newer version)."""


class StoreDamaged(StoreError):
    """The store file is damaged (truncated, a block overwritten): restore it from a backup."""

    def __init__(self, path: str | Path):
        super().__init__(damaged(path))
        self.path = Path(path)


class StoreBusy(StoreError):
    """Another connection held the store for longer than this one would wait."""


class StoreConflict(ValueError):
    """An ingest would change records already stored (or a bundle disagrees with itself)."""

    def __init__(self, conflicts: list[Conflict]):
        self.conflicts = conflicts
        parts = []
        for c in conflicts:
            where = "within the bundle" if c.within_bundle else "already stored with different content"
            more = ", ..." if c.count > len(c.keys) else ""
            keys = ", ".join(_fmt_key(k) for k in c.keys)
            parts.append(f"{c.table}: {c.count} key(s) {where} ({keys}{more})")
        hint = "" if all(c.within_bundle for c in conflicts) else "; ingest with replace=True to overwrite"
        super().__init__("ingest rejected, nothing written: " + "; ".join(parts) + hint)


@dataclass(frozen=True)
class Conflict:
    """Keys of one table whose new content differs from the stored (or from another bundle row)."""

    table: str
    count: int  # number of conflicting keys
    keys: list[tuple[Any, ...]]  # the first few, sorted
    within_bundle: bool = False


@dataclass
class IngestResult:
    """What one committed ingest did. Per contract table: inserted + unchanged + replaced = rows in.

    Identical duplicate rows inside the bundle count as `unchanged`.
    """

    ingest_id: int
    inserted: dict[str, int] = field(default_factory=dict)
    unchanged: dict[str, int] = field(default_factory=dict)
    replaced: dict[str, int] = field(default_factory=dict)
    conflicts: list[Conflict] = field(default_factory=list)  # the conflicts replace=True overwrote
    # stored records that records of this ingest continue (a re-exported running job, a pod's run
    # that goes on in the next window): removed, the continuing record written in their place
    superseded: dict[str, int] = field(default_factory=dict)
    rejected: int = 0  # rejection rows newly stored
    notes: int = 0  # notes newly stored
    rollup_s: float | None = None  # seconds the quarter-hour rollup took after the commit (None: not refreshed)
    rollup_error: str | None = None  # why the rollup was not refreshed (reports read raw samples meanwhile)

    @property
    def total_inserted(self) -> int:
        return sum(self.inserted.values())

    @property
    def total_unchanged(self) -> int:
        return sum(self.unchanged.values())

    @property
    def total_replaced(self) -> int:
        return sum(self.replaced.values())


# ---------------------------------------------------------------------------------------------
# SQL helpers. Table and column names come from the contract constants only (checked above);
# every value goes in as a bound parameter.
# ---------------------------------------------------------------------------------------------


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sql_type(dtype: Any) -> str:
    if dtype == pl.String:
        return "VARCHAR"
    if dtype == pl.Float64:
        return "DOUBLE"
    if dtype == pl.Int64:
        return "BIGINT"
    if dtype == pl.Boolean:
        return "BOOLEAN"
    if isinstance(dtype, pl.Datetime):
        return "TIMESTAMPTZ"
    raise TypeError(f"no store type for contract dtype {dtype}")


def _cols(table: str) -> list[str]:
    return [c.name for c in TABLES[table]]


def _key_cols(table: str) -> tuple[str, ...]:
    """The record key, or () for tables keyed by their content hash (events)."""
    return RECORD_KEYS.get(table, ())


def _order_cols(table: str) -> list[str]:
    return list(_key_cols(table)) or _cols(table)


def _hash_expr(table: str, alias: str | None = None) -> str:
    """md5 over `name=value` pieces of the non-NULL canonical columns (of `alias`, if given).

    Strings are length-prefixed (no ambiguity), timestamps are epoch microseconds, numbers their
    DuckDB text. NULL pieces vanish in concat_ws, so a new nullable column leaves old hashes valid.
    """
    parts = []
    for c in TABLES[table]:
        col = f"{alias}.{_q(c.name)}" if alias else _q(c.name)
        sqlt = _sql_type(c.dtype)
        if sqlt == "VARCHAR":
            v = f"CAST(length({col}) AS VARCHAR) || ':' || {col}"
        elif sqlt == "TIMESTAMPTZ":
            v = f"CAST(epoch_us({col}) AS VARCHAR)"
        else:
            v = f"CAST({col} AS VARCHAR)"
        parts.append(f"'{c.name}=' || {v}")
    return f"md5_number(concat_ws(chr(31), {', '.join(parts)}))"


def _stored_hash(table: str, alias: str) -> str:
    """A stored row's content hash. Keyed rows written by the fast path store NULL (hashing
    every row is most of an insert's cost); their hash is computed here, only for the rows a
    later ingest meets by key, with the same function, so the comparison is the same."""
    return f"coalesce({alias}._content_hash, {_hash_expr(table, alias)})"


def _key_match(table: str, a: str, b: str) -> str:
    keys = _key_cols(table)
    if not keys:
        return f"{a}._content_hash = {b}._h"
    return " AND ".join(f"{a}.{_q(k)} IS NOT DISTINCT FROM {b}.{_q(k)}" for k in keys)


def _fmt_key(key: tuple[Any, ...]) -> str:
    vals = [v.isoformat() if isinstance(v, datetime) else str(v) for v in key]
    return vals[0] if len(vals) == 1 else "(" + ", ".join(vals) + ")"


def _session(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    # TIMESTAMPTZ comes out in the session time zone; the default follows the host.
    con.execute("SET TimeZone = 'UTC'")
    return con


def _one(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> tuple[Any, ...] | None:
    """The first row of a statement, with the result drained.

    DuckDB 2.0 keeps an execute() result open until a fetch comes back empty, and refuses
    register(), unregister() and sql() on the connection meanwhile; fetchall() drains it.
    """
    rows = con.execute(sql, params).fetchall()
    return rows[0] if rows else None


def _has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    row = _one(con, 
        "SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'main' AND table_name = ? AND NOT temporary",
        [name],
    )
    return bool(row and row[0])


def _table_columns(con: duckdb.DuckDBPyConnection, name: str) -> list[str]:
    rows = con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE schema_name = 'main' AND table_name = ? ORDER BY column_index",
        [name],
    ).fetchall()
    return [r[0] for r in rows]


def _meta(con: duckdb.DuckDBPyConnection, key: str) -> str | None:
    row = _one(con, "SELECT value FROM meta WHERE key = ?", [key])
    return None if row is None else row[0]


def _set_meta(con: duckdb.DuckDBPyConnection, key: str, value: str) -> None:
    con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, value])


@contextlib.contextmanager
def _registered(con: duckdb.DuckDBPyConnection, name: str, data: Any) -> Iterator[None]:
    """`data` visible to SQL as `name` for the block.

    When the block fails (say the disk is full), DuckDB has aborted the transaction and refuses
    the unregister too ("Current transaction is aborted"): that second error must not hide the
    first, which says what went wrong.
    """
    con.register(name, data)
    try:
        yield
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.unregister(name)
        raise
    con.unregister(name)


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back if a transaction is still open; a failed COMMIT has already ended it (DuckDB
    then says "no transaction is active", which would hide why the commit failed)."""
    with contextlib.suppress(duckdb.Error):
        con.execute("ROLLBACK")


def _frame(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None, target: pl.Schema) -> pl.DataFrame:
    got = pl.from_arrow(con.sql(sql, params=params).to_arrow_table())
    assert isinstance(got, pl.DataFrame)
    if got.height == 0:
        return pl.DataFrame(schema=target)
    return got.cast(dict(target))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Opening, schema, migration
# ---------------------------------------------------------------------------------------------


def _is_lock_conflict(exc: Exception) -> bool:
    text = str(exc).lower()
    return "could not set lock" in text or "conflicting lock" in text or "different configuration" in text


def _open(path: Path, *, read_only: bool, wait_s: float | None = None) -> duckdb.DuckDBPyConnection:
    """A connection, time zone UTC, once no other connection holds the file the conflicting way.

    Waits with capped exponential backoff (with jitter, so waiting readers and writers do not
    move in step) for up to READ_WAIT_S or WRITE_WAIT_S; then StoreBusy. A damaged file
    (DuckDB cannot read it, or it is shorter than its header says) is StoreDamaged.
    """
    wait = wait_s if wait_s is not None else (READ_WAIT_S if read_only else WRITE_WAIT_S)
    deadline = time.monotonic() + wait
    delay = _FIRST_DELAY_S
    while True:
        try:
            con = _session(duckdb.connect(str(path), read_only=read_only))
        except duckdb.Error as exc:
            if is_damage(exc):
                raise StoreDamaged(path) from None
            if not isinstance(exc, (duckdb.IOException, duckdb.ConnectionException)) or not _is_lock_conflict(exc):
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                what = "read" if read_only else "write"
                raise StoreBusy(
                    f"{path}: could not open the store to {what} within {wait:g} s: "
                    f"another connection holds it ({_first_line(exc)})"
                ) from None
            time.sleep(min(left, delay * random.uniform(0.5, 1.0)))
            delay = min(delay * 2, _MAX_DELAY_S)
            continue
        if truncated(con, path):
            con.close()
            raise StoreDamaged(path)
        return con


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@contextlib.contextmanager
def connect(
    db_path: str | Path, *, read_only: bool = True, wait_s: float | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """An open store connection, time zone UTC.

    Read-only refuses a path that is not a store; for write the schema is created or migrated
    (committed) before the connection is handed out. While another process writes the store
    (or reads it, for a write connection), this waits (see _open); the connection then holds
    the store until the block ends, so keep such blocks short.
    """
    path = Path(db_path)
    if read_only and not looks_like_duckdb(path):
        raise StoreError(describe_file(path))
    if not read_only and _looks_like_foreign(path):
        raise StoreError(describe_file(path) + "; refusing to write into it")
    con = _open(path, read_only=read_only, wait_s=wait_s)
    try:
        if read_only:
            if not _has_meta(con):
                raise StoreError(describe_file(path))
            _readable_version(con, path)
        else:
            con.execute("BEGIN TRANSACTION")
            try:
                _ensure_schema(con)
                migrate(con, path)
                con.execute("COMMIT")
            except BaseException:
                _rollback(con)
                raise
        yield con
    except duckdb.Error as exc:
        # A block read past the end or failing its checksum, in any query of the block.
        if is_damage(exc):
            raise StoreDamaged(path) from None
        raise
    finally:
        con.close()


def _looks_like_foreign(path: Path) -> bool:
    """True for an existing path that is not our store (never write into one)."""
    return path.exists() and not is_store(path)


def _has_meta(con: duckdb.DuckDBPyConnection) -> bool:
    return _has_table(con, "meta") and _meta(con, "schema_version") is not None


def _stored_version(con: duckdb.DuckDBPyConnection, path: Path | str) -> int | None:
    """meta.schema_version as a number (None: a store being created); StoreError when it is
    not one: a hand-edited or damaged meta table is refused, never guessed."""
    raw = _meta(con, "schema_version") if _has_table(con, "meta") else None
    if raw is None:
        return None
    try:
        version = int(raw)
    except ValueError:
        raise StoreError(f"{path}: the store's schema_version {raw!r} is not a version number; "
                         "the file is damaged or was edited by hand") from None
    if version < 1:
        raise StoreError(f"{path}: the store's schema_version {version} is not one ailedger ever wrote")
    return version


def _readable_version(con: duckdb.DuckDBPyConnection, path: Path | str) -> int:
    """The version of a store this code can read (any it wrote, up to SCHEMA_VERSION)."""
    version = _stored_version(con, path)
    if version is None:
        raise StoreError(describe_file(Path(path)))
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path}: store schema version {version} is newer than this ailedger "
                         f"({SCHEMA_VERSION}); upgrade ailedger to read it")
    return version


def _required_columns(table: str) -> list[str]:
    """Columns every store has had since version 1: the required ones and those with a default.

    A nullable column without a default (like requests.attempt) may be missing from an older
    store and reads as NULL (unknown); a missing owner or share would be read as NULL and move
    cost to idle silently, so its absence refuses the read.
    """
    return [c.name for c in TABLES[table] if c.required or c.default is not None]


def check_columns(con: duckdb.DuckDBPyConnection, table: str, path: Path | str) -> None:
    """StoreError when a stored contract table lacks a column every store has."""
    if not _has_table(con, table):
        return
    have = set(_table_columns(con, table))
    missing = [c for c in _required_columns(table) if c not in have]
    if missing:
        raise StoreError(
            f"{path}: the store's {table} table lacks column{'s' if len(missing) > 1 else ''} "
            f"{', '.join(missing)}, which every ailedger store has; the file was altered, and reading it "
            "would count those records wrongly. Restore it from a backup or ingest the bundles into a new store"
        )


def _ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create the store tables that are missing and add contract columns a table lacks."""
    fresh = not _has_table(con, "meta")
    for name, ddl in _STORE_DDL.items():
        con.execute(f"CREATE TABLE IF NOT EXISTS {_q(name)} ({ddl})")
    if fresh:
        _set_meta(con, "schema_version", str(SCHEMA_VERSION))
        _set_meta(con, "hash_version", str(HASH_VERSION))
        _set_meta(con, "store_id", uuid.uuid4().hex)
        _set_meta(con, "created_at", datetime.now(timezone.utc).isoformat())
    for table in TABLE_NAMES:
        cols = ", ".join(f"{_q(c.name)} {_sql_type(c.dtype)}" for c in TABLES[table])
        con.execute(
            f"CREATE TABLE IF NOT EXISTS {_q(table)} ({cols}, "
            "_content_hash UHUGEINT, _ingested_at TIMESTAMPTZ, _ingest_id BIGINT)"
        )
        have = set(_table_columns(con, table))
        for c in TABLES[table]:
            if c.name not in have:
                con.execute(f"ALTER TABLE {_q(table)} ADD COLUMN {_q(c.name)} {_sql_type(c.dtype)}")
        old = _q(SUPERSEDED + table)
        con.execute(f"CREATE TABLE IF NOT EXISTS {old} AS SELECT *, CAST(NULL AS BIGINT) AS _valid_to "
                    f"FROM {_q(table)} LIMIT 0")
        have = set(_table_columns(con, SUPERSEDED + table))
        for c in TABLES[table]:
            if c.name not in have:
                con.execute(f"ALTER TABLE {old} ADD COLUMN {_q(c.name)} {_sql_type(c.dtype)}")


def migrate(con: duckdb.DuckDBPyConnection, path: Path | str = "store") -> int:
    """Bring the store on a write connection to SCHEMA_VERSION; returns the version reached.

    Runs the MIGRATIONS steps in order inside the caller's transaction (ingest and connect wrap it
    in one) and records each step in meta. A store newer than this code is refused.
    """
    version = _stored_version(con, path)
    version = SCHEMA_VERSION if version is None else version
    if version > SCHEMA_VERSION:
        raise StoreError(f"store schema version {version} is newer than this ailedger ({SCHEMA_VERSION})")
    while version < SCHEMA_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise StoreError(f"no migration from store schema version {version}")
        step(con)
        version += 1
        _set_meta(con, "schema_version", str(version))
    return version


def is_store(path: str | Path) -> bool:
    """True when path is a DuckDB file holding our meta table.

    A DuckDB file that cannot be opened because another process (or a write connection of this
    one) holds it counts as a store: that is almost always an ingest in progress.
    """
    p = Path(path)
    if not looks_like_duckdb(p):
        return False
    try:
        con = duckdb.connect(str(p), read_only=True)
    except duckdb.Error as exc:
        if is_damage(exc):
            return True  # a store's header, a damaged body: opening it says so (StoreDamaged)
        if isinstance(exc, (duckdb.IOException, duckdb.ConnectionException)):
            text = str(exc).lower()
            return "lock" in text or "different configuration" in text
        return False
    try:
        return _has_meta(con)
    except duckdb.Error as exc:
        return is_damage(exc)
    finally:
        con.close()


def schema_version(db_path: str | Path) -> int:
    """The schema version recorded in the store."""
    with connect(db_path) as con:
        return _readable_version(con, db_path)


def data_version(db_path: str | Path, *, wait_s: float | None = None) -> str:
    """A cheap token that changes whenever an ingest commits (store id, last ingest id, ingest count).

    `wait_s` bounds the wait for a writer's lock (StoreBusy after it): the dashboard asks with a
    short wait and keeps serving its cached figures while an ingest runs.
    """
    with connect(db_path, wait_s=wait_s) as con:
        row = _one(con, "SELECT coalesce(max(id), 0), count(*) FROM ingests")
        assert row is not None
        return f"{_meta(con, 'store_id')}:{row[0]}:{row[1]}"


# ---------------------------------------------------------------------------------------------
# Ingest
# ---------------------------------------------------------------------------------------------


# Rows per Arrow batch handed to DuckDB (see _arrow).
_SCAN_ROWS = 2**17


def _canonical(table: str, frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with exactly the contract columns, in order and dtype (missing ones NULL)."""
    target = schema(table)
    exprs = [
        (pl.col(name).cast(dtype) if name in frame.columns else pl.lit(None, dtype)).alias(name)
        for name, dtype in target.items()
    ]
    return frame.select(exprs)


def _stage(con: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame) -> list[Conflict]:
    """Copy a bundle table into the temp table _stage_<table> with content hashes and input order.

    Identical duplicate rows are reduced to their first; keys that come with different contents
    inside the bundle are returned as conflicts (replace cannot choose between them).
    """
    stage = _q(f"_stage_{table}")
    src = f"_in_{table}"
    arrow = _canonical(table, frame).with_row_index("_ord").cast({"_ord": pl.Int64}).to_arrow()
    with _registered(con, src, arrow):
        con.execute(
            f"CREATE TEMP TABLE {stage} AS SELECT {', '.join(_q(c) for c in _cols(table))}, "
            f"{_hash_expr(table)} AS _h, _ord FROM {_q(src)}"
        )
    group = ", ".join(_q(k) for k in _key_cols(table)) or "_h"
    row = _one(con, f"SELECT count(*) FROM (SELECT 1 FROM {stage} GROUP BY {group} HAVING count(*) > 1)")
    if not (row and row[0]):
        return []  # the usual case: every key once
    row = _one(con, f"SELECT count(*) FROM (SELECT 1 FROM {stage} GROUP BY {group} HAVING min(_h) <> max(_h))")
    if row and row[0]:
        keys = con.execute(
            f"SELECT {group} FROM {stage} GROUP BY {group} HAVING min(_h) <> max(_h) ORDER BY {group} LIMIT 5"
        ).fetchall()
        return [Conflict(table, int(row[0]), [tuple(k) for k in keys], within_bundle=True)]
    con.execute(
        f"DELETE FROM {stage} WHERE _ord IN (SELECT _ord FROM {stage} "
        "QUALIFY row_number() OVER (PARTITION BY _h ORDER BY _ord) > 1)"
    )
    return []


def _store_conflicts(con: duckdb.DuckDBPyConnection, table: str) -> list[Conflict]:
    """Keys of the staged table that are stored with a different content hash."""
    keys = _key_cols(table)
    if not keys:
        return []  # keyed by content: a different content is a different record
    stage = _q(f"_stage_{table}")
    where = f"FROM {stage} s JOIN {_q(table)} t ON {_key_match(table, 't', 's')} WHERE s._h <> {_stored_hash(table, 't')}"
    row = _one(con, f"SELECT count(*) {where}")
    n = int(row[0]) if row else 0
    if not n:
        return []
    cols = ", ".join(f"s.{_q(k)}" for k in keys)
    first = con.execute(f"SELECT {cols} {where} ORDER BY {cols} LIMIT 5").fetchall()
    return [Conflict(table, n, [tuple(k) for k in first])]


def _ingest_table(
    con: duckdb.DuckDBPyConnection,
    table: str,
    *,
    ingest_id: int,
    at: datetime,
    replace: bool,
    total: int,
    progress: ProgressFn | None,
    batch_rows: int,
) -> tuple[int, int, int]:
    """Write one staged table in batches; returns (inserted, unchanged, replaced)."""
    stage = _q(f"_stage_{table}")
    target = _q(table)
    replaced = 0
    if replace and _key_cols(table):
        replaced = _supersede(con, table, f"EXISTS (SELECT 1 FROM {stage} s "
                              f"WHERE {_key_match(table, 't', 's')} AND s._h <> {_stored_hash(table, 't')})", ingest_id)
    cols = _cols(table)
    # Which staged records are new is decided once, against the store as it was (one hash
    # anti-join), not per batch against a table that grows with every batch (quadratic).
    # Staged keys are unique (see _stage), so fresh rows cannot collide with each other.
    fresh = _q(f"_fresh_{table}")
    con.execute(
        f"CREATE TEMP TABLE {fresh} AS SELECT s.* FROM {stage} s "
        f"WHERE NOT EXISTS (SELECT 1 FROM {target} t WHERE {_key_match(table, 't', 's')})"
    )
    insert = (
        f"INSERT INTO {target} ({', '.join(_q(c) for c in cols)}, _content_hash, _ingested_at, _ingest_id) "
        f"SELECT {', '.join('s.' + _q(c) for c in cols)}, s._h, ?, ? FROM {fresh} s "
        f"WHERE s._ord >= ? AND s._ord < ?"
    )
    written = 0
    for lo in range(0, total, batch_rows):
        hi = min(lo + batch_rows, total)
        row = _one(con, insert, [at, ingest_id, lo, hi])
        written += int(row[0]) if row else 0
        if progress is not None:
            progress(table, hi, total)
    con.execute(f"DROP TABLE {fresh}")
    con.execute(f"DROP TABLE {stage}")
    return written - replaced, total - written, replaced


def _supersede(con: duckdb.DuckDBPyConnection, table: str, where: str, ingest_id: int) -> int:
    """Move the stored rows of `table` (alias t) matching `where` to superseded_<table>, valid
    until `ingest_id`, so an as-of read of an earlier version finds them (audit.snapshot)."""
    cols = ", ".join(f"t.{_q(c)}" for c in [*_cols(table), "_content_hash", "_ingested_at", "_ingest_id"])
    names = ", ".join(_q(c) for c in [*_cols(table), "_content_hash", "_ingested_at", "_ingest_id", "_valid_to"])
    con.execute(f"INSERT INTO {_q(SUPERSEDED + table)} ({names}) SELECT {cols}, ? FROM {_q(table)} t WHERE {where}",
                [ingest_id])
    row = _one(con, f"DELETE FROM {_q(table)} t WHERE {where}")
    return int(row[0]) if row else 0


def _fast_path(bundle: Bundle, table: str) -> bool:
    """Whether a table can skip the staging copy: its keys are unique (the reader deduplicated
    them) and it has a record key, so stored matches are found by key without hashing every row."""
    return bundle.unique_keys and bool(_key_cols(table))


def _arrow(table: str, frame: pl.DataFrame) -> Any:
    """The canonical columns as Arrow, zero-copy where the dtypes already match (string views too).

    Cut into record batches of _SCAN_ROWS: DuckDB scans an Arrow table one batch per thread,
    so a single big chunk would hash (the costly part of an insert) on one core only.
    """
    import pyarrow as pa

    arrow = _canonical(table, frame).to_arrow(compat_level=pl.CompatLevel.newest())
    return pa.Table.from_batches(arrow.to_batches(max_chunksize=_SCAN_ROWS), schema=arrow.schema)


def _match_stored(con: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame) -> list[Conflict]:
    """Phase 1 of the fast path: the temp table _old_<table> of bundle keys already stored.

    It holds each matched key and whether the stored row has the same content (`_same`: every
    canonical column IS NOT DISTINCT FROM the bundle's). Comparing the columns themselves
    needs no hash on either side, so re-ingesting a big bundle costs one join. Into an empty
    table (a fresh store) nothing can match, so the bundle is not even scanned. Returns the
    keys stored with a different content, as _store_conflicts.
    """
    old = _q(f"_old_{table}")
    target = _q(table)
    keys = ", ".join(f"s.{_q(k)}" for k in _key_cols(table))
    if _one(con, f"SELECT count(*) FROM (SELECT 1 FROM {target} LIMIT 1)") == (0,):
        con.execute(f"CREATE TEMP TABLE {old} AS SELECT {keys}, TRUE AS _same FROM {target} s LIMIT 0")
        return []
    src = f"_in_{table}"
    with _registered(con, src, _arrow(table, frame)):
        same = " AND ".join(f"s.{_q(c)} IS NOT DISTINCT FROM t.{_q(c)}" for c in _cols(table))
        con.execute(
            f"CREATE TEMP TABLE {old} AS SELECT {keys}, ({same}) AS _same "
            f"FROM {_q(src)} s JOIN {target} t ON {_key_match(table, 't', 's')}"
        )
    where = f"FROM {old} s WHERE NOT s._same"
    row = _one(con, f"SELECT count(*) {where}")
    n = int(row[0]) if row else 0
    if not n:
        return []
    first = con.execute(f"SELECT {keys} {where} ORDER BY {keys} LIMIT 5").fetchall()
    return [Conflict(table, n, [tuple(k) for k in first])]


def _insert_fresh(
    con: duckdb.DuckDBPyConnection,
    table: str,
    frame: pl.DataFrame,
    *,
    ingest_id: int,
    at: datetime,
    replace: bool,
    progress: ProgressFn | None,
    batch_rows: int,
) -> tuple[int, int, int]:
    """Phase 2 of the fast path: write the bundle rows whose key is not stored with the same
    content, straight from the bundle's frame in slices of batch_rows (no staged copy), hashing
    each row in the INSERT itself. Returns (inserted, unchanged, replaced) like _ingest_table."""
    old = _q(f"_old_{table}")
    target = _q(table)
    replaced = 0
    if replace:
        replaced = _supersede(con, table, f"EXISTS (SELECT 1 FROM {old} s "
                              f"WHERE {_key_match(table, 't', 's')} AND NOT s._same)", ingest_id)
    # What is left in _old is stored as it is: those rows are skipped. Decided once against
    # the store as it was, so the growing table is never joined per batch.
    con.execute(f"DELETE FROM {old} WHERE NOT _same")
    skip = _one(con, f"SELECT count(*) FROM (SELECT 1 FROM {old} LIMIT 1)") != (0,)
    cols = ", ".join(_q(c) for c in _cols(table))
    src = f"_in_{table}"
    # _content_hash stays NULL: it is computed when a later ingest meets the key (_stored_hash).
    insert = (
        f"INSERT INTO {target} ({cols}, _content_hash, _ingested_at, _ingest_id) "
        f"SELECT {cols}, NULL, ?, ? FROM {_q(src)} s"
    )
    if skip:
        insert += f" WHERE NOT EXISTS (SELECT 1 FROM {old} o WHERE {_key_match(table, 'o', 's')})"
    total = frame.height
    written = 0
    for lo in range(0, total, batch_rows):
        hi = min(lo + batch_rows, total)
        with _registered(con, src, _arrow(table, frame.slice(lo, hi - lo))):
            row = _one(con, insert, [at, ingest_id])
        written += int(row[0]) if row else 0
        release_pages()  # the slice's spilled pages are done with (see bundle.release_pages)
        if progress is not None:
            progress(table, hi, total)
    con.execute(f"DROP TABLE {old}")
    return written - replaced, total - written, replaced


def _remove_continued(con: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame,
                      ingest_id: int) -> tuple[int, pl.DataFrame | None]:
    """Move the stored records that this ingest continues (named by content) to superseded_<table>,
    valid until `ingest_id` (as a replace does, so an as-of read finds them); (how many, their keys
    or None for a keyless table)."""
    canon = _canonical(table, frame).unique(maintain_order=True)
    src = f"_sup_{table}"
    with _registered(con, src, canon.to_arrow()):
        match = " AND ".join(f"t.{_q(c)} IS NOT DISTINCT FROM s.{_q(c)}" for c in _cols(table))
        removed = _supersede(con, table, f"EXISTS (SELECT 1 FROM {_q(src)} s WHERE {match})", ingest_id)
    if removed != canon.height:
        raise StoreError(f"{table}: {canon.height - removed} of the {canon.height} stored records this ingest "
                         "continues are no longer stored as it read them (another ingest changed them "
                         "meanwhile); nothing was written: import again")
    keys = list(_key_cols(table))
    return removed, (canon.select(keys).unique() if keys else None)


def _count_keys(frame: pl.DataFrame | None, keys: pl.DataFrame) -> int:
    """Distinct keys of `keys` that the bundle table `frame` holds."""
    if frame is None or frame.height == 0 or keys.height == 0:
        return 0
    cols = keys.columns
    return frame.select(cols).unique().join(keys, on=cols, how="semi", nulls_equal=True).height


def _store_side_tables(con: duckdb.DuckDBPyConnection, bundle: Bundle, ingest_id: int) -> tuple[int, int]:
    """Keep the bundle's rejections, notes and present tables; returns (new rejections, new notes)."""
    rej_schema = REJECTED_SCHEMA | {"file": pl.String}
    rejected = bundle.rejected
    rejected = rejected.select(
        [
            (pl.col(n).cast(d) if n in rejected.columns else pl.lit(None, d)).alias(n)
            for n, d in rej_schema.items()
        ]
    ).with_row_index("seq")
    notes = pl.DataFrame(
        [(str(w), str(d)) for w, d in bundle.notes], schema={"what": pl.String, "detail": pl.String}, orient="row"
    ).with_row_index("seq")
    counts = []
    for name, frame, cols in (
        ("rejected", rejected, ["table", "row", "reason", "file"]),
        ("notes", notes, ["what", "detail"]),
    ):
        if frame.height == 0:
            counts.append(0)
            continue
        src = f"_in_{name}"
        with _registered(con, src, frame.with_columns(pl.col("seq").cast(pl.Int64)).to_arrow()):
            qcols = ", ".join(_q(c) for c in cols)
            match = " AND ".join(f"o.{_q(c)} IS NOT DISTINCT FROM s.{_q(c)}" for c in cols)
            row = _one(con, 
                f"INSERT INTO {_q(name)} ({qcols}, ingest_id, seq) "
                f"SELECT {qcols}, ?, min(seq) FROM {_q(src)} s "
                f"WHERE NOT EXISTS (SELECT 1 FROM {_q(name)} o WHERE {match}) GROUP BY ALL",
                [ingest_id],
            )
        counts.append(int(row[0]) if row else 0)
    for table in sorted(set(bundle.present) & set(TABLE_NAMES)):
        con.execute(
            'INSERT INTO present_tables SELECT ?, ? WHERE NOT EXISTS (SELECT 1 FROM present_tables WHERE "table" = ?)',
            [table, ingest_id, table],
        )
    return counts[0], counts[1]


def ingest(
    db_path: str | Path,
    bundle: Bundle,
    *,
    replace: bool = False,
    progress: ProgressFn | None = None,
    source: str | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    user: str | None = None,
    rollup: Any = "stored",
    supersede: dict[str, pl.DataFrame] | None = None,
    files: list[dict] | None = None,
    before_commit: BeforeCommit | None = None,
) -> IngestResult:
    """Add a bundle to the store (created on first use) in one transaction.

    A record whose key is stored with the same content changes nothing; a key stored with a
    different content is a conflict: the whole ingest is refused with StoreConflict, unless
    `replace`, which overwrites those records. Any failure leaves the store as it was.
    `progress(table, done_rows, total_rows)` is called after each batch of `batch_rows` rows.
    `source` (e.g. the bundle path) and `user` (default: the OS account running this) go into
    the ingests log. While readers hold the store, the ingest waits for them (see _open).

    The ingest that creates the store writes a temporary file beside it and moves it into
    place once committed, so a process killed meanwhile leaves no half-made store under the
    name (see _create). A write that finds no room (disk full) is a StoreError that says so
    first; nothing of the ingest was written.

    `rollup` (a config.Activity rule): after the commit, bring the store's quarter-hour rollup
    up to date for that rule (quarter_store.refresh; its time in `rollup_s`); "stored" (the
    default): for the rule the store's rollup was made for, if it has one; None: leave it (it
    is stale until the next refresh, and reports read raw samples meanwhile).

    `supersede` (table -> stored records, canonical, as an import read them with stored_between):
    records that this bundle's records continue. They are moved to superseded_<table> (valid until
    this ingest, as a replace keeps what it overwrites) in the same transaction before the bundle
    is matched, so their continuation is written instead of conflicting; a continuing
    record with the key of the one it supersedes counts as `replaced`. If one of them is no longer
    stored as read (another ingest changed it meanwhile), nothing is written (StoreError).
    `files` (audit.file_hashes: path, sha256, bytes of each source file) go into the ingests log;
    `before_commit(con, result)` runs last inside the transaction (an exception rolls it all back).
    """
    if batch_rows < 1:
        raise ValueError("batch_rows must be positive")
    path = Path(db_path)
    # A new store may name a folder that does not exist yet (data/ailedger.duckdb on a fresh clone).
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the folder of the store {path}: {exc.strerror or exc}") from None
    if user is None:
        user = _os_user()
    run = dict(replace=replace, progress=progress, source=source, batch_rows=batch_rows, user=user,
               supersede=supersede or {}, files=files, before_commit=before_commit)
    clear_interrupted(path)
    if _looks_like_foreign(path):
        if not empty_duckdb(path):
            raise StoreError(describe_file(path) + "; refusing to write into it")
        # A store of an older ailedger whose first ingest was killed: no table, nothing to lose.
        for leftover in (path, path.with_name(path.name + ".wal")):
            leftover.unlink(missing_ok=True)
    result = None
    if not path.exists():
        result = _create(path, bundle, run)
        # None: another process created the store meanwhile: add to it like any later ingest.
    if result is None:
        result = _ingest_into(path, bundle, run, name=path)
    if rollup is not None:
        _refresh_rollup(path, result, rollup)
    return result


def _refresh_rollup(path: Path, result: IngestResult, rule: Any) -> None:
    """The quarter-hour rollup brought up to the committed data, in its own transaction.

    Never inside the ingest's: the data are committed whatever happens here, and until the
    rollup records this ingest a report reads raw samples (quarter_store.load)."""
    from . import quarter_store

    t = time.perf_counter()
    try:
        if rule == "stored":
            rule = quarter_store.stored_rule(path)
            if rule is None:
                return
        quarter_store.refresh(path, rule)
    except (duckdb.Error, ValueError, StoreError) as exc:
        result.rollup_error = _first_line(exc)
        return
    result.rollup_s = time.perf_counter() - t


def _ingest_into(path: Path, bundle: Bundle, run: dict, *, name: Path, checkpoint: bool = False) -> IngestResult:
    """One ingest transaction on the file at `path` (`name`: the store as messages call it)."""
    con = _open(path, read_only=False)
    try:
        # DuckDB may take most of the machine's memory for the joins of a big ingest; capped, it
        # spills to a temp folder beside the store instead (bounded memory, same result).
        con.execute(f"SET memory_limit = '{INGEST_MEMORY_LIMIT}'")
        con.execute("BEGIN TRANSACTION")
        try:
            result = _ingest_in_transaction(con, bundle, run["replace"], run["progress"], run["source"],
                                            run["batch_rows"], run["user"], run["supersede"], run["files"],
                                            run["before_commit"])
            con.execute("COMMIT")
            if checkpoint:  # everything into the file itself: it is about to be moved, its WAL is not
                con.execute("CHECKPOINT")
            return result
        except BaseException as exc:
            _rollback(con)
            words = no_room(exc)
            if words is not None:
                raise StoreError(
                    f"{name}: the disk is full ({words}) while writing the store. Nothing of this ingest "
                    "was written and the store holds what it held before; free some space and ingest again"
                ) from exc
            raise
    finally:
        with contextlib.suppress(duckdb.Error):  # a close cannot undo a commit; its error is no news
            con.close()


def _create(path: Path, bundle: Bundle, run: dict) -> IngestResult | None:
    """The first ingest: into a temporary file beside `path`, moved into place once committed.

    A process killed meanwhile leaves only the temporary file (removed by a later ingest), never
    a store without tables under the store's name. The move never replaces a file: when another
    process created the store first, this returns None and the caller ingests into that one.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}{CREATING}")
    try:
        result = _ingest_into(tmp, bundle, run, name=path, checkpoint=True)
        return result if publish(tmp, path) else None
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            leftover.unlink(missing_ok=True)


def _os_user() -> str | None:
    try:
        return getpass.getuser()
    except Exception:  # no login name (some containers): unknown
        return None


def _ingest_in_transaction(
    con: duckdb.DuckDBPyConnection,
    bundle: Bundle,
    replace: bool,
    progress: ProgressFn | None,
    source: str | None,
    batch_rows: int,
    user: str | None = None,
    supersede: dict[str, pl.DataFrame] | None = None,
    files: list[dict] | None = None,
    before_commit: BeforeCommit | None = None,
) -> IngestResult:
    _ensure_schema(con)
    migrate(con)
    row = _one(con, "SELECT coalesce(max(id), 0) + 1 FROM ingests")
    assert row is not None
    ingest_id = int(row[0])
    at = datetime.now(timezone.utc)

    sizes = {t: bundle.tables[t].height for t in TABLE_NAMES if t in bundle.tables}
    todo = [t for t in TABLE_NAMES if sizes.get(t, 0) > 0]
    superseded = {t: _remove_continued(con, t, f, ingest_id) for t, f in (supersede or {}).items()
                  if f.height and t in TABLE_NAMES}
    # Phase 1: stage every table and look for conflicts before writing anything.
    # Tables the reader deduplicated skip the staged copy (see _fast_path).
    inside: list[Conflict] = []
    for t in todo:
        if not _fast_path(bundle, t):
            inside += _stage(con, t, bundle.tables[t])
    if inside:
        raise StoreConflict(inside)
    conflicts: list[Conflict] = []
    for t in todo:
        found = _match_stored(con, t, bundle.tables[t]) if _fast_path(bundle, t) else _store_conflicts(con, t)
        conflicts += found
    if conflicts and not replace:
        raise StoreConflict(conflicts)

    # Phase 2: write.
    result = IngestResult(ingest_id=ingest_id, conflicts=conflicts)
    for t in TABLE_NAMES:
        result.inserted[t] = result.unchanged[t] = result.replaced[t] = 0
    for t in todo:
        write = dict(ingest_id=ingest_id, at=at, replace=replace, progress=progress, batch_rows=batch_rows)
        if _fast_path(bundle, t):
            ins, same, rep = _insert_fresh(con, t, bundle.tables[t], **write)
        else:
            ins, same, rep = _ingest_table(con, t, total=sizes[t], **write)
        result.inserted[t], result.unchanged[t], result.replaced[t] = ins, same, rep
    for t, (removed, same_key) in superseded.items():
        result.superseded[t] = removed
        # a continuation under the superseded record's own key is that record replaced, not a new one
        again = _count_keys(bundle.tables.get(t), same_key) if same_key is not None else 0
        result.inserted[t] = result.inserted.get(t, 0) - again
        result.replaced[t] = result.replaced.get(t, 0) + again
    result.rejected, result.notes = _store_side_tables(con, bundle, ingest_id)

    summary = {
        t: {
            "rows": sizes[t],
            "inserted": result.inserted[t],
            "unchanged": result.unchanged[t],
            "replaced": result.replaced[t],
        }
        for t in todo
    }
    con.execute(
        'INSERT INTO ingests (id, ingested_at, "replace", source, rows_in, inserted, unchanged, replaced, '
        'rejected, notes, tables, "user", files) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
        [
            ingest_id,
            at,
            replace,
            source,
            sum(sizes.values()),
            result.total_inserted,
            result.total_unchanged,
            result.total_replaced,
            result.rejected,
            result.notes,
            json.dumps(summary, sort_keys=True),
            user,
            None if files is None else json.dumps(files, sort_keys=True),
        ],
    )
    if before_commit is not None:  # e.g. close.py: record the config, refuse or mark a late ingest
        before_commit(con, result)
    return result


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def _select_canonical(con: duckdb.DuckDBPyConnection, table: str, path: Path | str) -> str:
    """SELECT list of the canonical columns; NULL for a nullable column an older store lacks.

    A column that every store has (required, or with a default) refuses the read when it is
    missing (check_columns): NULL there would change the figures, not say "unknown".
    """
    check_columns(con, table, path)
    have = set(_table_columns(con, table))
    return ", ".join(
        _q(c.name) if c.name in have else f"CAST(NULL AS {_sql_type(c.dtype)}) AS {_q(c.name)}" for c in TABLES[table]
    )


def load_bundle(
    db_path: str | Path, *, tables: list[str] | tuple[str, ...] | None = None, held: tuple[str, ...] = ()
) -> Bundle:
    """Read the store back as a Bundle of canonical frames, sorted by record key.

    `tables` limits what is read (the others come back empty and not present); `rejected` and
    `notes` hold those of every ingest, in ingest order. `held` tables stay in the store: their
    frames are empty, they count as present when an ingest's source had them, and
    `Bundle.held_rows` gives their stored row counts (`Bundle.store` is this store).
    """
    wanted = list(TABLE_NAMES) if tables is None else list(tables)
    unknown = sorted(set(wanted) - set(TABLE_NAMES) | set(held) - set(TABLE_NAMES))
    if unknown:
        raise ValueError(f"unknown tables: {', '.join(unknown)}")
    with connect(db_path) as con:
        frames: dict[str, pl.DataFrame] = {}
        for t in TABLE_NAMES:
            if t not in wanted or not _has_table(con, t):
                frames[t] = empty(t)
                continue
            order = ", ".join(_q(c) for c in _order_cols(t))
            sql = f"SELECT {_select_canonical(con, t, db_path)} FROM {_q(t)} ORDER BY {order}"
            frames[t] = _frame(con, sql, None, schema(t))
        rejected = _frame(
            con,
            'SELECT "table", "row", reason, file FROM rejected ORDER BY ingest_id, seq',
            None,
            REJECTED_SCHEMA | {"file": pl.String},
        )
        notes = [tuple(r) for r in con.execute("SELECT what, detail FROM notes ORDER BY ingest_id, seq").fetchall()]
        present = {r[0] for r in con.execute('SELECT "table" FROM present_tables').fetchall()}
        held_rows = {t: _stored_rows(con, t) for t in held}
    return Bundle(tables=frames, rejected=rejected, present=frozenset(present & (set(wanted) | set(held))),
                  notes=notes, held_rows=held_rows, store=Path(db_path) if held else None)


def _stored_rows(con: duckdb.DuckDBPyConnection, table: str) -> int:
    if not _has_table(con, table):
        return 0
    row = _one(con, f"SELECT count(*) FROM {_q(table)}")
    return int(row[0]) if row else 0


# Requests handed to the engine per batch (store.request_batches): about 35 MB of raw rows.
REQUEST_BATCH_ROWS = 250_000


def request_batches(
    db_path: str | Path, start: datetime, end: datetime, batch_rows: int = REQUEST_BATCH_ROWS
) -> Iterator[pl.DataFrame]:
    """The stored requests with `ts` in [start, end) and the usage buckets overlapping it (see
    tokens.in_period), canonical columns, `batch_rows` at a time.

    In storage order: the engine resolves each batch as it arrives, so a month of millions of
    requests is never held twice (raw and resolved), and nothing sorts them.
    """
    target = schema("requests")
    with connect(db_path) as con:
        if not _has_table(con, "requests"):
            return
        has_end = "end" in _table_columns(con, "requests")
        overlap = ' OR ("end" IS NOT NULL AND "end" > ?)' if has_end else ""
        sql = (f"SELECT {_select_canonical(con, 'requests', db_path)} FROM requests "
               f"WHERE ts < ? AND (ts >= ?{overlap})")
        params = [end, start, start] if has_end else [end, start]
        # A relation's reader streams (an execute() result would copy every row first).
        with con.sql(sql, params=params).to_arrow_reader(batch_size=batch_rows) as reader:
            # The reader hands over DuckDB's own chunks (tens of thousands of rows); gathered into
            # batches of `batch_rows`, the engine's frames stay in a few contiguous chunks.
            pending: list = []
            rows = 0
            for rb in itertools.chain(reader, [None]):
                if rb is not None and rb.num_rows:
                    pending.append(rb)
                    rows += rb.num_rows
                if pending and (rb is None or rows >= batch_rows):
                    got = pl.from_arrow(pa.Table.from_batches(pending))
                    assert isinstance(got, pl.DataFrame)
                    pending, rows = [], 0
                    yield got.rechunk().cast(dict(target))  # type: ignore[arg-type]


def future_rows(db_path: str | Path, table: str, now: datetime) -> FutureRows | None:
    """The future-dated rows of a stored table (future.scan, in SQL with bound limits): for the
    tables a report leaves in the store (telemetry, requests). One scan of its time columns."""
    with connect(db_path) as con:
        if not _has_table(con, table):
            return None
        have = set(_table_columns(con, table))
        lim = [(c, t) for c, t in future.limits(table, now) if c in have]
        if not lim:
            return None
        past = " OR ".join(f"{_q(c)} > ?" for c, _ in lim)
        first = ", ".join(f"min(CASE WHEN {_q(c)} > ? THEN {_q(c)} END)" for c, _ in lim)
        first = first if len(lim) == 1 else f"least({first})"
        row = _one(con, f"SELECT count(*) FILTER (WHERE {past}), {first} FROM {_q(table)}",
                   [t for _, t in lim] * 2)
    if not row or not row[0]:
        return None
    return FutureRows(table, int(row[0]), row[1].astimezone(timezone.utc))


def request_coverage(db_path: str | Path, start: datetime, end: datetime) -> pl.DataFrame:
    """The UTC hours each stored request source covers per model in [start, end), distinct
    (token_sources.coverage of the rows request_batches reads), summed in DuckDB: a few rows
    per model, source and hour, so the engine finds overlapping sources before it reads a batch."""
    with connect(db_path) as con:
        if not _has_table(con, "requests"):
            return pl.DataFrame(schema=SOURCE_HOURS)
        has_end = "end" in _table_columns(con, "requests")
        overlap = ' OR ("end" IS NOT NULL AND "end" > ?)' if has_end else ""
        inner = (f"SELECT {_select_canonical(con, 'requests', db_path)} FROM requests "
                 f"WHERE ts < ? AND (ts >= ?{overlap})")
        params: list[Any] = [end, start, start] if has_end else [end, start]
        s = "epoch_us(greatest(ts, ?::TIMESTAMPTZ))"
        e = 'epoch_us(least("end", ?::TIMESTAMPTZ))'
        bucket = '"end" IS NOT NULL AND "end" > ts'
        sql = (f"SELECT DISTINCT model, coalesce(source, 'gateway') AS source, "
               f"CAST(floor({s} / {HOUR_US}) AS BIGINT) AS h0, "
               f"CAST(CASE WHEN {bucket} THEN floor(({e} - 1) / {HOUR_US}) + 1 "
               f"ELSE floor({s} / {HOUR_US}) + 1 END AS BIGINT) AS h1 FROM ({inner})")
        got = pl.from_arrow(con.sql(sql, params=[start, end, start, *params]).to_arrow_table())
    assert isinstance(got, pl.DataFrame)
    return got.cast(dict(SOURCE_HOURS))  # type: ignore[arg-type]


def _where(table: str, filters: dict[str, list[str]] | None, ids: list[str] | None) -> tuple[str, list[Any]] | None:
    """WHERE clause and its parameters; None when a filter allows nothing."""
    columns = {c.name: c for c in TABLES[table]}
    clauses: list[str] = []
    params: list[Any] = []
    conditions: list[tuple[str, list[Any]]] = list((filters or {}).items())
    if ids is not None:
        keys = _key_cols(table)
        if len(keys) != 1:
            raise ValueError(f"table {table} has no single id column to filter ids on")
        conditions.append((keys[0], list(ids)))
    for name, allowed in conditions:
        if name not in columns:
            raise ValueError(f"{table} has no column {name!r}")
        values = [v for v in allowed if v is not None]
        has_null = len(values) < len(allowed)
        if not values and not has_null:
            return None
        col = _q(name)
        if _sql_type(columns[name].dtype) != "VARCHAR":
            col = f"CAST({col} AS VARCHAR)"
        parts = []
        if values:
            parts.append(f"{col} IN ({', '.join('?' for _ in values)})")
            params += [str(v) for v in values]
        if has_null:
            parts.append(f"{_q(name)} IS NULL")
        clauses.append("(" + " OR ".join(parts) + ")")
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def stored_between(db_path: str | Path, table: str, start: datetime, end: datetime) -> pl.DataFrame:
    """The stored records of an interval table that overlap or touch [start, end], canonical.

    What an import asks before it writes (importers.StoredLookup): which cards a stored job
    holds, which stored record a re-export continues. An empty frame when there is no store yet.
    """
    if table not in SPANS:
        raise ValueError(f"table {table!r} has no time span")
    lo, hi = SPANS[table]
    path = Path(db_path)
    if not path.exists():
        return empty(table)
    with connect(path) as con:
        if not _has_table(con, table):
            return empty(table)
        sql = (f"SELECT {_select_canonical(con, table, path)} FROM {_q(table)} "
               f"WHERE {_q(lo)} <= ? AND ({_q(hi)} IS NULL OR {_q(hi)} >= ?) "
               f"ORDER BY {', '.join(_q(c) for c in _order_cols(table))}")
        return _frame(con, sql, [end, start], schema(table))


def query_records(
    db_path: str | Path,
    table: str,
    *,
    filters: dict[str, list[str]] | None = None,
    ids: list[str] | None = None,
    limit: int | None = 100,
    offset: int = 0,
) -> pl.DataFrame:
    """One page of raw records of a contract table, sorted by record key, in the canonical schema.

    `filters` maps a column to its allowed values (compared as text; None matches NULL); `ids`
    keeps the records whose single-column record key is one of them. `limit=None` reads to the end.
    """
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}")
    if offset < 0 or (limit is not None and limit < 0):
        raise ValueError("limit and offset must not be negative")
    where = _where(table, filters, ids)
    with connect(db_path) as con:
        if where is None or not _has_table(con, table):
            return empty(table)
        clause, params = where
        order = ", ".join(_q(c) for c in _order_cols(table))
        sql = f"SELECT {_select_canonical(con, table, db_path)} FROM {_q(table)}{clause} ORDER BY {order}"
        if limit is not None:
            sql += " LIMIT ?"
            params = [*params, limit]
        sql += " OFFSET ?"
        return _frame(con, sql, [*params, offset], schema(table))


def count_records(
    db_path: str | Path,
    table: str,
    *,
    filters: dict[str, list[str]] | None = None,
    ids: list[str] | None = None,
) -> int:
    """How many records query_records would page through with these filters."""
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}")
    where = _where(table, filters, ids)
    with connect(db_path) as con:
        if where is None or not _has_table(con, table):
            return 0
        clause, params = where
        row = _one(con, f"SELECT count(*) FROM {_q(table)}{clause}", params)
        return int(row[0]) if row else 0


# Public names for the modules built on the store (audit.py, close.py): they never reach into the
# private helpers above.
quote = _q
first_row = _one
has_table = _has_table
table_columns = _table_columns
session = _session
rollback = _rollback
open_store = _open
os_user = _os_user
