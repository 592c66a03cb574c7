"""Read a usage bundle folder (CSV, Parquet, JSONL) into validated contract frames plus rejections.

Every format is first read into a frame of raw columns (strings, or already-typed Parquet
columns) with a `_row` column; one shared, vectorised validation pipeline then parses,
checks and deduplicates it, so all three formats accept and reject exactly the same rows.

Large CSV and Parquet files (`STREAM_MIN_BYTES` and up; gzip and Parquet count 8x their
size) are not loaded whole: they are read and validated batch by batch, and the valid rows
are spilled to Arrow files that the returned frame memory-maps (see `_stream_batches`), so
the memory of reading stays bounded whatever the file size. Both paths give the same rows,
rejections and notes.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import gzip
import io
import itertools
import json
import math
import mmap
import os
import shutil
import tempfile
import weakref
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.ipc as pa_ipc

from . import csv_guard, json_keys, overlaps, unicode_names
from .config import Config
from .contract import (
    RECORD_KEYS,
    REJECTED_SCHEMA,
    TABLE_NAMES,
    TABLES,
    TS,
    Column,
    empty,
    schema,
)
from .table_rules import MAX_SHOWN as _MAX_SHOWN
from .table_rules import RAW as _RAW
from .table_rules import Problem as _Problem
from .table_rules import exchange_rates as _rates
from .table_rules import post_parse as _post_parse
from .table_rules import raw as _raw
from .table_rules import rules as _rules
from .table_rules import shown as _shown

ROW = "_row"
REJECTIONS_SCHEMA = REJECTED_SCHEMA | {"file": pl.String}
CONFIG_FILE = "ailedger.toml"
# Files a bundle may carry beside its tables that the reader leaves out without a note: the
# config, and the sample generator's list of the anomalies it planted (for tests and readers).
COMPANION_FILES = (CONFIG_FILE, "anomalies.json")

# A bundle file is `<table><suffix>`; the suffix picks the reader.
_SUFFIXES = {
    ".csv": "csv",
    ".csv.gz": "csv",
    ".parquet": "parquet",
    ".jsonl": "jsonl",
    ".jsonl.gz": "jsonl",
}

_USUAL = "__usual__"  # prefix of timestamp columns parsed by the fast path
_HEAD = 65536  # bytes sniffed to tell text from binary
_MAX_ROWS_SHOWN = 10  # row numbers listed in one conflicting-duplicate reason

_ISO_AWARE = "%Y-%m-%dT%H:%M:%S%.f%#z"  # %#z: Z, +hh, +hhmm, +hh:mm
_ISO_NAIVE = "%Y-%m-%dT%H:%M:%S%.f"
_EPOCH_RE = r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$"
# Epoch seconds beyond this (year ~5138) are almost surely milliseconds or nanoseconds.
_MAX_EPOCH_S = 1e11
# Numbers beyond this (a quadrillion dollars, tokens or watts) are no measurement; accepting
# them would let sums overflow (tokens are int64) or reach inf (two amounts of 1e308), and the
# reconciliation could no longer balance. Such values are rejected as too large.
_MAX_MAGNITUDE = 1e15

# Streaming of large files (module attributes so tests can force the streaming path).
STREAM_MIN_BYTES = 32 * 2**20  # plain CSV files this big (gzip, Parquet: file size x 8) are streamed
STREAM_BATCH_BYTES = 4 * 2**20  # CSV text per chunk; validating it takes some 20x that in memory
STREAM_BATCH_ROWS = 2**20  # Parquet rows per batch (about 100 MB of telemetry while validated)
# Compressed formats are judged by an estimate of their inflated size.
_INFLATION = 8
# costs stay in memory: currency conversion notes are per table, and cost files are small;
# rates and tariffs too: their overlaps are found across the whole file (see overlaps.py).
_NOT_STREAMED = frozenset({"costs", "rates", "tariffs"})
_SPILLS_IN_FLIGHT = 2  # validated batches waiting for the spill writer (bounds memory)
_HASH_BUCKETS = 32  # duplicate keys are searched bucket by bucket of key hashes

# Magic bytes of files that are not CSV text, so a mis-named file fails with a useful message.
_BINARY_MAGIC = {
    b"\x1f\x8b": "gzip-compressed data",
    b"PK\x03\x04": "a zip archive",
    b"PAR1": "a Parquet file",
    b"\x28\xb5\x2f\xfd": "zstd-compressed data",
    b"BZh": "bzip2-compressed data",
}


class BundleError(ValueError):
    """A bundle that cannot be read at all (missing folder, file or column, unparseable file)."""


@dataclass
class Bundle:
    """Validated contract tables. Every table is present (empty when the bundle lacks it)."""

    tables: dict[str, pl.DataFrame]
    # one row per rejected input row: table, row (1-based data row in its file), reason, file
    rejected: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=REJECTIONS_SCHEMA))
    # tables the source actually had (a missing table is a coverage gap, never guessed)
    present: frozenset[str] = frozenset()
    # notes that are not rejections: identical duplicates dropped, etc. (what, detail)
    notes: list[tuple[str, str]] = field(default_factory=list)
    # every table holds each record key once (read_bundle deduplicates), so the store may
    # skip its own duplicate check; frames built by hand (importers, tests) keep it
    unique_keys: bool = False
    # tables left in a store rather than loaded (read from there when needed), with their rows
    # there; `store` is that store's path
    held_rows: dict[str, int] = field(default_factory=dict)
    store: Path | None = None

    def __getitem__(self, table: str) -> pl.DataFrame:
        return self.tables[table]

    @classmethod
    def from_frames(cls, frames: dict[str, pl.DataFrame], **kw) -> "Bundle":
        """Build a bundle from already-canonical frames (tests, importers)."""
        tables = {t: frames.get(t, empty(t)) for t in TABLE_NAMES}
        return cls(tables=tables, present=frozenset(frames), **kw)


@dataclass(frozen=True)
class _RawFile:
    """What a format reader hands to the shared validation."""

    frame: pl.DataFrame  # input columns (strings or typed Parquet columns) plus ROW
    rejected: pl.DataFrame  # rows the reader itself could not parse (JSONL lines)
    empty: bool  # no data rows at all (0 bytes, header only, blank lines only)
    blank_rows: tuple[int, ...] = ()  # CSV rows with every field empty, skipped (and noted)


# --------------------------------------------------------------------------- bundle folder


def read_bundle(path: str | Path, config: Config | None = None) -> Bundle:
    """Read and validate every contract table of a bundle folder."""
    config = config or Config()
    root = Path(path)
    if not root.is_dir():
        raise BundleError(f"bundle folder {root} does not exist or is not a folder")
    files, unknown = _find_table_files(root)
    if "allocations" not in files:
        raise BundleError(f"bundle {root} has no allocations file (allocations.csv, .parquet or .jsonl)")

    notes: list[tuple[str, str]] = [("unknown file", name) for name in unknown]
    tables: dict[str, pl.DataFrame] = {}
    rejected: list[pl.DataFrame] = []
    for table in TABLE_NAMES:
        file = files.get(table)
        if file is None:
            tables[table] = empty(table)
            continue
        streamed = _stream(table, file, config, notes) if _streams(table, file) else None
        if streamed is not None:
            valid, rej = streamed
        else:
            raw = _read_raw(file)
            if raw.empty and raw.rejected.height == 0:
                notes.append(("empty file", file.name))
            _note_blank_rows(notes, file.name, raw.blank_rows)
            valid, rej = validate_frame(table, raw.frame, config, file.name, notes=notes)
            rej = pl.concat([raw.rejected, rej]).sort("row")
        tables[table] = valid
        rejected.append(rej)
    all_rejected = pl.concat(rejected) if rejected else pl.DataFrame(schema=REJECTIONS_SCHEMA)
    return Bundle(tables=tables, rejected=all_rejected, present=frozenset(files), notes=notes, unique_keys=True)


def _find_table_files(root: Path) -> tuple[dict[str, Path], list[str]]:
    """Map each contract table to its one file; other names are returned as unknown."""
    found: dict[str, list[Path]] = {}
    unknown: list[str] = []
    for entry in sorted(root.iterdir()):
        name = entry.name
        if name in COMPANION_FILES or name.startswith("."):
            continue  # the config belongs to the caller; dotfiles are OS/editor litter
        table = _table_of(name) if entry.is_file() else None
        if table is None:
            unknown.append(name + ("/" if entry.is_dir() else ""))
        else:
            found.setdefault(table, []).append(entry)
    for table, paths in found.items():
        if len(paths) > 1:
            names = ", ".join(p.name for p in paths)
            raise BundleError(f"bundle {root} has {len(paths)} files for table {table}: {names}; keep one")
    return {t: p[0] for t, p in found.items()}, unknown


def _table_of(name: str) -> str | None:
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in TABLES:
            return name[: -len(suffix)]
    return None


def _format_of(path: Path) -> str:
    return next(fmt for suffix, fmt in _SUFFIXES.items() if path.name.endswith(suffix))


# --------------------------------------------------------------------------- format readers


def _read_raw(path: Path) -> _RawFile:
    """Read one bundle file into raw columns plus ROW, whatever its format."""
    reader = {"csv": _read_csv, "parquet": _read_parquet, "jsonl": _read_jsonl}[_format_of(path)]
    raw = reader(path)
    return _RawFile(_tidy_header(raw.frame, path.name), raw.rejected, raw.empty, raw.blank_rows)


def _no_rejections() -> pl.DataFrame:
    return pl.DataFrame(schema=REJECTIONS_SCHEMA)


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
    table = _table_of(name)
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
            "table": [_table_of(name)] * len(bad),
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


# --------------------------------------------------------------------------- streaming large files


def _streams(table: str, path: Path) -> bool:
    """Whether a file is read batch by batch (big CSV or Parquet) rather than whole."""
    fmt = _format_of(path)
    if table in _NOT_STREAMED or fmt not in ("csv", "parquet"):
        return False
    try:
        size = path.stat().st_size
    except OSError:
        return False
    if fmt == "parquet" or path.name.endswith(".gz"):
        size *= _INFLATION  # compressed: a rough inflation ratio
    return size >= STREAM_MIN_BYTES


def _stream(
    table: str, path: Path, config: Config, notes: list[tuple[str, str]]
) -> tuple[pl.DataFrame, pl.DataFrame] | None:
    """validate_frame for a file too big to hold whole: (valid rows, rejections).

    None when the file is better read whole after all (a Parquet file without rows).
    Spilled parts live in a private temporary folder, removed on the way out.
    """
    # Spill to disk, not to a RAM-backed /tmp (tmpfs): AILEDGER_SPILL_DIR picks the folder.
    spill = Path(tempfile.mkdtemp(prefix="ailedger-read-", dir=os.environ.get("AILEDGER_SPILL_DIR") or None))
    try:
        if _format_of(path) == "parquet":
            return _stream_parquet(table, path, config, notes, spill)
        return _stream_csv(table, path, config, notes, spill)
    finally:
        # Mapped parts stay readable after their files are unlinked (POSIX); where the platform
        # refuses (Windows), the folder is left for the temp cleaner.
        shutil.rmtree(spill, ignore_errors=True)


def _stream_parquet(
    table: str, path: Path, config: Config, notes: list[tuple[str, str]], spill: Path
) -> tuple[pl.DataFrame, pl.DataFrame] | None:
    """A Parquet file read STREAM_BATCH_ROWS rows at a time (polars skips whole row groups).

    Each batch gets the columns `_read_parquet` would give it, with ROW continuing across
    batches, so the shared batch pipeline sees exactly the rows of a whole read.
    """
    scan = pl.scan_parquet(path)
    try:
        header = scan.head(0).collect()
        total = scan.select(pl.len()).collect().item()
    except Exception as exc:
        raise _parquet_error(path.name, exc) from None
    if total == 0:
        return None  # nothing to stream; the whole-file path notes the empty file
    _reserve_row(header.columns, path.name)
    header = _tidy_header(_parquet_columns(header, 1), path.name)
    step = max(1, STREAM_BATCH_ROWS)

    def batches() -> Iterator[pl.DataFrame]:
        for lo in range(0, total, step):
            try:
                frame = scan.slice(lo, step).collect()
            except Exception as exc:
                raise _parquet_error(path.name, exc) from None
            yield _tidy_header(_parquet_columns(frame, lo + 1), path.name)

    return _stream_batches(table, path.name, header, batches(), config, notes, spill)


def _stream_csv(
    table: str, path: Path, config: Config, notes: list[tuple[str, str]], spill: Path
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A CSV file too big to hold as text, cut into chunks of about STREAM_BATCH_BYTES.

    Chunks end on a record boundary (a newline outside quotes); each chunk, behind the header
    line, is parsed by polars and goes through the shared batch pipeline (`_stream_batches`).
    """
    chunks: _CsvChunks | None = None
    try:
        source = _inflate(path, spill) if path.name.endswith(".gz") else path
        head = _head(source)
        _check_text(head, path.name)
        if _is_blank(head) and _blank_file(source):  # no header at all, as _read_csv sees it
            notes.append(("empty file", path.name))
            return validate_frame(table, pl.DataFrame(schema={ROW: pl.Int64}), config, path.name)
        chunks = _CsvChunks(source, path.name)
        try:
            header = chunks.parse(b"", 0)
        except pl.exceptions.NoDataError:
            notes.append(("empty file", path.name))
            return validate_frame(table, pl.DataFrame(schema={ROW: pl.Int64}), config, path.name)
        _reserve_row(header.columns[1:], path.name)
        header = _tidy_header(header, path.name).with_columns(pl.col(ROW).cast(pl.Int64))
        blank: list[int] = []
        if header.width == 1:  # no named column: an empty file unless some row has a value
            try:
                for batch in chunks:
                    batch, skipped = _drop_blank_rows(batch)
                    blank += skipped
                    if batch.height:
                        _check_columns(table, header, path.name)  # raises: required columns missing
            except (BundleError, pl.exceptions.PolarsError):
                # A row that does not even parse is still data under a header with no names:
                # the missing columns are the problem, as the whole-file reader says.
                _check_columns(table, header, path.name)
                raise
            notes.append(("empty file", path.name))
            _note_blank_rows(notes, path.name, blank)
            return validate_frame(table, pl.DataFrame(schema={ROW: pl.Int64}), config, path.name)

        def batches() -> Iterator[pl.DataFrame]:
            for batch in chunks:
                batch = _tidy_header(batch, path.name).with_columns(pl.col(ROW).cast(pl.Int64))
                batch, skipped = _drop_blank_rows(batch)
                blank.extend(skipped)
                yield batch

        return _stream_batches(table, path.name, header, batches(), config, notes, spill, blank)
    finally:
        if chunks is not None:
            chunks.close()


def _stream_batches(
    table: str,
    name: str,
    header: pl.DataFrame,
    batches: Iterator[pl.DataFrame],
    config: Config,
    notes: list[tuple[str, str]],
    spill: Path,
    blank: list[int] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """validate_frame over a file's batches (raw columns plus ROW), memory bounded by one batch.

    Each batch goes through the same `_checked` pipeline a whole file would. Valid rows are
    written to uncompressed Arrow IPC files in `spill` and come back memory-mapped (zero-copy),
    so the returned frame lives in the page cache, not in process memory; the files are
    unlinked by the caller (the mapping keeps them readable on POSIX). Duplicate keys across
    batches are found through key hashes spilled in buckets; only rows whose key hash repeats
    are then deduplicated in memory, exactly as `_dedupe` does for a whole file. Rejections
    (usually few) are kept in memory. `blank` is filled by a CSV reader while it is iterated
    (rows skipped as blank), and noted after the rows.
    """
    _check_columns(table, header, name)
    names = [c.name for c in TABLES[table]]
    extras = [c for c in header.columns if c != ROW and c not in names]
    key = list(RECORD_KEYS.get(table, ())) or names
    template, _ = _checked(table, header, config)  # the schema of valid rows
    buckets = _HashBuckets(spill)
    bad: list[pl.DataFrame] = []
    rows_in = renamed = 0
    # Writing a batch's valid rows is disk work (gigabytes at fleet scale) and releases the
    # GIL: one writer thread spills batch k while this thread validates batch k + 1. At most
    # _SPILLS_IN_FLIGHT batches wait for the writer, so memory stays bounded.
    pending: collections.deque[concurrent.futures.Future[pl.DataFrame]] = collections.deque()
    done: list[concurrent.futures.Future[pl.DataFrame]] = []
    writer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ailedger-spill")
    try:
        for number, batch in enumerate(batches):
            rows_in += batch.height
            batch, changed = unicode_names.normalise_columns(batch, _text_columns(table))
            renamed += changed
            good, rejected = _checked(table, batch, config)
            bad.append(rejected)
            if good.height:
                buckets.add(_key_hashes(good, key))
                pending.append(writer.submit(_spill, good, spill / f"part-{number:06d}.arrow"))
                del good
                while len(pending) > _SPILLS_IN_FLIGHT:
                    pending[0].result()
                    done.append(pending.popleft())
        done += pending
        parts = [f.result() for f in done]
    finally:
        writer.shutdown(wait=True, cancel_futures=True)
        buckets.close()
    if rows_in == 0:
        notes.append(("empty file", name))
    _note_blank_rows(notes, name, blank or [])
    _note_nfc(notes, table, renamed)

    conflicts = pl.DataFrame(schema={"row": pl.Int64, "reason": pl.String})
    repeated = buckets.repeated()
    if repeated.len():
        suspects = pl.concat([p.filter(_key_hashes(p, key).is_in(repeated.implode())) for p in parts])
        kept, conflicts, dropped = _dedupe(table, suspects, names)
        removed = suspects[ROW].filter(~suspects[ROW].is_in(kept[ROW].implode()))
        if dropped:
            notes.append(("duplicate rows", f"{table}: {dropped} identical duplicate rows counted once"))
        parts = [_without_rows(p, removed, spill / f"kept-{i:06d}.arrow") for i, p in enumerate(parts)]

    good_all = pl.concat(parts, rechunk=False) if parts else template
    rejected_all = pl.concat([*bad, conflicts]).sort("row").select(
        pl.lit(table, pl.String).alias("table"), "row", "reason", pl.lit(name, pl.String).alias("file")
    )
    valid = _finish(table, good_all, extras, config, notes)
    return valid, rejected_all.cast(dict(REJECTIONS_SCHEMA))


def _key_hashes(frame: pl.DataFrame, key: list[str]) -> pl.Series:
    """A hash of each row's record key, the same for the same key in any batch.

    Recomputed where needed rather than spilled with the rows (8 bytes a row less to write);
    hash_rows costs a fraction of hashing a struct.
    """
    return frame.select(key).hash_rows()


class _CsvChunks:
    """A CSV file as polars frames of whole records, about STREAM_BATCH_BYTES of text each.

    A chunk ends at a newline outside quotes: the number of quote characters before it, from
    the start of the chunk (always a record start), is even. `""` inside a quoted value counts
    twice, so it never flips the parity. Every chunk is parsed behind the header line, so the
    columns are the header's and row numbers continue across chunks (ROW is 1-based over the
    data rows, as for a whole file).
    """

    def __init__(self, source: Path, name: str) -> None:
        self.name = name
        self.file = source.open("rb")
        self.buffer = b""
        self.eof = False
        self.rows = 0  # data rows parsed so far
        self.lines = 0  # lines before the current chunk, not counting the header line
        first = self._next_chunk(header=True)
        # polars skips empty lines before the header (after a BOM); so do the chunks
        while first is not None and _strip_bom(first) in (b"\n", b"\r\n"):
            self.lines += 1
            first = self._next_chunk(header=True)
        self.header = first or b""

    def close(self) -> None:
        self.file.close()

    def _next_chunk(self, header: bool = False) -> bytes | None:
        """The next run of whole records (only the first record, for the header); None at the end."""
        want = 1 if header else max(1, STREAM_BATCH_BYTES)
        while True:
            if self.eof or len(self.buffer) >= want:
                cut = self._cut(self.buffer, first_only=header)
                if cut is None and self.eof:
                    cut = len(self.buffer)  # the last record may lack its newline
                if cut is not None:
                    chunk, self.buffer = self.buffer[:cut], self.buffer[cut:]
                    return chunk or None
                want = len(self.buffer) + 1  # a record longer than a chunk: read on
            more = self.file.read(max(want - len(self.buffer), 2**16))
            if more:
                self.buffer += more
            else:
                self.eof = True

    @staticmethod
    def _cut(data: bytes, *, first_only: bool) -> int | None:
        """Offset just past the last (or first) newline outside quotes; None when there is none."""
        if first_only:
            pos, quotes = data.find(b"\n"), 0
            while pos != -1:
                quotes = data.count(b'"', 0, pos)
                if quotes % 2 == 0:
                    return pos + 1
                pos = data.find(b"\n", pos + 1)
            return None
        pos = data.rfind(b"\n")
        if pos == -1:
            return None
        quotes = data.count(b'"', 0, pos)
        while quotes % 2:
            prev = data.rfind(b"\n", 0, pos)
            if prev == -1:
                return None
            quotes -= data.count(b'"', prev, pos)
            pos = prev
        return pos + 1

    def parse(self, chunk: bytes, row_offset: int) -> pl.DataFrame:
        """A chunk of records behind the header, as text columns plus ROW."""
        text = self.header + chunk
        if not self.header.endswith(b"\n") and chunk:
            text = self.header + b"\n" + chunk
        try:
            return csv_guard.unguard_frame(pl.read_csv(
                io.BytesIO(text),
                infer_schema=False,
                row_index_name=ROW,
                row_index_offset=row_offset + 1,
                truncate_ragged_lines=False,
            ))
        except pl.exceptions.NoDataError:
            raise
        except Exception as exc:  # polars raises several error types for malformed text
            raise _csv_error(self.name, exc, text, self.rows, self.lines) from None

    def __iter__(self) -> Iterator[pl.DataFrame]:
        while (chunk := self._next_chunk()) is not None:
            frame = self.parse(chunk, self.rows)
            self.rows += frame.height
            self.lines += chunk.count(b"\n")
            yield frame


def _blank_file(path: Path) -> bool:
    """Only whitespace (and a BOM), read a block at a time."""
    with path.open("rb") as fh:
        first = True
        while block := fh.read(2**20):
            if (_strip_bom(block) if first else block).strip():
                return False
            first = False
    return True


def _inflate(path: Path, folder: Path) -> Path:
    """A .gz file inflated into folder in chunks (never whole in memory)."""
    target = folder / path.name[: -len(".gz")]
    try:
        with gzip.open(path, "rb") as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst, 4 * 2**20)
    except (OSError, EOFError, zlib.error) as exc:
        raise BundleError(f"{path.name}: cannot read: {exc}") from None
    return target


def _spill(frame: pl.DataFrame, path: Path) -> pl.DataFrame:
    """Write a frame to an uncompressed Arrow IPC file and hand it back memory-mapped."""
    table = frame.to_arrow(compat_level=pl.CompatLevel.newest())
    with pa.OSFile(str(path), "wb") as sink, pa_ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    with path.open("rb") as fh:
        view = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    _MAPPED.add(view)
    mapped = pa_ipc.open_file(pa.BufferReader(pa.py_buffer(view))).read_all()
    out = pl.from_arrow(mapped, rechunk=False)
    assert isinstance(out, pl.DataFrame)
    return out


@contextlib.contextmanager
def spill_folder() -> Iterator[Callable[[pl.DataFrame], pl.DataFrame]]:
    """A function that writes a frame to a private temporary folder and hands it back
    memory-mapped (see _spill); the folder goes on the way out, the mappings stay readable.

    For frames of millions of rows the engine keeps (resolved requests): their pages are file
    backed, so release_pages lets them go between scans instead of holding them resident.
    """
    spill = Path(tempfile.mkdtemp(prefix="ailedger-spill-", dir=os.environ.get("AILEDGER_SPILL_DIR") or None))
    n = itertools.count()
    try:
        yield lambda frame: _spill(frame, spill / f"part-{next(n)}.arrow")
    finally:
        shutil.rmtree(spill, ignore_errors=True)


# Spilled files mapped by live frames (weakly held: a map goes with the last frame using it).
_MAPPED: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()


def release_pages() -> None:
    """Drop spilled pages a reader already went through from this process's resident set.

    A scan of a streamed frame (e.g. an ingest) faults every page of it in, and mapped pages
    count as resident until unmapped; the data stays in the page cache (and in the file), so
    a later read simply maps it again. Called by long scans after each batch to bound memory.
    """
    if not hasattr(mmap, "MADV_DONTNEED"):
        return
    for view in list(_MAPPED):
        with contextlib.suppress(ValueError, OSError):
            view.madvise(mmap.MADV_DONTNEED)


def _without_rows(part: pl.DataFrame, rows: pl.Series, path: Path) -> pl.DataFrame:
    """The part without the given rows (re-spilled only when it had any)."""
    drop = pl.col(ROW).is_in(rows.implode())
    if not part.select(drop.any()).item():
        return part
    return _spill(part.filter(~drop), path)


class _HashBuckets:
    """Key hashes of every valid row, spilled to one file per bucket (hash modulo the bucket count).

    `repeated()` reads one bucket at a time, so finding the hashes that occur more than once
    needs memory for 1/_HASH_BUCKETS of the rows only.
    """

    _SCHEMA = pa.schema([("h", pa.uint64())])

    def __init__(self, folder: Path) -> None:
        self.paths = [folder / f"hashes-{b:02d}.arrows" for b in range(_HASH_BUCKETS)]
        self.files = [pa.OSFile(str(p), "wb") for p in self.paths]
        self.writers = [pa_ipc.new_stream(f, self._SCHEMA) for f in self.files]

    def add(self, hashes: pl.Series) -> None:
        frame = pl.DataFrame({"h": hashes}).with_columns((pl.col("h") % _HASH_BUCKETS).alias("b"))
        for (bucket,), part in frame.partition_by("b", as_dict=True).items():
            batch = pa.record_batch([part["h"].to_arrow()], schema=self._SCHEMA)
            self.writers[int(bucket)].write_batch(batch)

    def close(self) -> None:
        for writer, file in zip(self.writers, self.files):
            if not file.closed:
                writer.close()
                file.close()

    def repeated(self) -> pl.Series:
        found = []
        for path in self.paths:
            with pa.memory_map(str(path), "r") as source:
                hashes = pl.from_arrow(pa_ipc.open_stream(source).read_all())
            assert isinstance(hashes, pl.DataFrame)
            # Sorting needs one copy of the bucket; a hash table for is_duplicated needs several.
            ordered = hashes["h"].sort()
            found.append(ordered.filter(ordered == ordered.shift(1)).unique())
        return pl.concat(found) if found else pl.Series("h", [], pl.UInt64)


# --------------------------------------------------------------------------- shared validation


def validate_frame(
    table: str,
    raw: pl.DataFrame,
    config: Config | None,
    file: str,
    *,
    notes: list[tuple[str, str]] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Parse and check a frame of raw values (strings or typed) for one contract table.

    Returns (valid rows in the canonical schema plus extra columns as strings, rejected
    rows as table/row/reason/file). `ROW` is added (1-based) when the frame lacks it.
    Remarks that are not rejections (dropped identical duplicates, currency conversion)
    are appended to `notes` when given. Raises BundleError when a required column is
    missing from the frame entirely.
    """
    config = config or Config()
    if ROW not in raw.columns:
        raw = raw.with_row_index(ROW, offset=1)
    raw = raw.with_columns(pl.col(ROW).cast(pl.Int64))
    if raw.height == 0 and raw.width == 1:  # no header at all (0-byte file): nothing to check
        return _finish(table, empty(table), [], config, None), _no_rejections()
    _check_columns(table, raw, file)

    names = [c.name for c in TABLES[table]]
    extras = [c for c in raw.columns if c != ROW and c not in names]
    raw, renamed = unicode_names.normalise_columns(raw, _text_columns(table))
    _note_nfc(notes, table, renamed)
    good, bad = _checked(table, raw, config)
    good, conflicts, dropped = _dedupe(table, good, names)
    if dropped and notes is not None:
        notes.append(("duplicate rows", f"{table}: {dropped} identical duplicate rows counted once"))
    good, overlapping, cut = overlaps.check(table, good, config, ROW)
    if notes is not None:
        notes += cut

    rejected = pl.concat([bad, conflicts, overlapping])
    rejected = rejected.sort("row").select(
        pl.lit(table, pl.String).alias("table"), "row", "reason", pl.lit(file, pl.String).alias("file")
    )
    return _finish(table, good, extras, config, notes), rejected.cast(dict(REJECTIONS_SCHEMA))


def _text_columns(table: str) -> list[str]:
    return [c.name for c in TABLES[table] if c.dtype == pl.String]


def _note_nfc(notes: list[tuple[str, str]] | None, table: str, rows: int) -> None:
    if rows and notes is not None:
        notes.append(("unicode normalized", f"{table}: {rows} rows had names in another Unicode form, read as "
                      "NFC (names that differ only in normalization are one name)"))


# Columns the reader adds to costs: the amount and currency as given, before conversion.
_COST_ORIGINALS = ("original_amount", "original_currency")


def _finish(
    table: str, good: pl.DataFrame, extras: list[str], config: Config, notes: list[tuple[str, str]] | None
) -> pl.DataFrame:
    """Canonical columns in contract order, then the file's extra columns as strings."""
    names = list(schema(table))
    if table != "costs":
        return good.select(*names, *(_named(good, c).cast(pl.String) for c in extras))
    good = _convert_currency(good, config, extras, notes)
    others = [c for c in extras if c not in _COST_ORIGINALS]
    return good.select(*names, *(_named(good, c).cast(pl.String) for c in others), *_COST_ORIGINALS)


def _named(frame: pl.DataFrame, name: str) -> pl.Expr:
    """The column called `name`, taken by position: a file's own column names may be "*" or
    "^...$", which pl.col would read as a wildcard or a regex."""
    return pl.nth(frame.columns.index(name)).alias(name)


def _check_columns(table: str, raw: pl.DataFrame, file: str) -> None:
    missing = [c.name for c in TABLES[table] if c.required and c.name not in raw.columns]
    if missing:
        cols = ", ".join(missing)
        hint = ""
        names = [c for c in raw.columns if c != ROW]
        if len(names) == 1:  # one column: the header was not split at commas
            for sep, label in ((";", "';'"), ("\t", "tab"), ("|", "'|'")):
                if sep in names[0]:
                    hint = f"; the header looks {label}-separated, the contract wants ','"
                    break
        raise BundleError(
            f"{file}: required column{'s' if len(missing) > 1 else ''} {cols} missing ({table}){hint}"
        )


def _checked(table: str, raw: pl.DataFrame, config: Config) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(valid rows with parsed columns, rejected rows as row/reason)."""
    cols = TABLES[table]
    present = {c.name for c in cols if c.name in raw.columns}
    # Parsers take text, numbers and datetimes; anything else (null, bool, categorical) as text.
    raw = raw.with_columns(pl.col(n).cast(pl.String) for n in present if not _parser_input(raw.schema[n]))
    dtypes = {c.name: (raw.schema[c.name] if c.name in present else pl.String) for c in cols}
    lf = raw.lazy().rename({n: _RAW + n for n in present})
    lf = lf.with_columns(pl.lit(None, pl.String).alias(_RAW + c.name) for c in cols if c.name not in present)
    lf = lf.with_columns(_clean(_raw(c.name)).alias(_RAW + c.name) for c in cols if dtypes[c.name] == pl.String)
    # The usual timestamp spelling is parsed once up front; the slower paths only see the rest.
    text_ts = [c.name for c in cols if c.dtype == TS and dtypes[c.name] == pl.String]
    lf = lf.with_columns(_usual_ts(_raw(n)).alias(_USUAL + n) for n in text_ts)

    parsed = {c.name: _parse_column(c, dtypes[c.name], config) for c in cols}
    # Each step runs once over all rows and only cheap flags are computed there: a value
    # that was given but did not parse, or a required value that is missing.
    lf = lf.with_columns(value.alias(name) for name, (value, _) in parsed.items())
    given_but_unparsed = [_raw(c.name).is_not_null() & pl.col(c.name).is_null() for c in cols if c.dtype != pl.String]
    missing = [_raw(c.name).is_null() for c in cols if c.required]
    lf = lf.with_columns(pl.any_horizontal(*given_but_unparsed, *missing).alias("__bad"))
    lf = lf.with_columns(pl.col(c.name).fill_null(pl.lit(c.default, c.dtype)) for c in cols if c.default is not None)
    lf = lf.with_columns(_post_parse(table, config))
    rules = _rules(table, config)
    checked = lf.with_columns(pl.col("__bad") | _any(rules)).collect()

    raw_cols = [_RAW + c.name for c in cols] + [_USUAL + n for n in text_ts]
    good = checked.lazy().filter(~pl.col("__bad")).drop("__bad", *raw_cols).collect()
    # Messages are text work: build them only for the (usually few) rejected rows, where
    # each parser explains exactly what went wrong.
    problems = [p for _, found in parsed.values() for p in found]
    reasons = _join_reasons([*problems, *rules])
    fallback = pl.lit("row could not be read")  # never expected: every flag above has a message
    bad = checked.filter(pl.col("__bad")).select(
        pl.col(ROW).alias("row"), pl.when(reasons != "").then(reasons).otherwise(fallback).alias("reason")
    )
    return good, bad


def _parser_input(dtype: pl.DataType) -> bool:
    return dtype == pl.String or dtype.is_numeric() or isinstance(dtype, (pl.Datetime, pl.Date))


def _any(problems: list[_Problem]) -> pl.Expr:
    if not problems:
        return pl.lit(False)
    return pl.any_horizontal(p.flag.fill_null(False) for p in problems)


def _join_reasons(problems: list[_Problem]) -> pl.Expr:
    """All problems of a row, '; '-joined in column order, then table rules."""
    parts = [pl.when(p.flag).then(p.message) for p in problems]
    return pl.concat_str(parts, separator="; ", ignore_nulls=True)


# ---- column parsers: each returns (value expression without default, problems)


def _clean(text: pl.Expr) -> pl.Expr:
    """Text stripped of surrounding whitespace; empty text is a missing value."""
    s = text.str.strip_chars()
    return pl.when(s == "").then(None).otherwise(s)


def _parse_column(c: Column, dtype: pl.DataType, config: Config) -> tuple[pl.Expr, list[_Problem]]:
    value = _raw(c.name)
    if c.dtype == pl.String:
        value, problems = value.cast(pl.String), []
    elif c.dtype == pl.Float64:
        value, problems = _parse_float(c.name, value, dtype)
    elif c.dtype == pl.Int64:
        value, problems = _parse_int(c.name, value, dtype)
    else:
        value, problems = _parse_ts(c.name, value, dtype, config.period.source_timezone)
    if c.required:
        problems = [_Problem(_raw(c.name).is_null(), pl.lit(f"missing required {c.name}")), *problems]
    return value, problems


def _numeric_problems(name: str, clean: pl.Expr, number: pl.Expr) -> list[_Problem]:
    shown = _shown(clean)
    return [
        _Problem(clean.is_not_null() & number.is_null(), pl.format(f"{name} is not a number: '{{}}'", shown)),
        _Problem(number.is_nan(), pl.lit(f"{name} is NaN")),
        _Problem(number.is_infinite(), pl.format(f"{name} is infinite: '{{}}'", shown)),
    ]


def _as_float(clean: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    if dtype.is_numeric() or dtype == pl.String:
        return clean.cast(pl.Float64, strict=False)
    return pl.lit(None, pl.Float64)  # a datetime where a number belongs


def _too_large(name: str, clean: pl.Expr, number: pl.Expr) -> _Problem:
    return _Problem(
        number.is_finite() & (number.abs() > _MAX_MAGNITUDE),
        pl.format(f"{name} {{}} is too large (above {_MAX_MAGNITUDE:.0e})", _shown(clean)),
    )


def _parse_float(name: str, clean: pl.Expr, dtype: pl.DataType) -> tuple[pl.Expr, list[_Problem]]:
    number = _as_float(clean, dtype)
    # NaN/inf and absurd magnitudes are rejected here; nulling them keeps range rules from
    # judging them again.
    ok = number.is_finite() & (number.abs() <= _MAX_MAGNITUDE)
    return pl.when(ok).then(number), [*_numeric_problems(name, clean, number), _too_large(name, clean, number)]


def _parse_int(name: str, clean: pl.Expr, dtype: pl.DataType) -> tuple[pl.Expr, list[_Problem]]:
    number = _as_float(clean, dtype)
    # Exact integers first (no float rounding for big counts), then integral floats like "12.0".
    exact = clean.cast(pl.Int64, strict=False) if dtype == pl.String or dtype.is_integer() else None
    integral = number.is_finite() & (number == number.floor()) & (number.abs() < 2.0**63)
    from_float = pl.when(integral).then(number.cast(pl.Int64, strict=False))
    whole = pl.coalesce(exact, from_float) if exact is not None else from_float
    big = number.abs() > _MAX_MAGNITUDE
    value = pl.when(~big & (whole.abs() <= int(_MAX_MAGNITUDE))).then(whole)
    problems = [*_numeric_problems(name, clean, number), _too_large(name, clean, number)]
    problems.append(
        _Problem(
            number.is_finite() & ~big & whole.is_null(),
            pl.format(f"{name} is not an integer: '{{}}'", _shown(clean)),
        )
    )
    return value, problems


def _parse_ts(
    name: str, clean: pl.Expr, dtype: pl.DataType, source_tz: str | None
) -> tuple[pl.Expr, list[_Problem]]:
    if isinstance(dtype, pl.Datetime) and dtype.time_zone is not None:
        return clean.dt.convert_time_zone("UTC").dt.cast_time_unit("us"), []
    if isinstance(dtype, (pl.Datetime, pl.Date)):
        return _localise(name, clean.cast(pl.Datetime("us")), clean, source_tz)
    if dtype.is_numeric():
        return _epoch(name, clean.cast(pl.Float64), clean)
    text = clean.cast(pl.String)
    # Only what the usual spelling did not parse goes through the regex work, which costs
    # more than the parse itself.
    usual = pl.col(_USUAL + name)
    rest = pl.when(usual.is_null()).then(text)
    iso = _normalise_iso(rest)
    aware = iso.str.to_datetime(_ISO_AWARE, time_unit="us", strict=False)
    naive = iso.str.to_datetime(_ISO_NAIVE, time_unit="us", strict=False)
    local, local_problems = _localise(name, naive, text, source_tz)
    epoch_number = pl.when(rest.str.contains(_EPOCH_RE)).then(rest.cast(pl.Float64, strict=False))
    epoch, epoch_problems = _epoch(name, epoch_number, text)
    unparsed = rest.is_not_null() & aware.is_null() & naive.is_null() & epoch_number.is_null()
    problems = [
        _Problem(unparsed, pl.format(f"{name} is not a timestamp: '{{}}'", _shown(text))),
        *local_problems,
        *epoch_problems,
    ]
    value = pl.coalesce(usual, aware, local, epoch).dt.convert_time_zone("UTC")
    return value, problems


def _usual_ts(text: pl.Expr) -> pl.Expr:
    """ISO 8601 as most sources write it: 'T', seconds, any fraction, Z/+hh/+hhmm/+hh:mm."""
    return text.str.to_datetime(_ISO_AWARE, time_unit="us", strict=False)


def _normalise_iso(text: pl.Expr) -> pl.Expr:
    """Bring other ISO 8601 spellings to the usual one: 'T' separator, seconds present."""
    s = text.str.replace(r"^(\d{4}-\d{2}-\d{2})[Tt ]", "${1}T")
    s = s.str.replace(r"^(\d{4}-\d{2}-\d{2})$", "${1}T00:00:00")
    return s.str.replace(r"T(\d{2}:\d{2})([Zz+-]|$)", "T${1}:00${2}")


def _localise(
    name: str, naive: pl.Expr, shown_from: pl.Expr, source_tz: str | None
) -> tuple[pl.Expr, list[_Problem]]:
    """Offset-less times: rejected, or read in `source_timezone` (never guessing DST)."""
    shown = _shown(shown_from)
    if source_tz is None:
        reason = pl.format(
            f"{name} timestamp without offset '{{}}' (add Z or +hh:mm, or set period.source_timezone)", shown
        )
        return pl.lit(None, pl.Datetime("us", "UTC")), [_Problem(naive.is_not_null(), reason)]
    strict = naive.dt.replace_time_zone(source_tz, ambiguous="null", non_existent="null")
    earliest = naive.dt.replace_time_zone(source_tz, ambiguous="earliest", non_existent="null")
    failed = naive.is_not_null() & strict.is_null()
    problems = [
        _Problem(
            failed & earliest.is_not_null(),
            pl.format(f"{name} '{{}}' is ambiguous in {source_tz} (DST change; give an offset)", shown),
        ),
        _Problem(
            failed & earliest.is_null(),
            pl.format(f"{name} '{{}}' does not exist in {source_tz} (DST gap; give an offset)", shown),
        ),
    ]
    return strict.dt.convert_time_zone("UTC"), problems


def _epoch(name: str, seconds: pl.Expr, shown_from: pl.Expr) -> tuple[pl.Expr, list[_Problem]]:
    ok = seconds.is_finite() & (seconds.abs() < _MAX_EPOCH_S)
    micros = pl.when(ok).then((seconds * 1_000_000).round().cast(pl.Int64))
    value = pl.from_epoch(micros, time_unit="us").dt.replace_time_zone("UTC")
    problems = [
        _Problem(
            seconds.is_not_null() & ~ok,
            pl.format(f"{name} '{{}}' is not a timestamp (epoch seconds expected)", _shown(shown_from)),
        )
    ]
    return value, problems


def _convert_currency(
    costs: pl.DataFrame, config: Config, extras: list[str], notes: list[tuple[str, str]] | None
) -> pl.DataFrame:
    """Amounts in another currency become period currency; the originals stay alongside.

    A file that already carries original_amount/original_currency (a re-exported bundle)
    keeps them where they are filled.
    """
    base = config.period.currency.upper()
    given_amount = pl.col("original_amount").cast(pl.Float64, strict=False) if "original_amount" in extras else None
    given_currency = pl.col("original_currency").cast(pl.String) if "original_currency" in extras else None
    costs = costs.with_columns(
        pl.coalesce([e for e in (given_amount, pl.col("amount")) if e is not None]).alias("original_amount"),
        pl.coalesce([e for e in (given_currency, pl.col("currency")) if e is not None]).alias("original_currency"),
    )
    foreign = costs.filter(pl.col("currency") != base)
    if foreign.height and notes is not None:
        codes = ", ".join(sorted(foreign["currency"].unique().to_list()))
        notes.append(("currency converted", f"costs: {foreign.height} rows converted from {codes} to {base}"))
    rate = pl.col("currency").replace_strict(_rates(config), default=None, return_dtype=pl.Float64)
    return costs.with_columns(
        pl.when(pl.col("currency") != base).then(pl.col("amount") * rate).otherwise(pl.col("amount")).alias("amount"),
        pl.lit(base, pl.String).alias("currency"),
    )


# ---- duplicates


def _dedupe(table: str, good: pl.DataFrame, names: list[str]) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Identical rows count once; rows sharing a record key with different content are all rejected.

    Returns (kept rows, rejections as row/reason, number of identical duplicates dropped).
    Tables without a record key are keyed by their whole content.
    """
    key = list(RECORD_KEYS.get(table, ())) or names
    no_conflicts = pl.DataFrame(schema={"row": pl.Int64, "reason": pl.String})
    # Cheap screen first: only rows whose key hash repeats can be duplicates at all.
    suspect = good.select(pl.struct(key).hash().is_duplicated()).to_series()
    if not suspect.any():
        return good, no_conflicts, 0
    marked = good.filter(suspect).with_columns(
        (pl.struct(names).hash().n_unique().over(key) > 1).alias("__conflict"),
        pl.struct(key).is_first_distinct().alias("__first"),
    )
    clash = marked.filter(pl.col("__conflict"))
    repeats = marked.filter(~pl.col("__conflict") & ~pl.col("__first"))
    removed = pl.concat([clash[ROW], repeats[ROW]])
    kept = good.filter(~pl.col(ROW).is_in(removed.implode()))
    return kept, _conflict_reasons(clash, key), repeats.height


def _conflict_reasons(clash: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    if clash.height == 0:
        return pl.DataFrame(schema={"row": pl.Int64, "reason": pl.String})
    groups = clash.group_by(key, maintain_order=True).agg(pl.col(ROW).sort().alias("__rows"))
    shown_rows = pl.col("__rows").list.head(_MAX_ROWS_SHOWN).cast(pl.List(pl.String)).list.join(", ")
    more = pl.col("__rows").list.len().cast(pl.Int64) - _MAX_ROWS_SHOWN
    rows_text = pl.when(more > 0).then(pl.format("{}, ... {} more", shown_rows, more)).otherwise(shown_rows)
    key_text = pl.concat_str(
        [pl.format(f"{k} {{}}", _key_value(k, clash.schema[k])) for k in key], separator=", "
    )
    groups = groups.with_columns(pl.format("conflicting duplicate {} (rows {})", key_text, rows_text).alias("reason"))
    return (
        clash.select(ROW, *key)
        .join(groups.select(*key, "reason"), on=key, how="left", nulls_equal=True)
        .select(pl.col(ROW).alias("row"), "reason")
    )


def _key_value(name: str, dtype: pl.DataType) -> pl.Expr:
    col = pl.col(name)
    if isinstance(dtype, pl.Datetime):
        col = col.dt.to_string("%Y-%m-%dT%H:%M:%S%.fZ")
    return _shown(col).fill_null("(empty)")
