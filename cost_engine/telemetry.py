"""Where the engine reads telemetry from: a frame in memory or the store, one time window at a time.

Telemetry is the one input that grows with the sampling rate (a thousand cards at one sample a
minute is 44 M rows a month), so the engine never asks for all of it at once: it reads windows
of time (`window`), one card for a timeline (`card`), and counts (`count`, `outside`). A frame
source serves bundles read into memory and tests; a store source runs the same questions as
SQL with bound parameters against the DuckDB store, so the raw samples stay on disk.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Iterator, Protocol

import polars as pl

from .bundle import release_pages
from .config import Activity
from .contract import TS
from .quarter_store import Rollup
from .quarters import Q_US, rule_key

COLUMNS = ("gpu_id", "ts", "util_pct", "power_w", "energy_j")
SCHEMA = pl.Schema({"gpu_id": pl.String, "ts": TS, "util_pct": pl.Float64, "power_w": pl.Float64, "energy_j": pl.Float64})


class Reader(Protocol):
    """An open view of a telemetry source (one store connection for all the windows of a run)."""

    def count(self) -> int: ...

    def outside(self, gpu_ids: pl.Series) -> int: ...

    def cards(self, start: datetime, end: datetime) -> pl.Series: ...

    def window(self, start: datetime, end: datetime, codes: pl.DataFrame) -> pl.DataFrame: ...

    def quarters(self, cells: pl.DataFrame, codes: pl.DataFrame) -> pl.DataFrame: ...

    def rollup(self, rule: Activity) -> Rollup | None: ...


class TelemetrySource(Protocol):
    def reader(self) -> contextlib.AbstractContextManager[Reader]: ...

    def card(self, gpu_id: str, start: datetime, end: datetime) -> pl.DataFrame: ...

    def only(self, gpu_ids: list[str]) -> "TelemetrySource": ...

    def held(self, gpu_id: str) -> pl.DataFrame | None: ...


CODED = ("gpu_id", "ts", "util_pct", "power_w", "energy_j")
# Rows per slice a frame source scans at a time (FrameTelemetry.window and .outside).
_SLICE_ROWS = 4_000_000


def _empty() -> pl.DataFrame:
    return pl.DataFrame(schema=SCHEMA)


def _coded_schema(codes: pl.DataFrame) -> pl.Schema:
    return pl.Schema({"gpu_id": codes.schema["gc"], **{c: SCHEMA[c] for c in CODED[1:]}})


@dataclass(frozen=True)
class FrameTelemetry:
    """Telemetry held as a frame (a bundle read into memory, a test).

    `rolled`: (quarters.rule_key, Rollup) of this frame, made by `quarters.cells_duckdb` (tests);
    the engine reads it like a store's rollup."""

    frame: pl.DataFrame
    rolled: tuple[str, Rollup] | None = None

    @contextlib.contextmanager
    def reader(self) -> Iterator["FrameTelemetry"]:
        yield self

    def count(self) -> int:
        return self.frame.height

    def outside(self, gpu_ids: pl.Series) -> int:
        # In slices, letting go of each slice's mapped pages: every card id of a big bundle's
        # telemetry at once would be gigabytes resident.
        known = gpu_ids.implode()
        n = 0
        for part in self.frame.iter_slices(n_rows=_SLICE_ROWS):
            n += part.height - part.select(pl.col("gpu_id").is_in(known).sum()).item()
            release_pages()
        return n

    def cards(self, start: datetime, end: datetime) -> pl.Series:
        """The card ids with at least one sample in [start, end) (the ledger cuts these finer)."""
        parts = [pl.Series("gpu_id", [], dtype=pl.String)]
        for part in self.frame.iter_slices(n_rows=_SLICE_ROWS):
            parts.append(part.filter((pl.col("ts") >= start) & (pl.col("ts") < end)).get_column("gpu_id").unique())
            release_pages()
        return pl.concat(parts).unique().sort()

    def window(self, start: datetime, end: datetime, codes: pl.DataFrame) -> pl.DataFrame:
        """Samples with start <= ts < end of the cards in `codes` (gpu_id, gc), in no particular
        order, with card codes in place of ids (`gpu_id` holds the code)."""
        parts = []
        # Slice by slice: a big bundle's telemetry is memory-mapped from the reader's spill
        # files, and one filter (or gather) over the whole frame would fault in, or copy, every
        # column of it for each window. A slice whose times miss the window is skipped; after
        # each slice the pages it touched are let go (they stay in the page cache).
        for part in self.frame.iter_slices(n_rows=_SLICE_ROWS):
            ts = part.get_column("ts")
            lo, hi = ts.min(), ts.max()
            if lo is not None and lo < end and hi >= start:
                parts.append(
                    part.filter((pl.col("ts") >= start) & (pl.col("ts") < end))
                    .join(codes, on="gpu_id", how="inner")
                    .select(pl.col("gc").alias("gpu_id"), *CODED[1:])
                )
            release_pages()
        return pl.concat(parts) if parts else pl.DataFrame(schema=_coded_schema(codes))

    def quarters(self, cells: pl.DataFrame, codes: pl.DataFrame) -> pl.DataFrame:
        """Samples of the given (gpu_id, q) quarter hours, coded as in `window`: one join on (card, quarter)."""
        parts = []
        for part in self.frame.iter_slices(n_rows=_SLICE_ROWS):
            parts.append(
                part.with_columns((pl.col("ts").dt.epoch("us") // Q_US).alias("q"))
                .join(cells.select("gpu_id", "q"), on=["gpu_id", "q"], how="semi")
                .join(codes, on="gpu_id", how="inner")
                .select(pl.col("gc").alias("gpu_id"), *CODED[1:])
            )
            release_pages()
        return pl.concat(parts) if parts else pl.DataFrame(schema=_coded_schema(codes))

    def rollup(self, rule: Activity) -> Rollup | None:
        return self.rolled[1] if self.rolled is not None and self.rolled[0] == rule_key(rule) else None

    def card(self, gpu_id: str, start: datetime, end: datetime) -> pl.DataFrame:
        f = self.frame
        return f.filter((pl.col("gpu_id") == gpu_id) & (pl.col("ts") >= start) & (pl.col("ts") < end)).select(COLUMNS)

    def only(self, gpu_ids: list[str]) -> "FrameTelemetry":
        return FrameTelemetry(self.frame.filter(pl.col("gpu_id").is_in(gpu_ids)))  # no rollup: the views' use

    def held(self, gpu_id: str) -> pl.DataFrame | None:
        """The spans of time a card's samples are limited to; None: the whole period."""
        return None


@dataclass(frozen=True)
class StoreTelemetry:
    """Telemetry in an ailedger store, read per window with bound parameters (never loaded whole).

    `gpu_ids` limits the source to some cards (a tenant-scoped view); None is every card.
    Each `reader()` holds one read-only connection for its block; keep the block to one run.
    """

    path: Path
    gpu_ids: tuple[str, ...] | None = None

    @contextlib.contextmanager
    def reader(self) -> Iterator["_StoreReader"]:
        from . import store

        with store.connect(self.path) as con:
            store.check_columns(con, "telemetry", self.path)
            yield _StoreReader(con, self.gpu_ids)

    def card(self, gpu_id: str, start: datetime, end: datetime) -> pl.DataFrame:
        if self.gpu_ids is not None and gpu_id not in self.gpu_ids:
            return _empty()
        with self.reader() as r:
            return r.select("gpu_id = ? AND ts >= ? AND ts < ?", [gpu_id, start, end])

    def only(self, gpu_ids: list[str]) -> "StoreTelemetry":
        keep = sorted(set(gpu_ids) & set(self.gpu_ids)) if self.gpu_ids is not None else sorted(set(gpu_ids))
        return StoreTelemetry(self.path, tuple(keep))

    def held(self, gpu_id: str) -> pl.DataFrame | None:
        return None


SPANS = pl.Schema({"gpu_id": pl.String, "t0": TS, "t1": TS})


@dataclass(frozen=True)
class HeldTelemetry:
    """A source limited to the time its cards were held by some tenants (a tenant-scoped view).

    A card shared over time with other tenants shows only the allowed tenants' intervals: its
    samples are those taken inside `spans` (gpu_id, t0, t1: disjoint, sorted), and `held`
    hands the spans to views that cut the samples' intervals there (views.card_timeline).
    The engine's stages never read a scoped source (the computation is scoped after them);
    its `reader` serves counts and windows of the allowed cards.
    """

    inner: TelemetrySource
    spans: pl.DataFrame

    def reader(self) -> contextlib.AbstractContextManager[Reader]:
        return self.inner.reader()

    def card(self, gpu_id: str, start: datetime, end: datetime) -> pl.DataFrame:
        spans = self.spans.filter(pl.col("gpu_id") == gpu_id)
        raw = self.inner.card(gpu_id, start, end) if spans.height else _empty()
        if raw.height == 0:
            return raw
        # Each sample against the last span starting at or before it (spans are disjoint).
        inside = raw.sort("ts").join_asof(spans.select("t0", "t1").sort("t0"), left_on="ts", right_on="t0",
                                          strategy="backward")
        return inside.filter(pl.col("t1").is_not_null() & (pl.col("ts") < pl.col("t1"))).select(COLUMNS)

    def only(self, gpu_ids: list[str]) -> "HeldTelemetry":
        return HeldTelemetry(self.inner.only(gpu_ids), self.spans.filter(pl.col("gpu_id").is_in(gpu_ids)))

    def held(self, gpu_id: str) -> pl.DataFrame:
        return self.spans.filter(pl.col("gpu_id") == gpu_id).select("t0", "t1")


def merged_spans(intervals: pl.DataFrame) -> pl.DataFrame:
    """gpu_id, t0, t1 intervals (possibly touching or overlapping) as disjoint sorted spans."""
    if intervals.height == 0:
        return pl.DataFrame(schema=SPANS)
    s = intervals.select(pl.col("gpu_id").cast(pl.String), "t0", "t1").sort("gpu_id", "t0")
    # A span starts where a card's interval begins after every earlier one of it has ended.
    reach = pl.col("t1").cum_max().shift(1).over("gpu_id")
    s = s.with_columns((reach.is_null() | (pl.col("t0") > reach)).cum_sum().alias("_span"))
    return s.group_by("gpu_id", "_span").agg(pl.col("t0").min(), pl.col("t1").max()).drop("_span").sort("gpu_id", "t0")


class _StoreReader:
    def __init__(self, con, gpu_ids: tuple[str, ...] | None) -> None:
        self.con = con
        self.gpu_ids = gpu_ids
        from . import store

        self.present = store._has_table(con, "telemetry")

    def _scope(self, where: str, params: list, card: str = "gpu_id") -> tuple[str, list]:
        """`where`, limited to the source's cards when it has a list (`card`: the id column)."""
        if self.gpu_ids is None:
            return where, params
        return f"({where}) AND {card} IN (SELECT unnest(?))", [*params, list(self.gpu_ids)]

    def select(self, where: str, params: list) -> pl.DataFrame:
        if not self.present:
            return _empty()
        where, params = self._scope(where, params)
        got = pl.from_arrow(
            self.con.sql(f"SELECT {', '.join(COLUMNS)} FROM telemetry WHERE {where}", params=params).to_arrow_table()
        )
        assert isinstance(got, pl.DataFrame)
        return got.cast(dict(SCHEMA)) if got.height else _empty()

    def _count(self, where: str, params: list) -> int:
        from . import store

        row = store._one(self.con, f"SELECT count(*) FROM telemetry WHERE {where}", params)
        return int(row[0]) if row else 0

    def count(self) -> int:
        if not self.present:
            return 0
        where, params = self._scope("TRUE", [])
        return self._count(where, params)

    def outside(self, gpu_ids: pl.Series) -> int:
        if not self.present:
            return 0
        where, params = self._scope("gpu_id NOT IN (SELECT unnest(?))", [gpu_ids.to_list()])
        return self._count(where, params)

    def cards(self, start: datetime, end: datetime) -> pl.Series:
        if not self.present:
            return pl.Series("gpu_id", [], dtype=pl.String)
        where, params = self._scope("ts >= ? AND ts < ?", [start, end])
        rows = self.con.sql(f"SELECT DISTINCT gpu_id FROM telemetry WHERE {where} ORDER BY gpu_id", params=params).fetchall()
        return pl.Series("gpu_id", [r[0] for r in rows], dtype=pl.String)

    def rollup(self, rule: Activity) -> Rollup | None:
        """The store's rollup when it goes with the data this connection sees and with `rule`."""
        from . import quarter_store

        return quarter_store.load(self.con, rule, self.gpu_ids) if self.present else None

    def rollup_window(self, names: pl.Series, qa: int | None, qb: int | None) -> pl.DataFrame:
        """The rollup's cells of `names` in quarters [qa, qb) (quarter_store.window)."""
        from . import quarter_store

        return quarter_store.window(self.con, names, qa, qb)

    def rollup_sampled(self, names: pl.Series, a_us: int, b_us: int) -> pl.Series:
        from . import quarter_store

        return quarter_store.sampled(self.con, names, a_us, b_us)

    def rollup_samples(self, names: pl.Series) -> int:
        from . import quarter_store

        return quarter_store.samples_of(self.con, names)

    def quarters(self, cells: pl.DataFrame, codes: pl.DataFrame) -> pl.DataFrame:
        """As FrameTelemetry.quarters: one equi-join on (card, quarter), linear in the samples scanned."""
        if not self.present or cells.height == 0:
            return pl.DataFrame(schema=_coded_schema(codes))
        want = cells.select("gpu_id", "q").join(codes.select("gpu_id", "gc"), on="gpu_id")
        lo, hi = int(want["q"].min()) * Q_US, (int(want["q"].max()) + 1) * Q_US
        self.con.register("_ailedger_cells", want.to_arrow())
        try:
            # The time range first (the scan skips the rest), then one equi-join on (card, quarter).
            got = pl.from_arrow(
                self.con.sql(
                    "SELECT c.gc AS gpu_id, t.ts, t.util_pct, t.power_w, t.energy_j FROM telemetry t "
                    f"JOIN _ailedger_cells c ON c.gpu_id = t.gpu_id AND c.q = epoch_us(t.ts) // {Q_US} "
                    "WHERE t.ts >= make_timestamp(?) AT TIME ZONE 'UTC' AND t.ts < make_timestamp(?) AT TIME ZONE 'UTC'",
                    params=[lo, hi],
                ).to_arrow_table()
            )
        finally:
            self.con.unregister("_ailedger_cells")
        assert isinstance(got, pl.DataFrame)
        return got.cast(dict(_coded_schema(codes))) if got.height else pl.DataFrame(schema=_coded_schema(codes))

    def window(self, start: datetime, end: datetime, codes: pl.DataFrame) -> pl.DataFrame:
        """As FrameTelemetry.window; DuckDB maps ids to codes, so no id strings cross into Python."""
        if not self.present:
            return pl.DataFrame(schema=_coded_schema(codes))
        where, params = self._scope("t.ts >= ? AND t.ts < ?", [start, end], card="t.gpu_id")
        self.con.register("_ailedger_codes", codes.select("gpu_id", "gc").to_arrow())
        try:
            got = pl.from_arrow(
                self.con.sql(
                    "SELECT c.gc AS gpu_id, t.ts, t.util_pct, t.power_w, t.energy_j FROM telemetry t "
                    f"JOIN _ailedger_codes c ON c.gpu_id = t.gpu_id WHERE {where}",
                    params=params,
                ).to_arrow_table()
            )
        finally:
            self.con.unregister("_ailedger_codes")
        assert isinstance(got, pl.DataFrame)
        return got.cast(dict(_coded_schema(codes))) if got.height else pl.DataFrame(schema=_coded_schema(codes))


__all__ = ["COLUMNS", "SCHEMA", "TelemetrySource", "FrameTelemetry", "StoreTelemetry", "HeldTelemetry",
           "merged_spans"]
