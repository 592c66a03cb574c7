"""Exports: tables as CSV / Parquet, charts as PNG / SVG / HTML, and the review pack.

    from cost_engine import exporters
    exporters.table_csv(frame) -> bytes       exporters.table_parquet(frame) -> bytes
    exporters.to_png(fig) / to_svg(fig) -> bytes   exporters.to_html(fig) -> str
    exporters.review_pack.build_review_pack(comp, filters, ...) -> bytes (zip)
"""

from __future__ import annotations

import io
import re

import polars as pl

from .. import csv_guard
from .images import ExportError, available, chromium_path, render, to_html, to_png, to_svg, unavailable_reason

__all__ = [
    "ExportError", "available", "chromium_path", "render", "to_html", "to_png", "to_svg", "unavailable_reason",
    "flat_table", "table_csv", "table_parquet", "safe_name",
]


def flat_table(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with list / struct columns joined to text (CSV cannot hold nested values)."""
    out = []
    for name, dtype in frame.schema.items():
        col = pl.col(name)
        if isinstance(dtype, (pl.List, pl.Array)):
            out.append(col.cast(pl.List(pl.String)).list.join(", ").alias(name))
        elif isinstance(dtype, pl.Struct):
            out.append(col.struct.json_encode().alias(name))
        else:
            out.append(col)
    return frame.select(out)


def table_csv(frame: pl.DataFrame, *, neutralise_formulas: bool = True, **write_options) -> bytes:
    """CSV bytes (UTF-8, header row). Text cells that a spreadsheet would run as a formula
    (starting with = + - @, tab or CR) get a leading apostrophe (cost_engine.csv_guard, the
    guard every CSV writer of the project uses) unless `neutralise_formulas=False`.
    `write_options` go to `DataFrame.write_csv` (e.g. `datetime_format`, `float_scientific`)."""
    f = flat_table(frame)
    if not neutralise_formulas:
        return f.write_csv(**write_options).encode("utf-8")  # csv-guard: opt-out (the caller asked for raw cells)
    return csv_guard.write_csv(f, **write_options).encode("utf-8")


def table_parquet(frame: pl.DataFrame) -> bytes:
    buf = io.BytesIO()
    frame.write_parquet(buf)
    return buf.getvalue()


def safe_name(text: str, default: str = "export") -> str:
    """A file-name-safe slug of a label."""
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")
    return s[:80] or default
