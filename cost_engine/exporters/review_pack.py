"""The review pack: one zip for a cost review.

    summary.html                 one page: period, boundary, filters, headline totals,
                                 top tenants, idle by cause, reconciliation
    charts/spend_by_tenant.png   the Overview's charts
    charts/trend.png
    charts/idle_this_week.png
    tables/by_tenant.csv         the rankings
    tables/by_project.csv
    tables/by_model.csv

Each file says what it shows, like the page's own exports (`exports_meta`): the charts carry
the subtitle line (period and time zone, boundary, idle, recharge, filters, source, data
version), the tables are CSVs for people (the `# Label: value` context block, headers with
units, causes in words; engine names are in the pages' "CSV for machines"), and summary.html
names the rules (idle treatment, inference recharge, activity, energy) and shows its tables
with the same headers and words. Every string that comes from the data or the user is passed
through `html.escape`.
"""

from __future__ import annotations

import html
import io
import zipfile
from datetime import datetime, timezone

import plotly.graph_objects as go
import polars as pl

from .. import charts, exports_meta, labels, views
from ..engine import Computation
from . import images

CHART_FILES = {
    "spend_by_tenant": "charts/spend_by_tenant.png",
    "trend": "charts/trend.png",
    "idle_this_week": "charts/idle_this_week.png",
}
TABLE_FILES = {
    "by_tenant": "tables/by_tenant.csv",
    "by_project": "tables/by_project.csv",
    "by_model": "tables/by_model.csv",
}
TABLE_TITLES = {"by_tenant": "Tenant ranking", "by_project": "Project ranking", "by_model": "Model ranking"}
SUMMARY_FILE = "summary.html"
REVIEW_PACK_FILES = (SUMMARY_FILE, *CHART_FILES.values(), *TABLE_FILES.values())


def overview_figures(comp: Computation, filters: views.Filters | None = None, grain: str = "day"
                     ) -> dict[str, go.Figure]:
    """The Overview's charts (the page and the pack draw the same figures); the trend in
    `grain` buckets (day, week, month) with partial buckets marked."""
    from .. import period_views

    cur, tz = comp.period.currency, comp.period.timezone
    week = views.idle_this_week(comp, filters)
    return {
        "spend_by_tenant": charts.spend_by_tenant(views.top_tenants(comp, filters, 10), cur),
        "trend": charts.trend(period_views.trend_buckets(comp, filters, grain), cur, tz, grain),
        "idle_this_week": charts.idle_by_cause(
            week, "gpu_hours", f"Idle GPU-hours this week (from {views.week_start(comp):%a %d %b})", cur
        ),
    }


def ranking_tables(comp: Computation, filters: views.Filters | None = None) -> dict[str, pl.DataFrame]:
    return {
        "by_tenant": views.rankings(comp, filters, "tenant"),
        "by_project": views.rankings(comp, filters, "project"),
        "by_model": views.rankings(comp, filters, "model"),
    }


def _local(t: datetime, tz: str) -> str:
    """An instant as the dashboard shows it: wall-clock time in the period's time zone."""
    from zoneinfo import ZoneInfo

    return t.astimezone(ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M")


def _e(v: object) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def _num(v: object, digits: int = 2) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return _e(v)


def _table(frame: pl.DataFrame, columns: list[str], currency: str) -> str:
    """An HTML table as people read it: the page's headers with units, causes in words."""
    cols = [c for c in columns if c in frame.columns]
    shown = exports_meta.people_frame(frame.select(cols), currency)
    head = "".join(f"<th>{_e(c)}</th>" for c in shown.columns)
    body = []
    cols = shown.columns
    for r in shown.iter_rows(named=True):
        cells = "".join(
            f'<td class="n">{_num(r[c])}</td>' if isinstance(r[c], (int, float)) and not isinstance(r[c], bool)
            else f"<td>{_e(r[c])}</td>"
            for c in cols
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def summary_html(comp: Computation, filters: views.Filters | None = None, *, source_label: str | None = None,
                 title: str | None = None, generated: datetime | None = None, data_version: str | None = None) -> str:
    """The one-page HTML summary (no scripts; every data string escaped); `data_version`: the
    source's (audit.version_label), said beside the source."""
    p = comp.period
    cfg = comp.config
    kpis = views.kpi_cards(comp, filters)
    rank = views.rankings(comp, filters, "tenant").head(10)
    idle_rows = views.idle_by_cause(comp, filters)
    rec = views.reconciliation(comp, filters)
    when = (generated or datetime.now(timezone.utc)).strftime("%Y-%m-%d %H:%M UTC")
    cards = "".join(
        f'<div class="card"><div class="l">{_e(r["label"])}</div>'
        f'<div class="v">{_e(views.format_value(r["value"], r["unit"]))}</div>'
        f'<div class="u">{_e("" if r["unit"] == "ratio" else r["unit"])}</div>'
        f'<div class="d">{_e(r["detail"])}</div></div>'
        for r in kpis.iter_rows(named=True)
    )
    f = filters or views.NO_FILTERS
    doc_title = title or "ailedger cost review"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(doc_title)}</title>
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<style>
body{{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d1d1f;max-width:1100px}}
h1{{font-size:22px;margin:0 0 4px}} h2{{font-size:16px;margin:22px 0 8px}}
.meta{{color:#555;font-size:13px;line-height:1.5}}
.cards{{display:grid;grid-template-columns:repeat(3,1fr);gap:10px;margin-top:14px}}
.card{{border:1px solid #ddd;border-radius:8px;padding:10px}} .l{{font-size:12px;color:#555}}
.v{{font-size:22px;font-weight:600}} .u,.d{{font-size:11px;color:#777}}
table{{border-collapse:collapse;font-size:12px;width:100%}} th,td{{border-bottom:1px solid #eee;padding:4px 6px;text-align:left}}
td.n{{text-align:right;font-variant-numeric:tabular-nums}}
</style></head><body>
<h1>{_e(doc_title)}</h1>
<div class="meta">
<div><b>Period</b>: {_e(_local(p.start, p.timezone))} to {_e(_local(p.end, p.timezone))} {_e(p.timezone)} ({_e(p.currency)})</div>
<div><b>Boundary</b>: {_e(cfg.boundary.name)} ({_e(", ".join(cfg.boundary.included))})</div>
<div><b>Filters</b>: {_e(f.describe())}</div>
<div><b>Idle treatment</b>: {_e(labels.IDLE_TREATMENT.get(cfg.allocation.idle, cfg.allocation.idle))} ({_e(cfg.allocation.idle)});
<b>inference recharge</b>: {_e(labels.RECHARGE.get(cfg.allocation.inference_recharge, cfg.allocation.inference_recharge))} ({_e(cfg.allocation.inference_recharge)});
<b>activity</b>: {_e(cfg.activity.mode)} {_e(cfg.activity.threshold_pct)} %;
<b>PUE</b> {_e(cfg.energy.pue)}, <b>server overhead</b> {_e(cfg.energy.server_overhead)}</div>
<div><b>Source</b>: {_e(source_label or "")} · data version {_e(data_version or "(unknown)")} · generated {_e(when)}</div>
</div>
<div class="cards">{cards}</div>
<h2>Spend by tenant (top 10)</h2>
{_table(rank, ["tenant", "cost", "allocated_gpu_hours", "active_gpu_hours", "tokens", "cost_per_million_tokens"], p.currency)}
<h2>Idle by cause</h2>
{_table(idle_rows, ["kind", "cause", "gpu_hours", "energy_kwh_gpu", "cost"], p.currency)}
<h2>Reconciliation ({_e(p.currency)})</h2>
{_table(rec, list(rec.columns), p.currency)}
<p class="meta">Charts: {" ".join(_e(v) for v in CHART_FILES.values())}. Tables: {" ".join(_e(v) for v in TABLE_FILES.values())}.</p>
</body></html>
"""


def build_review_pack(comp: Computation, filters: views.Filters | None = None, *, source_label: str | None = None,
                      title: str | None = None, generated: datetime | None = None,
                      data_version: str | None = None) -> bytes:
    """The zip bytes (see the module doc for its files). Raises images.ExportError when the
    charts cannot be rendered (no Chromium)."""
    ctx = exports_meta.context_of(comp, filters, source=source_label or "", data_version=data_version or "")
    figs = overview_figures(comp, filters)
    names = list(CHART_FILES)
    # The single exports' subtitle: a PNG read on its own names its period and rules.
    pngs = images.render([exports_meta.titled(figs[n], None, ctx) for n in names], "png", scale=1.5)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(SUMMARY_FILE, summary_html(comp, filters, source_label=source_label, title=title,
                                              generated=generated, data_version=data_version))
        for n, data in zip(names, pngs):
            z.writestr(CHART_FILES[n], data)
        for n, frame in ranking_tables(comp, filters).items():
            # Through csv_guard (exports_meta.csv_for_people writes with csv_guard.write_csv).
            z.writestr(TABLE_FILES[n], exports_meta.csv_for_people(frame, ctx, TABLE_TITLES[n], now=generated))
    return buf.getvalue()
