"""What a dashboard link carries: the period, granularity, comparison, rules and filters every
page shares, as URL query parameters, parsed with a reason for each value refused and written
back in one canonical order, so a copied link reopens the same view.

    /rankings?period=custom&from=2026-10-06&to=2026-10-08&grain=week&boundary=rental
             &idle=proportional&recharge=requests&driver=software:even&f_tenant=research
             &level=project&tenant=research&project=rlhf          (page keys: the page's own)

Keys (GLOBAL_KEYS; every other key belongs to the page):
    period      a preset of `period_choice.PRESETS` or `custom` (then `from`, `to`: YYYY-MM-DD)
    grain       day | week | month (default day)
    compare     off: no comparison with the previous period (default on)
    boundary    energy_only | narrow | rental | fully_loaded | custom (then `category`, repeated)
    idle        separate | proportional           recharge   tokens | requests | none
    driver      category:driver, repeated (`driver=-`: no overrides)
    split, activity, threshold, sample_gap, pue, server_overhead, kwh_price, ttft_ms, latency_ms
    f_pool, f_accelerator, f_workload, f_tenant   filters, repeated

`period`, `boundary`, `idle` and `recharge` are always written; the other rules only when they
differ from the source's own config, the rest only when not at their default. A link holding
any global key describes the whole shared state (a key it lacks takes its default); a link
holding none (a page switch) keeps the session's state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any

from pydantic import BaseModel, ConfigDict

from .config import BOUNDARY_PRESETS, Config, ConfigError
from .contract import CATEGORIES, DRIVERS
from .period_choice import DEFAULT_PRESET, GRAINS, PRESETS
from .views import Filters, config_with

FILTER_PARAMS = {"pools": "f_pool", "accelerators": "f_accelerator", "workloads": "f_workload",
                 "tenants": "f_tenant"}
# URL key -> config_with keyword, for the rules a link may carry.
RULE_PARAMS = {
    "boundary": "boundary", "category": "categories", "idle": "idle", "recharge": "inference_recharge",
    "driver": "drivers", "split": "token_split", "activity": "activity_mode", "threshold": "threshold_pct",
    "sample_gap": "max_sample_gap_s", "pue": "pue", "server_overhead": "server_overhead",
    "kwh_price": "flat_price_per_kwh", "ttft_ms": "ttft_ms", "latency_ms": "latency_ms",
}
ALWAYS_RULES = ("boundary", "idle", "recharge")
CHOICES = {
    "boundary": (*BOUNDARY_PRESETS, "custom"), "idle": ("separate", "proportional"),
    "recharge": ("tokens", "requests", "none"), "split": ("phase_time", "weights"),
    "activity": ("threshold", "weighted"),
}
NUMBERS = ("threshold", "sample_gap", "pue", "server_overhead", "kwh_price", "ttft_ms", "latency_ms")
GLOBAL_KEYS = ("period", "from", "to", "grain", "compare", *RULE_PARAMS, *FILTER_PARAMS.values())


class Rules(BaseModel):
    """Rules a link sets on top of the source's config (None: the source's own)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    boundary: str | None = None
    categories: tuple[str, ...] | None = None
    idle: str | None = None
    inference_recharge: str | None = None
    drivers: dict[str, str] | None = None
    token_split: str | None = None
    activity_mode: str | None = None
    threshold_pct: float | None = None
    max_sample_gap_s: float | None = None
    pue: float | None = None
    server_overhead: float | None = None
    flat_price_per_kwh: float | None = None
    ttft_ms: float | None = None
    latency_ms: float | None = None

    @property
    def empty(self) -> bool:
        return all(v is None for v in self.model_dump().values())


class ViewState(BaseModel):
    """The shared state of a dashboard view (what the sidebar and the rule controls set)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    period: str = DEFAULT_PRESET
    first: date | None = None  # custom period only: local days first..last, inclusive
    last: date | None = None
    grain: str = "day"
    compare: bool = True
    rules: Rules = Rules()
    filters: Filters = Filters()


Query = dict[str, list[str]]


def has_global(params: Mapping[str, Sequence[str]]) -> bool:
    """True when a query carries any shared-state key (it then describes the whole state)."""
    return any(k in params for k in GLOBAL_KEYS)


def page_part(params: Mapping[str, Sequence[str]]) -> Query:
    """The keys of a query that belong to the page (drill level, cause, card...)."""
    return {k: list(v) for k, v in params.items() if k not in GLOBAL_KEYS}


def _one(params: Mapping[str, Sequence[str]], key: str) -> str | None:
    v = params.get(key)
    if not v:
        return None
    return v[-1]


def _choice(params: Mapping[str, Sequence[str]], key: str, choices: Sequence[str], problems: list[str]) -> str | None:
    """The value of `key` when it is one of `choices`; else None, and a sentence in `problems`."""
    v = _one(params, key)
    if v is not None and v not in choices:
        problems.append(f"{key}={v!r} is not one of {', '.join(choices)}")
        return None
    return v


def _date(text: str | None) -> date | None:
    if text is None:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        return None


def parse_query(params: Mapping[str, Sequence[str]]) -> tuple[ViewState, list[str]]:
    """The state a query describes, and one sentence per value it refused (that value is ignored)."""
    problems: list[str] = []
    state: dict[str, Any] = {}
    period = _choice(params, "period", tuple(PRESETS), problems)
    if period is not None:
        state["period"] = period
    first, last = _date(_one(params, "from")), _date(_one(params, "to"))
    for key, val in (("from", first), ("to", last)):
        if _one(params, key) is not None and val is None:
            problems.append(f"{key}={_one(params, key)!r} is not a date (YYYY-MM-DD)")
    if first or last:
        if state.get("period", "custom") == "custom" and first and last:
            state.update(period="custom", first=min(first, last), last=max(first, last))
        elif state.get("period", "custom") == "custom":
            problems.append("a custom period needs both from and to")
    grain = _choice(params, "grain", GRAINS, problems)
    if grain is not None:
        state["grain"] = grain
    cmp = _one(params, "compare")
    if cmp is not None:
        if cmp in ("off", "on"):
            state["compare"] = cmp == "on"
        else:
            problems.append(f"compare={cmp!r}: use off or on")
    rules, rule_problems = _parse_rules(params)
    problems += rule_problems
    state["rules"] = rules
    state["filters"] = Filters(**{name: list(params.get(key) or ()) for name, key in FILTER_PARAMS.items()})
    return ViewState(**state), problems


def _parse_rules(params: Mapping[str, Sequence[str]]) -> tuple[Rules, list[str]]:
    out: dict[str, Any] = {}
    problems: list[str] = []
    for key, choices in CHOICES.items():
        v = _choice(params, key, choices, problems)
        if v is not None:
            out[RULE_PARAMS[key]] = v
    cats = [c for c in params.get("category") or () if c]
    if cats:
        bad = [c for c in cats if c not in CATEGORIES]
        if bad:
            problems.append(f"category {', '.join(map(repr, bad))} is not a cost category")
        good = [c for c in CATEGORIES if c in set(cats)]
        if good and out.get("boundary", "custom") == "custom":
            out["boundary"], out["categories"] = "custom", tuple(good)
    if out.get("boundary") == "custom" and not out.get("categories"):
        problems.append("boundary=custom needs at least one category")
        out.pop("boundary")
    drivers = params.get("driver")
    if drivers:
        d: dict[str, str] = {}
        for item in drivers:
            if item in ("-", ""):
                continue
            cat, _, drv = item.partition(":")
            if cat in CATEGORIES and drv in DRIVERS:
                d[cat] = drv
            else:
                problems.append(f"driver={item!r}: use category:driver with a known category and driver")
        out["drivers"] = d
    for key in NUMBERS:
        v = _one(params, key)
        if v is None:
            continue
        try:
            x = float(v)
        except ValueError:
            x = math.nan
        if math.isfinite(x):
            out[RULE_PARAMS[key]] = x
        else:
            problems.append(f"{key}={v!r} is not a finite number")
    return Rules(**out), problems


def effective_config(base: Config, rules: Rules) -> Config:
    """The source's config with the link's rules applied (ConfigError when they are out of range)."""
    if rules.empty:
        return base
    kw = rules.model_dump(exclude_none=True)
    if "categories" in kw and kw.get("boundary") not in (None, "custom"):
        kw.pop("categories")
    if kw.get("boundary") == "custom" and "categories" not in kw:
        kw["categories"] = list(base.boundary.included)
    return config_with(base, **kw)


def checked(base: Config, state: ViewState) -> tuple[ViewState, Config, list[str]]:
    """The state with rules the config refuses dropped (named), and the config in force."""
    try:
        return state, effective_config(base, state.rules), []
    except (ConfigError, ValueError, TypeError) as exc:
        return (state.model_copy(update={"rules": Rules()}), base,
                [f"the link's rules are not valid ({exc}); the source's rules are shown"])


def rules_of(config: Config, base: Config) -> Rules:
    """The rules that turn `base` into `config` (for "use rule set B": B as link state)."""
    out: dict[str, Any] = {"boundary": config.boundary.name, "idle": config.allocation.idle,
                           "inference_recharge": config.allocation.inference_recharge}
    if config.boundary.name == "custom":
        out["categories"] = tuple(config.boundary.included)
    pairs = {
        "drivers": (config.allocation.drivers, base.allocation.drivers),
        "token_split": (config.allocation.token_split, base.allocation.token_split),
        "activity_mode": (config.activity.mode, base.activity.mode),
        "threshold_pct": (config.activity.threshold_pct, base.activity.threshold_pct),
        "max_sample_gap_s": (config.activity.max_sample_gap_s, base.activity.max_sample_gap_s),
        "pue": (config.energy.pue, base.energy.pue),
        "server_overhead": (config.energy.server_overhead, base.energy.server_overhead),
        "flat_price_per_kwh": (config.energy.flat_price_per_kwh, base.energy.flat_price_per_kwh),
        "ttft_ms": (config.slo.ttft_ms, base.slo.ttft_ms),
        "latency_ms": (config.slo.latency_ms, base.slo.latency_ms),
    }
    for k, (mine, theirs) in pairs.items():
        if mine != theirs:
            out[k] = dict(mine) if isinstance(mine, dict) else mine
    return Rules(**out)


def _num(x: float) -> str:
    return repr(float(x)).removesuffix(".0") if float(x).is_integer() else repr(float(x))


def to_query(state: ViewState, config: Config, base: Config) -> Query:
    """The canonical query of a state: `config` is the config in force, `base` the source's."""
    q: Query = {"period": [state.period]}
    if state.period == "custom" and state.first and state.last:
        q["from"], q["to"] = [state.first.isoformat()], [state.last.isoformat()]
    if state.grain != "day":
        q["grain"] = [state.grain]
    if not state.compare:
        q["compare"] = ["off"]
    q["boundary"] = [config.boundary.name]
    if config.boundary.name == "custom":
        q["category"] = list(config.boundary.included)
    q["idle"] = [config.allocation.idle]
    q["recharge"] = [config.allocation.inference_recharge]
    extra = rules_of(config, base)
    if extra.drivers is not None:
        q["driver"] = [f"{c}:{d}" for c, d in sorted(extra.drivers.items())] or ["-"]
    for key in ("split", "activity", *NUMBERS):
        v = getattr(extra, RULE_PARAMS[key])
        if v is not None:
            q[key] = [_num(v) if isinstance(v, float) else str(v)]
    for name, key in FILTER_PARAMS.items():
        vals = getattr(state.filters, name)
        if vals:
            q[key] = list(vals)
    return q


def check_filters(filters: Filters, options: Mapping[str, Sequence[str]]) -> tuple[Filters, list[str]]:
    """The filters with values this data does not hold removed, and a sentence for each."""
    kept: dict[str, list[str]] = {}
    problems = []
    for name in FILTER_PARAMS:
        vals = getattr(filters, name)
        known = set(options.get(name, ()))
        kept[name] = [v for v in vals if v in known]
        missing = [v for v in vals if v not in known]
        if missing:
            problems.append(f"{FILTER_PARAMS[name][2:]} {', '.join(map(repr, missing))} is not in this data")
    return Filters(**kept), problems


def merge(global_query: Query, page_query: Mapping[str, Sequence[str]]) -> Query:
    """One query: the shared keys first (canonical order), then the page's own."""
    out = dict(global_query)
    for k, v in page_query.items():
        if k not in GLOBAL_KEYS:
            out[k] = list(v)
    return out


def encode(query: Mapping[str, Sequence[str]]) -> str:
    """The query string (`a=1&b=x&b=y`), percent-encoded."""
    from urllib.parse import urlencode

    return urlencode([(k, v) for k, vals in query.items() for v in vals])


def decode(text: str) -> Query:
    from urllib.parse import parse_qs

    return {k: v for k, v in parse_qs(text.lstrip("?"), keep_blank_values=True).items()}
