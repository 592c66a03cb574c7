"""Owner names that are SQL or HTML travel the whole path as plain data: bundle -> store ->
engine -> report -> drill-down (DuckDB with bound parameters) -> FOCUS export."""

from __future__ import annotations

import duckdb
import pytest

from cost_engine import store, views
from cost_engine.api import run
from cost_engine.report import build_report
from tests.helpers import make_bundle, ts

SQL = "'; DROP TABLE allocations; --"
HTML = "<script>alert(1)</script>"


def test_sql_and_html_names_are_data(tmp_path):
    """Two cards, one day, $48 depreciation ($1 per card-hour). The SQL-named project holds g0
    for 10 h ($10), the HTML-named one g1 for 4 h ($4)."""
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}, {"gpu_id": "g1", "pool": "p"}],
        allocations=[
            {"allocation_id": "a1", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 10), "owner": SQL},
            {"allocation_id": "a2", "gpu_id": "g1", "start": ts(1, 0), "end": ts(1, 4), "owner": HTML},
        ],
        owners=[{"tenant": SQL, "project": SQL}, {"tenant": HTML, "project": HTML}],
        costs=[{"cost_id": "c", "category": "depreciation", "amount": 48.0, "start": ts(1, 0), "end": ts(2, 0)}],
    )
    db = tmp_path / "s.duckdb"
    store.ingest(db, b)
    (tmp_path / "s.toml").write_text('[period]\nstart = 2026-10-01T00:00:00Z\nend = 2026-10-02T00:00:00Z\n')
    comp = run(db)
    rep = build_report(comp)
    assert {r["tenant"]: r["cost"] for r in rep["by_tenant"]} == pytest.approx({SQL: 10.0, HTML: 4.0})

    page = views.records(comp, None, db, table="allocations", tenant=SQL)
    assert page.backend == "store"
    assert page.rows["allocation_id"].to_list() == ["a1"]
    assert page.rows["owner"].to_list() == [SQL]
    assert store.query_records(db, "allocations", filters={"owner": [SQL]})["allocation_id"].to_list() == ["a1"]

    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("select count(*) from allocations").fetchone()[0] == 2


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_column_names_that_look_like_wildcards_are_plain_names(tmp_path, fmt):
    """Extra columns named "*" and "^.*$" (which polars' pl.col would expand to every column)
    are kept as two plain extra columns; a JSONL file of only such keys is an owners file
    missing its required columns (a clear error, found by the reader fuzzing)."""
    from cost_engine.bundle import BundleError, read_bundle

    folder = tmp_path / fmt
    folder.mkdir()
    row = {"allocation_id": "a", "gpu_id": "g", "start": ts(1, 0), "end": ts(1, 2), "owner": "x", "*": "star", "^.*$": "regex"}
    if fmt == "csv":
        (folder / "allocations.csv").write_text(",".join(row) + "\n" + ",".join(row.values()) + "\n")
    else:
        import json

        (folder / "allocations.jsonl").write_text(json.dumps(row) + "\n")
    b = read_bundle(folder)
    a = b["allocations"]
    assert a.columns[-2:] == ["*", "^.*$"]
    assert a.row(0, named=True)["*"] == "star" and a.row(0, named=True)["^.*$"] == "regex"
    assert b.rejected.height == 0
    # 2 h on one card, no inventory: 2.0 allocated GPU-hours.
    (folder / "ailedger.toml").write_text('[period]\nstart = 2026-10-01T00:00:00Z\nend = 2026-10-02T00:00:00Z\n')
    assert build_report(run(folder))["totals"]["allocated_gpu_hours"] == pytest.approx(2.0)
    (folder / "owners.jsonl").write_text('{"*": null}\n')
    with pytest.raises(BundleError, match="owners.jsonl: required columns tenant, project missing"):
        read_bundle(folder)
