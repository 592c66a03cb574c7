"""Read a usage bundle folder (CSV, Parquet, JSONL) into validated frames plus rejections."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from .config import Config
from .contract import REJECTED_SCHEMA, TABLE_NAMES, empty


@dataclass
class Bundle:
    """Validated contract tables. Every table is present (empty when the bundle lacks it)."""

    tables: dict[str, pl.DataFrame]
    # one row per rejected input row: table, row (1-based data row in its file), reason, file
    rejected: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=REJECTED_SCHEMA | {"file": pl.String}))
    # tables the source actually had (a missing table is a coverage gap, never guessed)
    present: frozenset[str] = frozenset()
    # notes that are not rejections: identical duplicates dropped, etc. (what, detail)
    notes: list[tuple[str, str]] = field(default_factory=list)

    def __getitem__(self, table: str) -> pl.DataFrame:
        return self.tables[table]

    @classmethod
    def from_frames(cls, frames: dict[str, pl.DataFrame], **kw) -> "Bundle":
        """Build a bundle from already-canonical frames (tests, importers)."""
        tables = {t: frames.get(t, empty(t)) for t in TABLE_NAMES}
        return cls(tables=tables, present=frozenset(frames), **kw)


def read_bundle(path: str | Path, config: Config | None = None) -> Bundle:
    raise NotImplementedError
