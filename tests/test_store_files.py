"""What a store file is, and that no fault leaves an unusable one (issue 17, items 6-8):

- a first ingest killed with SIGKILL leaves no store without tables under the store's name
  (it writes a temporary file and moves it into place once committed), and a half-initialised
  file an older version left is recognised, named and replaced by the next ingest;
- every reader checks the schema version and the columns a store must have, and refuses with
  a message (never a traceback, never a silently wrong figure);
- a write that finds no room says so first; the data stays and the next ingest works.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from cost_engine import store
from cost_engine.bundle import read_bundle
from cost_engine.cli import main
from tests.test_store import KILL_CHILD, sigkill

REPO = Path(__file__).resolve().parents[1]
CHILD_ENV = {**os.environ, "PYTHONPATH": str(REPO)}  # children import this checkout's cost_engine

ALLOCS = """allocation_id,gpu_id,start,end,owner
a1,g1,2026-10-01T00:00:00Z,2026-10-01T06:00:00Z,A1
a2,g2,2026-10-01T00:00:00Z,2026-10-01T12:00:00Z,B1
"""
INVENTORY = "gpu_id,pool\ng1,p1\ng2,p1\n"
COSTS = "cost_id,category,amount,start,end,pool\nc1,gpu_rental,48,2026-10-01T00:00:00Z,2026-10-02T00:00:00Z,p1\n"
OWNERS = "tenant,project\nA,A1\nB,B1\n"
CONFIG = "[period]\nstart = 2026-10-01T00:00:00Z\nend = 2026-10-02T00:00:00Z\n"


def small_bundle(folder: Path) -> Path:
    """2 cards in p1 for a day, $48 of rental ($1 a card-hour); A1 holds g1 6 h, B1 g2 12 h."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("allocations.csv", ALLOCS), ("inventory.csv", INVENTORY), ("costs.csv", COSTS),
                       ("owners.csv", OWNERS), ("ailedger.toml", CONFIG)):
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def report(source: Path, *args: str):
    return CliRunner().invoke(main, ["report", str(source), "--json", *args])


# ---------------------------------------------------------------------------------- item 6

def test_sigkill_during_the_first_ingest_leaves_no_broken_store(tmp_path: Path) -> None:
    """On main the killed first ingest left a DuckDB file without tables under the store's name:
    `report` then said "bundle folder ... does not exist" and `ingest` failed with a StoreError
    traceback. Now nothing is left under the name, and the next ingest works."""
    db = tmp_path / "ledger.duckdb"
    script = tmp_path / "child.py"
    script.write_text(KILL_CHILD)  # tests/test_store.py's ingesting child, told to wait after one batch
    child = subprocess.Popen([sys.executable, str(script), str(db), "1500000", "first"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=REPO, env=CHILD_ENV)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("progress telemetry 500000 1500000"), line + child.stderr.read()
    finally:
        sigkill(child)
    assert child.returncode == -signal.SIGKILL
    assert not db.exists(), "a half-made store was left under the store's name"
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".ledger.duckdb.")]
    assert leftovers, "the killed ingest was writing a temporary file beside the store"

    bundle = small_bundle(tmp_path / "b")
    result = CliRunner().invoke(main, ["ingest", str(bundle), "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "ingest 1: 7 inserted" in result.output  # 2 cards, 2 allocations, 1 cost, 2 owners
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".ledger.duckdb.")]  # cleaned up
    rep = report(db)
    assert rep.exit_code == 0, rep.output
    assert '"cost": 48.0' in rep.output


def test_an_empty_duckdb_file_is_named_and_replaced(tmp_path: Path) -> None:
    """What an older ailedger left after a killed first ingest: a DuckDB file with no table."""
    db = tmp_path / "ledger.duckdb"
    duckdb.connect(str(db)).close()
    assert db.stat().st_size > 0
    rep = report(db)
    assert rep.exit_code == 2
    assert "is a DuckDB file with no tables: an ingest that was creating it was interrupted" in rep.output
    assert "Traceback" not in rep.output

    bundle = small_bundle(tmp_path / "b")
    result = CliRunner().invoke(main, ["ingest", str(bundle), "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert store.is_store(db)
    assert store.load_bundle(db)["allocations"].height == 2


def test_a_foreign_duckdb_file_is_never_written(tmp_path: Path) -> None:
    other = tmp_path / "other.duckdb"
    with duckdb.connect(str(other)) as con:
        con.execute("CREATE TABLE t AS SELECT 1 AS a")
    result = CliRunner().invoke(main, ["ingest", str(small_bundle(tmp_path / "b")), "--db", str(other)])
    assert result.exit_code == 2
    assert "is a DuckDB database, but not an ailedger store" in result.output
    assert "Traceback" not in result.output
    with duckdb.connect(str(other), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM duckdb_tables()").fetchone() == (1,)


# ---------------------------------------------------------------------------------- item 7


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.duckdb"
    assert CliRunner().invoke(main, ["ingest", str(small_bundle(tmp_path / "b")), "--db", str(path)]).exit_code == 0
    return path


def _set_version(db: Path, value: str) -> None:
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [value])


def test_a_newer_schema_version_is_refused_by_readers(db: Path) -> None:
    """docs/store.md says a newer store is refused; on main `report` read schema_version 99."""
    _set_version(db, "99")
    rep = report(db)
    assert rep.exit_code == 2
    assert "store schema version 99 is newer than this ailedger" in rep.output
    for read in (lambda: store.load_bundle(db), lambda: store.query_records(db, "allocations"),
                 lambda: store.data_version(db), lambda: store.schema_version(db)):
        with pytest.raises(store.StoreError, match="newer than this ailedger"):
            read()


@pytest.mark.parametrize("value", ["two", "0", "-1"])
def test_a_schema_version_that_is_no_version_is_refused(db: Path, value: str) -> None:
    """On main 'two' gave a ValueError traceback."""
    _set_version(db, value)
    rep = report(db)
    assert rep.exit_code == 2, rep.output
    assert "schema_version" in rep.output and "Traceback" not in rep.output
    with pytest.raises(store.StoreError):
        store.ingest(db, read_bundle(db.parent / "b"))


def test_missing_columns_refuse_the_read(db: Path) -> None:
    """On main a store without allocations.owner and .share reported 0 allocated hours and moved
    all $48 to idle, silently. Now every reader refuses, naming the columns."""
    with duckdb.connect(str(db)) as con:
        con.execute("ALTER TABLE allocations DROP COLUMN owner")
        con.execute("ALTER TABLE allocations DROP COLUMN share")
    rep = report(db)
    assert rep.exit_code == 2
    assert "allocations table lacks columns owner, share" in rep.output
    with pytest.raises(store.StoreError, match="lacks columns owner, share"):
        store.load_bundle(db)
    with pytest.raises(store.StoreError, match="lacks columns owner, share"):
        store.query_records(db, "allocations")


def test_missing_telemetry_column_refuses_the_telemetry_reader(db: Path, tmp_path: Path) -> None:
    from cost_engine.telemetry import StoreTelemetry

    with duckdb.connect(str(db)) as con:
        con.execute("ALTER TABLE telemetry DROP COLUMN util_pct")
    with pytest.raises(store.StoreError, match="telemetry table lacks column util_pct"):
        with StoreTelemetry(db).reader() as r:
            r.count()


# ---------------------------------------------------------------------------------- item 8

FULL_DISK_INGEST = textwrap.dedent(
    """
    import resource, signal, sys
    from cost_engine.cli import main
    # A file size limit stands in for a full disk: writes past it fail with EFBIG ("File too
    # large") where a full disk fails with ENOSPC ("No space left on device"); the store treats
    # both (and EDQUOT) the same way.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    sys.argv = ["ailedger", "ingest", sys.argv[2], "--db", sys.argv[3]]
    main()
    """
)


def _ingest_with_room(limit: int, bundle: Path, db: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "full.py"
    script.write_text(FULL_DISK_INGEST)
    return subprocess.run([sys.executable, str(script), str(limit), str(bundle), str(db)], capture_output=True,
                          text=True, cwd=REPO, env=CHILD_ENV, timeout=300)


@pytest.mark.skipif(not hasattr(resource, "RLIMIT_FSIZE"), reason="needs RLIMIT_FSIZE (POSIX)")
def test_a_full_disk_is_said_first_and_the_next_ingest_works(db: Path, tmp_path: Path) -> None:
    """On main the last line was "Current transaction is aborted (please ROLLBACK)" or "cannot
    rollback - no transaction is active", hiding the cause. Now the cause is the message, the
    stored data is unchanged, and once there is room the same ingest goes through."""
    from tests.dashboard_support import SAMPLE

    before = store.load_bundle(db)
    version = store.data_version(db)
    done = _ingest_with_room(db.stat().st_size + 256 * 1024, SAMPLE, db, tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {db}: the disk is full (File too large)"), done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "ROLLBACK" not in done.stderr
    assert store.data_version(db) == version
    assert store.load_bundle(db)["allocations"].equals(before["allocations"])

    again = CliRunner().invoke(main, ["ingest", str(SAMPLE), "--db", str(db)])
    assert again.exit_code == 0, again.output
    assert store.load_bundle(db)["allocations"].height > before["allocations"].height


@pytest.mark.skipif(not hasattr(resource, "RLIMIT_FSIZE"), reason="needs RLIMIT_FSIZE (POSIX)")
def test_a_full_disk_on_the_first_ingest_leaves_nothing(tmp_path: Path) -> None:
    from tests.dashboard_support import SAMPLE

    db = tmp_path / "new.duckdb"
    done = _ingest_with_room(64 * 1024, SAMPLE, db, tmp_path)
    assert done.returncode == 2
    assert f"error: {db}: the disk is full (File too large)" in done.stderr
    assert not db.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".new.duckdb.")]
