"""Future-dated rows: records dated after "now" (a 2099 job end, a 2106 uint32 epoch) are kept,
named per table in the gaps, and never define the default period.

What "future-dated" means (docs/data-contract.md, "Future-dated rows"):

- a *record* time (when something happened: an allocation's start or end, a sample, a
  request, a queue wait, the start of an event, a card entering service) later than
  now + `RECORD_ALLOWANCE` (1 day: clock skew and time zones, never a real record);
- a *schedule* time (a cost row, a rate or a tariff in force until then, an event or a card's
  service planned to end then) later than now + `SCHEDULE_HORIZON` (30 years: longer than any
  lease, depreciation or power-purchase agreement; a 2099 "until further notice" is flagged,
  since a cost row spread pro rata to 2099 bills the period almost nothing).

"now" is the time of the ingest or of the report, passed in (tests inject it; callers that pass
None read the wall clock once).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import polars as pl

from .contract import TS

UTC = timezone.utc
RECORD_ALLOWANCE = timedelta(days=1)
SCHEDULE_HORIZON = timedelta(days=30 * 365)
WHAT = "future-dated"

# Per table, the columns that say when something happened, and those that plan ahead.
RECORD_TIMES: dict[str, tuple[str, ...]] = {
    "allocations": ("start", "end"),
    "telemetry": ("ts",),
    "requests": ("ts", "end"),
    "queue": ("submit", "start"),
    "events": ("start",),
    "inventory": ("in_service_start",),
}
SCHEDULE_TIMES: dict[str, tuple[str, ...]] = {
    "costs": ("start", "end"),
    "rates": ("start", "end"),
    "tariffs": ("start", "end"),
    "events": ("end",),
    "inventory": ("in_service_end",),
}
TABLES = tuple(dict.fromkeys([*RECORD_TIMES, *SCHEDULE_TIMES]))


def clock(now: datetime | None) -> datetime:
    """`now`, or the wall clock when None (the one place this module reads it)."""
    if now is None:
        return datetime.now(UTC)
    if now.tzinfo is None:
        raise ValueError("now needs a time zone")
    return now


def limits(table: str, now: datetime) -> list[tuple[str, datetime]]:
    """(column, latest plausible time) for each time column of `table` that is checked."""
    return ([(c, now + RECORD_ALLOWANCE) for c in RECORD_TIMES.get(table, ())]
            + [(c, now + SCHEDULE_HORIZON) for c in SCHEDULE_TIMES.get(table, ())])


def is_future(table: str, now: datetime) -> pl.Expr:
    """True for a row of `table` with a time past its limit (null times are not future)."""
    parts = [(pl.col(c) > pl.lit(t, dtype=TS)).fill_null(False) for c, t in limits(table, now)]
    return pl.any_horizontal(parts) if parts else pl.lit(False)


@dataclass(frozen=True)
class FutureRows:
    """The future-dated rows of one table: how many, and the earliest time past a limit."""

    table: str
    rows: int
    earliest: datetime

    def gap(self, now: datetime) -> tuple[str, str]:
        """The (what, detail) of the report's gaps and of the import and ingest output."""
        one = self.rows == 1
        return (WHAT, f"{self.table}: {self.rows:,} row{'' if one else 's'} dated after {now:%Y-%m-%dT%H:%MZ} "
                      f"(now) + 1 day for a record or + 30 years for a schedule, earliest "
                      f"{self.earliest:%Y-%m-%dT%H:%M:%SZ}: kept and counted for {'its' if one else 'their'} part "
                      f"inside the period; {'it does' if one else 'they do'} not define the default period")


def scan(table: str, frame: pl.DataFrame, now: datetime) -> FutureRows | None:
    """The future-dated rows of one table's frame, or None (one pass over its time columns)."""
    lim = [(c, t) for c, t in limits(table, now) if c in frame.columns]
    if not lim or frame.height == 0:
        return None
    got = frame.select(
        is_future(table, now).sum().alias("n"),
        pl.min_horizontal(pl.col(c).filter(pl.col(c) > pl.lit(t, dtype=TS)).min() for c, t in lim).alias("t"),
    ).row(0, named=True)
    return FutureRows(table, int(got["n"]), got["t"]) if got["n"] else None


def scan_tables(tables: dict[str, pl.DataFrame], now: datetime) -> list[FutureRows]:
    """Every table's future-dated rows, in contract order of the checked tables."""
    return [f for t in TABLES if t in tables and (f := scan(t, tables[t], now)) is not None]


def gaps(found: list[FutureRows], now: datetime) -> list[tuple[str, str]]:
    return [f.gap(now) for f in found]


__all__ = ["FutureRows", "RECORD_ALLOWANCE", "SCHEDULE_HORIZON", "WHAT", "clock", "gaps", "is_future", "limits",
           "scan", "scan_tables"]
