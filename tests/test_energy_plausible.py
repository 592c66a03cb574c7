"""Energy counters are checked against physics (issue 38, items 2 and 23); figures computed by hand.

A counter delta implying more power than the card's ceiling (power_limits: 1.5 x the
accelerator's board power, configurable per pool or accelerator) or more than
`counter_power_ratio` x its own power readings is not believed: that stretch is billed as power x
time (unknown without power) and named in `gaps`, by the raw path, the rollup path and the
store's rollup alike. MIG instances that add up to more than their physical card are named.
"""

from __future__ import annotations

import json
from datetime import timedelta

import polars as pl
import pytest

import cost_engine.activity as activity
from cost_engine import power_limits, quarter_store, quarters, store
from cost_engine.collector.fake import FakeBackend, FakeCard, FakeMig
from cost_engine.collector.sampler import Sampler
from cost_engine.config import Activity, Energy
from cost_engine.engine import compute
from cost_engine.importers import ImportOptions, import_files
from cost_engine.ledger import Period, cards_frame, mig_over_parent
from cost_engine.report import build_report
from cost_engine.telemetry import StoreTelemetry
from tests.helpers import DAY0, make_bundle, make_config
from tests.test_quarter_rollup import _store_paths_agree, both

S = timedelta(seconds=1)
HOUR = make_config(period={"start": DAY0, "end": DAY0 + 3600 * S})


def _card(accelerator: str, power, energy) -> object:
    """g0 (pool p) held by A for 00:00-01:00, sampled every minute 00:00-00:59 at 90 %:
    power_w `power` (None: no reading), energy_j `energy(i)` at the i-th sample."""
    tele = [{"ts": DAY0 + 60 * i * S, "gpu_id": "g0", "util_pct": 90.0, "power_w": power, "energy_j": energy(i)}
            for i in range(60)]
    return make_bundle(inventory=[{"gpu_id": "g0", "pool": "p", "node": "n0", "accelerator": accelerator}],
                       telemetry=tele,
                       allocations=[{"allocation_id": "a", "gpu_id": "g0", "owner": "A", "start": DAY0,
                                     "end": DAY0 + 3600 * S}])


def _implausible(comp) -> list[str]:
    return [d for w, d in comp.gaps if w == "energy counter implausible"]


def test_a_millijoule_counter_read_as_joules_is_billed_as_power_x_time():
    """DCGM's counter in millijoules taken as joules: g0 (H100-SXM-80GB, ceiling 1.5 x 700 W =
    1,050 W) draws 600 W, and its counter rises 600 W x 60 s = 36,000 J = 36,000,000 mJ a minute.

    Trusted, each of the 59 intervals with a successor would be 36,000,000 J (600,000 W): 59 x 3.6e7
    + 36,000 (the last sample, power x time to 01:00) = 2,124,036,000 J = 590.01 kWh. Not believed,
    each is 600 W x 60 s = 36,000 J: 60 x 36,000 = 2,160,000 J = 0.6 kWh GPU; facility 0.6 x 1.3 x
    1.2 = 0.936 kWh at $0.12 = $0.11232. Every quarter of the hour has such a piece, so the rollup
    path reads all four raw (none from the rollup) and gives the same figures.
    """
    b = _card("H100-SXM-80GB", 600.0, lambda i: 36_000_000.0 * i)
    raw, fast, calls = both(b, HOUR)
    rep = build_report(fast)
    assert rep["totals"]["energy_kwh_gpu"] == pytest.approx(0.6, rel=1e-12)
    assert rep["totals"]["energy_cost"] == pytest.approx(0.11232, rel=1e-12)
    assert calls[0] == (0, 4)
    assert _implausible(fast) == [
        "g0 from 2026-10-01 00:00:00Z to 2026-10-01 00:59:00Z (59 samples): the counter implies up to 600,000 W, "
        "above the card's ceiling of 1,050 W; that stretch uses power x time"]


def test_one_counter_jump_of_a_billion_joules_bills_only_that_minute_by_power():
    """g0 (H100, ceiling 1,050 W) at 600 W, counter +36,000 J a minute, plus one jump of 1e9 J
    between the 00:29 and 00:30 samples: (1e9 + 36,000) J / 60 s = 16,667,266.7 W.

    Trusted, that minute alone is 277.79 kWh. Not believed, it is 600 W x 60 s = 36,000 J like the
    other 59 (counter deltas of 36,000 J, the last power x time): 60 x 36,000 J = 0.6 kWh. On the
    rollup path only 00:15-00:30 (the quarter holding that sample) is read raw; the other three
    quarters come from the rollup.
    """
    b = _card("H100-SXM-80GB", 600.0, lambda i: 36_000.0 * i + (1e9 if i >= 30 else 0.0))
    raw, fast, calls = both(b, HOUR)
    assert build_report(raw)["totals"]["energy_kwh_gpu"] == pytest.approx(0.6, rel=1e-12)
    assert calls[0] == (3, 1)
    assert _implausible(raw) == [
        "g0 from 2026-10-01 00:29:00Z to 2026-10-01 00:30:00Z (1 sample): the counter implies up to 16,667,267 W, "
        "above the card's ceiling of 1,050 W; that stretch uses power x time"]
    # Raw windows of a quarter each: the 00:29 sample's successor (00:30) lies in the next window
    # and is read as the window's overhang, so the check sees the same delta.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(activity, "WINDOW_ROWS", 7)
        windowed = compute(b, HOUR)
    assert windowed.seg["joules"].sum() == pytest.approx(2_160_000.0, rel=1e-12)
    assert _implausible(windowed) == _implausible(raw)


def test_a_counter_far_above_the_cards_own_power_readings_is_not_believed():
    """g0 (A100-SXM4-80GB, ceiling 1.5 x 400 = 600 W) reads 100 W while its counter rises 30,000 J a
    minute (500 W): under the ceiling, but above 4 x 100 W (counter_power_ratio 4, the larger reading
    of the interval's two ends). Billed 100 W x 60 s = 6,000 J x 60 samples = 360,000 J = 0.1 kWh.

    With counter_power_ratio = 6 the counter stands (500 <= 600 W, 500 <= 6 x 100 W): 59 x 30,000 J
    + 6,000 J (the last sample, power x time) = 1,776,000 J = 0.493333 kWh, and no gap.
    """
    b = _card("A100-SXM4-80GB", 100.0, lambda i: 30_000.0 * i)
    raw, _, _ = both(b, HOUR)
    assert build_report(raw)["totals"]["energy_kwh_gpu"] == pytest.approx(0.1, rel=1e-12)
    assert _implausible(raw) == [
        "g0 from 2026-10-01 00:00:00Z to 2026-10-01 00:59:00Z (59 samples): the counter implies up to 500 W, "
        "more than 4x its power readings; that stretch uses power x time"]
    lenient = make_config(period={"start": DAY0, "end": DAY0 + 3600 * S}, energy={"counter_power_ratio": 6.0})
    raw6 = compute(b, lenient)
    assert build_report(raw6)["totals"]["energy_kwh_gpu"] == pytest.approx(1_776_000 / 3.6e6, rel=1e-12)
    assert _implausible(raw6) == []


def test_an_unbelieved_counter_without_power_readings_is_unknown_not_zero():
    """The millijoule counter of the first test, with no power_w: the 59 unbelieved intervals have
    no power x time to fall back on, and the last sample has neither: g0's energy is unknown for
    the whole hour (0 of 3,600 s known), which the report says (gaps `energy unknown`), not 0 kWh of
    known energy.
    """
    b = _card("H100-SXM-80GB", None, lambda i: 36_000_000.0 * i)
    raw, fast, _ = both(b, HOUR)
    seg = fast.seg.filter(pl.col("allocation_id") == "a")
    assert seg["covered_s"].sum() == pytest.approx(3600.0) and seg["energy_s"].sum() == 0.0
    assert _implausible(fast) == [
        "g0 from 2026-10-01 00:00:00Z to 2026-10-01 00:59:00Z (59 samples): the counter implies up to 600,000 W, "
        "above the card's ceiling of 1,050 W; no power reading: its energy is unknown"]
    assert ("energy unknown", "1 cards report no power or energy counter for some samples: g0") in fast.gaps


def test_the_stores_rollup_reads_an_unbelieved_quarter_from_raw_samples(tmp_path):
    """The billion-joule jump of the second test, from a store: the stored cell of 00:15-00:30 keeps
    the highest power a counter delta implies there, (1e9 + 36,000) / 60 = 16,667,266.67 W, so the
    report (whose ceiling, 1,050 W, the rollup does not know) reads that quarter raw, as the raw path.
    The period here is the whole day (none configured), so the last sample (00:59) stands for the
    full 300 s cap: 59 x 36,000 J + 600 W x 300 s = 2,304,000 J = 0.64 kWh, and the gap."""
    db = tmp_path / "s.duckdb"
    store.ingest(db, _card("H100-SXM-80GB", 600.0, lambda i: 36_000.0 * i + (1e9 if i >= 30 else 0.0)),
                 rollup=Activity())
    with store.connect(db) as con:
        peaks = con.sql(f"SELECT q % 4, peak_w FROM {quarter_store.TABLE} ORDER BY q").fetchall()
    assert peaks[1] == (1, pytest.approx((1e9 + 36_000) / 60, rel=1e-12))
    assert all(p == pytest.approx(600.0) for _, p in peaks[:1] + peaks[2:4])
    fast = _store_paths_agree(db, ["inventory", "allocations"])
    assert build_report(fast)["totals"]["energy_kwh_gpu"] == pytest.approx(0.64, rel=1e-12)
    assert len(_implausible(fast)) == 1


def test_a_rollup_stored_before_the_peaks_is_rebuilt_not_read(tmp_path):
    """A store whose rollup was made by a version without peak_w / peak_ratio (its rule key has no
    cells version, its table not those columns) is not read (its cells cannot tell an unbelieved
    quarter); the next refresh adds the columns and rebuilds, and the report reads it again."""
    db = tmp_path / "s.duckdb"
    b = _card("H100-SXM-80GB", 600.0, lambda i: 36_000.0 * i + (1e9 if i >= 30 else 0.0))
    store.ingest(db, b, rollup=Activity())
    old_key = quarters.rule_key(Activity()).rsplit(":", 1)[0]
    con = store._open(db, read_only=False)
    try:
        con.execute(f"ALTER TABLE {quarter_store.TABLE} DROP COLUMN peak_w")
        con.execute(f"ALTER TABLE {quarter_store.TABLE} DROP COLUMN peak_ratio")
        store._set_meta(con, "rollup_rule", old_key)
    finally:
        con.close()
    with store.connect(db) as con:
        assert quarter_store.load(con, Activity()) is None
    assert quarters.rule_of(old_key) == Activity()
    done = quarter_store.refresh(db, Activity())
    assert done.full and done.cells == 5  # 00:00-01:15: the last sample's piece reaches 01:04
    assert len(_implausible(_store_paths_agree(db, ["inventory", "allocations"]))) == 1


def _stuck_quarter(i: int) -> float:
    """36,000 J a minute (600 W) but still from 00:15 to 00:30 (the samples 15..29 have delta 0)."""
    return 36_000.0 * (i if i <= 15 else 15 if i <= 30 else i - 15)


@pytest.mark.parametrize("energy", [lambda i: 36_000.0 * i + (1e9 if i >= 30 else 0.0), _stuck_quarter],
                         ids=["jump", "stuck"])
def test_a_rollup_without_raw_samples_leaves_an_unbelieved_quarter_unknown(tmp_path, energy):
    """The billion-joule jump again (or the counter still 00:15-00:30 while the card reads 600 W),
    but the store holds only a rollup made elsewhere (no raw samples to bill 00:15-00:30 by power x
    time): that quarter's energy is unknown, named with the quarters the rollup could not stand in
    for. The other three are exact: 00:00-00:15 and 00:30-00:45 hold 15 counter deltas of 36,000 J
    each, 00:45-01:00 14 deltas and 60 s of the last sample's 600 W x 300 s: 3 x 540,000 J =
    1,620,000 J = 0.45 kWh known, 2,700 of 3,600 s."""
    b = _card("H100-SXM-80GB", 600.0, energy)
    tel = tmp_path / "telemetry.parquet"
    b["telemetry"].write_parquet(tel)
    quarters.duckdb_rollup(str(tel), str(tmp_path / "rollup"), Activity())
    db = tmp_path / "s.duckdb"
    store.ingest(db, make_bundle(inventory=b["inventory"].to_dicts(), allocations=b["allocations"].to_dicts()),
                 rollup=None)
    assert quarter_store.ingest_rollup(db, tmp_path / "rollup") > 0
    ext = compute(store.load_bundle(db, tables=["inventory", "allocations"]), HOUR, telemetry=StoreTelemetry(db))
    seg = ext.seg.filter(pl.col("allocation_id") == "a")
    assert seg["joules"].sum() == pytest.approx(1_620_000.0, rel=1e-12)
    assert seg["energy_s"].sum() == pytest.approx(2700.0, rel=1e-12)
    rolled = [d for w, d in ext.gaps if w == "telemetry rollup"]
    assert len(rolled) == 1 and rolled[0].startswith("1 card quarter hours") and "g0 2026-10-01 00:15Z" in rolled[0]
    assert ("energy unknown", "1 cards report no power or energy counter for some samples: g0") in ext.gaps


def test_ceilings_come_from_the_pool_the_accelerator_or_its_family():
    """Per card, first match: the pool's ceiling (p2: 800 W), the accelerator's (case-insensitive:
    h100-pcie-80gb -> 500 W), 1.5 x the family's board power (H200: 1,050 W; NVIDIA L40S: 525 W;
    L4: 108 W, not L40S's; MI300X: 1,125 W), the unknown fallback (2,000 W, for a name not listed
    and for none); a MIG instance gets its share: A100 3/7 of 600 W = 257.142857 W."""
    cards = pl.DataFrame({
        "gpu_id": ["a", "b", "c", "d", "e", "f", "g", "h", "m"],
        "pool": ["p2", "p", "p", "p", "p", "p", "p", "p", "p"],
        "accelerator": ["H200", "H100-PCIe-80GB", "H200", "NVIDIA L40S", "NVIDIA L4", "AMD Instinct MI300X",
                        "Foo-9000", None, "A100-SXM4-80GB MIG 3g.40gb"],
        "capacity": [1.0] * 8 + [3 / 7],
    })
    energy = Energy(max_power_w_by_pool={"p2": 800.0}, max_power_w_by_accelerator={"h100-pcie-80gb": 500.0})
    got = dict(power_limits.ceilings(cards, energy).iter_rows())
    assert got == pytest.approx({"a": 800.0, "b": 500.0, "c": 1050.0, "d": 525.0, "e": 108.0, "f": 1125.0,
                                 "g": 2000.0, "h": 2000.0, "m": 600.0 * 3 / 7})


def test_stretches_merge_consecutive_samples_and_the_gaps_count_the_rest():
    """Samples 00:00-00:01 and 00:01-00:02 of g0 touch: one stretch (2 samples, up to 9,000 W); g0's
    00:05-00:06 is another, g1's 00:00-00:01 a third. Shown 1: the first, then "2 more stretches on
    2 cards (3 in all, 4 samples)"."""
    t = [DAY0 + 60 * k * S for k in range(7)]
    bad = pl.DataFrame({"gpu_id": ["g0", "g0", "g0", "g1"], "ts": [t[0], t[1], t[5], t[0]],
                        "t_end": [t[1], t[2], t[6], t[1]], "kind": ["high"] * 4,
                        "implied_w": [5000.0, 9000.0, 7000.0, 3000.0], "power_w": [600.0] * 4,
                        "joules": [1.0, 1.0, 1.0, 1.0]})
    ceilings = pl.DataFrame({"gpu_id": ["g0", "g1"], "max_w": [1050.0, 1050.0]})
    runs = power_limits.stretches(bad, ceilings)
    assert runs.select("gpu_id", "samples", "peak_w").rows() == [("g0", 2, 9000.0), ("g0", 1, 7000.0),
                                                                 ("g1", 1, 3000.0)]
    lines = power_limits.gap_lines(bad, ceilings, 4.0, shown=1)
    assert lines[0][1].startswith("g0 from 2026-10-01 00:00:00Z to 2026-10-01 00:02:00Z (2 samples)")
    assert lines[1] == ("energy counter implausible", "2 more stretches on 2 cards (3 in all, 4 samples) use power x time")


# --- item 23: MIG instances that add up to more than their card ------------------------------------


def test_mig_instances_over_their_physical_card_are_named():
    """P's instances m1 and m2 are 4/7 each: 8/7 = 1.143 cards at once, all day -> named. Q is re-cut at
    12:00 (q1 7/7 until then, q2 3/7 + q3 4/7 after): never more than 1 at once -> not named. R is
    listed itself (capacity 1) beside its instance r1 (3/7): 10/7 = 1.429 -> named."""
    noon = DAY0 + timedelta(hours=12)
    inv = [
        {"gpu_id": "m1", "pool": "p", "capacity": 4 / 7, "parent_gpu_id": "P"},
        {"gpu_id": "m2", "pool": "p", "capacity": 4 / 7, "parent_gpu_id": "P"},
        {"gpu_id": "q1", "pool": "p", "capacity": 1.0, "parent_gpu_id": "Q", "in_service_end": noon},
        {"gpu_id": "q2", "pool": "p", "capacity": 3 / 7, "parent_gpu_id": "Q", "in_service_start": noon},
        {"gpu_id": "q3", "pool": "p", "capacity": 4 / 7, "parent_gpu_id": "Q", "in_service_start": noon},
        {"gpu_id": "R", "pool": "p", "capacity": 1.0},
        {"gpu_id": "r1", "pool": "p", "capacity": 3 / 7, "parent_gpu_id": "R"},
    ]
    b = make_bundle(inventory=inv, allocations=[{"allocation_id": "a", "gpu_id": "m1", "owner": "A", "start": DAY0,
                                                "end": DAY0 + timedelta(days=1)}])
    comp = compute(b, make_config(period={"start": DAY0, "end": DAY0 + timedelta(days=1)}))
    named = [d for w, d in comp.gaps if w == "MIG over capacity"]
    assert named == [
        "P: its 2 MIG instances hold 1.143 cards of capacity at once from "
        "2026-10-01 00:00Z, more than the one physical card; available hours count them as given",
        "R: its 1 MIG instance and its own inventory row hold 1.429 cards of capacity at once from "
        "2026-10-01 00:00Z, more than the one physical card; available hours count them as given"]
    period = Period(start=DAY0, end=DAY0 + timedelta(days=1), timezone="UTC", currency="USD")
    cards, _ = cards_frame(b["inventory"], b["allocations"], period)
    got = mig_over_parent(b["inventory"], cards)
    assert got["capacity"].to_list() == pytest.approx([8 / 7, 10 / 7])


# --- the importers: DCGM's units and MIG rows --------------------------------------------------------


def _series(name, labels, values):
    return {"metric": {"__name__": name, **labels}, "values": [[t, v] for t, v in values]}


def test_prometheus_dcgm_energy_in_millijoules_and_mig_rows_carry_no_device_power(tmp_path):
    """A query_range answer built here, shaped like dcgm-exporter's: a whole card GPU-A and a MIG
    instance (GPU_I_ID 3, 2g.20gb) of GPU-B, 60 s apart. DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION is in
    mJ: GPU-A's 1,000,000,000 -> 1,036,750,000 mJ are 1,000,000 -> 1,036,750 J, 36,750 J / 60 s =
    612.5 W, its power reading. DCGM repeats the device's power (78.174 W) and counter on each MIG
    instance: not taken (the card's energy once per instance), so the instance has none, a note says
    so, and its inventory row names GPU-B as its parent."""
    t0 = 1790812800
    a = {"gpu": "0", "UUID": "GPU-A", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "n0"}
    m = {"gpu": "1", "UUID": "GPU-B", "modelName": "NVIDIA A800-SXM4-80GB", "Hostname": "n0",
         "GPU_I_PROFILE": "2g.20gb", "GPU_I_ID": "3"}
    result = [
        _series("DCGM_FI_DEV_GPU_UTIL", a, [(t0, "87"), (t0 + 60, "90")]),
        _series("DCGM_FI_DEV_POWER_USAGE", a, [(t0, "612.5"), (t0 + 60, "612.5")]),
        _series("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", a, [(t0, "1000000000"), (t0 + 60, "1036750000")]),
        _series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", m, [(t0, "0.5"), (t0 + 60, "0.25")]),
        _series("DCGM_FI_DEV_POWER_USAGE", m, [(t0, "78.174"), (t0 + 60, "78.174")]),
        _series("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", m, [(t0, "257858316"), (t0 + 60, "262548756")]),
    ]
    f = tmp_path / "q.json"
    f.write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}))
    r = import_files("prometheus", [f], options=ImportOptions(pool="p"))
    tel = r.frames["telemetry"].sort("gpu_id", "ts").select("gpu_id", "power_w", "energy_j").rows()
    assert tel == [("GPU-A", 612.5, 1_000_000.0), ("GPU-A", 612.5, 1_036_750.0),
                   ("GPU-B/3", None, None), ("GPU-B/3", None, None)]
    assert r.frames["inventory"].sort("gpu_id").select("gpu_id", "capacity", "parent_gpu_id").rows() == [
        ("GPU-A", 1.0, None), ("GPU-B/3", 2 / 7, "GPU-B")]
    assert ("MIG instance power", "1 MIG instances carry their card's device power or energy counter (the whole "
            "card's, on each instance): not imported for them, their energy is unknown (NVML has no per-instance "
            "power)") in r.notes


def test_the_collector_names_a_mig_instances_parent_card():
    """NVML's MIG handles belong to a physical card: the collector's inventory row of instance MIG-a
    (3 of 7 slices) of GPU-2 says parent_gpu_id GPU-2; the whole card GPU-1 has none."""
    with Sampler(FakeBackend([FakeCard("GPU-1"), FakeCard("GPU-2", migs=[FakeMig("MIG-a", gi=1, slices=3)])]),
                 node="n0", pool="p") as s:
        rows = {r["gpu_id"]: (r["capacity"], r["parent_gpu_id"]) for r in s.inventory_rows()}
    assert rows == {"GPU-1": (1.0, None), "MIG-a": (3 / 7, "GPU-2")}


# --- issue 38: a power reading above the ceiling, a counter far too low ----------------------------


def _power_gaps(comp) -> list[str]:
    return [d for w, d in comp.gaps if w == "power reading implausible"]


def test_a_power_reading_in_milliwatts_is_not_billed_and_the_counter_stands():
    """g0 (H100, ceiling 1,050 W) reports power_w in milliwatts read as watts: 600,000 W, while its
    counter rises 36,000 J a minute (600 W, a believable counter). The readings are not believed:
    not billed, and not a reference for the counter (600,000 / 4 = 150,000 W would make the
    counter look too low). The 59 intervals with a successor keep their counter deltas, 59 x
    36,000 J = 2,124,000 J = 0.59 kWh; the last sample (00:59-01:00) has no delta and no believable
    power: unknown (60 of 3,600 s), not 600,000 W x 60 s = 36,000,000 J. Facility 0.59 x 1.3 x 1.2 =
    0.9204 kWh at $0.12 = $0.110448. Every quarter holds such a reading: all four are read raw."""
    b = _card("H100-SXM-80GB", 600_000.0, lambda i: 36_000.0 * i)
    raw, fast, calls = both(b, HOUR)
    rep = build_report(fast)
    assert rep["totals"]["energy_kwh_gpu"] == pytest.approx(0.59, rel=1e-12)
    assert rep["totals"]["energy_cost"] == pytest.approx(0.110448, rel=1e-12)
    assert fast.seg["energy_s"].sum() == pytest.approx(3540.0, rel=1e-12)
    assert calls[0] == (0, 4)
    assert _implausible(fast) == []
    assert _power_gaps(fast) == [
        "g0 from 2026-10-01 00:00:00Z to 2026-10-01 01:04:00Z (60 samples): power_w reads up to 600,000 W, above "
        "the card's ceiling of 1,050 W (milliwatts read as watts?), not used; 59 of them use the energy counter, "
        "1 have no believable counter: their energy is unknown"]


def test_milliwatt_power_without_a_counter_is_unknown_not_zero():
    """The same card with no energy counter: power x time would bill 600,000 W x 3,600 s =
    2,160,000,000 J = 600 kWh. No reading is believed, so g0's hour of energy is unknown (0 of
    3,600 s known, 0 kWh of known energy: the report names it, it is not a measured zero)."""
    b = _card("H100-SXM-80GB", 600_000.0, lambda i: None)
    raw, fast, _ = both(b, HOUR)
    seg = fast.seg.filter(pl.col("allocation_id") == "a")
    assert seg["covered_s"].sum() == pytest.approx(3600.0) and seg["energy_s"].sum() == 0.0
    assert _power_gaps(fast) == [
        "g0 from 2026-10-01 00:00:00Z to 2026-10-01 01:04:00Z (60 samples): power_w reads up to 600,000 W, above "
        "the card's ceiling of 1,050 W (milliwatts read as watts?), not used; no believable energy counter: its "
        "energy is unknown"]
    assert ("energy unknown", "1 cards report no power or energy counter for some samples: g0") in fast.gaps


def test_a_stuck_counter_is_billed_as_power_x_time():
    """g0 (H100) reads 300 W all hour while its counter stays at 1,000,000 J (delta 0): the counter
    implies 0 W, below 300 W / 4 (counter_power_ratio 4, the smaller reading of the interval's two;
    300 W is above the 50 W floor and 60 s at least 30 s). Trusted, the hour would be 0 J but for the
    last sample; not believed, each minute is 300 W x 60 s = 18,000 J: 60 x 18,000 = 1,080,000 J =
    0.3 kWh, on both paths (every quarter read raw)."""
    b = _card("H100-SXM-80GB", 300.0, lambda i: 1_000_000.0)
    raw, fast, calls = both(b, HOUR)
    assert build_report(fast)["totals"]["energy_kwh_gpu"] == pytest.approx(0.3, rel=1e-12)
    assert calls[0] == (0, 4)
    assert _implausible(fast) == [
        "g0 from 2026-10-01 00:00:00Z to 2026-10-01 00:59:00Z (59 samples): the counter implies as little as 0 W, "
        "less than 1/4 of its power readings (at least 300 W); that stretch uses power x time"]


def test_a_counter_in_kilojoules_is_billed_as_power_x_time():
    """g0 (H100) at 600 W, its counter in kJ: +36 a minute, 36 / 60 = 0.6 W, and 0.6 / 600 x 4 = 0.004
    < 1: not believed. 60 x 600 W x 60 s = 2,160,000 J = 0.6 kWh (trusted: 59 x 36 J + 36,000 J =
    38,124 J = 0.01059 kWh). With counter_power_ratio 1,000 (the most the config takes) the test
    needs 0.6 W < 600 / 1,000 = 0.6 W: not so, the counter stands: 38,124 J."""
    b = _card("H100-SXM-80GB", 600.0, lambda i: 36.0 * i)
    raw, _, _ = both(b, HOUR)
    assert build_report(raw)["totals"]["energy_kwh_gpu"] == pytest.approx(0.6, rel=1e-12)
    assert len(_implausible(raw)) == 1 and "as little as 1 W" in _implausible(raw)[0]
    lenient = compute(b, make_config(period={"start": DAY0, "end": DAY0 + 3600 * S},
                                     energy={"counter_power_ratio": 1000.0}))
    assert lenient.seg["joules"].sum() == pytest.approx(38_124.0, rel=1e-12)
    assert _implausible(lenient) == []


def test_the_low_side_floors_keep_an_idle_card_and_short_samples_believed():
    """Below the floors the counter stands whatever the readings say: (a) g0 idles at 40 W (not above
    50 W) with a still counter: 59 deltas of 0 J + the last sample's 40 W x 60 s = 2,400 J; (b) g0 at
    300 W sampled every 20 s (under 30 s) with a still counter: 179 deltas of 0 J + the last sample
    (00:59:40) 300 W x 20 s to 01:00 = 6,000 J. Neither names a gap."""
    idle = _card("H100-SXM-80GB", 40.0, lambda i: 5.0)
    got = compute(idle, HOUR)
    assert got.seg["joules"].sum() == pytest.approx(2_400.0, rel=1e-12) and _implausible(got) == []
    tele = [{"ts": DAY0 + 20 * i * S, "gpu_id": "g0", "util_pct": 90.0, "power_w": 300.0, "energy_j": 7.0}
            for i in range(180)]
    fast = make_bundle(inventory=idle["inventory"].to_dicts(), telemetry=tele, allocations=idle["allocations"].to_dicts())
    raw, _, calls = both(fast, HOUR)
    assert raw.seg["joules"].sum() == pytest.approx(6_000.0, rel=1e-12) and _implausible(raw) == []
    assert calls[0] == (4, 0)


def test_the_stores_rollup_reads_a_stuck_quarter_and_a_milliwatt_reading_raw(tmp_path):
    """g0 (H100) at 600 W, its counter still 00:15-00:30, and one reading of 600,000 W at 00:40. The
    stored cells carry low_ratio (lowest implied power / smaller reading: 36,000 / 60 / 600 = 1.0,
    0.0 in the stuck quarter, none in 01:00-01:15, which holds only the last sample's piece without
    a delta) and peak_power_w (600 W, 600,000 W in 00:30-00:45). The report reads quarters 1 and 2
    raw, as the raw path: the stuck 15 minutes are 15 x 600 W x 60 s = 540,000 J; the 00:40 sample
    keeps its counter delta (36,000 J; the 600,000 W reading is named, not billed). The whole day is
    the period, so the last sample stands for the 300 s cap: 59 x 36,000 + 600 W x 300 s =
    2,304,000 J = 0.64 kWh (trusted, the counter would say 1,764,000 J = 0.49 kWh)."""
    b = _card("H100-SXM-80GB", 600.0, _stuck_quarter)
    tele = b["telemetry"].with_columns(pl.when(pl.col("ts") == DAY0 + 2400 * S).then(600_000.0)
                                       .otherwise(pl.col("power_w")).alias("power_w"))
    b = make_bundle(inventory=b["inventory"].to_dicts(), telemetry=tele.to_dicts(), allocations=b["allocations"].to_dicts())
    db = tmp_path / "s.duckdb"
    store.ingest(db, b, rollup=Activity())
    with store.connect(db) as con:
        cells = con.sql(f"SELECT low_ratio, peak_power_w FROM {quarter_store.TABLE} ORDER BY q").fetchall()
    assert cells == [(1.0, 600.0), (0.0, 600.0), (1.0, 600_000.0), (1.0, 600.0), (None, 600.0)]
    with pytest.MonkeyPatch.context() as mp:
        from tests.test_quarter_rollup import Spy

        spy = Spy(mp)
        fast = _store_paths_agree(db, ["inventory", "allocations"])
    assert build_report(fast)["totals"]["energy_kwh_gpu"] == pytest.approx(0.64, rel=1e-12)
    assert _implausible(fast) == [
        "g0 from 2026-10-01 00:15:00Z to 2026-10-01 00:30:00Z (15 samples): the counter implies as little as 0 W, "
        "less than 1/4 of its power readings (at least 600 W); that stretch uses power x time"]
    assert _power_gaps(fast) == [
        "g0 from 2026-10-01 00:40:00Z to 2026-10-01 00:41:00Z (1 sample): power_w reads up to 600,000 W, above the "
        "card's ceiling of 1,050 W (milliwatts read as watts?), not used; the energy counter stands for that stretch"]

