"""Time-of-use tariffs as bands of time: the energy price and carbon intensity in force at any instant.

Tariff edges are not cut points of the card-time ledger (an hourly tariff would cut every card
every hour and multiply the segments and money rows by ten); instead the telemetry stage sums
samples over the ledger's intervals cut at the band edges (`Bands.split`), prices each part by
its band and keeps per interval the priced joules, so a segment's energy cost is the same as if
the tariff edges had cut it.
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

    def split(self, intervals: pl.DataFrame) -> pl.DataFrame:
        """Intervals (e_idx, t0, t1, ...) cut at the band edges they contain: one row per (interval,
        band) overlap, with that band's `price` and `carbon` (unknown as 0), in the input's order.

        The telemetry stage sums samples over these parts, so each joule is priced by the band
        it was drawn in, split by time exactly as a sample is split over ledger intervals."""
        if self.edges.len() == 0:
            return intervals.with_columns(pl.lit(self.price[0]).alias("price"), pl.lit(0.0).alias("carbon"))
        lo = pl.concat([pl.Series([None], dtype=TS), self.edges])  # band k starts at lo[k]
        hi = pl.concat([self.edges, pl.Series([None], dtype=TS)])  # and ends at hi[k]
        x = intervals.with_columns(
            pl.int_ranges(self._band(intervals["t0"]), self._band(intervals["t1"] - _US) + 1).alias("_k")
        ).explode("_k")
        k = x["_k"]
        return x.with_columns(
            pl.max_horizontal("t0", pl.lit(lo.gather(k)).fill_null(pl.col("t0"))).alias("t0"),
            pl.min_horizontal("t1", pl.lit(hi.gather(k)).fill_null(pl.col("t1"))).alias("t1"),
            pl.lit(self.price.gather(k)).alias("price"),
            pl.lit(self.carbon.fill_null(0.0).gather(k)).alias("carbon"),
        ).drop("_k")

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
