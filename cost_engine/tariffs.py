"""Time-of-use tariffs as bands of time: the energy price and carbon intensity in force at any instant.

Tariff edges are not cut points of the card-time ledger (an hourly tariff would cut every card
every hour and multiply the segments and money rows by ten); instead the telemetry stage prices
each sample piece by the bands it overlaps, split by time exactly as a piece is split over
ledger intervals. Per interval the engine keeps the priced joules, so a segment's energy cost
is the same as if the tariff edges had cut it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import polars as pl

from .contract import TS

_US = timedelta(microseconds=1)


@dataclass(frozen=True)
class Bands:
    """Band b covers [edges[b-1], edges[b]) (band 0 and the last are open-ended)."""

    edges: pl.Series  # sorted tariff starts and ends (TS)
    price: pl.Series  # per band, price per kWh (the flat price where no tariff is in force)
    carbon: pl.Series  # per band, g CO2e per kWh, null where unknown

    @classmethod
    def of(cls, tariffs: pl.DataFrame, flat_price: float) -> "Bands":
        """The tariff in force over each band: the latest one starting at or before the band's
        start, if it has not ended there; else the flat price and no carbon intensity."""
        edges = pl.concat([tariffs["start"], tariffs["end"]]).cast(TS).drop_nulls().unique().sort()
        starts = pl.DataFrame({"t0": edges})
        t = tariffs.sort("start").select(pl.col("start").cast(TS).alias("t0"), "end", "price_per_kwh", "carbon_g_per_kwh")
        inner = starts.join_asof(t, on="t0", strategy="backward").select(
            pl.when(pl.col("end") > pl.col("t0")).then(pl.col("price_per_kwh")).otherwise(flat_price).alias("price"),
            pl.when(pl.col("end") > pl.col("t0")).then(pl.col("carbon_g_per_kwh")).alias("carbon"),
        )
        price = pl.concat([pl.Series([flat_price], dtype=pl.Float64), inner["price"].cast(pl.Float64)])
        carbon = pl.concat([pl.Series([None], dtype=pl.Float64), inner["carbon"].cast(pl.Float64)])
        return cls(edges=edges, price=price, carbon=carbon)

    @classmethod
    def flat(cls, flat_price: float) -> "Bands":
        return cls(pl.Series([], dtype=TS), pl.Series([flat_price], dtype=pl.Float64), pl.Series([None], dtype=pl.Float64))

    def _band(self, t: pl.Series) -> pl.Series:
        return self.edges.search_sorted(t, side="right").cast(pl.Int64)

    def priced(self, pieces: pl.DataFrame, busy: pl.Expr) -> pl.DataFrame:
        """Per e_idx: price_j (joules x price per kWh), idle_price_j (the same for the joules drawn
        while inactive, weighted by 1 - `busy`) and carbon_j (joules x g/kWh, unknown as 0) of
        pieces (e_idx, p0, p1, util_pct, joules, frac), each split over the bands it overlaps by time."""
        p = pieces.select(
            "e_idx", "p0", "p1",
            (pl.col("joules").fill_null(0.0) * pl.col("frac")).alias("j"),
            (1.0 - busy).alias("idle_w"),
        ).filter(pl.col("j") != 0)
        if self.edges.len() == 0 or p.height == 0:
            return p.group_by("e_idx").agg(
                (pl.col("j") * self.price[0]).sum().alias("price_j"),
                (pl.col("j") * pl.col("idle_w") * self.price[0]).sum().alias("idle_price_j"),
                pl.lit(0.0).alias("carbon_j"),
            )
        p = p.with_columns(
            self._band(p["p0"]).alias("k0"), self._band(p["p1"] - _US).alias("k1")
        )
        one = p.filter(pl.col("k0") == pl.col("k1")).select("e_idx", "j", "idle_w", pl.col("k0").alias("k"))
        cross = p.filter(pl.col("k0") != pl.col("k1"))
        if cross.height:
            lo = pl.concat([pl.Series([None], dtype=TS), self.edges])  # band k starts at lo[k]
            hi = pl.concat([self.edges, pl.Series([None], dtype=TS)])  # and ends at hi[k]
            cross = cross.with_columns(pl.int_ranges("k0", pl.col("k1") + 1).alias("k")).explode("k")
            k = cross["k"]
            cross = cross.with_columns(lo.gather(k).alias("b0"), hi.gather(k).alias("b1")).with_columns(
                (
                    pl.col("j")
                    * (pl.min_horizontal("p1", pl.col("b1").fill_null(pl.col("p1")))
                       - pl.max_horizontal("p0", pl.col("b0").fill_null(pl.col("p0")))).dt.total_microseconds()
                    / (pl.col("p1") - pl.col("p0")).dt.total_microseconds()
                ).alias("j")
            )
            one = pl.concat([one, cross.select("e_idx", "j", "idle_w", "k")])
        k = one["k"]
        one = one.with_columns(self.price.gather(k).alias("price"), self.carbon.gather(k).fill_null(0.0).alias("carbon"))
        return one.group_by("e_idx").agg(
            (pl.col("j") * pl.col("price")).sum().alias("price_j"),
            (pl.col("j") * pl.col("idle_w") * pl.col("price")).sum().alias("idle_price_j"),
            (pl.col("j") * pl.col("carbon")).sum().alias("carbon_j"),
        )

    def tag(self, pieces: pl.DataFrame) -> pl.DataFrame:
        """Pieces (p0, p1) with the `price` and `carbon` (unknown as 0) of the one band holding
        each, so the per-interval sums can price them in the same pass; both null for a piece
        that crosses a band edge (rare: those go through `priced`)."""
        if self.edges.len() == 0:
            return pieces.with_columns(pl.lit(self.price[0]).alias("price"), pl.lit(0.0).alias("carbon"))
        k0 = self._band(pieces["p0"])
        # One search: a piece stays in its band when it ends by the band's end (a gather).
        ends = pl.concat([self.edges, pl.Series([None], dtype=TS)]).gather(k0)
        one = pl.lit(ends.is_null() | (pieces["p1"] <= ends))
        return pieces.with_columns(
            pl.when(one).then(pl.lit(self.price.gather(k0))).alias("price"),
            pl.when(one).then(pl.lit(self.carbon.fill_null(0.0).gather(k0))).alias("carbon"),
        )

    def carbon_known(self, t0: pl.Series, t1: pl.Series) -> pl.Series:
        """Whether a band with a carbon intensity overlaps each [t0, t1)."""
        if self.edges.len() == 0:
            return pl.Series([False] * t0.len(), dtype=pl.Boolean)
        known = self.carbon.is_not_null().cast(pl.Int64)
        before = known.cum_sum() - known  # known bands before band k
        k0, k1 = self._band(t0), self._band(t1 - _US)
        upto = known.cum_sum().gather(k1)
        return (upto - before.gather(k0)) > 0


__all__ = ["Bands"]
