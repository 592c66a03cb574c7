"""The what-if scenario's inputs: the workload, the options priced against it, and their loading and validation."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .unit_cost import _SECONDS_PER_HOUR

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



class ScenarioError(ValueError):
    """A scenario value that cannot be used; the message names the key."""



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
