"""The report object of the data contract (docs/data-contract.md), assembled from a Computation, plus lineage."""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from . import coverage, idle
from .contract import IDLE, UNATTRIBUTED
from .engine import Computation
from .ledger import clip
from .tokens import TOKEN_COLS, model_trend

MEASURES = ("cost", "allocated_gpu_hours", "active_gpu_hours", "energy_kwh_gpu", *TOKEN_COLS)


def _num(v: Any) -> Any:
    """Plain JSON numbers: NaN/inf become null (unknown), never strings."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _rows(frame: pl.DataFrame) -> list[dict]:
    return [{k: _num(v) for k, v in r.items()} for r in frame.to_dicts()]


def _div(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def owner_table(comp: Computation, keys: list[str], unpriced: pl.DataFrame | None = None) -> pl.DataFrame:
    """Measures per owner (tenant or tenant+project): cost where it landed, hours, energy, tokens.

    `unpriced`: coverage.Partial.unpriced when the caller has it (else computed here)."""
    owned = pl.col("dest") == "owner"
    # Lazy: the filters then read only the columns the sums need, not every money column.
    cost = comp.money.lazy().filter(owned).group_by(keys).agg(
        pl.col("amount").sum().alias("cost"),
        pl.col("amount").filter(pl.col("category") == "power").sum().alias("energy_cost"),
        # What the owner pays for the tokens it sent: model cost recharged onto it.
        pl.col("amount").filter(pl.col("origin").str.contains("recharge", literal=True)).sum().alias("inference_cost"),
    ).collect()
    held = comp.seg.lazy().filter(pl.col("project").is_not_null()).group_by(keys).agg(
        pl.col("alloc_h").sum().alias("allocated_gpu_hours"),
        pl.col("active_h").sum().alias("active_gpu_hours"),
        pl.col("covered_h").sum().alias("covered_gpu_hours"),
        pl.col("energy_s").sum().alias("_energy_s"),
        (pl.col("util_h").sum() * 100).alias("_util"),
        pl.col("kwh_gpu").sum().alias("energy_kwh_gpu"),
        pl.col("kwh_fac").sum().alias("energy_kwh_facility"),
        pl.col("carbon_g").sum().truediv(1000).alias("carbon_kg"),
        pl.col("carbon_known").any().alias("_carbon_known"),
        (pl.col("alloc_h") * 3600).sum().alias("_held_s"),
        pl.col("joules").sum().alias("_joules"),
    ).collect()
    tok = comp.request_summary.filter(pl.col("project").is_not_null()).group_by(keys).agg(
        pl.col(*TOKEN_COLS, "requests", "good_tokens").sum())
    t = cost.join(held, on=keys, how="full", coalesce=True).join(tok, on=keys, how="full", coalesce=True)
    t = t.with_columns(pl.col("cost").is_null().alias("_no_money")).with_columns(
        pl.col("cost", "inference_cost", "energy_cost", "allocated_gpu_hours", "active_gpu_hours",
               "covered_gpu_hours", "_util", "energy_kwh_gpu", "energy_kwh_facility", "carbon_kg", "_held_s",
               "_joules", "_energy_s").fill_null(0.0),
        pl.col(*TOKEN_COLS, "requests", "good_tokens").fill_null(0),
    )
    t = t.with_columns(*unknown_without_telemetry("covered_gpu_hours", "_energy_s"))
    if energy_priced_by_measurement(comp):
        # No power row to read the energy cost from: it is measured energy x price, unknown
        # (not 0) for an owner whose energy no sample measured.
        unmetered = (pl.col("allocated_gpu_hours") > 0) & pl.col("energy_kwh_gpu").is_null() & (pl.col("energy_cost") == 0)
        t = t.with_columns(pl.when(~unmetered).then(pl.col("energy_cost")).alias("energy_cost"))
    uncosted = uncosted_pools(comp)
    # An owner that held cards no price reached (none is in force for their pool then) has no
    # known cost: null, not $0.
    holed = coverage.rate_hole_owners(comp) if unpriced is None else unpriced
    if uncosted or holed.height:
        # An owner that no cost reached and that held cards of a pool no cost input reaches has
        # an unknown cost, not $0. (One that a cost did reach keeps it; the gap names the pool.)
        blind = pl.concat([
            comp.seg.lazy().filter(pl.col("project").is_not_null() & pl.col("pool").is_in(uncosted)
                                   & (pl.col("alloc_h") > 0)).select(*keys).collect(),
            holed.select(*keys)]).unique().with_columns(pl.lit(True).alias("_uncosted"))
        t = t.join(blind, on=keys, how="left").with_columns(
            pl.when(pl.col("_uncosted").is_null() | ~pl.col("_no_money")).then(pl.col(c)).alias(c)
            for c in ("cost", "inference_cost", "energy_cost")
        ).drop("_uncosted")
    t = t.drop("_no_money")
    # CO2e is unknown (not 0 kg) where no tariff gave the owner's energy a carbon intensity; an
    # owner that held no card emitted a known 0 kg.
    t = t.with_columns(pl.when(pl.col("_carbon_known").fill_null(False) | (pl.col("allocated_gpu_hours") == 0))
                       .then(pl.col("carbon_kg")).alias("carbon_kg"))
    tokens_all = pl.sum_horizontal(*TOKEN_COLS)
    t = t.with_columns(
        pl.when(pl.col("covered_gpu_hours") > 0).then(pl.col("_util") / pl.col("covered_gpu_hours")).alias("avg_util_pct"),
        pl.when(pl.col("allocated_gpu_hours") > 0)
        .then(pl.col("cost") / pl.col("allocated_gpu_hours"))
        .alias("cost_per_allocated_gpu_hour"),
        pl.when(tokens_all > 0).then(pl.col("inference_cost") / tokens_all * 1e6).alias("cost_per_million_tokens"),
        pl.when(pl.col("_held_s") > 0).then(pl.col("_joules") / pl.col("_held_s")).alias("avg_power_w_per_gpu"),
    ).drop("_util", "_held_s", "_joules", "_energy_s", "_carbon_known")
    # Ranked on the cost to a micro-unit: sums that differ only in the order they were added
    # (a reused summary, a fresh one) must not swap two owners of the same cost.
    return t.sort([pl.col("cost").round(6), *keys], descending=[True] + [False] * len(keys), nulls_last=True)


def energy_priced_by_measurement(comp: Computation) -> bool:
    """Whether the energy cost comes only from measured energy x price: power is inside the
    boundary and no `power` cost row is in the period (semantics: measured energy)."""
    power_rows = comp.inputs.filter((pl.col("origin") == "cost") & (pl.col("category") == "power"))
    return "power" in comp.config.boundary.included and power_rows.height == 0


def uncosted_pools(comp: Computation) -> list[str]:
    """Pools with allocated time that no cost input reaches: no cost row in force during the
    period names them or the whole fleet (whatever the boundary), no rate in force and no
    measured energy. Their holders' cost is unknown."""
    # A row wholly before or after the period prices none of its held time (an empty bound is
    # open, as in the spread): a pool reached only by such rows is unknown, not $0.
    p = comp.period
    costs, rates = (clip(comp.bundle[t], "start", "end", p.start, p.end) for t in ("costs", "rates"))
    if costs.filter(pl.col("pool").is_null() & pl.col("owner").is_null()).height:
        return []  # a fleet-wide row reaches every pool
    reached = set(costs["pool"].drop_nulls().to_list()) | set(rates["pool"].drop_nulls().to_list()) \
        | set(comp.inputs["pool"].drop_nulls().to_list())
    held = comp.seg.filter(pl.col("alloc_h") > 0)["pool"].drop_nulls().unique().to_list()
    return sorted(set(held) - reached)


def cost_gaps(comp: Computation) -> list[tuple[str, str]]:
    """What the report cannot price, said in gaps (the figures themselves are null)."""
    out = []
    pools = uncosted_pools(comp)
    if pools:
        out.append(("cost unknown", f"no cost row, rate or measured energy of the period reaches pool(s) {', '.join(pools)}: "
                    "owners holding their cards that no other cost reached have an unknown cost, the others "
                    "miss that pool's share"))
    return out


def unknown_without_telemetry(covered: str, energy_s: str) -> list[pl.Expr]:
    """Unknown is not zero: active hours where no telemetry covered the held time, and energy
    (with its carbon and average power) where no sample gave an energy reading, are null. An
    owner that held no card was active 0 h and drew 0 kWh: known, with nothing to measure (its
    average power, over no held time, stays null)."""
    held_nothing = pl.col("allocated_gpu_hours") == 0
    measured = (pl.col(covered) > 0) | held_nothing
    metered = (pl.col(energy_s) > 0) | held_nothing
    return [
        pl.when(measured).then(pl.col("active_gpu_hours")).alias("active_gpu_hours"),
        *(pl.when(metered).then(pl.col(c)).alias(c) for c in ("energy_kwh_gpu", "energy_kwh_facility", "carbon_kg")),
        pl.when(metered).then(pl.col("_held_s")).alias("_held_s"),
    ]


def totals(comp: Computation) -> dict:
    seg, money, req = comp.seg, comp.money, comp.request_summary
    held = pl.col("allocation_id").is_not_null()
    s = seg.select(
        pl.col("cap_h").sum().alias("available"),
        pl.col("alloc_h").sum().alias("allocated"),
        pl.col("active_h").sum().alias("active"),
        pl.col("covered_h").filter(held).sum().alias("covered"),
        (pl.col("util_h").sum() * 100).alias("util"),
        pl.col("kwh_gpu").sum().alias("kwh_gpu"),
        pl.col("kwh_fac").sum().alias("kwh_fac"),
        pl.col("joules").sum().alias("joules"),
        pl.col("energy_s").sum().alias("energy_s"),
        pl.col("carbon_g").sum().alias("carbon_g"),
        pl.col("carbon_known").any().alias("carbon_known"),
    ).row(0, named=True)
    # Unknown is not zero: without telemetry on the held time, activity is unknown; without an
    # energy reading, so are energy, power and carbon.
    active = s["active"] if s["covered"] > 0 else None
    metered = s["energy_s"] > 0
    available = s["available"] if comp.ledger.has_inventory else None
    # Unknown is not zero: with no cost input at all while cards were held in pools no cost
    # reaches, the fleet's cost is unknown; with some input it is that input's sum, and the
    # gap `cost unknown` names the pools it misses.
    cost = float(comp.inputs["amount"].sum()) if comp.inputs.height or not uncosted_pools(comp) else None
    tok = req.select(pl.col(*TOKEN_COLS).sum()).row(0, named=True)
    tok = {c: int(tok[c] or 0) for c in TOKEN_COLS}
    m = comp.models
    served = m.filter((pl.col("cost") > 0) & ((pl.col("input_tokens") + pl.col("cached_input_tokens") + pl.col("output_tokens")) > 0))
    served_tokens = float(served.select(pl.sum_horizontal(*TOKEN_COLS).sum()).item() or 0)
    served_good = float(served["good_tokens"].sum() or 0)
    model_joules = float(m["joules"].sum() or 0)
    return {
        "available_gpu_hours": available,
        "allocated_gpu_hours": s["allocated"],
        "active_gpu_hours": active,
        "unallocated_gpu_hours": None if available is None else max(available - s["allocated"], 0.0),
        "idle_rate": None if not available or active is None else 1 - active / available,
        "avg_util_pct": _div(s["util"], s["covered"]),
        "telemetry_coverage": _div(s["covered"], s["allocated"]),
        "cost": cost,
        "cost_per_gpu_hour": _div(cost, available),
        "cost_per_allocated_gpu_hour": _div(cost, s["allocated"]),
        "energy_kwh_gpu": s["kwh_gpu"] if metered else None,
        "energy_kwh_facility": s["kwh_fac"] if metered else None,
        # Unknown (not 0) where it would be measured energy x price and nothing was measured.
        "energy_cost": None if not metered and energy_priced_by_measurement(comp)
        else float(money.select(pl.col("amount").filter(pl.col("category") == "power").sum()).item()),
        **tok,
        "requests": int(req["requests"].sum()),
        "good_tokens": int(req["good_tokens"].sum()),
        "cost_per_million_tokens": _div(float(served["cost"].sum()) * 1e6, served_tokens),
        "cost_per_million_good_tokens": _div(float(served["cost"].sum()) * 1e6, served_good),
        "output_tokens_per_joule": _div(float(m["output_tokens"].filter(m["joules"] > 0).sum()), model_joules),
        "output_tokens_per_joule_facility": _div(
            float(m["output_tokens"].filter(m["joules"] > 0).sum()),
            model_joules * comp.config.energy.server_overhead * comp.config.energy.pue,
        ),
        "allocation_rate": _div(s["allocated"], available),
        "avg_power_w": _div(s["joules"], comp.period.hours * 3600) if metered else None,
        # Unknown where no tariff gave any of the energy a carbon intensity (never a made-up 0 kg).
        "carbon_kg": s["carbon_g"] / 1000 if metered and s["carbon_known"] else None,
    }


def reconciliation(comp: Computation) -> dict:
    money = comp.money
    input_cost = float(comp.inputs["amount"].sum())
    sums = money.select(pl.col("amount").filter(pl.col("dest") == d).sum().alias(d) for d in ("owner", IDLE, UNATTRIBUTED))
    by = {d: float(sums[d].item()) for d in ("owner", IDLE, UNATTRIBUTED)}
    diff = input_cost - by["owner"] - by[IDLE] - by[UNATTRIBUTED]
    return {
        "input_cost": input_cost,
        "attributed": by["owner"],
        "idle": by[IDLE],
        "unattributed": by[UNATTRIBUTED],
        "difference": diff,
    }


def token_reconciliation(comp: Computation) -> list[dict]:
    """Per model, overlap and request source: the tokens each source counted where two count the
    same hours, whether they were billed, and a check source's difference from the billed ones."""
    t = comp.token_reconciliation
    iso = "%Y-%m-%dT%H:%M:%SZ"
    return _rows(t.with_columns(pl.col("start").dt.strftime(iso), pl.col("end").dt.strftime(iso)))


def unattributed(comp: Computation) -> list[dict]:
    # Inference recharged onto callers that map to no project is one line per model row in
    # `money` (u_key null); what each key paid is in `unmapped_callers`.
    u = pl.concat([
        comp.money.lazy().filter((pl.col("dest") == UNATTRIBUTED) & pl.col("u_key").is_not_null())
        .group_by(pl.col("u_source").alias("source"), pl.col("u_key").alias("key"))
        .agg(pl.col("amount").sum().alias("cost"))
        .collect(),
        comp.unmapped_callers.group_by("source", "key").agg(pl.col("amount").sum().alias("cost")),
    ]).group_by("source", "key").agg(pl.col("cost").sum())
    # Every record carrying an unmapped key counts, including those that carried no cost.
    recs = pl.concat(
        [
            comp.allocations.filter(pl.col("project").is_null()).select("source", pl.col("owner").alias("key")),
            comp.request_summary.filter(pl.col("project").is_null())
            .select("source", pl.col("owner").alias("key"), "records"),
        ], how="diagonal"
    ).group_by("source", "key").agg(pl.col("records").fill_null(1).sum().cast(pl.Int64))
    t = u.join(recs, on=["source", "key"], how="full", coalesce=True).with_columns(
        pl.col("cost").fill_null(0.0), pl.col("records").fill_null(0)
    )
    return _rows(t.sort(["cost", "key", "source"], descending=[True, False, False]))


def idle_detail(comp: Computation) -> pl.DataFrame:
    """Every idle piece with its card, owner, day and cost (see idle.detail)."""
    return idle.detail(comp.seg, comp.idle, comp.money_spread)


def idle_table(comp: Computation) -> pl.DataFrame:
    """Idle GPU-hours, energy and cost per (kind, cause); unallocated cost = the idle bucket
    under `idle = "separate"` (what that idle time cost, whatever the treatment)."""
    return idle.by_cause(idle_detail(comp))


def quota_table(comp: Computation) -> pl.DataFrame:
    return idle.quota_use(comp.seg, comp.bundle["quotas"], comp.period.hours)


def trend(comp: Computation) -> pl.DataFrame:
    """Daily figures in period.timezone."""
    s = comp.seg.group_by("day").agg(
        pl.col("cap_h").sum().alias("available_gpu_hours"),
        pl.col("alloc_h").sum().alias("allocated_gpu_hours"),
        pl.when(pl.col("covered_h").filter(pl.col("allocation_id").is_not_null()).sum() > 0)
        .then(pl.col("active_h").sum()).alias("active_gpu_hours"),
        pl.when(pl.col("energy_s").sum() > 0).then(pl.col("kwh_gpu").sum()).alias("energy_kwh_gpu"),
    )
    c = comp.money.group_by("day").agg(
        pl.col("amount").sum().alias("cost"),
        pl.col("amount").filter(pl.col("dest") == IDLE).sum().alias("idle_cost"),
    )
    r = comp.request_summary.group_by("day").agg(pl.col(*TOKEN_COLS, "requests").sum())
    t = s.join(c, on="day", how="full", coalesce=True).join(r, on="day", how="full", coalesce=True).drop_nulls("day")
    known = ("active_gpu_hours", "energy_kwh_gpu")  # null stays null: unknown, not zero
    return t.with_columns(pl.exclude("day", *known).fill_null(0)).sort("day")


def build_report(comp: Computation) -> dict:
    """The report object; by_* sorted by cost, highest first."""
    cfg = comp.config
    detail = idle_detail(comp)
    idle_rows = idle.by_cause(detail)
    by_model = comp.models.select(
        "model", "cost", "allocated_gpu_hours", "active_gpu_hours", *TOKEN_COLS, "requests", "good_tokens",
        "cost_per_million_tokens", "cost_per_million_input_tokens", "cost_per_million_output_tokens",
        "cost_per_million_uncached_input_tokens", "cost_per_million_cached_input_tokens",
        "cost_per_million_good_tokens", "output_tokens_per_joule", "output_tokens_per_joule_facility",
        "energy_kwh_gpu", "energy_kwh_facility", "energy_cost", "carbon_kg", "avg_power_w_per_gpu", "cache_hit_rate",
        "slo_attainment", "error_share", "retry_share",
    )
    by_category = (
        comp.inputs.group_by("category").agg(pl.col("amount").sum().alias("cost")).sort(["cost", "category"],
                                                                                          descending=[True, False])
    )
    tot = totals(comp)
    part = coverage.partial(comp, energy_priced_by_measurement(comp), tot["carbon_kg"] is not None)
    return {
        "period": {
            "start": comp.period.start.isoformat().replace("+00:00", "Z"),
            "end": comp.period.end.isoformat().replace("+00:00", "Z"),
            "timezone": comp.period.timezone,
            "currency": comp.period.currency,
        },
        "boundary": {"name": cfg.boundary.name, "categories": list(cfg.boundary.included)},
        "totals": {k: _num(v) for k, v in tot.items()},
        "by_tenant": _rows(owner_table(comp, ["tenant"], part.unpriced)),
        "by_project": _rows(owner_table(comp, ["tenant", "project"], part.unpriced)),
        "by_model": _rows(by_model),
        "by_category": _rows(by_category),
        "idle": _rows(idle_rows),
        "idle_backlog": _rows(idle.backlog(detail)),
        "quotas": {"unit": idle.CAPACITY_UNIT, "rows": _rows(quota_table(comp))},
        "reconciliation": reconciliation(comp),
        "token_reconciliation": token_reconciliation(comp),
        "unattributed": unattributed(comp),
        "rejected": _rows(comp.rejected),
        "gaps": [{"what": w, "detail": d} for w, d in [*comp.gaps, *cost_gaps(comp), *part.gaps]],
        # Figures built on a span no rate or tariff covers (coverage.py): the figure's name, where
        # it is (totals, by_tenant, by_project, by_category), its row's key, and why.
        "partial": part.figures,
        "methods": {
            "energy_kwh_facility": f"allocation method: GPU kWh x server_overhead {cfg.energy.server_overhead:g} x PUE {cfg.energy.pue:g}",
            "activity": (f"threshold: util >= {cfg.activity.threshold_pct:g}%" if cfg.activity.mode == "threshold"
                         else "weighted: time x util / 100"),
            "idle": cfg.allocation.idle,
            "inference_recharge": cfg.allocation.inference_recharge,
        },
        "trend": [{**r, "day": r["day"].isoformat()} for r in _rows(trend(comp))],
        "model_trend": [
            {**r, "day": r["day"].isoformat()}
            for r in _rows(model_trend(comp.money_before_recharge, comp.seg, comp.request_summary,
                                       comp.request_hours))
        ],
    }
