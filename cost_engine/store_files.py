"""What a file that should be an ailedger store is, and the file-level steps that keep a store
usable through faults: the first ingest's temporary file moved into place, what an interrupted
creation left behind, a write that found no room on the disk, and a file that is damaged (cut
short or overwritten: only a backup brings it back)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import duckdb

CREATING = ".creating"  # suffix of the temporary file a first ingest writes (see store._create)


# What DuckDB says when the file itself is broken, not busy: a read past its end (truncated) or
# a block whose checksum does not match (overwritten).
_DAMAGE = ("could not read enough bytes", "corrupt database file")


def is_damage(exc: BaseException) -> bool:
    """True when a DuckDB error says the database file is damaged."""
    return isinstance(exc, duckdb.Error) and any(words in str(exc).lower() for words in _DAMAGE)


def damaged(path: str | Path) -> str:
    """The one message for a damaged store, naming the file."""
    return f"damaged store {path}: restore from backup (docs/store.md)"


def truncated(con: duckdb.DuckDBPyConnection, path: Path) -> bool:
    """True when the file is shorter than the blocks in use need (a copy or a disk that stopped
    short): one pragma and a stat, so every open can check, long before a query reads past the
    end. Used blocks, not total ones: DuckDB shrinks a file whose trailing blocks are free while
    still counting them, so a healthy store can be shorter than all its blocks."""
    row = con.execute("PRAGMA database_size").fetchall()
    if not row:
        return False
    block_size, used_blocks = row[0][2], row[0][4]
    try:
        size = path.stat().st_size
    except OSError:
        return False
    return size < int(block_size) * int(used_blocks)


def looks_like_duckdb(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(12)[8:12] == b"DUCK"
    except OSError:  # missing, a folder, unreadable
        return False


def describe_file(path: Path) -> str:
    """What a file that is not a usable store is, for an error message."""
    if not path.exists():
        return f"{path} does not exist"
    if path.is_dir():
        return f"{path} is a folder, not an ailedger store"
    if not looks_like_duckdb(path):
        return f"{path} is a file, but neither a bundle folder nor an ailedger DuckDB store"
    if empty_duckdb(path):
        return (f"{path} is a DuckDB file with no tables: an ingest that was creating it was interrupted "
                "before it committed. Run the ingest again: it replaces this empty file")
    return f"{path} is a DuckDB database, but not an ailedger store (it has no ailedger meta table)"


def empty_duckdb(path: Path) -> bool:
    """A DuckDB file without a single table, view or sequence: what an interrupted first ingest
    of an older ailedger left behind (it created the file in place). False when it is in use."""
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return False
    try:
        row = con.execute("SELECT (SELECT count(*) FROM duckdb_tables() WHERE NOT internal) "
                          "+ (SELECT count(*) FROM duckdb_views() WHERE NOT internal) "
                          "+ (SELECT count(*) FROM duckdb_sequences())").fetchone()
        return bool(row) and row[0] == 0
    except duckdb.Error:
        return False
    finally:
        con.close()


# What the operating system says when a write finds no room (ENOSPC, EFBIG, EDQUOT).
_NO_ROOM = ("No space left on device", "File too large", "Disk quota exceeded")


def no_room(exc: BaseException) -> str | None:
    """The OS's words when `exc` (or what caused it) is a write that found no room, else None."""
    seen: BaseException | None = exc
    while seen is not None:
        for words in _NO_ROOM:
            if words.lower() in str(seen).lower():
                return words
        seen = seen.__cause__ or seen.__context__
    return None


def publish(tmp: Path, path: Path) -> bool:
    """Move `tmp` to `path` unless `path` exists (then False); atomic where hard links work."""
    try:
        os.link(tmp, path)  # fails when path exists: never replaces another process's store
        return True
    except FileExistsError:
        return False
    except OSError:  # a file system without hard links
        if path.exists():
            return False
        os.replace(tmp, path)
        return True


def clear_interrupted(path: Path) -> None:
    """Remove the temporary files of _create whose process is gone (its pid is in the name)."""
    with contextlib.suppress(OSError):
        for tmp in path.parent.glob(f".{path.name}.*{CREATING}"):
            pid = tmp.name[len(path.name) + 2:].split("-", 1)[0]
            if pid.isdigit() and not alive(int(pid)):
                for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
                    leftover.unlink(missing_ok=True)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, but another user's
        return True
    return True
