"""The report config (TOML) as pydantic models, with the contract's defaults and boundary presets."""

from __future__ import annotations

import tomllib
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .contract import CATEGORIES, DRIVERS

BOUNDARY_PRESETS: dict[str, tuple[str, ...]] = {
    "energy_only": ("power",),
    "narrow": ("depreciation", "power"),
    "rental": ("gpu_rental",),
    "fully_loaded": CATEGORIES,
}


# Sane, finite ranges of the config's numbers (the Rules page's inputs use the same bounds).
# A value outside is an error naming its key: an infinite PUE or price computed silently
# wrong (NaN reconciliation), and a huge sample gap overflowed the time arithmetic.
MAX_SAMPLE_GAP_S = 86_400.0  # a sample standing for more than a day is no measurement
MAX_FACTOR = 5.0  # server_overhead and PUE: real facilities are well below
MAX_PRICE_PER_KWH = 10_000.0  # in the period currency, whichever it is (yen, won, rupees, ...)
MAX_WEIGHT = 1_000_000.0  # token weights and fixed shares are relative; beyond this is a typo
MAX_SLO_MS = 86_400_000.0  # a day
MAX_EXCHANGE_RATE = 1_000_000.0
MAX_ALERT_PCT = 1_000_000.0  # an alert's percentage (a rise of 10,000x is already beyond any use)
MAX_ALERT_MONEY = 1e15  # as the largest amount a bundle accepts
MAX_WINDOW_DAYS = 366
MAX_POWER_W = 100_000.0  # a card's power ceiling: no accelerator draws 100 kW
MAX_POWER_RATIO = 1_000.0
BOM = b"\xef\xbb\xbf"


def _each_positive(v: dict[str, float], most: float, what: str, unit: str = "") -> dict[str, float]:
    """A mapping whose every value is above 0 and at most `most` (the error names the key)."""
    for k, x in v.items():
        if not 0 < x <= most:
            raise ValueError(f"{what} of {k!r} must be above 0 and at most {most:g}{unit}")
    return v


class ConfigError(ValueError):
    """A config value that breaks the contract; the message names the key."""


class _Strict(BaseModel):
    # allow_inf_nan=False: inf and NaN are refused for every float, nested dict values too.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _utc(v: datetime | None) -> datetime | None:
    if v is None:
        return None
    if v.tzinfo is None:
        raise ValueError("timestamp needs an offset, e.g. 2026-10-01T00:00:00Z")
    return v.astimezone(timezone.utc)


class Period(_Strict):
    start: datetime | None = None
    end: datetime | None = None
    timezone: str = "UTC"
    currency: str = "USD"
    source_timezone: str | None = None

    _utc_start = field_validator("start", "end")(_utc)

    @field_validator("timezone", "source_timezone")
    @classmethod
    def _known_zone(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                ZoneInfo(v)
            except (ZoneInfoNotFoundError, ValueError) as exc:
                raise ValueError(f"unknown time zone {v!r}") from exc
        return v

    @model_validator(mode="after")
    def _ordered(self) -> Period:
        if self.start is not None and self.end is not None and self.end <= self.start:
            raise ValueError("period.end must be after period.start")
        return self


class Boundary(_Strict):
    name: Literal["energy_only", "narrow", "rental", "fully_loaded", "custom"] = "fully_loaded"
    categories: tuple[str, ...] | None = None

    @field_validator("categories")
    @classmethod
    def _known(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is not None:
            bad = [c for c in v if c not in CATEGORIES]
            if bad:
                raise ValueError(f"unknown categories {bad}; known: {list(CATEGORIES)}")
        return v

    @model_validator(mode="after")
    def _custom_needs_categories(self) -> Boundary:
        if self.name == "custom" and not self.categories:
            raise ValueError("boundary name 'custom' needs a categories list")
        if self.name != "custom" and self.categories is not None:
            if tuple(self.categories) != BOUNDARY_PRESETS[self.name]:
                raise ValueError(f"categories are only set with name = 'custom' (got preset {self.name!r})")
        return self

    @property
    def included(self) -> tuple[str, ...]:
        if self.name == "custom":
            return tuple(self.categories or ())
        return BOUNDARY_PRESETS[self.name]


class Activity(_Strict):
    mode: Literal["threshold", "weighted"] = "threshold"
    threshold_pct: float = Field(5.0, ge=0, le=100)
    max_sample_gap_s: float = Field(300, gt=0, le=MAX_SAMPLE_GAP_S)


class Energy(_Strict):
    server_overhead: float = Field(1.3, ge=1.0, le=MAX_FACTOR)
    pue: float = Field(1.2, ge=1.0, le=MAX_FACTOR)
    flat_price_per_kwh: float = Field(0.12, ge=0, le=MAX_PRICE_PER_KWH)
    # What an energy counter may claim (power_limits.py): a counter implying more power than the
    # card's ceiling, or more than counter_power_ratio x its power readings, is not believed.
    max_power_w_by_pool: dict[str, float] = Field(default_factory=dict)
    max_power_w_by_accelerator: dict[str, float] = Field(default_factory=dict)
    unknown_max_power_w: float = Field(2000.0, gt=0, le=MAX_POWER_W)
    counter_power_ratio: float = Field(4.0, ge=1.0, le=MAX_POWER_RATIO)

    @field_validator("max_power_w_by_pool", "max_power_w_by_accelerator")
    @classmethod
    def _sane_watts(cls, v: dict[str, float]) -> dict[str, float]:
        return _each_positive(v, MAX_POWER_W, "ceiling", " W")


class TokenWeights(_Strict):
    input: float = Field(1.0, ge=0, le=MAX_WEIGHT)
    cached_input: float = Field(0.1, ge=0, le=MAX_WEIGHT)
    output: float = Field(4.0, ge=0, le=MAX_WEIGHT)

    @model_validator(mode="after")
    def _some_weight(self) -> TokenWeights:
        # All zero would leave every weighted token count 0: token-driven cost and the
        # input/output split would divide by zero.
        if self.input == 0 and self.cached_input == 0 and self.output == 0:
            raise ValueError("all three weights are 0; at least one must be above 0")
        return self


class Allocation(_Strict):
    idle: Literal["separate", "proportional"] = "separate"
    drivers: dict[str, str] = Field(default_factory=dict)
    inference_recharge: Literal["none", "tokens", "requests"] = "tokens"
    token_split: Literal["phase_time", "weights"] = "phase_time"
    token_weights: TokenWeights = TokenWeights()
    shares: dict[str, float] = Field(default_factory=dict)

    @field_validator("drivers")
    @classmethod
    def _known_drivers(cls, v: dict[str, str]) -> dict[str, str]:
        for cat, drv in v.items():
            if cat not in CATEGORIES:
                raise ValueError(f"unknown category {cat!r} in drivers")
            if drv not in DRIVERS:
                raise ValueError(f"unknown driver {drv!r} for {cat!r}; known: {list(DRIVERS)}")
        return v

    @field_validator("shares")
    @classmethod
    def _positive_shares(cls, v: dict[str, float]) -> dict[str, float]:
        for k, s in v.items():
            if not 0 <= s <= MAX_WEIGHT:
                raise ValueError(f"share of {k!r} must be between 0 and {MAX_WEIGHT:g}")
        if v and not any(s > 0 for s in v.values()):
            raise ValueError("every share is 0; at least one must be above 0")
        return v


class Slo(_Strict):
    ttft_ms: float = Field(2000, gt=0, le=MAX_SLO_MS)
    latency_ms: float = Field(30000, gt=0, le=MAX_SLO_MS)


class Validation(_Strict):
    """How rows that contradict each other are read."""

    # Rates of one pool and category, or tariffs, whose windows overlap would both charge:
    # "reject" rejects every overlapping row, naming the other; "later_start_supersedes" ends
    # each row where the next one starts, and says so in the gaps.
    overlaps: Literal["reject", "later_start_supersedes"] = "reject"
    # Request sources (their `source` values) that count the same model in the same hours, a
    # gateway's logs beside the model server's counters: the first listed one present is billed,
    # the others are a reconciliation check (token_sources.py). Unset: the default order
    # (gateway, litellm, openai, otel, others, vllm, kubernetes), and the gaps name each overlap.
    token_source_order: tuple[str, ...] | None = None
    # "bill_one": each hour's tokens from one source; "add": the sources count different
    # requests (two gateways in front of one model), so all are billed and overlaps only shown.
    token_overlap: Literal["bill_one", "add"] = "bill_one"

    @field_validator("token_source_order")
    @classmethod
    def _distinct_sources(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is not None:
            if not v or any(not s.strip() for s in v):
                raise ValueError("list the request sources by name, most preferred first")
            if len(set(v)) != len(v):
                raise ValueError(f"a source is listed twice: {list(v)}")
        return v


class Alerts(_Strict):
    """`[alerts]`: which checks `ailedger alerts` runs (docs/budgets.md). A threshold left out is off.

    Thresholds fire at or above their value ("not a cent below"); "over budget" means more than
    the budget's amount.
    """

    # A budget whose forecast of the period's total passes its amount: the point forecast, or
    # (earlier warning) the upper end of the 80 % or 95 % interval.
    forecast_over_budget: Literal["off", "point", "upper80", "upper95"] = "point"
    # cost booked so far, % of the budget
    booked_over_budget_pct: float | None = Field(None, gt=0, le=MAX_ALERT_PCT)
    # a tenant's $/h over the last 24 h vs the 7 days before, rise in %
    burn_rate_jump_pct: float | None = Field(None, ge=0, le=MAX_ALERT_PCT)
    # a pool's idle rate over the last idle_window_days, in %
    pool_idle_rate_pct: float | None = Field(None, ge=0, le=100)
    idle_window_days: int = Field(7, ge=1, le=MAX_WINDOW_DAYS)
    # cost in the unattributed bucket over the report period, in the period currency
    unattributed_cost: float | None = Field(None, ge=0, le=MAX_ALERT_MONEY)
    # a model's $/1M tokens over the last 24 h vs the 7 days before, rise in %
    model_cost_per_million_up_pct: float | None = Field(None, ge=0, le=MAX_ALERT_PCT)


class Engine(_Strict):
    """How the engine reads telemetry (never what it computes)."""

    # "auto": a store's quarter-hour rollup stands in for raw samples wherever it gives the same
    # figures (docs/engine.md); "off": every raw sample is read (the reference path).
    rollup: Literal["auto", "off"] = "auto"


class Close(_Strict):
    """What an ingest does with data for a closed period (docs/close.md)."""

    # "correct": accepted, its effect posts as corrections in the first open period;
    # "refuse": the ingest is refused and nothing written (as `ingest --no-late`).
    late: Literal["correct", "refuse"] = "correct"


class Config(_Strict):
    period: Period = Period()
    boundary: Boundary = Boundary()
    activity: Activity = Activity()
    energy: Energy = Energy()
    allocation: Allocation = Allocation()
    slo: Slo = Slo()
    validation: Validation = Validation()
    alerts: Alerts = Alerts()
    engine: Engine = Engine()
    close: Close = Close()
    # Extension: exchange rates into period.currency, e.g. {"EUR" = 1.08}.
    currency_rates: dict[str, float] = Field(default_factory=dict)

    @field_validator("currency_rates")
    @classmethod
    def _sane_rates(cls, v: dict[str, float]) -> dict[str, float]:
        return _each_positive(v, MAX_EXCHANGE_RATE, "rate")


def _key_path(loc: tuple) -> str:
    return ".".join(str(p) for p in loc)


def parse_config(data: dict) -> Config:
    """Validate a config mapping; errors name the offending key."""
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        msgs = []
        for err in exc.errors():
            key = _key_path(err["loc"]) or "(top level)"
            reason = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
            msgs.append(f"{key}: {reason}")
        raise ConfigError("invalid config: " + "; ".join(msgs)) from None


def read_toml(path: Path) -> dict:
    """A TOML file's tables; ValueError says what is wrong with the file (never a traceback)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read config: {exc}") from None
    if raw.startswith(BOM):
        # Some editors (Windows Notepad) write one; TOML parsers refuse it with a puzzling
        # "invalid statement at line 1". Say what it is instead of guessing it away.
        raise ValueError("starts with a UTF-8 byte-order mark (BOM), which TOML does not allow: "
                         "save the file as UTF-8 without BOM")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"is not UTF-8 text (byte {exc.start})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not valid TOML: {exc}") from None


def load_config(path: str | Path | None) -> Config:
    """Read a TOML config file; None gives the contract defaults."""
    if path is None:
        return Config()
    p = Path(path)
    try:
        data = read_toml(p)
    except ValueError as exc:
        raise ConfigError(f"{p}: {exc}") from None
    try:
        return parse_config(data)
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None


def dump_config(cfg: Config) -> str:
    """The config as TOML text (for the Rules page's save)."""
    lines: list[str] = []

    def val(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, datetime):
            return v.isoformat().replace("+00:00", "Z")
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(val(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{_toml_key(k)} = {val(x)}" for k, x in v.items()) + " }"
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    data = cfg.model_dump(exclude_none=True)
    # Top-level keys must come before the first [table] in TOML.
    if data.get("currency_rates"):
        lines += [f"currency_rates = {val(data['currency_rates'])}", ""]
    for section, body in data.items():
        if section == "currency_rates":
            continue
        if isinstance(body, dict):
            lines.append(f"[{section}]")
            for k, v in body.items():
                if isinstance(v, dict) and not v:
                    continue
                lines.append(f"{_toml_key(k)} = {val(v)}")
            lines.append("")
    return "\n".join(lines)


def _toml_key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else '"' + k.replace('"', '\\"') + '"'
