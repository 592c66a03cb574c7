"""Price coverage: the spans where no rate of a pool or no tariff is in force, each named as a gap,
and every figure built on such a span marked partial (a day without a rate lost its money silently).

- rates: per pool and category inside the boundary, a span of the pool's in-service time in the
  period (its cards' service from the first start to the last end) that no rate, no cost row of
  that pool and category and no fleet-wide cost row of that category covers is not priced.
  The totals' `cost`, the category's row of `by_category`, the cost of every owner that held
  a card of the pool then and of every day (`trend`) it touches are partial.
- tariffs: with a tariffs table, a span of the metered time (from the first to the last segment
  with an energy reading) without a tariff is priced at `flat_price_per_kwh` (so `energy_cost`
  is partial where it is measured energy x price), and a span without a tariff carrying
  `carbon_g_per_kwh` has no CO2e (`carbon_kg` partial where some is known); the owners who drew
  energy then are partial too, and for the energy cost the days (`trend` cost).

Each is an interval algorithm (intervals.holes, intervals.Coverage): linear in the rows after
one sort, never a join of segments with price rows filtered on time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from .contract import TS
from .engine import Computation
from .intervals import Coverage, holes

HOLES_NAMED = 20  # holes named one by one per pool and category (or tariff); the rest summed in one gap
RATE, TARIFF, CARBON = "rate coverage", "tariff coverage", "carbon coverage"


@dataclass
class Partial:
    """The coverage gaps and the figures they make partial: (figure, table, row key or None, why)."""

    gaps: list[tuple[str, str]] = field(default_factory=list)
    figures: list[dict] = field(default_factory=list)
    # (tenant, project) that held a card of a pool while no price of it was in force
    unpriced: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema={"tenant": pl.String,
                                                                               "project": pl.String}))

    def of(self, table: str, row: dict | None = None) -> list[str]:
        """The figures of one table (and row) marked partial."""
        return sorted({f["figure"] for f in self.figures if f["table"] == table and f["row"] == row})


def _span(g0, g1) -> str:
    return f"{g0:%Y-%m-%dT%H:%MZ}..{g1:%Y-%m-%dT%H:%MZ} ({(g1 - g0).total_seconds() / 3600:,.2f} h)"


def _named(what: str, frame: pl.DataFrame, keys: list[str], say) -> list[tuple[str, str]]:
    """One gap per hole (`say(row, span)` words it), at most HOLES_NAMED per key; the others
    counted and summed in one more gap."""
    out: list[tuple[str, str]] = []
    if frame.height == 0:
        return out
    f = frame.sort([*keys, "g0"]).with_columns(
        (pl.int_range(pl.len()).over(keys) if keys else pl.int_range(pl.len())).alias("_n"))
    for r in f.filter(pl.col("_n") < HOLES_NAMED).iter_rows(named=True):
        out.append((what, say(r, _span(r["g0"], r["g1"]))))
    rest = f.filter(pl.col("_n") >= HOLES_NAMED)
    if rest.height:
        h = rest.select(((pl.col("g1") - pl.col("g0")).dt.total_seconds() / 3600).sum()).item()
        out.append((what, f"and {rest.height:,} more such spans ({h:,.2f} h), not listed one by one"))
    return out


MET_SCHEMA = pl.Schema({"tenant": pl.String, "project": pl.String, "day": pl.Date})


def _met(seg: pl.DataFrame, spans: pl.DataFrame, keys: list[str], where: pl.Expr) -> pl.DataFrame:
    """(tenant, project, day) of the segments (`where`) that meet a span (keys: the spans' keys);
    tenant and project are null for unallocated time."""
    if spans.height == 0:
        return pl.DataFrame(schema=MET_SCHEMA)
    s = seg.filter(where & (pl.col("t1") > spans["g0"].min()) & (pl.col("t0") < spans["g1"].max()))
    if keys:
        s = s.filter(pl.col(keys[0]).is_in(spans[keys[0]].unique().implode()))
    s = s.select(*keys, "tenant", "project", "day", "t0", "t1")
    if s.height == 0:
        return pl.DataFrame(schema=MET_SCHEMA)
    met = Coverage.of(spans, keys, "g0", "g1").covered(s, "t0", "t1", "_us")
    return met.filter(pl.col("_us") > 0).select("tenant", "project", "day").unique()


def _owners(met: pl.DataFrame) -> pl.DataFrame:
    return met.filter(pl.col("project").is_not_null()).select("tenant", "project").unique().sort("tenant", "project")


def _mark(out: Partial, figure: str, met: pl.DataFrame, why: str) -> None:
    """`figure` partial in the totals, for the owners and on the days of `met`."""
    out.figures.append({"figure": figure, "table": "totals", "row": None, "why": why})
    owners = _owners(met)
    for t in owners["tenant"].unique().sort().to_list():
        out.figures.append({"figure": figure, "table": "by_tenant", "row": {"tenant": t}, "why": why})
    for t, p in owners.iter_rows():
        out.figures.append({"figure": figure, "table": "by_project", "row": {"tenant": t, "project": p}, "why": why})
    # The report's daily trend carries cost and energy, not CO2e.
    trend = {"cost": "cost", "energy_cost": "cost"}.get(figure)
    if trend is not None:
        for d in met["day"].drop_nulls().unique().sort().to_list():
            out.figures.append({"figure": trend, "table": "trend", "row": {"day": d.isoformat()}, "why": why})


def rate_holes(comp: Computation) -> pl.DataFrame:
    """(pool, category, g0, g1): the in-service time of each rated pool that no price covers."""
    p, cfg = comp.period, comp.config
    inside = sorted(cfg.boundary.included)
    p0, p1 = pl.lit(p.start, dtype=TS), pl.lit(p.end, dtype=TS)
    rates = comp.bundle["rates"].filter(pl.col("category").is_in(inside)).select(
        "pool", "category", pl.col("start").fill_null(p0), pl.col("end").fill_null(p1))
    if rates.height == 0:
        return pl.DataFrame(schema={"pool": pl.String, "category": pl.String, "g0": TS, "g1": TS})
    costs = comp.bundle["costs"].filter(pl.col("owner").is_null() & pl.col("category").is_in(inside))
    keys = rates.select("pool", "category").unique()
    fleet = costs.filter(pl.col("pool").is_null()).drop("pool").join(keys, on="category")
    priced = pl.concat([rates, costs.filter(pl.col("pool").is_not_null()).select(rates.columns),
                        fleet.select(rates.columns)])
    svc = comp.ledger.cards.group_by("pool").agg(pl.col("svc_start").min().alias("w0"),
                                                 pl.col("svc_end").max().alias("w1"))
    windows = keys.join(svc, on="pool")  # a pool without cards: "rates without cards" says so
    return holes(priced, windows, ["pool", "category"])


def rate_hole_time(comp: Computation, holes_: pl.DataFrame | None = None) -> pl.DataFrame:
    """(tenant, project, day) of the pools' time while no price of it was in force (null owner:
    unallocated)."""
    rh = rate_holes(comp) if holes_ is None else holes_
    return _met(comp.seg, rh.drop("category").unique(), ["pool"], pl.col("cap_h") > 0)


def rate_hole_owners(comp: Computation, holes_: pl.DataFrame | None = None) -> pl.DataFrame:
    """(tenant, project) of every owner that held a card of a pool while no price of it was in force."""
    return _owners(rate_hole_time(comp, holes_))


def tariff_holes(comp: Computation, carbon: bool) -> pl.DataFrame:
    """(g0, g1): the metered time no tariff (with a carbon intensity, when `carbon`) covers."""
    t = comp.bundle["tariffs"]
    if carbon:
        t = t.filter(pl.col("carbon_g_per_kwh").is_not_null())
    metered = comp.seg.filter(pl.col("energy_s") > 0)
    if comp.bundle["tariffs"].height == 0 or metered.height == 0:
        return pl.DataFrame(schema={"g0": TS, "g1": TS})
    window = metered.select(pl.col("t0").min().alias("w0"), pl.col("t1").max().alias("w1"))
    return holes(t, window, [])


def partial(comp: Computation, energy_measured: bool, carbon_known: bool | None = None) -> Partial:
    """Every coverage gap of the rates and tariffs, and the figures built on them.

    `energy_measured`: the energy cost is measured energy x price (no power cost row);
    `carbon_known`: the totals' CO2e is a number (some energy had a carbon intensity; by
    default read from the segments, as report.totals does)."""
    out = Partial()
    seg = comp.seg
    if carbon_known is None:
        carbon_known = bool(seg["energy_s"].sum() > 0 and seg["carbon_known"].any())
    flat = comp.config.energy.flat_price_per_kwh
    rh = rate_holes(comp)
    if rh.height:
        out.gaps += _named(RATE, rh, ["pool", "category"],
                           lambda r, span: f"pool {r['pool']}, {r['category']}: no rate or cost row in force "
                           f"{span}: the pool's capacity then is not priced")
        met = rate_hole_time(comp, rh)
        out.unpriced = _owners(met)
        _mark(out, "cost", met, "a pool's capacity is not priced for part of the period (gaps: rate coverage)")
        for c in rh["category"].unique().sort().to_list():
            out.figures.append({"figure": "cost", "table": "by_category", "row": {"category": c},
                                "why": "not priced for part of the period (gaps: rate coverage)"})
    used = pl.col("energy_s") > 0
    if energy_measured:
        th = tariff_holes(comp, carbon=False)
        if th.height:
            out.gaps += _named(TARIFF, th, [], lambda r, span: f"no tariff in force {span}: the energy drawn then "
                               f"is priced at the flat {flat:g}/kWh")
            _mark(out, "energy_cost", _met(seg, th, [], used),
                  f"energy priced at the flat {flat:g}/kWh where no tariff is in force (gaps: tariff coverage)")
    if carbon_known:
        ch = tariff_holes(comp, carbon=True)
        if ch.height:
            out.gaps += _named(CARBON, ch, [], lambda r, span: f"no tariff with a carbon intensity {span}: the "
                               "CO2e of the energy drawn then is unknown and left out of carbon_kg")
            _mark(out, "carbon_kg", _met(seg, ch, [], used),
                  "CO2e of energy drawn where no carbon intensity is known is left out (gaps: carbon coverage)")
    return out


__all__ = ["CARBON", "HOLES_NAMED", "Partial", "RATE", "TARIFF", "partial", "rate_hole_owners", "rate_hole_time",
           "rate_holes", "tariff_holes"]
