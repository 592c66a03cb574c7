"""Names are compared in Unicode NFC: "café" typed on one system and "cafe" + a combining accent
exported by another are one owner, project, card or model, never two that look the same.

The bundle reader brings every text value of a contract column to NFC (and notes how many it
changed); the access config's user and tenant names get the same treatment, so a grant
matches the data whichever form either was written in.
"""

from __future__ import annotations

import unicodedata

import polars as pl


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def normalise_columns(frame: pl.DataFrame, columns: list[str]) -> tuple[pl.DataFrame, int]:
    """The frame with these text columns in NFC, and how many rows had a value changed.

    Only columns holding a non-ASCII value are normalised (ASCII is NFC already): a length
    comparison finds them far faster than the normalisation itself would run.
    """
    todo = [
        c for c in columns
        if c in frame.columns and frame.schema[c] == pl.String
        and frame.select((pl.col(c).str.len_bytes() != pl.col(c).str.len_chars()).any()).item()
    ]
    if not todo:
        return frame, 0
    changed = pl.any_horizontal((pl.col(c).str.normalize("NFC") != pl.col(c)).fill_null(False) for c in todo)
    n = frame.select(changed.sum()).item()
    return frame.with_columns(pl.col(c).str.normalize("NFC") for c in todo), int(n)
