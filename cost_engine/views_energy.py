"""Energy and unit-economics views: daily energy, power profile and caps, energy per model, $ per token."""

from __future__ import annotations

import polars as pl

from . import report
from .engine import Computation
from .views_filters import Filters, TOKEN_COLS, apply_filters
from .views_headline import totals


def energy_daily(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Per day: GPU and facility kWh, energy cost (power category), CO2e where tariffs carry it, tokens.

    Unknown is not zero: a day no sample measured has unknown energy and CO2e, and an unknown
    energy cost too where that cost would be measured energy x price (no power cost row)."""
    fc = apply_filters(comp, filters)
    s = fc.seg.group_by("day").agg(
        pl.col("kwh_gpu").sum().alias("energy_kwh_gpu"),
        pl.col("kwh_fac").sum().alias("energy_kwh_facility"),
        (pl.col("carbon_g").sum() / 1000).alias("co2e_kg"),
        pl.col("carbon_known").any().alias("_has_carbon"),
        (pl.col("energy_s").sum() > 0).alias("_metered"),
    )
    c = fc.money.filter(pl.col("category") == "power").group_by("day").agg(pl.col("amount").sum().alias("energy_cost"))
    r = fc.requests.group_by("day").agg(pl.col("output_tokens").sum())
    t = s.join(c, on="day", how="full", coalesce=True).join(r, on="day", how="full", coalesce=True).drop_nulls("day")
    metered = pl.col("_metered").fill_null(False)
    cost_known = metered | (pl.col("energy_cost") != 0) | pl.lit(not report.energy_priced_by_measurement(fc))
    return t.with_columns(
        pl.col("energy_kwh_gpu", "energy_kwh_facility", "energy_cost").fill_null(0.0),
        pl.col("output_tokens").fill_null(0),
    ).with_columns(
        *(pl.when(metered).then(pl.col(k)).alias(k) for k in ("energy_kwh_gpu", "energy_kwh_facility")),
        pl.when(cost_known).then(pl.col("energy_cost")).alias("energy_cost"),
        pl.when(metered & pl.col("_has_carbon").fill_null(False)).then(pl.col("co2e_kg")).alias("co2e_kg"),
    ).drop("_has_carbon", "_metered").sort("day")


def power_profile(
    comp: Computation, filters: Filters | None = None, cap_kw: float | None = None, every: str = "1h"
) -> pl.DataFrame:
    """Average GPU and facility power per time bucket (period time zone) against a site cap.

    GPU power = measured joules of the samples starting in the bucket / bucket length;
    facility power applies the config's server_overhead and PUE (the same allocation method
    as facility kWh). Buckets are UTC-aligned multiples of the engine's quarter-hour card
    energy (`Computation.card_energy`), so `every` is 15m or a multiple of it.
    """
    fc = apply_filters(comp, filters)
    e = fc.config.energy
    tz = fc.period.timezone
    s = fc.card_energy.rename({"bucket": "ts"})
    if (_amount(every) * {"m": 60, "h": 3600, "d": 86400}[every[-1]]) % 900:
        raise ValueError(f"power profile bucket {every!r}: use 15m or a multiple of it")
    seconds = pl.duration(**{_unit(every): _amount(every)}).dt.total_seconds()
    if s.height == 0:
        return pl.DataFrame(schema={"ts": pl.Datetime("us", tz), "gpu_kw": pl.Float64, "facility_kw": pl.Float64,
                                    "cap_kw": pl.Float64, "over_cap": pl.Boolean})
    out = (
        s.group_by(pl.col("ts").dt.truncate(every).alias("bucket"))
        .agg(pl.col("joules").sum())
        .sort("bucket")
        .with_columns((pl.col("joules") / seconds / 1000).alias("gpu_kw"))
        .with_columns((pl.col("gpu_kw") * e.server_overhead * e.pue).alias("facility_kw"))
        .select(pl.col("bucket").dt.convert_time_zone(tz).alias("ts"), "gpu_kw", "facility_kw")
    )
    cap = pl.lit(cap_kw, dtype=pl.Float64)
    return out.with_columns(cap.alias("cap_kw"), (pl.col("facility_kw") > cap).fill_null(False).alias("over_cap"))


def _unit(every: str) -> str:
    return {"m": "minutes", "h": "hours", "d": "days"}[every[-1]]


def _amount(every: str) -> int:
    return int(every[:-1])


def power_cap_summary(profile: pl.DataFrame, every: str = "1h") -> dict:
    """Peak and mean facility power, buckets over the cap and the energy above it (kWh)."""
    if profile.height == 0:
        return {"peak_kw": None, "mean_kw": None, "hours_over_cap": 0.0, "kwh_over_cap": 0.0, "cap_kw": None}
    h = _amount(every) * {"m": 1 / 60, "h": 1.0, "d": 24.0}[every[-1]]
    cap = profile["cap_kw"][0]
    over = profile.filter(pl.col("over_cap"))
    return {
        "peak_kw": float(profile["facility_kw"].max()),
        "mean_kw": float(profile["facility_kw"].mean()),
        "hours_over_cap": over.height * h,
        "kwh_over_cap": float(((over["facility_kw"] - cap) * h).sum()) if cap is not None else 0.0,
        "cap_kw": cap,
    }


def model_energy(comp: Computation, filters: Filters | None = None) -> pl.DataFrame:
    """Per model: GPU energy of the serving allocations, output tokens and tokens per joule."""
    fc = apply_filters(comp, filters)
    return fc.models.select(
        "model", "energy_kwh_gpu", "output_tokens", "output_tokens_per_joule", "output_tokens_per_joule_facility",
        "allocated_gpu_hours", "cost",
    ).sort(["output_tokens_per_joule", "model"], descending=[True, False], nulls_last=True)


def energy_totals(comp: Computation, filters: Filters | None = None) -> dict:
    t = totals(comp, filters)
    fc = apply_filters(comp, filters)
    has_carbon = fc.seg["carbon_known"].any() if fc.seg.height else False
    return {
        "energy_kwh_gpu": t["energy_kwh_gpu"],
        "energy_kwh_facility": t["energy_kwh_facility"],
        "energy_cost": t["energy_cost"],
        "avg_power_w": t.get("avg_power_w"),
        "carbon_kg": t.get("carbon_kg") if has_carbon else None,
        "output_tokens_per_joule": t["output_tokens_per_joule"],
        "method": f"facility = GPU kWh x server_overhead {fc.config.energy.server_overhead:g} x PUE {fc.config.energy.pue:g}",
    }


def unit_economics(comp: Computation, filters: Filters | None = None, target: float | None = None) -> pl.DataFrame:
    """Per model: $/1M tokens (all, input incl. cached, output, good), SLO attainment, cache hit
    rate, the token mix, and the gap to a target $/1M tokens (`vs_target` = cost / target)."""
    fc = apply_filters(comp, filters)
    m = fc.models
    all_tok = pl.sum_horizontal(*TOKEN_COLS)
    t = m.select(
        "model", "cost", "requests", *TOKEN_COLS, "good_tokens",
        "cost_per_million_tokens", "cost_per_million_input_tokens", "cost_per_million_uncached_input_tokens",
        "cost_per_million_cached_input_tokens", "cost_per_million_output_tokens",
        "cost_per_million_good_tokens", "slo_attainment", "cache_hit_rate", "error_share",
        pl.when(all_tok > 0).then(pl.col("input_tokens") / all_tok).alias("input_share"),
        pl.when(all_tok > 0).then(pl.col("cached_input_tokens") / all_tok).alias("cached_share"),
        pl.when(all_tok > 0).then(pl.col("output_tokens") / all_tok).alias("output_share"),
    )
    tgt = pl.lit(target, dtype=pl.Float64)
    t = t.with_columns(
        tgt.alias("target"),
        pl.when(tgt > 0).then(pl.col("cost_per_million_tokens") / tgt).alias("vs_target"),
        (pl.col("cost_per_million_tokens") <= tgt).alias("meets_target"),
    )
    return t.sort(["cost_per_million_tokens", "model"], nulls_last=True)


def unit_totals(comp: Computation, filters: Filters | None = None) -> dict:
    """Fleet-level unit economics: $/1M tokens (all, good), good-token share, cache hit rate."""
    t = totals(comp, filters)
    tok = sum(t[c] or 0 for c in TOKEN_COLS)
    cached_in = (t["input_tokens"] or 0) + (t["cached_input_tokens"] or 0)
    return {
        "cost_per_million_tokens": t["cost_per_million_tokens"],
        "cost_per_million_good_tokens": t["cost_per_million_good_tokens"],
        "tokens": tok,
        "good_token_share": (t["good_tokens"] / tok) if tok else None,
        "cache_hit_rate": (t["cached_input_tokens"] / cached_in) if cached_in else None,
        "requests": t["requests"],
        "output_tokens_per_joule": t["output_tokens_per_joule"],
    }
