"""What a newcomer runs into first: ingest into a folder that does not exist yet, the config
kept beside the store (and said so), a misspelt name given to explain, the generator's
anomalies.json in a bundle, --strict into a store, and a quick benchmark run that must not
touch the committed results.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from cost_engine.bundle import read_bundle
from cost_engine.cli import main
from cost_engine.import_cli import import_cmd

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "importers"

CONFIG = '[period]\nstart = 2026-10-01T00:00:00Z\nend = 2026-10-02T00:00:00Z\n'


def _bundle(folder: Path) -> Path:
    """Two projects of one tenant on one card: chat-assistant 2 h, code-copilot 1 h."""
    folder.mkdir(parents=True)
    (folder / "inventory.csv").write_text("gpu_id,pool\ng0,p\n")
    (folder / "allocations.csv").write_text(
        "allocation_id,gpu_id,start,end,owner\n"
        "a1,g0,2026-10-01T00:00:00Z,2026-10-01T02:00:00Z,chat-assistant\n"
        "a2,g0,2026-10-01T02:00:00Z,2026-10-01T03:00:00Z,code-copilot\n")
    (folder / "owners.csv").write_text("tenant,project\nproduct,chat-assistant\nproduct,code-copilot\n")
    (folder / "rates.csv").write_text("pool,price_per_gpu_hour\np,2.0\n")
    (folder / "ailedger.toml").write_text(CONFIG)
    return folder


def test_ingest_creates_the_store_folder_and_says_where_the_config_went(tmp_path):
    bundle = _bundle(tmp_path / "b")
    db = tmp_path / "data" / "nested" / "ledger.duckdb"
    res = CliRunner().invoke(main, ["ingest", str(bundle), "--db", str(db)])
    assert res.exit_code == 0, res.output
    assert db.is_file()
    kept = db.with_suffix(".toml")
    assert kept.read_text() == CONFIG
    assert f"config: wrote {kept} from {bundle / 'ailedger.toml'} (read by report, explain and serve of {db})" \
        in res.output
    again = CliRunner().invoke(main, ["ingest", str(bundle), "--db", str(db)])
    assert f"config: {kept} unchanged" in again.output
    (bundle / "ailedger.toml").write_text(CONFIG + 'timezone = "Europe/Berlin"\n')
    changed = CliRunner().invoke(main, ["ingest", str(bundle), "--db", str(db)])
    assert f"config: replaced {kept}" in changed.output
    assert "Europe/Berlin" in kept.read_text()


def test_ingest_under_a_file_is_an_error_not_a_traceback(tmp_path):
    bundle = _bundle(tmp_path / "b")
    (tmp_path / "data").write_text("not a folder")
    res = CliRunner().invoke(main, ["ingest", str(bundle), "--db", str(tmp_path / "data" / "ledger.duckdb")])
    assert res.exit_code == 2
    assert "error: cannot create the folder of the store" in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_explain_names_an_unknown_project_and_its_near_matches(tmp_path):
    """A misspelt project used to print `cost 0.00` and exit 0."""
    bundle = _bundle(tmp_path / "b")
    res = CliRunner().invoke(main, ["explain", str(bundle), "--project", "chat-asistant"])
    assert res.exit_code == 2
    assert "error: unknown project 'chat-asistant'; did you mean chat-assistant?" in res.output
    res = CliRunner().invoke(main, ["explain", str(bundle), "--tenant", "zzz"])
    assert res.exit_code == 2
    assert "error: unknown tenant 'zzz'; known tenants: product" in res.output
    res = CliRunner().invoke(main, ["explain", str(bundle), "--model", "llama"])
    assert "error: unknown model 'llama'; known models: none" in res.output


def test_explain_of_a_known_project(tmp_path):
    """chat-assistant held g0 for 2 of the 24 hours at $2.00: $4.00 (the other 21 h are idle)."""
    bundle = _bundle(tmp_path / "b")
    res = CliRunner().invoke(main, ["explain", str(bundle), "--project", "chat-assistant"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("chat-assistant: cost 4.00\n")
    assert "  a1               g0                      2.00 GPU-h         4.00" in res.output


def test_the_generators_anomaly_list_is_no_unknown_file(tmp_path):
    bundle = _bundle(tmp_path / "b")
    (bundle / "anomalies.json").write_text("{}")
    (bundle / "alocations.csv").write_text("x\n1\n")  # a misnamed table is still reported
    assert read_bundle(bundle).notes == [("unknown file", "alocations.csv")]


def test_strict_import_into_a_store_writes_nothing(tmp_path):
    """3 of sacct.txt's records cannot be mapped: with --strict neither the store nor its folder appear."""
    cfg = tmp_path / "cfg.toml"
    cfg.write_text('[period]\nsource_timezone = "UTC"\n')
    db = tmp_path / "data" / "ledger.duckdb"
    res = CliRunner().invoke(import_cmd, ["slurm", str(FIX / "sacct.txt"), "--db", str(db), "--config", str(cfg),
                                          "--end-at", "2026-10-01T14:00:00Z", "--strict"])
    assert res.exit_code == 1
    assert "--strict is set: nothing written" in res.output
    assert not db.exists() and not db.parent.exists()


def test_a_quick_benchmark_run_leaves_the_committed_results_alone(tmp_path):
    """Without --out the results go to RESULTS.md in --data (benchmarks/data/ by default, gitignored)."""
    committed = (ROOT / "benchmarks" / "RESULTS.md").read_bytes()
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--gpus", "8", "--days", "1",
                           "--repeat", "1", "--stages", "floor", "--data", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"wrote {tmp_path / 'RESULTS.md'}" in proc.stdout
    assert (tmp_path / "RESULTS.md").read_text().startswith("# Benchmark results")
    assert (ROOT / "benchmarks" / "RESULTS.md").read_bytes() == committed


def test_a_difference_that_rounds_to_zero_prints_without_a_sign(tmp_path):
    """The reconciliation difference of the sample is about -1e-12 or +1e-12 depending on the
    order Polars sums in; the summary showed `-0.000000` on some runs and `0.000000` on others."""
    from cost_engine import api
    from cost_engine.cli import render_summary
    from cost_engine.report import build_report

    rep = build_report(api.run(_bundle(tmp_path / "b")))
    for d, shown in ((-1.3e-12, "0.000000"), (1e-9, "0.000000"), (-0.25, "-0.250000")):
        rep["reconciliation"]["difference"] = d
        assert f"  difference   {shown:>14}" in render_summary(rep).splitlines()
