"""Words people read instead of engine names: column headers with units, idle causes, cost
categories and rule values, shared by the dashboard's tables, charts and the CSV exports.

The engine keeps its contract names (`allocated_gpu_hours`, `no_demand`); what a person sees
goes through here, so a screen header and an exported CSV header always say the same thing.
"""

from __future__ import annotations

import math
import re
from typing import Literal

import polars as pl

# How a column's numbers are measured; the unit text of each kind ("{cur}" = the currency).
Unit = Literal["money", "money_per_gpu_h", "money_per_1m", "ratio", "gpu_h", "kwh", "count", "tokens", "kw",
               "w", "kg", "ms", "pct", "tokens_per_j", "factor", "none"]
UNIT_TEXT: dict[str, str] = {
    "money": "{cur}", "money_per_gpu_h": "{cur}/GPU-h", "money_per_1m": "{cur}/1M tokens", "ratio": "%",
    "gpu_h": "GPU-h", "kwh": "kWh", "kw": "kW", "w": "W", "kg": "kg CO2e", "ms": "ms", "pct": "%",
    "tokens_per_j": "tokens/J", "count": "", "tokens": "", "factor": "", "none": "",
}

# column -> (label, unit kind). Columns not listed fall back to `_guess`.
COLUMNS: dict[str, tuple[str, Unit]] = {
    "cost": ("Cost", "money"), "attributed_cost": ("Attributed cost", "money"),
    "recharged_cost": ("Recharged cost", "money"), "inference_cost": ("Inference cost", "money"),
    "energy_cost": ("Energy cost", "money"), "idle_cost": ("Idle cost", "money"), "amount": ("Amount", "money"),
    "cost_a": ("Cost under A", "money"), "cost_b": ("Cost under B", "money"), "difference": ("Difference", "money"),
    "input_cost": ("Input cost", "money"), "attributed": ("To owners", "money"), "idle": ("Idle", "money"),
    "unattributed": ("Unattributed", "money"), "original_amount": ("Original amount", "none"),
    "monthly_cost": ("Monthly cost", "money"), "horizon_cost": ("Cost over the horizon", "money"),
    "horizon_cash": ("Cash over the horizon", "money"), "upfront_capex": ("Upfront capex", "money"),
    "cost_per_gpu_hour": ("Cost per GPU-hour", "money_per_gpu_h"),
    "cost_per_allocated_gpu_hour": ("Cost per allocated GPU-hour", "money_per_gpu_h"),
    "cost_per_million_tokens": ("Cost per 1M tokens", "money_per_1m"),
    "cost_per_million_input_tokens": ("Cost per 1M input tokens", "money_per_1m"),
    "cost_per_million_uncached_input_tokens": ("Cost per 1M uncached input tokens", "money_per_1m"),
    "cost_per_million_cached_input_tokens": ("Cost per 1M cached input tokens", "money_per_1m"),
    "cost_per_million_output_tokens": ("Cost per 1M output tokens", "money_per_1m"),
    "cost_per_million_good_tokens": ("Cost per 1M good tokens", "money_per_1m"),
    "cost_per_million_useful_tokens": ("Cost per 1M useful tokens", "money_per_1m"),
    "target": ("Target", "money_per_1m"), "vs_target": ("Cost / target", "factor"),
    "allocated_gpu_hours": ("Allocated GPU-hours", "gpu_h"), "active_gpu_hours": ("Active GPU-hours", "gpu_h"),
    "available_gpu_hours": ("Available GPU-hours", "gpu_h"), "covered_gpu_hours": ("GPU-hours with telemetry", "gpu_h"),
    "uncovered_gpu_hours": ("GPU-hours without telemetry", "gpu_h"), "idle_gpu_hours": ("Idle GPU-hours", "gpu_h"),
    "unallocated_gpu_hours": ("Unallocated GPU-hours", "gpu_h"), "gpu_hours": ("GPU-hours", "gpu_h"),
    "energy_kwh_gpu": ("GPU energy", "kwh"), "energy_kwh_facility": ("Facility energy", "kwh"),
    "gpu_kw": ("GPU power", "kw"), "facility_kw": ("Facility power", "kw"), "cap_kw": ("Site cap", "kw"),
    "avg_power_w_per_gpu": ("Average power per GPU", "w"), "avg_util_pct": ("Average utilization", "pct"),
    "co2e_kg": ("CO2e", "kg"), "carbon_kg": ("CO2e", "kg"),
    "idle_rate": ("Idle rate", "ratio"), "allocation_rate": ("Allocated / available", "ratio"),
    "coverage": ("Telemetry coverage", "ratio"), "telemetry_coverage": ("Telemetry coverage", "ratio"),
    "share_of_idle": ("Share of idle", "ratio"), "slo_attainment": ("SLO attainment", "ratio"),
    "cache_hit_rate": ("Cache hit rate", "ratio"), "error_share": ("Errors", "ratio"),
    "retry_share": ("Retries", "ratio"), "input_share": ("Input share", "ratio"),
    "cached_share": ("Cached input share", "ratio"), "output_share": ("Output share", "ratio"),
    "change": ("Change", "ratio"), "share": ("Share", "ratio"), "good_token_share": ("Good-token share", "ratio"),
    "utilization": ("Utilization", "ratio"),
    "tokens": ("Tokens", "tokens"), "input_tokens": ("Input tokens", "tokens"),
    "cached_input_tokens": ("Cached input tokens", "tokens"), "output_tokens": ("Output tokens", "tokens"),
    "good_tokens": ("Good tokens", "tokens"), "requests": ("Requests", "count"), "records": ("Records", "count"),
    "accepted": ("Rows accepted", "count"), "rejected": ("Rows rejected", "count"),
    "outside_period": ("Rows outside the period", "count"), "cards": ("Cards", "count"),
    "allocations": ("Allocations", "count"), "row": ("Row", "count"), "requested_gpus": ("Requested GPUs", "count"),
    "cards_for_peak": ("Cards for the peak", "count"), "attempt": ("Attempt", "count"),
    "output_tokens_per_joule": ("Output tokens per joule", "tokens_per_j"),
    "output_tokens_per_joule_gpu": ("Output tokens per GPU joule", "tokens_per_j"),
    "output_tokens_per_joule_facility": ("Output tokens per facility joule", "tokens_per_j"),
    "ttft_ms": ("Time to first token", "ms"), "latency_ms": ("Latency", "ms"), "prefill_ms": ("Prefill", "ms"),
    "decode_ms": ("Decode", "ms"),
    "display_name": ("Name", "none"), "top_offenders": ("Top offenders", "none"), "action": ("Suggested action", "none"),
    "meets_target": ("Meets target", "none"), "gpu_id": ("Card", "none"), "job_id": ("Job", "none"),
    "allocation_id": ("Allocation", "none"), "request_id": ("Request", "none"), "cost_id": ("Cost row", "none"),
    "first_idle": ("First idle", "none"), "last_idle": ("Last idle", "none"), "ts": ("Time", "none"),
    "a": ("A (current)", "none"), "b": ("B (edited)", "none"), "via": ("Via", "none"),
    "original_currency": ("Original currency", "none"), "what": ("What", "none"), "detail": ("Detail", "none"),
    "unmapped": ("Unmapped", "none"), "present": ("Present", "none"), "included": ("In the boundary", "none"),
    "default": ("Default driver", "none"), "driver": ("Driver", "none"), "measure": ("Measure", "none"),
    "partial": ("Partial", "none"), "bucket": ("Period", "none"), "hours_in_data": ("Hours in the data", "none"),
}

# Contract values shown to people (idle causes, idle kinds, categories, drivers, presets, ...).
CAUSES = {
    "no_demand": "No demand", "quota": "Quota", "fragmentation": "Fragmentation", "maintenance": "Maintenance",
    "degraded_hardware": "Degraded hardware", "network_bottleneck": "Network bottleneck",
    "storage_bottleneck": "Storage bottleneck", "data_loading": "Data loading",
    "oversized_request": "Oversized request", "underutilized": "Underutilized",
}
KINDS = {"unallocated": "free", "allocated": "held"}
BOUNDARIES = {"energy_only": "Energy only", "narrow": "Narrow (depreciation + power)", "rental": "Rental",
              "fully_loaded": "Fully loaded", "custom": "Custom"}
IDLE_TREATMENT = {"separate": "Idle as its own line", "proportional": "Idle charged to owners"}
RECHARGE = {"tokens": "by tokens", "requests": "by requests", "none": "none"}
VALUE_LABELS: dict[str, dict[str, str]] = {"cause": CAUSES, "kind": KINDS}

_ACRONYMS = {"gpu": "GPU", "kwh": "kWh", "id": "id", "slo": "SLO", "co2e": "CO2e", "pue": "PUE", "api": "API",
             "mig": "MIG", "tco": "TCO", "ms": "ms", "kw": "kW"}


def humanize(name: str) -> str:
    """snake_case -> "Snake case" with known acronyms kept (gpu_rental -> "GPU rental")."""
    words = [w for w in re.split(r"[_\s]+", str(name)) if w]
    if not words:
        return str(name)
    out = [_ACRONYMS.get(w.lower(), w) for w in words]
    if out[0] == words[0]:
        out[0] = out[0][:1].upper() + out[0][1:]
    return " ".join(out)


def cause(name: str | None) -> str:
    """An idle cause as words ("degraded_hardware" -> "Degraded hardware")."""
    return "(none)" if name is None else CAUSES.get(name, humanize(name))


def cause_kind(cause_name: str | None, kind: str | None) -> str:
    """"Underutilized (held)": a cause with its kind, as the idle legends and pills show it."""
    return f"{cause(cause_name)} ({KINDS.get(kind or '', kind or '?')})"


def category(name: str) -> str:
    return humanize(name)


def measure(name: str, currency: str = "USD") -> str:
    """A measure's name with its unit: "Cost per GPU-hour (USD/GPU-h)"."""
    return column(name, currency)


def _guess(name: str) -> tuple[str, Unit]:
    if name.startswith("cost_per_million"):
        return humanize(name), "money_per_1m"
    if name.endswith("_cost") or name.startswith("cost_"):
        return humanize(name), "money"
    if name.endswith("gpu_hours"):
        return humanize(name).replace("GPU hours", "GPU-hours"), "gpu_h"
    if name.startswith("energy_kwh"):
        return humanize(name), "kwh"
    if name.endswith("_pct"):
        return humanize(name[:-4]), "pct"
    if name.endswith("_tokens"):
        return humanize(name), "tokens"
    if name.endswith("_ms"):
        return humanize(name[:-3]), "ms"
    return humanize(name), "none"


def unit_of(name: str) -> Unit:
    return COLUMNS.get(name, _guess(name))[1]


def unit_text(kind: str, currency: str = "USD") -> str:
    return UNIT_TEXT.get(kind, "").format(cur=currency)


def column(name: str, currency: str = "USD", *, with_unit: bool = True) -> str:
    """A column's header as people read it, with its unit: "Cost (USD)", "Idle rate (%)"."""
    label, kind = COLUMNS.get(name, _guess(name))
    u = unit_text(kind, currency)
    return f"{label} ({u})" if with_unit and u else label


def readable_values(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with contract values as words in the columns people read them in (causes,
    idle kinds, categories, compare measures); numbers and names from the data are untouched."""
    out = []
    for name, dtype in frame.schema.items():
        if dtype != pl.String:
            continue
        if name in VALUE_LABELS:
            mapping = VALUE_LABELS[name]
            out.append(pl.col(name).replace(mapping).alias(name))
        elif name == "category":
            out.append(pl.col(name).map_elements(category, return_dtype=pl.String).alias(name))
    return frame.with_columns(out) if out else frame


def compact(value: float | None, digits: int = 1) -> str:
    """A large count in words people read: 3.8e10 -> "38.0 B", 2.5e6 -> "2.5 M", 950 -> "950"."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    a = abs(value)
    for size, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if a >= size:
            return f"{value / size:,.{digits}f} {suffix}"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.{digits}f}"
