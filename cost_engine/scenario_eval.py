"""Pricing a scenario: each option's monthly cost by category, its horizon and its unit costs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import polars as pl
from pydantic import BaseModel, ConfigDict

from .scenario_model import CATEGORIES, ITEM_CATEGORY, HostedApi, Hybrid, Owned, Rented, Scenario, Split, _peak_tps
from .unit_cost import _J_PER_KWH, _SECONDS_PER_HOUR, capital_cost_per_month

# ---------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Load:
    """A month of tokens for one option (or one part of a hybrid), and its peak output rate."""

    input: float
    cached: float
    output: float
    peak_tps: float

    def scaled(self, k: float) -> _Load:
        return _Load(self.input * k, self.cached * k, self.output * k, self.peak_tps * k)

    @property
    def total(self) -> float:
        return self.input + self.cached + self.output


def _base_load(sc: Scenario) -> _Load:
    w = sc.workload
    return _Load(
        w.input_tokens_per_month,
        w.cached_input_tokens_per_month,
        w.output_tokens_per_month,
        _peak_tps(w, sc.hours_per_month),
    )


def _avg_tps(load: _Load, sc: Scenario) -> float:
    return load.output / (sc.hours_per_month * _SECONDS_PER_HOUR)


def _ceil(x: float) -> float:
    return float(math.ceil(x - 1e-9 * max(1.0, abs(x))))


def _round_cards(x: float, sc: Scenario) -> float:
    return _ceil(x) if sc.whole_cards else x


def _cards_exact(opt: Rented | Owned, load: _Load, sc: Scenario) -> float:
    """Fractional cards: enough for the peak at full SLO throughput and for the average at the utilization."""
    tps = opt.output_tokens_per_s_per_gpu
    return max(load.peak_tps / tps, _avg_tps(load, sc) / (tps * opt.utilization))


def _input_share(split: Split, load: _Load) -> float:
    if split.method == "phase_time":
        return split.prefill_time_share
    i = split.input_weight * load.input + split.cached_input_weight * load.cached
    o = split.output_weight * load.output
    return i / (i + o) if i + o > 0 else 0.0


def _share_above(peak: float, avg: float, level: float) -> float:
    """Share of the month's tokens above ``level`` on a straight-line load-duration curve.

    The curve falls linearly from the peak; its mean is the average. When 2 x average >= peak it
    ends at the trough 2 x average - peak at the month's end; otherwise it reaches zero after the
    fraction 2 x average / peak of the month.
    """
    if avg <= 0:
        return 0.0
    level = max(0.0, level)
    if peak <= avg * (1 + 1e-12):
        return max(0.0, avg - level) / avg
    if 2 * avg >= peak:
        trough, frac = 2 * avg - peak, 1.0
    else:
        trough, frac = 0.0, 2 * avg / peak
    if level >= peak:
        return 0.0
    if level <= trough:
        area = avg - level
    else:
        area = frac * (peak - level) ** 2 / (2 * (peak - trough))
    return min(1.0, max(0.0, area / avg))


@dataclass
class _Cost:
    items: dict[str, float]
    input_cost: float
    cards: float | None = None
    cards_for_peak: float | None = None
    gpu_kwh: float | None = None
    facility_kwh: float | None = None
    energy_output_tokens: float = 0.0
    busy_hours: float = 0.0
    paid_hours: float = 0.0
    utilization_target: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> float:
        return sum(self.items.values())


def _cost(opt: HostedApi | Rented | Owned, load: _Load, sc: Scenario, cards: float | None = None) -> _Cost:
    """One plain option's monthly cost for ``load``; ``cards`` pins the fleet (None: sized for the load)."""
    if isinstance(opt, HostedApi):
        cached_price = opt.price_per_m_input if opt.price_per_m_cached_input is None else opt.price_per_m_cached_input
        f_in = load.input * opt.price_per_m_input / 1e6
        f_cached = load.cached * cached_price / 1e6
        f_out = load.output * opt.price_per_m_output / 1e6
        fees = f_in + f_cached + f_out
        share = (f_in + f_cached) / fees if fees > 0 else _input_share(sc.split, load)
        items = {"api_input": f_in, "api_cached_input": f_cached, "api_output": f_out, "api_other": opt.other_monthly}
        return _Cost(items, f_in + f_cached + opt.other_monthly * share)

    h = sc.hours_per_month
    tps = opt.output_tokens_per_s_per_gpu
    busy_hours = load.output / (tps * _SECONDS_PER_HOUR)  # card-hours of full-speed work
    peak_cards = _round_cards(load.peak_tps / tps, sc)
    notes: list[str] = []
    on_demand = isinstance(opt, Rented) and opt.billing == "on_demand"
    if on_demand:
        paid_hours = busy_hours / opt.utilization
        n = paid_hours / h
    else:
        n = _round_cards(_cards_exact(opt, load, sc), sc) if cards is None else cards
        paid_hours = n * h
    items: dict[str, float] = {}
    gpu_kwh = facility_kwh = None
    idle_w, peak_w = opt.idle_w, opt.peak_w
    if idle_w is not None and peak_w is not None:
        # Each paid card-hour draws idle power; busy time adds (peak - idle): the linear draw model, summed.
        gpu_kwh = (idle_w * paid_hours + (peak_w - idle_w) * busy_hours) / 1000.0
        facility_kwh = gpu_kwh * opt.server_factor * opt.pue
    if isinstance(opt, Rented):
        items["gpu_rental"] = paid_hours * opt.price_per_gpu_hour
        if not opt.power_included:
            items["power_cooling"] = facility_kwh * opt.price_per_kwh
        elif gpu_kwh is not None:
            notes.append("power is included in the rental price; energy shown for tokens per joule")
    else:
        dep, fin = capital_cost_per_month(opt.capex_per_card, opt.residual_value, opt.financing_rate, opt.life_months)
        items["depreciation"] = n * dep
        items["financing"] = n * fin
        items["power_cooling"] = facility_kwh * opt.price_per_kwh
        items["facility"] = opt.facility_monthly
        items["support"] = opt.support_monthly
    items["storage"] = opt.storage_monthly
    items["network"] = opt.network_monthly
    items["software"] = opt.software_monthly
    items["staff"] = opt.staff_monthly
    if not on_demand and paid_hours > 0 and cards is None:
        realized = busy_hours / paid_hours
        if realized < opt.utilization * (1 - 1e-6):
            why = "cards are sized for the peak" if peak_cards >= n * (1 - 1e-9) else "cards are whole"
            notes.append(f"utilization {realized:.1%} is below the achievable {opt.utilization:.1%}: {why}")
    total = sum(items.values())
    return _Cost(
        items,
        total * _input_share(sc.split, load),
        cards=n,
        cards_for_peak=peak_cards,
        gpu_kwh=gpu_kwh,
        facility_kwh=facility_kwh,
        energy_output_tokens=load.output if gpu_kwh is not None else 0.0,
        busy_hours=busy_hours,
        paid_hours=paid_hours,
        utilization_target=opt.utilization,
        notes=notes,
    )


def _parts(opt: Any, sc: Scenario, load: _Load) -> list[tuple[HostedApi | Rented | Owned, _Load]]:
    """The plain options that serve ``load`` for ``opt``: itself, or a hybrid's base and burst."""
    if not isinstance(opt, Hybrid):
        return [(opt, load)]
    base, burst, _, _ = _hybrid_split(opt, sc, load)
    return [(sc.option(opt.base), base), (sc.option(opt.burst), burst)]


def _hybrid_split(h: Hybrid, sc: Scenario, load: _Load) -> tuple[_Load, _Load, float, float]:
    peak, avg = load.peak_tps, _avg_tps(load, sc)
    level = min(peak, avg if h.base_level_fraction is None else h.base_level_fraction * peak)
    s = h.burst_token_share if h.burst_token_share is not None else _share_above(peak, avg, level)
    base = _Load(load.input * (1 - s), load.cached * (1 - s), load.output * (1 - s), level)
    burst = _Load(load.input * s, load.cached * s, load.output * s, max(0.0, peak - level))
    return base, burst, s, level


def _sum_opt(vals: Iterable[float | None]) -> float | None:
    vs = [v for v in vals if v is not None]
    return sum(vs) if vs else None


def _merge(costs: list[tuple[str, _Cost]]) -> _Cost:
    if len(costs) == 1:
        return costs[0][1]
    items: dict[str, float] = {}
    for _, c in costs:
        for k, v in c.items.items():
            items[k] = items.get(k, 0.0) + v
    notes = [f"{name}: {n}" for name, c in costs for n in c.notes]
    return _Cost(
        items,
        sum(c.input_cost for _, c in costs),
        cards=_sum_opt(c.cards for _, c in costs),
        cards_for_peak=_sum_opt(c.cards_for_peak for _, c in costs),
        gpu_kwh=_sum_opt(c.gpu_kwh for _, c in costs),
        facility_kwh=_sum_opt(c.facility_kwh for _, c in costs),
        energy_output_tokens=sum(c.energy_output_tokens for _, c in costs),
        busy_hours=sum(c.busy_hours for _, c in costs),
        paid_hours=sum(c.paid_hours for _, c in costs),
        utilization_target=None,
        notes=notes,
    )


@dataclass
class _Month:
    month: int
    scale: float
    accrual: float
    cash: float
    tokens: float
    capex: float


def _horizon(parts: list[tuple[Any, _Load]], sc: Scenario) -> list[_Month]:
    """Month by month with growth: accrual (the monthly cost) and cash (capex when bought, residual at end of life).

    Owned fleets buy cards when the month's load needs them and never shrink; each card is replaced
    at the end of its life (residual credited in its last month, capex again the month after).
    Rented committed fleets follow the month's need.
    """
    g = sc.workload.growth_per_month
    fleet = [0.0] * len(parts)
    cohorts: list[list[tuple[int, float]]] = [[] for _ in parts]
    out = []
    for m in range(1, sc.workload.months + 1):
        k = (1 + g) ** (m - 1)
        acc = cash = capex_m = tokens = 0.0
        for j, (opt, load) in enumerate(parts):
            lk = load.scaled(k)
            tokens += lk.total
            if isinstance(opt, Owned):
                need = _round_cards(_cards_exact(opt, lk, sc), sc)
                n = max(fleet[j], need)
                buy = n - fleet[j]
                c = _cost(opt, lk, sc, cards=n)
                capex, resid = opt.capex_per_card, opt.residual_value
                c_cash = c.total - c.items["depreciation"] + buy * capex
                capex_m += buy * capex
                if buy > 0:
                    cohorts[j].append((m, buy))
                for start, count in cohorts[j]:
                    age = m - start + 1  # months in service, this one included
                    if age > 1 and (age - 1) % opt.life_months == 0:
                        c_cash += count * capex
                        capex_m += count * capex
                    if age % opt.life_months == 0:
                        c_cash -= count * resid
                fleet[j] = n
            else:
                c = _cost(opt, lk, sc)
                c_cash = c.total
            acc += c.total
            cash += c_cash
        out.append(_Month(m, k, acc, cash, tokens, capex_m))
    return out


class OptionResult(BaseModel):
    """One option's figures for the scenario's first month (no growth) and over the horizon."""

    model_config = ConfigDict(frozen=True)

    name: str
    kind: str
    variant: str | None  # owned: condition; rented: billing; hybrid: "base + burst"
    monthly_cost: float
    breakdown: dict[str, float]  # the six CATEGORIES
    items: dict[str, float]  # line items (ITEM_CATEGORY)
    input_cost: float
    output_cost: float
    input_tokens: float
    cached_input_tokens: float
    output_tokens: float
    tokens: float
    cost_per_million_tokens: float | None
    cost_per_million_input_tokens: float | None  # input cost / (input + cached)
    cost_per_million_output_tokens: float | None
    cost_per_million_useful_tokens: float | None  # monthly cost / (tokens x acceptance)
    cost_per_million_useful_output_tokens: float | None  # monthly cost / (output x acceptance)
    cards: float | None  # cards paid for (on demand: average cards held)
    cards_for_peak: float | None  # cards needed for the peak at the SLO
    utilization: float | None  # busy card-hours / paid card-hours
    utilization_target: float | None
    energy_kwh_gpu: float | None
    energy_kwh_facility: float | None
    output_tokens_per_joule_gpu: float | None
    output_tokens_per_joule_facility: float | None
    burst_token_share: float | None = None
    upfront_capex: float
    horizon_months: int
    horizon_tokens: float
    horizon_cost: float  # sum of monthly costs with growth
    horizon_cash: float  # capex when bought, residual back at end of life
    horizon_cost_per_million_tokens: float | None
    notes: tuple[str, ...] = ()


def _per_m(cost: float, tokens: float) -> float | None:
    return cost / tokens * 1e6 if tokens > 0 else None


def _variant(opt: Any) -> str | None:
    if isinstance(opt, Owned):
        return opt.condition
    if isinstance(opt, Rented):
        return opt.billing
    if isinstance(opt, Hybrid):
        return f"{opt.base} + {opt.burst}"
    return None


def _result(opt: Any, sc: Scenario, load: _Load) -> OptionResult:
    parts = _parts(opt, sc, load)
    c = _merge([(o.name, _cost(o, ld, sc)) for o, ld in parts])
    months = _horizon(parts, sc)
    total = c.total
    acc = sc.workload.acceptance_rate
    breakdown = {cat: 0.0 for cat in CATEGORIES}
    for k, v in c.items.items():
        breakdown[ITEM_CATEGORY[k]] += v
    gpu_j = c.gpu_kwh * _J_PER_KWH if c.gpu_kwh else None
    fac_j = c.facility_kwh * _J_PER_KWH if c.facility_kwh else None
    share = None
    notes = list(c.notes)
    if isinstance(opt, Hybrid):
        _, _, share, level = _hybrid_split(opt, sc, load)
        notes.insert(0, f"{opt.base} serves up to {level:.6g} output tokens/s; {opt.burst} serves {share:.1%} of tokens")
        if c.energy_output_tokens < load.output and c.gpu_kwh is not None:
            notes.append("energy covers only the parts with known power")
    h_cost = sum(m.accrual for m in months)
    h_tokens = sum(m.tokens for m in months)
    return OptionResult(
        name=opt.name,
        kind=opt.kind,
        variant=_variant(opt),
        monthly_cost=total,
        breakdown=breakdown,
        items=c.items,
        input_cost=c.input_cost,
        output_cost=total - c.input_cost,
        input_tokens=load.input,
        cached_input_tokens=load.cached,
        output_tokens=load.output,
        tokens=load.total,
        cost_per_million_tokens=_per_m(total, load.total),
        cost_per_million_input_tokens=_per_m(c.input_cost, load.input + load.cached),
        cost_per_million_output_tokens=_per_m(total - c.input_cost, load.output),
        cost_per_million_useful_tokens=_per_m(total, load.total * acc),
        cost_per_million_useful_output_tokens=_per_m(total, load.output * acc),
        cards=c.cards,
        cards_for_peak=c.cards_for_peak,
        utilization=c.busy_hours / c.paid_hours if c.paid_hours > 0 else None,
        utilization_target=c.utilization_target,
        energy_kwh_gpu=c.gpu_kwh,
        energy_kwh_facility=c.facility_kwh,
        output_tokens_per_joule_gpu=c.energy_output_tokens / gpu_j if gpu_j else None,
        output_tokens_per_joule_facility=c.energy_output_tokens / fac_j if fac_j else None,
        burst_token_share=share,
        upfront_capex=months[0].capex,
        horizon_months=len(months),
        horizon_tokens=h_tokens,
        horizon_cost=h_cost,
        horizon_cash=sum(m.cash for m in months),
        horizon_cost_per_million_tokens=_per_m(h_cost, h_tokens),
        notes=tuple(notes),
    )


def evaluate(scenario: Scenario) -> list[OptionResult]:
    """Every option's figures for the scenario's workload, in the scenario's order."""
    load = _base_load(scenario)
    return [_result(o, scenario, load) for o in scenario.options]


def workload_summary(scenario: Scenario) -> dict[str, float | int | None]:
    """The workload's derived figures: rates, peak-to-average and the utilization it allows."""
    w = scenario.workload
    load = _base_load(scenario)
    avg = _avg_tps(load, scenario)
    g = w.growth_per_month
    horizon = sum(load.total * (1 + g) ** m for m in range(w.months))
    return {
        "input_tokens_per_month": load.input,
        "cached_input_tokens_per_month": load.cached,
        "output_tokens_per_month": load.output,
        "tokens_per_month": load.total,
        "input_per_output": (load.input + load.cached) / load.output,
        "avg_output_tokens_per_s": avg,
        "peak_output_tokens_per_s": load.peak_tps,
        "peak_to_average": load.peak_tps / avg,
        "utilization_ceiling_at_peak_sizing": avg / load.peak_tps,
        "growth_per_month": g,
        "months": w.months,
        "horizon_tokens": horizon,
        "acceptance_rate": w.acceptance_rate,
        "ttft_ms": w.ttft_ms,
        "latency_ms": w.latency_ms,
    }


def results_frame(results: Sequence[OptionResult]) -> pl.DataFrame:
    """The results as one row per option (the table the CLI and the page show)."""
    cols = {
        "option": pl.String,
        "kind": pl.String,
        "variant": pl.String,
        "monthly_cost": pl.Float64,
        "cost_per_million_tokens": pl.Float64,
        "cost_per_million_input_tokens": pl.Float64,
        "cost_per_million_output_tokens": pl.Float64,
        "cost_per_million_useful_tokens": pl.Float64,
        "cards": pl.Float64,
        "cards_for_peak": pl.Float64,
        "utilization": pl.Float64,
        "energy_kwh_facility": pl.Float64,
        "output_tokens_per_joule_gpu": pl.Float64,
        "output_tokens_per_joule_facility": pl.Float64,
        "upfront_capex": pl.Float64,
        "horizon_cost": pl.Float64,
        "horizon_cash": pl.Float64,
        **{c: pl.Float64 for c in CATEGORIES},
    }
    rows = []
    for r in results:
        d = r.model_dump()
        d["option"] = r.name
        d.update(r.breakdown)
        rows.append({k: d[k] for k in cols})
    return pl.DataFrame(rows, schema=cols, orient="row") if rows else pl.DataFrame(schema=cols)
