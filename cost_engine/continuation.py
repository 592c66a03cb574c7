"""Hourly re-exports against what is stored: an imported record that continues a stored one takes its place.

An export taken every hour meets, at its edges, records that the previous export already
stored: a job that was still running (its end was the export time), a pod's run on a card
that goes on past the window, a throttling event cut at the window's end. Adding those
records beside the stored ones would count the overlap twice; refusing them as conflicts
would stop every hourly import. So, per record of the same identity (every column but the
id and the interval), stored and imported intervals that overlap or touch are one record:
their union, under the id of the earliest of them (a stored id wins a tie). The stored
records it replaces are handed to `store.ingest(supersede=...)`, which removes them in the
same transaction. A queue row of a job that was still waiting (no start) is superseded by
the job's later row. The result is what one export of the whole span would have stored.

Interval algorithm: one sort per identity and a running maximum of the ends (islands), never
a join filtered on time.
"""

from __future__ import annotations

import polars as pl

from .contract import RECORD_KEYS, TABLES, schema
from .intervals import islands as island_runs

# The time span of each interval table (an end that is unknown, a queue row still waiting,
# reaches forever): what store.stored_between and importers.folder_lookup filter on.
SPANS = {"allocations": ("start", "end"), "requests": ("ts", "end"), "events": ("start", "end"),
         "queue": ("submit", "start")}
# Tables whose records are intervals that a later export may continue: (start, end, id column).
MERGED = {"allocations": ("start", "end", "allocation_id"), "events": ("start", "end", None)}
_NEW = "__new"
_ISLAND = "__island"


def _canonical(table: str, frame: pl.DataFrame) -> pl.DataFrame:
    return frame.select([(pl.col(n).cast(d) if n in frame.columns else pl.lit(None, d)).alias(n)
                         for n, d in schema(table).items()])


def merge_stored(table: str, new: pl.DataFrame, stored: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(records to write, stored records they supersede) for an interval table of MERGED.

    `new` keeps its extra columns only where a record is not merged with another; the
    returned frame has the contract columns in contract order.
    """
    lo, hi, ident = MERGED[table]
    cols = [c.name for c in TABLES[table]]
    group = [c for c in cols if c not in (lo, hi, ident)]
    both = pl.concat([_canonical(table, new).with_columns(pl.lit(True).alias(_NEW)),
                      _canonical(table, stored).with_columns(pl.lit(False).alias(_NEW))])
    if both.height == 0:
        return _canonical(table, new), _canonical(table, stored).clear()
    # Islands: sorted by start within an identity, a record starts a new island when it begins
    # after every earlier end (touching records join: [a, b) and [b, c) are one run).
    both = both.sort([*group, lo, _NEW], nulls_last=True)
    both = both.with_columns(island_runs(lo, hi, group).alias(_ISLAND))
    keys = [*group, _ISLAND]
    islands = both.group_by(keys, maintain_order=True).agg(
        pl.col(_NEW).any().alias("__has_new"),
        pl.col(lo).min().alias(lo),
        pl.col(hi).max().alias(hi),
        *([pl.col(ident).first().alias(ident)] if ident else []),  # the earliest; stored first on a tie
    ).filter(pl.col("__has_new"))
    write = islands.select(cols)
    # A stored record is superseded when its island (with new records) is not exactly itself.
    match = [c for c in (lo, hi, ident) if c]
    old = both.filter(~pl.col(_NEW)).join(islands.select(keys), on=keys, how="semi", nulls_equal=True)
    gone = old.join(islands.select([*keys, *match]), on=[*keys, *match], how="anti", nulls_equal=True)
    return write, gone.select(cols)


def open_queue(new: pl.DataFrame, stored: pl.DataFrame) -> pl.DataFrame:
    """Stored queue rows of jobs that were still waiting (no start) whose job the import updates."""
    key = list(RECORD_KEYS["queue"])
    waiting = _canonical("queue", stored).filter(pl.col("start").is_null())
    if waiting.height == 0 or new.height == 0:
        return waiting.clear()
    fresh = _canonical("queue", new)
    changed = waiting.join(fresh, on=list(fresh.columns), how="anti", nulls_equal=True)
    return changed.join(fresh.select(key), on=key, how="semi", nulls_equal=True)


__all__ = ["MERGED", "SPANS", "merge_stored", "open_queue"]
