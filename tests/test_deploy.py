"""The team set-up of docs/deploy.md, run for real on a temporary folder: the hourly import script
(idempotent: a second run changes nothing), the nightly backup script (keeps the newest, restores
to the same report), and the systemd units' command lines (valid for the CLI they call)."""

from __future__ import annotations

import configparser
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cost_engine.cli import main
from tests.dashboard_support import ROOT
from tests.test_cli import ALLOCS, write_bundle

DEPLOY = ROOT / "docs" / "deploy"
AILEDGER = Path(sys.executable).parent / "ailedger"
SACCT = ROOT / "tests" / "fixtures" / "importers" / "sacct.txt"
CONFIG = '[period]\nstart = 2026-10-01T00:00:00Z\nend = 2026-10-02T00:00:00Z\nsource_timezone = "UTC"\n'


def script(name: str, home: Path, **env: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(["sh", str(DEPLOY / name)], capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "AILEDGER": str(AILEDGER), "AILEDGER_HOME": str(home), **env})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def report(db: Path) -> dict:
    out = subprocess.run([str(AILEDGER), "report", str(db), "--json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.fixture
def home(tmp_path) -> Path:
    """/var/lib/ailedger in small: the bundle of test_cli and a Slurm export waiting in incoming/."""
    write_bundle(tmp_path / "bundle", ALLOCS, CONFIG)
    (tmp_path / "incoming" / "slurm").mkdir(parents=True)
    shutil.copy(SACCT, tmp_path / "incoming" / "slurm" / "sacct.txt")
    return tmp_path


def test_hourly_import_is_idempotent(home):
    """The bundle: $48 of depreciation over one day on two cards, A 10 h and B 4 h ($1 per
    card-hour). sacct.txt maps to 8 allocations (job 1001: 4 cards on gpu001; 1002: 2 on each of
    gpu002 and gpu003) and 4 queue rows (jobs 1002, 1004, 1005 and 1010 waited); 4 rows are
    unmapped (1003 runs and no --end-at is given, 1007, 1008 has no account, 1009 ends before
    it starts)."""
    first = script("ailedger-hourly", home).stdout
    assert "ingest 1: 7 inserted, 0 unchanged" in first  # 2 cards, 2 allocations, 1 cost, 2 owners
    assert "ingest 2: 12 inserted, 0 unchanged" in first and "unmapped (4)" in first
    assert not any((home / "incoming" / "slurm").iterdir())
    assert (home / "incoming" / "done" / "slurm" / "sacct.txt").is_file()

    # The same export arrives again (an overlapping window): the rerun writes nothing new.
    shutil.copy(SACCT, home / "incoming" / "slurm" / "sacct.txt")
    again = script("ailedger-hourly", home).stdout
    assert "ingest 3: 0 inserted, 7 unchanged" in again and "ingest 4: 0 inserted, 12 unchanged" in again

    rep = report(home / "ledger.duckdb")
    assert rep["totals"]["cost"] == pytest.approx(48.0)
    assert {r["tenant"]: r["cost"] for r in rep["by_tenant"]} == pytest.approx({"A": 10.0, "B": 4.0})


def test_hourly_import_stops_on_a_bad_export_and_keeps_it(home):
    (home / "incoming" / "nosuchformat").mkdir()
    (home / "incoming" / "nosuchformat" / "x.txt").write_text("x\n")
    proc = subprocess.run(["sh", str(DEPLOY / "ailedger-hourly")], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "AILEDGER": str(AILEDGER), "AILEDGER_HOME": str(home)})
    assert proc.returncode == 2 and "nosuchformat" in proc.stderr
    assert (home / "incoming" / "nosuchformat" / "x.txt").is_file()


def test_nightly_backup_keeps_the_newest_and_restores(home):
    script("ailedger-hourly", home)
    before = report(home / "ledger.duckdb")
    for old in ("20200101T000000Z", "20200102T000000Z"):  # two older backups already there
        (home / "backup" / old).mkdir(parents=True)
        (home / "backup" / old / "schema.sql").write_text("")
    script("ailedger-backup", home, AILEDGER_BACKUPS_KEPT="2")
    kept = sorted(p.name for p in (home / "backup").iterdir())
    assert len(kept) == 2 and kept[0] == "20200102T000000Z" and kept[1] > "2026"
    newest = home / "backup" / kept[1]
    assert (newest / "ailedger.toml").read_text() == CONFIG  # the store's config came along

    restored = home / "restored" / "ledger.duckdb"
    res = subprocess.run([str(AILEDGER), "restore", str(newest), "--db", str(restored)], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr
    after = report(restored)
    for part in ("totals", "by_tenant", "reconciliation", "rejected"):
        assert after[part] == before[part], part


def _exec_start(unit: str) -> list[str]:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str
    cp.read(DEPLOY / unit)
    return shlex.split(cp["Service"]["ExecStart"])


def test_units_call_valid_commands():
    argv = _exec_start("ailedger.service")
    assert argv[0] == "/opt/ailedger/bin/ailedger" and argv[1] == "serve"
    ctx = main.commands["serve"].make_context("serve", argv[2:])  # the options parse as written
    assert ctx.params["host"] == "127.0.0.1" and ctx.params["port"] == 8501
    assert ctx.params["access_file"] == "/etc/ailedger/access.toml"
    for unit, script_name in (("ailedger-import.service", "ailedger-hourly"), ("ailedger-backup.service",
                                                                               "ailedger-backup")):
        assert _exec_start(unit) == [f"/usr/local/bin/{script_name}"]
        assert (DEPLOY / script_name).stat().st_mode & 0o111, f"{script_name} is executable"
    for timer in ("ailedger-import.timer", "ailedger-backup.timer"):
        cp = configparser.ConfigParser(interpolation=None)
        cp.read(DEPLOY / timer)
        assert cp["Timer"]["OnCalendar"] and cp["Install"]["WantedBy"] == "timers.target"
