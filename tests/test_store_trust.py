"""The store under load and across versions: readers during an ingest, and migrations.

Covered elsewhere, not repeated here (tests/test_store.py):
- ingest is one transaction: test_failure_mid_ingest_leaves_store_as_before and, with a real
  SIGKILL of the ingesting process, test_sigkill_mid_ingest_keeps_earlier_data;
- re-ingest is idempotent: test_reingest_identical_changes_nothing, test_duplicates_inside_a_bundle;
- a conflicting id is rejected, not overwritten, unless replace=True:
  test_conflict_rejects_whole_ingest_then_replace, test_conflict_message_lists_first_keys_of_many;
- the migration machinery with a made-up step: test_migrations.

Here: the dashboard keeps serving while another process ingests (each read sees the store
before or after the ingest, whole, and never fails), ingests wait for readers, the waits are
bounded (StoreBusy), and a store written by schema version 1 opens, migrates to 2 and keeps
its data. The design is in docs/store.md.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from cost_engine import contract, store
from cost_engine.bundle import Bundle
from cost_engine.contract import TABLE_NAMES

from tests.test_store import REPO, T0, UTC, frame, h  # noqa: E402,F401  (shared store-test builders)


def allocations(n: int) -> pl.DataFrame:
    return frame("allocations", [
        {"allocation_id": f"a{i}", "gpu_id": f"g{i % 2}", "start": h(i), "end": h(i + 1), "owner": "team-a",
         "source": "scheduler", "share": 1.0, "workload": "other"}
        for i in range(n)
    ])


def telemetry(n: int) -> pl.DataFrame:
    i = pl.int_range(n)
    return pl.select(
        ts=pl.lit(T0) + pl.duration(seconds=i // 64),
        gpu_id=pl.lit("gpu-") + (i % 64).cast(pl.String),
        util_pct=(i % 101).cast(pl.Float64),
        power_w=pl.lit(None, pl.Float64), energy_j=pl.lit(None, pl.Float64), mem_used_mib=pl.lit(None, pl.Float64),
    ).cast(dict(contract.schema("telemetry")))


def run_child(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ledger.duckdb"


# --------------------------------------------------------------------------- readers during an ingest

INGEST_CHILD = """
import sys
from datetime import datetime, timedelta, timezone
import polars as pl
from cost_engine import contract, store
from cost_engine.bundle import Bundle

path, n = sys.argv[1], int(sys.argv[2])
t0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
i = pl.int_range(n)
tel = pl.select(
    ts=pl.lit(t0) + pl.duration(seconds=i // 64),
    gpu_id=pl.lit("gpu-") + (i % 64).cast(pl.String),
    util_pct=(i % 101).cast(pl.Float64),
    power_w=pl.lit(300.0), energy_j=pl.lit(None, pl.Float64), mem_used_mib=pl.lit(None, pl.Float64),
).cast(dict(contract.schema("telemetry")))
alloc = pl.DataFrame([{"allocation_id": "a-new", "gpu_id": "g1", "start": t0, "end": t0 + timedelta(hours=1),
                       "owner": "team-b"}]).select(
    [(pl.col(c) if c in ("allocation_id", "gpu_id", "start", "end", "owner") else pl.lit(None)).cast(d).alias(c)
     for c, d in contract.schema("allocations").items()])
print("start", flush=True)
store.ingest(path, Bundle.from_frames({"allocations": alloc, "telemetry": tel}),
             progress=lambda t, done, total: print("progress", t, done, total, flush=True), batch_rows=100_000)
print("COMMITTED", flush=True)
"""


def _collect(stream, lines: list[tuple[float, str]]) -> None:
    for line in stream:
        lines.append((time.monotonic(), line.strip()))


def test_readers_see_old_or_new_never_half_and_never_fail(db: Path) -> None:
    """A subprocess ingests 1.5M telemetry rows and one allocation (15 batches, one transaction)
    while this process keeps reading: every read completes, and shows either the store before
    the ingest or after it, the two tables always from the same state."""
    store.ingest(db, Bundle.from_frames({"allocations": allocations(3), "telemetry": telemetry(1000)}))
    old = (3, 1000, store.data_version(db))
    n = 1_500_000

    child = run_child(INGEST_CHILD, str(db), str(n))
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=_collect, args=(child.stdout, lines), daemon=True)
    reader.start()
    reads: list[tuple[float, float, tuple[int, int, str]]] = []
    errors: list[BaseException] = []
    try:
        deadline = time.monotonic() + 300
        while child.poll() is None and time.monotonic() < deadline:
            began = time.monotonic()
            try:
                version = store.data_version(db)
                b = store.load_bundle(db, tables=["allocations", "telemetry"])
                again = store.data_version(db)
                page = store.query_records(db, "allocations", limit=None)
            except BaseException as exc:  # noqa: BLE001 - any failure of a read is the finding
                errors.append(exc)
                break
            reads.append((began, time.monotonic(), (b["allocations"].height, b["telemetry"].height, version)))
            # one connection per call: each call sees a whole state of its own
            assert page.height in (3, 4)
            assert again in (old[2], version) or version == old[2]
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=60)
        reader.join(timeout=10)
    assert not errors, errors
    assert child.returncode == 0, child.stderr.read() if child.stderr else ""
    assert any(text == "COMMITTED" for _, text in lines)

    new_version = store.data_version(db)
    new = (4, 1000 + n, new_version)
    assert new_version != old[2]
    for _, _, (alloc_rows, tel_rows, version) in reads:
        # load_bundle reads both tables in one connection: never one table before, one after
        assert (alloc_rows, tel_rows) in ((old[0], old[1]), (new[0], new[1])), (alloc_rows, tel_rows)
        assert version in (old[2], new[2])
    # some read was in flight while the ingest wrote its batches: it waited, and did not fail
    first_batch = next(t for t, text in lines if text.startswith("progress"))
    committed = next(t for t, text in lines if text == "COMMITTED")
    assert any(began < committed and ended > first_batch for began, ended, _ in reads), (reads, first_batch, committed)
    final = store.load_bundle(db, tables=["allocations", "telemetry"])
    assert (final["allocations"].height, final["telemetry"].height) == (4, 1000 + n)


HOLD_CHILD = """
import sys, time
from pathlib import Path
from cost_engine import store
path, mode, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
with store.connect(path, read_only=(mode == "read")):
    print("holding", flush=True)
    time.sleep(seconds)
    # Written while the connection is still open: whoever waited for this connection finds it.
    Path(path + ".letting-go").touch()
print("released", flush=True)
"""


def _letting_go(db: Path) -> Path:
    """The file the holding child writes just before it closes its connection."""
    return Path(str(db) + ".letting-go")


def _hold(db: Path, mode: str, seconds: float) -> subprocess.Popen:
    _letting_go(db).unlink(missing_ok=True)
    child = run_child(HOLD_CHILD, str(db), mode, str(seconds))
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    assert line == "holding", line + (child.stderr.read() if child.stderr else "")
    return child


def test_ingest_waits_for_a_reader_in_another_process(db: Path) -> None:
    store.ingest(db, Bundle.from_frames({"allocations": allocations(2)}))
    child = _hold(db, "read", 1.5)
    try:
        result = store.ingest(db, Bundle.from_frames({"allocations": allocations(5)}))
        # The ingest could only finish once the reader was letting go: it waited for the reader
        # instead of failing with "Could not set lock" (a state, not a time: no clock is read).
        assert _letting_go(db).exists()
    finally:
        child.wait(timeout=30)
    assert result.inserted["allocations"] == 3


def test_reader_waits_for_a_writer_in_another_process(db: Path) -> None:
    store.ingest(db, Bundle.from_frames({"allocations": allocations(2)}))
    version = store.data_version(db)
    child = _hold(db, "write", 1.0)
    try:
        assert store.data_version(db) == version
        assert _letting_go(db).exists()  # it read once the writer was letting go, not before
    finally:
        child.wait(timeout=30)


def test_waits_are_bounded(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store.ingest(db, Bundle.from_frames({"allocations": allocations(2)}))
    monkeypatch.setattr(store, "READ_WAIT_S", 0.3)
    monkeypatch.setattr(store, "WRITE_WAIT_S", 0.3)
    child = _hold(db, "write", 3.0)
    try:
        with pytest.raises(store.StoreBusy, match="could not open the store to read within 0.3 s"):
            store.load_bundle(db)
    finally:
        child.kill()
        child.wait(timeout=30)
    child = _hold(db, "read", 3.0)
    try:
        with pytest.raises(store.StoreBusy, match="to write within 0.3 s"):
            store.ingest(db, Bundle.from_frames({"allocations": allocations(4)}))
    finally:
        child.kill()
        child.wait(timeout=30)
    assert store.load_bundle(db)["allocations"].height == 2  # nothing half-done either way


def test_reader_waits_for_a_writer_in_the_same_process(db: Path) -> None:
    """Inside one process (the dashboard ingesting an upload while another session reads),
    DuckDB refuses a read-only connection next to a write one; the reader waits instead."""
    store.ingest(db, Bundle.from_frames({"allocations": allocations(2)}))
    opened = threading.Event()

    def write() -> None:
        with store.connect(db, read_only=False) as con:
            opened.set()
            time.sleep(0.6)
            con.execute("SELECT 1").fetchall()

    writer = threading.Thread(target=write)
    writer.start()
    assert opened.wait(10)
    try:
        assert store.load_bundle(db)["allocations"].height == 2
    finally:
        writer.join()


# --------------------------------------------------------------------------- schema version 1 -> 2

# The store layout of schema version 1, frozen as it was (cost_engine/store.py before v2).
V1_STORE_DDL = {
    "meta": "key VARCHAR PRIMARY KEY, value VARCHAR",
    "ingests": (
        'id BIGINT PRIMARY KEY, ingested_at TIMESTAMPTZ, "replace" BOOLEAN, source VARCHAR, rows_in BIGINT, '
        "inserted BIGINT, unchanged BIGINT, replaced BIGINT, rejected BIGINT, notes BIGINT, tables VARCHAR"
    ),
    "rejected": '"table" VARCHAR, "row" BIGINT, reason VARCHAR, file VARCHAR, ingest_id BIGINT, seq BIGINT',
    "notes": "what VARCHAR, detail VARCHAR, ingest_id BIGINT, seq BIGINT",
    "present_tables": '"table" VARCHAR PRIMARY KEY, ingest_id BIGINT',
}
V1_INGESTED_AT = datetime(2026, 9, 30, 12, tzinfo=UTC)


def v1_frames() -> dict[str, pl.DataFrame]:
    return {
        "allocations": allocations(3),
        "owners": frame("owners", [{"tenant": "acme", "project": "team-a"}, {"tenant": "acme", "project": "team-b"}]),
        "costs": frame("costs", [{"cost_id": "c1", "category": "gpu_rental", "amount": 48.0, "currency": "USD",
                                  "start": h(0), "end": h(24), "pool": "p1"}]),
    }


def write_v1_store(path: Path, frames: dict[str, pl.DataFrame]) -> None:
    """A store as schema version 1 wrote it: its DDL, one ingest, content hashes (hash version 1)."""
    assert store.HASH_VERSION == 1  # a hash change would need its own migration test
    con = duckdb.connect(str(path))
    try:
        con.execute("SET TimeZone = 'UTC'")
        for name, ddl in V1_STORE_DDL.items():
            con.execute(f'CREATE TABLE "{name}" ({ddl})')
        for table in TABLE_NAMES:
            cols = ", ".join(f'"{c.name}" {store._sql_type(c.dtype)}' for c in contract.TABLES[table])
            con.execute(f'CREATE TABLE "{table}" ({cols}, _content_hash UHUGEINT, _ingested_at TIMESTAMPTZ, '
                        "_ingest_id BIGINT)")
        for table, f in frames.items():
            con.register("src", f.to_arrow())
            names = ", ".join(f'"{c}"' for c in f.columns)
            con.execute(f'INSERT INTO "{table}" SELECT {names}, {store._hash_expr(table)}, ?, 1 FROM src',
                        [V1_INGESTED_AT])
            con.unregister("src")
            con.execute("INSERT INTO present_tables VALUES (?, 1)", [table])
        rows = sum(f.height for f in frames.values())
        con.execute("INSERT INTO ingests VALUES (1, ?, false, 'v1 bundle', ?, ?, 0, 0, 1, 1, '{}')",
                    [V1_INGESTED_AT, rows, rows])
        con.execute("INSERT INTO rejected VALUES ('costs', 2, 'amount -1 is negative', 'costs.csv', 1, 0)")
        con.execute("INSERT INTO notes VALUES ('empty file', 'telemetry.csv', 1, 0)")
        for key, value in (("schema_version", "1"), ("hash_version", "1"), ("store_id", uuid.uuid4().hex),
                           ("created_at", V1_INGESTED_AT.isoformat())):
            con.execute("INSERT INTO meta VALUES (?, ?)", [key, value])
    finally:
        con.close()


def ingest_columns(db: Path) -> list[str]:
    with duckdb.connect(str(db), read_only=True) as con:
        return [r[0] for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = 'ingests' ORDER BY column_index").fetchall()]


def test_v1_store_reads_migrates_and_keeps_its_data(db: Path) -> None:
    frames = v1_frames()
    write_v1_store(db, frames)
    assert store.SCHEMA_VERSION == 3 and 1 in store.MIGRATIONS and 2 in store.MIGRATIONS

    # read-only use never migrates: a v1 store serves the dashboard as it is
    assert store.is_store(db)
    assert store.schema_version(db) == 1
    before = store.load_bundle(db)
    for table, f in frames.items():
        assert_frame_equal(before[table], f.sort(list(contract.RECORD_KEYS[table])))
    assert before.rejected.rows() == [("costs", 2, "amount -1 is negative", "costs.csv")]
    assert before.notes == [("empty file", "telemetry.csv")]
    version = store.data_version(db)
    assert version.endswith(":1:1")
    assert "user" not in ingest_columns(db)

    # the first write migrates, in the ingest's transaction; the v1 rows keep their hashes,
    # so the same bundle again is recognised record by record
    result = store.ingest(db, Bundle.from_frames(frames), user="alice", source="again")
    assert result.total_inserted == 0 and result.total_unchanged == 6
    assert store.schema_version(db) == 3
    assert ingest_columns(db)[-2:] == ["user", "files"]
    after = store.load_bundle(db)
    for table in TABLE_NAMES:
        assert_frame_equal(after[table], before[table])
    assert after.rejected.rows() == before.rejected.rows()
    with duckdb.connect(str(db), read_only=True) as con:
        log = con.execute('SELECT id, source, "user" FROM ingests ORDER BY id').fetchall()
    assert log == [(1, "v1 bundle", None), (2, "again", "alice")]
    assert store.data_version(db) != version

    # a conflicting record is still refused after the migration
    changed = frames["owners"].with_columns(pl.lit("other").alias("tenant"))
    with pytest.raises(store.StoreConflict):
        store.ingest(db, Bundle.from_frames({"owners": changed}))


def test_failed_migration_leaves_the_v1_store(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    frames = v1_frames()
    write_v1_store(db, frames)
    before = store.load_bundle(db)

    def broken(con: duckdb.DuckDBPyConnection) -> None:
        store._migrate_1_to_2(con)
        raise RuntimeError("disk full while migrating")

    monkeypatch.setattr(store, "MIGRATIONS", {1: broken})
    with pytest.raises(RuntimeError, match="disk full"):
        store.ingest(db, Bundle.from_frames({"allocations": allocations(5)}))
    assert store.schema_version(db) == 1
    assert "user" not in ingest_columns(db)  # the half-done step rolled back with the ingest
    after = store.load_bundle(db)
    for table in TABLE_NAMES:
        assert_frame_equal(after[table], before[table])

    monkeypatch.undo()
    with store.connect(db, read_only=False):  # opening for write migrates too
        pass
    assert store.schema_version(db) == 3
    assert store.load_bundle(db)["allocations"].height == 3


def write_v2_store(path: Path, frames: dict[str, pl.DataFrame]) -> None:
    """A store as schema version 2 wrote it: the v1 layout plus ingests.user (its only change)."""
    write_v1_store(path, frames)
    with duckdb.connect(str(path)) as con:
        con.execute('ALTER TABLE ingests ADD COLUMN "user" VARCHAR')
        con.execute("UPDATE ingests SET \"user\" = 'carol'")
        con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")


def test_v2_store_migrates_to_v3_and_keeps_what_replace_overwrites(db: Path) -> None:
    """v2 -> v3 adds ingests.files and the superseded_<table> copies; nothing stored is lost, and
    the first --replace after it keeps the row it overwrote (c1, $48) valid up to version 2."""
    frames = v1_frames()
    write_v2_store(db, frames)
    assert store.schema_version(db) == 2
    before = store.load_bundle(db)
    changed = frames["costs"].with_columns(pl.lit(50.0).alias("amount"))
    result = store.ingest(db, Bundle.from_frames({"costs": changed}), replace=True, user="dave",
                          files=[{"path": "costs.csv", "sha256": "ab" * 32, "bytes": 10}])
    assert result.replaced["costs"] == 1
    assert store.schema_version(db) == 3
    after = store.load_bundle(db)
    for table in TABLE_NAMES:
        if table != "costs":
            assert_frame_equal(after[table], before[table])
    assert after["costs"]["amount"].to_list() == [50.0]
    with duckdb.connect(str(db), read_only=True) as con:
        log = con.execute('SELECT id, "user", files FROM ingests ORDER BY id').fetchall()
        kept = con.execute("SELECT cost_id, amount, _ingest_id, _valid_to FROM superseded_costs").fetchall()
    assert [(i, u) for i, u, _ in log] == [(1, "carol"), (2, "dave")]
    assert log[0][2] is None and "costs.csv" in log[1][2]
    assert kept == [("c1", 48.0, 1, 2)]


def test_new_store_is_current_and_records_the_user(db: Path) -> None:
    store.ingest(db, Bundle.from_frames({"allocations": allocations(1)}), user="bob")
    store.ingest(db, Bundle.from_frames({"allocations": allocations(2)}))
    assert store.schema_version(db) == store.SCHEMA_VERSION == 3
    with duckdb.connect(str(db), read_only=True) as con:
        users = [r[0] for r in con.execute('SELECT "user" FROM ingests ORDER BY id').fetchall()]
    assert users[0] == "bob"
    assert users[1] == store._os_user()  # default: the account that ran the ingest
