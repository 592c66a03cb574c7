"""Read a usage bundle folder (CSV, Parquet, JSONL) into validated contract frames plus rejections.

Every format is first read into a frame of raw columns (strings, or already-typed Parquet
columns) with a `_row` column; one shared, vectorised validation pipeline then parses,
checks and deduplicates it, so all three formats accept and reject exactly the same rows.

Large CSV and Parquet files (`bundle_stream.STREAM_MIN_BYTES` and up; gzip and Parquet count 8x their
size) are not loaded whole: they are read and validated batch by batch, and the valid rows
are spilled to Arrow files that the returned frame memory-maps (see `_stream_batches`), so
the memory of reading stays bounded whatever the file size. Both paths give the same rows,
rejections and notes.

The parts: bundle_formats (CSV, Parquet and JSONL into raw columns), bundle_validate (the shared
validation: parsing, checks, duplicates) and bundle_stream (large files batch by batch, spilled
to mapped Arrow files). This module finds a folder's tables and puts them together.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from .config import Config
from .contract import TABLE_NAMES, empty
from .bundle_formats import _note_blank_rows, _read_raw, table_of
from .bundle_stream import _stream, _streams, release_pages, spill_folder
from .bundle_validate import REJECTIONS_SCHEMA, ROW, BundleError, validate_frame

__all__ = [
    "Bundle", "BundleError", "read_bundle", "validate_frame", "release_pages", "spill_folder", "ROW",
    "REJECTIONS_SCHEMA", "CONFIG_FILE", "COMPANION_FILES",
]

CONFIG_FILE = "ailedger.toml"
# Files a bundle may carry beside its tables that the reader leaves out without a note: the
# config, and the sample generator's list of the anomalies it planted (for tests and readers).
COMPANION_FILES = (CONFIG_FILE, "anomalies.json")


@dataclass
class Bundle:
    """Validated contract tables. Every table is present (empty when the bundle lacks it)."""

    tables: dict[str, pl.DataFrame]
    # one row per rejected input row: table, row (1-based data row in its file), reason, file
    rejected: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=REJECTIONS_SCHEMA))
    # tables the source actually had (a missing table is a coverage gap, never guessed)
    present: frozenset[str] = frozenset()
    # notes that are not rejections: identical duplicates dropped, etc. (what, detail)
    notes: list[tuple[str, str]] = field(default_factory=list)
    # every table holds each record key once (read_bundle deduplicates), so the store may
    # skip its own duplicate check; frames built by hand (importers, tests) keep it
    unique_keys: bool = False
    # tables left in a store rather than loaded (read from there when needed), with their rows
    # there; `store` is that store's path
    held_rows: dict[str, int] = field(default_factory=dict)
    store: Path | None = None

    def __getitem__(self, table: str) -> pl.DataFrame:
        return self.tables[table]

    @classmethod
    def from_frames(cls, frames: dict[str, pl.DataFrame], **kw) -> "Bundle":
        """Build a bundle from already-canonical frames (tests, importers)."""
        tables = {t: frames.get(t, empty(t)) for t in TABLE_NAMES}
        return cls(tables=tables, present=frozenset(frames), **kw)


def read_bundle(path: str | Path, config: Config | None = None, *, require_allocations: bool = True) -> Bundle:
    """Read and validate every contract table of a bundle folder.

    `require_allocations=False` reads a folder that adds to a store which already holds them
    (a late invoice: only costs.csv); a bundle that stands alone must have its allocations."""
    config = config or Config()
    root = Path(path)
    if not root.is_dir():
        raise BundleError(f"bundle folder {root} does not exist or is not a folder")
    files, unknown = _find_table_files(root)
    if require_allocations and "allocations" not in files:
        raise BundleError(f"bundle {root} has no allocations file (allocations.csv, .parquet or .jsonl)")

    notes: list[tuple[str, str]] = [("unknown file", name) for name in unknown]
    tables: dict[str, pl.DataFrame] = {}
    rejected: list[pl.DataFrame] = []
    for table in TABLE_NAMES:
        file = files.get(table)
        if file is None:
            tables[table] = empty(table)
            continue
        streamed = _stream(table, file, config, notes) if _streams(table, file) else None
        if streamed is not None:
            valid, rej = streamed
        else:
            raw = _read_raw(file)
            if raw.empty and raw.rejected.height == 0:
                notes.append(("empty file", file.name))
            _note_blank_rows(notes, file.name, raw.blank_rows)
            valid, rej = validate_frame(table, raw.frame, config, file.name, notes=notes)
            rej = pl.concat([raw.rejected, rej]).sort("row")
        tables[table] = valid
        rejected.append(rej)
    all_rejected = pl.concat(rejected) if rejected else pl.DataFrame(schema=REJECTIONS_SCHEMA)
    return Bundle(tables=tables, rejected=all_rejected, present=frozenset(files), notes=notes, unique_keys=True)


def _find_table_files(root: Path) -> tuple[dict[str, Path], list[str]]:
    """Map each contract table to its one file; other names are returned as unknown."""
    found: dict[str, list[Path]] = {}
    unknown: list[str] = []
    for entry in sorted(root.iterdir()):
        name = entry.name
        if name in COMPANION_FILES or name.startswith("."):
            continue  # the config belongs to the caller; dotfiles are OS/editor litter
        table = table_of(name) if entry.is_file() else None
        if table is None:
            unknown.append(name + ("/" if entry.is_dir() else ""))
        else:
            found.setdefault(table, []).append(entry)
    for table, paths in found.items():
        if len(paths) > 1:
            names = ", ".join(p.name for p in paths)
            raise BundleError(f"bundle {root} has {len(paths)} files for table {table}: {names}; keep one")
    return {t: p[0] for t, p in found.items()}, unknown
