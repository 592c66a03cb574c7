"""The DuckDB store: round trip, idempotency, conflicts, one transaction, drill-down, crash safety."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from cost_engine import contract, store
from cost_engine.bundle import Bundle
from cost_engine.contract import RECORD_KEYS, REJECTED_SCHEMA, TABLE_NAMES

UTC = timezone.utc
T0 = datetime(2026, 10, 1, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[1]


def h(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def frame(table: str, rows: list[dict]) -> pl.DataFrame:
    """A canonical frame: the contract columns in order, missing values NULL."""
    sch = contract.schema(table)
    return pl.DataFrame([{c: r.get(c) for c in sch} for r in rows], schema=sch, orient="row")


def sort_key(table: str) -> list[str]:
    return list(RECORD_KEYS.get(table, contract.schema(table).names()))


def small_frames() -> dict[str, pl.DataFrame]:
    return {
        "inventory": frame(
            "inventory",
            [
                {"gpu_id": "g1", "pool": "p1", "node": "n1", "accelerator": "H100", "capacity": 1.0},
                {"gpu_id": "g2", "pool": "p1", "node": "n1", "capacity": 3 / 7, "in_service_start": h(0)},
            ],
        ),
        "allocations": frame(
            "allocations",
            [
                {"allocation_id": "a1", "gpu_id": "g1", "start": h(0), "end": h(10), "owner": "team-a",
                 "source": "scheduler", "share": 1.0, "workload": "training", "job_id": "j1"},
                {"allocation_id": "a2", "gpu_id": "g2", "start": h(2), "end": h(4), "owner": "team-b",
                 "source": "k8s", "share": 0.5, "workload": "inference", "model": "llama", "requested_gpus": 2.0},
                {"allocation_id": "a3", "gpu_id": "g1", "start": h(10), "end": h(12.5), "owner": "team-a",
                 "source": "scheduler", "share": 1.0, "workload": "other"},
            ],
        ),
        "telemetry": frame(
            "telemetry",
            [
                {"ts": h(0), "gpu_id": "g1", "util_pct": 90.0, "power_w": 650.5, "energy_j": 1e6},
                {"ts": h(0.01), "gpu_id": "g1", "util_pct": 0.1, "power_w": 80.25},
                {"ts": h(0), "gpu_id": "g2", "util_pct": 55.5, "mem_used_mib": 40960.0},
            ],
        ),
        "requests": frame(
            "requests",
            [
                {"request_id": "r1", "ts": h(3), "owner": "key-1", "source": "gateway", "model": "llama",
                 "input_tokens": 1200, "cached_input_tokens": 300, "output_tokens": 450, "status": "ok",
                 "ttft_ms": 120.0, "latency_ms": 2300.0, "requests": 1},
                {"request_id": "r2", "ts": h(3.5), "owner": "key-2", "source": "gateway", "model": "llama",
                 "input_tokens": 10, "cached_input_tokens": 0, "output_tokens": 0, "status": "error",
                 "requests": 40, "end": h(4)},
            ],
        ),
        "costs": frame(
            "costs",
            [
                {"cost_id": "c1", "category": "gpu_rental", "amount": 1234.56, "currency": "USD",
                 "start": h(0), "end": h(24 * 31), "pool": "p1"},
                {"cost_id": "c2", "category": "software", "amount": 99.0, "start": h(0), "end": h(24),
                 "owner": "team-a", "source": "scheduler", "driver": "even"},
            ],
        ),
        "rates": frame(
            "rates",
            [
                {"pool": "p1", "price_per_gpu_hour": 2.5, "category": "gpu_rental"},  # start NULL in the key
                {"pool": "p1", "price_per_gpu_hour": 2.0, "category": "gpu_rental", "start": h(24), "end": h(48)},
            ],
        ),
        "tariffs": frame("tariffs", [{"start": h(0), "end": h(12), "price_per_kwh": 0.2, "carbon_g_per_kwh": 300.0}]),
        "owners": frame(
            "owners",
            [
                {"tenant": "acme", "project": "team-a", "display_name": "Team A", "cost_center": "cc-1"},
                {"tenant": "acme", "project": "team-b"},
            ],
        ),
        "aliases": frame(
            "aliases",
            [
                {"source": "gateway", "key": "key-1", "project": "team-a"},
                {"source": "k8s", "key": "team-b", "project": "team-b"},
            ],
        ),
        "queue": frame(
            "queue", [{"job_id": "q1", "owner": "team-a", "pool": "p1", "gpus": 8.0, "submit": h(1), "reason": "quota"}]
        ),
        "events": frame(
            "events",
            [
                {"start": h(5), "end": h(6), "kind": "maintenance", "gpu_id": "g2"},
                {"start": h(7), "end": h(8), "kind": "network_bottleneck", "pool": "p1"},
            ],
        ),
        "quotas": frame("quotas", [{"tenant": "acme", "pool": "p1", "gpus": 16.0}]),
        "budgets": frame(
            "budgets",
            [
                {"budget_id": "b1", "tenant": "acme", "period_kind": "month", "amount": 5000.0, "currency": "USD"},
                {"budget_id": "b2", "project": "team-a", "period_kind": "custom", "amount": 750.25,
                 "boundary": "narrow", "categories": "power", "start": h(0), "end": h(24 * 14)},
            ],
        ),
    }


def rejected_frame(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=REJECTED_SCHEMA | {"file": pl.String}, orient="row")


def snapshot(db: Path) -> dict:
    """Everything a reader can see, to compare a store before and after."""
    b = store.load_bundle(db)
    return {
        "tables": {t: b.tables[t] for t in TABLE_NAMES},
        "rejected": b.rejected,
        "notes": list(b.notes),
        "present": b.present,
        "version": store.data_version(db),
    }


def assert_same(a: dict, b: dict) -> None:
    for t in TABLE_NAMES:
        assert_frame_equal(a["tables"][t], b["tables"][t])
    assert_frame_equal(a["rejected"], b["rejected"])
    assert a["notes"] == b["notes"]
    assert a["present"] == b["present"]
    assert a["version"] == b["version"]


def row_count(db: Path, table: str) -> int:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(f'SELECT count(*) FROM "{table}"').fetchall()[0][0]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ledger.duckdb"


def test_round_trip_exact_frames_and_dtypes(db: Path) -> None:
    frames = small_frames()
    result = store.ingest(db, Bundle.from_frames(frames))

    assert result.ingest_id == 1
    for t in TABLE_NAMES:
        assert result.inserted[t] == frames[t].height
        assert result.unchanged[t] == 0 and result.replaced[t] == 0
    assert result.total_inserted == 25  # rows of small_frames()

    back = store.load_bundle(db)
    assert back.present == frozenset(TABLE_NAMES)
    for t in TABLE_NAMES:
        got = back.tables[t]
        assert got.schema == contract.schema(t), t
        assert_frame_equal(got, frames[t].sort(sort_key(t)), check_row_order=False)
        assert_frame_equal(got.sort(sort_key(t)), frames[t].sort(sort_key(t)))
    assert back["telemetry"]["ts"].dtype == pl.Datetime("us", "UTC")
    assert back["requests"]["input_tokens"].to_list() == [1200, 10]
    assert store.is_store(db)
    assert store.schema_version(db) == store.SCHEMA_VERSION


def test_partial_bundle_leaves_other_tables_empty(db: Path) -> None:
    frames = small_frames()
    store.ingest(db, Bundle.from_frames({"allocations": frames["allocations"], "owners": frames["owners"]}))
    back = store.load_bundle(db)
    assert back.present == frozenset({"allocations", "owners"})
    assert back["telemetry"].height == 0
    assert back["telemetry"].schema == contract.schema("telemetry")
    assert back["allocations"].height == 3

    only = store.load_bundle(db, tables=["owners"])
    assert only.present == frozenset({"owners"})
    assert only["allocations"].height == 0 and only["owners"].height == 2
    with pytest.raises(ValueError, match="unknown tables: nope"):
        store.load_bundle(db, tables=["nope"])


def test_reingest_identical_changes_nothing(db: Path) -> None:
    frames = small_frames()
    store.ingest(db, Bundle.from_frames(frames))
    before = {t: row_count(db, t) for t in TABLE_NAMES}

    again = store.ingest(db, Bundle.from_frames(frames))

    assert again.ingest_id == 2
    for t in TABLE_NAMES:
        assert again.inserted[t] == 0 and again.replaced[t] == 0
        assert again.unchanged[t] == frames[t].height
    assert {t: row_count(db, t) for t in TABLE_NAMES} == before
    assert before["allocations"] == 3 and before["events"] == 2 and before["rates"] == 2
    with duckdb.connect(str(db), read_only=True) as con:
        log = con.execute("SELECT id, rows_in, inserted, unchanged, replaced FROM ingests ORDER BY id").fetchall()
    assert log == [(1, 25, 25, 0, 0), (2, 25, 0, 25, 0)]


def test_store_missing_a_newer_nullable_column(db: Path) -> None:
    """A store written before a nullable column existed still loads, and re-ingest is a no-op."""
    tel = small_frames()["telemetry"].head(2)  # mem_used_mib is NULL in these rows
    store.ingest(db, Bundle.from_frames({"telemetry": tel}))
    with duckdb.connect(str(db)) as con:
        con.execute('ALTER TABLE "telemetry" DROP COLUMN mem_used_mib')
    back = store.load_bundle(db)["telemetry"]
    assert back.schema == contract.schema("telemetry")
    assert_frame_equal(back, tel.sort(sort_key("telemetry")))

    again = store.ingest(db, Bundle.from_frames({"telemetry": tel}))
    assert (again.inserted["telemetry"], again.unchanged["telemetry"]) == (0, 2)
    assert "mem_used_mib" in store.query_records(db, "telemetry").columns


def test_duplicates_inside_a_bundle(db: Path) -> None:
    allocs = small_frames()["allocations"]
    events = small_frames()["events"]
    result = store.ingest(db, Bundle.from_frames({"allocations": pl.concat([allocs, allocs.head(1)]),
                                                  "events": pl.concat([events, events])}))
    assert (result.inserted["allocations"], result.unchanged["allocations"]) == (3, 1)
    assert (result.inserted["events"], result.unchanged["events"]) == (2, 2)
    assert row_count(db, "allocations") == 3 and row_count(db, "events") == 2

    clash = allocs.head(1).with_columns(pl.col("owner").str.replace("team-a", "team-z"))
    with pytest.raises(store.StoreConflict, match=r"allocations: 1 key\(s\) within the bundle \(a1\)"):
        store.ingest(db, Bundle.from_frames({"allocations": pl.concat([allocs, clash])}), replace=True)


def test_conflict_rejects_whole_ingest_then_replace(db: Path) -> None:
    frames = small_frames()
    store.ingest(db, Bundle.from_frames(frames))
    before = snapshot(db)

    changed = frames["allocations"].with_columns(
        pl.when(pl.col("allocation_id") == "a2").then(pl.lit(h(5))).otherwise(pl.col("end")).alias("end")
    )
    new_owner = frame("owners", [{"tenant": "acme", "project": "team-c"}])
    bundle = Bundle.from_frames({"allocations": changed, "owners": pl.concat([frames["owners"], new_owner])})

    with pytest.raises(store.StoreConflict) as err:
        store.ingest(db, bundle)
    assert isinstance(err.value, ValueError)
    msg = str(err.value)
    assert "allocations" in msg and "1 key(s)" in msg and "(a2)" in msg and "replace=True" in msg
    assert err.value.conflicts == [store.Conflict("allocations", 1, [("a2",)])]
    assert_same(before, snapshot(db))  # not even the new owner went in

    result = store.ingest(db, bundle, replace=True)
    assert result.replaced["allocations"] == 1
    assert result.unchanged["allocations"] == 2 and result.inserted["allocations"] == 0
    assert result.inserted["owners"] == 1 and result.unchanged["owners"] == 2
    assert result.conflicts == [store.Conflict("allocations", 1, [("a2",)])]
    allocs = store.load_bundle(db)["allocations"]
    assert allocs.height == 3
    assert allocs.filter(pl.col("allocation_id") == "a2")["end"].item() == h(5)
    assert allocs.filter(pl.col("allocation_id") == "a1")["end"].item() == h(10)


def test_conflict_message_lists_first_keys_of_many(db: Path) -> None:
    tel = pl.DataFrame(
        {"ts": [h(i) for i in range(8)], "gpu_id": ["g1"] * 8, "util_pct": [1.0] * 8},
    ).pipe(lambda f: store._canonical("telemetry", f))
    store.ingest(db, Bundle.from_frames({"telemetry": tel}))
    with pytest.raises(store.StoreConflict) as err:
        store.ingest(db, Bundle.from_frames({"telemetry": tel.with_columns(pl.col("util_pct") + 1)}))
    (c,) = err.value.conflicts
    assert (c.table, c.count, len(c.keys)) == ("telemetry", 8, 5)
    assert c.keys[0] == (h(0), "g1") or c.keys[0] == ("g1", h(0))
    assert "telemetry: 8 key(s)" in str(err.value) and ", ...)" in str(err.value)


def test_events_are_keyed_by_content(db: Path) -> None:
    events = small_frames()["events"]
    store.ingest(db, Bundle.from_frames({"events": events}))
    moved = events.with_columns(pl.col("end") + timedelta(minutes=5))
    result = store.ingest(db, Bundle.from_frames({"events": pl.concat([events, moved])}))
    assert (result.inserted["events"], result.unchanged["events"], result.replaced["events"]) == (2, 2, 0)
    assert store.load_bundle(db)["events"].height == 4


def test_failure_mid_ingest_leaves_store_as_before(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    frames = small_frames()
    store.ingest(db, Bundle.from_frames({"allocations": frames["allocations"].head(1)}))
    before = snapshot(db)

    real = store._ingest_table
    written: list[str] = []

    def flaky(con, table, **kw):
        if written:
            raise RuntimeError("disk on fire")
        out = real(con, table, **kw)
        written.append(table)
        return out

    monkeypatch.setattr(store, "_ingest_table", flaky)
    bundle = Bundle.from_frames(frames, rejected=rejected_frame([("costs", 3, "amount < 0", "costs.csv")]),
                                notes=[("duplicates", "1 identical row dropped")])
    with pytest.raises(RuntimeError, match="disk on fire"):
        store.ingest(db, bundle)
    assert written == ["inventory"]  # one table had gone in before the failure
    assert_same(before, snapshot(db))
    assert row_count(db, "inventory") == 0 and row_count(db, "allocations") == 1

    monkeypatch.setattr(store, "_ingest_table", real)
    assert store.ingest(db, bundle).inserted["allocations"] == 2


def test_failed_first_ingest_leaves_no_file(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a, **kw):
        raise RuntimeError("boom")

    monkeypatch.setattr(store, "_ingest_table", boom)
    with pytest.raises(RuntimeError):
        store.ingest(db, Bundle.from_frames(small_frames()))
    assert not db.exists()


def test_rejected_and_notes_are_kept(db: Path) -> None:
    frames = small_frames()
    first = Bundle.from_frames(
        {"allocations": frames["allocations"]},
        rejected=rejected_frame([("allocations", 7, "end <= start", "allocations.csv"),
                                 ("telemetry", 2, "util_pct > 100", None)]),
        notes=[("duplicates", "allocations: 1 identical row dropped")],
    )
    r1 = store.ingest(db, first)
    assert (r1.rejected, r1.notes) == (2, 1)
    back = store.load_bundle(db)
    assert_frame_equal(back.rejected, first.rejected)
    assert back.notes == [("duplicates", "allocations: 1 identical row dropped")]

    r2 = store.ingest(db, first)  # same bundle again: nothing doubles
    assert (r2.rejected, r2.notes) == (0, 0)
    second = Bundle.from_frames(
        {"costs": frames["costs"]},
        rejected=rejected_frame([("costs", 4, "unknown category", "costs.csv")]),
        notes=[("gap", "no telemetry for g9")],
    )
    store.ingest(db, second)
    back = store.load_bundle(db)
    assert back.rejected.height == 3
    assert back.rejected["reason"].to_list() == ["end <= start", "util_pct > 100", "unknown category"]
    assert back.rejected["file"].to_list() == ["allocations.csv", None, "costs.csv"]
    assert back.rejected.schema == REJECTED_SCHEMA | {"file": pl.String}
    assert back.notes == [("duplicates", "allocations: 1 identical row dropped"), ("gap", "no telemetry for g9")]
    assert back.present == frozenset({"allocations", "costs"})


def many_allocations(n: int) -> pl.DataFrame:
    return frame(
        "allocations",
        [
            {"allocation_id": f"a{i:03d}", "gpu_id": f"g{i % 4}", "start": h(i), "end": h(i + 1),
             "owner": ["team-a", "team-b", "team-c"][i % 3], "share": 1.0}
            for i in range(n)
        ],
    )


def test_query_records_paging_and_filters(db: Path) -> None:
    store.ingest(db, Bundle.from_frames({"allocations": many_allocations(25)}))

    pages = [store.query_records(db, "allocations", limit=10, offset=o) for o in (0, 10, 20, 30)]
    assert [p.height for p in pages] == [10, 10, 5, 0]
    ids = [i for p in pages for i in p["allocation_id"].to_list()]
    assert ids == [f"a{i:03d}" for i in range(25)]
    assert all(p.schema == contract.schema("allocations") for p in pages)

    team_b = store.query_records(db, "allocations", filters={"owner": ["team-b"]}, limit=None)
    assert team_b.height == 8 and set(team_b["owner"]) == {"team-b"}
    both = store.query_records(db, "allocations", filters={"owner": ["team-b", "team-c"], "gpu_id": ["g1"]})
    # gpu g1 is i % 4 == 1; team-b/-c is i % 3 != 0: i = 1, 5, 13, 17
    assert both["allocation_id"].to_list() == ["a001", "a005", "a013", "a017"]
    assert store.count_records(db, "allocations", filters={"owner": ["team-b", "team-c"], "gpu_id": ["g1"]}) == 4

    by_id = store.query_records(db, "allocations", ids=["a003", "a024", "zzz"])
    assert by_id["allocation_id"].to_list() == ["a003", "a024"]
    both_ways = store.query_records(db, "allocations", ids=["a003", "a004"], filters={"owner": ["team-a"]})
    assert both_ways["allocation_id"].to_list() == ["a003"]
    assert store.query_records(db, "allocations", filters={"owner": []}).height == 0
    assert store.query_records(db, "allocations", filters={"share": ["1.0"]}).height == 25
    assert store.query_records(db, "allocations", filters={"job_id": [None]}).height == 25


def test_query_records_is_injection_safe(db: Path) -> None:
    store.ingest(db, Bundle.from_frames({"allocations": many_allocations(5)}))
    evil = "'; DROP TABLE allocations; --"
    assert store.query_records(db, "allocations", filters={"owner": [evil]}).height == 0
    assert store.query_records(db, "allocations", ids=[evil]).height == 0
    assert row_count(db, "allocations") == 5
    with pytest.raises(ValueError, match="no column"):
        store.query_records(db, "allocations", filters={'owner" = owner; DROP TABLE allocations; --': ["x"]})
    with pytest.raises(ValueError, match="unknown table"):
        store.query_records(db, "allocations; DROP TABLE allocations")
    with pytest.raises(ValueError, match="no single id column"):
        store.query_records(db, "telemetry", ids=["g1"])
    assert row_count(db, "allocations") == 5


def test_progress_reports_increasing_counts(db: Path) -> None:
    tel = pl.DataFrame({"ts": [h(i / 60) for i in range(35)], "gpu_id": ["g1"] * 35, "util_pct": [50.0] * 35})
    allocs = many_allocations(3)
    calls: list[tuple[str, int, int]] = []
    store.ingest(
        db,
        Bundle.from_frames({"telemetry": store._canonical("telemetry", tel), "allocations": allocs}),
        progress=lambda t, done, total: calls.append((t, done, total)),
        batch_rows=10,
    )
    assert calls == [
        ("allocations", 3, 3),
        ("telemetry", 10, 35),
        ("telemetry", 20, 35),
        ("telemetry", 30, 35),
        ("telemetry", 35, 35),
    ]
    assert row_count(db, "telemetry") == 35


def test_data_version_moves_only_on_commit(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    frames = small_frames()
    store.ingest(db, Bundle.from_frames({"owners": frames["owners"]}))
    v1 = store.data_version(db)
    assert v1 == store.data_version(db)
    with pytest.raises(store.StoreConflict):
        store.ingest(db, Bundle.from_frames({"owners": frames["owners"].with_columns(pl.lit("x").alias("tenant"))}))
    assert store.data_version(db) == v1
    store.ingest(db, Bundle.from_frames({"aliases": frames["aliases"]}))
    v2 = store.data_version(db)
    assert v2 != v1 and v2.endswith(":2:2")


def test_is_store(tmp_path: Path, db: Path) -> None:
    store.ingest(db, Bundle.from_frames({"owners": small_frames()["owners"]}))
    assert store.is_store(db)
    assert not store.is_store(tmp_path)  # a folder (a bundle)
    assert not store.is_store(tmp_path / "missing.duckdb")
    text = tmp_path / "allocations.csv"
    text.write_text("allocation_id,gpu_id\n")
    assert not store.is_store(text)
    other = tmp_path / "other.duckdb"
    with duckdb.connect(str(other)) as con:
        con.execute("CREATE TABLE t (a INTEGER)")
    assert not store.is_store(other)
    with pytest.raises(store.StoreError):
        store.ingest(other, Bundle.from_frames({}))
    with pytest.raises(store.StoreError):
        store.load_bundle(other)


def test_migrations(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The migration machinery, with a made-up next step (the real 1 -> 2 step and a store
    written by version 1: tests/test_store_trust.py)."""
    store.ingest(db, Bundle.from_frames({"owners": small_frames()["owners"]}))
    current = store.SCHEMA_VERSION
    with store.connect(db, read_only=False) as con:
        assert store.migrate(con) == current

    seen: list[int] = []

    def next_step(con: duckdb.DuckDBPyConnection) -> None:
        seen.append(current)
        con.execute('ALTER TABLE "owners" ADD COLUMN IF NOT EXISTS legacy VARCHAR')

    monkeypatch.setattr(store, "SCHEMA_VERSION", current + 1)
    monkeypatch.setattr(store, "MIGRATIONS", {**store.MIGRATIONS, current: next_step})
    store.ingest(db, Bundle.from_frames({"aliases": small_frames()["aliases"]}))
    assert seen == [current] and store.schema_version(db) == current + 1
    assert store.load_bundle(db)["owners"].height == 2

    monkeypatch.setattr(store, "SCHEMA_VERSION", current)  # older code, newer store
    with pytest.raises(store.StoreError, match="newer"):
        store.ingest(db, Bundle.from_frames({}))


KILL_CHILD = textwrap.dedent(
    """
    import sys, time
    from datetime import datetime, timezone
    import polars as pl
    from cost_engine import contract, store
    from cost_engine.bundle import Bundle

    path, n = sys.argv[1], int(sys.argv[2])
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    i = pl.int_range(n)
    tel = pl.select(
        ts=pl.lit(start) + pl.duration(seconds=i // 64),
        gpu_id=pl.lit("gpu-") + (i % 64).cast(pl.String),
        util_pct=(i % 101).cast(pl.Float64),
        power_w=pl.lit(300.0),
        energy_j=pl.lit(None, pl.Float64),
        mem_used_mib=pl.lit(None, pl.Float64),
    ).cast(dict(contract.schema("telemetry")))

    def progress(table, done, total):
        print("progress", table, done, total, flush=True)
        if done >= total or len(sys.argv) > 3:  # a third argument: wait after the first batch
            time.sleep(120)  # never let the commit race the kill

    store.ingest(path, Bundle.from_frames({"telemetry": tel}), progress=progress, batch_rows=500_000)
    print("COMMITTED", flush=True)
    """
)


def sigkill(child: subprocess.Popen) -> None:
    """Kill a child process with SIGKILL (no clean-up of its own) and reap it."""
    if child.poll() is None:
        os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=10)


@pytest.mark.slow
def test_sigkill_mid_ingest_keeps_earlier_data(db: Path, tmp_path: Path) -> None:
    frames = small_frames()
    store.ingest(db, Bundle.from_frames(frames))
    before = snapshot(db)
    size_before = db.stat().st_size

    script = tmp_path / "child.py"
    script.write_text(KILL_CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), str(db), "3000000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert child.stdout is not None
        first = child.stdout.readline()
        assert first.startswith("progress telemetry 500000 3000000"), first + child.stderr.read()
        grown = db.stat().st_size
        deadline = time.monotonic() + 5
        while db.stat().st_size <= grown and time.monotonic() < deadline:
            time.sleep(0.005)  # kill while later batches are being written
        size_at_kill = db.stat().st_size
    finally:
        sigkill(child)
    rest = child.stdout.read()
    assert child.returncode == -signal.SIGKILL
    assert "COMMITTED" not in rest
    assert size_at_kill > size_before  # uncommitted rows had reached the file

    after = snapshot(db)
    assert_same(before, after)
    assert after["tables"]["telemetry"].height == 3

    # the store stays writable, and re-ingesting the old bundle changes nothing
    again = store.ingest(db, Bundle.from_frames(frames))
    assert again.total_inserted == 0 and again.total_unchanged == 25
