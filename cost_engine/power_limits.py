"""Physical ceilings on a card's power: what an energy counter and a power reading may claim before they are not believed.

A power reading (`power_w`) above the card's ceiling is not believed (milliwatts read as watts:
300,000 W): it is neither billed as power x time nor a reference for the counter. An energy
counter is trusted only while the power it implies (its delta over the sample's time) could be
physical: at most the card's ceiling, at most `energy.counter_power_ratio` times the larger of
the two believed power readings at the interval's ends, and at least the smaller of them divided
by the ratio (only where both floors hold: that reading above `LOW_FLOOR_W` and the interval at
least `LOW_MIN_S` long, so that an idle card and a counter rounded to 1 J are not caught). A
counter in the wrong unit (DCGM's millijoules read as joules: a 600 W card at 600 kW; or kJ) or
one jump of a billion joules fails, and so does a stuck one (delta 0 while the card reads 300 W).
The ceiling of a card, first match wins:

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
# The low-side counter test's floors: below 50 W a card idles and a few watts of rounding are a
# large ratio; under 30 s a counter that counts whole joules (NVML: mJ, DCGM: J) is too coarse.
# Changing them changes what the rollup's cells hold (quarters.CELLS_VERSION).
LOW_FLOOR_W = 50.0
LOW_MIN_S = 30.0


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


def believed_power(power_w: pl.Expr, max_w: pl.Expr) -> pl.Expr:
    """The power reading where it is at most the card's ceiling, else null (not believed)."""
    return pl.when(power_w <= max_w).then(power_w)


def implausible_counter(delta_j: pl.Expr, dt_s: pl.Expr, power_w: pl.Expr, next_power_w: pl.Expr, max_w: pl.Expr,
                        ratio: float) -> tuple[pl.Expr, pl.Expr]:
    """(too high, too low) for a counter delta over dt_s; the readings are the believed ones.

    Too high: the implied power is above the card's ceiling, or above `ratio` x the larger power
    reading at the interval's ends (when either is above 0). Too low: below the smaller reading
    divided by `ratio`, where that reading is above LOW_FLOOR_W and dt_s is at least LOW_MIN_S
    (written as implied / reading x ratio < 1, the form the rollup's `low_ratio` is tested in)."""
    implied = delta_j / dt_s
    ref = pl.max_horizontal(power_w, next_power_w)
    low_ref = pl.min_horizontal(power_w, next_power_w)
    high = (implied > max_w) | (ref.is_not_null() & (ref > 0) & (implied > ref * ratio))
    low = (dt_s >= LOW_MIN_S) & (low_ref > LOW_FLOOR_W) & (implied / low_ref * ratio < 1.0)
    return high, low.fill_null(False) & ~high


def stretches(implausible: pl.DataFrame, ceilings: pl.DataFrame) -> pl.DataFrame:
    """Runs of consecutive unbelieved samples per card and kind (a sample starting where the last
    ended): gpu_id, kind, t0, t1, samples, peak_w / least_w (highest / lowest implied power or
    reading), read_w (the lowest power reading: for kind low, the one the counter failed), unknown (samples whose energy is unknown), max_w."""
    if implausible.height == 0:
        return pl.DataFrame(schema={"gpu_id": pl.String, "kind": pl.String, "t0": implausible.schema["ts"],
                                    "t1": implausible.schema["ts"], "samples": pl.UInt32, "peak_w": pl.Float64,
                                    "least_w": pl.Float64, "read_w": pl.Float64, "unknown": pl.UInt32,
                                    "max_w": pl.Float64})
    s = implausible.sort("gpu_id", "kind", "ts")
    same = (pl.col("gpu_id") == pl.col("gpu_id").shift(1)) & (pl.col("kind") == pl.col("kind").shift(1))
    start = ~(same & (pl.col("ts") <= pl.col("t_end").shift(1))).fill_null(False)
    return (s.with_columns(start.cum_sum().alias("_run"))
            .group_by("gpu_id", "kind", "_run", maintain_order=True)
            .agg(pl.col("ts").min().alias("t0"), pl.col("t_end").max().alias("t1"), pl.len().alias("samples"),
                 pl.col("implied_w").max().alias("peak_w"), pl.col("implied_w").min().alias("least_w"),
                 pl.col("power_w").min().alias("read_w"), pl.col("joules").is_null().sum().alias("unknown"))
            .drop("_run").join(ceilings, on="gpu_id", how="left").sort("gpu_id", "t0", "kind"))


def _span(r: dict) -> str:
    return (f"{r['gpu_id']} from {r['t0']:%Y-%m-%d %H:%M:%S}Z to {r['t1']:%Y-%m-%d %H:%M:%S}Z "
            f"({r['samples']} sample{'' if r['samples'] == 1 else 's'})")


def _counter_line(r: dict, ratio: float) -> str:
    if r["kind"] == "low":
        what = (f"the counter implies as little as {r['least_w']:,.0f} W, less than 1/{ratio:g} of its power "
                f"readings (at least {r['read_w']:,.0f} W)")
    else:
        above = (f"above the card's ceiling of {r['max_w']:,.0f} W" if r["max_w"] is not None and r["peak_w"] > r["max_w"]
                 else f"more than {ratio:g}x its power readings")
        what = f"the counter implies up to {r['peak_w']:,.0f} W, {above}"
    known = r["samples"] - r["unknown"]
    billed = ("that stretch uses power x time" if r["unknown"] == 0 else
              f"{known} of them use power x time, {r['unknown']} have no power reading: their energy is unknown"
              if known else "no power reading: its energy is unknown")
    return f"{_span(r)}: {what}; {billed}"


def _power_line(r: dict) -> str:
    known = r["samples"] - r["unknown"]
    billed = ("the energy counter stands for that stretch" if r["unknown"] == 0 else
              f"{known} of them use the energy counter, {r['unknown']} have no believable counter: their energy is unknown"
              if known else "no believable energy counter: its energy is unknown")
    return (f"{_span(r)}: power_w reads up to {r['peak_w']:,.0f} W, above the card's ceiling of {r['max_w']:,.0f} W "
            f"(milliwatts read as watts?), not used; {billed}")


def gap_lines(implausible: pl.DataFrame, ceilings: pl.DataFrame, ratio: float, shown: int = 10) -> list[tuple[str, str]]:
    """The report's gaps for unbelieved counters (`energy counter implausible`) and power readings
    (`power reading implausible`): one per stretch (the first `shown` of each), then a count."""
    runs = stretches(implausible, ceilings)
    out = []
    for gap, mine, line, rest in (
            ("energy counter implausible", runs.filter(pl.col("kind") != "power"),
             lambda r: _counter_line(r, ratio), "use power x time"),
            ("power reading implausible", runs.filter(pl.col("kind") == "power"), _power_line,
             "are not used (the energy counter where it is believed, else unknown)")):
        out += [(gap, line(r)) for r in mine.head(shown).iter_rows(named=True)]
        if mine.height > shown:
            out.append((gap, f"{mine.height - shown} more stretches on {mine.tail(mine.height - shown)['gpu_id'].n_unique()} "
                             f"cards ({mine.height} in all, {int(mine['samples'].sum())} samples) {rest}"))
    return out


__all__ = ["MARGIN", "TDP_W", "CEILINGS", "LOW_FLOOR_W", "LOW_MIN_S", "family_watts", "ceilings", "believed_power",
           "implausible_counter", "stretches", "gap_lines"]
