"""The `ailedger` command end to end: report, ingest (idempotent, conflicts, --replace), explain."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from cost_engine.cli import main

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data" / "fleet-week"


def write_bundle(folder: Path, allocations: str, config: str | None = None) -> Path:
    """A two-card bundle: g0 and g1 in pool p, $48 depreciation over one day ($1 per card-hour)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "inventory.csv").write_text("gpu_id,pool\ng0,p\ng1,p\n")
    (folder / "allocations.csv").write_text(allocations)
    (folder / "owners.csv").write_text("tenant,project\nA,A1\nB,B1\n")
    (folder / "costs.csv").write_text(
        "cost_id,category,amount,start,end\nc1,depreciation,48,2026-10-01T00:00:00Z,2026-10-02T00:00:00Z\n"
    )
    (folder / "ailedger.toml").write_text(
        config or '[period]\nstart = 2026-10-01T00:00:00Z\nend = 2026-10-02T00:00:00Z\n'
    )
    return folder


ALLOCS = (
    "allocation_id,gpu_id,start,end,owner\n"
    "a1,g0,2026-10-01T00:00:00Z,2026-10-01T10:00:00Z,A1\n"
    "b1,g1,2026-10-01T00:00:00Z,2026-10-01T04:00:00Z,B1\n"
)


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_report_json_is_the_contract_object(tmp_path):
    """$48 at $1 per card-hour: A1 10 h = $10, B1 4 h = $4, idle 34 h = $34."""
    b = write_bundle(tmp_path / "b", ALLOCS)
    res = invoke("report", str(b), "--json")
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    assert set(rep) >= {"period", "boundary", "totals", "by_tenant", "by_project", "by_model", "by_category", "idle",
                        "reconciliation", "unattributed", "rejected", "gaps"}
    assert [(r["tenant"], r["cost"]) for r in rep["by_tenant"]] == [("A", pytest.approx(10.0)), ("B", pytest.approx(4.0))]
    assert rep["reconciliation"] == {"input_cost": pytest.approx(48.0), "attributed": pytest.approx(14.0),
                                     "idle": pytest.approx(34.0), "unattributed": 0.0,
                                     "difference": pytest.approx(0.0, abs=1e-9)}


def test_report_summary_for_a_terminal(tmp_path):
    res = invoke("report", str(write_bundle(tmp_path / "b", ALLOCS)))
    assert res.exit_code == 0
    assert "top tenants by cost" in res.output
    assert "reconciliation" in res.output and "difference" in res.output
    assert "A  " in res.output


def test_ingest_is_idempotent_and_conflicts_need_replace(tmp_path):
    b = write_bundle(tmp_path / "b", ALLOCS)
    db = tmp_path / "store.duckdb"
    first = invoke("ingest", str(b), "--db", str(db))
    assert first.exit_code == 0, first.output
    # inventory 2 + allocations 2 + owners 2 + costs 1 = 7 records
    assert "7 inserted, 0 unchanged" in first.output
    again = invoke("ingest", str(b), "--db", str(db))
    assert again.exit_code == 0
    assert "0 inserted, 7 unchanged" in again.output
    rep_db = json.loads(invoke("report", str(db), "--json").output)
    rep_dir = json.loads(invoke("report", str(b), "--json").output)
    assert rep_db["totals"] == rep_dir["totals"]

    # b1 comes back ending at 06:00 instead of 04:00: rejected, store unchanged.
    changed = write_bundle(tmp_path / "c", ALLOCS.replace("2026-10-01T04:00:00Z,B1", "2026-10-01T06:00:00Z,B1"))
    res = CliRunner().invoke(main, ["ingest", str(changed), "--db", str(db)])
    assert res.exit_code == 2
    assert "b1" in res.output and "--replace" in res.output
    assert json.loads(invoke("report", str(db), "--json").output)["totals"]["allocated_gpu_hours"] == pytest.approx(14.0)
    res = invoke("ingest", str(changed), "--db", str(db), "--replace")
    assert res.exit_code == 0
    assert json.loads(invoke("report", str(db), "--json").output)["totals"]["allocated_gpu_hours"] == pytest.approx(16.0)


def test_bad_rows_are_reported_with_file_row_and_reason(tmp_path):
    allocs = ALLOCS + "x9,g0,2026-10-01T12:00:00Z,2026-10-01T11:00:00Z,A1\n"
    b = write_bundle(tmp_path / "b", allocs)
    rep = json.loads(invoke("report", str(b), "--json").output)
    [rej] = rep["rejected"]
    assert (rej["table"], rej["row"]) == ("allocations", 3)
    assert "end before start" in rej["reason"]
    assert rep["totals"]["allocated_gpu_hours"] == pytest.approx(14.0)  # the valid rest still counts


def test_unknown_config_key_is_an_error_naming_it(tmp_path):
    b = write_bundle(tmp_path / "b", ALLOCS, config="[energy]\npue = 1.2\npeu = 1.3\n")
    res = CliRunner().invoke(main, ["report", str(b)])
    assert res.exit_code == 2
    assert "energy.peu" in res.output and "unknown key" in res.output


def test_explain_lists_records_behind_a_project(tmp_path):
    b = write_bundle(tmp_path / "b", ALLOCS)
    res = invoke("explain", str(b), "--project", "A1", "--json")
    data = json.loads(res.output)
    assert data["total_cost"] == pytest.approx(10.0)
    assert [a["allocation_id"] for a in data["allocations"]] == ["a1"]
    assert [(c["cost_id"], round(c["cost"], 6)) for c in data["costs"]] == [("c1", 10.0)]


def test_sample_bundle_reconciles_and_explains(tmp_path):
    """The committed sample: difference 0; a project drills down to its records."""
    res = invoke("report", str(SAMPLE), "--json")
    rep = json.loads(res.output)
    assert abs(rep["reconciliation"]["difference"]) <= 1e-6 * rep["reconciliation"]["input_cost"]
    assert {u["key"] for u in rep["unattributed"]} == {"key-legacy-7", "acct_sandbox"}
    top = rep["by_project"][0]["project"]
    ex = json.loads(invoke("explain", str(SAMPLE), "--project", top, "--json").output)
    assert ex["total_cost"] == pytest.approx(rep["by_project"][0]["cost"])
    assert sum(c["cost"] for c in ex["costs"]) == pytest.approx(ex["total_cost"])


def test_ingest_into_store_then_report_matches_folder(tmp_path):
    bundle = tmp_path / "fleet"
    shutil.copytree(SAMPLE, bundle)
    db = tmp_path / "fleet.duckdb"
    assert invoke("ingest", str(bundle), "--db", str(db)).exit_code == 0
    a = json.loads(invoke("report", str(db), "--json").output)
    b = json.loads(invoke("report", str(bundle), "--json").output)
    assert a["totals"] == pytest.approx(b["totals"])
    assert a["reconciliation"] == pytest.approx(b["reconciliation"], abs=1e-6)


# Issue 17, item 2: the report's JSON never holds a bare NaN (which no JSON parser accepts).


def test_an_infinite_config_value_is_an_error_naming_the_key(tmp_path):
    """On main pue = inf exited 0 with a NaN reconciliation and `NaN` printed in --json."""
    b = write_bundle(tmp_path / "b", ALLOCS, config="[energy]\npue = inf\n")
    res = CliRunner().invoke(main, ["report", str(b), "--json"])
    assert res.exit_code == 2
    assert "energy.pue: Input should be a finite number" in res.output and "NaN" not in res.output


def test_a_huge_sample_gap_is_an_error_not_a_traceback(tmp_path):
    """On main max_sample_gap_s = 1e12 ended in an OverflowError traceback."""
    b = write_bundle(tmp_path / "b", ALLOCS, config="[activity]\nmax_sample_gap_s = 1e12\n")
    res = CliRunner().invoke(main, ["report", str(b)])
    assert res.exit_code == 2 and res.exception is not None and isinstance(res.exception, SystemExit)
    assert "activity.max_sample_gap_s" in res.output


def test_the_json_writer_refuses_non_finite_numbers(tmp_path, monkeypatch):
    """Whatever makes a figure NaN, --json names where it is instead of printing invalid JSON."""
    import cost_engine.report as report_mod
    from cost_engine import jsonout

    with pytest.raises(jsonout.NonFiniteError, match=r"\$.totals.cost is nan"):
        jsonout.dumps({"totals": {"cost": float("nan")}})
    assert jsonout.dumps({"a": [1.5, None]}) == '{"a": [1.5, null]}'

    real = report_mod.build_report

    def broken(comp):
        rep = real(comp)
        rep["reconciliation"]["difference"] = float("nan")
        return rep

    monkeypatch.setattr(report_mod, "build_report", broken)
    res = CliRunner().invoke(main, ["report", str(write_bundle(tmp_path / "b", ALLOCS)), "--json"])
    assert res.exit_code == 2
    assert "refusing to write invalid JSON: $.reconciliation.difference is nan" in res.output
    assert "NaN" not in res.output
