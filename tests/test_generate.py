"""The sample fleet generator: determinism, contract shape, deliberate anomalies, scale knobs."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cost_engine.config import load_config  # noqa: E402
from cost_engine.contract import CATEGORIES, EVENT_KINDS, QUEUE_REASONS, REQUEST_STATUSES, TABLES, WORKLOADS  # noqa: E402
from sample_data.generate import generate_bundle, main  # noqa: E402

SMALL = dict(gpus=8, days=1, seed=7, start="2026-10-05")
P0 = datetime(2026, 10, 5, tzinfo=timezone.utc)


def _read(bundle: Path, table: str) -> pl.DataFrame:
    csv = bundle / f"{table}.csv"
    if csv.exists():
        return pl.read_csv(csv, try_parse_dates=True, infer_schema_length=None)
    return pl.read_parquet(bundle / f"{table}.parquet")


def _ts(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return generate_bundle(tmp_path_factory.mktemp("gen") / "fleet", **SMALL)


@pytest.fixture(scope="module")
def an(bundle) -> dict:
    return json.loads((bundle / "anomalies.json").read_text())


def test_same_arguments_give_identical_files(tmp_path, bundle):
    again = generate_bundle(tmp_path / "again", **SMALL)
    names = sorted(p.name for p in bundle.iterdir())
    assert names == sorted(p.name for p in again.iterdir())
    for name in names:
        assert (bundle / name).read_bytes() == (again / name).read_bytes(), name
    other = generate_bundle(tmp_path / "other", **{**SMALL, "seed": 8})
    assert (other / "telemetry.csv").read_bytes() != (bundle / "telemetry.csv").read_bytes()
    assert (other / "requests.csv").read_bytes() != (bundle / "requests.csv").read_bytes()


def test_every_contract_table_with_its_columns(bundle):
    for table, cols in TABLES.items():
        path = bundle / f"{table}.csv"
        assert path.exists(), table
        header = path.read_text().splitlines()[0].split(",")
        assert header == [c.name for c in cols], table
        df = _read(bundle, table)
        assert df.height > 0, table
        for c in cols:
            if c.required:
                assert df[c.name].null_count() == 0, (table, c.name)


def test_timestamps_are_iso_utc_with_z(bundle):
    first = (bundle / "allocations.csv").read_text().splitlines()[1].split(",")
    assert first[2].endswith("Z") and "T" in first[2]
    tel = (bundle / "telemetry.csv").read_text().splitlines()[1]
    assert tel.startswith("2026-10-05T00:00:00Z,")


def test_pools_and_mig_capacities(bundle, an):
    inv = _read(bundle, "inventory")
    pools = dict(inv.group_by("pool").len().iter_rows())
    assert set(pools) == {"h100-train", "a100-infer", "a100-mig"}
    assert an["pools"] == {"h100-train": 4, "a100-infer": 3, "a100-mig": 1}
    assert pools["h100-train"] == 4 and pools["a100-infer"] == 3 and pools["a100-mig"] == 4
    assert inv["node"].null_count() == 0
    cap = dict(zip(inv["gpu_id"], inv["capacity"]))
    mig_ids = set(inv.filter(pl.col("pool") == "a100-mig")["gpu_id"])
    assert all(g.startswith("MIG-") for g in mig_ids)
    assert {g for ids in an["mig_cards"].values() for g in ids} == mig_ids
    for parent, ids in an["mig_cards"].items():
        assert parent.startswith("GPU-") and parent not in cap
        assert sum(cap[g] for g in ids) == pytest.approx(1.0, abs=1e-9)
    other = inv.filter(pl.col("pool") != "a100-mig")
    assert other["capacity"].to_list() == [1.0] * other.height
    assert all(g.startswith("GPU-") for g in other["gpu_id"])


def test_mig_telemetry_has_no_power(bundle):
    inv = _read(bundle, "inventory")
    tel = _read(bundle, "telemetry").join(inv.select("gpu_id", "pool"), on="gpu_id")
    mig = tel.filter(pl.col("pool") == "a100-mig")
    assert mig.height > 0
    assert mig["power_w"].null_count() == mig.height and mig["energy_j"].null_count() == mig.height
    assert mig["util_pct"].null_count() == 0
    phys = tel.filter(pl.col("pool") != "a100-mig")
    assert phys["power_w"].null_count() == 0 and phys["energy_j"].null_count() == 0
    assert phys["power_w"].min() > 40 and phys["power_w"].max() < 720
    assert tel["util_pct"].min() >= 0 and tel["util_pct"].max() <= 100


def test_counter_reset_exactly_once(bundle, an):
    tel = _read(bundle, "telemetry").filter(pl.col("energy_j").is_not_null()).sort("gpu_id", "ts")
    d = tel.with_columns(pl.col("energy_j").diff().over("gpu_id").alias("de"))
    neg = d.filter(pl.col("de") < 0)
    assert neg.height == 1
    row = neg.row(0, named=True)
    assert row["gpu_id"] == an["counter_reset"]["gpu_id"]
    assert row["ts"] == _ts(an["counter_reset"]["ts"])
    assert row["energy_j"] < 1000  # dropped to near zero
    al = _read(bundle, "allocations").filter(pl.col("allocation_id") == an["counter_reset"]["allocation_id"])
    assert al["gpu_id"][0] == row["gpu_id"] and al["start"][0] <= row["ts"] < al["end"][0]


def test_telemetry_gap_and_row_count(bundle, an):
    inv = _read(bundle, "inventory")
    tel = _read(bundle, "telemetry")
    gap = an["telemetry_gap"]
    assert gap["missing_samples"] == 120
    assert tel.height == inv.height * 1440 - 120
    g0, g1 = _ts(gap["start"]), _ts(gap["end"])
    card = tel.filter(pl.col("gpu_id") == gap["gpu_id"])
    assert card.height == 1440 - 120
    assert card.filter((pl.col("ts") >= g0) & (pl.col("ts") < g1)).height == 0
    # every other card has every sample
    counts = tel.group_by("gpu_id").len()
    assert counts.filter(pl.col("gpu_id") != gap["gpu_id"])["len"].unique().to_list() == [1440]
    assert tel.select(pl.struct("gpu_id", "ts").is_unique().all()).item()


def test_unmapped_keys_exist_and_have_no_alias(bundle, an):
    aliases = _read(bundle, "aliases")
    projects = set(_read(bundle, "owners")["project"])
    keyed = set(zip(aliases["source"], aliases["key"]))
    assert set(aliases["project"]) <= projects
    al = _read(bundle, "allocations")
    req = _read(bundle, "requests")
    unmapped = {(u["source"], u["key"]) for u in an["unmapped_keys"]}
    assert unmapped == {("gateway", "key-legacy-7"), ("scheduler", "acct_sandbox")}
    assert "key-legacy-7" in set(req["owner"])
    sandbox = al.filter(pl.col("owner") == "acct_sandbox")
    assert sandbox.height >= 2 and set(sandbox["source"]) == {"scheduler"}
    assert set(sandbox["allocation_id"]) == set(an["unmapped_keys"][1]["allocation_ids"])
    for src, key in unmapped:
        assert (src, key) not in keyed and key not in projects
    # every other owner key resolves
    used = set(zip(al["source"], al["owner"])) | set(zip(req["source"], req["owner"]))
    costs = _read(bundle, "costs").filter(pl.col("owner").is_not_null())
    used |= set(zip(costs["source"], costs["owner"]))
    assert used - keyed == unmapped


def test_allocations_shape(bundle, an):
    al = _read(bundle, "allocations")
    assert al["allocation_id"].is_unique().all()
    assert (al["end"] > al["start"]).all()
    assert set(al["workload"]) <= set(WORKLOADS)
    assert {"training", "fine_tuning", "batch_inference", "inference", "interactive"} <= set(al["workload"])
    assert set(al["source"]) == {"scheduler", "kubernetes"}
    inf = al.filter(pl.col("workload") == "inference")
    assert set(inf["model"]) == {"llama-3.1-70b", "mistral-7b", "qwen2.5-coder-32b"}
    assert set(inf["owner"]) == {"ns-inference"} and set(inf["source"]) == {"kubernetes"}
    assert al.filter(pl.col("workload") != "inference")["model"].null_count() == al.height - inf.height
    # multi-card jobs share a job_id, one row per card
    big = al.filter(pl.col("job_id") == an["multi_node_job"]["job_id"])
    assert big.height == an["multi_node_job"]["gpus"] == big["gpu_id"].n_unique() >= 4
    # allocations cross both period edges
    p1 = P0 + timedelta(days=1)
    assert (al["start"] < P0).any() and (al["end"] > p1).any()
    edges = an["edge_allocations"]
    assert edges["start_before_period"] and edges["end_after_period"]


def _levels(al: pl.DataFrame) -> pl.DataFrame:
    ev = pl.concat([
        al.select("gpu_id", pl.col("start").alias("t"), pl.col("share").alias("d")),
        al.select("gpu_id", pl.col("end").alias("t"), (-pl.col("share")).alias("d")),
    ]).sort("gpu_id", "t", "d")
    return ev.with_columns(pl.col("d").cum_sum().over("gpu_id").alias("level"))


def test_one_over_allocation_and_one_time_sliced_card(bundle, an):
    al = _read(bundle, "allocations")
    over = _levels(al).filter(pl.col("level") > 1 + 1e-9)
    oa = an["over_allocation"]
    assert over["gpu_id"].unique().to_list() == [oa["gpu_id"]]
    assert over["t"].min() == _ts(oa["start"])
    pair = al.filter(pl.col("allocation_id").is_in(oa["allocation_ids"]))
    assert pair["share"].to_list() == [1.0, 1.0] and pair["gpu_id"].n_unique() == 1
    ts = an["time_sliced"]
    sliced = al.filter(pl.col("gpu_id") == ts["gpu_id"])
    assert set(sliced["share"]) == {0.5}
    assert _levels(sliced)["level"].max() == pytest.approx(1.0)


def test_oversized_job_has_two_idle_cards(bundle, an):
    ov = an["oversized_job"]
    al = _read(bundle, "allocations").filter(pl.col("job_id") == ov["job_id"])
    assert al.height == ov["requested_gpus"] == al["requested_gpus"][0]
    s, e = _ts(ov["start"]), _ts(ov["end"])
    tel = _read(bundle, "telemetry").filter(
        pl.col("gpu_id").is_in(al["gpu_id"].to_list()) & (pl.col("ts") >= s) & (pl.col("ts") < e)
    )
    per_card = tel.group_by("gpu_id").agg(pl.col("util_pct").max().alias("mx"), pl.col("util_pct").mean().alias("avg"))
    idle = per_card.filter(pl.col("mx") == 0)["gpu_id"].to_list()
    assert sorted(idle) == sorted(ov["inactive_gpu_ids"])
    assert per_card.filter(pl.col("mx") > 0)["avg"].min() > 50


def test_events_queue_and_maintenance(bundle, an):
    ev = _read(bundle, "events")
    assert set(ev["kind"]) <= set(EVENT_KINDS)
    assert {"maintenance", "degraded_hardware", "storage_bottleneck", "data_loading"} <= set(ev["kind"])
    scoped = ev.select(pl.sum_horizontal(pl.col("gpu_id", "node", "pool").is_not_null().cast(pl.Int8)).alias("n"))
    assert scoped["n"].to_list() == [1] * ev.height
    assert ev.filter(pl.col("kind") == "data_loading")["gpu_id"].null_count() == 0
    m = an["maintenance"]
    inv = _read(bundle, "inventory")
    cards = inv.filter(pl.col("node") == m["node"])["gpu_id"].to_list()
    al = _read(bundle, "allocations")
    clash = al.filter(pl.col("gpu_id").is_in(cards) & (pl.col("start") < _ts(m["end"])) & (pl.col("end") > _ts(m["start"])))
    assert clash.height == 0
    # the storage bottleneck is a low-util stretch of a running training job
    sb = an["storage_bottleneck"]
    big = al.filter(pl.col("job_id") == sb["job_id"])
    tel = _read(bundle, "telemetry").filter(pl.col("gpu_id").is_in(big["gpu_id"].to_list()))
    during = tel.filter((pl.col("ts") >= _ts(sb["start"])) & (pl.col("ts") < _ts(sb["end"])))
    assert during.height > 0 and during["util_pct"].max() < 5
    q = _read(bundle, "queue")
    assert set(q["reason"]) <= set(QUEUE_REASONS) and {"quota", "resources"} <= set(q["reason"])
    assert q["start"].null_count() >= 2
    assert q.filter(pl.col("reason") == "resources")["start"].null_count() == 1


def test_requests(bundle):
    everything = _read(bundle, "requests")
    assert everything["request_id"].is_unique().all()
    # Batch traffic: hourly usage buckets, 24 a day per model, each for many requests.
    buckets = everything.filter(pl.col("request_id").str.starts_with("bkt-"))
    assert buckets.height == 24 * 3
    assert (buckets["requests"] > 1).all() and buckets["end"].is_not_null().all()
    assert ((buckets["end"] - buckets["ts"]) == timedelta(hours=1)).all()
    assert buckets["ttft_ms"].is_null().all() and buckets["attempt"].is_null().all()
    req = everything.filter(pl.col("request_id").str.starts_with("req-"))
    assert req.height > 500
    assert set(req["model"]) == {"llama-3.1-70b", "mistral-7b", "qwen2.5-coder-32b"}
    assert set(req["status"]) <= set(REQUEST_STATUSES) and {"ok", "error", "timeout"} <= set(req["status"])
    assert (req["status"] == "ok").mean() > 0.9
    assert req.select((pl.col("input_tokens", "cached_input_tokens", "output_tokens") >= 0).all()).row(0) == (True,) * 3
    slow = req.filter((pl.col("ttft_ms") > 2000) | (pl.col("latency_ms") > 30000))
    assert 0 < slow.height < 0.15 * req.height
    assert req["owner"].n_unique() >= 5
    assert set(req["requests"]) == {1}


def test_costs_rates_tariffs_quotas_config(bundle):
    costs = _read(bundle, "costs")
    assert set(costs["category"]) <= set(CATEGORIES)
    assert "power" not in set(costs["category"])
    assert {"depreciation", "cooling", "facility", "network", "storage", "software", "operations", "support"} <= set(
        costs["category"]
    )
    assert (costs["amount"] >= 0).all()
    assert set(costs["start"]) == {P0} and set(costs["end"]) == {P0 + timedelta(days=1)}
    dep = costs.filter((pl.col("category") == "depreciation") & (pl.col("pool") == "h100-train"))["amount"][0]
    assert dep / (4 * 24) == pytest.approx(30000 / 48 / 730, rel=0.01)
    direct = costs.filter(pl.col("owner").is_not_null())
    assert direct.rows(named=True)[0]["owner"] == "PRJ-1004" and direct["source"][0] == "finance"
    assert "a100-infer" not in set(costs["pool"].drop_nulls())
    rates = _read(bundle, "rates")
    assert rates.rows(named=True)[0]["pool"] == "a100-infer" and rates["price_per_gpu_hour"][0] == 1.6
    tar = _read(bundle, "tariffs")
    assert tar.height == 24 and (tar["end"] - tar["start"]).unique().to_list() == [timedelta(hours=1)]
    assert set(tar["price_per_kwh"]) == {0.09, 0.14, 0.21}
    assert tar["carbon_g_per_kwh"].min() >= 250 and tar["carbon_g_per_kwh"].max() <= 450
    quotas = _read(bundle, "quotas")
    assert set(quotas["tenant"]) == set(_read(bundle, "owners")["tenant"])
    cfg = load_config(bundle / "ailedger.toml")
    assert cfg.period.start == P0 and cfg.period.end == P0 + timedelta(days=1)
    assert cfg.period.timezone == "Europe/Berlin" and cfg.boundary.name == "fully_loaded"


def test_scale_knobs(tmp_path, bundle):
    base_req = _read(bundle, "requests").height
    more = generate_bundle(tmp_path / "g10", **{**SMALL, "gpus": 12})
    inv = _read(more, "inventory")
    assert inv.filter(pl.col("pool") != "a100-mig").height + inv.filter(pl.col("pool") == "a100-mig").height // 4 == 12
    assert _read(more, "telemetry").height == inv.height * 1440 - 120
    two = generate_bundle(tmp_path / "d2", **{**SMALL, "days": 2})
    assert _read(two, "telemetry").height == _read(two, "inventory").height * 2880 - 120
    assert 1.6 * base_req < _read(two, "requests").height < 2.4 * base_req
    assert _read(two, "tariffs").height == 48
    coarse = generate_bundle(tmp_path / "iv", **SMALL, telemetry_interval_s=300)
    assert _read(coarse, "telemetry").height == _read(coarse, "inventory").height * 288 - 24
    big = generate_bundle(tmp_path / "g40", **{**SMALL, "gpus": 40})
    assert _read(big, "requests").height > 3 * base_req


def test_parquet_telemetry_matches_csv(tmp_path, bundle):
    pq_bundle = generate_bundle(tmp_path / "pq", **SMALL, telemetry_fmt="parquet")
    assert not (pq_bundle / "telemetry.csv").exists() and (pq_bundle / "allocations.csv").exists()
    tp = pl.read_parquet(pq_bundle / "telemetry.parquet")
    assert tp.schema["ts"] == pl.Datetime("us", "UTC")
    assert list(tp.columns) == [c.name for c in TABLES["telemetry"]]
    tc = _read(bundle, "telemetry")
    assert tp.equals(tc.with_columns(pl.col("ts").cast(pl.Datetime("us", "UTC"))))
    full = generate_bundle(tmp_path / "allpq", **SMALL, fmt="parquet")
    assert {p.suffix for p in full.iterdir() if p.stem in TABLES} == {".parquet"}
    assert pl.read_parquet(full / "allocations.parquet").schema["start"] == pl.Datetime("us", "UTC")


def test_cli(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "cli"), "--gpus", "8", "--days", "1", "--telemetry-interval", "600"]) == 0
    assert (tmp_path / "cli" / "telemetry.csv").exists()
    assert main(["--out", str(tmp_path / "bad"), "--gpus", "3"]) == 2
    assert "at least" in capsys.readouterr().err


def test_sparse_shape_is_deterministic_and_reports(tmp_path):
    """`--shape sparse` at a small size: 64 cards in 4 pools (8-card nodes: 24 + 16 + 16 + 8),
    2 days, ~300 allocation rows, 200 waits, 50 events, cost rows per pool per day, no
    telemetry. The same arguments write the same bytes; the report reconciles and says that
    activity is unknown (no telemetry), never 0."""
    import hashlib

    from cost_engine import api
    from cost_engine.report import build_report
    from sample_data.generate import main

    args = ["--shape", "sparse", "--gpus", "64", "--days", "2", "--allocations", "300", "--waits", "200",
            "--events", "50", "--owners", "20"]

    def digest(folder):
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}

    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--out", str(tmp_path / "b")]) == 0
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    assert not (tmp_path / "a" / "telemetry.csv").exists()
    inv = (tmp_path / "a" / "inventory.csv").read_text().splitlines()
    assert len(inv) == 65
    rep = build_report(api.run(tmp_path / "a"))
    t = rep["totals"]
    assert t["available_gpu_hours"] == 64 * 48.0
    assert t["active_gpu_hours"] is None and t["idle_rate"] is None
    assert abs(rep["reconciliation"]["difference"]) <= 1e-6 * rep["reconciliation"]["input_cost"]
    # 4 pools x 2 days x 3 pool categories, less depreciation of the rented pool, plus 2 fleet rows a day.
    costs = (tmp_path / "a" / "costs.csv").read_text().splitlines()
    assert len(costs) - 1 == 2 * (4 * 3 - 1) + 2 * 2
