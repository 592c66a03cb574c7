"""The store's audit trail and data versions: who ingested what from which files, and the store as it was at any version.

A data version is an ingest id (`ingests.id`): version V is the store after ingest V committed.
A row's version span is [its `_ingest_id`, its `_valid_to`): live rows have no end, the rows a
`--replace` overwrote sit in `superseded_<table>` with the id of the ingest that replaced them.
`snapshot(db, V)` copies the rows valid at V into a temporary store file (a version filter on
each table, no join on time), which every reader then reads like the store itself. See docs/close.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import duckdb

from . import store
from .contract import TABLE_NAMES

_CHUNK = 1 << 20


def file_hashes(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """path, sha256 and bytes of each source file (a folder: every file under it, sorted)."""
    out: list[dict[str, Any]] = []
    for p in paths:
        p = Path(p)
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        for f in files:
            h = hashlib.sha256()
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(_CHUNK), b""):
                    h.update(chunk)
            out.append({"path": str(f), "sha256": h.hexdigest(), "bytes": f.stat().st_size})
    return out


def current_version(db_path: str | Path) -> int:
    """The store's data version: the id of its last committed ingest (0 before any)."""
    with store.connect(db_path) as con:
        return version_in(con)


def version_in(con: duckdb.DuckDBPyConnection) -> int:
    row = store.first_row(con, "SELECT coalesce(max(id), 0) FROM ingests")
    return int(row[0]) if row else 0


def version_of(source: str | Path) -> int | None:
    """The data version of a report's source: a store's, or None for a bundle folder (no versions)."""
    p = Path(source)
    return current_version(p) if p.is_file() and store.is_store(p) else None


def trail(db_path: str | Path) -> list[dict[str, Any]]:
    """Every committed ingest, oldest first: version, time, user, source, replace, its files with
    their sha256, and per table the rows inserted / unchanged / replaced."""
    with store.connect(db_path) as con:
        has_files = "files" in store.table_columns(con, "ingests")
        has_user = "user" in store.table_columns(con, "ingests")
        user = '"user"' if has_user else "NULL"
        files = "files" if has_files else "NULL"
        rows = con.execute(f'SELECT id, ingested_at, {user}, source, "replace", tables, {files} '
                           "FROM ingests ORDER BY id").fetchall()
    return [{"data_version": int(r[0]), "at": r[1].isoformat().replace("+00:00", "Z"), "user": r[2],
             "source": r[3], "replace": bool(r[4]), "tables": json.loads(r[5] or "{}"),
             "files": json.loads(r[6]) if r[6] else []} for r in rows]


def config_at(db_path: str | Path, version: int) -> str | None:
    """The config text the last ingest at or before `version` recorded (None: none recorded)."""
    with store.connect(db_path) as con:
        if not store.has_table(con, "configs"):
            return None
        row = store.first_row(con, "SELECT text FROM configs WHERE ingest_id <= ? ORDER BY ingest_id DESC LIMIT 1",
                         [version])
    return None if row is None else row[0]


@contextlib.contextmanager
def snapshot(db_path: str | Path, version: int) -> Iterator[Path]:
    """A temporary store file holding exactly what `db_path` held at data `version` (removed after).

    Each contract table is its live rows with `_ingest_id <= V` and its superseded rows valid at V
    (`_ingest_id <= V < _valid_to`); the log, rejections, notes and present tables are those of
    ingests up to V. The quarter-hour rollup is not copied, so reports read raw samples.
    """
    src = Path(db_path)
    folder = Path(tempfile.mkdtemp(prefix=".ailedger-asof-"))
    target = folder / "as-of.duckdb"
    try:
        # One read-only connection to the store (it waits for a writer, and sees one committed
        # state); the snapshot file is attached to it for writing.
        with store.connect(src) as con:
            last = version_in(con)
            if version < 1 or version > last:
                raise ValueError(f"{src}: data version {version} does not exist (the store has versions 1 to {last})")
            con.execute(f"ATTACH {_sql_string(target)} AS snap (READ_WRITE)")
            try:
                _copy(con, version)
            finally:
                con.execute("DETACH snap")
        yield target
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _sql_string(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _src_tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()").fetchall()
    return {r[0] for r in rows}


def _copy(con: duckdb.DuckDBPyConnection, v: int) -> None:
    have = _src_tables(con)
    q = store.quote
    con.execute("CREATE TABLE snap.meta AS SELECT * FROM meta WHERE key NOT LIKE 'rollup_%'")
    con.execute("CREATE TABLE snap.ingests AS SELECT * FROM ingests WHERE id <= ?", [v])
    for name in ("rejected", "notes", "present_tables", "configs"):
        if name in have:
            con.execute(f"CREATE TABLE snap.{q(name)} AS SELECT * FROM {q(name)} WHERE ingest_id <= ?", [v])
    for t in TABLE_NAMES:
        if t not in have:
            continue
        sql = f"SELECT * FROM {q(t)} WHERE _ingest_id <= $v"
        old = store.SUPERSEDED + t
        if old in have:
            sql += (f" UNION ALL BY NAME SELECT * EXCLUDE (_valid_to) FROM {q(old)} "
                    "WHERE _ingest_id <= $v AND _valid_to > $v")
        con.execute(f"CREATE TABLE snap.{q(t)} AS {sql}", {"v": v})


def version_label(token: str) -> str:
    """What an export says its data version is: a store's data version (the ingest id inside
    store.data_version's `store_id:last ingest id:count`), else the first 8 characters of a
    folder's stamp."""
    parts = token.split(":")
    if len(parts) == 3 and parts[1].isdigit():
        return f"v{parts[1]}"
    return token[:8]
