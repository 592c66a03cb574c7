"""The data contract v1 in code (docs/data-contract.md): table schemas, enums and defaults shared by every stage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

TS = pl.Datetime("us", "UTC")
STR = pl.String
F64 = pl.Float64
I64 = pl.Int64

CATEGORIES = (
    "gpu_rental",
    "depreciation",
    "chassis",
    "power",
    "cooling",
    "facility",
    "network",
    "storage",
    "software",
    "operations",
    "maintenance",
    "support",
    "financing",
    "api_fees",
    "other",
)

DRIVERS = (
    "capacity_hours",
    "gpu_hours",
    "active_hours",
    "utilization",
    "energy",
    "tokens",
    "requests",
    "shares",
    "even",
)

# The default driver of each category (docs/data-contract.md, "costs").
DEFAULT_DRIVER = {
    "gpu_rental": "capacity_hours",
    "depreciation": "capacity_hours",
    "chassis": "capacity_hours",
    "cooling": "capacity_hours",
    "facility": "capacity_hours",
    "maintenance": "capacity_hours",
    "financing": "capacity_hours",
    "support": "capacity_hours",
    "power": "energy",
    "network": "gpu_hours",
    "storage": "gpu_hours",
    "software": "gpu_hours",
    "operations": "gpu_hours",
    "other": "gpu_hours",
    # api_fees are money paid to a hosted API; they follow the tokens of the callers.
    "api_fees": "gpu_hours",
}

WORKLOADS = ("training", "fine_tuning", "batch_inference", "inference", "interactive", "other")
REQUEST_STATUSES = ("ok", "error", "timeout", "cancelled")
QUEUE_REASONS = ("quota", "resources", "priority", "dependency", "other")
EVENT_KINDS = (
    "degraded_hardware",
    "maintenance",
    "network_bottleneck",
    "storage_bottleneck",
    "data_loading",
)

# Budgets: a month or quarter recurs (cut in period.timezone); custom spans its own start..end.
PERIOD_KINDS = ("month", "quarter", "custom")
# Several categories in one `budgets.categories` field are separated by this character.
CATEGORY_SEPARATOR = ";"

IDLE_CAUSES_UNALLOCATED = ("degraded_hardware", "maintenance", "quota", "fragmentation", "no_demand")
IDLE_CAUSES_ALLOCATED = (
    "network_bottleneck",
    "storage_bottleneck",
    "data_loading",
    "degraded_hardware",
    "oversized_request",
    "underutilized",
)

# Reconciliation buckets: where every input dollar ends up.
IDLE = "idle"
UNATTRIBUTED = "unattributed"


@dataclass(frozen=True)
class Column:
    name: str
    dtype: Any
    required: bool = False
    default: Any = None


def _c(name: str, dtype: Any, required: bool = False, default: Any = None) -> Column:
    return Column(name, dtype, required, default)


TABLES: dict[str, tuple[Column, ...]] = {
    "inventory": (
        _c("gpu_id", STR, True),
        _c("pool", STR, True),
        _c("node", STR),
        _c("accelerator", STR),
        _c("capacity", F64, default=1.0),
        _c("in_service_start", TS),
        _c("in_service_end", TS),
        _c("parent_gpu_id", STR),  # extension: the physical card a MIG instance is cut from
    ),
    "allocations": (
        _c("allocation_id", STR, True),
        _c("gpu_id", STR, True),
        _c("start", TS, True),
        _c("end", TS, True),
        _c("owner", STR, True),
        _c("source", STR, default="scheduler"),
        _c("share", F64, default=1.0),
        _c("workload", STR, default="other"),
        _c("job_id", STR),
        _c("model", STR),
        _c("requested_gpus", F64),
    ),
    "telemetry": (
        _c("ts", TS, True),
        _c("gpu_id", STR, True),
        _c("util_pct", F64, True),
        _c("power_w", F64),
        _c("energy_j", F64),
        _c("mem_used_mib", F64),
    ),
    "requests": (
        _c("request_id", STR, True),
        _c("ts", TS, True),
        _c("owner", STR, True),
        _c("source", STR, default="gateway"),
        _c("model", STR, True),
        _c("input_tokens", I64, True),
        _c("cached_input_tokens", I64, default=0),
        _c("output_tokens", I64, True),
        _c("status", STR, default="ok"),
        _c("ttft_ms", F64),
        _c("latency_ms", F64),
        _c("prefill_ms", F64),
        _c("decode_ms", F64),
        # usage buckets: one row standing for many requests over [ts, end)
        _c("requests", I64, default=1),
        _c("end", TS),
        # extension: 1 for a first try, 2.. for retries of the same call (for the retry share)
        _c("attempt", I64),
    ),
    "costs": (
        _c("cost_id", STR, True),
        _c("category", STR, True),
        _c("amount", F64, True),
        _c("currency", STR),
        _c("start", TS, True),
        _c("end", TS, True),
        _c("pool", STR),
        _c("driver", STR),
        _c("owner", STR),
        _c("source", STR),
    ),
    "rates": (
        _c("pool", STR, True),
        _c("price_per_gpu_hour", F64, True),
        _c("category", STR, default="gpu_rental"),
        _c("start", TS),
        _c("end", TS),
    ),
    "tariffs": (
        _c("start", TS, True),
        _c("end", TS, True),
        _c("price_per_kwh", F64, True),
        _c("carbon_g_per_kwh", F64),
    ),
    "owners": (
        _c("tenant", STR, True),
        _c("project", STR, True),
        _c("display_name", STR),
        _c("cost_center", STR),
    ),
    "aliases": (
        _c("source", STR, True),
        _c("key", STR, True),
        _c("project", STR, True),
    ),
    "queue": (
        _c("job_id", STR, True),
        _c("owner", STR),
        _c("pool", STR, True),
        _c("gpus", F64),
        _c("submit", TS, True),
        _c("start", TS),
        _c("reason", STR, default="other"),
    ),
    "events": (
        _c("start", TS, True),
        _c("end", TS, True),
        _c("kind", STR, True),
        _c("gpu_id", STR),
        _c("node", STR),
        _c("pool", STR),
    ),
    "quotas": (
        _c("tenant", STR, True),
        _c("pool", STR, True),
        _c("gpus", F64, True),
    ),
    # Extension: spending limits of a tenant or a project (docs/budgets.md).
    "budgets": (
        _c("budget_id", STR, True),
        _c("tenant", STR),
        _c("project", STR),
        _c("period_kind", STR, True),
        _c("amount", F64, True),
        _c("currency", STR),
        # a boundary preset name; empty = the report's boundary
        _c("boundary", STR),
        # categories separated by CATEGORY_SEPARATOR: the budget counts only these (within its boundary)
        _c("categories", STR),
        # custom: the budget's span; month / quarter: when the recurring budget is in force
        _c("start", TS),
        _c("end", TS),
    ),
}

# Columns that identify a record for idempotent re-ingest; tables without one are keyed by
# their whole content.
RECORD_KEYS: dict[str, tuple[str, ...]] = {
    "inventory": ("gpu_id",),
    "allocations": ("allocation_id",),
    "telemetry": ("gpu_id", "ts"),
    "requests": ("request_id",),
    "costs": ("cost_id",),
    "rates": ("pool", "category", "start"),
    "tariffs": ("start",),
    "owners": ("project",),
    "aliases": ("source", "key"),
    "queue": ("job_id",),
    "quotas": ("tenant", "pool"),
    "budgets": ("budget_id",),
}

TABLE_NAMES = tuple(TABLES)
REQUIRED_TABLES = ("allocations",)


def schema(table: str) -> pl.Schema:
    """The canonical Polars schema of a contract table (contract columns only)."""
    return pl.Schema({c.name: c.dtype for c in TABLES[table]})


def empty(table: str) -> pl.DataFrame:
    """An empty frame with the canonical schema, for tables a bundle does not have."""
    return pl.DataFrame(schema=schema(table))


REJECTED_SCHEMA = pl.Schema({"table": STR, "row": I64, "reason": STR})
GAPS_SCHEMA = pl.Schema({"what": STR, "detail": STR})


def make_frame(table: str, rows: list[dict]) -> pl.DataFrame:
    """A canonical frame from Python dicts, defaults filled (for tests, importers and generators).

    Timestamps may be datetimes or ISO strings with an offset. No validation beyond types:
    untrusted input goes through bundle.validate_frame instead.
    """
    cols = TABLES[table]
    data: dict[str, list] = {c.name: [] for c in cols}
    for r in rows:
        unknown = set(r) - set(data)
        if unknown:
            raise KeyError(f"{table}: unknown columns {sorted(unknown)}")
        for c in cols:
            v = r.get(c.name)
            data[c.name].append(c.default if v is None else v)
    out = []
    for c in cols:
        s = pl.Series(c.name, data[c.name])
        if c.dtype == TS and s.dtype == pl.String:
            s = s.str.to_datetime(time_zone="UTC", time_unit="us")
        out.append(s.cast(c.dtype))
    return pl.DataFrame(out) if rows else empty(table)
