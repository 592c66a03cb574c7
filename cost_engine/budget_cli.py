"""`ailedger budgets` and `ailedger alerts`: budget status, forecasts and burn rates, and the alert
checks of the config's [alerts] for cron and CI (exit 1 when any fires). See docs/budgets.md.

Registered on the main group in cli.py; exit codes: 0 fine, 1 an alert fires (alerts only),
2 bad input.
"""

from __future__ import annotations

import json
import sys
from datetime import date, datetime, timezone

import click

from . import alerts as alert_rules
from . import api, budgets, burn, periods, terminal
from .config import ConfigError


def _fail(msg: str) -> None:
    terminal.echo(f"error: {msg}", err=True)
    sys.exit(2)


def _money(v) -> str:
    return "-" if v is None else f"{v:,.2f}"


def _as_of(text: str | None, tz: str) -> datetime | None:
    """--as-of: a date (its local midnight in the period's time zone) or a time with an offset."""
    if text is None:
        return None
    try:
        if len(text) == 10:
            return periods.midnight(date.fromisoformat(text), tz)
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        _fail(f"--as-of {text!r} is not a date (YYYY-MM-DD) or an ISO time with an offset")
    if t.tzinfo is None:
        _fail(f"--as-of {text!r} needs an offset, e.g. {text}Z")
    return t.astimezone(timezone.utc)


def _evaluate(source: str, config: str | None, as_of: str | None):
    from .bundle import BundleError

    try:
        comp = api.run(source, config)
    except (ConfigError, BundleError, FileNotFoundError, ValueError) as exc:
        _fail(str(exc))
    report = budgets.evaluate(comp, as_of=_as_of(as_of, comp.period.timezone), now=datetime.now(timezone.utc))
    return comp, report, burn.burn_rate(comp, report.live_at)


_SOURCE = click.argument("source", type=click.Path(exists=True))
_CONFIG = click.option("--config", "config", type=click.Path(exists=True, dir_okay=False),
                       help="TOML config (default: ailedger.toml in the bundle or beside the store).")
_AS_OF = click.option("--as-of", "as_of", help="Report time: YYYY-MM-DD (local midnight) or an ISO time with "
                      "offset; default the end of the data, or now when the period runs past it.")


@click.command("budgets")
@_SOURCE
@_CONFIG
@_AS_OF
@click.option("--json", "as_json", is_flag=True, help="Print status, day-by-day burn-down and burn rates as JSON.")
def budgets_cmd(source: str, config: str | None, as_of: str | None, as_json: bool) -> None:
    """Budgets of a bundle or store: booked, committed, forecast to the span's end, and burn rate now."""
    comp, report, rate = _evaluate(source, config, as_of)
    if as_json:
        data = alert_rules.payload(alert_rules.evaluate(comp, report), report, rate, comp, source)
        out = {k: data[k] for k in ("version", "source", "as_of", "burn_rate_at", "currency", "budgets", "burn_rate")}
        out["path"] = alert_rules.payload_rows(report.path)
        out["inactive"] = report.inactive
        terminal.echo(json.dumps(out, indent=2))
        return
    terminal.echo(render_budgets(report, rate, comp.period.timezone, comp.period.currency))


def render_budgets(report: budgets.BudgetReport, rate, tz: str, cur: str) -> str:
    lines = [f"budgets as of {report.as_of:%Y-%m-%d %H:%M}Z ({tz}, {cur})"]
    if report.status.height == 0:
        lines.append("  no budget in force" + (f" ({len(report.inactive)} not in force)" if report.inactive else ""))
    for r in map(terminal.safe_tree, report.status.iter_rows(named=True)):  # names from the data: inert, one line
        shown = budgets.status_text(r["status"], r["note"])
        if r["window_start"] is None:  # a row the budgets file had but validation refused
            lines.append(f"  {r['budget_id'] or '(no budget_id)'}  [{shown}]")
            continue
        span = f"{periods.local_date(r['window_start'], tz)}..{budgets.report_day(r['window_end'], tz)}"
        lines.append(f"  {r['budget_id']}  {r['level']} {r['owner']}  {r['period_kind']} {span}  [{shown}]")
        lines.append(
            f"    budget {_money(r['amount'])}  booked {_money(r['booked'])}  committed {_money(r['committed'])}  "
            f"forecast {_money(r['forecast'])}  projected {_money(r['projected'])}"
        )
        lines.append(
            f"    80 % {_money(r['lo80'])} .. {_money(r['hi80'])}   95 % {_money(r['lo95'])} .. {_money(r['hi95'])}   "
            f"model: {r['model']}, {r['history_days']} days of history, {r['days_left']:.1f} days to forecast"
        )
        if r["note"] and r["status"] != budgets.UNKNOWN:
            lines.append(f"    note: {r['note']}")
    if report.inactive:
        lines.append("  not in force: " + ", ".join(map(terminal.safe, report.inactive)))
    lines.append(f"burn rate now ({cur}/h, from the allocations open at {report.live_at:%Y-%m-%d %H:%M}Z)")
    if rate.height == 0:
        lines.append("  nothing allocated")
    for r in map(terminal.safe_tree, rate.iter_rows(named=True)):
        lines.append(f"  {r['tenant']:<24} {_money(r['cost_per_hour']):>12}   {r['gpus']:.2f} GPUs   {r['basis']}")
    return "\n".join(lines)


@click.command("alerts")
@_SOURCE
@_CONFIG
@_AS_OF
@click.option("--json", "as_json", is_flag=True, help="Print the webhook payload (docs/budgets.md).")
@click.option("--all", "show_all", is_flag=True, help="Also list the checks that pass.")
def alerts_cmd(source: str, config: str | None, as_of: str | None, as_json: bool, show_all: bool) -> None:
    """Check the [alerts] rules: print what fires (and what cannot be told); exit 1 when any fires."""
    comp, report, rate = _evaluate(source, config, as_of)
    found = alert_rules.evaluate(comp, report)
    data = alert_rules.payload(found, report, rate, comp, source)
    if as_json:
        terminal.echo(json.dumps(data, indent=2))
    else:
        terminal.echo(f"ailedger alerts as of {data['as_of']} ({data['currency']})")
        for r in map(terminal.safe_tree, found.iter_rows(named=True)):
            if r["state"] != alert_rules.OK or show_all:
                terminal.echo(f"  {r['state'].upper():<8} {r['rule']:<26} {r['subject']}: {r['message']}")
        terminal.echo(f"{data['firing']} firing, {data['unknown']} unknown, {data['checked']} checked")
    sys.exit(1 if data["firing"] else 0)
