"""Interval algorithms: overlaps measured by look-ups on sorted running totals, never by joining on a key and filtering on time.

Three shapes cover every overlap question the engine asks:

- `Coverage`: the union of intervals per key (a pool's power bills in force) as a disjoint
  sorted timeline with the covered time before each piece.
- `Precedence`: intervals with a rank per key (a pool's maintenance windows, quota waits,
  resource waits): the timeline of which rank wins (the lowest in force), with the time each
  rank has won before every breakpoint.
- `StepIntegral`: the running integral of a sum of step functions per key (a pool's capacity
  per second, the price per driver unit of the cost rows in force).

Each is built once as a table sorted by (key, time) and asked with a frame of questions
(key, t0, t1): the answer for [t0, t1) is a difference of two look-ups, each a binary search
of one integer (key code, time) in the sorted table, so the questions need no sort and
nothing pairs every interval with every question: O((n + q) log n). Times are exact integer
microseconds (coverage answers exactly; integrals in Float64).
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


def _encode(frame: pl.DataFrame, keys: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """frame with `_code` (an Int64 per distinct key, in key order) instead of its key columns,
    and the code table (keys, _code). Sorting and grouping on one integer is several times
    cheaper than on key strings."""
    if not keys:
        return frame.with_columns(pl.lit(0, dtype=pl.Int64).alias("_code")), pl.DataFrame({"_code": [0]})
    frame = frame.drop_nulls(keys)  # a row without a key belongs to no timeline
    codes = frame.select(keys).unique().sort(keys).with_row_index("_code").with_columns(pl.col("_code").cast(pl.Int64))
    return frame.join(codes, on=keys, how="left").drop(keys), codes


@dataclass(frozen=True)
class _Timeline:
    """Breakpoints (_code, t, values...) sorted by (_code, t), searchable by one Int64 per row:
    _code << shift | t - origin."""

    keys: tuple[str, ...]
    codes: pl.DataFrame  # keys, _code
    table: pl.DataFrame  # _code, t (us), values
    search: pl.Series | None  # the sorted search keys (None: too wide for one Int64, as-of joins instead)
    origin: int
    shift: int

    @classmethod
    def of(cls, table: pl.DataFrame, keys: list[str], codes: pl.DataFrame) -> "_Timeline":
        origin = int(table["t"].min()) if table.height else 0
        shift = max((int(table["t"].max()) - origin + 1) if table.height else 1, 1).bit_length()
        if shift + max(codes.height, 1).bit_length() > 62:  # centuries of microseconds: as-of joins instead
            return cls(tuple(keys), codes, table, None, origin, shift)
        search = table.select(pl.col("_code") * (1 << shift) + (pl.col("t") - origin))["_code"]
        return cls(tuple(keys), codes, table, search, origin, shift)

    def _rows(self, code: pl.Series, t: pl.Series) -> pl.Series:
        """Per question, the row of its key with the last t at or before its time; null if none."""
        if self.search is None:
            q = pl.DataFrame({"_code": code, "_q": t}).with_row_index("_i")
            j = q.drop_nulls("_code").sort("_code", "_q").join_asof(
                self.table.select("_code", "t").with_row_index("_row"), left_on="_q", right_on="t", by="_code",
                strategy="backward", check_sortedness=False,
            )
            return q.select("_i").join(j.select("_i", "_row"), on="_i", how="left", maintain_order="left")["_row"].cast(pl.Int64)
        probe = code * (1 << self.shift) + (t - self.origin).clip(-1, (1 << self.shift) - 1)
        idx = self.search.search_sorted(probe.fill_null(-1), side="right").cast(pl.Int64) - 1
        found = idx.clip(0, None)
        same = (self.search.gather(found) // (1 << self.shift)) == code
        return pl.select(pl.when((idx >= 0) & same.fill_null(False)).then(found)).to_series()

    def at(self, queries: pl.DataFrame, times: list[pl.Expr], values: dict[str, pl.Expr], zero: int | float) -> list[pl.DataFrame]:
        """Per question and per time in `times` (us), each `values` expression read at the last
        breakpoint at or before that time: the expressions see the table's columns and `_q`, the
        time itself; where the key has no breakpoint yet they are `zero`."""
        z = pl.lit(zero, dtype=pl.Int64 if isinstance(zero, int) else pl.Float64)
        if self.table.height == 0 or queries.height == 0:
            return [pl.DataFrame({n: pl.repeat(z, queries.height, eager=True) for n in values}) for _ in times]
        k = list(self.keys)
        code = (queries.select(k).join(self.codes, on=k, how="left", maintain_order="left")["_code"] if k
                else pl.Series("_code", [0] * queries.height, dtype=pl.Int64))
        out = []
        for t in times:
            q = queries.select(t.alias("_q"))["_q"]
            rows = self._rows(code, q)
            got = self.table.drop("_code").select(pl.all().gather(rows.fill_null(0))).with_columns(
                q, rows.is_not_null().alias("_hit")
            )
            out.append(got.select(pl.when(pl.col("_hit")).then(v).otherwise(z).alias(n) for n, v in values.items()))
        return out

    def span(self, queries: pl.DataFrame, t0: str, t1: str, values: dict[str, pl.Expr], zero: int | float) -> pl.DataFrame:
        """Per question, each `values` expression at t1 minus at t0 (see `at`)."""
        a, b = self.at(queries, [micros(t0), micros(t1)], values, zero)
        return b.select(pl.col(n) - a[n] for n in values)


def _within(e: pl.Expr) -> pl.Expr:
    return e.over("_code")


@dataclass(frozen=True)
class Coverage:
    """The union of intervals per key, for measuring how much of any [t0, t1) it covers."""

    line: _Timeline  # _code, t (piece start, us), _len (us), _before (us covered by earlier pieces)

    @classmethod
    def of(cls, frame: pl.DataFrame, keys: str | Sequence[str], start: str = "start", end: str = "end") -> "Coverage":
        k = _keys(keys)
        f = frame.select(*k, micros(start).alias("a"), micros(end).alias("b")).drop_nulls()
        f, codes = _encode(f.filter(pl.col("b") > pl.col("a")), k)
        f = f.sort("_code", "a")
        # A new piece starts where an interval begins after every earlier one of its key ended.
        f = f.with_columns(_within(pl.col("b").cum_max().shift(1)).alias("_reach"))
        f = f.with_columns((pl.col("_reach").is_null() | (pl.col("a") > pl.col("_reach"))).cum_sum().alias("_piece"))
        u = f.group_by("_code", "_piece").agg(pl.col("a").min(), pl.col("b").max()).sort("_code", "a")
        length = pl.col("b") - pl.col("a")
        u = u.select("_code", pl.col("a").alias("t"), length.alias("_len"), _within(length.cum_sum() - length).alias("_before"))
        return cls(_Timeline.of(u, k, codes))

    def covered(self, queries: pl.DataFrame, t0: str, t1: str, out: str = "covered_us") -> pl.DataFrame:
        """queries + `out`: microseconds of [t0, t1) inside the key's union (0 for a key
        without intervals)."""
        upto = pl.col("_before") + (pl.col("_q") - pl.col("t")).clip(0, None).clip(None, pl.col("_len"))
        return queries.with_columns(self.line.span(queries, t0, t1, {out: upto}, 0))


@dataclass(frozen=True)
class Precedence:
    """Ranked intervals per key: over any [t0, t1), how long each rank was the lowest in force.

    Where intervals of several ranks overlap, the lowest rank wins that time (the first match
    of a precedence list); ranks are 0 .. n-1.
    """

    n: int
    line: _Timeline  # _code, t, _win (winning rank from t on, null: none), _w0.._w{n-1} (us won before t)

    @classmethod
    def of(cls, frame: pl.DataFrame, keys: str | Sequence[str], n: int, start: str = "start", end: str = "end",
           rank: str = "rank") -> "Precedence":
        k = _keys(keys)
        f = frame.select(*k, micros(start).alias("a"), micros(end).alias("b"), pl.col(rank).cast(pl.Int64).alias("_r"))
        f, codes = _encode(f.drop_nulls().filter(pl.col("b") > pl.col("a")), k)
        steps = pl.concat([f.select("_code", pl.col("a").alias("t"), "_r", pl.lit(1).alias("d")),
                           f.select("_code", pl.col("b").alias("t"), "_r", pl.lit(-1).alias("d"))])
        # How many intervals of each rank are in force after every breakpoint.
        steps = steps.group_by("_code", "t").agg(
            pl.col("d").filter(pl.col("_r") == r).sum().alias(f"_d{r}") for r in range(n)
        ).sort("_code", "t")
        steps = steps.with_columns(_within(pl.col(f"_d{r}").cum_sum()).alias(f"_n{r}") for r in range(n))
        win = pl.coalesce([pl.when(pl.col(f"_n{r}") > 0).then(pl.lit(r, dtype=pl.Int64)) for r in range(n)])
        steps = steps.with_columns(win.alias("_win"), (_within(pl.col("t").shift(-1)) - pl.col("t")).fill_null(0).alias("_len"))
        own = [pl.when(pl.col("_win") == r).then(pl.col("_len")).otherwise(0) for r in range(n)]
        steps = steps.with_columns((_within(o.cum_sum()) - o).alias(f"_w{r}") for r, o in enumerate(own))
        return cls(n, _Timeline.of(steps.select("_code", "t", "_win", *(f"_w{r}" for r in range(n))), k, codes))

    def won(self, queries: pl.DataFrame, t0: str, t1: str, prefix: str) -> pl.DataFrame:
        """queries + `{prefix}0` .. `{prefix}{n-1}`: microseconds of [t0, t1) each rank won."""
        upto = {
            f"{prefix}{r}": pl.col(f"_w{r}") + pl.when(pl.col("_win") == r).then(pl.col("_q") - pl.col("t")).otherwise(0)
            for r in range(self.n)
        }
        return queries.with_columns(self.line.span(queries, t0, t1, upto, 0))


@dataclass(frozen=True)
class WeightedPrecedence:
    """Over any [t0, t1), the integral of a rate (a StepIntegral's) during the time each rank of a
    Precedence won, per key: what the prices in force charged for each cause's share of a free card.

    Both timelines are merged on their breakpoints (a sum of their sizes, not a product).
    """

    n: int
    line: _Timeline  # _code, t, _win, _rate, _W0.._W{n} (rank n: no rank in force)

    @classmethod
    def of(cls, precedence: "Precedence", rates: "StepIntegral") -> "WeightedPrecedence":
        k = list(precedence.line.keys)
        assert list(rates.line.keys) == k, "both timelines must have the same keys"
        n = precedence.n

        def points(line: _Timeline) -> pl.DataFrame:
            return line.table.select("_code", "t").join(line.codes, on="_code").drop("_code")

        b = pl.concat([points(precedence.line), points(rates.line)]).unique()
        # Which rank wins, and the rate, from each breakpoint of either timeline on.
        (win,) = precedence.line.at(b, [pl.col("t")], {"_win": pl.col("_win").fill_null(n)}, n)
        (rate,) = rates.line.at(b, [pl.col("t")], {"_rate": pl.col("_rate")}, 0.0)
        b = b.with_columns(win["_win"], rate["_rate"])
        b, codes = _encode(b, k)
        b = b.sort("_code", "t").with_columns((_within(pl.col("t").shift(-1)) - pl.col("t")).fill_null(0).alias("_len"))
        own = [pl.when(pl.col("_win") == r).then(pl.col("_rate") * pl.col("_len").cast(pl.Float64) / US_PER_S)
               .otherwise(0.0) for r in range(n + 1)]
        b = b.with_columns((_within(o.cum_sum()) - o).alias(f"_W{r}") for r, o in enumerate(own))
        return cls(n, _Timeline.of(b.select("_code", "t", "_win", "_rate", *(f"_W{r}" for r in range(n + 1))), k, codes))

    def weighted(self, queries: pl.DataFrame, t0: str, t1: str, prefix: str) -> pl.DataFrame:
        """queries + `{prefix}0` .. `{prefix}{n}`: the rate's integral over the part of [t0, t1)
        each rank won (`{prefix}{n}`: no rank in force)."""
        upto = {
            f"{prefix}{r}": pl.col(f"_W{r}")
            + pl.when(pl.col("_win") == r).then(pl.col("_rate") * (pl.col("_q") - pl.col("t")).cast(pl.Float64) / US_PER_S)
            .otherwise(0.0)
            for r in range(self.n + 1)
        }
        return queries.with_columns(self.line.span(queries, t0, t1, upto, 0.0))


@dataclass(frozen=True)
class StepIntegral:
    """F_key(t) = integral from -inf to t of the sum of the rates of the key's intervals in force.

    Rates are per second; the integral of [t0, t1) is F(t1) - F(t0).
    """

    line: _Timeline  # _code, t (us), _cum (F at t), _rate (in force from t on)

    @classmethod
    def of(cls, frame: pl.DataFrame, keys: str | Sequence[str], start: str, end: str, rate: str | pl.Expr) -> "StepIntegral":
        k = _keys(keys)
        r = pl.col(rate) if isinstance(rate, str) else rate
        base = frame.select(*k, micros(start).alias("a"), micros(end).alias("b"), r.cast(pl.Float64).alias("r"))
        base, codes = _encode(base.filter((pl.col("b") > pl.col("a")) & (pl.col("r") != 0)), k)
        steps = pl.concat(
            [base.select("_code", pl.col("a").alias("t"), pl.col("r").alias("d"), pl.lit(1).alias("n")),
             base.select("_code", pl.col("b").alias("t"), (-pl.col("r")).alias("d"), pl.lit(-1).alias("n"))]
        )
        # Sorted, not grouped: steps at the same instant make zero-length pieces, and a look-up
        # lands on the last of them, after every change at that instant. Where no interval is in
        # force the rate is exactly 0: a float sum of +r and -r can leave 1e-17, and a span
        # between intervals must integrate to 0, not to a residue (a cost row with no driver
        # quantity in its span is kept whole, not priced at amount / 1e-15).
        steps = steps.sort("_code", "t").with_columns(
            pl.when(_within(pl.col("n").cum_sum()) > 0).then(_within(pl.col("d").cum_sum())).otherwise(0.0).alias("_rate")
        )
        piece = _within(pl.col("_rate").shift(1) * (pl.col("t") - pl.col("t").shift(1)).cast(pl.Float64) / US_PER_S)
        steps = steps.with_columns(piece.fill_null(0.0).alias("_p"))
        steps = steps.with_columns(_within(pl.col("_p").cum_sum()).alias("_cum")).select("_code", "t", "_cum", "_rate")
        return cls(_Timeline.of(steps, k, codes))

    def integral(self, queries: pl.DataFrame, t0: str, t1: str, out: str) -> pl.DataFrame:
        """queries + `out`: the integral over [t0, t1)."""
        upto = pl.col("_cum") + pl.col("_rate") * (pl.col("_q") - pl.col("t")).cast(pl.Float64) / US_PER_S
        return queries.with_columns(self.line.span(queries, t0, t1, {out: upto}, 0.0))


def holes(frame: pl.DataFrame, windows: pl.DataFrame, keys: str | Sequence[str], start: str = "start",
          end: str = "end") -> pl.DataFrame:
    """The parts of each key's window [w0, w1) that no interval of the key covers: (keys, g0, g1),
    sorted. `windows` holds one row per key (keys, w0, w1); a key without intervals is one hole.

    One sort of the intervals clipped to their window, with the window's two edges as empty
    intervals: a hole opens wherever an interval starts after every earlier one ended."""
    k = _keys(keys)
    tz = windows.schema["w0"]
    w = windows.select(*k, micros("w0").alias("w0"), micros("w1").alias("w1")).filter(pl.col("w1") > pl.col("w0"))
    w, codes = _encode(w, k)  # one Int64 per key: sorting and grouping on it, not on strings
    f = frame.select(*k, micros(start).alias("a"), micros(end).alias("b")).drop_nulls()
    f = f.join(codes, on=k, how="inner").drop(k) if k else f.with_columns(pl.lit(0, dtype=pl.Int64).alias("_code"))
    f = f.join(w, on="_code", how="inner")  # one window per key
    f = f.select("_code", pl.max_horizontal("a", "w0").alias("a"), pl.min_horizontal("b", "w1").alias("b"))
    edges = pl.concat([w.select("_code", pl.col(c).alias("a"), pl.col(c).alias("b")) for c in ("w0", "w1")])
    f = pl.concat([f.filter(pl.col("b") > pl.col("a")), edges]).sort("_code", "a", "b")
    f = f.with_columns(_within(pl.col("b").cum_max().shift(1)).alias("g0"))
    out = f.filter(pl.col("a") > pl.col("g0")).select("_code", "g0", pl.col("a").alias("g1"))
    out = out.join(codes, on="_code", how="left", maintain_order="left").select(*k, "g0", "g1") if k else out.drop("_code")
    return out.with_columns(pl.from_epoch(c, "us").cast(tz).alias(c) for c in ("g0", "g1"))


def islands(start: str, end: str, keys: Sequence[str]) -> pl.Expr:
    """A run number for each row of a frame sorted by `keys` then `start`: rows whose intervals
    overlap or touch share it, since a row starts a new run only when it begins after every
    earlier end of its keys ([a, b) and [b, c) are one run). Group by keys and it to merge."""
    reach = pl.col(end).cum_max().shift(1).over(list(keys))
    return (pl.col(start) > reach).fill_null(True).cum_sum()


__all__ = ["Coverage", "Precedence", "StepIntegral", "WeightedPrecedence", "holes", "islands", "micros"]
