"""Interval algorithms: overlaps measured by look-ups on sorted running totals, never by joining on a key and filtering on time.

Two shapes cover every overlap question the engine asks:

- `Coverage`: the union of intervals per key (a pool's quota waits, a card's maintenance
  windows) as a disjoint sorted timeline with the covered time before each piece. The
  covered time inside any [t0, t1) is a difference of two as-of look-ups, in exact
  microseconds: O((n + q) log n) for n intervals and q questions.
- `StepIntegral`: the running integral of a sum of step functions per key (a pool's
  capacity per second, the price per driver unit of the cost rows in force). The integral
  over any [t0, t1) is again two look-ups.

Both are built once per computation and asked with a frame of questions; nothing pairs
every interval with every question.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import polars as pl

US_PER_S = 1_000_000.0


def micros(col: str | pl.Expr) -> pl.Expr:
    """A timestamp column as Int64 epoch microseconds (the engine's timestamps are UTC, us)."""
    e = pl.col(col) if isinstance(col, str) else col
    return e.dt.epoch("us")


def _keys(keys: str | Sequence[str]) -> list[str]:
    return [keys] if isinstance(keys, str) else list(keys)


def _lookup(table: pl.DataFrame, queries: pl.DataFrame, keys: list[str], t: pl.Expr, out: str, value: pl.Expr,
            zero: int | float) -> pl.DataFrame:
    """queries + `out` = `value` at the last timeline row at or before `t` of the same key
    (`zero` before the first one, or when the key has none).

    In `value`, `_q` is the question's time and `_t` the row's (both us). The questions come
    back sorted by (keys, t): every caller only adds columns and sums.
    """
    z = pl.lit(zero, dtype=pl.Int64 if isinstance(zero, int) else pl.Float64)
    if table.height == 0:
        return queries.with_columns(z.alias(out))
    extra = [c for c in table.columns if c not in keys and c != "t"]
    q = queries.with_columns(t.alias("_q")).sort(*keys, "_q")
    j = q.join_asof(
        table.rename({"t": "_t"}),
        left_on="_q",
        right_on="_t",
        by=keys or None,
        strategy="backward",
        check_sortedness=False,  # both sides are sorted by (keys, time)
    )
    return j.with_columns(value.fill_null(z).alias(out)).drop(*extra, "_t", "_q")


@dataclass(frozen=True)
class Coverage:
    """The union of intervals per key, for measuring how much of any [t0, t1) it covers."""

    keys: tuple[str, ...]
    # One row per disjoint piece of the union: keys, t (start, us), _len (us), _before (us
    # covered by the key's earlier pieces); sorted by (keys, t).
    table: pl.DataFrame

    @classmethod
    def of(cls, frame: pl.DataFrame, keys: str | Sequence[str], start: str = "start", end: str = "end") -> "Coverage":
        k = _keys(keys)
        f = (
            frame.select(*k, micros(start).alias("a"), micros(end).alias("b"))
            .drop_nulls()
            .filter(pl.col("b") > pl.col("a"))
            .sort(*k, "a")
        )
        # A new piece starts where an interval begins after every earlier one of its key ended.
        reach = pl.col("b").cum_max().shift(1)
        f = f.with_columns((reach.over(k) if k else reach).alias("_reach"))
        f = f.with_columns((pl.col("_reach").is_null() | (pl.col("a") > pl.col("_reach"))).cum_sum().alias("_piece"))
        u = f.group_by(*k, "_piece").agg(pl.col("a").min(), pl.col("b").max()).sort(*k, "a")
        length = pl.col("b") - pl.col("a")
        before = length.cum_sum() - length
        u = u.select(*k, pl.col("a").alias("t"), length.alias("_len"), (before.over(k) if k else before).alias("_before"))
        return cls(tuple(k), u)

    def covered(self, queries: pl.DataFrame, t0: str, t1: str, out: str = "covered_us") -> pl.DataFrame:
        """queries + `out`: microseconds of [t0, t1) inside the key's union (rows come back
        sorted by (keys, t1)). A query whose key has no interval gets 0."""
        k = list(self.keys)
        upto = pl.col("_before") + (pl.col("_q") - pl.col("_t")).clip(0, None).clip(None, pl.col("_len"))
        a = _lookup(self.table, queries, k, micros(t0), "_c0", upto, 0)
        b = _lookup(self.table, a, k, micros(t1), "_c1", upto, 0)
        return b.with_columns((pl.col("_c1") - pl.col("_c0")).alias(out)).drop("_c0", "_c1")


@dataclass(frozen=True)
class StepIntegral:
    """F_key(t) = integral from -inf to t of the sum of the rates of the key's intervals in force.

    Rates are per second; the integral of [t0, t1) is F(t1) - F(t0).
    """

    keys: tuple[str, ...]
    # One row per breakpoint: keys, t (us), _cum (F at t), _rate (in force from t on); sorted.
    table: pl.DataFrame

    @classmethod
    def of(cls, frame: pl.DataFrame, keys: str | Sequence[str], start: str, end: str, rate: str | pl.Expr) -> "StepIntegral":
        k = _keys(keys)
        r = pl.col(rate) if isinstance(rate, str) else rate
        base = frame.select(*k, micros(start).alias("a"), micros(end).alias("b"), r.cast(pl.Float64).alias("r")).filter(
            (pl.col("b") > pl.col("a")) & (pl.col("r") != 0)
        )
        steps = pl.concat(
            [base.select(*k, pl.col("a").alias("t"), pl.col("r").alias("d")),
             base.select(*k, pl.col("b").alias("t"), (-pl.col("r")).alias("d"))]
        )
        steps = steps.group_by(*k, "t").agg(pl.col("d").sum()).sort(*k, "t")

        def within(e: pl.Expr) -> pl.Expr:
            return e.over(k) if k else e

        steps = steps.with_columns(within(pl.col("d").cum_sum()).alias("_rate"))
        piece = within(pl.col("_rate").shift(1) * (pl.col("t") - pl.col("t").shift(1)).cast(pl.Float64) / US_PER_S)
        steps = steps.with_columns(piece.fill_null(0.0).alias("_p"))
        steps = steps.with_columns(within(pl.col("_p").cum_sum()).alias("_cum")).select(*k, "t", "_cum", "_rate")
        return cls(tuple(k), steps)

    def integral(self, queries: pl.DataFrame, t0: str, t1: str, out: str) -> pl.DataFrame:
        """queries + `out`: the integral over [t0, t1) (rows come back sorted by (keys, t1))."""
        k = list(self.keys)
        upto = pl.col("_cum") + pl.col("_rate") * (pl.col("_q") - pl.col("_t")).cast(pl.Float64) / US_PER_S
        a = _lookup(self.table, queries, k, micros(t0), "_f0", upto, 0.0)
        b = _lookup(self.table, a, k, micros(t1), "_f1", upto, 0.0)
        return b.with_columns((pl.col("_f1") - pl.col("_f0")).alias(out)).drop("_f0", "_f1")


__all__ = ["Coverage", "StepIntegral", "micros"]
