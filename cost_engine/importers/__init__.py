"""Importers: exports of schedulers, metrics stacks and gateways -> canonical contract tables.

Each format module turns its files into rows of the contract tables (values as text, the
way a bundle file would carry them) and names every input record it could not map, with
the reason. `import_files` then passes those rows through the same validation as a bundle
folder (`bundle.validate_frame`), so an imported row is accepted or rejected exactly like a
row of `allocations.csv` would be; validation rejections join the unmapped rows, pointing
back at the input file and row.

    result = import_files("slurm", ["sacct.txt"], config, options=ImportOptions(end_at=...))
    result.frames["allocations"]   # canonical, validated
    result.unmapped                # file, row, reason, table
    result.bundle()                # a Bundle for store.ingest or compute

With `ImportOptions.stored` (what `ailedger import` passes: the target store or folder) the
validated rows are also matched against what is stored (`continue_stored`, continuation.py):
an export that overlaps the last one adds nothing, and records it continues replace the stored
ones (`ImportResult.supersede`, which store.ingest and write_bundle apply).

Row numbers in `unmapped` are 1-based: the line number for line-oriented text (sacct,
JSON lines), the data row for CSV (header excluded, like a bundle file), the record's
position for JSON documents (series, bucket result, span); each format's doc says which.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Protocol
from zoneinfo import ZoneInfo

import polars as pl

from .. import csv_guard, future
from ..continuation import MERGED, SPANS, merge_stored, open_queue
from ..bundle import ROW, Bundle, BundleError, validate_frame
from ..config import Config
from ..contract import TABLES, empty

UTC = timezone.utc
# (table, start, end) -> the records of that interval table already stored (in the store or the
# bundle folder an import writes to) that overlap or touch [start, end], canonical.
StoredLookup = Callable[[str, datetime, datetime], pl.DataFrame]
UNMAPPED_SCHEMA = pl.Schema({"file": pl.String, "row": pl.Int64, "reason": pl.String, "table": pl.String})


class ImportFailed(ValueError):
    """A file that cannot be read at all as the named format (wrong format, broken JSON)."""


@dataclass
class ImportOptions:
    """Format options; each importer reads the ones it needs and ignores the rest."""

    # slurm: where running jobs (End "Unknown") end; without it they are reported unmapped
    end_at: datetime | None = None
    # slurm: (node, GPU index) -> gpu_id, e.g. from an inventory with `node` and `index` columns
    gpu_map: dict[tuple[str, int], str] | None = None
    # slurm: field order of a header-less sacct export (default: DEFAULT_FIELDS of slurm.py)
    columns: list[str] | None = None
    # prometheus: pool of the cards seen; with it an inventory is written (capacity from MIG profile)
    pool: str | None = None
    # vllm, otel: owner key of the rows (vllm: default the `instance` label; otel: service.name)
    owner: str | None = None
    # otel: the attribute (span or resource) that names the owner, instead of service.name
    owner_attribute: str | None = None
    # litellm: which field names the owner: team_id (default, falls back to api_key), api_key, user, end_user
    owner_by: str | None = None
    # prometheus, vllm: the query step in seconds (default: the smallest gap between samples)
    step_s: float | None = None
    # prometheus, vllm: the scrape time of text-exposition samples that carry no timestamp
    at: datetime | None = None
    # prometheus (kube-state-metrics pods), vllm: a label naming the owner instead of the namespace
    owner_label: str | None = None
    # prometheus: a node label (kube_node_labels) naming the pool of a node's cards
    pool_label: str | None = None
    # every format: the time future-dated rows are judged by (future.py; default the wall clock)
    now: datetime | None = None
    # every format: what the target already holds (store_lookup / folder_lookup); with it a job
    # keeps the cards it was stored on, and a re-export continues stored records (see continuation)
    stored: StoredLookup | None = None


@dataclass
class _Row:
    table: str
    file: str
    row: int
    values: dict[str, str | None]


class Parsed:
    """What an importer hands back: canonical rows as text, unmapped records, notes."""

    def __init__(self) -> None:
        self.rows: list[_Row] = []
        self.unmapped: list[tuple[str, int | None, str, str | None]] = []
        self.notes: list[tuple[str, str]] = []
        self.ignored: dict[str, set[str]] = {}

    def add(self, table: str, file: str | Path, row: int | None, **values: Any) -> None:
        if table not in TABLES:
            raise KeyError(f"unknown table {table}")
        self.rows.append(_Row(table, _name(file), row or 0, {k: text(v) for k, v in values.items()}))

    def skip(self, file: str | Path, row: int | None, reason: str, table: str | None = None) -> None:
        """An input record (or part of one) that could not be mapped, and why."""
        self.unmapped.append((_name(file), row, reason, table))

    def note(self, what: str, detail: str) -> None:
        self.notes.append((what, detail))

    def ignore(self, why: str, name: str) -> None:
        """A metric, result type or record kind left out on purpose; listed once per name."""
        self.ignored.setdefault(why, set()).add(name)


class Importer(Protocol):
    """One source format. `read` sees all files at once (a metric may span several files).

    Formats fed by Prometheus may also have `queries` (PromQL selectors, for `--url`) and
    `read_series(series, options, config)` taking what the HTTP API returned.
    """

    name: str
    summary: str

    def read(self, paths: list[Path], options: ImportOptions, config: Config) -> Parsed: ...


@dataclass
class ImportResult:
    format: str
    frames: dict[str, pl.DataFrame]  # canonical, validated frames of the tables the files fed
    unmapped: pl.DataFrame  # file, row, reason, table (table: null when no row was made)
    notes: list[tuple[str, str]] = field(default_factory=list)
    ignored: list[tuple[str, list[str]]] = field(default_factory=list)  # (why, names) left out on purpose
    input_records: bool = True  # whether the input held anything at all (a 0-byte file does not)
    # table -> stored records (canonical) that records of this import continue: store.ingest and
    # write_bundle remove them as they write their continuation (see continuation.py)
    supersede: dict[str, pl.DataFrame] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        return {t: f.height for t, f in self.frames.items()}

    def rows(self) -> int:
        return sum(f.height for f in self.frames.values())

    def main_reason(self) -> str | None:
        """The most common reason input records were not imported, with its count and an example.

        Reasons differ in ids and numbers ("job 1003 ..."), so they are grouped by their text with
        numbers, hex ids and quoted values masked; the first reason of the largest group is shown.
        Without unmapped rows the notes (records skipped on purpose) and ignored names stand in.
        """
        if self.unmapped.height:
            groups: dict[str, list[str]] = {}
            for why in self.unmapped["reason"].to_list():
                groups.setdefault(_reason_key(why), []).append(why)
            best = max(groups.values(), key=len)
            return f"{best[0]} ({len(best)} of {self.unmapped.height} unmapped records)"
        if self.notes:
            return "; ".join(f"{w}: {d}" for w, d in self.notes)
        if self.ignored:
            return "; ".join(f"{why}: {', '.join(names)}" for why, names in self.ignored)
        return None

    def bundle(self) -> Bundle:
        """A Bundle of the imported tables; unmapped rows travel as its rejections."""
        rejected = self.unmapped.select(
            pl.col("table"), pl.col("row"), pl.col("reason"), pl.col("file")
        )
        return Bundle.from_frames(self.frames, rejected=rejected, notes=list(self.notes))


_MASK = re.compile(r"'[^']*'|\"[^\"]*\"|\b[\w.:/-]*\d[\w.:/-]*\b")


def _reason_key(reason: str) -> str:
    return _MASK.sub("#", reason)


# --------------------------------------------------------------------------- registry and entry point

ENTRY_POINT_GROUP = "ailedger.importers"
FORMATS: dict[str, Importer] = {}
PLUGIN_ERRORS: dict[str, str] = {}  # entry point name -> why it could not be loaded


def register(importer: Importer) -> Importer:
    FORMATS[importer.name] = importer
    return importer


def load_entry_points(group: str = ENTRY_POINT_GROUP) -> tuple[dict[str, Importer], dict[str, str]]:
    """The importers installed under the entry-point group, and the ones that failed to load.

    Built-in formats are declared in pyproject.toml under the same group, so a site's own
    format (a package with `[project.entry-points."ailedger.importers"] myfmt = "pkg:IMPORTER"`)
    is found exactly like them. An entry point whose object lacks `name`, `summary` or `read`
    is reported, not registered.
    """
    from importlib.metadata import entry_points

    found: dict[str, Importer] = {}
    errors: dict[str, str] = {}
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        if ep.name in found:
            continue  # the first distribution on the path wins, as for console scripts
        try:
            obj = ep.load()
        except Exception as exc:  # a broken plugin must not take the built-in formats down
            errors[ep.name] = f"{ep.value}: {type(exc).__name__}: {exc}"
            continue
        missing = [a for a in ("name", "summary", "read") if not hasattr(obj, a)]
        if missing:
            errors[ep.name] = f"{ep.value}: not an importer (no {', '.join(missing)})"
            continue
        found[ep.name] = obj
    return found, errors


def import_files(
    fmt: str,
    paths: Iterable[str | Path],
    config: Config | None = None,
    *,
    options: ImportOptions | None = None,
) -> ImportResult:
    """Convert files of one format into validated canonical frames plus unmapped rows."""
    config = config or Config()
    options = options or ImportOptions()
    importer = FORMATS.get(fmt)
    if importer is None:
        raise ValueError(f"unknown import format {fmt!r}; known: {', '.join(sorted(FORMATS))}")
    files = [Path(p) for p in paths]
    for f in files:
        if not f.is_file():
            raise ImportFailed(f"{f}: no such file")
    parsed = importer.read(files, options, config)
    result = validate_parsed(fmt, parsed, config, options.stored, now=options.now)
    result.input_records = any(f.read_bytes().strip() for f in files)
    return result


def validate_parsed(fmt: str, parsed: Parsed, config: Config, stored: StoredLookup | None = None,
                    now: datetime | None = None) -> ImportResult:
    """Pass an importer's rows through bundle validation (also for rows read over HTTP); with
    `stored`, records that continue stored ones take their place (continue_stored).

    Future-dated rows (future.py, judged at `now`) are kept and named in the notes, per table."""
    result = _validate(fmt, parsed, config, future.clock(now))
    if stored is not None:
        continue_stored(result, stored)
    return result


def continue_stored(result: ImportResult, stored: StoredLookup) -> None:
    """Merge the imported records with the stored records they continue (continuation.py).

    Interval tables (allocations, events): the union of a record and the stored ones of the same
    identity that it overlaps or touches replaces them; queue: a stored row of a job that was
    still waiting gives way to the job's new row. An overlapping export therefore adds nothing.
    """
    for table, (lo, hi, _) in MERGED.items():
        frame = result.frames.get(table)
        if frame is None or frame.height == 0:
            continue
        old = stored(table, frame[lo].min(), frame[hi].max())
        if old.height == 0:
            continue
        write, gone = merge_stored(table, frame, old)  # contract columns only, as the store keeps them
        result.frames[table] = write
        if gone.height:
            result.supersede[table] = gone
    queue = result.frames.get("queue")
    if queue is not None and queue.height:
        old = stored("queue", queue["submit"].min(), queue["submit"].max())
        gone = open_queue(queue, old)
        if gone.height:
            result.supersede["queue"] = gone


def store_lookup(db_path: str | Path) -> StoredLookup:
    """What a store already holds, for ImportOptions.stored (store.stored_between)."""
    from .. import store

    return lambda table, start, end: store.stored_between(db_path, table, start, end)


def folder_lookup(folder: str | Path, config: Config | None = None) -> StoredLookup:
    """What a bundle folder already holds, for ImportOptions.stored (its table files, validated)."""
    root, config = Path(folder), config or Config()
    def lookup(table: str, start: datetime, end: datetime) -> pl.DataFrame:
        path = _table_file(root, table) if root.is_dir() else None
        if path is None:
            return empty(table)
        canon, _ = validate_frame(table, frame_as_text(_read_any(path)), config, path.name)
        lo, hi = SPANS[table]
        canon = canon.select([c.name for c in TABLES[table]])
        return canon.filter((pl.col(lo) <= end) & (pl.col(hi).is_null() | (pl.col(hi) >= start)))

    return lookup


def _validate(fmt: str, parsed: Parsed, config: Config, now: datetime) -> ImportResult:
    frames: dict[str, pl.DataFrame] = {}
    unmapped = [
        {"file": f, "row": r, "reason": why, "table": t} for f, r, why, t in parsed.unmapped
    ]
    notes = list(parsed.notes)
    by_table: dict[str, list[_Row]] = {}
    for r in parsed.rows:
        by_table.setdefault(r.table, []).append(r)
    for table, rows in by_table.items():
        names = [c.name for c in TABLES[table]]
        extras = list(dict.fromkeys(k for r in rows for k in r.values if k not in names))
        cols = names + extras
        data = {c: [r.values.get(c) for r in rows] for c in cols}
        raw = pl.DataFrame(data, schema={c: pl.String for c in cols})
        # One ROW per produced row (an input record may give several); mapped back below.
        raw = raw.with_row_index(ROW, offset=1).with_columns(pl.col(ROW).cast(pl.Int64))
        try:
            valid, rejected = validate_frame(table, raw, config, f"{fmt}:{table}", notes=notes)
        except BundleError as exc:  # an importer bug rather than bad input: say so plainly
            raise ImportFailed(f"{fmt}: {exc}") from None
        frames[table] = valid
        for rej in rejected.iter_rows(named=True):
            src = rows[rej["row"] - 1]
            unmapped.append({"file": src.file, "row": src.row or None, "reason": f"{table}: {rej['reason']}",
                             "table": table})
    frame = pl.DataFrame(unmapped, schema=UNMAPPED_SCHEMA) if unmapped else pl.DataFrame(schema=UNMAPPED_SCHEMA)
    frames = {t: frames[t] for t in TABLES if t in frames}  # contract order
    notes += future.gaps(future.scan_tables(frames, now), now)
    ignored = [(why, sorted(names)) for why, names in sorted(parsed.ignored.items())]
    return ImportResult(format=fmt, frames=frames, unmapped=frame.sort("file", "row", nulls_last=True,
                                                                       maintain_order=True), notes=notes,
                        ignored=ignored)


# --------------------------------------------------------------------------- helpers shared by formats


def _name(file: str | Path) -> str:
    return Path(file).name if isinstance(file, Path) else str(file)


def text(v: Any) -> str | None:
    """A value as the text a bundle file would hold (timestamps ISO 8601 with Z)."""
    if v is None:
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, datetime):
        return iso(v)
    if isinstance(v, float):
        if math.isfinite(v) and v == int(v) and abs(v) < 1e15:
            return str(int(v)) if abs(v) >= 1 or v == 0 else repr(v)
        return repr(v)
    return str(v)


def iso(ts: datetime) -> str:
    """ISO 8601 in UTC with Z; fractional seconds only when present. Naive stays naive."""
    if ts.tzinfo is not None:
        ts = ts.astimezone(UTC)
        suffix = "Z"
    else:
        suffix = ""
    base = ts.strftime("%Y-%m-%dT%H:%M:%S")
    if ts.microsecond:
        base += f".{ts.microsecond:06d}".rstrip("0")
    return base + suffix


def from_epoch(seconds: float) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=round(seconds * 1_000_000))


_ISO_RE = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)\s*(Z|z|[+-]\d{2}(?::?\d{2})?)?$"
)


def parse_time(value: str | None, source_tz: str | None = None) -> datetime | None:
    """An ISO 8601 (with or without offset) or epoch-seconds text as a datetime.

    With an offset (or epoch): aware UTC. Without: localised in `source_tz` when given (see
    `localize`: LocalTimeError for a time the zone has twice or not at all), else returned
    naive (callers may still take differences, but never emit it as UTC).
    """
    if value is None:
        return None
    s = str(value).strip()
    if not s:
        return None
    if re.fullmatch(r"[+-]?\d+(\.\d+)?", s):
        x = float(s)
        if abs(x) < 1e11:
            return from_epoch(x)
        return None
    m = _ISO_RE.match(s)
    if not m:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", s):
            m = _ISO_RE.match(s + "T00:00:00")
        if not m:
            return None
    day, clock, off = m.groups()
    if clock.count(":") == 1:
        clock += ":00"
    try:
        naive = datetime.fromisoformat(f"{day}T{clock}")
    except ValueError:
        return None
    if off:
        off = "+00:00" if off in ("Z", "z") else off
        if len(off) == 3:
            off += ":00"
        elif ":" not in off:
            off = off[:3] + ":" + off[3:]
        return datetime.fromisoformat(f"{day}T{clock}{off}").astimezone(UTC)
    if source_tz:
        return localize(naive, source_tz, s)
    return naive


class LocalTimeError(ValueError):
    """A wall-clock time without offset that its zone shows twice (autumn) or never (spring)."""


def local_time_refused(value: str | None, source_tz: str | None) -> bool:
    """Whether parse_time refuses `value` under the local-time rule (to name the field at fault)."""
    try:
        parse_time(value, source_tz)
    except LocalTimeError:
        return True
    return False


def localize(naive: datetime, source_tz: str, shown: str | None = None) -> datetime:
    """A naive wall-clock time of `source_tz` as aware UTC: the one local-time rule of every importer.

    Bundle validation's rule too (`bundle_validate._localise`, same wording): a time that
    happens twice at the autumn change, or never in the spring gap, is refused with
    LocalTimeError, never guessed; only an offset can say which one the source meant.
    """
    zone = ZoneInfo(source_tz)
    first, second = naive.replace(tzinfo=zone, fold=0), naive.replace(tzinfo=zone, fold=1)
    if first.utcoffset() != second.utcoffset():
        what = shown if shown is not None else iso(naive)
        if first.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != naive:
            raise LocalTimeError(f"'{what}' does not exist in {source_tz} (DST gap; give an offset)")
        raise LocalTimeError(f"'{what}' is ambiguous in {source_tz} (DST change; give an offset)")
    return first.astimezone(UTC)


def to_int(v: Any) -> int | None:
    """An integer from JSON/text (OTLP intValue arrives as a string); None when absent."""
    if v is None or v == "":
        return None
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"\s*[+-]?\d+\s*", v):
        return int(v)  # exact, even for nanosecond timestamps
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f) or f != int(f):
        return None
    return int(f)


def to_float(v: Any) -> float | None:
    if v is None or v == "" or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def load_json_records(path: Path) -> Iterator[tuple[int, Any]]:
    """(row, document) for a JSON file, or for each line of a JSON-lines file.

    A whole-file JSON document is row 1; JSON lines are numbered by line. Raises
    ImportFailed when the file is neither.
    """
    raw = path.read_bytes()
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        content = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ImportFailed(f"{path.name}: is not UTF-8 text (byte {exc.start})") from None
    if not content.strip():
        return
    try:
        doc = json.loads(content)
    except ValueError:
        doc = None
        lines = content.split("\n")
        parsed: list[tuple[int, Any]] = []
        for i, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                parsed.append((i, json.loads(line)))
            except ValueError:
                raise ImportFailed(f"{path.name}: line {i} is not valid JSON") from None
        yield from parsed
        return
    yield 1, doc


def dig(obj: Any, *path: str) -> Any:
    """obj[p0][p1]...; JSON text at any level is decoded; None when a step is missing."""
    cur = obj
    for p in path:
        if isinstance(cur, str):
            try:
                cur = json.loads(cur)
            except ValueError:
                return None
        if not isinstance(cur, dict):
            return None
        cur = cur.get(p)
    return cur


def gpu_map_from_inventory(inventory: pl.DataFrame) -> dict[tuple[str, int], str]:
    """(node, index) -> gpu_id from an inventory frame with `node` and an extra `index` column.

    The collector writes that column (the NVML device index); a hand-made inventory may too.
    MIG rows (an index like `0/3`) are left out: schedulers hand out whole cards by index.
    """
    if "index" not in inventory.columns or "node" not in inventory.columns:
        return {}
    out: dict[tuple[str, int], str] = {}
    for node, idx, gpu in inventory.select("node", pl.col("index").cast(pl.String), "gpu_id").iter_rows():
        i = to_int(idx)
        if node is not None and i is not None and gpu is not None:
            out[(str(node), i)] = str(gpu)
    return out


def read_inventory_file(path: Path, config: Config | None = None) -> pl.DataFrame:
    """An inventory file (csv, jsonl, parquet) as raw columns, extra columns kept (for gpu maps)."""
    name = path.name
    if name.endswith(".parquet"):
        return pl.read_parquet(path)
    if name.endswith(".jsonl"):
        return pl.read_ndjson(path, infer_schema_length=None)
    return csv_guard.unguard_frame(pl.read_csv(path, infer_schema=False))


def empty_frames(tables: Iterable[str]) -> dict[str, pl.DataFrame]:
    return {t: empty(t) for t in tables}


# --------------------------------------------------------------------------- writing into a bundle folder

_TABLE_SUFFIXES = (".csv", ".csv.gz", ".parquet", ".jsonl", ".jsonl.gz")
_LINE = "__import_line__"


@dataclass
class TableWrite:
    table: str
    file: str
    added: int = 0
    unchanged: int = 0
    replaced: int = 0
    conflicts: list[str] = field(default_factory=list)  # record keys already there with other content
    superseded: int = 0  # records there that imported ones continue (removed; see continuation.py)


class BundleConflict(ValueError):
    """Imported records whose key exists in the folder with other content (nothing written)."""

    def __init__(self, writes: list[TableWrite]) -> None:
        self.writes = writes
        parts = [f"{w.file}: {len(w.conflicts)} records ({', '.join(w.conflicts[:3])}"
                 f"{', ...' if len(w.conflicts) > 3 else ''})" for w in writes if w.conflicts]
        super().__init__("imported records conflict with existing ones: " + "; ".join(parts))


def frame_as_text(frame: pl.DataFrame) -> pl.DataFrame:
    """Every column as the text a bundle file holds (timestamps ISO 8601 with Z)."""
    out = []
    for name, dtype in frame.schema.items():
        col = pl.col(name)
        if isinstance(dtype, pl.Datetime):
            col = col.dt.convert_time_zone("UTC") if dtype.time_zone else col
            col = col.dt.to_string("%Y-%m-%dT%H:%M:%S%.f" + ("Z" if dtype.time_zone else ""))
        elif dtype != pl.String:
            col = col.cast(pl.String)
        out.append(col.alias(name))
    return frame.select(out)


def _table_file(folder: Path, table: str) -> Path | None:
    found = [folder / f"{table}{s}" for s in _TABLE_SUFFIXES if (folder / f"{table}{s}").exists()]
    if len(found) > 1:
        raise ImportFailed(f"{folder} has {len(found)} files for table {table}: keep one")
    return found[0] if found else None


def _read_any(path: Path) -> pl.DataFrame:
    name = path.name
    if name.endswith(".parquet"):
        return pl.read_parquet(path)
    if name.endswith((".jsonl", ".jsonl.gz")):
        return pl.read_ndjson(path, infer_schema_length=None)
    return csv_guard.unguard_frame(pl.read_csv(path, infer_schema=False))


def write_bundle(result: ImportResult, folder: str | Path, config: Config | None = None,
                 *, replace: bool = False) -> list[TableWrite]:
    """Merge the imported frames into a bundle folder, all or nothing.

    A table without a file gets `<table>.csv`; an existing file (CSV, JSONL or Parquet) is
    rewritten in its format with the new records appended. Records already there with the
    same content are skipped (a re-import changes nothing); a record key already there with
    other content is a conflict: BundleConflict and nothing written, unless `replace`. The
    records of `result.supersede` (continued by imported ones) are removed as they are written.
    """
    config = config or Config()
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    plans: list[tuple[TableWrite, Path, pl.DataFrame | None, list[int], list[int]]] = []
    for table in dict.fromkeys([*result.frames, *result.supersede]):
        new = result.frames.get(table, empty(table))
        gone = result.supersede.get(table)
        if new.height == 0 and (gone is None or gone.height == 0):
            continue
        path = _table_file(root, table)
        if path is None:
            w = TableWrite(table, f"{table}.csv", added=new.height)
            plans.append((w, root / f"{table}.csv", None, list(range(new.height)), []))
            continue
        old = _read_any(path)
        old_text = frame_as_text(old).with_row_index(_LINE)
        canon, _rej = validate_frame(table, old_text.with_columns(pl.col(_LINE).cast(pl.String)), config, path.name)
        canon_text = frame_as_text(canon.select(*[c.name for c in TABLES[table]], _LINE))
        keys = list(_record_key(table))
        superseded: list[int] = []
        again = 0  # continuations under the key of the record they supersede: replaced, not added
        new_canon = frame_as_text(new.select(*[c.name for c in TABLES[table]]))
        if gone is not None and gone.height:
            content_cols = [c.name for c in TABLES[table]]
            lines = canon_text.join(frame_as_text(gone.select(content_cols)), on=content_cols, how="semi",
                                    nulls_equal=True)
            superseded = lines[_LINE].cast(pl.Int64).to_list()
            canon_text = canon_text.filter(~pl.col(_LINE).cast(pl.Int64).is_in(superseded))
            if keys != content_cols:
                again = new_canon.join(lines.select(keys).unique(), on=keys, how="semi", nulls_equal=True).height
        content = [c.name for c in TABLES[table]]
        h = pl.struct(content).hash().alias("__h")
        old_k = canon_text.select(*keys, pl.col(_LINE).cast(pl.Int64), h)
        new_k = new_canon.with_row_index("__i").select("__i", *keys, h)
        # Per new record: the old lines with its key, and whether one of them has its content.
        m = (
            new_k.join(old_k, on=keys, how="left", nulls_equal=True, suffix="_old")
            .group_by("__i", maintain_order=True)
            .agg(pl.col(_LINE).drop_nulls().alias("lines"), (pl.col("__h_old") == pl.col("__h")).any().alias("same"),
                 *(pl.col(k).first() for k in keys))
            .sort("__i")
        )
        w = TableWrite(table, path.name, superseded=len(superseded))
        fresh = m.filter(pl.col("lines").list.len() == 0)
        same = m.filter((pl.col("lines").list.len() > 0) & pl.col("same").fill_null(False))
        clash = m.filter((pl.col("lines").list.len() > 0) & ~pl.col("same").fill_null(False))
        w.added, w.unchanged, w.replaced = fresh.height - again, same.height, again
        keep_new = fresh["__i"].to_list()
        drop_old: list[int] = list(superseded)
        if replace:
            keep_new = sorted(keep_new + clash["__i"].to_list())
            drop_old += clash["lines"].explode().drop_nulls().to_list()
            w.replaced += clash.height
        else:
            w.conflicts = [", ".join(f"{k} {v}" for k, v in zip(keys, vals)) for vals in clash.select(keys).iter_rows()]
        plans.append((w, path, old, keep_new, drop_old))
    writes = [p[0] for p in plans]
    if any(w.conflicts for w in writes):
        raise BundleConflict(writes)
    for w, path, old, keep_new, drop_old in plans:
        typed = result.frames.get(w.table, empty(w.table))[keep_new]
        if old is None:
            csv_guard.write_csv(frame_as_text(typed), path)
            continue
        if typed.height == 0 and not drop_old:
            continue
        if path.name.endswith(".gz"):
            raise ImportFailed(f"{path.name}: cannot add to a gzip file; unpack it first")
        kept = old.with_row_index(_LINE).filter(~pl.col(_LINE).is_in(drop_old)).drop(_LINE)
        tmp = path.with_name(path.name + ".tmp")
        if path.name.endswith(".parquet"):
            pl.concat([kept, typed], how="diagonal_relaxed").write_parquet(tmp)
        else:
            merged = pl.concat([frame_as_text(kept), frame_as_text(typed)], how="diagonal_relaxed")
            if path.name.endswith(".jsonl"):
                merged.write_ndjson(tmp)
            else:
                csv_guard.write_csv(merged, tmp)
        tmp.replace(path)
    return writes


def _record_key(table: str) -> tuple[str, ...]:
    from ..contract import RECORD_KEYS

    return RECORD_KEYS.get(table) or tuple(c.name for c in TABLES[table])


# The formats, built-in ones included, come through the entry-point group (loaded last: the
# format modules use the helpers above).
_found, _errors = load_entry_points()
FORMATS.update(_found)
PLUGIN_ERRORS.update(_errors)

__all__ = [
    "BundleConflict",
    "FORMATS",
    "ImportFailed",
    "ImportOptions",
    "ImportResult",
    "Importer",
    "LocalTimeError",
    "localize",
    "local_time_refused",
    "StoredLookup",
    "continue_stored",
    "folder_lookup",
    "store_lookup",
    "ENTRY_POINT_GROUP",
    "PLUGIN_ERRORS",
    "load_entry_points",
    "validate_parsed",
    "Parsed",
    "gpu_map_from_inventory",
    "import_files",
    "parse_time",
    "read_inventory_file",
    "write_bundle",
]
