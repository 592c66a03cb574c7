"""A scenario's sensitivity to one parameter and the break-even between two options."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import polars as pl
from pydantic import BaseModel, ConfigDict

from .scenario_eval import _base_load, _cards_exact, _cost, _horizon, _parts, evaluate, workload_summary
from .scenario_model import Owned, Rented, SWEEP_PARAMETERS, Scenario, ScenarioError, parse_scenario

# ---------------------------------------------------------------------------
# Sensitivity
# ---------------------------------------------------------------------------


def _scale_peak(w: dict, factor: float) -> None:
    """Scale the peak output rate where it is given in absolute terms (ratios follow the volume)."""
    if w.get("peak_output_tokens_per_s") is not None:
        w["peak_output_tokens_per_s"] *= factor
    elif w.get("peak_concurrency") is not None and w.get("avg_concurrency") is None:
        w["peak_concurrency"] *= factor
    elif w.get("peak_concurrency") is not None:
        w["peak_concurrency"] *= factor
        w["avg_concurrency"] *= factor


def with_parameter(scenario: Scenario, parameter: str, value: float) -> Scenario:
    """The scenario with one SWEEP_PARAMETERS parameter set to ``value`` (see SWEEP_PARAMETERS for units)."""
    if parameter not in SWEEP_PARAMETERS:
        raise ScenarioError(f"unknown sweep parameter {parameter!r}; known: {list(SWEEP_PARAMETERS)}")
    v = float(value)
    d = scenario.model_dump()
    w = d["workload"]
    opts = d["options"]
    if parameter == "utilization":
        for o in opts:
            if o["kind"] in ("rented", "owned"):
                o["utilization"] = v
    elif parameter == "volume":
        for k in ("input_tokens_per_month", "cached_input_tokens_per_month", "output_tokens_per_month"):
            w[k] *= v
        _scale_peak(w, v)
    elif parameter == "io_ratio":
        if v < 0:
            raise ScenarioError("sweep io_ratio: value must be >= 0")
        total = w["input_tokens_per_month"] + w["cached_input_tokens_per_month"] + w["output_tokens_per_month"]
        inputs = w["input_tokens_per_month"] + w["cached_input_tokens_per_month"]
        cached_share = w["cached_input_tokens_per_month"] / inputs if inputs > 0 else 0.0
        new_out = total / (1 + v)
        factor = new_out / w["output_tokens_per_month"]
        w["output_tokens_per_month"] = new_out
        w["input_tokens_per_month"] = (total - new_out) * (1 - cached_share)
        w["cached_input_tokens_per_month"] = (total - new_out) * cached_share
        _scale_peak(w, factor)
    elif parameter == "gpu_price":
        for o in opts:
            if o["kind"] == "rented":
                o["price_per_gpu_hour"] *= v
            elif o["kind"] == "owned":
                old = o["price_per_card"] + o["other_bom_per_card"]
                o["price_per_card"] *= v
                new = o["price_per_card"] + o["other_bom_per_card"]
                if o.get("residual_per_card") is not None and old > 0:
                    o["residual_per_card"] *= new / old
    elif parameter == "api_price":
        for o in opts:
            if o["kind"] == "hosted_api":
                for k in ("price_per_m_input", "price_per_m_cached_input", "price_per_m_output"):
                    if o.get(k) is not None:
                        o[k] *= v
    elif parameter == "power_price":
        for o in opts:
            if o["kind"] in ("rented", "owned"):
                o["price_per_kwh"] = v
    elif parameter == "residual":
        for o in opts:
            if o["kind"] == "owned":
                o["residual_fraction"] = v
                o["residual_per_card"] = None
    elif parameter == "growth":
        w["growth_per_month"] = v
    try:
        return parse_scenario(d)
    except ScenarioError as exc:
        raise ScenarioError(f"sweep {parameter}={value}: {exc}") from None


def default_sweep_values(scenario: Scenario, parameter: str) -> list[float]:
    """A sensible range of values for ``parameter`` around the scenario."""
    if parameter == "io_ratio":
        r = workload_summary(scenario)["input_per_output"]
        return [r * f for f in (0.25, 0.5, 1.0, 2.0, 4.0)]
    table = {
        "utilization": [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
        "volume": [0.25, 0.5, 1.0, 2.0, 4.0, 8.0],
        "gpu_price": [0.5, 0.75, 1.0, 1.25, 1.5],
        "api_price": [0.5, 0.75, 1.0, 1.25, 1.5],
        "power_price": [0.05, 0.10, 0.15, 0.20, 0.30],
        "residual": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5],
        "growth": [0.0, 0.02, 0.05, 0.10],
    }
    if parameter not in table:
        raise ScenarioError(f"unknown sweep parameter {parameter!r}; known: {list(SWEEP_PARAMETERS)}")
    return table[parameter]


_SWEEP_SCHEMA = {
    "parameter": pl.String,
    "value": pl.Float64,
    "option": pl.String,
    "kind": pl.String,
    "monthly_cost": pl.Float64,
    "cost_per_million_tokens": pl.Float64,
    "cost_per_million_useful_tokens": pl.Float64,
    "cards": pl.Float64,
    "utilization": pl.Float64,
    "horizon_cost": pl.Float64,
    "horizon_cost_per_million_tokens": pl.Float64,
}


def sweep(scenario: Scenario, parameter: str, values: Iterable[float]) -> pl.DataFrame:
    """One row per (value, option): monthly cost and $ per 1M tokens with ``parameter`` set to each value."""
    rows = []
    for v in values:
        for r in evaluate(with_parameter(scenario, parameter, v)):
            rows.append(
                {
                    "parameter": parameter,
                    "value": float(v),
                    "option": r.name,
                    "kind": r.kind,
                    "monthly_cost": r.monthly_cost,
                    "cost_per_million_tokens": r.cost_per_million_tokens,
                    "cost_per_million_useful_tokens": r.cost_per_million_useful_tokens,
                    "cards": r.cards,
                    "utilization": r.utilization,
                    "horizon_cost": r.horizon_cost,
                    "horizon_cost_per_million_tokens": r.horizon_cost_per_million_tokens,
                }
            )
    return pl.DataFrame(rows, schema=_SWEEP_SCHEMA, orient="row") if rows else pl.DataFrame(schema=_SWEEP_SCHEMA)


# ---------------------------------------------------------------------------
# Break-even
# ---------------------------------------------------------------------------


class BreakEven(BaseModel):
    """Where two options cost the same: by monthly volume, and by month of cumulative cost with growth."""

    model_config = ConfigDict(frozen=True)

    a: str
    b: str
    volume_tokens: float | None  # monthly tokens (input + cached + output, the scenario's mix)
    volume_output_tokens: float | None
    volume_scale: float | None  # as a multiple of the scenario's monthly volume
    monthly_cost_a: float | None
    monthly_cost_b: float | None
    at_card_step: bool = False  # the cheaper option flips where a fleet adds a card: costs not equal there
    cheaper_below: str | None = None
    cheaper_above: str | None = None
    volume_reason: str | None = None
    month: int | None
    cumulative_a: float | None
    cumulative_b: float | None
    cheaper_before: str | None = None
    cheaper_after: str | None = None
    month_reason: str | None = None


@dataclass
class _Lin:
    """monthly cost(k) = alpha + gamma x k + sum(beta_i x cards_i(k)), cards_i(k) = ceil(R_i x k) or R_i x k."""

    alpha: float
    gamma: float
    steps: list[tuple[float, float]]  # (R_i cards per unit of k, beta_i $ per card)
    scale: float = 0.0  # the largest cost the coefficients were read from (for float-noise tolerance)


def _sizes_fleet(opt: Any) -> bool:
    return isinstance(opt, Owned) or (isinstance(opt, Rented) and opt.billing == "committed")


def _linear(opt: Any, sc: Scenario) -> _Lin:
    """Each option's cost is affine in the volume once its card counts are pinned; read the coefficients off _cost."""
    alpha = gamma = scale = 0.0
    steps = []
    for o, load in _parts(opt, sc, _base_load(sc)):
        if _sizes_fleet(o):
            c11 = _cost(o, load, sc, cards=1.0).total
            c21 = _cost(o, load.scaled(2.0), sc, cards=1.0).total
            c12 = _cost(o, load, sc, cards=2.0).total
            g, beta = c21 - c11, c12 - c11
            scale = max(scale, abs(c11), abs(c21), abs(c12))
            alpha += c11 - g - beta
            gamma += g
            steps.append((_cards_exact(o, load, sc), beta))
        else:
            c1 = _cost(o, load, sc).total
            c2 = _cost(o, load.scaled(2.0), sc).total
            alpha += 2 * c1 - c2
            gamma += c2 - c1
            scale = max(scale, abs(c1), abs(c2))
    return _Lin(alpha, gamma, steps, scale)


_K_MAX = 1000.0
_MAX_SEGMENTS = 200_000


def _snap(diff: float, scale: float) -> float:
    """A difference that is float noise (relative to the costs it was computed from) is zero."""
    return 0.0 if abs(diff) <= 1e-9 * scale else diff


def _volume_break_even(la: _Lin, lb: _Lin, whole: bool) -> dict[str, Any]:
    """Solve cost_a(k) = cost_b(k) segment by segment (costs are affine between card steps).

    Returns status ('root', 'step', 'never', 'same'), k, the costs of a and b there (just above k
    for a step), k_max searched and which option ('a'/'b') is cheaper at low volume.
    """
    noise = max(la.scale, lb.scale)
    if not whole:
        ga = la.gamma + sum(r * b for r, b in la.steps)
        gb = lb.gamma + sum(r * b for r, b in lb.steps)
        a0, g = _snap(la.alpha - lb.alpha, noise), _snap(ga - gb, noise)
        if a0 == 0 and g == 0:
            return {"status": "same", "k_max": math.inf, "low": None}
        low = "a" if a0 < 0 or (a0 == 0 and g < 0) else "b"
        if g != 0 and -a0 / g > 0:
            k = -a0 / g
            return {
                "status": "root",
                "k": k,
                "cost_a": la.alpha + ga * k,
                "cost_b": lb.alpha + gb * k,
                "k_max": math.inf,
                "low": low,
            }
        return {"status": "never", "k_max": math.inf, "low": low}
    sa = [(r, b) for r, b in la.steps if r > 0]
    sb = [(r, b) for r, b in lb.steps if r > 0]
    rsum = sum(r for r, _ in sa + sb)
    k_max = min(_K_MAX, _MAX_SEGMENTS / rsum) if rsum > 0 else _K_MAX
    bps = {k_max}
    for r, _ in sa + sb:
        bps.update(n / r for n in range(1, int(math.floor(r * k_max)) + 1))
    prev, prev_right, low = 0.0, None, None
    for b in sorted(x for x in bps if 0 < x <= k_max):
        mid = (prev + b) / 2
        fa = la.alpha + sum(beta * math.ceil(r * mid) for r, beta in sa)
        fb = lb.alpha + sum(beta * math.ceil(r * mid) for r, beta in sb)
        a0, g = _snap(fa - fb, noise), _snap(la.gamma - lb.gamma, noise)
        f_left, f_right = a0 + g * prev, a0 + g * b
        if low is None:
            low = "a" if f_left < 0 or (f_left == 0 and g < 0) else "b"
        k = None
        status = "root"
        if prev_right is not None and prev_right * f_left < 0:
            k, status = prev, "step"
        elif g != 0 and prev < -a0 / g <= b:
            k = -a0 / g
        elif g == 0 and a0 == 0:
            k = prev if prev > 0 else b
        if k is not None:
            return {
                "status": status,
                "k": k,
                "cost_a": fa + la.gamma * k,
                "cost_b": fb + lb.gamma * k,
                "k_max": k_max,
                "low": low,
            }
        prev, prev_right = b, f_right
    return {"status": "never", "k_max": k_max, "low": low}


def break_even(scenario: Scenario, a: str, b: str) -> BreakEven:
    """The monthly volume where ``a`` and ``b`` cost the same, and the month their cumulative costs cross.

    Volume: every token volume and the peak scale together (the scenario's mix and peak-to-average);
    each fleet is sized for the volume; the first volume where the cheaper option changes is reported.
    It is exact (equal monthly costs) unless the change happens where a fleet adds a card
    (``at_card_step``). Searched up to 1000x the scenario's volume (less for very large fleets).

    Month: cumulative cash from month 1 with the scenario's growth: capex paid when cards are bought,
    residual credited at the end of each card's life; the first month where the cheaper option changes.
    """
    oa, ob = scenario.option(a), scenario.option(b)
    if a == b:
        raise ScenarioError("break-even needs two different options")
    base = _base_load(scenario)
    whole = scenario.whole_cards
    la, lb = _linear(oa, scenario), _linear(ob, scenario)
    sol = _volume_break_even(la, lb, whole)
    status, k_max, low = sol["status"], sol["k_max"], sol["low"]
    name = {"a": a, "b": b, None: None}
    other = {"a": b, "b": a, None: None}
    vol: dict[str, Any] = dict(
        volume_tokens=None, volume_output_tokens=None, volume_scale=None, monthly_cost_a=None, monthly_cost_b=None
    )
    reason = None
    cheaper_below, cheaper_above = name[low], None
    if status in ("root", "step"):
        k = sol["k"]
        vol = dict(
            volume_tokens=k * base.total,
            volume_output_tokens=k * base.output,
            volume_scale=k,
            monthly_cost_a=sol["cost_a"],
            monthly_cost_b=sol["cost_b"],
        )
        cheaper_above = other[low]
        if status == "step":
            reason = (
                "the cheaper option changes where a fleet adds a card; no volume gives equal monthly costs "
                "(costs shown just above that volume)"
            )
    elif status == "same":
        reason = f"{a} and {b} cost the same at every volume"
    else:
        lim = (
            "any volume"
            if math.isinf(k_max)
            else f"every monthly volume up to {k_max:.4g}x the scenario's ({k_max * base.total:.4g} tokens)"
        )
        reason = f"{name[low]} is cheaper at {lim}"

    months_a = _horizon(_parts(oa, scenario, base), scenario)
    months_b = _horizon(_parts(ob, scenario, base), scenario)
    cum_a = cum_b = 0.0
    first_sign = None
    month = None
    before = after = None
    for ma, mb in zip(months_a, months_b):
        cum_a += ma.cash
        cum_b += mb.cash
        d = cum_a - cum_b
        s = (d > 0) - (d < 0)
        if first_sign is None:
            first_sign = s
            before = None if s == 0 else (b if s > 0 else a)
            if s == 0:
                month = ma.month
                break
            continue
        if s != first_sign:
            month = ma.month
            after = None if s == 0 else (b if s > 0 else a)
            break
    m_reason = None
    if month is None:
        m_reason = (
            f"{before} stays cheaper (cumulative cash) through month {len(months_a)} of the horizon: "
            f"{a} {cum_a:,.0f} vs {b} {cum_b:,.0f}"
        )
    cum = dict(cumulative_a=cum_a, cumulative_b=cum_b)
    return BreakEven(
        a=a,
        b=b,
        **vol,
        at_card_step=status == "step",
        cheaper_below=cheaper_below,
        cheaper_above=cheaper_above,
        volume_reason=reason,
        month=month,
        **cum,
        cheaper_before=before,
        cheaper_after=after,
        month_reason=m_reason,
    )


def cumulative_costs(scenario: Scenario, names: Sequence[str] | None = None) -> pl.DataFrame:
    """Month, option, monthly and cumulative cost (accrual) and cash, with growth, for charts."""
    base = _base_load(scenario)
    rows = []
    for o in scenario.options:
        if names is not None and o.name not in names:
            continue
        ca = cc = 0.0
        for m in _horizon(_parts(o, scenario, base), scenario):
            ca += m.accrual
            cc += m.cash
            rows.append(
                {
                    "month": m.month,
                    "option": o.name,
                    "tokens": m.tokens,
                    "cost": m.accrual,
                    "cash": m.cash,
                    "cumulative_cost": ca,
                    "cumulative_cash": cc,
                }
            )
    schema = {
        "month": pl.Int64,
        "option": pl.String,
        "tokens": pl.Float64,
        "cost": pl.Float64,
        "cash": pl.Float64,
        "cumulative_cost": pl.Float64,
        "cumulative_cash": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
