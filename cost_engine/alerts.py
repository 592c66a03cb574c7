"""Alert rules from the config's [alerts] checked against a computation: what fires, what is fine,
and what cannot be told (unknown), as one frame and as the JSON payload webhooks receive.

Thresholds fire at or above their value; money is compared in whole cents, so an alert at
500.00 fires on 500.00 and not on 499.99. "Over budget" means above the budget's amount.
A check whose inputs are missing (no history, no telemetry, no inventory) says "unknown" with
the reason: it neither fires nor passes.

Windows: "the last 24 hours" and "the 7 days before" end at the report time (as_of); a day's
figures are spread evenly over the hours of it the data covers.
"""

from __future__ import annotations

import math
from datetime import date, datetime, timedelta

import polars as pl

from . import periods
from .budgets import BudgetReport, report_day
from .config import Alerts
from .contract import TS, UNATTRIBUTED
from .engine import Computation
from .tokens import model_trend

FIRING, OK, UNKNOWN = "firing", "ok", "unknown"
PAYLOAD_VERSION = 1
PRIOR_DAYS = 7  # the burn-rate and unit-cost jumps compare the last 24 h with the 7 days before

ALERT_SCHEMA = pl.Schema(
    {
        "rule": pl.String,
        "state": pl.String,  # firing | ok | unknown
        "subject": pl.String,  # what the check is about, in words
        "budget_id": pl.String,
        "tenant": pl.String,
        "project": pl.String,
        "pool": pl.String,
        "model": pl.String,
        "value": pl.Float64,  # the figure checked (null when unknown)
        "threshold": pl.Float64,  # the value at which it fires (or which it must pass, for budgets)
        "unit": pl.String,
        "message": pl.String,
    }
)


def evaluate(comp: Computation, budgets: BudgetReport, rules: Alerts | None = None) -> pl.DataFrame:
    """Every configured check at the budgets' report time; firing first, then unknown, then ok."""
    rules = rules or comp.config.alerts
    cur = comp.period.currency
    rows: list[dict] = []
    if rules.forecast_over_budget != "off":
        rows += _forecast_over_budget(budgets.status, rules.forecast_over_budget, cur, comp.period.timezone)
    if rules.booked_over_budget_pct is not None:
        rows += _booked_over_budget(budgets.status, rules.booked_over_budget_pct, cur)
    if rules.burn_rate_jump_pct is not None:
        rows += _burn_rate_jump(comp, budgets.as_of, rules.burn_rate_jump_pct, cur)
    if rules.pool_idle_rate_pct is not None:
        rows += _pool_idle(comp, budgets.as_of, rules.pool_idle_rate_pct, rules.idle_window_days)
    if rules.unattributed_cost is not None:
        rows += _unattributed(comp, rules.unattributed_cost, cur)
    if rules.model_cost_per_million_up_pct is not None:
        rows += _unit_cost_jump(comp, budgets.as_of, rules.model_cost_per_million_up_pct, cur)
    frame = pl.DataFrame([{k: r.get(k) for k in ALERT_SCHEMA} for r in rows], schema=ALERT_SCHEMA, orient="row")
    order = pl.col("state").replace_strict({FIRING: 0, UNKNOWN: 1, OK: 2}, return_dtype=pl.Int64)
    return frame.sort(order, "rule", "subject", maintain_order=True)


def _cents(x: float) -> float:
    return round(x, 2)


def _at_or_above(value: float, threshold: float, money: bool) -> bool:
    """Fires at the threshold: money to the cent, ratios to 1e-9 (float noise never decides)."""
    if money:
        return _cents(value) >= _cents(threshold)
    return value >= threshold - 1e-9 * max(1.0, abs(threshold))


def _budget_subject(r: dict) -> str:
    if r["window_start"] is None:  # a budgets row validation refused: no owner or span to name
        return f"budget {r['budget_id'] or '(no budget_id)'} (rejected row)"
    return f"budget {r['budget_id']} ({r['level']} {r['owner']}, {r['period_kind']})"


def _budget_row(r: dict, rule: str, **kw) -> dict:
    return {"rule": rule, "subject": _budget_subject(r), "budget_id": r["budget_id"], "tenant": r["tenant"],
            "project": r["project"], **kw}


def _forecast_over_budget(status: pl.DataFrame, basis: str, cur: str, tz: str) -> list[dict]:
    col = {"point": "projected", "upper80": "hi80", "upper95": "hi95"}[basis]
    what = {"point": "projected total", "upper80": "80 % upper bound", "upper95": "95 % upper bound"}[basis]
    out = []
    for r in status.iter_rows(named=True):
        v, amount = r[col], r["amount"]
        if v is None or amount is None:
            out.append(_budget_row(r, "forecast_over_budget", state=UNKNOWN, threshold=amount, unit=cur,
                                   message=f"cannot be told: {r['note'] or 'no figure'}"))
            continue
        over = _cents(v) > _cents(amount)
        out.append(_budget_row(
            r, "forecast_over_budget", state=FIRING if over else OK, value=v, threshold=amount, unit=cur,
            message=f"{what} {v:,.2f} {'>' if over else '<='} budget {amount:,.2f} {cur} by "
                    f"{report_day(r['window_end'], tz)} (booked {r['booked']:,.2f}, "
                    f"committed {r['committed'] or 0:,.2f}; "
                    f"{r['model']}, {r['history_days']} days)",
        ))
    return out


def _booked_over_budget(status: pl.DataFrame, pct: float, cur: str) -> list[dict]:
    out = []
    for r in status.iter_rows(named=True):
        v, amount = r["booked"], r["amount"]
        threshold = None if amount is None else amount * pct / 100
        if v is None or threshold is None:
            out.append(_budget_row(r, "booked_over_budget", state=UNKNOWN, threshold=threshold, unit=cur,
                                   message=f"cannot be told: {r['note'] or 'no figure'}"))
            continue
        hit = _at_or_above(v, threshold, money=True)
        out.append(_budget_row(
            r, "booked_over_budget", state=FIRING if hit else OK, value=v, threshold=threshold, unit=cur,
            message=f"booked {v:,.2f} {cur} is {v / amount:.1%} of the budget {amount:,.2f} "
                    f"(alert at {pct:g} %: {threshold:,.2f})",
        ))
    return out


# ---------------------------------------------------------------------------- trailing windows


def _covered_days(comp: Computation, as_of: datetime) -> pl.DataFrame:
    """Local days of the data before as_of with the instants they cover: day, c0, c1, hours."""
    p = comp.period
    if as_of <= p.start:
        return pl.DataFrame(schema={"day": pl.Date, "c0": TS, "c1": TS, "hours": pl.Float64})
    days = periods.local_days(p.start, as_of, p.timezone)
    return days.select(
        "day",
        pl.max_horizontal("d0", pl.lit(p.start, TS)).alias("c0"),
        pl.min_horizontal("d1", pl.lit(as_of, TS)).alias("c1"),
    ).with_columns(((pl.col("c1") - pl.col("c0")).dt.total_microseconds().cast(pl.Float64) / 3.6e9).alias("hours"))


def _trailing(daily: pl.DataFrame, covered: pl.DataFrame, keys: list[str], values: list[str], as_of: datetime
              ) -> pl.DataFrame:
    """Sums of `values` per `keys` over the last 24 h (`<v>_last`) and the PRIOR_DAYS before
    (`<v>_prior`), each day's figure spread evenly over its covered hours; with the hours each
    window has data for (`hours_last`, `hours_prior`)."""
    last0, prior0 = as_of - timedelta(hours=24), as_of - timedelta(days=1 + PRIOR_DAYS)
    c = covered.with_columns(
        (periods.overlap_hours(pl.col("c0"), pl.col("c1"), last0, as_of) / pl.col("hours")).alias("f_last"),
        (periods.overlap_hours(pl.col("c0"), pl.col("c1"), prior0, last0) / pl.col("hours")).alias("f_prior"),
    )
    hours = {w: float(c.select((pl.col(f"f_{w}") * pl.col("hours")).sum()).item() or 0.0) for w in ("last", "prior")}
    t = daily.join(c.select("day", "f_last", "f_prior"), on="day").group_by(keys).agg(
        *((pl.col(v) * pl.col("f_last")).sum().alias(f"{v}_last") for v in values),
        *((pl.col(v) * pl.col("f_prior")).sum().alias(f"{v}_prior") for v in values),
    )
    return t.with_columns(pl.lit(hours["last"]).alias("hours_last"), pl.lit(hours["prior"]).alias("hours_prior"))


def _jump(value: float | None, prior: float | None, pct: float, money: bool) -> tuple[str, float | None]:
    """(state, threshold) of "value up pct % on prior" (a rise from zero to anything counts)."""
    if value is None or prior is None:
        return UNKNOWN, None
    threshold = prior * (1 + pct / 100)
    if prior == 0:
        return (FIRING if value > 0 else OK), threshold
    return (FIRING if _at_or_above(value, threshold, money) else OK), threshold


def _burn_rate_jump(comp: Computation, as_of: datetime, pct: float, cur: str) -> list[dict]:
    covered = _covered_days(comp, as_of)
    daily = (
        comp.money.lazy().filter((pl.col("dest") == "owner") & pl.col("tenant").is_not_null())
        .group_by("day", "tenant").agg(pl.col("amount").sum().alias("cost")).collect()
    )
    t = _trailing(daily, covered, ["tenant"], ["cost"], as_of).sort("tenant")

    def rates(r: dict) -> tuple[float, float] | str:
        if r["hours_last"] < 24 or r["hours_prior"] < 24:
            return (f"needs 24 h of data and at least a day before it (has {r['hours_last']:g} h and "
                    f"{r['hours_prior']:g} h)")
        return r["cost_last"] / r["hours_last"], r["cost_prior"] / r["hours_prior"]

    return _jumps(t, "burn_rate_jump", "tenant", f"{cur}/h", rates, pct, money=True, digits=2)


def _unit_cost_jump(comp: Computation, as_of: datetime, pct: float, cur: str) -> list[dict]:
    covered = _covered_days(comp, as_of)
    daily = model_trend(comp.money_before_recharge, comp.seg, comp.request_summary, comp.request_hours).select(
        "model", "day", "cost", "tokens")
    t = _trailing(daily.with_columns(pl.col("tokens").cast(pl.Float64)), covered, ["model"], ["cost", "tokens"],
                  as_of).sort("model")

    def unit_costs(r: dict) -> tuple[float, float] | str:
        if not (r["tokens_last"] > 0 and r["tokens_prior"] > 0):
            return "no tokens in the last 24 h or the days before: $/1M tokens undefined"
        return r["cost_last"] / r["tokens_last"] * 1e6, r["cost_prior"] / r["tokens_prior"] * 1e6

    return _jumps(t, "model_cost_per_million_up", "model", f"{cur}/1M tokens", unit_costs, pct, money=False, digits=3)


def _jumps(t: pl.DataFrame, rule: str, key: str, unit: str, figures, pct: float, money: bool, digits: int
           ) -> list[dict]:
    """One check per `key` of "the last 24 h up `pct` % on the days before"; `figures(row)` gives
    (last, prior) or the reason they are unknown."""
    out = []
    for r in t.iter_rows(named=True):
        base = {"rule": rule, "subject": f"{key} {r[key]}", key: r[key], "unit": unit}
        got = figures(r)
        if isinstance(got, str):
            out.append({**base, "state": UNKNOWN, "message": got})
            continue
        last, prior = got
        state, threshold = _jump(last, prior, pct, money)
        out.append({**base, "state": state, "value": last, "threshold": threshold, "message": (
            f"last 24 h {last:,.{digits}f} {unit} vs {prior:,.{digits}f} over the {r['hours_prior'] / 24:g} days "
            f"before (alert at +{pct:g} %: {threshold:,.{digits}f})")})
    return out


def _pool_idle(comp: Computation, as_of: datetime, pct: float, window_days: int) -> list[dict]:
    """Idle rate of each pool over the last `window_days` local days, as bounds: allocated time
    without telemetry may have been active or not, so the rate lies between
    1 - (active + uncovered) / available and 1 - active / available."""
    if not comp.ledger.has_inventory:
        return [{"rule": "pool_idle_rate", "state": UNKNOWN, "subject": "every pool", "unit": "%",
                 "message": "no inventory (or a tenant-scoped view): available capacity unknown"}]
    last = periods.local_date(as_of - timedelta(microseconds=1), comp.period.timezone)
    recent = pl.col("day").is_between(last - timedelta(days=window_days - 1), last)
    held = pl.col("allocation_id").is_not_null()
    t = (
        comp.seg.lazy().filter(recent).group_by("pool")
        .agg(
            pl.col("cap_h").sum().alias("available"),
            pl.col("active_h").sum().alias("active"),
            (pl.col("alloc_h") - pl.col("covered_h")).filter(held).clip(lower_bound=0.0).sum().alias("uncovered"),
        )
        .sort("pool").collect()
    )
    out = []
    for r in t.iter_rows(named=True):
        base = {"rule": "pool_idle_rate", "subject": f"pool {r['pool']}", "pool": r["pool"], "unit": "%",
                "threshold": pct}
        if not r["available"]:
            out.append({**base, "state": UNKNOWN, "message": "no capacity in the window"})
            continue
        high = 100 * (1 - r["active"] / r["available"])
        low = 100 * (1 - (r["active"] + r["uncovered"]) / r["available"])
        window = f"the last {window_days} days"
        if _at_or_above(low, pct, money=False):
            state = FIRING
        elif not _at_or_above(high, pct, money=False):
            state = OK
        else:
            state = UNKNOWN
        known = high - low < 1e-9
        shown = f"{high:.1f} %" if known else f"between {low:.1f} % and {high:.1f} %"
        why = "" if known else f" ({r['uncovered']:,.1f} allocated GPU-hours without telemetry)"
        out.append({**base, "state": state, "value": high if known else None, "message": (
            f"idle rate over {window} {shown}{why}; alert at {pct:g} %"
            + (": cannot tell" if state == UNKNOWN else ""))})
    return out


def _unattributed(comp: Computation, limit: float, cur: str) -> list[dict]:
    v = float(comp.money.filter(pl.col("dest") == UNATTRIBUTED)["amount"].sum())
    hit = _at_or_above(v, limit, money=True)
    return [{"rule": "unattributed_cost", "state": FIRING if hit else OK, "subject": "unattributed bucket",
             "value": v, "threshold": limit, "unit": cur,
             "message": f"{v:,.2f} {cur} of cost maps to no project over the report period (alert at {limit:,.2f})"}]


# ---------------------------------------------------------------------------------- payload


def payload_rows(frame: pl.DataFrame) -> list[dict]:
    """Rows as JSON-ready dicts: times as ISO text with Z, dates as ISO, non-finite numbers null."""
    def plain(v):
        if isinstance(v, datetime):
            return v.isoformat().replace("+00:00", "Z")
        if isinstance(v, date):
            return v.isoformat()
        if isinstance(v, float) and not math.isfinite(v):
            return None
        return v

    return [{k: plain(v) for k, v in r.items()} for r in frame.to_dicts()]


def payload(alerts: pl.DataFrame, budgets: BudgetReport, burn_rate: pl.DataFrame, comp: Computation,
            source: str | None = None) -> dict:
    """The JSON object `ailedger alerts --json` prints (docs/budgets.md, "Webhook payload")."""
    rows = payload_rows
    counts = alerts.group_by("state").len()
    n = dict(zip(counts["state"].to_list(), counts["len"].to_list()))
    return {
        "version": PAYLOAD_VERSION,
        "source": source,
        "as_of": budgets.as_of.isoformat().replace("+00:00", "Z"),
        "burn_rate_at": budgets.live_at.isoformat().replace("+00:00", "Z"),
        "currency": comp.period.currency,
        "firing": int(n.get(FIRING, 0)),
        "unknown": int(n.get(UNKNOWN, 0)),
        "checked": alerts.height,
        "alerts": rows(alerts),
        "budgets": rows(budgets.status),
        "burn_rate": rows(burn_rate),
    }
