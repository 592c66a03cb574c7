"""The distributed path: a rollup folder made elsewhere (`ailedger rollup`, DuckDB or Spark) stored with
the other tables (`ailedger ingest --rollup`) gives the raw path's report, or names in `gaps` the
quarters it could not decide without raw samples."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest
from click.testing import CliRunner

from cost_engine import quarter_store, quarters, store
from cost_engine.cli import main
from cost_engine.config import Activity
from cost_engine.engine import compute
from cost_engine.report import build_report
from cost_engine.telemetry import FrameTelemetry, StoreTelemetry
from tests.helpers import DAY0, make_bundle, make_config
from tests.test_interval_property import _close
from tests.test_quarter_rollup import INV, samples
from tests.test_rollup import FLEET_WEEK, spark  # noqa: F401  (the local[2] session fixture)

S = timedelta(seconds=1)


def _bundle(start_s: int):
    # Two cards of one job, samples every minute at :20 s for 3 hours, util cycling 0/40/90 %,
    # energy counters; the job holds both from DAY0 + start_s to 02:00.
    tele = []
    for c, shift in (("g0", 0), ("g1", 1)):
        tele += samples(c, 20, [60] * 179, lambda i, t, k=shift: (0.0, 40.0, 90.0)[(i + k) % 3], power=450.0,
                        energy=_counter)
    allocs = [{"allocation_id": f"a{i}", "gpu_id": f"g{i}", "owner": "A", "job_id": "j1",
               "start": DAY0 + start_s * S, "end": DAY0 + 7200 * S} for i in range(2)]
    return make_bundle(inventory=INV, telemetry=tele, allocations=allocs)


def _counter(i: int, t: int) -> float:
    """A counter growing 250 J x (2i + 1) + 15,000 J a minute: 254 W to 1,738 W, within 450 W / 4 and
    4 x 450 W (the cards read 450 W) and the 2,000 W ceiling of an unknown accelerator, so it is
    believed (power_limits)."""
    return 250.0 * i * i + 15_000.0 * i


def _external_store(tmp_path, bundle) -> tuple:
    tel = tmp_path / "telemetry.parquet"
    bundle["telemetry"].write_parquet(tel)
    folder = tmp_path / "rollup"
    quarters.duckdb_rollup(str(tel), str(folder), Activity())
    db = tmp_path / "s.duckdb"
    store.ingest(db, make_bundle(inventory=INV, allocations=bundle["allocations"].to_dicts()), rollup=None)
    assert quarter_store.ingest_rollup(db, folder) > 0
    loaded = store.load_bundle(db, tables=["inventory", "allocations"])
    return compute(loaded, make_config(), telemetry=StoreTelemetry(db)), db


def test_a_rollup_without_raw_samples_gives_the_exact_report_where_the_masks_decide(tmp_path):
    bundle = _bundle(900)  # the job starts on a quarter hour: nothing needs raw samples
    raw = compute(bundle, make_config(), telemetry=FrameTelemetry(bundle["telemetry"]))
    ext, db = _external_store(tmp_path, bundle)
    _close(build_report(raw), build_report(ext))
    assert not [g for g in ext.gaps if g[0] == "telemetry rollup"]
    with store.connect(db) as con:
        assert store._meta(con, "rollup_external") == "1"


def test_a_rollup_without_raw_samples_names_the_quarters_it_could_not_decide(tmp_path):
    bundle = _bundle(1000)  # starts at 00:16:40, inside the quarter 00:15-00:30
    raw = compute(bundle, make_config(), telemetry=FrameTelemetry(bundle["telemetry"]))
    ext, _ = _external_store(tmp_path, bundle)
    # 00:15-00:30 is cut for both cards; the job's next quarter cannot be decided by the masks
    # either (they need the quarter before): 2 cards x 2 quarters.
    gaps = [g for g in ext.gaps if g[0] == "telemetry rollup"]
    assert gaps and gaps[0][1].startswith("4 card quarter hours") and "g0 2026-10-01 00:15Z" in gaps[0][1]
    # Hours and allocations do not depend on telemetry; covered time is exact (spread by time
    # over a quarter the samples cover wholly).
    r, e = build_report(raw)["totals"], build_report(ext)["totals"]
    assert e["allocated_gpu_hours"] == pytest.approx(r["allocated_gpu_hours"], rel=1e-12)
    assert ext.seg["covered_s"].sum() == pytest.approx(raw.seg["covered_s"].sum(), rel=1e-12)


def test_cli_rollup_then_ingest_with_it(tmp_path):
    bundle = _bundle(900)
    tel = tmp_path / "telemetry.parquet"
    bundle["telemetry"].write_parquet(tel)
    folder = tmp_path / "bundle"
    folder.mkdir()
    for name in ("inventory", "allocations"):
        bundle[name].write_csv(folder / f"{name}.csv")
    (folder / "ailedger.toml").write_text('[period]\nstart = 2026-10-01T00:00:00Z\nend = 2026-10-02T00:00:00Z\n')
    runner = CliRunner()
    got = runner.invoke(main, ["rollup", str(tel), str(tmp_path / "r")])
    assert got.exit_code == 0, got.output
    db = tmp_path / "s.duckdb"
    got = runner.invoke(main, ["ingest", str(folder), "--db", str(db), "--rollup", str(tmp_path / "r")])
    assert got.exit_code == 0, got.output
    assert "card quarter hours stored" in got.output
    with store.connect(db) as con:
        assert quarter_store.load(con, Activity()) is not None


@pytest.mark.slow
def test_spark_rollup_report_equals_the_duckdb_path(spark, tmp_path):  # noqa: F811
    # A slice of the sample fleet (cards with and without counters, a counter reset), two days.
    tel = pl.read_parquet(FLEET_WEEK)
    t0 = tel["ts"].min()
    keep = tel["gpu_id"].unique().sort().head(8).to_list()
    part = tel.filter(pl.col("gpu_id").is_in(keep) & (pl.col("ts") < t0 + timedelta(days=2)))
    src = tmp_path / "telemetry.parquet"
    part.write_parquet(src)
    folder = tmp_path / "spark-rollup"
    quarters.spark_rollup(spark, str(src), str(folder), Activity())
    spark_cells = quarters.finish_cells(pl.read_parquet(folder / "cells" / "*.parquet"))
    duck_cells, _ = quarters.cells_duckdb(part, Activity())
    assert spark_cells.select("gpu_id", "q", "samples", "bmask", "imask", "cmin", "cbusy", "cidle").equals(
        duck_cells.select("gpu_id", "q", "samples", "bmask", "imask", "cmin", "cbusy", "cidle"))
    for c in ("covered_s", "active_s", "util_s", "joules", "idle_joules", "start_j"):
        a, b = spark_cells[c].fill_null(0.0).to_list(), duck_cells[c].fill_null(0.0).to_list()
        assert all(abs(x - y) <= 1e-9 * max(abs(x), abs(y), 1e-6) for x, y in zip(a, b)), c
    # The store's rollup from Spark: the report equals the one from the DuckDB rollup and the raw path.
    day = t0.replace(hour=0, minute=0, second=0, microsecond=0)
    allocs = [{"allocation_id": f"a{i}", "gpu_id": g, "owner": "A", "job_id": "j" + str(i % 2),
               "start": day + timedelta(hours=3, seconds=37 * i), "end": day + timedelta(hours=30)}
              for i, g in enumerate(keep)]
    inv = [{"gpu_id": g, "pool": "p", "node": "n"} for g in keep]
    bundle = make_bundle(inventory=inv, allocations=allocs, telemetry=part.to_dicts())
    cfg = make_config(period={"start": day, "end": day + timedelta(days=2)})
    reports = []
    for name, use_spark in (("duck", False), ("spark", True)):
        db = tmp_path / f"{name}.duckdb"
        store.ingest(db, bundle, rollup=None if use_spark else Activity())
        if use_spark:
            quarter_store.ingest_rollup(db, folder)
        loaded = store.load_bundle(db, tables=["inventory", "allocations"])
        reports.append(build_report(compute(loaded, cfg, telemetry=StoreTelemetry(db))))
    raw = build_report(compute(bundle, cfg, telemetry=FrameTelemetry(bundle["telemetry"])))
    _close(reports[0], reports[1])
    _close(raw, reports[1])


def test_a_rollup_made_again_into_the_same_folder_replaces_the_old_one(tmp_path):
    """`ailedger rollup` run twice into one folder: the second run must not fail on the existing
    folders, and a part file left there by an earlier run (here a stale copy under another name,
    as Spark names its parts) must go, or the ingest would store its cells twice. _bundle(900):
    two cards, samples 00:00:20-02:58:20 a minute apart; the last one's interval runs past 03:00,
    so quarters 0..12: 13 cells a card, 26 in all."""
    tel = tmp_path / "telemetry.parquet"
    _bundle(900)["telemetry"].write_parquet(tel)
    folder = tmp_path / "r"
    quarters.duckdb_rollup(str(tel), str(folder), Activity())
    assert pl.read_parquet(folder / "cells" / "*.parquet").height == 26
    (folder / "cells" / "part-00000-stale.parquet").write_bytes((folder / "cells" / "part-0.parquet").read_bytes())
    quarters.duckdb_rollup(str(tel), str(folder), Activity())
    assert sorted(p.name for p in (folder / "cells").iterdir()) == ["part-0.parquet"]
    assert pl.read_parquet(folder / "cells" / "*.parquet").height == 26


@pytest.mark.parametrize("manifest, ok", [
    ({"format": quarters.FORMAT, "quarter_s": quarters.Q_S, "rule": "threshold:5.0:300000000"}, True),
    ({"format": quarters.FORMAT + 1, "quarter_s": quarters.Q_S, "rule": "threshold:5.0:300000000"}, False),
    ({"format": quarters.FORMAT, "quarter_s": 300, "rule": "threshold:5.0:300000000"}, False),
    ({"format": quarters.FORMAT, "quarter_s": quarters.Q_S, "rule": 5}, False),
])
def test_a_rollup_folder_of_another_format_or_quarter_length_is_refused(tmp_path, manifest, ok):
    """Each of the manifest's three checks refuses on its own: another format, 300 s quarters,
    a rule that is not a rule key; this version's manifest gives its rule key."""
    import json

    (tmp_path / "rollup.json").write_text(json.dumps(manifest), encoding="utf-8")
    if ok:
        assert quarters.read_manifest(tmp_path) == "threshold:5.0:300000000"
    else:
        with pytest.raises(ValueError, match="rollup.json: rollup format"):
            quarters.read_manifest(tmp_path)


def test_a_rollup_folder_stored_beside_raw_samples_or_for_another_rule(tmp_path):
    """_bundle(900): cards g0, g1 sampled every minute 00:00:20-02:58:20, 13 quarters a card (26
    cells). The store holds those raw samples and its own rollup for the default rule
    (threshold 5 %). A folder rolled up elsewhere from the first hour's samples only (4 quarters
    a card plus the quarter the 00:59:20 sample's interval reaches: 5, so 10 cells):
    - for the same rule, it replaces the store's cells of those cards and quarters and keeps
      the others: 26 cells, and the rollup is not external (raw samples are here);
    - for another rule (threshold 50 %), nothing of the old rule may stay: 10 cells."""
    bundle = _bundle(900)
    db = tmp_path / "s.duckdb"
    store.ingest(db, bundle, rollup=Activity())
    first = tmp_path / "first.parquet"
    bundle["telemetry"].filter(pl.col("ts") < DAY0 + timedelta(hours=1)).write_parquet(first)

    def count(con) -> int:
        return con.sql(f"SELECT count(*) FROM {quarter_store.TABLE}").fetchall()[0][0]

    quarters.duckdb_rollup(str(first), str(tmp_path / "same"), Activity())
    assert quarter_store.ingest_rollup(db, tmp_path / "same") == 10
    with store.connect(db) as con:
        got = quarter_store.load(con, Activity())
        assert got is not None and not got.external
        assert count(con) == 26
    other = Activity(threshold_pct=50.0)
    quarters.duckdb_rollup(str(first), str(tmp_path / "other"), other)
    assert quarter_store.ingest_rollup(db, tmp_path / "other") == 10
    with store.connect(db) as con:
        assert quarter_store.load(con, Activity()) is None
        assert quarter_store.load(con, other) is not None
        assert count(con) == 10


def test_the_spark_sql_writes_the_rules_numbers_as_literals():
    """Spark SQL gets no bound parameters, so the rule's numbers are written into the text: the
    threshold as a float literal (7.5 %, never cut to 7) and the gap cap in microseconds as an
    integer (300 s -> 300000000), with no parameter left unwritten."""
    text = quarters.spark_sql(quarters.CELLS_SQL, Activity(threshold_pct=7.5))
    assert "$" not in text
    assert "CAST(7.5 AS DOUBLE)" in text and "CAST(7 AS DOUBLE)" not in text
    assert "300000000" in text and "300000000.0" not in text


def test_a_refresh_leaves_a_rollup_made_elsewhere_alone(tmp_path):
    """A store whose rollup came from a folder and holds no raw samples (_external_store: 26
    cells) cannot rebuild it for another rule: the refresh leaves it as it is, still the
    default rule's, and reports nothing recomputed."""
    _, db = _external_store(tmp_path, _bundle(900))
    done = quarter_store.refresh(db, Activity(threshold_pct=50.0))
    assert (done.cards, done.cells, done.full) == (0, 0, False)
    with store.connect(db) as con:
        assert con.sql(f"SELECT count(*) FROM {quarter_store.TABLE}").fetchall()[0][0] == 26
        assert quarter_store.load(con, Activity()) is not None


def test_a_rollup_folder_beside_a_single_raw_sample_is_not_external(tmp_path):
    """The store holds one raw sample (g0 at 00:00:20): however few, the raw samples are here,
    so a rollup folder stored beside it (1 cell) is not external."""
    one = make_bundle(inventory=INV, telemetry=samples("g0", 20, [], lambda i, t: 50.0))
    db = tmp_path / "s.duckdb"
    store.ingest(db, one, rollup=None)
    tel = tmp_path / "telemetry.parquet"
    one["telemetry"].write_parquet(tel)
    quarters.duckdb_rollup(str(tel), str(tmp_path / "r"), Activity())
    assert quarter_store.ingest_rollup(db, tmp_path / "r") == 1
    with store.connect(db) as con:
        got = quarter_store.load(con, Activity())
        assert got is not None and not got.external


def test_a_rollup_without_raw_samples_lists_five_of_the_quarters_it_could_not_decide(tmp_path):
    """As above with three cards of the job (g2 cycling like g0, one step on): 00:15-00:30 is cut
    for each card and the next quarter cannot be decided either: 3 cards x 2 quarters = 6 card
    quarter hours, of which the gap lists the first five, by card then time.

    Mutants (engine.compute: six listed; rows read as tuples, `named=False`): g2's 00:30 also
    listed; the gap cannot be written."""
    tele = []
    for c, shift in (("g0", 0), ("g1", 1), ("g2", 2)):
        tele += samples(c, 20, [60] * 179, lambda i, t, k=shift: (0.0, 40.0, 90.0)[(i + k) % 3], power=450.0,
                        energy=_counter)
    inv = [*INV, {"gpu_id": "g2", "pool": "p", "node": "n0"}]
    allocs = [{"allocation_id": f"a{i}", "gpu_id": f"g{i}", "owner": "A", "job_id": "j1",
               "start": DAY0 + 1000 * S, "end": DAY0 + 7200 * S} for i in range(3)]
    bundle = make_bundle(inventory=inv, telemetry=tele, allocations=allocs)
    tel = tmp_path / "telemetry.parquet"
    bundle["telemetry"].write_parquet(tel)
    quarters.duckdb_rollup(str(tel), str(tmp_path / "rollup"), Activity())
    db = tmp_path / "s.duckdb"
    store.ingest(db, make_bundle(inventory=inv, allocations=allocs), rollup=None)
    assert quarter_store.ingest_rollup(db, tmp_path / "rollup") > 0
    ext = compute(store.load_bundle(db, tables=["inventory", "allocations"]), make_config(), telemetry=StoreTelemetry(db))
    gaps = [g[1] for g in ext.gaps if g[0] == "telemetry rollup"]
    assert len(gaps) == 1 and gaps[0].startswith("6 card quarter hours")
    assert gaps[0].endswith("e.g. g0 2026-10-01 00:15Z, g0 2026-10-01 00:30Z, g1 2026-10-01 00:15Z, "
                            "g1 2026-10-01 00:30Z, g2 2026-10-01 00:15Z")
