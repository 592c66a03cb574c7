"""What-if economics: one workload priced as a hosted API, rented GPUs, owned GPUs (new or secondary) or a hybrid, with sensitivity and break-even."""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Iterable, Literal, Sequence, Union

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = [
    "CATEGORIES",
    "ITEM_CATEGORY",
    "OPTION_KINDS",
    "SWEEP_PARAMETERS",
    "MEASURED_KEYS",
    "ScenarioError",
    "Workload",
    "Split",
    "HostedApi",
    "Rented",
    "Owned",
    "Hybrid",
    "Scenario",
    "OptionResult",
    "BreakEven",
    "UtilizationRow",
    "UnitCostRow",
    "parse_scenario",
    "parse_scenario_text",
    "load_scenario",
    "dump_scenario",
    "evaluate",
    "workload_summary",
    "with_parameter",
    "sweep",
    "default_sweep_values",
    "break_even",
    "cumulative_costs",
    "calibrate",
    "results_frame",
    "editable_numbers",
    "is_integer_field",
    "apply_edits",
    "cost_per_million_tokens",
    "fixed_cost_per_million",
    "utilization_table",
    "unitcost_table",
    "format_unitcost_table",
    "capital_cost_per_month",
]

# Six total-cost-of-ownership categories, as result keys. Every dollar of an option lands in one.
CATEGORIES = ("compute", "memory_storage", "network", "facilities", "software_operations", "lifecycle")

# The line items an option's monthly cost is built from, and the category each belongs to.
ITEM_CATEGORY: dict[str, str] = {
    "api_input": "compute",
    "api_cached_input": "compute",
    "api_output": "compute",
    "api_other": "compute",
    "gpu_rental": "compute",
    "storage": "memory_storage",
    "network": "network",
    "power_cooling": "facilities",
    "facility": "facilities",
    "software": "software_operations",
    "support": "software_operations",
    "staff": "software_operations",
    "depreciation": "lifecycle",
    "financing": "lifecycle",
}

OPTION_KINDS = ("hosted_api", "rented", "owned", "hybrid")

SWEEP_PARAMETERS: dict[str, str] = {
    "utilization": "achievable productive utilization of every rented and owned option (fraction, absolute)",
    "io_ratio": "input + cached input tokens per output token (absolute; total tokens held, cached share of input held)",
    "volume": "factor on every monthly token volume and on the peak (1 = as given)",
    "gpu_price": "factor on every $ per GPU-hour and owned card price, $ residuals follow (1 = as given)",
    "api_price": "factor on every hosted API token price (1 = as given)",
    "power_price": "tariff in $ per kWh for every owned option and every rented option (absolute)",
    "residual": "residual value of every owned option as a fraction of its capex per card (absolute)",
    "growth": "monthly token growth (fraction per month, absolute); moves the horizon figures",
}

# calibrate(): measured key -> what it fills.
MEASURED_KEYS: dict[str, str] = {
    "output_tokens_per_s_per_gpu": "options.*.output_tokens_per_s_per_gpu (rented, owned)",
    "utilization": "options.*.utilization (fraction 0..1)",
    "utilization_pct": "options.*.utilization (percent 0..100, divided by 100)",
    "idle_power_w": "options.*.idle_w",
    "peak_power_w": "options.*.peak_w",
    "avg_power_w": "options.*.peak_w = idle_w + (avg - idle_w) / utilization (flat idle = peak = avg without idle_w)",
    "price_per_kwh": "options.*.price_per_kwh (owned, rented)",
    "cost_per_gpu_hour": "options.*.price_per_gpu_hour (rented)",
    "server_overhead": "options.*.server_factor",
    "pue": "options.*.pue",
    "input_tokens_per_month": "workload.input_tokens_per_month",
    "cached_input_tokens_per_month": "workload.cached_input_tokens_per_month",
    "output_tokens_per_month": "workload.output_tokens_per_month",
    "acceptance_rate": "workload.acceptance_rate",
    "prefill_time_share": "split.prefill_time_share (and split.method = 'phase_time')",
}

_SECONDS_PER_HOUR = 3600.0
_J_PER_KWH = 3.6e6


class ScenarioError(ValueError):
    """A scenario value that cannot be used; the message names the key."""


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


# ---------------------------------------------------------------------------
# The scenario models
# ---------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Workload(_Strict):
    """What has to be served each month, and at what service level."""

    input_tokens_per_month: float = Field(ge=0)
    cached_input_tokens_per_month: float = Field(0.0, ge=0)
    output_tokens_per_month: float = Field(gt=0)
    # The peak output rate, one of three ways.
    peak_output_tokens_per_s: float | None = Field(None, gt=0)
    peak_concurrency: float | None = Field(None, gt=0)
    avg_concurrency: float | None = Field(None, gt=0)
    output_tokens_per_s_per_user: float | None = Field(None, gt=0)
    peak_to_average: float | None = Field(None, ge=1)
    growth_per_month: float = Field(0.0, gt=-1, le=10)
    ttft_ms: float | None = Field(None, gt=0)
    latency_ms: float | None = Field(None, gt=0)
    acceptance_rate: float = Field(1.0, gt=0, le=1)
    months: int = Field(36, ge=1, le=600)

    @model_validator(mode="after")
    def _one_peak(self) -> Workload:
        ways = [
            k
            for k in ("peak_output_tokens_per_s", "peak_concurrency", "peak_to_average")
            if getattr(self, k) is not None
        ]
        if not ways:
            raise ValueError(
                "give the peak as peak_output_tokens_per_s, or peak_concurrency with "
                "avg_concurrency or output_tokens_per_s_per_user, or peak_to_average"
            )
        if len(ways) > 1:
            raise ValueError(f"give the peak one way only, got {ways}")
        if self.peak_concurrency is not None:
            if self.avg_concurrency is None and self.output_tokens_per_s_per_user is None:
                raise ValueError(
                    "peak_concurrency needs avg_concurrency (peak/average ratio) "
                    "or output_tokens_per_s_per_user"
                )
            if self.avg_concurrency is not None and self.avg_concurrency > self.peak_concurrency:
                raise ValueError("avg_concurrency must not exceed peak_concurrency")
        return self


class Split(_Strict):
    """How a self-hosted option's cost is split between input (+cached) and output tokens."""

    method: Literal["weights", "phase_time"] = "weights"
    input_weight: float = Field(1.0, ge=0)
    cached_input_weight: float = Field(0.1, ge=0)
    output_weight: float = Field(4.0, ge=0)
    prefill_time_share: float = Field(0.2, ge=0, le=1)


class _Named(_Strict):
    name: str = Field(min_length=1)


class HostedApi(_Named):
    kind: Literal["hosted_api"]
    price_per_m_input: float = Field(ge=0)
    price_per_m_cached_input: float | None = Field(None, ge=0)  # None: same as input
    price_per_m_output: float = Field(ge=0)
    other_monthly: float = Field(0.0, ge=0)


class _SelfHosted(_Named):
    output_tokens_per_s_per_gpu: float = Field(gt=0)
    utilization: float = Field(gt=0, le=1)
    server_factor: float = Field(1.3, ge=1)
    pue: float = Field(1.2, ge=1)
    storage_monthly: float = Field(0.0, ge=0)
    network_monthly: float = Field(0.0, ge=0)
    software_monthly: float = Field(0.0, ge=0)
    staff_monthly: float = Field(0.0, ge=0)


class Rented(_SelfHosted):
    kind: Literal["rented"]
    billing: Literal["committed", "on_demand"] = "committed"
    price_per_gpu_hour: float = Field(ge=0)
    power_included: bool = True
    idle_w: float | None = Field(None, ge=0)
    peak_w: float | None = Field(None, ge=0)
    price_per_kwh: float | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _power(self) -> Rented:
        if (self.idle_w is None) != (self.peak_w is None):
            raise ValueError("give both idle_w and peak_w, or neither")
        if self.idle_w is not None and self.peak_w < self.idle_w:
            raise ValueError("peak_w must be >= idle_w")
        if not self.power_included and (self.idle_w is None or self.price_per_kwh is None):
            raise ValueError("power_included = false needs idle_w, peak_w and price_per_kwh")
        return self


class Owned(_SelfHosted):
    kind: Literal["owned"]
    condition: Literal["new", "secondary"] = "new"
    price_per_card: float = Field(ge=0)
    other_bom_per_card: float = Field(0.0, ge=0)
    financing_rate: float = Field(0.0, ge=0, le=1)
    life_months: int = Field(gt=0, le=240)
    residual_fraction: float | None = Field(None, ge=0, le=1)
    residual_per_card: float | None = Field(None, ge=0)
    idle_w: float = Field(ge=0)
    peak_w: float = Field(ge=0)
    price_per_kwh: float = Field(ge=0)
    facility_monthly: float = Field(0.0, ge=0)
    support_monthly: float = Field(0.0, ge=0)

    @model_validator(mode="after")
    def _checks(self) -> Owned:
        if self.residual_fraction is not None and self.residual_per_card is not None:
            raise ValueError("give residual_fraction or residual_per_card, not both")
        if self.residual_per_card is not None and self.residual_per_card > self.capex_per_card:
            raise ValueError("residual_per_card exceeds the capex per card (price_per_card + other_bom_per_card)")
        if self.peak_w < self.idle_w:
            raise ValueError("peak_w must be >= idle_w")
        return self

    @property
    def capex_per_card(self) -> float:
        return self.price_per_card + self.other_bom_per_card

    @property
    def residual_value(self) -> float:
        if self.residual_per_card is not None:
            return self.residual_per_card
        return (self.residual_fraction or 0.0) * self.capex_per_card


class Hybrid(_Named):
    kind: Literal["hybrid"]
    base: str
    burst: str
    base_level_fraction: float | None = Field(None, gt=0, le=1)  # of the peak; None: the average rate
    burst_token_share: float | None = Field(None, ge=0, le=1)  # None: from the load curve


Option = Annotated[Union[HostedApi, Rented, Owned, Hybrid], Field(discriminator="kind")]


class Scenario(_Strict):
    name: str = "scenario"
    currency: str = "USD"
    hours_per_month: float = Field(730.0, gt=0, le=744)
    whole_cards: bool = True
    workload: Workload
    split: Split = Split()
    options: tuple[Option, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        names = [o.name for o in self.options]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"options: duplicate names {dup}")
        by = {o.name: o for o in self.options}
        for i, o in enumerate(self.options):
            if isinstance(o, Hybrid):
                for role in ("base", "burst"):
                    ref = getattr(o, role)
                    if ref not in by:
                        raise ValueError(f"options[{i}].{role}: unknown option {ref!r}")
                    if isinstance(by[ref], Hybrid):
                        raise ValueError(f"options[{i}].{role}: {ref!r} is a hybrid; a hybrid combines plain options")
                if o.base == o.burst:
                    raise ValueError(f"options[{i}].burst: must differ from base")
        avg = self.workload.output_tokens_per_month / (self.hours_per_month * _SECONDS_PER_HOUR)
        peak = _peak_tps(self.workload, self.hours_per_month)
        if peak < avg * (1 - 1e-9):
            src = "peak_output_tokens_per_s" if self.workload.peak_output_tokens_per_s is not None else "peak_concurrency"
            raise ValueError(
                f"workload.{src}: the peak ({peak:.6g} output tokens/s) is below the monthly average "
                f"({avg:.6g} output tokens/s)"
            )
        return self

    def option(self, name: str) -> HostedApi | Rented | Owned | Hybrid:
        for o in self.options:
            if o.name == name:
                return o
        raise ScenarioError(f"unknown option {name!r}; options: {[o.name for o in self.options]}")


def _peak_tps(w: Workload, hours: float) -> float:
    avg = w.output_tokens_per_month / (hours * _SECONDS_PER_HOUR)
    if w.peak_output_tokens_per_s is not None:
        return w.peak_output_tokens_per_s
    if w.peak_concurrency is not None:
        if w.avg_concurrency is not None:
            return avg * w.peak_concurrency / w.avg_concurrency
        return w.peak_concurrency * w.output_tokens_per_s_per_user
    return avg * w.peak_to_average


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


def _key_path(loc: tuple, data: Any, extra: str = "") -> str:
    parts: list[str] = []
    suffix = ""
    i = 0
    while i < len(loc):
        p = loc[i]
        if p == "options" and i + 1 < len(loc) and isinstance(loc[i + 1], int):
            idx = loc[i + 1]
            parts.append(f"options[{idx}]")
            try:
                nm = data["options"][idx].get("name")
                if nm:
                    suffix = f" (option {nm!r})"
            except (KeyError, IndexError, TypeError, AttributeError):
                pass
            i += 2
            if i < len(loc) and loc[i] in OPTION_KINDS:
                i += 1
            continue
        parts.append(str(p))
        i += 1
    return ".".join(parts + ([extra] if extra else [])) + suffix


def parse_scenario(data: dict) -> Scenario:
    """Validate a scenario mapping; errors name the offending key."""
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        msgs = []
        for err in exc.errors():
            t = err["type"]
            loc = tuple(err["loc"])
            extra = "kind" if t in ("union_tag_not_found", "union_tag_invalid") else ""
            key = _key_path(loc, data, extra) or "(top level)"
            if t == "extra_forbidden":
                reason = "unknown key"
            elif t == "union_tag_not_found":
                reason = f"missing; one of {list(OPTION_KINDS)}"
            elif t == "union_tag_invalid":
                reason = f"unknown kind {err.get('input', {}).get('kind')!r}; one of {list(OPTION_KINDS)}"
            else:
                reason = err["msg"].removeprefix("Value error, ")
            msgs.append(f"{key}: {reason}" if err["loc"] else reason)
        raise ScenarioError("invalid scenario: " + "; ".join(msgs)) from None


def parse_scenario_text(text: str, source: str = "scenario") -> Scenario:
    """Parse TOML text into a Scenario."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{source}: not valid TOML: {exc}") from None
    try:
        return parse_scenario(data)
    except ScenarioError as exc:
        raise ScenarioError(f"{source}: {exc}") from None


def load_scenario(path: str | Path) -> Scenario:
    """Read a scenario TOML file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read scenario: {exc}") from None
    return parse_scenario_text(text, str(p))


def dump_scenario(scenario: Scenario) -> str:
    """The scenario as TOML text (top-level keys, [workload], [split], [[options]])."""

    def val(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    data = scenario.model_dump(exclude_none=True)
    lines = [f"{k} = {val(data[k])}" for k in ("name", "currency", "hours_per_month", "whole_cards")]
    for section in ("workload", "split"):
        lines += ["", f"[{section}]"] + [f"{k} = {val(v)}" for k, v in data[section].items()]
    for o in data["options"]:
        lines += ["", "[[options]]"] + [f"{k} = {val(v)}" for k, v in o.items()]
    return "\n".join(lines) + "\n"


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


# ---------------------------------------------------------------------------
# Calibration from measured fleet figures
# ---------------------------------------------------------------------------


def calibrate(
    scenario: Scenario,
    measured: dict[str, float | None],
    options: Sequence[str] | None = None,
    strict: bool = True,
) -> tuple[Scenario, dict[str, str]]:
    """Fill the scenario from measured fleet figures; return it and {field path: measured key}.

    Expected keys (see MEASURED_KEYS), all optional; a None value is skipped:
      output_tokens_per_s_per_gpu  output tokens/s per card at the SLO      -> options.*.output_tokens_per_s_per_gpu
      utilization | utilization_pct productive utilization (0..1 | 0..100)  -> options.*.utilization
      idle_power_w, peak_power_w   GPU watts per card                        -> options.*.idle_w / peak_w
      avg_power_w                  mean GPU watts per card at that utilization: peak_w = idle_w +
                                   (avg - idle_w) / utilization; without idle_w (or avg < idle_w)
                                   idle_w = peak_w = avg
      price_per_kwh                tariff                                    -> options.*.price_per_kwh
      cost_per_gpu_hour            $ per GPU-hour                            -> rented price_per_gpu_hour
      server_overhead, pue         facility factors                          -> options.*.server_factor / pue
      input_tokens_per_month, cached_input_tokens_per_month, output_tokens_per_month,
      acceptance_rate              -> workload.*
      prefill_time_share           -> split.prefill_time_share, split.method = "phase_time"
    ``options`` names the options to fill (default: every rented and owned option). Unknown keys are
    an error when ``strict``; otherwise they are ignored.
    """
    unknown = sorted(k for k in measured if k not in MEASURED_KEYS)
    if unknown and strict:
        raise ScenarioError(f"calibrate: unknown measured keys {unknown}; known: {list(MEASURED_KEYS)}")
    m = {k: float(v) for k, v in measured.items() if k in MEASURED_KEYS and v is not None}
    for k, v in m.items():
        if not math.isfinite(v) or v < 0:
            raise ScenarioError(f"calibrate: measured {k} must be a finite number >= 0, got {v}")
    if "utilization_pct" in m and "utilization" not in m:
        m["utilization"] = m["utilization_pct"] / 100.0
        util_key = "utilization_pct"
    else:
        util_key = "utilization"
    d = scenario.model_dump()
    prov: dict[str, str] = {}
    targets = options
    if targets is not None:
        for nm in targets:
            scenario.option(nm)
    for o in d["options"]:
        if o["kind"] not in ("rented", "owned") or (targets is not None and o["name"] not in targets):
            continue
        p = f"options.{o['name']}"

        def put(fld: str, key: str, value: float) -> None:
            o[fld] = value
            prov[f"{p}.{fld}"] = key

        if "output_tokens_per_s_per_gpu" in m:
            put("output_tokens_per_s_per_gpu", "output_tokens_per_s_per_gpu", m["output_tokens_per_s_per_gpu"])
        if "utilization" in m:
            put("utilization", util_key, m["utilization"])
        if "server_overhead" in m:
            put("server_factor", "server_overhead", m["server_overhead"])
        if "pue" in m:
            put("pue", "pue", m["pue"])
        if "price_per_kwh" in m:
            put("price_per_kwh", "price_per_kwh", m["price_per_kwh"])
        if "cost_per_gpu_hour" in m and o["kind"] == "rented":
            put("price_per_gpu_hour", "cost_per_gpu_hour", m["cost_per_gpu_hour"])
        if "idle_power_w" in m:
            put("idle_w", "idle_power_w", m["idle_power_w"])
        if "peak_power_w" in m:
            put("peak_w", "peak_power_w", m["peak_power_w"])
        elif "avg_power_w" in m:
            avg = m["avg_power_w"]
            idle = o.get("idle_w")
            u = o["utilization"]
            if idle is not None and avg >= idle and u > 0:
                put("peak_w", f"avg_power_w (with idle_w and {prov.get(f'{p}.utilization', 'the option utilization')})", idle + (avg - idle) / u)
            else:
                put("idle_w", "avg_power_w (flat)", avg)
                put("peak_w", "avg_power_w (flat)", avg)
    w = d["workload"]
    for k in ("input_tokens_per_month", "cached_input_tokens_per_month", "output_tokens_per_month", "acceptance_rate"):
        if k in m:
            w[k] = m[k]
            prov[f"workload.{k}"] = k
    if "prefill_time_share" in m:
        d["split"]["prefill_time_share"] = m["prefill_time_share"]
        d["split"]["method"] = "phase_time"
        prov["split.prefill_time_share"] = "prefill_time_share"
        prov["split.method"] = "prefill_time_share"
    try:
        return parse_scenario(d), prov
    except ScenarioError as exc:
        raise ScenarioError(f"calibrate: {exc}") from None


# ---------------------------------------------------------------------------
# Form support for the page: which numbers can be edited, and applying edits
# ---------------------------------------------------------------------------

_INT_FIELDS = {"months", "life_months"}


def editable_numbers(scenario: Scenario) -> dict[str, dict[str, float | int]]:
    """{section: {field: value}} for every numeric field that is set; sections: 'workload', 'split', 'options.<name>'."""
    d = scenario.model_dump()

    def nums(x: dict) -> dict[str, float | int]:
        return {
            k: v
            for k, v in x.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v is not None
        }

    out = {"workload": nums(d["workload"]), "split": nums(d["split"])}
    for o in d["options"]:
        out[f"options.{o['name']}"] = nums(o)
    return out


def is_integer_field(name: str) -> bool:
    return name in _INT_FIELDS


def apply_edits(scenario: Scenario, edits: dict[str, dict[str, float | int]]) -> Scenario:
    """The scenario with edited numbers (same shape as editable_numbers), validated."""
    d = scenario.model_dump()
    for section, values in edits.items():
        if section in ("workload", "split"):
            d[section].update(values)
            continue
        if section.startswith("options."):
            nm = section.removeprefix("options.")
            for o in d["options"]:
                if o["name"] == nm:
                    o.update(values)
                    break
            else:
                raise ScenarioError(f"{section}: unknown option")
            continue
        raise ScenarioError(f"{section}: unknown section")
    return parse_scenario(d)
