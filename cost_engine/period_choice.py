"""The period a person picks on the dashboard: presets relative to the data, whole local days,
the previous period to compare with, and day / week / month buckets with partial ones marked.

Everything here is dates and instants, no figures: a preset resolves to a first and a last
local day (inclusive), which become the UTC window [local midnight of the first day, local
midnight after the last day) clipped to the data. Presets count back from the last whole
local day of the data, not from the clock: a bundle of last quarter opens on its own days.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Literal
from zoneinfo import ZoneInfo

import polars as pl

UTC = timezone.utc
Grain = Literal["day", "week", "month"]
GRAINS: tuple[str, ...] = ("day", "week", "month")

PRESETS: dict[str, str] = {
    "whole_days": "Whole days in the data",
    "last_7_days": "Last 7 days",
    "last_30_days": "Last 30 days",
    "month_to_date": "Month to date",
    "last_month": "Last month",
    "quarter_to_date": "Quarter to date",
    "last_quarter": "Last quarter",
    "all_data": "All data (partial days marked)",
    "custom": "Custom",
}
DEFAULT_PRESET = "whole_days"


def midnight(day: date, tz: str) -> datetime:
    """Local midnight at the start of `day`, as a UTC instant (23- and 25-hour days included)."""
    return datetime(day.year, day.month, day.day, tzinfo=ZoneInfo(tz)).astimezone(UTC)


def local_day(t: datetime, tz: str) -> date:
    return t.astimezone(ZoneInfo(tz)).date()


@dataclass(frozen=True)
class DataSpan:
    """The source's period [start, end) and the local days it touches."""

    start: datetime
    end: datetime
    timezone: str

    @property
    def first_day(self) -> date:
        return local_day(self.start, self.timezone)

    @property
    def last_day(self) -> date:
        return local_day(self.end - timedelta(microseconds=1), self.timezone)

    @property
    def first_whole(self) -> date:
        d = self.first_day
        return d if midnight(d, self.timezone) >= self.start else d + timedelta(days=1)

    @property
    def last_whole(self) -> date:
        d = self.last_day
        return d if midnight(d + timedelta(days=1), self.timezone) <= self.end else d - timedelta(days=1)

    @property
    def has_whole_day(self) -> bool:
        return self.first_whole <= self.last_whole

    def window(self, first: date, last: date) -> tuple[datetime, datetime]:
        """[local midnight of `first`, local midnight after `last`) clipped to the data."""
        return (max(midnight(first, self.timezone), self.start),
                min(midnight(last + timedelta(days=1), self.timezone), self.end))

    def covers(self, first: date, last: date) -> bool:
        """True when every hour of the local days first..last lies inside the data."""
        return (midnight(first, self.timezone) >= self.start
                and midnight(last + timedelta(days=1), self.timezone) <= self.end)


@dataclass(frozen=True)
class Chosen:
    """A resolved period: local days first..last (inclusive) and why it differs from the ask."""

    preset: str
    first: date
    last: date
    note: str | None = None

    @property
    def days(self) -> int:
        return (self.last - self.first).days + 1


def _month_start(d: date) -> date:
    return d.replace(day=1)


def _add_months(d: date, n: int) -> date:
    """The first day of the month n months after d's month."""
    m = d.month - 1 + n
    return date(d.year + m // 12, m % 12 + 1, 1)


def _quarter_start(d: date) -> date:
    return date(d.year, 3 * ((d.month - 1) // 3) + 1, 1)


def _span_of(preset: str, anchor: date) -> tuple[date, date]:
    """The days a relative preset asks for, before clipping to the data."""
    if preset == "last_7_days":
        return anchor - timedelta(days=6), anchor
    if preset == "last_30_days":
        return anchor - timedelta(days=29), anchor
    if preset == "month_to_date":
        return _month_start(anchor), anchor
    if preset == "last_month":
        first = _add_months(_month_start(anchor), -1)
        return first, _month_start(anchor) - timedelta(days=1)
    if preset == "quarter_to_date":
        return _quarter_start(anchor), anchor
    if preset == "last_quarter":
        first = _add_months(_quarter_start(anchor), -3)
        return first, _quarter_start(anchor) - timedelta(days=1)
    raise ValueError(f"unknown period preset {preset!r}")


def resolve(preset: str, span: DataSpan, first: date | None = None, last: date | None = None) -> Chosen:
    """The local days a preset (or a custom first..last) stands for, inside the data.

    A preset or custom range that reaches past the data is clipped to it (the note says so);
    one that misses the data entirely falls back to the whole days of the data (note too).
    """
    whole = (span.first_whole, span.last_whole) if span.has_whole_day else (span.first_day, span.last_day)
    if preset not in PRESETS:
        return Chosen(DEFAULT_PRESET, *whole, note=f"unknown period {preset!r}: showing the whole days in the data")
    if preset == "whole_days":
        return Chosen(preset, *whole)
    if preset == "all_data":
        return Chosen(preset, span.first_day, span.last_day)
    if preset == "custom":
        if first is None or last is None:
            return Chosen(DEFAULT_PRESET, *whole, note="custom period without dates: showing the whole days")
        want = (min(first, last), max(first, last))
    else:
        anchor = span.last_whole if span.has_whole_day else span.last_day
        want = _span_of(preset, anchor)
    lo, hi = max(want[0], span.first_day), min(want[1], span.last_day)
    if lo > hi:
        return Chosen(DEFAULT_PRESET, *whole,
                      note=f"{PRESETS[preset]} ({want[0]} to {want[1]}) is not in the data "
                           f"({span.first_day} to {span.last_day}): showing the whole days in the data")
    note = None
    if (lo, hi) != want:
        note = f"{PRESETS[preset]} asks for {want[0]} to {want[1]}; the data holds {lo} to {hi}"
    return Chosen(preset, lo, hi, note)


def previous(chosen: Chosen) -> tuple[date, date]:
    """The period to compare with: the month (quarter) before for calendar presets, the same
    days of the month (quarter) before for *_to_date, else as many days just before."""
    first, last = chosen.first, chosen.last
    if chosen.preset in ("last_month", "last_quarter"):
        n = 1 if chosen.preset == "last_month" else 3
        p_first = _add_months(first, -n)
        return p_first, first - timedelta(days=1)
    if chosen.preset in ("month_to_date", "quarter_to_date") and first.day == 1:
        n = 1 if chosen.preset == "month_to_date" else 3
        p_first = _add_months(first, -n)
        offset = (last - first).days
        p_last = min(p_first + timedelta(days=offset), first - timedelta(days=1))
        return p_first, p_last
    n = chosen.days
    return first - timedelta(days=n), first - timedelta(days=1)


def bucket_start(day: date, grain: str) -> date:
    """The first day of the day / ISO week (Monday) / month holding `day`."""
    if grain == "day":
        return day
    if grain == "week":
        return day - timedelta(days=day.weekday())
    if grain == "month":
        return day.replace(day=1)
    raise ValueError(f"unknown granularity {grain!r}; one of {', '.join(GRAINS)}")


def bucket_end(start: date, grain: str) -> date:
    """The day after the bucket that starts on `start`."""
    if grain == "day":
        return start + timedelta(days=1)
    if grain == "week":
        return start + timedelta(days=7)
    return start + timedelta(days=calendar.monthrange(start.year, start.month)[1])


def bucket_expr(day: pl.Expr, grain: str) -> pl.Expr:
    """The bucket start of a Date column (Polars: weeks start on Monday, months on the 1st)."""
    if grain == "day":
        return day
    if grain not in GRAINS:
        raise ValueError(f"unknown granularity {grain!r}; one of {', '.join(GRAINS)}")
    return day.dt.truncate("1w" if grain == "week" else "1mo")


BUCKETS_SCHEMA = pl.Schema({"bucket": pl.Date, "hours_full": pl.Float64, "hours_in_data": pl.Float64,
                            "partial": pl.Boolean})


def buckets(start: datetime, end: datetime, tz: str, grain: str) -> pl.DataFrame:
    """Every bucket that meets the window [start, end): its first day, its full length in hours
    (local days: 23 or 25 hours across a clock change), the hours of it inside the window, and
    `partial` when the window covers only part of it (the first or last bucket of a period that
    does not start or end on a bucket edge, or of data that starts or ends mid-day)."""
    rows = []
    b = bucket_start(local_day(start, tz), grain)
    last = local_day(end - timedelta(microseconds=1), tz)
    while b <= last:
        nxt = bucket_end(b, grain)
        b0, b1 = midnight(b, tz), midnight(nxt, tz)
        full = (b1 - b0).total_seconds() / 3600
        inside = max(0.0, (min(b1, end) - max(b0, start)).total_seconds() / 3600)
        rows.append((b, full, inside, inside < full - 1e-9))
        b = nxt
    return pl.DataFrame(rows, schema=BUCKETS_SCHEMA, orient="row")


def describe(first: date, last: date) -> str:
    """"2026-10-06 to 2026-10-11 (6 days)" / "2026-10-06 (1 day)"."""
    n = (last - first).days + 1
    days = f"{n} day{'s' if n != 1 else ''}"
    return f"{first} ({days})" if first == last else f"{first} to {last} ({days})"
