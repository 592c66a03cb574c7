"""Big Parquet files stream through read_bundle, and read bundles take the store's fast ingest path.

Both are speed paths: they must give exactly what the whole-file reader and the staged ingest give.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import cost_engine.bundle_stream as bundle_mod  # the streaming thresholds live there
from cost_engine import store
from cost_engine.bundle import read_bundle
from cost_engine.config import Config
from cost_engine.contract import RECORD_KEYS, TABLE_NAMES

T0 = datetime(2026, 10, 1, tzinfo=timezone.utc)
ALLOCATIONS = (
    "allocation_id,gpu_id,start,end,owner\n"
    "a1,g1,2026-10-01T00:00:00Z,2026-10-01T06:00:00Z,A1\n"
    "a2,g2,2026-10-01T00:00:00Z,2026-10-01T12:00:00Z,B1\n"
)


def _telemetry(n: int) -> pl.DataFrame:
    """n typed telemetry rows for two cards, with bad rows and duplicates spread over the file."""
    i = pl.int_range(0, n, eager=True)
    good = pl.DataFrame(
        {
            "ts": [T0 + timedelta(seconds=10 * (k // 2)) for k in range(n)],
            "gpu_id": ["g1" if k % 2 == 0 else "g2" for k in range(n)],
            "util_pct": (i % 100).cast(pl.Float64),
            "power_w": (i * 1.5 + 100).cast(pl.Float64),
            "energy_j": pl.Series([None if k % 7 == 0 else float(k * 1000) for k in range(n)]),
            "mem_used_mib": pl.Series([float(k) for k in range(n)]),
            "rack": pl.Series([f"r{k % 3}" for k in range(n)]),  # an extra column, kept as text
        }
    )
    first, last = good.row(0, named=True), good.row(n - 1, named=True)
    bad = pl.DataFrame(
        [
            {**first, "util_pct": 55.0},  # conflicting duplicate of row 1, far away in another batch
            {**good.row(10, named=True)},  # identical duplicate of row 11
            {**good.row(5, named=True), "power_w": 1.0},  # conflicting duplicate of row 6
            {**last, "power_w": -5.0},  # negative power (also a key already seen: only rejected)
            {**last, "gpu_id": None},  # missing gpu_id
            {**last, "util_pct": float("nan")},  # NaN
            {**good.row(3, named=True)},  # identical duplicate of row 4
            {**last, "util_pct": 101.0},  # out of range
        ],
        schema=good.schema,
    )
    return pl.concat([good, bad])


def _folder(tmp_path: Path, n: int = 40) -> Path:
    folder = tmp_path / "bundle"
    folder.mkdir()
    (folder / "allocations.csv").write_text(ALLOCATIONS, encoding="utf-8")
    _telemetry(n).write_parquet(folder / "telemetry.parquet", row_group_size=8)
    return folder


def _read(folder: Path, monkeypatch: pytest.MonkeyPatch, *, stream: bool, batch_rows: int = 5):
    """read_bundle with the streaming path forced on or off; also counts streamed Parquet files."""
    calls: list[str] = []
    original = bundle_mod._stream_parquet

    def spy(table, path, *args):
        calls.append(path.name)
        return original(table, path, *args)

    with monkeypatch.context() as m:
        m.setattr(bundle_mod, "STREAM_MIN_BYTES", 0 if stream else 2**62)
        m.setattr(bundle_mod, "STREAM_BATCH_ROWS", batch_rows)
        m.setattr(bundle_mod, "_stream_parquet", spy)
        return read_bundle(folder, Config()), calls


def test_streamed_parquet_matches_whole_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _folder(tmp_path)
    whole, whole_calls = _read(folder, monkeypatch, stream=False)
    streamed, calls = _read(folder, monkeypatch, stream=True)
    assert whole_calls == [] and calls == ["telemetry.parquet"]

    for table in TABLE_NAMES:
        assert_frame_equal(streamed.tables[table], whole.tables[table])
    assert_frame_equal(streamed.rejected, whole.rejected)
    assert streamed.notes == whole.notes
    assert streamed.unique_keys and whole.unique_keys

    # What both found: row numbers continue across batches (the bad rows sit at 41..48).
    rej = streamed.rejected.filter(pl.col("table") == "telemetry").sort("row")
    rows = dict(zip(rej["row"].to_list(), rej["reason"].to_list()))
    assert set(rows) == {1, 6, 41, 43, 44, 45, 46, 48}
    assert "util_pct 101.0 outside 0..100" in rows[48]
    assert rows[1].startswith("conflicting duplicate gpu_id g1, ts 2026-10-01T00:00:00") and "rows 1, 41" in rows[1]
    assert rows[41] == rows[1]
    assert "rows 6, 43" in rows[6] and "rows 6, 43" in rows[43]
    assert "power_w -5.0 is negative" in rows[44]
    assert "missing required gpu_id" in rows[45]
    assert "util_pct is NaN" in rows[46]
    assert ("duplicate rows", "telemetry: 2 identical duplicate rows counted once") in streamed.notes
    tel = streamed["telemetry"]
    assert tel.height == 40 - 2  # rows 1 and 6 lost to their conflicting duplicates
    assert tel["rack"].dtype == pl.String
    assert tel.select(pl.struct("gpu_id", "ts").is_unique().all()).item()


@pytest.mark.parametrize("batch_rows", [1, 7, 1000])
def test_streamed_parquet_any_batch_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_rows: int) -> None:
    folder = _folder(tmp_path, n=24)
    whole, _ = _read(folder, monkeypatch, stream=False)
    streamed, calls = _read(folder, monkeypatch, stream=True, batch_rows=batch_rows)
    assert calls == ["telemetry.parquet"]
    assert_frame_equal(streamed["telemetry"], whole["telemetry"])
    assert_frame_equal(streamed.rejected, whole.rejected)
    assert streamed.notes == whole.notes


def test_empty_parquet_is_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "bundle"
    folder.mkdir()
    (folder / "allocations.csv").write_text(ALLOCATIONS, encoding="utf-8")
    _telemetry(12).head(0).write_parquet(folder / "telemetry.parquet")
    whole, _ = _read(folder, monkeypatch, stream=False)
    streamed, _ = _read(folder, monkeypatch, stream=True)
    assert ("empty file", "telemetry.parquet") in streamed.notes
    assert streamed.notes == whole.notes
    assert_frame_equal(streamed["telemetry"], whole["telemetry"])


# --------------------------------------------------------------------------- ingest fast path


def _stored(db: Path) -> dict[str, pl.DataFrame]:
    """Every stored record with its content hash (not when or by which ingest it came).

    The fast path stores NULL and the hash is computed when a later ingest meets the key
    (store._stored_hash): compare that effective hash, which must equal the staged path's.
    """
    out = {}
    with duckdb.connect(str(db), read_only=True) as con:
        for t in TABLE_NAMES:
            order = ", ".join(f'"{k}"' for k in RECORD_KEYS.get(t, ("_content_hash",)))
            out[t] = pl.from_arrow(
                con.sql(
                    f"SELECT * EXCLUDE (_ingested_at, _ingest_id, _content_hash), "
                    f'{store._stored_hash(t, "x")} AS _content_hash FROM "{t}" x ORDER BY {order}'
                ).to_arrow_table()
            )
    return out


def _assert_same_store(a: Path, b: Path) -> None:
    sa, sb = _stored(a), _stored(b)
    for t in TABLE_NAMES:
        assert_frame_equal(sa[t], sb[t], check_dtypes=True)


def _slow(b) -> object:
    """The same bundle without the reader's unique-key promise: the staged path."""
    return dataclasses.replace(b, unique_keys=False)


@pytest.fixture
def read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    folder = _folder(tmp_path)
    b, _ = _read(folder, monkeypatch, stream=True)
    return b


def test_fast_ingest_stores_what_the_staged_path_stores(tmp_path: Path, read) -> None:
    fast_db, slow_db = tmp_path / "fast.duckdb", tmp_path / "slow.duckdb"
    seen: list[tuple[str, int, int]] = []
    fast = store.ingest(fast_db, read, batch_rows=7, progress=lambda t, d, n: seen.append((t, d, n)))
    slow = store.ingest(slow_db, _slow(read), batch_rows=7)
    assert fast.inserted == slow.inserted and fast.total_inserted == sum(read[t].height for t in TABLE_NAMES)
    _assert_same_store(fast_db, slow_db)
    tel = [(d, n) for t, d, n in seen if t == "telemetry"]
    assert tel == [(min(k, 38), 38) for k in range(7, 38 + 7, 7)]

    again = store.ingest(fast_db, read)
    assert again.total_inserted == 0 and again.total_unchanged == fast.total_inserted
    _assert_same_store(fast_db, slow_db)


def test_fast_ingest_partly_stored(tmp_path: Path, read) -> None:
    """Half of the telemetry already stored: the other half is inserted, none twice."""
    fast_db, slow_db = tmp_path / "fast.duckdb", tmp_path / "slow.duckdb"
    half = dataclasses.replace(read, tables={**read.tables, "telemetry": read["telemetry"].head(19)})
    for db, b in ((fast_db, read), (slow_db, _slow(read))):
        store.ingest(db, dataclasses.replace(half, unique_keys=b.unique_keys))
        result = store.ingest(db, b, batch_rows=5)
        assert (result.inserted["telemetry"], result.unchanged["telemetry"]) == (19, 19)
    _assert_same_store(fast_db, slow_db)


def test_fast_ingest_conflicts_and_replace(tmp_path: Path, read) -> None:
    fast_db, slow_db = tmp_path / "fast.duckdb", tmp_path / "slow.duckdb"
    tel = read["telemetry"]
    changed = tel.with_columns(
        pl.when(pl.int_range(pl.len()) == 3).then(pl.col("util_pct") + 1).otherwise(pl.col("util_pct"))
    )
    edited = dataclasses.replace(read, tables={**read.tables, "telemetry": changed})
    for db, b in ((fast_db, edited), (slow_db, _slow(edited))):
        store.ingest(db, read)
        before = _stored(db)
        with pytest.raises(store.StoreConflict) as info:
            store.ingest(db, b)
        assert [(c.table, c.count) for c in info.value.conflicts] == [("telemetry", 1)]
        after = _stored(db)
        for t in TABLE_NAMES:
            assert_frame_equal(after[t], before[t])  # refused whole
        result = store.ingest(db, b, replace=True, batch_rows=4)
        assert (result.inserted["telemetry"], result.replaced["telemetry"]) == (0, 1)
        assert result.unchanged["telemetry"] == tel.height - 1
    _assert_same_store(fast_db, slow_db)
    stored = _stored(fast_db)["telemetry"]
    assert stored.height == tel.height
    assert sorted(stored["util_pct"].to_list()) == sorted(changed["util_pct"].to_list())
