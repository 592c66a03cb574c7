"""The `diff` command: why the cost changed between two periods, as effects that add up to the change."""

from __future__ import annotations

import math
import sys
from datetime import datetime
from zoneinfo import ZoneInfo

import click
import polars as pl

from . import compare, diff, jsonout, terminal

def _fail(msg: str) -> None:
    terminal.echo(f"error: {msg}", err=True)
    sys.exit(2)


def _money(v: float | None, sign: bool = False) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "unknown"
    return f"{v:+,.2f}" if sign else f"{v:,.2f}"


def _when(t: datetime, tz: str) -> str:
    return t.astimezone(ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M")


def render(d: diff.Diff, spans: tuple[compare.Span, compare.Span], tz: str, currency: str, source: str,
           top: int = 10) -> str:
    """The terminal summary: both totals, each effect with who carries it, the owners, the notes."""
    (b0, b1), (n0, n1) = spans
    change_pct = f" ({d.change / d.base_total:+.1%})" if d.base_total else ""
    lines = [
        f"ailedger diff  {terminal.safe(source)}  by {d.by}  ({tz}, {terminal.safe(currency)})",
        f"base    {_when(b0, tz)} .. {_when(b1, tz)}   total {_money(d.base_total):>14}",
        f"period  {_when(n0, tz)} .. {_when(n1, tz)}   total {_money(d.new_total):>14}",
        f"change  {_money(d.change, True)}{change_pct}   residual {d.residual:.2e} (the effects add up to the change)",
        f"method  {d.method}",
        "",
    ]
    summary = compare.effect_summary(d)
    width = max(len(lab) for lab in summary["label"].to_list())
    lines.append(f"{'effect':<{width}}  {'change':>14}   mainly")
    lines.append(f"{'base total':<{width}}  {_money(d.base_total):>14}")
    for r in summary.iter_rows(named=True):
        if r["value"] is not None and abs(r["value"]) < 0.005 and not r["note"]:
            continue
        lines.append(f"{r['label']:<{width}}  {_money(r['value'], True):>14}   {terminal.safe(r['mainly'])}".rstrip())
    lines.append(f"{'new total':<{width}}  {_money(d.new_total):>14}")
    lines += ["", f"by {d.by} (largest changes first)"]
    keys = [k for k in d.effects["effect"].to_list()]
    names = d.owners.select(pl.when(pl.col("kind") == "owner").then(pl.col("key"))
                            .otherwise(pl.lit("(") + pl.col("kind") + pl.lit(")")).alias("n"))["n"].to_list()
    names = [terminal.safe(n) for n in names[:top]]  # owner keys from the data: one inert line each
    kw = max([len(n) for n in names] + [len(d.by)])
    lines.append(f"  {d.by:<{kw}} {'base':>14} {'period':>14} {'change':>14}  status  largest effects")
    for name, r in zip(names[:top], d.owners.head(top).iter_rows(named=True)):
        effects = sorted(((k, r[k]) for k in keys if r[k] is not None and abs(r[k]) >= 0.005),
                         key=lambda kv: -abs(kv[1]))[:3]
        lines.append(f"  {name:<{kw}} {_money(r['base_cost']):>14} {_money(r['new_cost']):>14} "
                     f"{_money(r['change'], True):>14}  {r['status']:<6}  "
                     + ", ".join(f"{k} {_money(v, True)}" for k, v in effects))
    if d.owners.height > top:
        lines.append(f"  ... {d.owners.height - top} more (--top, or --json)")
    if d.notes:
        lines += ["", "notes"] + [f"  {terminal.safe(n)}" for n in d.notes]
    return "\n".join(lines)


def render_owner(d: diff.Diff, key: str, pages: dict[str, tuple], limit: int, within: str | None = None) -> str:
    """One owner: its effects, the elements (pool, category, model, token kind) behind each, and
    the records of both periods they were computed from."""
    row = d.owner(key)
    if row is None:
        return f"no {d.by} {terminal.safe(key)!r} in either period"
    lines = ["", f"{d.by} {terminal.safe(key)}: {_money(row['base_cost'])} -> {_money(row['new_cost'])} "
                 f"({_money(row['change'], True)}, {row['status']})"]
    for e in d.effects["effect"].to_list():
        v = row.get(e)
        if v is None and e == "efficiency" and row["base_allocated_gpu_hours"] and row["new_allocated_gpu_hours"]:
            lines.append(f"  {compare.effect_label(e, d.by):<58} unknown (no activity measured in one period)")
            continue
        if v is None or abs(v) < 0.005:
            continue
        lines.append(f"  {compare.effect_label(e, d.by):<58} {_money(v, True):>12}")
        for el in diff.top_elements(d, e, 3, key=key).iter_rows(named=True):
            lines.append(f"      {terminal.safe(diff.describe_element(el)):<54} {_money(el[e], True):>12}")
    scopes = owner_scopes(d, key)
    if scopes and within is None and pages:
        lines.append("  narrow the records with --within: " + ", ".join(f"'{terminal.safe(s)}'" for s in list(scopes)[:6])
                     + (" …" if len(scopes) > 6 else ""))
    for table, (pb, pn) in pages.items():
        where = f" within {terminal.safe(within)}" if within else ""
        lines.append(f"  {table} behind it{where}: {pb.total:,} in the base period, {pn.total:,} in the period")
        for label, p in (("base", pb), ("period", pn)):
            ids = p.rows[p.rows.columns[0]].head(limit).to_list() if p.rows.height else []
            if ids:
                lines.append(f"    {label}: " + ", ".join(terminal.safe(i) for i in ids) + (" …" if p.total > len(ids) else ""))
    return "\n".join(lines)


@click.command("diff")
@click.argument("source", type=click.Path(exists=True))
@click.option("--base", "base", required=True, metavar="START..END",
              help="The base period: YYYY-MM-DD..YYYY-MM-DD (whole days, both included), ISO timestamps "
                   "with an offset (half-open), or a month YYYY-MM. Days are cut in the config's time zone.")
@click.option("--period", "period", required=True, metavar="START..END", help="The period to explain (same forms).")
@click.option("--by", "by", type=click.Choice(diff.BY), default="tenant", show_default=True,
              help="Owners the change is split over (and new/gone are counted in).")
@click.option("--config", "config", type=click.Path(exists=True, dir_okay=False),
              help="TOML config (default: ailedger.toml in the bundle / beside the store).")
@click.option("--json", "as_json", is_flag=True, help="Print the decomposition as JSON.")
@click.option("--owner", "owner", help="Explain one owner: its effects, what carries them, the records behind them.")
@click.option("--within", "within", metavar="SCOPE",
              help="With --owner: only the records of one pool and accelerator or one model carrying its effects "
                   "(listed by --owner; e.g. 'model llama-3.1-70b', 'pool h100-train · H100-SXM-80GB').")
@click.option("--top", default=10, show_default=True, help="Owners listed in the summary.")
@click.option("--limit", default=5, show_default=True, help="Record ids listed per table with --owner.")
@click.option("--chart", "chart", type=click.Path(dir_okay=False),
              help="Write the waterfall chart to this file (.html, .png or .svg).")
def diff_cmd(source: str, base: str, period: str, by: str, config: str | None, as_json: bool, owner: str | None,
             within: str | None, top: int, limit: int, chart: str | None) -> None:
    """Why the cost changed between two periods: effects that add up exactly to the change."""
    from . import api
    from .bundle import BundleError
    from .config import ConfigError, load_config

    if within is not None and owner is None:
        _fail("--within narrows an owner's records: give --owner too")
    if chart is not None and chart.rsplit(".", 1)[-1].lower() not in ("html", "png", "svg"):
        _fail(f"--chart {chart}: use a .html, .png or .svg file")
    try:
        cfg = load_config(api.find_config(source, config))
    except ConfigError as exc:
        _fail(str(exc))
    try:
        spans = compare.parse_spans(cfg, base, period)
    except ValueError as exc:
        _fail(f"{'--base' if _bad(cfg, base) else '--period'}: {exc}")
    try:
        comp_base, comp_new = compare.run_periods(source, cfg, *spans)
    except (ConfigError, BundleError, FileNotFoundError, ValueError) as exc:
        _fail(str(exc))
    d = compare.compare_periods(comp_base, comp_new, by=by)
    tz, cur = comp_new.period.timezone, comp_new.period.currency
    pages: dict[str, tuple] = {}
    if owner is not None:
        if d.owner(owner) is None:
            _fail(f"no {by} {owner!r} in either period")
        row = d.owner(owner)
        tables = [t for t in ("allocations", "requests", "costs")
                  if any(t in diff.EFFECT[e].records and (row.get(e) or 0) != 0 for e in d.effects["effect"].to_list())]
        scope = None
        if within is not None:
            scopes = owner_scopes(d, owner)
            if within not in scopes:
                _fail(f"--within {within!r}: none of {owner}'s effects sits there; one of: "
                      + ", ".join(repr(s) for s in scopes))
            scope = scopes[within]
        for t in tables:
            pages[t] = compare.compare_records(comp_base, comp_new, None, source, by=by, key=owner, table=t,
                                               page_size=max(limit, 1), scope=scope)
    if chart is not None:
        _write_chart(d, chart, cur, spans, tz, source)
    if as_json:
        out = d.to_dict()
        out["base"] = {"start": spans[0][0].isoformat(), "end": spans[0][1].isoformat()}
        out["period"] = {"start": spans[1][0].isoformat(), "end": spans[1][1].isoformat(), "timezone": tz,
                         "currency": cur}
        if owner is not None:
            out["within"] = within
            out["records"] = {t: {"base": {"total": pb.total, "ids": pb.rows[pb.rows.columns[0]].to_list()},
                                  "period": {"total": pn.total, "ids": pn.rows[pn.rows.columns[0]].to_list()}}
                              for t, (pb, pn) in pages.items()}
        try:
            terminal.echo(jsonout.dumps(out, indent=2, default=str))
        except jsonout.NonFiniteError as exc:
            _fail(str(exc))
        return
    terminal.echo(render(d, spans, tz, cur, source, top))
    if owner is not None:
        terminal.echo(render_owner(d, owner, pages, limit, within))


def owner_scopes(d: diff.Diff, owner: str) -> dict[str, dict]:
    """Every place (pool and accelerator, or model) carrying one of the owner's effects, by label."""
    out: dict[str, dict] = {}
    for e in d.effects["effect"].to_list():
        for r in compare.effect_scopes(d, owner, e).iter_rows(named=True):
            out.setdefault(r["scope"], r)
    return out


def _bad(cfg, text: str) -> bool:
    try:
        diff.parse_span(text, cfg.period.timezone)
    except ValueError:
        return True
    return False


def _write_chart(d: diff.Diff, path: str, currency: str, spans, tz: str, source: str) -> None:
    from . import audit, charts, exporters

    (b0, b1), (n0, n1) = spans
    fig = charts.waterfall(compare.effect_summary(d), d.base_total, d.new_total, currency,
                           f"base {_when(b0, tz)[:10]}", f"period {_when(n0, tz)[:10]}")
    version = audit.version_of(source)
    if version is not None:  # a chart file says which data it shows (docs/close.md)
        fig.update_layout(title_text=f"{fig.layout.title.text or 'Why the cost changed'} · data version {version}")
    suffix = path.rsplit(".", 1)[-1].lower()
    try:
        if suffix == "html":
            data = exporters.to_html(fig, title="Why the cost changed").encode("utf-8")
        else:
            data = exporters.to_png(fig) if suffix == "png" else exporters.to_svg(fig)
    except exporters.ExportError as exc:
        _fail(f"--chart {path}: {exc}")
    with open(path, "wb") as fh:
        fh.write(data)
