"""The NVML collector against a fake backend made of pynvml's own ctypes structs and error codes."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import polars as pl
import pynvml
import pytest
from click.testing import CliRunner

from cost_engine import import_cli, store
from cost_engine.bundle import read_bundle
from cost_engine.collector import BundleWriter, CollectorError, NvmlBackend, Sampler, StoreWriter, run
from cost_engine.collector.backend import CLOCK_HW_SLOWDOWN, NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_NO_PERMISSION
from cost_engine.collector.fake import LOST, UNSUPPORTED, Fail, FakeBackend, FakeCard, FakeMig
from cost_engine.config import parse_config
from cost_engine.contract import make_frame
from cost_engine.engine import compute

UTC = timezone.utc
T0 = datetime(2026, 10, 1, tzinfo=UTC)


def ts(i: int, interval: int = 10) -> datetime:
    return T0 + timedelta(seconds=i * interval)


def sample_all(sampler: Sampler, n: int, interval: int = 10):
    sampler.open()
    return [sampler.sample(ts(i, interval)) for i in range(n)]


def readings(batches, gpu: str):
    return [r for b in batches for r in b.readings if r.gpu_id == gpu]


def test_fake_backend_speaks_pynvml_structs():
    b = FakeBackend([FakeCard("GPU-1", util=42, mem_used_mib=1024.0),
                     FakeCard("GPU-2", migs=[FakeMig("MIG-1", gi=1, slices=3)])])
    h = b.handle(0)
    assert isinstance(b.utilization(h), pynvml.c_nvmlUtilization_t) and b.utilization(h).gpu == 42
    mem = b.memory(h)
    assert isinstance(mem, pynvml.c_nvmlMemory_t) and mem.used == 1024 * 1024 * 1024
    mig = b.mig_devices(b.handle(1))[0]
    assert isinstance(b.attributes(mig), pynvml.c_nvmlDeviceAttributes)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        b.utilization(mig)


def test_mixed_support_across_cards():
    full = FakeCard("GPU-full", util=[60, 70], power_w=350.0, energy_j=[1000.0, 4500.0], mem_used_mib=2048.0,
                    clock_reasons=0, ecc_uncorrected=0, retired_pages=0)
    # An older card: no energy counter, no ECC, no clock reasons, no row remapping, no retirement.
    old = FakeCard("GPU-old", name="Tesla P100-PCIE-16GB", util=[10, 20], power_w=[80.0, UNSUPPORTED],
                   energy_j=UNSUPPORTED, clock_reasons=UNSUPPORTED, ecc_uncorrected=UNSUPPORTED,
                   retired_pages=UNSUPPORTED, remapped_rows=UNSUPPORTED, mem_used_mib=Fail(NVML_ERROR_NO_PERMISSION))
    s = Sampler(FakeBackend([full, old]), interval_s=10, node="n1", pool="p")
    batches = sample_all(s, 2)
    rows = [r for b in batches for r in b.telemetry]
    assert [(r["gpu_id"], r["util_pct"], r["power_w"], r["energy_j"], r["mem_used_mib"]) for r in rows] == [
        ("GPU-full", 60.0, 350.0, 1000.0, 2048.0),
        ("GPU-old", 10.0, 80.0, None, None),
        ("GPU-full", 70.0, 350.0, 4500.0, 2048.0),
        ("GPU-old", 20.0, None, None, None),  # power stopped being supported: missing, never 0
    ]
    r = readings(batches, "GPU-old")[1]
    assert r.energy_j is None and r.clock_event_reasons is None and r.ecc_uncorrected is None
    assert r.remapped_rows is None and r.retired_pages is None
    assert set(r.unsupported) >= {"energy_j", "clock_event_reasons", "ecc_uncorrected", "retired_pages",
                                  "remapped_rows", "power_w"}
    assert any("mem_used_mib not readable" in n for n in batches[0].notes)
    assert all(not b.events for b in batches)


def test_lost_card_mid_run():
    ok = FakeCard("GPU-ok", util=50)
    dying = FakeCard("GPU-dying", util=[30, 35, 40], lost_from=1)
    s = Sampler(FakeBackend([ok, dying]), interval_s=10, node="n1", pool="p")
    batches = sample_all(s, 3)
    assert [r["gpu_id"] for r in batches[0].telemetry] == ["GPU-ok", "GPU-dying"]
    assert [r["gpu_id"] for r in batches[1].telemetry] == ["GPU-ok"]
    assert [r["gpu_id"] for r in batches[2].telemetry] == ["GPU-ok"]
    events = [e for b in batches for e in b.events]
    assert events == [
        {"start": ts(1), "end": ts(2), "kind": "degraded_hardware", "gpu_id": "GPU-dying"},
        {"start": ts(2), "end": ts(3), "kind": "degraded_hardware", "gpu_id": "GPU-dying"},
    ]
    assert any("GPU-dying: GPU is lost (NVML_ERROR_GPU_IS_LOST)" in n for n in batches[1].notes)
    assert [r.lost for r in readings(batches, "GPU-dying")] == [False, True, True]
    # Once lost, the card is not asked again.
    asked = [what for gpu, what in s.backend.calls if gpu == "GPU-dying"]
    assert len(asked) == 8 + 1  # every reading at sample 0, the first one at sample 1, none after


def test_lost_card_reported_by_any_call():
    card = FakeCard("GPU-x", power_w=[300.0, LOST])
    s = Sampler(FakeBackend([card]), interval_s=10, node="n1", pool="p")
    batches = sample_all(s, 2)
    assert batches[1].telemetry == [] and batches[1].events[0]["gpu_id"] == "GPU-x"


def test_mig_instances_with_utilization_unsupported():
    card = FakeCard("GPU-mig", name="NVIDIA A100-SXM4-80GB", power_w=400.0, energy_j=5000.0,
                    migs=[FakeMig("MIG-3g", gi=1, slices=3, mem_used_mib=10240.0),
                          FakeMig("MIG-2g", gi=5, slices=2, util=[35, 45]),
                          FakeMig("MIG-1g", gi=13, slices=1, name="NVIDIA A100-SXM4-80GB MIG 1g.10gb")])
    s = Sampler(FakeBackend([card]), interval_s=10, node="n1", pool="a100-mig")
    batches = sample_all(s, 2)
    inv = batches[0].inventory
    assert [(r["gpu_id"], r["capacity"], r["index"]) for r in inv] == [
        ("MIG-3g", 3 / 7, "0/1"), ("MIG-2g", 2 / 7, "0/5"), ("MIG-1g", 1 / 7, "0/13")]
    r3 = readings(batches, "MIG-3g")[0]
    assert r3.util_pct is None and "util_pct" in r3.unsupported  # None, never 0
    assert r3.mem_used_mib == 10240.0
    tel = [r for b in batches for r in b.telemetry]
    assert [(r["gpu_id"], r["util_pct"]) for r in tel] == [("MIG-2g", 35.0), ("MIG-2g", 45.0)]
    assert all(r["util_pct"] != 0 for r in tel)
    # Card-level power is not copied onto instances (NVML has no per-instance power).
    assert all(r["power_w"] is None and r["energy_j"] is None for r in tel)
    assert sum(1 for n in batches[0].notes if "MIG-3g: no utilization reading (not supported)" in n) == 1
    assert not any("MIG-3g" in n for n in batches[1].notes)  # noted once


def test_energy_counter_going_backwards_is_kept_and_noted(tmp_path):
    card = FakeCard("GPU-r", util=80, power_w=[300.0, 300.0, 200.0, 300.0],
                    energy_j=[10_000.0, 13_000.0, 500.0, 3_500.0])
    s = Sampler(FakeBackend([card]), interval_s=10, node="n1", pool="p")
    batches = sample_all(s, 4)
    assert [r["energy_j"] for b in batches for r in b.telemetry] == [10_000.0, 13_000.0, 500.0, 3_500.0]
    assert any("energy counter went backwards (13000 J -> 500 J)" in n for n in batches[2].notes)
    # The engine treats the drop as a reset: that interval counts power x time (300 W x 10 s).
    tele = make_frame("telemetry", [{k: v for k, v in r.items() if k != "clock_event_reasons"}
                                    for b in batches for r in b.telemetry])
    alloc = make_frame("allocations", [{"allocation_id": "a", "gpu_id": "GPU-r", "start": ts(0), "end": ts(3),
                                        "owner": "x"}])
    inv = make_frame("inventory", [{"gpu_id": "GPU-r", "pool": "p"}])
    from cost_engine.bundle import Bundle

    comp = compute(Bundle.from_frames({"telemetry": tele, "allocations": alloc, "inventory": inv}),
                   parse_config({"period": {"start": ts(0), "end": ts(3)}}))
    held = comp.seg.filter(pl.col("allocation_id") == "a")
    assert held["joules"].sum() == pytest.approx(3000.0 + 3000.0 + 3000.0)
    assert any(w == "energy counter reset" for w, _ in comp.gaps)


def test_card_without_energy_counter():
    card = FakeCard("GPU-noenergy", util=[5, 95], power_w=[90.0, 650.0], energy_j=UNSUPPORTED)
    s = Sampler(FakeBackend([card]), interval_s=10, node="n1", pool="p")
    batches = sample_all(s, 2)
    assert [(r["power_w"], r["energy_j"]) for b in batches for r in b.telemetry] == [(90.0, None), (650.0, None)]


def test_health_events_xid_clocks_ecc_remap():
    card = FakeCard(
        "GPU-h",
        clock_reasons=[0, CLOCK_HW_SLOWDOWN, 0x1, 0],  # HW slowdown at sample 1; idle (0x1) is normal
        ecc_uncorrected=[0, 0, 0, 2],  # rises at sample 3
        remapped_rows=[(0, 0, False, False), (0, 0, False, False), (0, 0, True, False), (0, 0, False, False)],
        xids={0: [13], 2: [79]},  # 13 is an application fault: no event
    )
    s = Sampler(FakeBackend([card]), interval_s=10, node="n1", pool="p")
    batches = sample_all(s, 4)
    assert [[e["start"] for e in b.events] for b in batches] == [[], [ts(1)], [ts(2)], [ts(3)]]
    assert any("XID 79" in n for n in batches[2].notes)
    assert not any("XID 13" in n for b in batches for n in b.notes)


def test_no_driver_fails_with_a_clear_message(monkeypatch):
    def no_library():
        raise pynvml.NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_library)
    with pytest.raises(CollectorError, match="^NVIDIA driver not available: NVML Shared Library Not Found"):
        NvmlBackend().init()


def test_cli_without_driver_exits_3(monkeypatch, tmp_path):
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: (_ for _ in ()).throw(pynvml.NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)))
    res = CliRunner().invoke(import_cli.collect, ["--out", str(tmp_path / "c"), "--count", "1"])
    assert res.exit_code == 3
    assert "error: NVIDIA driver not available: NVML Shared Library Not Found" in res.output


def test_cli_collect_with_fake_backend_writes_a_readable_bundle(monkeypatch, tmp_path):
    cards = [FakeCard("GPU-1", util=[10, 20, 30], energy_j=[100.0, 200.0, 300.0]),
             FakeCard("GPU-2", migs=[FakeMig("MIG-a", gi=1, slices=3, util=[50, 60, 70])])]
    monkeypatch.setattr(import_cli, "make_backend", lambda: FakeBackend(cards))
    out = tmp_path / "collected"
    res = CliRunner().invoke(import_cli.collect, ["--out", str(out), "--count", "3", "--interval", "0.1",
                                                  "--pool", "lab", "--node", "host1"])
    assert res.exit_code == 0, res.output
    assert "collecting 2 GPUs" in res.output and "3 samples: 6 telemetry rows, 0 events" in res.output
    lines = (out / "telemetry.jsonl").read_text().splitlines()
    assert len(lines) == 6 and json.loads(lines[0])["gpu_id"] == "GPU-1"
    inv = [json.loads(x) for x in (out / "inventory.jsonl").read_text().splitlines()]
    assert [(r["gpu_id"], r["pool"], r["node"], r["index"]) for r in inv] == [
        ("GPU-1", "lab", "host1", "0"), ("MIG-a", "lab", "host1", "1/1")]
    (out / "allocations.csv").write_text("allocation_id,gpu_id,start,end,owner\n")
    b = read_bundle(out)
    assert b["telemetry"].height == 6 and b.rejected.height == 0
    assert b["inventory"]["capacity"].to_list() == [1.0, 3 / 7]


def test_csv_writer_rotates(tmp_path):
    s = Sampler(FakeBackend([FakeCard("GPU-1")]), interval_s=10, node="n", pool="p")
    s.open()
    w = BundleWriter(tmp_path, "csv", rotate_bytes=200)
    for i in range(6):
        w.write(s.sample(ts(i)))
    rotated = sorted((tmp_path / "rotated").iterdir())
    assert rotated and all(p.name.startswith("telemetry-") for p in rotated)
    current = (tmp_path / "telemetry.csv").read_text().splitlines()
    assert current[0].startswith("ts,gpu_id,util_pct")
    total = sum(len(p.read_text().splitlines()) - 1 for p in rotated) + len(current) - 1
    assert total == 6


def test_store_writer(tmp_path):
    db = tmp_path / "c.duckdb"
    s = Sampler(FakeBackend([FakeCard("GPU-1", lost_from=2)]), interval_s=10, node="n", pool="p")
    summary = run(s, StoreWriter(db), count=3, sleep=lambda _: None)
    assert (summary.samples, summary.telemetry_rows, summary.event_rows) == (3, 2, 1)
    b = store.load_bundle(db)
    assert b["telemetry"].height == 2 and b["inventory"]["gpu_id"].to_list() == ["GPU-1"]
    assert b["events"]["kind"].to_list() == ["degraded_hardware"]
