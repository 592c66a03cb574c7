"""A damaged store file (a copy cut short, a block overwritten) ends every command that opens
it with one message naming the file and exit 2: never a DuckDB traceback, never a wrong
"not an ailedger store", never a half-written backup."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from cost_engine import backup, serve, store, store_files
from cost_engine.cli import main
from tests.helpers import make_bundle, ts

ROOT = Path(__file__).resolve().parents[1]
CONFIG = '[period]\nstart = 2026-10-01T00:00:00Z\nend = 2026-10-02T00:00:00Z\n'


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    """A small store: one card, 4 h of allocation, $24 of depreciation."""
    db = tmp_path_factory.mktemp("good") / "s.duckdb"
    store.ingest(db, make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a1", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 4), "owner": "A1"}],
        owners=[{"tenant": "A", "project": "A1"}],
        costs=[{"cost_id": "c", "category": "depreciation", "amount": 24.0, "start": ts(1, 0), "end": ts(2, 0)}],
    ))
    return db


def _damage(good: Path, folder: Path, how: str) -> Path:
    """A copy of the store, cut to half its size, to its first 5000 bytes (inside the header
    blocks), or with its first data block overwritten by random bytes (its checksum fails)."""
    db = folder / f"{how}.duckdb"
    shutil.copyfile(good, db)
    (folder / f"{how}.toml").write_text(CONFIG)
    size = os.path.getsize(db)
    if how == "half":
        os.truncate(db, size // 2)
    elif how == "header":
        os.truncate(db, 5000)
    else:
        with db.open("r+b") as fh:
            fh.seek(3 * 4096 + 64)  # the first data block, past the three header blocks
            fh.write(random.Random(7).randbytes(2000))
    return db


KINDS = ["half", "header", "block"]


def _commands(db: Path, tmp: Path) -> dict[str, list[str]]:
    bundle = tmp / "b"
    if not bundle.exists():
        bundle.mkdir()
        (bundle / "inventory.csv").write_text("gpu_id,pool\ng1,p\n")
        (bundle / "allocations.csv").write_text(
            "allocation_id,gpu_id,start,end,owner\na2,g1,2026-10-01T00:00:00Z,2026-10-01T01:00:00Z,A1\n")
    return {
        "report": ["report", str(db)],
        "report --json": ["report", str(db), "--json"],
        "explain": ["explain", str(db), "--tenant", "A"],
        "budgets": ["budgets", str(db)],
        "alerts": ["alerts", str(db)],
        "diff": ["diff", str(db), "--base", "2026-10-01..2026-10-01", "--period", "2026-10-01..2026-10-01"],
        "ingest": ["ingest", str(bundle), "--db", str(db)],
        "import": ["import", "openai", str(ROOT / "tests" / "fixtures" / "importers" / "openai_costs.json"),
                   "--db", str(db), "--owner", "A1"],
        "export parquet": ["export", "parquet", str(db), str(tmp / "backup")],
        "export focus": ["export", "focus", str(db), "--out", str(tmp / "focus.csv")],
        "scenario --calibrate": ["scenario", str(ROOT / "sample_data" / "scenario.toml"), "--calibrate", str(db)],
    }


@pytest.mark.parametrize("how", KINDS)
def test_every_command_names_the_damaged_file_and_exits_2(good, tmp_path, how):
    db = _damage(good, tmp_path, how)
    before = db.read_bytes()
    for name, args in _commands(db, tmp_path).items():
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 2, (name, res.output, res.exception)
        assert isinstance(res.exception, SystemExit), name  # no traceback
        assert res.output.strip().splitlines()[-1] == f"error: damaged store {db}: restore from backup (docs/store.md)", name
    assert db.read_bytes() == before  # nothing wrote into it
    assert not (tmp_path / "backup").exists() and not (tmp_path / "focus.csv").exists()


@pytest.mark.parametrize("how", KINDS)
def test_the_library_says_damaged_not_foreign(good, tmp_path, how):
    db = _damage(good, tmp_path, how)
    assert store.is_store(db)  # a store's header: refused as damaged, not as "not a store"
    with pytest.raises(store.StoreDamaged, match=f"damaged store {db}: restore from backup"):
        with store.connect(db) as con:
            con.execute("SELECT count(*) FROM allocations, costs, telemetry").fetchall()
    with pytest.raises(serve.ServeError, match="damaged store"):
        serve.check_source(str(db))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(backup.BackupError, match="damaged store"):
        backup.export_parquet(db, empty)
    assert empty.is_dir() and not any(empty.iterdir())  # no part of a backup left to restore from


def test_a_whole_store_is_not_damaged(good):
    """The truncation check compares the file with the blocks in use: a sound store passes."""
    with store.connect(good) as con:
        assert con.execute("SELECT count(*) FROM allocations").fetchone()[0] == 1
    assert store.is_store(good) and store.schema_version(good) >= 1


def test_a_store_shrunk_past_its_free_blocks_is_not_damaged(tmp_path):
    """DuckDB cuts a file back when its last blocks fall free (a big table dropped after a small
    one), while PRAGMA database_size still counts those blocks: a healthy file then is shorter
    than total_blocks x block_size. Seen on a Slurm re-export that superseded stored rows; the
    check must compare the used blocks only, so such a store opens and reads."""
    import duckdb

    db = tmp_path / "shrunk.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE small AS SELECT range AS i FROM range(10)")
    con.execute("CHECKPOINT")
    con.execute("CREATE TABLE big AS SELECT range AS i, random() AS r FROM range(3000000)")
    con.execute("CHECKPOINT")
    con.execute("DROP TABLE big")
    con.execute("CHECKPOINT")
    con.close()
    con = duckdb.connect(str(db), read_only=True)
    _, _, block, total, used, *_ = con.execute("PRAGMA database_size").fetchone()
    assert db.stat().st_size < block * total  # the shape that made the old check cry wolf
    assert not store_files.truncated(con, db)
    assert con.execute("SELECT sum(i) FROM small").fetchone()[0] == 45  # 0 + 1 + ... + 9
    con.close()


def test_a_damage_error_from_any_depth_is_caught_by_the_command_group(good, tmp_path, monkeypatch):
    """A DuckDB damage error raised past store.connect (here from the engine itself): the group
    names the file DuckDB names, else the command's store argument (a checksum error names
    only a block)."""
    import duckdb

    from cost_engine import api

    db = tmp_path / "s.duckdb"
    shutil.copyfile(good, db)
    (tmp_path / "s.toml").write_text(CONFIG)
    for message, named in ((f'IO Error: Could not read enough bytes from file "{db}": attempted', db),
                           ("Corrupt database file: computed checksum 1 does not match stored checksum 0", db)):
        def broken(*_a, _m=message, **_k):
            raise duckdb.IOException(_m)

        monkeypatch.setattr(api, "run", broken)
        res = CliRunner().invoke(main, ["report", str(db)])
        assert res.exit_code == 2 and isinstance(res.exception, SystemExit)
        assert res.output.strip() == f"error: damaged store {named}: restore from backup (docs/store.md)"
    monkeypatch.setattr(api, "run", lambda *a, **k: (_ for _ in ()).throw(duckdb.IOException("other")))
    assert isinstance(CliRunner().invoke(main, ["report", str(db)]).exception, duckdb.IOException)  # not ours
