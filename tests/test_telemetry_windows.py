"""The telemetry stage reads samples one window of time at a time, from a frame or the store.

Windowed and one-pass results must be the same figures: a sample belongs to the window
holding its start and finds its successor in the next window's first minutes.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from cost_engine import activity, api, store, views
from cost_engine.engine import compute
from cost_engine.report import build_report
from cost_engine.telemetry import FrameTelemetry, StoreTelemetry
from tests.dashboard_support import SAMPLE
from tests.helpers import make_bundle, make_config

UTC = timezone.utc
T0 = datetime(2026, 10, 1, tzinfo=UTC)


def test_windows_cover_the_period_from_one_gap_before_on_quarter_hours():
    """Period 00:00-02:00, max gap 300 s, 13 rows at 3 per window -> 5 windows wanted.

    first edge = floor to 15 min of (00:00 - 300 s) = 23:45 the day before; span 2 h 15 min
    = 9 quarters; 9 / 5 = 1.8 -> 2 quarters = 30 min per window: 23:45, 00:15, 00:45, 01:15,
    01:45, then the period end 02:00.
    """
    got = activity.windows(T0, T0 + timedelta(hours=2), 300, rows=13, window_rows=3)
    m = [-15, 15, 45, 75, 105, 120]
    assert got == [(T0 + timedelta(minutes=a), T0 + timedelta(minutes=b)) for a, b in zip(m, m[1:])]
    # One window when everything fits.
    assert activity.windows(T0, T0 + timedelta(hours=2), 300, rows=13) == [(T0 - timedelta(minutes=15), T0 + timedelta(hours=2))]


def test_windows_of_one_row_each():
    """Period 00:00-01:00, max gap 300 s, 4 rows at 1 per window -> 4 windows wanted: first edge
    23:45, span 75 min = 5 quarters; 5 / 4 = 1.25 -> 2 quarters = 30 min per window: 23:45,
    00:15, 00:45, then the period end 01:00 (3 windows; none holds more than its share).

    Mutant (activity.windows: `max(window_rows, 2)`): 2 windows wanted, 45 min each.
    """
    got = activity.windows(T0, T0 + timedelta(hours=1), 300, rows=4, window_rows=1)
    m = [-15, 15, 45, 60]
    assert got == [(T0 + timedelta(minutes=a), T0 + timedelta(minutes=b)) for a, b in zip(m, m[1:])]


def test_sample_intervals_sort_rows_given_in_any_order():
    """Samples handed over newest first (g1 00:02, g0 00:01, g1 00:00, g0 00:00), 50 W each: by
    default sample_intervals sorts them by card and time itself. g0: 00:00 lasts to its next
    sample, 60 s (3,000 J); 00:01 to the 300 s cap (15,000 J). g1: 00:00 lasts 120 s (6,000 J);
    00:02 to the cap, 300 s (15,000 J).

    Mutant (activity.sample_intervals: `presorted` True by default): rows read in the order
    given, so each card's samples run backwards and their intervals are wrong.
    """
    rows = [("g1", 2), ("g0", 1), ("g1", 0), ("g0", 0)]
    tele = pl.DataFrame({"ts": [T0 + timedelta(minutes=m) for _, m in rows], "gpu_id": [g for g, _ in rows],
                         "util_pct": [50.0] * 4, "power_w": [50.0] * 4, "energy_j": [None] * 4},
                        schema_overrides={"energy_j": pl.Float64})
    got = activity.sample_intervals(tele, 300)
    assert [(g, t, d, j) for g, t, d, j in got.select("gpu_id", "ts", "dt_s", "joules").iter_rows()] == [
        ("g0", T0, 60.0, 3000.0), ("g0", T0 + timedelta(minutes=1), 300.0, 15000.0),
        ("g1", T0, 120.0, 6000.0), ("g1", T0 + timedelta(minutes=2), 300.0, 15000.0)]


def _one_card_bundle():
    """g0 held 00:00-02:00; a sample every 10 min from 00:00 to 02:00 (13 samples).

    util 0 % before 01:00 and 100 % from 01:00; power 100 W; the energy counter rises
    60,000 J per 10 min (100 W x 600 s) but resets to 0 at 00:40.
    """
    tele = []
    for k in range(13):
        energy = 1_000_000 + 60_000 * k if k < 4 else 60_000 * (k - 4)
        tele.append({"gpu_id": "g0", "ts": (T0 + timedelta(minutes=10 * k)).isoformat(),
                     "util_pct": 100.0 if k >= 6 else 0.0, "power_w": 100.0, "energy_j": float(energy)})
    return make_bundle(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        allocations=[{"allocation_id": "a0", "gpu_id": "g0", "start": T0.isoformat(),
                      "end": (T0 + timedelta(hours=2)).isoformat(), "owner": "team"}],
        telemetry=tele,
    )


@pytest.mark.parametrize("window_rows", [None, 3, 1])
def test_hand_computed_activity_is_the_same_in_any_number_of_windows(monkeypatch, window_rows):
    """Period 00:00-02:00 (max gap 900 s, so 10-minute samples are not capped; threshold 5 %).

    covered: 12 samples x 600 s = 7,200 s = 2.0 GPU-h (the 02:00 sample is outside the period
    but ends the 01:50 one: it is read from the last window's overlap);
    active: 01:00-02:00 at 100 % = 3,600 s = 1.0 GPU-h;
    energy: 11 counter deltas of 60,000 J + the 00:30 sample, whose delta is negative (reset),
    by power x time 100 W x 600 s = 60,000 J: 12 x 60,000 = 720,000 J = 0.2 kWh.
    With 3 rows per window the stage reads 5 windows of 30 min (first edge 23:45, as in the
    windows test), with 1 row per window 9 of 15 min: samples such as 00:10 then find their
    successor across a window edge, in the window's 900 s overlap.
    """
    if window_rows is not None:
        monkeypatch.setattr(activity, "WINDOW_ROWS", window_rows)
    cfg = make_config(period={"start": T0, "end": T0 + timedelta(hours=2)}, activity={"max_sample_gap_s": 900})
    comp = compute(_one_card_bundle(), cfg)
    rep = build_report(comp)
    t = rep["totals"]
    assert t["allocated_gpu_hours"] == pytest.approx(2.0)
    assert t["telemetry_coverage"] == pytest.approx(1.0)
    assert t["active_gpu_hours"] == pytest.approx(1.0)
    assert t["energy_kwh_gpu"] == pytest.approx(0.2)
    assert ("energy counter reset", "g0 at 2026-10-01 00:40:00Z: the counter went down since the 00:30:00Z sample; "
            "that interval uses power x time") in comp.gaps
    # Quarter-hour card energy: 00:00-00:15 holds the 00:00 and 00:10 samples = 120,000 J.
    first = comp.card_energy.sort("bucket").row(0, named=True)
    assert (str(first["gpu_id"]), first["bucket"], first["joules"]) == ("g0", T0, pytest.approx(120_000.0))
    assert comp.card_energy["joules"].sum() == pytest.approx(720_000.0)


def test_two_cards_in_a_window_whose_sort_key_needs_its_overlap():
    """Period 00:00-01:00: one window, 23:45-01:00 (4,500 s), read with its 300 s overlap to 01:05.
    g0 and g1 report every minute from 23:45 to 01:04, 100 %; a0 holds g0, a1 holds g1, all hour.
    Each card is active the whole hour: 60 samples x 60 s = 3,600 s = 1.0 GPU-h.

    The window's samples are sorted on one key, card code x 2^shift + microseconds since 23:45,
    with `shift` the bits of the window's span read, overlap included: 4,800 s = 4.8e9 us needs
    33 bits. Mutant (activity._raw_windows: span to 01:00 - 300 s, 4,200 s = 4.2e9 us, 32 bits):
    g0's samples from 00:56:35 (2^32 us after 23:45) get keys above g1's first ones (from 23:45)
    and land among them, so both cards' intervals are cut wrongly.
    """
    tele = [{"ts": T0 + timedelta(minutes=m), "gpu_id": g, "util_pct": 100.0, "power_w": 100.0}
            for g in ("g0", "g1") for m in range(-15, 65)]
    b = make_bundle(inventory=[{"gpu_id": g, "pool": "p"} for g in ("g0", "g1")], telemetry=tele,
                    allocations=[{"allocation_id": f"a{i}", "gpu_id": f"g{i}", "owner": "A", "start": T0,
                                  "end": T0 + timedelta(hours=1)} for i in range(2)])
    comp = compute(b, make_config(period={"start": T0, "end": T0 + timedelta(hours=1)}))
    assert activity.windows(T0, T0 + timedelta(hours=1), 300, len(tele)) == [
        (T0 - timedelta(minutes=15), T0 + timedelta(hours=1))]
    by_alloc = dict(comp.seg.group_by("allocation_id").agg(pl.col("active_h").sum()).iter_rows())
    assert by_alloc == {"a0": pytest.approx(1.0, rel=1e-12), "a1": pytest.approx(1.0, rel=1e-12)}


def test_windowed_sample_fleet_equals_one_pass(monkeypatch, comp):
    """The committed sample fleet in windows of 5,000 samples gives the one-pass figures."""
    monkeypatch.setattr(activity, "WINDOW_ROWS", 5_000)
    windowed = api.run(SAMPLE)
    assert len(activity.windows(comp.period.start, comp.period.end, 300, comp.bundle["telemetry"].height, 5_000)) > 50
    cols = ["s_idx", "covered_s", "active_s", "util_s", "joules", "idle_joules", "energy_s", "oversized_h"]
    assert_frame_equal(windowed.seg.select(cols), comp.seg.select(cols), check_exact=False, rel_tol=1e-9)
    assert_frame_equal(windowed.card_energy, comp.card_energy, check_exact=False, rel_tol=1e-9)
    assert [g for g in windowed.gaps if g[0] == "energy counter reset"] == [g for g in comp.gaps if g[0] == "energy counter reset"]


def test_report_from_the_store_reads_telemetry_in_windows_and_equals_the_bundle(tmp_path, comp, rep):
    """Ingest the sample fleet; the store's computation never loads the telemetry table
    (its bundle's is empty) and gives the bundle's report, power profile and card timeline."""
    db = tmp_path / "fleet.duckdb"
    b = api.read_bundle(SAMPLE, comp.config)
    store.ingest(db, b)
    got = api.run(db, config=comp.config)
    assert got.bundle["telemetry"].height == 0
    assert isinstance(got.telemetry, StoreTelemetry)
    back = build_report(got)
    assert back["totals"] == pytest.approx(rep["totals"], rel=1e-9)
    assert back["reconciliation"] == pytest.approx(rep["reconciliation"], rel=1e-9, abs=1e-6)
    assert_frame_equal(views.power_profile(got, None, None, "15m"), views.power_profile(comp, None, None, "15m"),
                       check_exact=False, rel_tol=1e-9)
    gid = comp.ledger.cards["gpu_id"].sort()[0]
    assert_frame_equal(views.card_timeline(got, gid), views.card_timeline(comp, gid), check_exact=False, rel_tol=1e-9)
    # The Data page still counts the stored telemetry as present and accepted.
    v = views.validation_summary(got.bundle, views.telemetry_rows(got)).filter(pl.col("table") == "telemetry")
    assert v.row(0, named=True) == {"table": "telemetry", "present": True,
                                         "accepted": comp.bundle["telemetry"].height, "rejected": 0}
    # A source limited to other cards has nothing for this one.
    other = comp.ledger.cards["gpu_id"].sort()[1]
    assert got.telemetry.only([other]).card(gid, comp.period.start, comp.period.end).height == 0
    assert got.telemetry.only([gid]).card(gid, comp.period.start, comp.period.end).height > 0


def test_frame_source_windows_are_coded_and_the_stage_sorts_them():
    """window() hands card codes in place of ids for start <= ts < end; the stage sorts them
    by (code, ts), on one Int64 key when code and time fit it and on two columns otherwise."""
    f = pl.DataFrame({
        "gpu_id": ["b", "a", "b", "a", "zz"],
        "ts": [T0 + timedelta(minutes=m) for m in (1, 2, 0, 0, 0)],
        "util_pct": [1.0, 2.0, 3.0, 4.0, 5.0], "power_w": [None] * 5, "energy_j": [None] * 5,
    }, schema_overrides={"power_w": pl.Float64, "energy_j": pl.Float64})
    codes = pl.DataFrame({"gpu_id": ["a", "b"]}).with_row_index("gc")
    src = FrameTelemetry(f)
    with src.reader() as r:
        w = r.window(T0, T0 + timedelta(minutes=2), codes)
        assert r.outside(codes["gpu_id"]) == 1  # the "zz" row
    assert sorted(w.select("gpu_id", "util_pct").rows()) == [(0, 4.0), (1, 1.0), (1, 3.0)]
    # a's 00:00 sample, then b's 00:00 and 00:01 samples.
    want = [(0, 4.0), (1, 3.0), (1, 1.0)]
    one_key = activity._by_card_and_time(w, T0, T0 + timedelta(minutes=2), 2)
    assert one_key.select("gpu_id", "util_pct").rows() == want
    two_keys = activity._by_card_and_time(w, T0, T0 + timedelta(days=10**5), 2**20)  # too wide for one key
    assert two_keys.select("gpu_id", "util_pct").rows() == want


def test_power_profile_refuses_buckets_finer_than_a_quarter_hour(comp):
    with pytest.raises(ValueError, match="15m or a multiple"):
        views.power_profile(comp, None, None, "5m")


def test_job_index_attaches_jobs_like_a_join_including_shared_intervals():
    """Interval 1 is held by jobs 7 and 9 at once (two multi-card jobs sharing a card's time):
    its piece appears once per job; interval 2 has no job and drops out."""
    jobs = pl.DataFrame({"e_idx": [0, 1, 1, 3], "job_id": [5, 7, 9, 5]}, schema={"e_idx": pl.Int64, "job_id": pl.UInt32})
    pieces = pl.DataFrame({"e_idx": [0, 1, 2, 3, 3], "ov_s": [1.0, 2.0, 3.0, 4.0, 5.0]})
    got = activity._JobIndex.of(jobs, 4).attach(pieces)
    want = pieces.join(jobs, on="e_idx")
    key = ["e_idx", "job_id", "ov_s"]
    assert got.sort(key).rows() == want.sort(key).rows() == [(0, 1.0, 5), (1, 2.0, 7), (1, 2.0, 9), (3, 4.0, 5), (3, 5.0, 5)]


def test_requests_stay_in_the_store_and_are_resolved_in_batches(tmp_path, monkeypatch, comp, rep):
    """The store's computation reads requests in batches (here of 500 rows, so the sample
    fleet's week comes in many) and resolves them batch by batch: the same resolved rows, the
    same report, the same Data page count, and lineage lists them by (ts, request_id)."""
    from cost_engine import lineage

    db = tmp_path / "fleet.duckdb"
    store.ingest(db, api.read_bundle(SAMPLE, comp.config))
    seen = []
    real = store.request_batches

    def spy(*a, **k):
        for b in real(*a, **{**k, "batch_rows": 500}):
            seen.append(b.height)
            yield b

    monkeypatch.setattr(store, "request_batches", spy)
    got = api.run(db, config=comp.config)
    assert got.bundle["requests"].height == 0 and got.bundle.held_rows == {
        "telemetry": comp.bundle["telemetry"].height, "requests": comp.bundle["requests"].height}
    assert len(seen) > 3 and max(seen) <= 500 and sum(seen) == comp.requests.height
    key = ["ts", "request_id"]
    assert_frame_equal(got.requests.sort(key), comp.requests.sort(key), check_exact=False, rel_tol=1e-12)
    back = build_report(got)
    assert back["totals"] == pytest.approx(rep["totals"], rel=1e-9)
    assert_frame_equal(got.models.sort("model"), comp.models.sort("model"), check_exact=False, rel_tol=1e-9)
    v = views.validation_summary(got.bundle, views.telemetry_rows(got)).filter(pl.col("table") == "requests")
    assert v.row(0, named=True) == {"table": "requests", "present": True,
                                         "accepted": comp.bundle["requests"].height, "rejected": 0}
    model = comp.models["model"].sort()[0]
    ex = lineage.explain(got, model=model).requests
    assert ex.height > 0 and ex.equals(ex.sort(key))
    assert ex.equals(lineage.explain(comp, model=model).requests)


def test_many_requests_are_spilled_to_mapped_files_with_the_same_figures(monkeypatch, comp, rep):
    """Above engine.SPILL_REQUESTS_ABOVE the resolved requests are kept in memory-mapped spill
    files (bundle.spill_folder), a batch at a time; lowered to 0 here, with 500-row slices, the
    sample fleet's figures do not move."""
    from cost_engine import engine, tokens

    monkeypatch.setattr(engine, "SPILL_REQUESTS_ABOVE", 0)
    monkeypatch.setattr(engine, "REQUEST_SLICE_ROWS", 500)
    kept = []
    real = tokens.prepare_requests

    def spy(*a, keep=None, **k):
        kept.append(keep)
        return real(*a, keep=keep, **k)

    monkeypatch.setattr(tokens, "prepare_requests", spy)
    got = api.run(SAMPLE, config=comp.config)
    assert kept and kept[0] is not None
    assert got.requests.n_chunks() > 3  # one mapped part per slice
    key = ["ts", "request_id"]
    assert_frame_equal(got.requests.sort(key), comp.requests.sort(key), check_exact=False, rel_tol=1e-12)
    back = build_report(got)
    assert back["totals"] == pytest.approx(rep["totals"], rel=1e-9)
    assert back["reconciliation"] == pytest.approx(rep["reconciliation"], rel=1e-9, abs=1e-6)
    assert [(r["source"], r["key"], r["records"]) for r in back["unattributed"]] == [
        (r["source"], r["key"], r["records"]) for r in rep["unattributed"]]
    assert [r["cost"] for r in back["unattributed"]] == pytest.approx([r["cost"] for r in rep["unattributed"]])


def test_frame_source_scans_in_slices_and_skips_those_outside_the_window(monkeypatch, comp):
    """A bundle's telemetry is scanned slice by slice per window; with slices of 1,000 rows the
    sample fleet's activity is the one-pass activity, and a window outside every slice's times
    reads nothing."""
    from cost_engine import telemetry

    monkeypatch.setattr(telemetry, "_SLICE_ROWS", 1_000)
    monkeypatch.setattr(activity, "WINDOW_ROWS", 50_000)
    sliced = api.run(SAMPLE)
    cols = ["s_idx", "covered_s", "active_s", "util_s", "joules", "idle_joules", "energy_s", "oversized_h"]
    assert_frame_equal(sliced.seg.select(cols), comp.seg.select(cols), check_exact=False, rel_tol=1e-9)
    src = FrameTelemetry(comp.bundle["telemetry"])
    codes = comp.bundle["telemetry"].select("gpu_id").unique().sort("gpu_id").with_row_index("gc")
    later = comp.period.end + timedelta(days=30)
    assert src.window(later, later + timedelta(days=1), codes).height == 0
    assert src.window(comp.period.start, comp.period.end, codes).height == comp.bundle["telemetry"].filter(
        (pl.col("ts") >= comp.period.start) & (pl.col("ts") < comp.period.end)).height
