"""What an exported chart or table says about itself: period with its time zone, boundary,
idle treatment, recharge, filters, source and data version, as a chart subtitle, a CSV comment
block, Parquet metadata and a file name, so a file read on its own is not mistaken for
another view (a `rental` ranking is never named like a `fully_loaded` one).

    ctx = exports_meta.context_of(comp, filters, source="ledger.duckdb", data_version="3f2a9c1d")
    exports_meta.titled(fig, "Project ranking by cost", ctx)      -> figure with title + subtitle
    exports_meta.file_name("project-ranking", ctx, "png")          -> project-ranking_2026-10-06_2026-10-11_rental.png
        (idle proportional, recharge requests: ..._rental_idle-proportional_recharge-requests.png)
    exports_meta.csv_for_people(frame, ctx, "Project ranking")     -> "# ..." lines, human headers with units
    exports_meta.parquet_with_context(frame, ctx, "Project ranking") -> Parquet, context in its metadata
"""

from __future__ import annotations

import copy
import io
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import plotly.graph_objects as go
import polars as pl

from . import __version__, csv_guard, labels
from .charts import label as chart_text
from .engine import Computation
from .views import Filters

SUBTITLE_SIZE = 12


@dataclass(frozen=True)
class ExportContext:
    """The view an export was taken from."""

    start: datetime  # UTC, the computation's period
    end: datetime
    timezone: str
    currency: str
    boundary: str
    categories: tuple[str, ...]
    idle: str
    recharge: str
    filters: Filters = field(default_factory=Filters)
    source: str = ""
    data_version: str = ""
    grain: str | None = None

    def _local(self, t: datetime) -> datetime:
        from zoneinfo import ZoneInfo

        return t.astimezone(ZoneInfo(self.timezone))

    @property
    def first_day(self):
        return self._local(self.start).date()

    @property
    def last_day(self):
        return self._local(self.end - timedelta(microseconds=1)).date()

    @property
    def whole_days(self) -> bool:
        s, e = self._local(self.start), self._local(self.end)
        return (s.hour, s.minute, s.second) == (0, 0, 0) and (e.hour, e.minute, e.second) == (0, 0, 0)

    def period_text(self) -> str:
        """"2026-10-06 to 2026-10-11, whole days in Europe/Berlin" (or times when not whole days)."""
        if self.whole_days:
            span = str(self.first_day) if self.first_day == self.last_day else f"{self.first_day} to {self.last_day}"
            return f"{span}, whole days in {self.timezone}"
        fmt = "%Y-%m-%d %H:%M"
        return f"{self._local(self.start):{fmt}} to {self._local(self.end):{fmt}} {self.timezone}"

    def boundary_text(self) -> str:
        cats = ", ".join(self.categories)
        return f"{self.boundary} ({cats})" if self.boundary != "fully_loaded" else f"{self.boundary} (every category)"

    def filters_text(self) -> str:
        return "no filters" if self.filters.empty else self.filters.describe()

    def subtitle(self) -> str:
        """One line: period, boundary, idle treatment, recharge, filters, source, data version."""
        parts = [self.period_text(), f"boundary {self.boundary}", f"idle {self.idle}",
                 f"recharge {self.recharge}", self.filters_text()]
        if self.source:
            parts.append(f"source {self.source}")
        if self.data_version:
            parts.append(f"data {self.data_version}")
        return " · ".join(parts)

    def lines(self) -> list[tuple[str, str]]:
        """The context as (label, text) pairs: the CSV comment block and the Parquet metadata."""
        return [
            ("Period", self.period_text()),
            ("Boundary", self.boundary_text()),
            ("Idle treatment", self.idle),
            ("Inference recharge", self.recharge),
            ("Filters", self.filters_text()),
            ("Source", self.source or "(not named)"),
            ("Data version", self.data_version or "(unknown)"),
            ("Currency", self.currency),
        ]


def context_of(comp: Computation, filters: Filters | None = None, *, source: str = "", data_version: str = "",
               grain: str | None = None) -> ExportContext:
    """The export context of a computation (its period and rules) under filters."""
    p, cfg = comp.period, comp.config
    return ExportContext(
        start=p.start, end=p.end, timezone=p.timezone, currency=p.currency, boundary=cfg.boundary.name,
        categories=tuple(cfg.boundary.included), idle=cfg.allocation.idle,
        recharge=cfg.allocation.inference_recharge, filters=filters or Filters(), source=source,
        data_version=data_version, grain=grain,
    )


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")[:80] or "export"


# The rules a file name leaves unsaid (the config's defaults); any other value is in the name.
NAME_DEFAULTS = {"idle": "separate", "recharge": "tokens"}


def file_stem(name: str, ctx: ExportContext) -> str:
    """`name_<first day>_<last day>_<boundary>[_idle-<idle>][_recharge-<recharge>][_filtered]`,
    idle and recharge named when they are not the defaults (separate, tokens): two views never
    share a file name, and the common one stays short."""
    parts = [_slug(name), str(ctx.first_day), str(ctx.last_day), ctx.boundary]
    for key, default in NAME_DEFAULTS.items():
        value = getattr(ctx, key)
        if value != default:
            parts.append(f"{key}-{_slug(value)}")
    if not ctx.filters.empty:
        parts.append("filtered")
    return "_".join(parts)


def file_name(name: str, ctx: ExportContext, ext: str) -> str:
    return f"{file_stem(name, ctx)}.{ext}"


def titled(fig: go.Figure, title: str | None, ctx: ExportContext | str) -> go.Figure:
    """A copy of the figure with a title (its own when `title` is None) and the context subtitle
    (an ExportContext's line, or a text for exports that are not a ledger view: a scenario).

    A given title and the subtitle are plain text, escaped like every name on a chart
    (charts.label): a filter value or a source name `<a href=...>` is shown, never a live link
    in the SVG or HTML. The figure's own title is chart text already (its builder escaped it)."""
    out = go.Figure(copy.deepcopy(fig.to_dict()))
    text = chart_text(title) if title else (out.layout.title.text or "")
    top = (out.layout.margin.t or 60) + 28
    sub = chart_text(ctx if isinstance(ctx, str) else ctx.subtitle())
    out.update_layout(
        title={"text": text, "subtitle": {"text": sub, "font": {"size": SUBTITLE_SIZE, "color": "#555"}},
               "x": 0.01, "xanchor": "left", "y": 0.98, "yanchor": "top", "yref": "container"},
        margin={"t": top},
    )
    return out


def people_frame(frame: pl.DataFrame, currency: str) -> pl.DataFrame:
    """The table as people read it: headers with units, ratios as percent, causes in words,
    nested values joined (what the screen shows and the human CSV holds)."""
    from .exporters import flat_table

    f = labels.readable_values(flat_table(frame))
    ratios = [c for c in f.columns if labels.unit_of(c) == "ratio" and f.schema[c].is_numeric()]
    if ratios:
        f = f.with_columns((pl.col(c) * 100).alias(c) for c in ratios)
    names: dict[str, str] = {}
    for c in f.columns:
        label = labels.column(c, currency)
        while label in names.values():  # two engine names with one label: keep both columns
            label += " "
        names[c] = label
    return f.rename(names)


def comment_block(ctx: ExportContext | list[tuple[str, str]], title: str, *, now: datetime | None = None) -> str:
    """`# Label: value` lines: the table's title, the view (or the given pairs), when and by what."""
    when = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%d %H:%M UTC")
    lines = ctx if isinstance(ctx, list) else ctx.lines()
    rows = [("Table", title), *lines, ("Exported", f"{when} by ailedger {__version__}")]
    return "".join(f"# {csv_guard.one_line(k)}: {csv_guard.one_line(v)}\n" for k, v in rows)


def csv_for_people(frame: pl.DataFrame, ctx: ExportContext | list[tuple[str, str]], title: str, *,
                   now: datetime | None = None, currency: str = "USD") -> bytes:
    """`# Label: value` lines (the context), then the table with human headers and units
    (ratios in percent), through the project's CSV guard."""
    body = csv_guard.write_csv(people_frame(frame, currency if isinstance(ctx, list) else ctx.currency))
    return (comment_block(ctx, title, now=now) + body).encode("utf-8")


def csv_for_machines(frame: pl.DataFrame) -> bytes:
    """The table as computed: engine column names, ratios as fractions, no comment lines."""
    from .exporters import table_csv

    return table_csv(frame)


def parquet_with_context(frame: pl.DataFrame, ctx: ExportContext | list[tuple[str, str]], title: str) -> bytes:
    """Parquet as computed (engine names), the context in the file's key-value metadata."""
    lines = ctx if isinstance(ctx, list) else ctx.lines()
    meta = {"ailedger.table": title, "ailedger.context": json.dumps(dict(lines))}
    buf = io.BytesIO()
    frame.write_parquet(buf, metadata=meta)
    return buf.getvalue()
