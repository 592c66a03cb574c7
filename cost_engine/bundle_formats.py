"""A bundle file's format (CSV, Parquet, JSONL) read into raw columns with their row numbers, so
one validation serves all three."""

from __future__ import annotations

import gzip
import io
import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from . import csv_guard, json_keys
from .contract import TABLES
from .table_rules import MAX_SHOWN as _MAX_SHOWN

from .bundle_validate import (
    BundleError, REJECTIONS_SCHEMA, ROW, _MAX_ROWS_SHOWN, _check_columns, _named, _no_rejections,
)

# A bundle file is `<table><suffix>`; the suffix picks the reader.
_SUFFIXES = {
    ".csv": "csv",
    ".csv.gz": "csv",
    ".parquet": "parquet",
    ".jsonl": "jsonl",
    ".jsonl.gz": "jsonl",
}


_HEAD = 65536  # bytes sniffed to tell text from binary


# Magic bytes of files that are not CSV text, so a mis-named file fails with a useful message.
_BINARY_MAGIC = {
    b"\x1f\x8b": "gzip-compressed data",
    b"PK\x03\x04": "a zip archive",
    b"PAR1": "a Parquet file",
    b"\x28\xb5\x2f\xfd": "zstd-compressed data",
    b"BZh": "bzip2-compressed data",
}


@dataclass(frozen=True)
class _RawFile:
    """What a format reader hands to the shared validation."""

    frame: pl.DataFrame  # input columns (strings or typed Parquet columns) plus ROW
    rejected: pl.DataFrame  # rows the reader itself could not parse (JSONL lines)
    empty: bool  # no data rows at all (0 bytes, header only, blank lines only)
    blank_rows: tuple[int, ...] = ()  # CSV rows with every field empty, skipped (and noted)


def table_of(name: str) -> str | None:
    """The contract table a bundle file name holds (`allocations.csv.gz` -> allocations), else None."""
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in TABLES:
            return name[: -len(suffix)]
    return None


def _format_of(path: Path) -> str:
    return next(fmt for suffix, fmt in _SUFFIXES.items() if path.name.endswith(suffix))


def _read_raw(path: Path) -> _RawFile:
    """Read one bundle file into raw columns plus ROW, whatever its format."""
    reader = {"csv": _read_csv, "parquet": _read_parquet, "jsonl": _read_jsonl}[_format_of(path)]
    raw = reader(path)
    return _RawFile(_tidy_header(raw.frame, path.name), raw.rejected, raw.empty, raw.blank_rows)


def _empty_raw() -> _RawFile:
    return _RawFile(pl.DataFrame(schema={ROW: pl.Int64}), _no_rejections(), True)


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped for `.gz` names."""
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                return fh.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:
        raise BundleError(f"{path.name}: cannot read: {exc}") from None


def _check_text(data: bytes, name: str) -> None:
    """Fail early on binary content, which CSV parsers would otherwise misread or decompress."""
    for magic, what in _BINARY_MAGIC.items():
        if data.startswith(magic):
            hint = f"; name it {name}.gz" if magic == b"\x1f\x8b" else ""
            raise BundleError(f"{name}: is {what}, not text{hint}")
    head = data[:_HEAD]  # callers may pass just the head of a large file
    if b"\x00" in head:
        raise BundleError(f"{name}: contains binary data (NUL bytes), not text")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # a multi-byte character cut at the chunk end is fine
            raise BundleError(f"{name}: is not UTF-8 text (byte {exc.start})") from None


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as fh:
            return fh.read(_HEAD)
    except OSError as exc:
        raise BundleError(f"{path.name}: cannot read: {exc}") from None


def _is_blank(data: bytes) -> bool:
    return not _strip_bom(data).strip()


def _strip_bom(data: bytes) -> bytes:
    return data[3:] if data.startswith(b"\xef\xbb\xbf") else data


def _read_csv(path: Path) -> _RawFile:
    # Plain files go to polars by path (memory-mapped); gzip has to be inflated anyway.
    data = _read_bytes(path) if path.name.endswith(".gz") else None
    head = data[:_HEAD] if data is not None else _head(path)
    _check_text(head, path.name)
    if _is_blank(head) and _is_blank(data if data is not None else path.read_bytes()):
        return _empty_raw()
    try:
        # Everything as text: the shared validation decides what a value means.
        # polars drops a UTF-8 BOM itself, so the first header name stays clean.
        frame = pl.read_csv(
            io.BytesIO(data) if data is not None else path,
            infer_schema=False,
            row_index_name=ROW,
            row_index_offset=1,
            truncate_ragged_lines=False,
        )
    except pl.exceptions.NoDataError:
        return _empty_raw()
    except Exception as exc:  # polars raises several error types for malformed text
        source = data if data is not None else path
        _check_csv_header(source, path.name)  # a bad header explains more than a bad row
        raise _csv_error(path.name, exc, source) from None
    _reserve_row(frame.columns[1:], path.name)
    frame = csv_guard.unguard_frame(frame)  # cells the project's CSV writers escaped
    frame, blank = _drop_blank_rows(frame.with_columns(pl.col(ROW).cast(pl.Int64)))
    return _RawFile(frame, _no_rejections(), frame.height == 0, blank)


def _check_csv_header(source: bytes | Path, name: str) -> None:
    """Raise the header's own problem (reserved or repeated name, missing required column), if any.

    Both CSV readers judge the header before the rows, so the same file fails the same way.
    """
    try:
        text = io.BytesIO(source) if isinstance(source, bytes) else source
        header = pl.read_csv(text, n_rows=0, infer_schema=False)
    except Exception:
        return  # the header itself does not parse: the caller's error stands
    _reserve_row(header.columns, name)
    table = table_of(name)
    if table is not None:
        _check_columns(table, _tidy_header(header, name), name)


def _drop_blank_rows(frame: pl.DataFrame) -> tuple[pl.DataFrame, tuple[int, ...]]:
    """CSV rows with every field empty (blank lines, a spreadsheet's trailing ',,,,') carry no record.

    They are skipped rather than rejected field by field; read_bundle notes their numbers.
    """
    fields = [c for c in frame.columns if c != ROW]
    if not fields or frame.height == 0:
        return frame, ()
    blank = pl.all_horizontal(
        _named(frame, c).is_null() | (_named(frame, c).str.strip_chars() == "") for c in fields
    )
    rows = frame.filter(blank)[ROW]
    if rows.len() == 0:
        return frame, ()
    return frame.filter(~blank), tuple(rows.to_list())


def _note_blank_rows(notes: list[tuple[str, str]], name: str, rows: tuple[int, ...] | list[int]) -> None:
    if not rows:
        return
    shown = ", ".join(str(r) for r in rows[:_MAX_ROWS_SHOWN])
    more = f", ... {len(rows) - _MAX_ROWS_SHOWN} more" if len(rows) > _MAX_ROWS_SHOWN else ""
    notes.append(("blank rows", f"{name}: {len(rows)} rows with every field empty skipped (rows {shown}{more})"))


def _csv_error(
    name: str, exc: Exception, source: bytes | Path, rows_before: int = 0, lines_before: int = 0
) -> BundleError:
    """A CSV that polars cannot parse; a row with more fields than the header is named by number.

    `source` is the text polars read; `rows_before`/`lines_before` place a chunk in its file.
    """
    detail = _first_line(exc)
    if "row_index" in detail and "already exists" in detail:
        return BundleError(f"{name}: column name {ROW} is reserved for row numbers")
    if "CSV malformed" in detail:  # polars' words for records it cannot split, e.g. an unclosed quote
        return BundleError(f"{name}: cannot parse as CSV: malformed records (is a quote left open?)")
    if "more fields" in detail:
        found = _first_ragged_row(source)
        if found is not None:
            row, line, got, want = found
            return BundleError(
                f"{name}: cannot parse as CSV: data row {row + rows_before} (line {line + lines_before}) "
                f"has {got} fields, the header has {want} (a comma inside a value needs quotes)"
            )
    return BundleError(f"{name}: cannot parse as CSV: {detail}")


def _first_ragged_row(source: bytes | Path) -> tuple[int, int, int, int] | None:
    """(data row, line, fields, header fields) of the first record longer than the header."""
    import csv

    try:
        raw = io.BytesIO(source) if isinstance(source, bytes) else source.open("rb")
        with io.TextIOWrapper(raw, encoding="utf-8-sig", errors="replace", newline="") as text:
            reader = csv.reader(text, strict=False)
            header = next(reader, None)
            while header == []:  # empty lines before the header, which polars skips too
                header = next(reader, None)
            if header is None:
                return None
            for row, record in enumerate(reader, start=1):
                if len(record) > len(header):
                    return row, reader.line_num, len(record), len(header)
    except (OSError, csv.Error):
        return None
    return None


def _read_parquet(path: Path) -> _RawFile:
    try:
        frame = pl.read_parquet(path)
    except Exception as exc:
        raise _parquet_error(path.name, exc) from None
    _reserve_row(frame.columns, path.name)
    frame = _parquet_columns(frame, 1)
    return _RawFile(frame, _no_rejections(), frame.height == 0)


def _parquet_error(name: str, exc: Exception) -> BundleError:
    return BundleError(f"{name}: cannot read as Parquet: {_first_line(exc)}")


def _parquet_columns(frame: pl.DataFrame, first_row: int) -> pl.DataFrame:
    """Parquet columns as the parsers take them, plus ROW numbered from first_row (a batch's place)."""
    frame = frame.with_columns(_parquet_text(frame, name) for name in frame.columns)
    return frame.with_row_index(ROW, offset=first_row).with_columns(pl.col(ROW).cast(pl.Int64))


def _parquet_text(frame: pl.DataFrame, name: str) -> pl.Expr:
    """Keep scalar typed columns (the parsers take them as they are); stringify the rest."""
    dtype = frame.schema[name]
    col = pl.col(name)
    if dtype == pl.String or dtype.is_numeric() or dtype.is_temporal():
        return col
    if isinstance(dtype, pl.Struct):
        return col.struct.json_encode()
    if isinstance(dtype, (pl.List, pl.Array)):
        return col.map_elements(lambda v: json.dumps(v, default=str), return_dtype=pl.String)
    return col.cast(pl.String)


def _read_jsonl(path: Path) -> _RawFile:
    data = _strip_bom(_read_bytes(path))
    if b"\x00" in data[:_HEAD]:
        raise BundleError(f"{path.name}: contains binary data (NUL bytes), not JSON lines")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(f"{path.name}: is not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        return _empty_raw()
    fast = _jsonl_fast(data, text)
    raw = fast if fast is not None else _jsonl_by_line(text, path.name)
    _reserve_row(raw.frame.columns[:-1] if fast is not None else raw.frame.columns[1:], path.name)
    return raw


def _jsonl_fast(data: bytes, text: str) -> _RawFile | None:
    """Polars' NDJSON reader, values as their JSON text; None when any line needs care."""
    try:
        keys = pl.read_ndjson(io.BytesIO(data), infer_schema_length=None).columns
        frame = pl.read_ndjson(io.BytesIO(data), schema={k: pl.String for k in keys})
    except Exception:
        return None
    # polars skips blank lines; map rows back to line numbers so reasons point at the file
    lines = pl.select(pl.lit(text).str.split("\n").alias("l")).explode("l")
    numbers = lines.with_row_index(ROW, offset=1).filter(pl.col("l").str.strip_chars() != "")[ROW]
    if numbers.len() != frame.height:
        return None  # e.g. an object spread over several lines: let the line reader judge
    if json_keys.hides_repeated_key(frame, lines.filter(pl.col("l").str.strip_chars() != "")["l"], keys):
        return None  # the line reader rejects those lines by number
    frame = frame.with_columns(numbers.cast(pl.Int64).alias(ROW))
    return _RawFile(frame, _no_rejections(), frame.height == 0)


def _jsonl_by_line(text: str, name: str) -> _RawFile:
    """Line-by-line JSON: a broken line is rejected by its number and the others still count."""
    rows: list[dict[str, str | int | None]] = []
    bad: list[tuple[int, str]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json_keys.loads(line)
        except json_keys.RepeatedKey as rep:
            bad.append((number, f"line {number} names the key {_shown_text(rep.key)} twice (which value counts?)"))
            continue
        except ValueError:
            bad.append((number, f"line {number} is not valid JSON"))
            continue
        if not isinstance(obj, dict):
            bad.append((number, f"line {number} is not a JSON object"))
            continue
        rows.append({ROW: number, **{str(k): _json_text(v) for k, v in obj.items()}})
    keys = list(dict.fromkeys(k for row in rows for k in row if k != ROW))
    frame = pl.from_dicts(rows, schema={ROW: pl.Int64, **{k: pl.String for k in keys}})
    rejected = pl.DataFrame(
        {
            "table": [table_of(name)] * len(bad),
            "row": [n for n, _ in bad],
            "reason": [r for _, r in bad],
            "file": [name] * len(bad),
        },
        schema=REJECTIONS_SCHEMA,
    )
    return _RawFile(frame, rejected, not rows and not bad)


def _shown_text(text: str) -> str:
    """A value from a file as a reason quotes it, cut to a readable length."""
    return repr(text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "...")


def _json_text(value: object) -> str | None:
    """A JSON value as the text polars' reader would give it (numbers as written)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # NaN / Infinity: rejected later with a clear reason
    return json.dumps(value)  # numbers as JSON writes them; objects and arrays as JSON text


def _tidy_header(frame: pl.DataFrame, name: str) -> pl.DataFrame:
    """Strip whitespace/BOM from column names; duplicate names make the file ambiguous."""
    names = [c if c == ROW else c.strip().lstrip("\ufeff").strip() for c in frame.columns]
    # polars names a repeated header name `<name>_duplicated_<n>`; a repeated empty name is
    # just one more unnamed column
    names = ["" if n.startswith("_duplicated_") else n for n in names]
    seen: set[str] = set()
    for original, clean in zip(frame.columns, names):
        if clean == "":
            continue
        base = clean.split("_duplicated_")[0] if "_duplicated_" in clean else None
        if clean in seen or (base is not None and base in seen):
            raise BundleError(f"{name}: column {base or clean} appears more than once among the column names")
        seen.add(clean)
    keep = [i for i, n in enumerate(names) if n != ""]  # a trailing comma's unnamed column
    # By position: a file's column may be named "*" or "^...$", which pl.col would expand.
    return pl.DataFrame([frame.to_series(i).rename(names[i]) for i in keep])


def _reserve_row(columns: list[str], name: str) -> None:
    """ROW carries the input row number; a source column of that name would be overwritten."""
    if any(c.strip() == ROW for c in columns):
        raise BundleError(f"{name}: column name {ROW} is reserved for row numbers")


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
