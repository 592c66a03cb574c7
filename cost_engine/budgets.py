"""Budgets of tenants and projects: what is booked, committed and forecast against each, by when.

For every budget in force at the report time (as_of): the span it covers (a month, a quarter
or its own start..end, in local days), the cost booked in that span from the ledger's money
(the budget's owner, its categories), the cost committed by allocations that hold cards past
as_of, and a forecast of the span's days the data does not cover yet (forecast.py). The
projected total is booked + the larger of forecast and committed; its 80 % and 95 % intervals
come from the forecast's. Each figure whose inputs are missing is null with the reason in
`note`, never 0.

Pure functions over the Computation's public frames (money, seg, bundle, ownership).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

import polars as pl

from . import burn, periods
from .config import BOUNDARY_PRESETS
from .contract import CATEGORIES, CATEGORY_SEPARATOR, TS
from .engine import Computation
from .forecast import MODEL_NAMES, forecast
from .table_rules import BUDGET_TAG, exchange_rates, rejected_budget_id

UNKNOWN = "unknown"

STATUS_SCHEMA = pl.Schema(
    {
        "budget_id": pl.String,
        "level": pl.String,  # tenant | project
        "tenant": pl.String,
        "project": pl.String,
        "owner": pl.String,  # the tenant or project the budget is for
        "period_kind": pl.String,
        "window_start": TS,
        "window_end": TS,
        "categories": pl.String,  # the categories counted, separated by CATEGORY_SEPARATOR
        "amount": pl.Float64,  # in the period currency
        "amount_original": pl.Float64,
        "currency_original": pl.String,
        "booked": pl.Float64,
        "committed": pl.Float64,
        "forecast": pl.Float64,  # the model's forecast of the days not yet booked
        "projected": pl.Float64,  # booked + max(forecast, committed)
        "lo80": pl.Float64,
        "hi80": pl.Float64,
        "lo95": pl.Float64,
        "hi95": pl.Float64,
        "remaining": pl.Float64,  # amount - projected
        "booked_share": pl.Float64,  # booked / amount
        "projected_share": pl.Float64,  # projected / amount
        "status": pl.String,  # over | at risk | within | unknown
        "model": pl.String,
        "history_days": pl.Int64,
        "days_left": pl.Float64,  # days of the span to forecast (in 24-hour units)
        "days_before_data": pl.Float64,  # ... of which before the data starts
        "note": pl.String,
    }
)
PATH_SCHEMA = pl.Schema(
    {
        "budget_id": pl.String,
        "day": pl.Date,
        "kind": pl.String,  # booked | forecast (a day partly booked is "booked")
        "cost": pl.Float64,
        "spent": pl.Float64,  # running total from the span's first day
        "spent_lo80": pl.Float64,
        "spent_hi80": pl.Float64,
        "spent_lo95": pl.Float64,
        "spent_hi95": pl.Float64,
        "remaining": pl.Float64,  # amount - spent: the burn-down
    }
)


@dataclass(frozen=True)
class BudgetReport:
    as_of: datetime
    status: pl.DataFrame  # STATUS_SCHEMA, one row per budget in force at as_of
    path: pl.DataFrame  # PATH_SCHEMA, the span of each budget day by day
    inactive: list[str]  # budgets not in force at as_of
    now: datetime | None = None  # the instant the burn rate reads (periods.live_time); as_of when None

    @property
    def live_at(self) -> datetime:
        return self.now or self.as_of


def report_day(as_of: datetime, tz: str) -> date:
    """The local day the report time closes (the last day with booked cost)."""
    return periods.local_date(as_of - timedelta(microseconds=1), tz)


def categories_of(boundary: str | None, categories: str | None, report_boundary: tuple[str, ...]) -> tuple[str, ...]:
    """The categories a budget counts: its boundary's (the report's when empty), narrowed to its list."""
    base = _boundary_of(boundary, report_boundary)
    if not categories:
        return tuple(base)
    wanted = set(categories.split(CATEGORY_SEPARATOR))
    return tuple(c for c in base if c in wanted)


def _boundary_of(boundary: str | None, report_boundary: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(report_boundary if boundary is None else CATEGORIES if boundary == "custom"
                 else BOUNDARY_PRESETS[boundary])


def category_problems(boundary: str | None, categories: str | None, report: tuple[str, ...], report_name: str
                      ) -> list[str]:
    """Why a budget's cost cannot be told from its categories (empty: it can): a category it
    lists or its boundary holds that the report's boundary leaves out (never booked, so never
    seen: unknown, not $0), a listed one its own boundary does not hold, or none left to count."""
    base = _boundary_of(boundary, report)
    listed = categories.split(CATEGORY_SEPARATOR) if categories else list(base)
    out = []
    outside_own = [c for c in listed if c not in base]
    if boundary is not None and outside_own:
        out.append(f"its boundary ({boundary}) does not hold {', '.join(outside_own)}, which it lists")
    counted = listed if boundary is None else [c for c in listed if c in base]
    left_out = [c for c in counted if c not in report]
    if left_out:
        out.append(f"the report's boundary ({report_name}) leaves out {', '.join(left_out)}, which this "
                   "budget counts: its cost is unknown")
    if not out and not categories_of(boundary, categories, report):
        out.append("it counts no category")
    return out


def visible_budgets(budgets: pl.DataFrame, tenants: frozenset[str] | None, projects: pl.DataFrame) -> pl.DataFrame:
    """The budgets a user granted `tenants` may see (None: all): their tenants' budgets and the
    budgets of their tenants' projects (`projects`: project, tenant, as Ownership.projects)."""
    if tenants is None:
        return budgets
    allowed = sorted(tenants)
    own = projects.filter(pl.col("tenant").is_in(allowed))["project"].to_list()
    mine = pl.col("tenant").is_in(allowed).fill_null(False) | pl.col("project").is_in(own).fill_null(False)
    return budgets.filter(mine)


def evaluate(comp: Computation, as_of: datetime | None = None, now: datetime | None = None, *,
             budgets: pl.DataFrame | None = None, committed: bool = True) -> BudgetReport:
    """Every budget of the computation's bundle (or `budgets`, a frame of the budgets table) at
    the report time (see periods.resolve_as_of). `committed=False` leaves allocations after the
    report time out (a backtest replays a past day, when their recorded ends were not known)."""
    p = comp.period
    t = periods.resolve_as_of(p.start, p.end, p.timezone, as_of, now)
    live = periods.live_time(p.start, p.end, as_of, now)
    # The rows the budgets file had but validation refused still show, as unknown (only for the
    # source's own table, and not to a tenant-scoped user: rejected rows are fleet-wide).
    refused = rejected_budgets(comp) if budgets is None and comp.scoped_to is None else []
    if budgets is None:
        budgets = comp.bundle["budgets"]
    refused = [r for r in refused if r["budget_id"] not in set(budgets["budget_id"].to_list())]
    if budgets.height == 0 and not refused:
        return BudgetReport(t, pl.DataFrame(schema=STATUS_SCHEMA), pl.DataFrame(schema=PATH_SCHEMA), [], live)
    ctx = _Context.of(comp, t, committed)
    rows, paths, inactive = [], [], []
    for b in budgets.sort("budget_id").iter_rows(named=True):
        span = periods.window(b["period_kind"], b["start"], b["end"], ctx.day, p.timezone)
        if span is None:
            inactive.append(b["budget_id"])
            continue
        row, path = _one(ctx, b, span)
        rows.append(row)
        paths.append(path)
    rows += [{k: r.get(k) for k in STATUS_SCHEMA} for r in refused]
    status = pl.DataFrame(rows, schema=STATUS_SCHEMA, orient="row") if rows else pl.DataFrame(schema=STATUS_SCHEMA)
    path = pl.concat(paths) if paths else pl.DataFrame(schema=PATH_SCHEMA)
    return BudgetReport(t, status, path, inactive, live)


def status_text(status: str | None, note: str | None) -> str:
    """A status as every surface shows it: within, at risk, over, or unknown (why)."""
    if status == UNKNOWN:
        return f"{UNKNOWN} ({note or 'no figure'})"
    return status or UNKNOWN


def rejected_budgets(comp: Computation) -> list[dict]:
    """One status row per budgets row that validation rejected (docs/budgets.md): its budget_id
    as written (None when it had none), status unknown, every figure null, and the file, row and
    reasons in `note`. A store keeps each rejection it saw once; a rejected id that is also a
    valid budget was fixed later and is left to the caller to drop."""
    rej = comp.bundle.rejected.filter(pl.col("table") == "budgets")
    if rej.height == 0:
        return []
    rows = (
        rej.group_by("file", "row", maintain_order=True)
        .agg(pl.col("reason").unique(maintain_order=True))
        .sort("file", "row", nulls_last=True)
    )
    out = []
    for r in rows.iter_rows(named=True):
        ids = [rejected_budget_id(x) for x in r["reason"]]
        bid = next((i for i in ids if i is not None), None)
        tag = BUDGET_TAG.format(bid) if bid is not None else None
        reasons = [x.removesuffix(tag) if tag else x for x in r["reason"]]
        where = f"{r['file']} row {r['row']}" if r["file"] else f"row {r['row']}"
        out.append({"budget_id": bid, "status": UNKNOWN, "categories": None,
                    "note": f"rejected ({where}): {'; '.join(reasons)}"})
    return out


@dataclass(frozen=True)
class _Context:
    """What every budget of one evaluation shares."""

    comp: Computation
    as_of: datetime
    day: date  # report_day
    money: pl.DataFrame  # owners' cost per (day, tenant, project, category) before as_of
    covered: pl.DataFrame  # per local day of the data: day, hours covered (before as_of)
    rates: pl.DataFrame  # burn.pool_rates
    held: pl.DataFrame  # burn.held_after

    @classmethod
    def of(cls, comp: Computation, as_of: datetime, committed: bool = True) -> "_Context":
        p = comp.period
        days = periods.local_days(p.start, as_of, p.timezone) if as_of > p.start else periods.local_days(
            p.start, p.start, p.timezone)
        covered = days.select("day", periods.overlap_hours(pl.col("d0"), pl.col("d1"), p.start, as_of).alias("hours"))
        covered = covered.filter(pl.col("hours") > 0)
        money = (
            comp.money.lazy()
            .filter((pl.col("dest") == "owner") & pl.col("day").is_in(covered["day"].implode()))
            .group_by("day", "tenant", "project", "category")
            .agg(pl.col("amount").sum())
            .collect()
        )
        held = burn.held_after(comp, as_of) if committed else pl.DataFrame(schema=burn.HELD_SCHEMA)
        return cls(comp, as_of, report_day(as_of, p.timezone), money, covered, burn.pool_rates(comp, as_of), held)


def _one(ctx: _Context, b: dict, span: tuple[datetime, datetime]) -> tuple[dict, pl.DataFrame]:
    comp, cfg = ctx.comp, ctx.comp.config
    tz = comp.period.timezone
    w0, w1 = span
    level = "tenant" if b["tenant"] is not None else "project"
    owner = b[level]
    cats = categories_of(b["boundary"], b["categories"], cfg.boundary.included)
    missing = category_problems(b["boundary"], b["categories"], cfg.boundary.included, cfg.boundary.name)
    notes: list[str] = list(missing)
    amount = _in_period_currency(b["amount"], b["currency"], cfg, notes)
    known_owner = _owner_known(comp, level, owner)
    if not known_owner:
        notes.append(f"{level} {owner!r} is not in the owners table")
    tenant = b["tenant"] if level == "tenant" else _tenant_of(comp, owner)

    days = periods.local_days(w0, w1, tz)
    days = days.join(ctx.covered, on="day", how="left").with_columns(
        pl.col("hours").fill_null(0.0).alias("booked_hours"),
        periods.overlap_hours(pl.col("d0"), pl.col("d1"), w0, w1).alias("span_hours"),
    ).with_columns((pl.col("span_hours") - pl.col("booked_hours")).clip(lower_bound=0.0).alias("left_hours"))
    mine = ctx.money.filter((pl.col(level) == owner) & pl.col("category").is_in(list(cats)))
    daily = mine.group_by("day").agg(pl.col("amount").sum().alias("cost"))
    history = ctx.covered.join(daily, on="day", how="left").select(
        "day", pl.col("cost").fill_null(0.0), "hours")
    booked = float(days.join(daily, on="day").select(pl.col("cost").sum()).item() or 0.0)
    future = days.filter(pl.col("left_hours") > 0).select("day", pl.col("left_hours").alias("hours"))
    fc = forecast(history, future)
    committed = _committed(ctx, level, owner, cats, w1)
    before = 0.0
    if w0 < comp.period.start:
        lead = periods.overlap_hours(pl.col("d0"), pl.col("d1"), w0, min(w1, comp.period.start))
        before = float(days.select(lead.sum()).item()) / 24
    if before:
        size = f"{before:.1f} days" if before >= 1 else f"{before * 24:.0f} hours"
        notes.append(f"{size} of the span precede the data: forecast like the days ahead")
    left = float(future["hours"].sum()) / 24
    unknown = bool(missing) or amount is None or not known_owner
    if fc.point is None and left > 0:
        notes.append("no history to forecast from")
        unknown = True
    if committed is None:
        notes.append("a pool with allocations after the report time has no recent rate: committed cost unknown")

    def total(x: float | None) -> float | None:
        # An unknown committed cost leaves the total unknown: it may lie above any forecast.
        if unknown or x is None or committed is None:
            return None
        return booked + max(x, committed)

    projected = total(fc.point)
    bounds = {k: total(getattr(fc, k)) for k in ("lo80", "hi80", "lo95", "hi95")}
    status = _status(projected, bounds["hi80"], booked if not unknown else None, amount)
    row = {
        "budget_id": b["budget_id"], "level": level, "tenant": tenant, "project": b["project"], "owner": owner,
        "period_kind": b["period_kind"], "window_start": w0, "window_end": w1,
        "categories": CATEGORY_SEPARATOR.join(cats), "amount": amount, "amount_original": b["amount"],
        "currency_original": b["currency"],
        "booked": None if unknown else booked, "committed": None if unknown else committed,
        "forecast": None if unknown else fc.point, "projected": projected, **bounds,
        "remaining": None if projected is None or amount is None else amount - projected,
        "booked_share": None if unknown or amount is None else booked / amount,
        "projected_share": None if projected is None or amount is None else projected / amount,
        "status": status, "model": MODEL_NAMES[fc.model], "history_days": fc.history_days,
        "days_left": left, "days_before_data": before, "note": "; ".join(notes) or None,
    }
    return row, _path(b["budget_id"], days, daily, fc.path, amount, None if unknown else committed,
                      ctx.day)


def _status(projected: float | None, hi80: float | None, booked: float | None, amount: float | None) -> str:
    """over: the projected total passes the budget; at risk: the 80 % interval's upper end does;
    within: neither. A budget exactly met is within."""
    if projected is None or amount is None or booked is None:
        return UNKNOWN
    if projected > amount:
        return "over"
    if hi80 is not None and hi80 > amount:
        return "at risk"
    return "within"


def _in_period_currency(amount: float, currency: str | None, cfg, notes: list[str]) -> float | None:
    base = cfg.period.currency.upper()
    cur = (currency or base).upper()
    if cur == base:
        return amount
    rate = exchange_rates(cfg).get(cur)
    if rate is None:
        notes.append(f"no exchange rate from {cur} to {base} in currency_rates")
        return None
    return amount * rate


def _owner_known(comp: Computation, level: str, owner: str) -> bool:
    if comp.ownership.identity:
        return True  # without owners tables every owner key is its own project and tenant
    return owner in set(comp.ownership.projects[level].to_list())


def _tenant_of(comp: Computation, project: str) -> str | None:
    if comp.ownership.identity:
        return project
    hit = comp.ownership.projects.filter(pl.col("project") == project)["tenant"]
    return hit[0] if hit.len() else None


def _committed(ctx: _Context, level: str, owner: str, cats: tuple[str, ...], w1: datetime) -> float | None:
    """Cost of the owner's card-time held from as_of to the span's end, at the pools' recent rates
    for the budget's categories; None when a pool it holds has no rate."""
    held = ctx.held.filter(pl.col(level) == owner)
    hours = periods.overlap_hours(pl.col("start"), pl.col("end"), ctx.as_of, w1)
    held = held.with_columns((pl.col("weight") * hours).alias("gpu_hours")).filter(pl.col("gpu_hours") > 0)
    if held.height == 0:
        return 0.0
    if not set(held["pool"].to_list()) <= set(ctx.rates["pool"].to_list()):
        return None
    rate = ctx.rates.filter(pl.col("category").is_in(list(cats))).group_by("pool").agg(pl.col("rate").sum())
    cost = held.join(rate, on="pool", how="left").select((pl.col("gpu_hours") * pl.col("rate").fill_null(0.0)).sum())
    return float(cost.item())


def _path(budget_id: str, days: pl.DataFrame, daily: pl.DataFrame, fc_path: pl.DataFrame, amount: float | None,
          committed: float | None, last_booked: date) -> pl.DataFrame:
    """The span day by day: booked cost, forecast cost, the running total and its bands, ending on
    the status row's figures. Committed cost is a floor under the forecast's running sum, spread
    over the days from `last_booked` on by their hours (the chart's shape; the totals are exact); a band the
    forecast could not estimate stays null, never zero-width. Empty when the figures are unknown."""
    if committed is None:
        return pl.DataFrame(schema=PATH_SCHEMA)
    ahead = pl.when(pl.col("day") >= last_booked).then(pl.col("hours")).otherwise(0.0)
    floor = (committed * ahead.cum_sum() / ahead.sum()).fill_nan(0.0)
    f = (
        fc_path.with_columns(pl.max_horizontal(pl.col(c), floor) for c in ("cum", "cum_lo80", "cum_hi80", "cum_lo95",
                                                                          "cum_hi95"))
        .select("day", pl.col("cum").diff().fill_null(pl.col("cum")).alias("fc"),
                *((pl.col("cum") - pl.col(f"cum_{k}")).alias(f"w_{k}") for k in ("lo80", "lo95")),
                *((pl.col(f"cum_{k}") - pl.col("cum")).alias(f"w_{k}") for k in ("hi80", "hi95")))
    )
    unknown_bands = fc_path["cum_lo80"].null_count() > 0
    t = (
        days.select("day", "booked_hours")
        .join(daily, on="day", how="left")
        .join(f, on="day", how="left")
        .with_columns(
            pl.when(pl.col("booked_hours") > 0).then(pl.lit("booked")).otherwise(pl.lit("forecast")).alias("kind"),
            (pl.col("cost").fill_null(0.0) + pl.col("fc").fill_null(0.0)).alias("cost"),
        )
        .with_columns(pl.col("cost").cum_sum().alias("spent"))
        # A band's width grows with each forecast day and stays through booked ones.
        .with_columns(pl.col("w_lo80", "w_hi80", "w_lo95", "w_hi95").forward_fill().fill_null(0.0))
    )
    if unknown_bands:
        t = t.with_columns(pl.lit(None, pl.Float64).alias(c) for c in ("w_lo80", "w_hi80", "w_lo95", "w_hi95"))
    amt = pl.lit(amount, pl.Float64)
    return t.select(
        pl.lit(budget_id).alias("budget_id"), "day", "kind", "cost", "spent",
        (pl.col("spent") - pl.col("w_lo80")).clip(lower_bound=0.0).alias("spent_lo80"),
        (pl.col("spent") + pl.col("w_hi80")).alias("spent_hi80"),
        (pl.col("spent") - pl.col("w_lo95")).clip(lower_bound=0.0).alias("spent_lo95"),
        (pl.col("spent") + pl.col("w_hi95")).alias("spent_hi95"),
        (amt - pl.col("spent")).alias("remaining"),
    ).cast(dict(PATH_SCHEMA))
