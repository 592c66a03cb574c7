"""Local days, budget windows and the report time (as_of), all cut in period.timezone.

Budgets, forecasts and alerts count whole days of the period's time zone: a month budget in
Europe/Berlin runs from local midnight on the 1st to local midnight on the 1st of the next
month (23- and 25-hour days included), the same days the engine's `day` column holds.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import polars as pl

from .contract import TS

UTC = timezone.utc
DAYS_SCHEMA = pl.Schema({"day": pl.Date, "d0": TS, "d1": TS})


def midnight(day: date, tz: str) -> datetime:
    """Local midnight of `day` as a UTC instant."""
    return datetime(day.year, day.month, day.day, tzinfo=ZoneInfo(tz)).astimezone(UTC)


def local_date(t: datetime, tz: str) -> date:
    return t.astimezone(ZoneInfo(tz)).date()


def local_days(start: datetime, end: datetime, tz: str) -> pl.DataFrame:
    """Every local day that overlaps [start, end): day, d0 (its start), d1 (its end), UTC."""
    rows = []
    day = local_date(start, tz)
    while (d0 := midnight(day, tz)) < end:
        nxt = day + timedelta(days=1)
        rows.append((day, d0, midnight(nxt, tz)))
        day = nxt
    return pl.DataFrame(rows, schema=DAYS_SCHEMA, orient="row")


def overlap_hours(d0: pl.Expr, d1: pl.Expr, lo: datetime, hi: datetime) -> pl.Expr:
    """Hours of [d0, d1) inside [lo, hi) (0 when they do not meet)."""
    a = pl.max_horizontal(d0, pl.lit(lo, TS))
    b = pl.min_horizontal(d1, pl.lit(hi, TS))
    return pl.max_horizontal((b - a).dt.total_microseconds().cast(pl.Float64) / 3.6e9, pl.lit(0.0))


def resolve_as_of(period_start: datetime, period_end: datetime, tz: str, as_of: datetime | None,
                  now: datetime | None) -> datetime:
    """The report time: what is booked lies before it, what is forecast after it.

    By default the end of the data (period.end), or `now` when the period runs past it. A
    time inside the period is moved back to the start of its local day, so only whole days
    count as booked (the figures of a day in progress may be incomplete). A clock before the
    period (data dated in the future) leaves the end of the data.
    """
    t = as_of if as_of is not None else now
    if t is None or t >= period_end or (as_of is None and t <= period_start):
        return period_end
    if t.tzinfo is None:
        raise ValueError("as_of needs a time zone")
    return max(midnight(local_date(t, tz), tz), period_start)


def live_time(period_start: datetime, period_end: datetime, as_of: datetime | None, now: datetime | None
              ) -> datetime:
    """The instant "right now" stands for (the burn rate): as_of, else the clock, kept inside the
    data and not moved back to a day's start (a live collector's readings of this hour count);
    the end of the data when the clock is past it or before it."""
    t = as_of if as_of is not None else now
    if t is None or t >= period_end or (as_of is None and t <= period_start):
        return period_end
    if t.tzinfo is None:
        raise ValueError("as_of needs a time zone")
    return max(t, period_start)


def window(kind: str, start: datetime | None, end: datetime | None, report_day: date, tz: str
           ) -> tuple[datetime, datetime] | None:
    """The budget's span [w0, w1) in force on `report_day`, or None when it is not in force.

    month / quarter: the calendar month or quarter holding report_day, when report_day lies in
    [start, end) (either may be missing); custom: from the local day holding start to the local
    day holding the last instant before end.
    """
    if kind == "custom":
        if start is None or end is None:
            return None
        last = local_date(end - timedelta(microseconds=1), tz)
        return midnight(local_date(start, tz), tz), midnight(last + timedelta(days=1), tz)
    t = midnight(report_day, tz)
    if (start is not None and t < midnight(local_date(start, tz), tz)) or (end is not None and t >= end):
        return None
    months = 1 if kind == "month" else 3
    first = report_day.month if kind == "month" else 3 * ((report_day.month - 1) // 3) + 1
    y, m = report_day.year, first + months
    if m > 12:
        y, m = y + 1, m - 12
    return midnight(date(report_day.year, first, 1), tz), midnight(date(y, m, 1), tz)
