"""Rates of one pool and category, and tariffs, whose windows overlap would charge the same
card-hour or kilowatt-hour twice (a price change written as two open-ended rows doubles the bill).

By default every such row is rejected, its reason naming the row it overlaps. With
`validation.overlaps = "later_start_supersedes"` the rows are read as a price history
instead: each row ends where the next one of its group starts, and a note (a gap in the
report) says which rows were cut. Quotas have no window: two quotas of one tenant and pool
are already conflicting duplicates of their record key (rejected by the reader).

Checked where rows are read: per file by the bundle reader (rows named by number) and, for
a store, on the rows of every ingest together when they are loaded (rows named by content).
Sort-and-sweep per group: one sort, running maxima, no pairwise join.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import polars as pl

from .config import Config
from .contract import TS

if TYPE_CHECKING:  # the bundle reader imports this module
    from .bundle import Bundle

# Table -> the columns that make one price series (tariffs are fleet-wide: one series).
GROUPS: dict[str, tuple[str, ...]] = {"rates": ("pool", "category"), "tariffs": ()}
_FIRST = datetime(1, 1, 1, tzinfo=timezone.utc)  # an open start
_LAST = datetime(9999, 12, 31, tzinfo=timezone.utc)  # an open end
_MAX_NOTES = 10
_I = "__ov_i"


def check(
    table: str, frame: pl.DataFrame, config: Config, row: str | None = None
) -> tuple[pl.DataFrame, pl.DataFrame, list[tuple[str, str]]]:
    """(rows kept, possibly with ends cut; rejections as row/reason; notes) for one table.

    `row` names the column holding each row's number in its file (None: rows are named by
    their content, as for a store's rows).
    """
    none = pl.DataFrame(schema={"row": pl.Int64, "reason": pl.String})
    if table not in GROUPS or frame.height < 2:
        return frame, none, []
    marked = _sweep(frame.with_row_index(_I), list(GROUPS[table]))
    hit = marked.filter(pl.col("__ov_partner").is_not_null())
    if hit.height == 0:
        return frame, none, []
    if config.validation.overlaps == "later_start_supersedes":
        return _supersede(table, frame, marked)
    described = marked.select(_I, _describe(table, frame, row).alias("__ov_desc"))
    partner = described.rename({_I: "__ov_partner", "__ov_desc": "__ov_other"})
    hit = hit.join(described, on=_I).join(partner, on="__ov_partner")
    hint = (f"; both would charge the same {'card-hours' if table == 'rates' else 'energy'}: end the earlier "
            'row where the later starts, or set validation.overlaps = "later_start_supersedes"')
    # A row from a file is the rejection's own row number; a stored row is named by content.
    own = pl.format("{} overlaps {}", "__ov_desc", "__ov_other") if row is None else pl.format("overlaps {}", "__ov_other")
    reasons = hit.select(
        (pl.col(row) if row else pl.lit(None, pl.Int64)).cast(pl.Int64).alias("row"),
        (own + pl.lit(hint)).alias("reason"),
        pl.col(_I),
    ).sort(_I)
    kept = frame.with_row_index(_I).join(hit.select(_I), on=_I, how="anti").drop(_I)
    return kept, reasons.drop(_I), []


def check_bundle(bundle: Bundle, config: Config) -> Bundle:
    """`check` over a store's rates and tariffs (rows of every ingest together).

    Rows of different ingests can overlap although each bundle was clean: the rejections
    (without a row number: they are named by content) and notes join the bundle's own.
    """
    tables = dict(bundle.tables)
    rejected = [bundle.rejected]
    notes = list(bundle.notes)
    for table in GROUPS:
        kept, bad, cut = check(table, tables[table], config)
        if bad.height == 0 and not cut:
            continue
        tables[table] = kept
        notes += cut
        rejected.append(bad.select(pl.lit(table).alias("table"), "row", "reason", pl.lit(None, pl.String).alias("file"))
                        .cast(dict(bundle.rejected.schema)))
    if len(rejected) == 1 and len(notes) == len(bundle.notes):
        return bundle
    return replace(bundle, tables=tables, rejected=pl.concat(rejected), notes=notes)


def _sweep(frame: pl.DataFrame, group: list[str]) -> pl.DataFrame:
    """Each row with `__ov_partner`: the index of a row its window overlaps (null: none), and
    `__ov_next_start`: where the next row of its group starts."""
    lo = pl.col("start").fill_null(pl.lit(_FIRST, TS))
    hi = pl.col("end").fill_null(pl.lit(_LAST, TS))
    over = (lambda e: e.over(group)) if group else (lambda e: e)
    f = frame.with_columns(lo.alias("__ov_lo"), hi.alias("__ov_hi")).sort([*group, "__ov_lo", _I], nulls_last=True)
    f = f.with_columns(over(pl.col("__ov_hi").cum_max()).alias("__ov_run"))
    # The row that set the running maximum of the ends so far (the latest-ending row yet).
    f = f.with_columns(
        over(pl.when(pl.col("__ov_hi") == pl.col("__ov_run")).then(pl.col(_I)).forward_fill()).alias("__ov_setter")
    )
    f = f.with_columns(
        over(pl.col("__ov_run").shift(1)).alias("__ov_prev_hi"),
        over(pl.col("__ov_setter").shift(1)).alias("__ov_prev_i"),
        over(pl.col("__ov_lo").shift(-1)).alias("__ov_next_start"),
        over(pl.col(_I).shift(-1)).alias("__ov_next_i"),
    )
    # Overlapping an earlier row: starts before the latest earlier end. Overlapping a later
    # one: ends after the next start (the next row starts first among the later ones).
    return f.with_columns(
        pl.when(pl.col("__ov_lo") < pl.col("__ov_prev_hi")).then(pl.col("__ov_prev_i"))
        .when(pl.col("__ov_hi") > pl.col("__ov_next_start")).then(pl.col("__ov_next_i"))
        .alias("__ov_partner")
    )


def _supersede(
    table: str, frame: pl.DataFrame, marked: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, list[tuple[str, str]]]:
    """Each row cut where the next row of its group starts; a note per cut row (the first few)."""
    cut = marked.filter(pl.col("__ov_hi") > pl.col("__ov_next_start")).select(_I, "__ov_next_start")
    out = (
        frame.with_row_index(_I)
        .join(cut, on=_I, how="left")
        .with_columns(pl.coalesce("__ov_next_start", "end").alias("end"))
    )
    cut_rows = out.filter(pl.col("__ov_next_start").is_not_null()).sort(_I)
    notes = []
    for r in cut_rows.head(_MAX_NOTES).iter_rows(named=True):
        what = _series_text(table, r)
        notes.append(("overlap superseded", f"{table}{what}: the row starting {_ts(r['start'])} ends "
                      f"{_ts(r['end'])}, where the next one starts (validation.overlaps = later_start_supersedes)"))
    if cut_rows.height > _MAX_NOTES:
        notes.append(("overlap superseded", f"{table}: {cut_rows.height - _MAX_NOTES} more rows cut the same way"))
    none = pl.DataFrame(schema={"row": pl.Int64, "reason": pl.String})
    return out.drop(_I, "__ov_next_start"), none, notes


def _describe(table: str, frame: pl.DataFrame, row: str | None) -> pl.Expr:
    """A row as a reason names it: its number (when known), its series and its window."""
    def ts(name: str) -> pl.Expr:
        return pl.col(name).dt.to_string("%Y-%m-%dT%H:%M:%SZ").fill_null("open")

    parts = [pl.lit(f"{table} row "), pl.col(row).cast(pl.String), pl.lit(" (")] if row else [pl.lit(f"the {table} row (")]
    if table == "rates":
        parts += [pl.lit("pool "), pl.col("pool").fill_null("?"), pl.lit(", "), pl.col("category").fill_null("?"),
                  pl.lit(", ")]
    parts += [ts("start"), pl.lit(" .. "), ts("end"), pl.lit(")")]
    return pl.concat_str(parts)


def _series_text(table: str, r: dict) -> str:
    return f" of pool {r['pool']}, {r['category']}" if table == "rates" else ""


def _ts(v: datetime | None) -> str:
    return "open" if v is None else v.strftime("%Y-%m-%dT%H:%M:%SZ")
