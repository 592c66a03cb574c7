"""One guard for every CSV the project writes: a text cell that a spreadsheet would run as a
formula gets a leading apostrophe, and the bundle reader takes it off again.

A cell starting with `=`, `+`, `-`, `@`, a tab or a carriage return is a formula to Excel,
LibreOffice and Google Sheets (`=HYPERLINK(...)`, `+cmd|...`, `@SUM(...)`): an owner, model or
job name from a source system must never run on a reviewer's machine. The apostrophe makes
the spreadsheet show the text as it is.

The escape is exact both ways, so a bundle the project writes (an import, the alias table, the
collector) reads back to the same names: a cell is written with one more leading apostrophe
when it is a run of apostrophes (possibly none) followed by one of those characters, and the
reader takes exactly one off such cells. Every other cell is written and read unchanged.
"""

from __future__ import annotations

import re

import polars as pl

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# Every character some reader ends a line at (str.splitlines' set): CR, LF, VT, FF, FS, GS,
# RS, NEL, LINE SEPARATOR, PARAGRAPH SEPARATOR. A `# ...` comment line holding one would end
# there, and the rest would be a row of the table: a formula row (issue 38).
_LINE_BREAKS = re.compile("[\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]+")
# A run of apostrophes, then a formula character: what the guard prefixes and the reader strips.
_GUARDED = "^'*[=+\\-@\\t\\r]"
_ESCAPED = "^'('*[=+\\-@\\t\\r])"
_GUARDED_RE = re.compile(_GUARDED)
_ESCAPED_RE = re.compile(_ESCAPED, re.DOTALL)


def guard_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with its text cells escaped for a CSV file (other columns untouched)."""
    return frame.with_columns(
        pl.when(pl.col(c).str.contains(_GUARDED).fill_null(False))
        .then(pl.lit("'") + pl.col(c))
        .otherwise(pl.col(c))
        .alias(c)
        for c, dtype in frame.schema.items()
        if dtype == pl.String
    )


def write_csv(frame: pl.DataFrame, target=None, **kwargs):
    """`frame.write_csv(target, **kwargs)` with the text cells escaped: the one CSV writer."""
    return guard_frame(frame).write_csv(target, **kwargs)


def guard_cell(value: object) -> object:
    """One cell for Python's csv module: text escaped like guard_frame, anything else as it is."""
    if isinstance(value, str) and _GUARDED_RE.match(value):
        return "'" + value
    return value


def unguard_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """A CSV file's text columns as written before the guard (reader side).

    Only columns holding a cell that starts with an apostrophe are touched (one cheap scan
    each), so a large telemetry file costs next to nothing.
    """
    todo = [
        c for c, dtype in frame.schema.items()
        if dtype == pl.String and frame.get_column(c).str.starts_with("'").any()
    ]
    if not todo:
        return frame
    return frame.with_columns(pl.col(c).str.replace(_ESCAPED, "${1}") for c in todo)


def unguard_cell(value: str) -> str:
    """One text cell as written before the guard (Python's csv module)."""
    return _ESCAPED_RE.sub(r"\1", value, count=1)


def one_line(text: str) -> str:
    """The text with every run of line breaks folded to one space: a comment line stays one line."""
    return _LINE_BREAKS.sub(" ", text)


def is_guarded(value: str) -> bool:
    """True when a CSV cell as written is safe: it does not start with a formula character."""
    return not value.startswith(FORMULA_START)
