"""Month-end close (issue 39): data versions and the audit trail, close / reopen, late data posted as
corrections, the FOCUS correction rows, `--as-of-version`, and a close killed mid-way.

The ledger, hand-made (every figure below is computed from it):
- cards g0, g1 in pool p; tenant A owns project A1, B owns B1. October has 31 x 24 = 744 hours.
- version 1 (base bundle): a1 on g0 all October (744 h, A1); b1 on g1 Oct 1 00:00 .. Oct 16 12:00
  (15.5 days = 372 h, B1); c1 depreciation $1,488 over October (2 cards x 744 h: $1 a card-hour);
  c3 depreciation $1,440 over November (2 x 720 h: $1 a card-hour).
  October: A 744 h x $1 = $744, B 372 x $1 = $372, idle 1488 - 744 - 372 = 372 h = $372.
- October is closed at version 1 (no telemetry: the gap is accepted, --accept-gaps).
- version 2 (late invoice): c2 depreciation $744 over October. October now costs 1488 + 744 =
  $2,232 over 1,488 card-hours: $1.50 a card-hour. A 744 x 1.5 = $1,116 (+372), B 372 x 1.5 =
  $558 (+186), idle 372 x 1.5 = $558 (+186): +744 in all.
- version 3 (re-exported Slurm window, --replace): b1 now ends Oct 31 00:00 (720 h), and b2 on g1
  Nov 1 .. Nov 5 (96 h, B1). October: B 720 x 1.5 = $1,080 (+522), idle 1488 - 744 - 720 = 24 h x
  1.5 = $36 (-522), A unchanged: +0 in all.
- November's corrections: A +372; B +186 + 522 = +708; idle +186 - 522 = -336; total +744.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from cost_engine import audit, close, store
from cost_engine.cli import main

OCT = '[period]\nstart = 2026-10-01T00:00:00Z\nend = 2026-11-01T00:00:00Z\n'
NOV = '[period]\nstart = 2026-11-01T00:00:00Z\nend = 2026-12-01T00:00:00Z\n'
ALLOC_HEAD = "allocation_id,gpu_id,start,end,owner\n"
COST_HEAD = "cost_id,category,amount,start,end\n"


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _bundle(folder: Path, **files: str) -> Path:
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / f"{name}.csv").write_text(text)
    return folder


def _base(root: Path) -> Path:
    b = _bundle(root / "base", inventory="gpu_id,pool\ng0,p\ng1,p\n", owners="tenant,project\nA,A1\nB,B1\n",
                allocations=ALLOC_HEAD + "a1,g0,2026-10-01T00:00:00Z,2026-11-01T00:00:00Z,A1\n"
                                         "b1,g1,2026-10-01T00:00:00Z,2026-10-16T12:00:00Z,B1\n",
                costs=COST_HEAD + "c1,depreciation,1488,2026-10-01T00:00:00Z,2026-11-01T00:00:00Z\n"
                                  "c3,depreciation,1440,2026-11-01T00:00:00Z,2026-12-01T00:00:00Z\n")
    (b / "ailedger.toml").write_text(OCT)
    return b


def _late(root: Path, name: str = "late", cost_id: str = "c2", amount: int = 744) -> Path:
    """A late invoice as it arrives: a folder with its costs.csv alone (the store holds the allocations)."""
    return _bundle(root / name,
                   costs=COST_HEAD + f"{cost_id},depreciation,{amount},2026-10-01T00:00:00Z,2026-11-01T00:00:00Z\n")


def _slurm(root: Path) -> Path:
    return _bundle(root / "slurm", allocations=ALLOC_HEAD + "b1,g1,2026-10-01T00:00:00Z,2026-10-31T00:00:00Z,B1\n"
                                                            "b2,g1,2026-11-01T00:00:00Z,2026-11-05T00:00:00Z,B1\n")


def owners(rows: list[dict]) -> dict[str, float]:
    return {r["owner"]: r["amount"] for r in rows}


@pytest.fixture(scope="module")
def ledger(tmp_path_factory) -> dict:
    """The store through versions 1-3 with October closed at 1, and what each step printed."""
    root = tmp_path_factory.mktemp("close")
    db = root / "ledger.duckdb"
    out: dict = {"root": root, "db": db}
    assert invoke("ingest", str(_base(root)), "--db", str(db)).exit_code == 0
    out["pre"] = invoke("report", str(db), "--period", "2026-10", "--json").output
    refused = invoke("close", str(db), "2026-10")
    assert refused.exit_code == 2 and "not complete" in refused.output and "no telemetry" in refused.output
    assert close.closed_periods(db) == []
    closed = invoke("close", str(db), "2026-10", "--accept-gaps")
    assert closed.exit_code == 0, closed.output
    out["late"] = invoke("ingest", str(_late(root)), "--db", str(db)).output
    out["slurm"] = invoke("ingest", str(_slurm(root)), "--db", str(db), "--replace").output
    return out


def test_a_closed_october_keeps_its_figures_and_lists_the_late_changes(ledger) -> None:
    """October stays A $744, B $372, idle $372 (the figures sent) after both late ingests; the
    late changes are +744 (A +372, B +186, idle +186) and 0 (B +522, idle -522)."""
    db = ledger["db"]
    first = invoke("report", str(db), "--period", "2026-10", "--json").output
    assert first == invoke("report", str(db), "--period", "2026-10", "--json").output  # byte-identical rerun
    rep = json.loads(first)
    pre = json.loads(ledger["pre"])
    assert {k: v for k, v in rep.items() if k not in ("closed", "after_close")} == pre
    assert [(r["tenant"], r["cost"]) for r in rep["by_tenant"]] == [("A", 744.0), ("B", 372.0)]
    assert rep["reconciliation"]["idle"] == 372.0 and rep["data_version"] == 1
    assert rep["closed"]["data_version"] == 1 and rep["closed"]["accept_gaps"] is True
    assert rep["closed"]["user"] == store.os_user()
    late, slurm = rep["after_close"]
    assert (late["data_version"], late["amount"]) == (2, 744.0)
    assert owners(late["owners"]) == {"A": 372.0, "B": 186.0, "(idle)": 186.0}
    assert (slurm["data_version"], slurm["amount"]) == (3, 0.0)
    assert owners(slurm["owners"]) == {"B": 522.0, "(idle)": -522.0}
    # each ingest said which closed period it touched and by how much
    assert "closed period 2026-10 touched: +744.00 ((idle) +186.00, A +372.00, B +186.00)" in ledger["late"]
    assert "closed period 2026-10 touched: +0.00 ((idle) -522.00, B +522.00)" in ledger["slurm"]


def test_november_carries_the_corrections_and_focus_rows_sum_to_them(ledger, tmp_path) -> None:
    """November's corrections per owner: A +372, B +186 + 522 = +708, idle +186 - 522 = -336
    (total +744); the FOCUS export of November has those as ChargeClass Correction rows,
    charged for October (ChargePeriodStart 2026-10-01) and billed in November; its usage rows
    still sum to November's input cost, $1,440."""
    db = ledger["db"]
    cfg = tmp_path / "nov.toml"
    cfg.write_text(NOV)
    rep = json.loads(invoke("report", str(db), "--period", "2026-11", "--json").output)
    per_owner: dict[str, float] = {}
    for r in rep["corrections"]:
        assert r["closed_period"] == "2026-10"
        per_owner[r["owner"]] = per_owner.get(r["owner"], 0.0) + r["amount"]
    assert per_owner == {"A": 372.0, "B": 708.0, "(idle)": -336.0}
    assert rep["corrections_total"] == 744.0
    assert "closed" not in rep and rep["data_version"] == 3
    out = tmp_path / "nov.csv"
    res = invoke("export", "focus", str(db), "--out", str(out), "--config", str(cfg))
    assert res.exit_code == 0, res.output
    same = tmp_path / "nov-by-period.csv"
    assert invoke("export", "focus", str(db), "--out", str(same), "--period", "2026-11").exit_code == 0
    assert same.read_bytes() == out.read_bytes()
    frame = pl.read_csv(out, try_parse_dates=True)
    fix = frame.filter(pl.col("ChargeClass") == "Correction")
    sums = fix.group_by("SubAccountId").agg(pl.col("BilledCost").sum()).sort("SubAccountId").rows()
    assert sums == [("(idle)", -336.0), ("A", 372.0), ("B", 708.0)]
    assert [t.isoformat() for t in fix["ChargePeriodStart"].unique()] == ["2026-10-01T00:00:00+00:00"]
    assert [t.isoformat() for t in fix["BillingPeriodStart"].unique()] == ["2026-11-01T00:00:00+00:00"]
    assert frame.filter(pl.col("ChargeClass").is_null())["BilledCost"].sum() == pytest.approx(1440.0)
    assert set(frame.filter(pl.col("ChargeClass").is_null())["x_DataVersion"].to_list()) == {3}


def test_a_closed_period_exports_the_figures_sent(ledger, tmp_path) -> None:
    """October's FOCUS export is computed at the closed version 1: $1,488 (not 1488 + 744)."""
    out = tmp_path / "oct.csv"
    assert invoke("export", "focus", str(ledger["db"]), "--out", str(out)).exit_code == 0
    frame = pl.read_csv(out)
    assert frame["BilledCost"].sum() == pytest.approx(1488.0)
    assert set(frame["x_DataVersion"].to_list()) == {1}


def test_as_of_version_reproduces_each_earlier_report(ledger) -> None:
    """--as-of-version 1 prints the pre-late report byte for byte; at version 2 October is
    A $1,116, B $558, idle $558 ($1.50 a card-hour); at 3 B $1,080, idle $36."""
    db = ledger["db"]
    assert invoke("report", str(db), "--period", "2026-10", "--as-of-version", "1", "--json").output == ledger["pre"]
    v2 = json.loads(invoke("report", str(db), "--period", "2026-10", "--as-of-version", "2", "--json").output)
    assert [(r["tenant"], r["cost"]) for r in v2["by_tenant"]] == [("A", 1116.0), ("B", 558.0)]
    assert v2["reconciliation"]["idle"] == 558.0 and v2["data_version"] == 2
    v3 = json.loads(invoke("report", str(db), "--period", "2026-10", "--as-of-version", "3", "--json").output)
    assert [(r["tenant"], r["cost"]) for r in v3["by_tenant"]] == [("A", 1116.0), ("B", 1080.0)]
    assert v3["reconciliation"]["idle"] == pytest.approx(36.0)
    bad = invoke("report", str(db), "--as-of-version", "9")
    assert bad.exit_code == 2 and "data version 9 does not exist" in bad.output


def test_the_audit_trail_lists_every_ingest_with_file_hashes(ledger) -> None:
    """Three versions; the late invoice's costs.csv with its sha256; the Slurm window replaced 1
    allocation (b1, kept as superseded: valid from 1 to 3) and inserted 1 (b2)."""
    db, root = ledger["db"], ledger["root"]
    trail = audit.trail(db)
    assert [t["data_version"] for t in trail] == [1, 2, 3]
    late_csv = root / "late" / "costs.csv"
    files = {f["path"]: f["sha256"] for f in trail[1]["files"]}
    assert files[str(late_csv)] == hashlib.sha256(late_csv.read_bytes()).hexdigest()
    assert trail[2]["tables"]["allocations"] == {"rows": 2, "inserted": 1, "unchanged": 0, "replaced": 1}
    assert trail[2]["replace"] is True and trail[1]["user"] == store.os_user()
    with store.connect(db) as con:
        kept = con.execute("SELECT allocation_id, \"end\", _ingest_id, _valid_to FROM superseded_allocations").fetchall()
    assert [(a, e.isoformat(), f, t) for a, e, f, t in kept] == [("b1", "2026-10-16T12:00:00+00:00", 1, 3)]
    res = invoke("audit", str(db))
    assert res.exit_code == 0 and f"sha256 {files[str(late_csv)]}" in res.output
    assert audit.version_label(store.data_version(db)) == "v3"  # what the dashboard's exports say


def test_no_late_refuses_a_change_to_a_closed_period(ledger, tmp_path) -> None:
    """--no-late: a $100 October invoice is refused, nothing written (still version 3); a
    November-only row passes."""
    db = tmp_path / "copy.duckdb"
    shutil.copy(ledger["db"], db)
    res = invoke("ingest", str(_late(tmp_path, "more", "c4", 100)), "--db", str(db), "--no-late")
    assert res.exit_code == 2 and "closed period(s) 2026-10" in res.output
    assert audit.current_version(db) == 3
    nov = _bundle(tmp_path / "nov", allocations=ALLOC_HEAD,
                  costs=COST_HEAD + "c5,depreciation,10,2026-11-02T00:00:00Z,2026-11-03T00:00:00Z\n")
    assert invoke("ingest", str(nov), "--db", str(db), "--no-late").exit_code == 0
    assert audit.current_version(db) == 4


def test_reopen_is_recorded_and_the_period_is_computed_again(ledger, tmp_path) -> None:
    """Reopened, October is computed from version 3: A $1,116, B $1,080, idle $36."""
    db = tmp_path / "copy.duckdb"
    shutil.copy(ledger["db"], db)
    assert invoke("reopen", str(db), "2026-10", "--why", "auditor asked for the Slurm fix").exit_code == 0
    rep = json.loads(invoke("report", str(db), "--period", "2026-10", "--json").output)
    assert "closed" not in rep and rep["data_version"] == 3
    assert sorted((r["tenant"], r["cost"]) for r in rep["by_tenant"]) == [("A", 1116.0), ("B", 1080.0)]
    listed = invoke("close", str(db), "--list").output
    assert "reopened" in listed and "auditor asked for the Slurm fix" in listed


_KILL_SCRIPT = """
import sys, time
from pathlib import Path
from cost_engine import close, diff
real = close.insert_close
def slow(con, row):
    real(con, row)
    Path(sys.argv[2]).write_text("inserted")
    time.sleep(60)
close.insert_close = slow
close.close_period(sys.argv[1], "2026-10", diff.parse_span("2026-10", "UTC"), accept_gaps=True)
"""


def test_kill_9_during_close_leaves_the_period_open(tmp_path) -> None:
    """A close killed after writing its row, before committing: October stays open and the store
    intact (version 1, A $744); the next close works."""
    db = tmp_path / "ledger.duckdb"
    assert invoke("ingest", str(_base(tmp_path)), "--db", str(db)).exit_code == 0
    marker = tmp_path / "marker"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.Popen([sys.executable, "-c", _KILL_SCRIPT, str(db), str(marker)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the close never reached its insert"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert close.closed_periods(db) == []
    rep = json.loads(invoke("report", str(db), "--period", "2026-10", "--json").output)
    assert "closed" not in rep and rep["data_version"] == 1
    assert [(r["tenant"], r["cost"]) for r in rep["by_tenant"]] == [("A", 744.0), ("B", 372.0)]
    assert invoke("close", str(db), "2026-10", "--accept-gaps").exit_code == 0
    assert [c.period for c in close.closed_periods(db)] == ["2026-10"]


def test_an_import_into_a_closed_month_is_recorded_with_its_file(ledger, tmp_path) -> None:
    """`import slurm --db` of the sacct fixture (jobs of 2026-10-01) touches the closed October:
    the import says so, the trail holds the file's sha256, and October's figures stay as sent
    (A $744, B $372)."""
    db = tmp_path / "copy.duckdb"
    shutil.copy(ledger["db"], db)
    sacct = Path(__file__).parent / "fixtures" / "importers" / "sacct.txt"
    cfg = tmp_path / "utc.toml"
    cfg.write_text(OCT + 'source_timezone = "UTC"\n')
    res = invoke("import", "slurm", str(sacct), "--db", str(db), "--config", str(cfg))
    assert res.exit_code == 0, res.output
    assert "closed period 2026-10 touched:" in res.output
    last = audit.trail(db)[-1]
    assert last["data_version"] == 4 and last["source"].startswith("import slurm")
    assert last["files"] == [{"path": str(sacct), "sha256": hashlib.sha256(sacct.read_bytes()).hexdigest(),
                              "bytes": sacct.stat().st_size}]
    rep = json.loads(invoke("report", str(db), "--period", "2026-10", "--json").output)
    assert [(r["tenant"], r["cost"]) for r in rep["by_tenant"]] == [("A", 744.0), ("B", 372.0)]
    assert rep["after_close"][-1]["data_version"] == 4


def test_a_report_never_reads_new_data_under_the_old_config(tmp_path) -> None:
    """An ingest commits its data with its config (EUR) before it rewrites the .toml beside the
    store (still USD, a config the store recorded): a report in between runs under EUR. A
    config never recorded (a hand edit to GBP) is the user's: it is used."""
    from cost_engine.contract import make_frame
    from cost_engine.bundle import Bundle

    db = tmp_path / "ledger.duckdb"
    assert invoke("ingest", str(_base(tmp_path)), "--db", str(db)).exit_code == 0
    eur = OCT.replace("\n", '\ncurrency = "EUR"\n', 1)
    late = Bundle.from_frames({"owners": make_frame("owners", [{"tenant": "C", "project": "C1"}])})
    store.ingest(db, late, before_commit=close.LateHook(config_text=eur))  # the .toml is not written yet
    assert json.loads(invoke("report", str(db), "--json").output)["period"]["currency"] == "EUR"
    db.with_suffix(".toml").write_text(OCT.replace("\n", '\ncurrency = "GBP"\n', 1))
    assert json.loads(invoke("report", str(db), "--json").output)["period"]["currency"] == "GBP"


def test_a_report_computes_again_when_an_ingest_commits_meanwhile(tmp_path, monkeypatch) -> None:
    """An ingest of a $100 October invoice commits while the first computation runs: the report
    is computed again at version 2, input cost 1,488 + 100 = $1,588, never a mix."""
    from cost_engine import api
    from cost_engine.bundle import Bundle
    from cost_engine.contract import make_frame

    db = tmp_path / "ledger.duckdb"
    assert invoke("ingest", str(_base(tmp_path)), "--db", str(db)).exit_code == 0
    real = api.run
    calls = []

    def racing(*args, **kwargs):
        comp = real(*args, **kwargs)
        if not calls:
            store.ingest(db, Bundle.from_frames({"costs": make_frame("costs", [
                {"cost_id": "c9", "category": "depreciation", "amount": 100.0,
                 "start": "2026-10-01T00:00:00Z", "end": "2026-11-01T00:00:00Z"}])}))
        calls.append(1)
        return comp

    monkeypatch.setattr(close.api, "run", racing)
    rep = close.report_doc(db)
    assert len(calls) == 2 and rep["data_version"] == 2
    assert rep["reconciliation"]["input_cost"] == pytest.approx(1588.0)


def test_the_data_page_lists_closed_periods_and_late_changes(ledger, tmp_path, monkeypatch) -> None:
    """The Data page of the store: October closed at version 1, two late changes (versions 2 and
    3) of +744 + 0 = +744 in all."""
    from tests.test_app_pages import open_page

    db = tmp_path / "copy.duckdb"
    shutil.copy(ledger["db"], db)
    shutil.copy(ledger["db"].with_suffix(".toml"), db.with_suffix(".toml"))
    monkeypatch.setenv("AILEDGER_SOURCE", str(db))
    at = open_page("data")
    assert any(s.value == "Closed periods" for s in at.subheader)
    frame = next(d.value for d in at.dataframe if "late_amount" in d.value.columns
                 or "Late amount" in " ".join(map(str, d.value.columns)))
    row = frame.iloc[0].to_dict()
    values = list(row.values())
    assert "2026-10" in values and 744.0 in values and "2, 3" in values


def test_a_diff_chart_names_its_data_version(ledger, tmp_path) -> None:
    """The diff waterfall written from the store says `data version 3` in its title."""
    out = tmp_path / "w.html"
    res = invoke("diff", str(ledger["db"]), "--base", "2026-10", "--period", "2026-11", "--chart", str(out))
    assert res.exit_code == 0, res.output
    assert "data version 3" in out.read_text(encoding="utf-8")


def test_a_config_rule_refuses_late_data(ledger, tmp_path) -> None:
    """`[close] late = "refuse"` beside the store refuses the $100 October invoice like --no-late
    (still version 3)."""
    db = tmp_path / "copy.duckdb"
    shutil.copy(ledger["db"], db)
    db.with_suffix(".toml").write_text(OCT + '\n[close]\nlate = "refuse"\n')
    res = invoke("ingest", str(_late(tmp_path, "more", "c4", 100)), "--db", str(db))
    assert res.exit_code == 2 and "closed period(s) 2026-10" in res.output
    assert audit.current_version(db) == 3


def test_a_late_effect_not_yet_stored_is_computed_from_the_versions(ledger, tmp_path) -> None:
    """An ingest killed after its commit, before post_effects stored its effect: the report
    computes it. A $1,488 October invoice adds $1 a card-hour at version 4: A +744, B +720,
    idle +24 (1488 - 744 - 720 hours), +1,488 in all."""
    from cost_engine.bundle import Bundle
    from cost_engine.contract import make_frame

    db = tmp_path / "copy.duckdb"
    shutil.copy(ledger["db"], db)
    shutil.copy(ledger["db"].with_suffix(".toml"), db.with_suffix(".toml"))
    hook = close.LateHook()
    store.ingest(db, Bundle.from_frames({"costs": make_frame("costs", [
        {"cost_id": "c4", "category": "depreciation", "amount": 1488.0,
         "start": "2026-10-01T00:00:00Z", "end": "2026-11-01T00:00:00Z"}])}), before_commit=hook)
    assert [c.period for c in hook.touched] == ["2026-10"]  # recorded in the ingest; post_effects never ran
    rep = json.loads(invoke("report", str(db), "--period", "2026-10", "--json").output)
    last = rep["after_close"][-1]
    assert (last["data_version"], last["amount"]) == (4, 1488.0)
    assert owners(last["owners"]) == {"A": 744.0, "B": 720.0, "(idle)": 24.0}


def test_a_bad_period_or_version_is_named(ledger) -> None:
    """`--period` that is no period, and `--as-of-version` on a folder, are errors that say why."""
    res = invoke("report", str(ledger["db"]), "--period", "October")
    assert res.exit_code == 2 and "--period October" in res.output and "YYYY-MM" in res.output
    res = invoke("report", str(ledger["root"] / "base"), "--as-of-version", "1")
    assert res.exit_code == 2 and "needs a store" in res.output
    res = invoke("close", str(ledger["db"]), "2026-10-15..2026-11-15")
    assert res.exit_code == 2 and "overlaps the closed period 2026-10" in res.output


def test_a_folder_without_allocations_adds_to_a_store_but_never_starts_one(tmp_path) -> None:
    """A late invoice arrives as costs.csv alone. Into a store that holds the allocations it is
    ingested (1 cost row inserted, nothing else); as the first ingest of a new store it is refused
    as before (a bundle that stands alone must have its allocations), and no file is made."""
    db = tmp_path / "s.duckdb"
    assert invoke("ingest", str(_base(tmp_path)), "--db", str(db)).exit_code == 0
    res = invoke("ingest", str(_late(tmp_path)), "--db", str(db))
    assert res.exit_code == 0, res.output
    assert "1 inserted" in res.output  # the invoice's one row
    with store.connect(db) as con:
        assert con.execute("SELECT count(*), sum(amount) FROM costs").fetchone() == (3, 1488 + 1440 + 744)
    fresh = tmp_path / "new.duckdb"
    res = invoke("ingest", str(_late(tmp_path, "alone")), "--db", str(fresh))
    assert res.exit_code == 2 and "has no allocations file" in res.output
    assert not fresh.exists()
