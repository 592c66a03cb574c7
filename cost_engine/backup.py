"""Back a store up as Parquet and restore it: DuckDB's EXPORT / IMPORT DATABASE, taken under the
store's own lock so a backup never holds half an ingest."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import duckdb

from . import store
from .api import CONFIG_NAME


class BackupError(ValueError):
    """The backup folder or the restore target cannot be used."""


@dataclass(frozen=True)
class BackupResult:
    """Rows per table of the store that was exported or restored."""

    folder: Path
    db: Path
    rows: dict[str, int]


def _sql_string(path: Path) -> str:
    """A SQL string literal of a path. EXPORT / IMPORT DATABASE take their folder only as a
    literal (DuckDB's parser rejects a bound parameter there), so quotes are doubled here."""
    return "'" + str(path).replace("'", "''") + "'"


def _row_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    names = [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() ORDER BY table_name"
    ).fetchall()]
    return {n: con.table(n).shape[0] for n in names}


def export_parquet(db_path: str | Path, folder: str | Path) -> BackupResult:
    """Write every table of the store (records, ingests, rejections, meta) as Parquet into folder,
    with DuckDB's schema.sql and load.sql beside them.

    The export reads through a read-only connection: it waits while an ingest holds the store
    and holds off ingests while it runs, so the folder is one committed state. The store's
    config (FILE.toml beside it) comes along as ailedger.toml. The folder must be new or empty
    (a backup never overwrites another).
    """
    db, out = Path(db_path), Path(folder).resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BackupError(f"{folder}: exists and is not an empty folder (a backup never overwrites one)")
    existed = out.exists()
    try:
        with store.connect(db, read_only=True) as con:
            con.execute(f"EXPORT DATABASE {_sql_string(out)} (FORMAT parquet)")
            rows = _row_counts(con)
    except store.StoreError as exc:
        # The folder was new or empty: what is in it now is a part of a backup, never to be
        # restored from (a damaged store fails half way through its tables).
        parts = list(out.iterdir()) if existed else ([out] if out.is_dir() else [])
        for part in parts:
            if part.is_dir():
                shutil.rmtree(part)
            else:
                part.unlink()
        raise BackupError(str(exc)) from None
    config = db.with_suffix(".toml")
    if config.is_file():
        shutil.copyfile(config, out / CONFIG_NAME)
    return BackupResult(folder=out, db=db, rows=rows)


def restore_parquet(folder: str | Path, db_path: str | Path) -> BackupResult:
    """A new store file from a folder written by export_parquet (DuckDB's IMPORT DATABASE).

    Refuses an existing target, so a restore never replaces a store; a failed restore leaves
    no file behind. The backup's ailedger.toml becomes the config beside the new store.
    """
    src, db = Path(folder).resolve(), Path(db_path)
    if not (src / "schema.sql").is_file() or not (src / "load.sql").is_file():
        raise BackupError(f"{folder}: not a store backup (no schema.sql and load.sql; "
                          "make one with `ailedger export parquet STORE FOLDER`)")
    if db.exists():
        raise BackupError(f"{db}: exists; restore into a new file and move it in place once checked")
    db.parent.mkdir(parents=True, exist_ok=True)
    try:
        con = duckdb.connect(str(db))
        try:
            con.execute(f"IMPORT DATABASE {_sql_string(src)}")
            rows = _row_counts(con)
        finally:
            con.close()
        if not store.is_store(db):
            raise BackupError(f"{folder}: the restored database has no ailedger meta table: not a store backup")
    except (duckdb.Error, BackupError) as exc:
        for leftover in (db, db.with_name(db.name + ".wal")):
            leftover.unlink(missing_ok=True)
        if isinstance(exc, BackupError):
            raise
        raise BackupError(f"{folder}: cannot restore: {str(exc).strip().splitlines()[0]}") from None
    if (src / CONFIG_NAME).is_file() and not db.with_suffix(".toml").exists():
        shutil.copyfile(src / CONFIG_NAME, db.with_suffix(".toml"))
    return BackupResult(folder=src, db=db, rows=rows)
