"""Plausibility of the numbers importers read (epoch times, token counts, counter readings),
so a bad value is an unmapped record that says what the value was, never a crash or a guess."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any

# A usage record outside these years is a unit mistake (milliseconds read as seconds lands
# in the year 58,000; seconds read as nanoseconds in 1970), not a real time.
EPOCH_MIN_S = 946_684_800.0  # 2000-01-01T00:00:00Z
EPOCH_MAX_S = 4_102_444_800.0  # 2100-01-01T00:00:00Z
UNITS = {"seconds": 1.0, "milliseconds": 1e3, "microseconds": 1e6, "nanoseconds": 1e9}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def shown(value: Any) -> str:
    """A raw value as the message quotes it: numbers as written, text in quotes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    text = str(value)
    return repr(text if len(text) <= 40 else text[:40] + "...")


def epoch_problem(value: Any, unit: str = "seconds") -> str | None:
    """None when `value`, read in `unit` since 1970, is a time in 2000..2100; else why not.

    The reason names the unit the value looks like when one fits (`1790812800000 is not in
    epoch seconds: it looks like milliseconds`), else the date it would be.
    """
    try:
        x = float(value)
    except (TypeError, ValueError):
        return f"{shown(value)} is not a number of epoch {unit}"
    if isinstance(value, bool) or not math.isfinite(x):
        return f"{shown(value)} is not a number of epoch {unit}"
    s = x / UNITS[unit]
    if EPOCH_MIN_S <= s < EPOCH_MAX_S:
        return None
    for name, scale in UNITS.items():
        if name != unit and EPOCH_MIN_S <= x / scale < EPOCH_MAX_S:
            return f"{shown(value)} is not in epoch {unit}: it looks like {name}"
    for f in (1e3, 1e6):
        if EPOCH_MIN_S <= s / f < EPOCH_MAX_S:
            return f"{shown(value)} in epoch {unit} is {_when(s)}: it looks {f:,.0f} times too large"
    return f"{shown(value)} in epoch {unit} is {_when(s)}, not a time between 2000 and 2100"


def _when(seconds: float) -> str:
    year = 1970 + seconds / (365.2425 * 86400)
    if 1 <= year < 9999:
        return f"{_EPOCH + timedelta(seconds=seconds):%Y-%m-%dT%H:%M:%SZ}"
    return f"the year {year:,.0f}"


def time_problem(ts: datetime) -> str | None:
    """None when an aware time is in 2000..2100 (what epoch_problem accepts); else why not."""
    s = (ts - _EPOCH).total_seconds()
    if EPOCH_MIN_S <= s < EPOCH_MAX_S:
        return None
    return f"{ts:%Y-%m-%dT%H:%M:%SZ} is not a time between 2000 and 2100"


def from_epoch_checked(value: Any, unit: str = "seconds") -> tuple[datetime | None, str | None]:
    """(time, None) for a plausible epoch value in `unit`, else (None, why not)."""
    why = epoch_problem(value, unit)
    if why is not None:
        return None, why
    if unit == "nanoseconds" and isinstance(value, int):
        return _EPOCH + timedelta(microseconds=value // 1000), None  # exact, no float rounding
    return _EPOCH + timedelta(microseconds=round(float(value) / UNITS[unit] * 1_000_000)), None


def count_value(value: Any) -> tuple[int | None, str | None]:
    """A count (tokens, requests) from JSON or text: (n, None); (None, None) when absent;
    (None, what it was) for true/false, NaN, infinities, fractions, negatives and text."""
    if value is None or (isinstance(value, str) and value.strip() in ("", "null", "None")):
        return None, None
    if isinstance(value, bool):
        return None, f"is {shown(value)}, not a number"
    if isinstance(value, int):
        return (value, None) if value >= 0 else (None, f"is {value}, below zero")
    if isinstance(value, str):
        s = value.strip()
        if s.lstrip("+-").isdigit():
            n = int(s)
            return (n, None) if n >= 0 else (None, f"is {n}, below zero")
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None, f"is {shown(value)}, not a number"
    if not math.isfinite(x):
        return None, f"is {shown(x)}, not a number"
    if x != int(x):
        return None, f"is {shown(value)}, not a whole number"
    if x < 0:
        return None, f"is {shown(value)}, below zero"
    return int(x), None


def negative_readings(samples: list[tuple[float, float | None]]) -> list[tuple[float, float]]:
    """(time, value) of the counter readings below zero: no counter ever reads that."""
    return [(t, x) for t, x in samples if x is not None and x < 0]


def hold_negative_readings(samples: list[tuple[float, float | None]]) -> list[tuple[float, float | None]]:
    """The readings with each one below zero replaced by the reading before it (missing when
    none): the counter is taken not to have moved there, so the impossible value is never the
    base of an increase, and the increase from the last good reading to the next one counts."""
    out: list[tuple[float, float | None]] = []
    last: float | None = None
    for t, x in samples:
        if x is not None and x < 0:
            out.append((t, last))
            continue
        out.append((t, x))
        if x is not None:
            last = x
    return out
