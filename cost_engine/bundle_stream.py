"""Large bundle files read and validated batch by batch and spilled to memory-mapped Arrow files,
so reading stays bounded whatever the size."""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import gzip
import io
import itertools
import mmap
import os
import shutil
import tempfile
import weakref
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.ipc as pa_ipc

from . import csv_guard, unicode_names
from .config import Config
from .contract import RECORD_KEYS, TABLES
from .bundle_formats import (
    _check_text, _csv_error, _drop_blank_rows, _format_of, _head, _is_blank, _note_blank_rows,
    _parquet_columns, _parquet_error, _reserve_row, _strip_bom, _tidy_header,
)
from .bundle_validate import (
    BundleError, REJECTIONS_SCHEMA, ROW, _check_columns, _checked, _dedupe, _finish, _note_nfc,
    _text_columns, validate_frame,
)

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
