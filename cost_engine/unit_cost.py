"""The seed's unit-cost formulas, exact: $ per million tokens from a GPU-hour price or a monthly fixed cost, and the capital cost of a card per month."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

_SECONDS_PER_HOUR = 3600.0
_J_PER_KWH = 3.6e6


# ---------------------------------------------------------------------------
# Seed formulas, exact
# ---------------------------------------------------------------------------


def cost_per_million_tokens(price_per_gpu_hour: float, tokens_per_s: float, gpus: float = 1.0) -> float:
    """Seeds 002/003: (GPUs x $ per GPU-hour) / (tokens per second x 3600) x 1e6.

    ``tokens_per_s`` is what those ``gpus`` produce together.
    """
    if tokens_per_s <= 0:
        raise ValueError("tokens_per_s must be > 0")
    return gpus * price_per_gpu_hour / (tokens_per_s * _SECONDS_PER_HOUR) * 1e6


def fixed_cost_per_million(monthly_fixed_cost: float, tokens_at_full_use: float, utilization: float) -> float:
    """Fixed cost per 1M tokens: fixed monthly cost / (tokens at full use x productive utilization) x 1e6."""
    if tokens_at_full_use <= 0 or utilization <= 0:
        raise ValueError("tokens_at_full_use and utilization must be > 0")
    return monthly_fixed_cost / (tokens_at_full_use * utilization) * 1e6


@dataclass(frozen=True)
class UtilizationRow:
    utilization: float
    useful_tokens: float
    cost_per_million: float


def utilization_table(
    monthly_fixed_cost: float, tokens_at_full_use: float, utilizations: Iterable[float] = (0.3, 0.5, 0.7, 0.85)
) -> list[UtilizationRow]:
    """Per utilization: useful tokens = tokens at full use x utilization; $ per 1M = fixed cost / useful tokens x 1e6."""
    return [
        UtilizationRow(u, tokens_at_full_use * u, fixed_cost_per_million(monthly_fixed_cost, tokens_at_full_use, u))
        for u in utilizations
    ]


@dataclass(frozen=True)
class UnitCostRow:
    occupancy: float
    tokens_per_s: float
    cost_per_million_output_tokens: float
    gpu_watts_each: float
    tokens_per_joule_gpu: float
    tokens_per_joule_facility: float


def unitcost_table(
    gpus: float,
    price_per_hour: float,
    capacity_tok_s: float,
    idle_w: float,
    peak_w: float,
    server_factor: float,
    pue: float,
    occupancies: Iterable[float] = (0.1, 0.25, 0.5, 0.75, 0.95),
) -> list[UnitCostRow]:
    """A fleet's unit cost and efficiency per occupancy, from one hour of counters at each.

    tps = gpus x capacity x occ; watts = idle + (peak - idle) x occ; tokens = tps x 3600;
    joules = gpus x watts x 3600; cost = gpus x price / tokens x 1e6;
    tokens/J (GPU) = tokens / joules; tokens/J (facility) = tokens / (joules x server_factor x pue).
    """
    rows = []
    for occ in occupancies:
        tps = gpus * capacity_tok_s * occ
        watts = idle_w + (peak_w - idle_w) * occ
        tokens = tps * 3600
        joules = gpus * watts * 3600 * 1000 / 1000  # in mJ and back to J, as the reference table computes it
        cost = gpus * price_per_hour / tokens * 1e6 if tokens > 0 else math.inf
        per_j = tokens / joules if joules > 0 else math.inf
        per_j_fac = tokens / (joules * server_factor * pue) if joules > 0 else math.inf
        rows.append(UnitCostRow(occ, tps, cost, watts, per_j, per_j_fac))
    return rows


def format_unitcost_table(rows: Sequence[UnitCostRow]) -> str:
    """The unit-cost rows as a fixed-width text table (docs/scenario.md shows one)."""
    out = ["occupancy  tokens/s   $ / M output tokens   GPU W each   tokens/J (GPU)   tokens/J (facility)"]
    for r in rows:
        out.append(
            f"{r.occupancy * 100:8.0f}%  {r.tokens_per_s:8.0f}  {r.cost_per_million_output_tokens:19.2f}  "
            f"{r.gpu_watts_each:11.0f}  {r.tokens_per_joule_gpu:15.2f}  {r.tokens_per_joule_facility:19.2f}"
        )
    return "\n".join(out)


def capital_cost_per_month(capex: float, residual: float, annual_rate: float, life_months: int) -> tuple[float, float]:
    """(depreciation, financing) per month for one unit of capex.

    The level monthly capital charge is the annuity that repays capex less the present value of the
    residual: (capex - residual / (1+i)^n) x i / (1 - (1+i)^-n), i = annual_rate / 12, n = life.
    Depreciation is the straight-line part (capex - residual) / n; financing is the rest.
    With a zero rate the charge is the depreciation alone.
    """
    dep = (capex - residual) / life_months
    i = annual_rate / 12.0
    if i == 0:
        return dep, 0.0
    log_growth = life_months * math.log1p(i)
    annuity = i / -math.expm1(-log_growth)  # i / (1 - (1+i)^-n), stable for tiny rates
    level = (capex - residual * math.exp(-log_growth)) * annuity
    return dep, max(0.0, level - dep)
