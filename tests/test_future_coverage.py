"""Issue 38, items 4 and 5: a row dated 2099 never stretches the default period (it is kept and
named per table in the gaps and in the import and ingest output), and a span without a rate or a
tariff is a gap naming the pool (or the tariffs) and the span, with every figure built on it
marked partial (a figure with no price at all is null, never 0).

`now` is injected everywhere: no test reads the wall clock. Every figure is computed by hand in
the test's docstring."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from cost_engine import api, future, store, views
from cost_engine.cli import main, render_summary
from cost_engine.config import parse_config
from cost_engine.engine import compute
from cost_engine.importers import ImportOptions, import_files
from cost_engine.ledger import resolve_period
from cost_engine.report import build_report
from tests.helpers import make_bundle, make_config, ts

UTC = timezone.utc
NOW = datetime(2026, 10, 20, tzinfo=UTC)
FIX = Path(__file__).parent / "fixtures" / "importers"
NO_PERIOD = parse_config({})


def _future_gaps(rep: dict) -> dict[str, str]:
    return {g["detail"].split(":")[0]: g["detail"] for g in rep["gaps"] if g["what"] == future.WHAT}


def _with_2099(**extra):
    """Cards g0, g1 of pool p at $2/GPU-hour. a1 holds g0 on 2026-10-01 00:00-24:00; a2 holds g1
    from 12:00 that day "until 2099-01-01" (a bogus end)."""
    return make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}, {"gpu_id": "g1", "pool": "p"}],
        allocations=[{"allocation_id": "a1", "gpu_id": "g0", "start": ts(1), "end": ts(2), "owner": "A1"},
                     {"allocation_id": "a2", "gpu_id": "g1", "start": ts(1, 12), "end": "2099-01-01T00:00:00Z",
                      "owner": "A1"}],
        owners=[{"tenant": "A", "project": "A1"}],
        rates=[{"pool": "p", "price_per_gpu_hour": 2.0}],
        **extra,
    )


def test_a_row_dated_2099_does_not_define_the_default_period_and_is_named():
    """Without [period] the period is the whole UTC days of the allocations that are not
    future-dated (now 2026-10-20): a1's 2026-10-01 only (it was 2026-10-01..2099-01-01, 73 years,
    before). a2 is kept and counts for its part inside: available 2 cards x 24 h = 48 GPU-h,
    allocated a1 24 + a2 12 = 36, cost 48 x $2 = $96, $2.00 per GPU-hour (it was $0.0006)."""
    rep = build_report(compute(_with_2099(), NO_PERIOD, now=NOW))
    assert (rep["period"]["start"], rep["period"]["end"]) == ("2026-10-01T00:00:00Z", "2026-10-02T00:00:00Z")
    t = rep["totals"]
    assert t["available_gpu_hours"] == pytest.approx(48.0) and t["allocated_gpu_hours"] == pytest.approx(36.0)
    assert t["cost"] == pytest.approx(96.0) and t["cost_per_gpu_hour"] == pytest.approx(2.0)
    got = _future_gaps(rep)
    assert list(got) == ["allocations"]
    assert "1 row dated after 2026-10-20T00:00Z" in got["allocations"]
    assert "earliest 2099-01-01T00:00:00Z" in got["allocations"]


def test_future_dated_is_judged_at_the_injected_now_record_and_schedule_limits():
    """Records may run 1 day ahead of now, schedules 30 years: with now 2026-10-20, a sample at
    2026-10-20T23:00 (23 h ahead) is not future-dated, one at 2026-10-21T01:00 (25 h) is; a rate
    ending 2055-01-01 (28 years) is a schedule, one ending 2099-01-01 is not plausible; a
    telemetry row of 2106-02-07 (the uint32 epoch end) is future-dated too."""
    frames = {
        "telemetry": pl.DataFrame({"ts": [datetime(2026, 10, 20, 23, tzinfo=UTC), datetime(2026, 10, 21, 1, tzinfo=UTC),
                                          datetime(2106, 2, 7, 6, 28, 15, tzinfo=UTC)]}),
        "rates": pl.DataFrame({"start": [None, None], "end": [datetime(2055, 1, 1, tzinfo=UTC),
                                                              datetime(2099, 1, 1, tzinfo=UTC)]},
                              schema={"start": pl.Datetime("us", "UTC"), "end": pl.Datetime("us", "UTC")}),
    }
    found = {f.table: f for f in future.scan_tables(frames, NOW)}
    assert (found["telemetry"].rows, found["telemetry"].earliest) == (2, datetime(2026, 10, 21, 1, tzinfo=UTC))
    assert (found["rates"].rows, found["rates"].earliest) == (1, datetime(2099, 1, 1, tzinfo=UTC))
    assert future.scan_tables(frames, datetime(2200, 1, 1, tzinfo=UTC)) == []


def test_every_allocation_future_dated_is_a_clear_error_not_a_73_year_period():
    """Only a2-like rows (all after now + 1 day): no period can be inferred; the error says why."""
    b = make_bundle(allocations=[{"allocation_id": "x", "gpu_id": "g0", "start": "2099-01-01T00:00:00Z",
                                  "end": "2099-01-02T00:00:00Z", "owner": "A1"}])
    with pytest.raises(ValueError, match="every allocation \\(1\\) is future-dated"):
        resolve_period(NO_PERIOD, b["allocations"], NOW)


def test_ingest_output_names_future_rows(tmp_path):
    """`ailedger ingest` prints one note per table with future-dated rows (judged at the clock:
    2099 is after it whenever this runs before 2098)."""
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "allocations.csv").write_text(
        "allocation_id,gpu_id,start,end,owner\na1,g0,2026-10-01T00:00:00Z,2026-10-02T00:00:00Z,A1\n"
        "a2,g1,2026-10-01T12:00:00Z,2099-01-01T00:00:00Z,A1\n")
    out = CliRunner().invoke(main, ["ingest", str(folder), "--db", str(tmp_path / "s.duckdb")])
    assert out.exit_code == 0, out.output
    assert "note: future-dated: allocations: 1 row dated after" in out.output
    assert "earliest 2099-01-01T00:00:00Z" in out.output


# Every importer, on its fixture: judged at 2000-01-01 every record it made is future-dated (the
# note names each table it fed, with its row count); judged at 2100 none is.
IMPORTS = [
    ("slurm", ["sacct.txt"], {"period": {"source_timezone": "UTC"}}, {}),
    ("prometheus", ["dcgm_range.json"], {}, {"pool": "h100"}),
    ("prometheus", ["gpu_cluster_range.om"], {}, {}),
    ("vllm", ["vllm_range.json"], {}, {}),
    ("litellm", ["litellm_spend_logs.json", "litellm_daily_team_spend.csv"], {}, {}),
    ("openai", ["openai_usage_completions.json", "openai_costs.json"], {}, {}),
    ("otel", ["otel_genai_spans.json"], {}, {}),
]


@pytest.mark.parametrize("fmt, files, cfg, opts", IMPORTS, ids=[f"{i[0]}-{i[1][0]}" for i in IMPORTS])
def test_every_importer_names_its_future_dated_rows(fmt, files, cfg, opts):
    early = datetime(2000, 1, 1, tzinfo=UTC)
    r = import_files(fmt, [FIX / f for f in files], parse_config(cfg), options=ImportOptions(now=early, **opts))
    notes = {d.split(":")[0]: d for w, d in r.notes if w == future.WHAT}
    n = {t: f.select(future.is_future(t, early).sum()).item() for t, f in r.frames.items() if t in future.TABLES}
    # Every record table it fed is named (schedules, e.g. openai's 2026 cost rows, run 30 years).
    records = [t for t, f in r.frames.items() if f.height and t in future.RECORD_TIMES
               and any(c in f.columns and f[c].drop_nulls().len() for c in future.RECORD_TIMES[t])]
    assert records and set(records) <= set(notes) and sorted(notes) == sorted(t for t in n if n[t])
    for t in notes:
        assert f"{t}: {n[t]:,} row" in notes[t]
    late = import_files(fmt, [FIX / f for f in files], parse_config(cfg),
                        options=ImportOptions(now=datetime(2100, 1, 1, tzinfo=UTC), **opts))
    assert not [d for w, d in late.notes if w == future.WHAT]


# ------------------------------------------------------------------------------- item 5: coverage


def _rate_hole():
    """Pool p: cards g0, g1; rates $2/GPU-hour on 2026-10-01 00:00-06:00 and 12:00-24:00 only (no
    rate 06:00-12:00). A1 (tenant A) holds g0 all day; B1 (tenant B) holds g1 06:00-12:00 only."""
    return make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}, {"gpu_id": "g1", "pool": "p"}],
        allocations=[{"allocation_id": "a1", "gpu_id": "g0", "start": ts(1), "end": ts(2), "owner": "A1"},
                     {"allocation_id": "b1", "gpu_id": "g1", "start": ts(1, 6), "end": ts(1, 12), "owner": "B1"}],
        owners=[{"tenant": "A", "project": "A1"}, {"tenant": "B", "project": "B1"}],
        rates=[{"pool": "p", "price_per_gpu_hour": 2.0, "start": ts(1), "end": ts(1, 6)},
               {"pool": "p", "price_per_gpu_hour": 2.0, "start": ts(1, 12), "end": ts(2)}],
    )


def test_a_span_without_a_rate_is_a_gap_and_its_figures_are_partial():
    """Priced: 2 cards x 18 h x $2 = $72 (it would be $96 with the 6 h hole priced: $24 missing,
    said now). A1: 18 h x $2 = $36, partial; B1 held g1 only in the hole: no price reached it, so
    its cost is unknown (null), never $0; g1's 18 priced hours ($36) are idle. The gap names pool
    p, gpu_rental and 06:00..12:00 (6 h)."""
    comp = compute(_rate_hole(), make_config())
    rep = build_report(comp)
    assert rep["totals"]["cost"] == pytest.approx(72.0)
    holes = [g["detail"] for g in rep["gaps"] if g["what"] == "rate coverage"]
    assert holes == ["pool p, gpu_rental: no rate or cost row in force 2026-10-01T06:00Z..2026-10-01T12:00Z "
                     "(6.00 h): the pool's capacity then is not priced"]
    by = {r["tenant"]: r["cost"] for r in rep["by_tenant"]}
    assert by["A"] == pytest.approx(36.0) and by["B"] is None
    assert rep["reconciliation"]["idle"] == pytest.approx(36.0)
    part = {(f["table"], str(f["row"]), f["figure"]) for f in rep["partial"]}
    assert {("totals", "None", "cost"), ("by_tenant", "{'tenant': 'A'}", "cost"),
            ("by_tenant", "{'tenant': 'B'}", "cost"), ("by_category", "{'category': 'gpu_rental'}", "cost"),
            ("trend", "{'day': '2026-10-01'}", "cost")} <= part
    text = render_summary(rep)
    assert "72.00 USD (partial)" in text and "partial figures: cost" in text
    # The dashboard's Data page lists the same gap (views.gaps).
    assert holes[0] in views.gaps(comp)["detail"].to_list()


def test_a_cost_row_of_the_same_category_fills_a_rate_hole():
    """A $12 gpu_rental invoice of pool p for 06:00-12:00 covers the hole: no rate-coverage gap,
    nothing partial; cost = $72 of rates + $12 = $84."""
    b = _rate_hole()
    b.tables["costs"] = make_bundle(costs=[{"cost_id": "inv", "category": "gpu_rental", "amount": 12.0,
                                            "start": ts(1, 6), "end": ts(1, 12), "pool": "p"}])["costs"]
    rep = build_report(compute(b, make_config()))
    assert rep["totals"]["cost"] == pytest.approx(84.0)
    assert not [g for g in rep["gaps"] if g["what"] == "rate coverage"] and rep["partial"] == []


def _tariff_hole(db: Path | None = None):
    """Card g0 held by A1 all of 2026-10-01 drawing 1,000 W (a sample every 300 s, the gap cap):
    24 kWh GPU, x 1.3 x 1.2 = 37.44 kWh facility, 1.56 kWh an hour. A tariff $0.20/kWh, 400 g/kWh
    00:00-18:00 only: 18 h = 28.08 kWh at $0.20 = $5.616 and 11.232 kg CO2e; 18:00-24:00 (6 h,
    9.36 kWh) is priced at the flat $0.12 = $1.1232 and has no CO2e. Energy cost $6.7392 and
    CO2e 11.232 kg (the 3.744 kg the hole would add at 400 g is unknown), both partial."""
    return make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a1", "gpu_id": "g0", "start": ts(1), "end": ts(2), "owner": "A1"}],
        owners=[{"tenant": "A", "project": "A1"}],
        telemetry=[{"ts": (datetime(2026, 10, 1, tzinfo=UTC) + timedelta(seconds=300 * i)).isoformat(),
                    "gpu_id": "g0", "util_pct": 50.0, "power_w": 1000.0} for i in range(288)],
        tariffs=[{"start": ts(1), "end": ts(1, 18), "price_per_kwh": 0.2, "carbon_g_per_kwh": 400.0}],
    )


def _check_tariff_hole(rep: dict) -> None:
    t = rep["totals"]
    assert t["energy_kwh_facility"] == pytest.approx(37.44)
    assert t["energy_cost"] == pytest.approx(6.7392) and t["carbon_kg"] == pytest.approx(11.232)
    spans = {g["what"]: g["detail"] for g in rep["gaps"] if g["what"] in ("tariff coverage", "carbon coverage")}
    assert "no tariff in force 2026-10-01T18:00Z..2026-10-02T00:00Z (6.00 h)" in spans["tariff coverage"]
    assert "flat 0.12/kWh" in spans["tariff coverage"]
    assert "2026-10-01T18:00Z..2026-10-02T00:00Z (6.00 h)" in spans["carbon coverage"]
    part = {(f["table"], f["figure"]) for f in rep["partial"]}
    assert {("totals", "energy_cost"), ("totals", "carbon_kg"), ("by_tenant", "carbon_kg"),
            ("by_project", "energy_cost")} <= part
    assert "CO2e 11.2 kg (partial)" in render_summary(rep)


def test_a_span_without_a_tariff_is_a_gap_and_energy_cost_and_co2e_are_partial():
    _check_tariff_hole(build_report(compute(_tariff_hole(), make_config())))


def test_the_store_path_flags_future_rows_and_names_the_same_coverage_gaps(tmp_path):
    """`ailedger report STORE` (telemetry and requests read from the store, not from memory): the
    tariff-hole bundle plus card g1 held by A1 from 12:00 "until 2099" (no telemetry), a sample
    and a request dated 2106-02-07 (the uint32 epoch end). Without [period] the period is still
    2026-10-01 (a1's day; 2099 defines nothing); the energy figures and coverage gaps are those
    of the bundle test (g1 draws no measured energy); allocations, telemetry and requests are each
    named with 1 future-dated row; the store still holds all of them (2 allocations, 289 samples,
    1 request)."""
    b = _tariff_hole()
    extra = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}, {"gpu_id": "g1", "pool": "p"}],
        allocations=[{"allocation_id": "a2", "gpu_id": "g1", "start": ts(1, 12), "end": "2099-01-01T00:00:00Z",
                      "owner": "A1"}],
        telemetry=[{"ts": "2106-02-07T06:28:15Z", "gpu_id": "g0", "util_pct": 50.0}],
        requests=[{"request_id": "r1", "ts": "2106-02-07T06:28:15Z", "owner": "A1", "model": "m",
                   "input_tokens": 1, "output_tokens": 1}],
    )
    for t in ("inventory", "allocations", "telemetry", "requests"):
        b.tables[t] = extra[t] if t == "inventory" else pl.concat([b[t], extra[t]])
    b = type(b).from_frames({t: f for t, f in b.tables.items() if f.height})
    db = tmp_path / "s.duckdb"
    store.ingest(db, b, rollup=None)
    rep = build_report(api.run(db, config=NO_PERIOD, now=NOW))
    assert (rep["period"]["start"], rep["period"]["end"]) == ("2026-10-01T00:00:00Z", "2026-10-02T00:00:00Z")
    _check_tariff_hole(rep)
    got = _future_gaps(rep)
    assert list(got) == ["allocations", "telemetry", "requests"]
    assert all("1 row dated after 2026-10-20T00:00Z" in d for d in got.values())
    assert "earliest 2106-02-07T06:28:15Z" in got["telemetry"] and "earliest 2099-01-01" in got["allocations"]
    kept = store.load_bundle(db)
    assert (kept["allocations"].height, kept["telemetry"].height, kept["requests"].height) == (2, 289, 1)


def test_a_whole_day_tariff_covers_and_nothing_is_partial():
    """The tariff extended to 24:00: 37.44 kWh x $0.20 = $7.488, 37.44 x 400 g = 14.976 kg, no gap."""
    b = _tariff_hole()
    b.tables["tariffs"] = b["tariffs"].with_columns(pl.lit(datetime(2026, 10, 2, tzinfo=UTC)).cast(
        b["tariffs"]["end"].dtype).alias("end"))
    rep = build_report(compute(b, make_config()))
    assert rep["totals"]["energy_cost"] == pytest.approx(7.488) and rep["totals"]["carbon_kg"] == pytest.approx(14.976)
    assert rep["partial"] == []
    assert not [g for g in rep["gaps"] if "coverage" in g["what"] and g["what"] != "telemetry coverage"]


def test_a_cost_row_charged_to_an_owner_does_not_price_the_pools_hole():
    """A $12 gpu_rental row of pool p for 06:00-12:00 charged to B1 directly is B1's own charge,
    not a price of the pool's capacity: the 06:00-12:00 hole stays a gap (cards g0 and g1 there
    are still unpriced). Cost = $72 of rates + B1's $12 = $84; B, reached by a cost, keeps its
    $12 and it is partial (its 6 held hours had no rate)."""
    b = _rate_hole()
    b.tables["costs"] = make_bundle(costs=[{"cost_id": "direct", "category": "gpu_rental", "amount": 12.0,
                                            "start": ts(1, 6), "end": ts(1, 12), "pool": "p",
                                            "owner": "B1"}])["costs"]
    rep = build_report(compute(b, make_config()))
    assert rep["totals"]["cost"] == pytest.approx(84.0)
    holes = [g["detail"] for g in rep["gaps"] if g["what"] == "rate coverage"]
    assert len(holes) == 1 and "2026-10-01T06:00Z..2026-10-01T12:00Z (6.00 h)" in holes[0]
    assert {r["tenant"]: r["cost"] for r in rep["by_tenant"]}["B"] == pytest.approx(12.0)
    assert ("by_tenant", "{'tenant': 'B'}", "cost") in {(f["table"], str(f["row"]), f["figure"])
                                                        for f in rep["partial"]}


def test_twenty_holes_are_named_and_the_rest_summed_in_one_gap():
    """Pool p, card g0 held by A1 2026-10-01 and 02 (48 h); a $1 rate in force for the first hour
    of every 2 (00-01, 02-03, ..., 46-47): 24 one-hour holes (01-02, ..., 47-48). The first 20
    are named one by one (01:00..02:00 first, the 20th 2026-10-02T15:00Z..16:00Z); the other 4
    (4.00 h) are one more gap: 21 rate-coverage gaps. Priced over the two days: 24 h x $1 = $24."""
    b = make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a1", "gpu_id": "g0", "start": ts(1), "end": ts(3), "owner": "A1"}],
        owners=[{"tenant": "A", "project": "A1"}],
        rates=[{"pool": "p", "price_per_gpu_hour": 1.0, "start": (datetime(2026, 10, 1, tzinfo=UTC)
                + timedelta(hours=2 * i)).isoformat(), "end": (datetime(2026, 10, 1, tzinfo=UTC)
                + timedelta(hours=2 * i + 1)).isoformat()} for i in range(24)],
    )
    rep = build_report(compute(b, make_config(period={"start": ts(1), "end": ts(3)})))
    assert rep["totals"]["cost"] == pytest.approx(24.0)
    holes = [g["detail"] for g in rep["gaps"] if g["what"] == "rate coverage"]
    assert len(holes) == 21
    assert "2026-10-01T01:00Z..2026-10-01T02:00Z (1.00 h)" in holes[0]
    assert "2026-10-02T15:00Z..2026-10-02T16:00Z (1.00 h)" in holes[19]
    assert holes[20] == "and 4 more such spans (4.00 h), not listed one by one"
