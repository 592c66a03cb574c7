"""Physical ceilings on a card's power: what an energy counter may claim before it is not believed.

An energy counter is trusted only while the power it implies (its delta over the sample's time)
could be physical: at most the card's ceiling, and at most `energy.counter_power_ratio` times
the larger of the two power readings at the interval's ends (when the samples carry power). A
counter in the wrong unit (DCGM's millijoules read as joules: a 600 W card at 600 kW) or one
jump of a billion joules fails both. The ceiling of a card, first match wins:

1. `energy.max_power_w_by_pool[pool]`;
2. `energy.max_power_w_by_accelerator[accelerator]` (case-insensitive, the whole name);
3. `MARGIN` x the board power of the accelerator's family (`TDP_W`, matched in order on the
   upper-cased name, so "L40S" is found before "L40" and "L4");
4. `energy.unknown_max_power_w` when the model is unknown or not listed.

A MIG instance (capacity below 1) gets its capacity's share of the card's ceiling.
"""

from __future__ import annotations

import polars as pl

from .config import Energy

# Generous: boost and measurement noise never reach half again the board power.
MARGIN = 1.5
# Board power (W) per accelerator family, the highest variant of each (a ceiling must not
# catch an honest card): the SXM/OAM parts' maximum TDP from the vendors' datasheets.
TDP_W: tuple[tuple[str, float], ...] = (
    ("GB200", 1200.0),
    ("B200", 1000.0),
    ("B100", 700.0),
    ("H200", 700.0),
    ("H100", 700.0),
    ("H800", 700.0),
    ("H20", 500.0),
    ("GH200", 1000.0),
    ("A100", 400.0),
    ("A800", 400.0),
    ("L40S", 350.0),
    ("L40", 300.0),
    ("L4", 72.0),
    ("A40", 300.0),
    ("A30", 165.0),
    ("A10G", 300.0),
    ("A10", 150.0),
    ("V100", 300.0),
    ("T4", 70.0),
    ("MI355X", 1400.0),
    ("MI325X", 1000.0),
    ("MI300X", 750.0),
    ("MI300A", 760.0),
    ("MI250X", 560.0),
    ("MI250", 560.0),
    ("MI210", 300.0),
    ("GAUDI3", 900.0),
    ("GAUDI2", 600.0),
)
CEILINGS = pl.Schema({"gpu_id": pl.String, "max_w": pl.Float64})


def family_watts() -> pl.Expr:
    """The board power of `accelerator`'s family (null: not listed). GH200 is tested before H200."""
    name = pl.col("accelerator").str.to_uppercase()
    order = sorted(TDP_W, key=lambda p: -len(p[0]))  # longer names first: GB200 before B200, L40S before L4
    expr = pl.lit(None, dtype=pl.Float64)
    for pattern, watts in reversed(order):
        expr = pl.when(name.str.contains(pattern, literal=True)).then(pl.lit(watts)).otherwise(expr)
    return expr


def ceilings(cards: pl.DataFrame, energy: Energy) -> pl.DataFrame:
    """Per card (gpu_id, pool, accelerator, capacity): max_w, the most power it can draw."""
    if cards.height == 0:
        return pl.DataFrame(schema=CEILINGS)
    by_pool = pl.DataFrame({"pool": list(energy.max_power_w_by_pool), "_pool_w": list(energy.max_power_w_by_pool.values())},
                           schema={"pool": pl.String, "_pool_w": pl.Float64})
    by_acc = pl.DataFrame(
        {"_acc": [k.upper() for k in energy.max_power_w_by_accelerator],
         "_acc_w": list(energy.max_power_w_by_accelerator.values())},
        schema={"_acc": pl.String, "_acc_w": pl.Float64})
    c = (cards.select("gpu_id", pl.col("pool").cast(pl.String), pl.col("accelerator").cast(pl.String),
                      pl.col("capacity").fill_null(1.0))
         .with_columns(pl.col("accelerator").str.to_uppercase().alias("_acc"))
         .join(by_pool, on="pool", how="left")
         .join(by_acc, on="_acc", how="left"))
    whole = pl.coalesce("_pool_w", "_acc_w", family_watts() * MARGIN, pl.lit(energy.unknown_max_power_w))
    # A MIG instance draws its share of the card at most (capacity is that share, at most 1).
    share = pl.col("capacity").clip(0.0, 1.0)
    return c.select("gpu_id", (whole * pl.when(share > 0).then(share).otherwise(1.0)).alias("max_w")).unique(
        "gpu_id", keep="first", maintain_order=True)


def implausible_counter(delta_j: pl.Expr, dt_s: pl.Expr, power_w: pl.Expr, next_power_w: pl.Expr, max_w: pl.Expr,
                    ratio: float) -> pl.Expr:
    """True where a counter delta over dt_s implies a power no card of this ceiling draws, or one
    above `ratio` x the larger power reading at the interval's ends (when either is above 0)."""
    implied = delta_j / dt_s
    ref = pl.max_horizontal(power_w, next_power_w)
    return (implied > max_w) | (ref.is_not_null() & (ref > 0) & (implied > ref * ratio))


def stretches(implausible: pl.DataFrame, ceilings: pl.DataFrame) -> pl.DataFrame:
    """Runs of consecutive unbelieved samples per card (a sample starting where the last ended):
    gpu_id, t0, t1, samples, peak_w (highest implied power), unknown (samples without power), max_w."""
    if implausible.height == 0:
        return pl.DataFrame(schema={"gpu_id": pl.String, "t0": implausible.schema["ts"], "t1": implausible.schema["ts"],
                                    "samples": pl.UInt32, "peak_w": pl.Float64, "unknown": pl.UInt32,
                                    "max_w": pl.Float64})
    s = implausible.sort("gpu_id", "ts")
    same = pl.col("gpu_id") == pl.col("gpu_id").shift(1)
    start = ~(same & (pl.col("ts") <= pl.col("t_end").shift(1))).fill_null(False)
    return (s.with_columns(start.cum_sum().alias("_run"))
            .group_by("gpu_id", "_run", maintain_order=True)
            .agg(pl.col("ts").min().alias("t0"), pl.col("t_end").max().alias("t1"), pl.len().alias("samples"),
                 pl.col("implied_w").max().alias("peak_w"), pl.col("joules").is_null().sum().alias("unknown"))
            .drop("_run").join(ceilings, on="gpu_id", how="left"))


def gap_lines(implausible: pl.DataFrame, ceilings: pl.DataFrame, ratio: float, shown: int = 10) -> list[tuple[str, str]]:
    """The report's gaps for unbelieved counters: one per stretch (the first `shown`), then a count."""
    runs = stretches(implausible, ceilings)
    out = []
    for r in runs.head(shown).iter_rows(named=True):
        above = (f"above the card's ceiling of {r['max_w']:,.0f} W" if r["max_w"] is not None and r["peak_w"] > r["max_w"]
                 else f"more than {ratio:g}x its power readings")
        known = r["samples"] - r["unknown"]
        billed = ("that stretch uses power x time" if r["unknown"] == 0 else
                  f"{known} of them use power x time, {r['unknown']} have no power reading: their energy is unknown"
                  if known else "no power reading: its energy is unknown")
        out.append(("energy counter implausible",
                    f"{r['gpu_id']} from {r['t0']:%Y-%m-%d %H:%M:%S}Z to {r['t1']:%Y-%m-%d %H:%M:%S}Z "
                    f"({r['samples']} sample{'' if r['samples'] == 1 else 's'}): the counter implies up to {r['peak_w']:,.0f} W, {above}; {billed}"))
    if runs.height > shown:
        out.append(("energy counter implausible",
                    f"{runs.height - shown} more stretches on {runs.tail(runs.height - shown)['gpu_id'].n_unique()} "
                    f"cards ({runs.height} in all, {int(runs['samples'].sum())} samples) use power x time"))
    return out


__all__ = ["MARGIN", "TDP_W", "CEILINGS", "family_watts", "ceilings", "implausible_counter", "stretches", "gap_lines"]
