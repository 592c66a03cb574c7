"""The contract's value rules per table: what makes a parsed row a rejection, and with which reason.

bundle.py parses raw values into contract columns; these rules then judge the parsed values
(a null passes: whether a value is required is checked while parsing). Each rule is a cheap
flag computed for every row and a message built only for the rows it flags.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from .config import BOUNDARY_PRESETS, Config
from .contract import (
    CATEGORIES,
    CATEGORY_SEPARATOR,
    DRIVERS,
    EVENT_KINDS,
    PERIOD_KINDS,
    QUEUE_REASONS,
    REQUEST_STATUSES,
    WORKLOADS,
)

RAW = "__raw__"  # prefix of the raw input columns while parsed columns take the contract names
MAX_SHOWN = 60  # values quoted in a reason are cut to this many characters


@dataclass(frozen=True)
class Problem:
    """One way a row can break the contract: a cheap flag for every row, a message for flagged rows."""

    flag: pl.Expr
    message: pl.Expr


def raw(name: str) -> pl.Expr:
    """The input value of a contract column (text already stripped, empty text null)."""
    return pl.col(RAW + name)


def shown(expr: pl.Expr) -> pl.Expr:
    """A value as quoted in a reason, cut to a readable length."""
    s = expr.cast(pl.String).str.strip_chars()
    return pl.when(s.str.len_chars() > MAX_SHOWN).then(s.str.slice(0, MAX_SHOWN - 3) + "...").otherwise(s)


def post_parse(table: str, config: Config) -> list[pl.Expr]:
    """Value fixes that need config: a cost's or budget's currency defaults to the period currency;
    a budget's category list is written one way (trimmed names, one separator, no empty names)."""
    currency = pl.col("currency").str.to_uppercase().fill_null(config.period.currency.upper())
    if table == "costs":
        return [currency]
    if table != "budgets":
        return []
    names = pl.col("categories").str.split(CATEGORY_SEPARATOR).list.eval(
        pl.element().str.strip_chars().filter(pl.element().str.strip_chars() != "")
    )
    joined = names.list.join(CATEGORY_SEPARATOR)
    return [currency, pl.when(joined != "").then(joined).alias("categories"), pl.col("boundary").str.to_lowercase()]


def rules(table: str, config: Config) -> list[Problem]:
    """The contract's value rules per table (docs/data-contract.md: what a row is rejected for)."""
    by_table = {
        "inventory": lambda: [
            _unit_share("capacity"),
            *_interval("in_service_start", "in_service_end"),
        ],
        "allocations": lambda: [
            *_interval("start", "end"),
            _unit_share("share"),
            _one_of("workload", WORKLOADS),
            _non_negative("requested_gpus"),
        ],
        "telemetry": lambda: [
            Problem(
                (pl.col("util_pct") < 0) | (pl.col("util_pct") > 100),
                pl.format("util_pct {} outside 0..100", shown(raw("util_pct"))),
            ),
            *map(_non_negative, ("power_w", "energy_j", "mem_used_mib")),
        ],
        "requests": lambda: [
            *map(_non_negative, ("input_tokens", "cached_input_tokens", "output_tokens")),
            _one_of("status", REQUEST_STATUSES),
            Problem(pl.col("requests") < 1, pl.format("requests {} is below 1", shown(raw("requests")))),
            Problem(pl.col("attempt") < 1, pl.format("attempt {} is below 1", shown(raw("attempt")))),
            *_interval("ts", "end"),
            *map(_non_negative, ("ttft_ms", "latency_ms", "prefill_ms", "decode_ms")),
        ],
        "costs": lambda: [
            _non_negative("amount"),
            _one_of("category", CATEGORIES),
            *_interval("start", "end"),
            _one_of("driver", DRIVERS),
            _currency_known(config),
        ],
        "rates": lambda: [
            _non_negative("price_per_gpu_hour"),
            _one_of("category", CATEGORIES),
            *_interval("start", "end"),
        ],
        "tariffs": lambda: [
            *_interval("start", "end"),
            _non_negative("price_per_kwh"),
            _non_negative("carbon_g_per_kwh"),
        ],
        "queue": lambda: [
            _one_of("reason", QUEUE_REASONS),
            Problem(pl.col("gpus") <= 0, pl.format("gpus {} must be above 0", shown(raw("gpus")))),
            Problem(
                pl.col("start") < pl.col("submit"),
                pl.format("start before submit (submit {}, start {})", shown(raw("submit")), shown(raw("start"))),
            ),
        ],
        "events": lambda: [
            _one_of("kind", EVENT_KINDS),
            *_interval("start", "end"),
            # a fleet-wide event would explain idle time nobody can check
            Problem(
                pl.all_horizontal(pl.col(c).is_null() for c in ("gpu_id", "node", "pool")),
                pl.lit("event needs a gpu_id, node or pool scope"),
            ),
        ],
        "quotas": lambda: [_non_negative("gpus")],
        "budgets": lambda: _budget_rules(config),
    }
    return by_table.get(table, list)()


def _budget_rules(config: Config) -> list[Problem]:
    tenant, project = pl.col("tenant").is_not_null(), pl.col("project").is_not_null()
    custom = pl.col("period_kind") == "custom"
    cats = pl.col("categories").str.split(CATEGORY_SEPARATOR)
    unknown = cats.list.eval(pl.element().filter(~pl.element().is_in(CATEGORIES))).list.join(", ")
    return [
        # One owner per budget: a project's budget is not also its tenant's.
        Problem(~tenant & ~project, pl.lit("budget needs a tenant or a project")),
        Problem(tenant & project, pl.format("budget names tenant {} and project {}: give one of them",
                                            shown(pl.col("tenant")), shown(pl.col("project")))),
        _one_of("period_kind", PERIOD_KINDS),
        Problem(pl.col("amount") <= 0, pl.format("amount {} must be above 0", shown(raw("amount")))),
        Problem(custom & (pl.col("start").is_null() | pl.col("end").is_null()),
                pl.lit("period_kind custom needs a start and an end")),
        *_interval("start", "end"),
        _one_of("boundary", (*BOUNDARY_PRESETS, "custom")),
        Problem((pl.col("boundary") == "custom") & pl.col("categories").is_null(),
                pl.lit("boundary custom needs a categories list")),
        Problem(pl.col("categories").is_not_null() & (unknown != ""),
                pl.format(f"unknown categories '{{}}' (expected names from: {', '.join(CATEGORIES)}, "
                          f"separated by '{CATEGORY_SEPARATOR}')", shown(unknown))),
        _currency_known(config),
    ]


BUDGET_TAG = " (budget_id {})"  # ends a rejected budget row's reason: which budget the row was


def tag_budget_rejections(rejected: pl.DataFrame, raw_ids: pl.DataFrame) -> pl.DataFrame:
    """Rejected budgets rows (row, reason) with the budget_id as written appended to the reason, so
    a rejected budget can still be listed by name (docs/budgets.md) wherever the rejection goes,
    a store's rejected table included. `raw_ids`: row, budget_id (raw text, null when empty)."""
    ids = raw_ids.select("row", pl.col("budget_id").cast(pl.String).str.strip_chars().alias("__id"))
    tag = pl.format(BUDGET_TAG, pl.col("__id"))
    return (
        rejected.join(ids, on="row", how="left")
        .with_columns(pl.when(pl.col("__id").is_not_null() & (pl.col("__id") != ""))
                      .then(pl.col("reason") + tag).otherwise(pl.col("reason")).alias("reason"))
        .drop("__id")
    )


def rejected_budget_id(reason: str) -> str | None:
    """The budget_id a rejected budget row's reason ends with (tag_budget_rejections), or None."""
    head, sep, tail = reason.rpartition(BUDGET_TAG.split("{}")[0])
    return tail[:-1] if sep and tail.endswith(")") else None


def _non_negative(name: str) -> Problem:
    return Problem(pl.col(name) < 0, pl.format(f"{name} {{}} is negative", shown(raw(name))))


def _unit_share(name: str) -> Problem:
    bad = (pl.col(name) <= 0) | (pl.col(name) > 1)
    return Problem(bad, pl.format(f"{name} {{}} outside (0, 1]", shown(raw(name))))


def _one_of(name: str, allowed: tuple[str, ...]) -> Problem:
    known = ", ".join(allowed)
    return Problem(
        pl.col(name).is_not_null() & ~pl.col(name).is_in(allowed),
        pl.format(f"unknown {name} '{{}}' (expected one of {known})", shown(pl.col(name))),
    )


def _interval(start: str, end: str) -> list[Problem]:
    """Half-open intervals need end > start; name both values so the row can be found."""
    s, e = shown(raw(start)), shown(raw(end))
    return [
        Problem(pl.col(end) < pl.col(start), pl.format(f"{end} before {start} ({start} {{}}, {end} {{}})", s, e)),
        Problem(pl.col(end) == pl.col(start), pl.format(f"zero-length interval ({start} = {end} = {{}})", s)),
    ]


def exchange_rates(config: Config) -> dict[str, float]:
    """Usable exchange rates into the period currency, keyed by upper-case code."""
    return {k.upper(): float(v) for k, v in config.currency_rates.items() if math.isfinite(v) and v > 0}


def _currency_known(config: Config) -> Problem:
    base = config.period.currency.upper()
    cur = pl.col("currency")
    foreign = (cur != base) & ~cur.is_in(list(exchange_rates(config)))
    return Problem(foreign, pl.format(f"currency {{}} differs from {base} and no rate is configured", shown(cur)))
