"""FOCUS export: mandatory columns, sums to the report's input cost, idle rows with their cause."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from cost_engine import api
from cost_engine.engine import compute
from cost_engine.exporters.focus import ALLOCATION_COLUMNS, COLUMNS, MANDATORY, check, focus_frame, write_focus
from cost_engine.import_cli import export
from cost_engine.report import build_report
from tests.helpers import make_bundle, make_config, ts

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data" / "fleet-week"


def small_bundle():
    """Two pools, a training job, an inference service with token recharge, an unmapped owner,
    a maintenance window and a queued job (idle causes), shared, direct and API costs."""
    return make_bundle(
        inventory=[
            {"gpu_id": "g1", "pool": "train", "node": "n1"},
            {"gpu_id": "g2", "pool": "train", "node": "n1"},
            {"gpu_id": "g3", "pool": "infer", "node": "n2"},
            {"gpu_id": "g4", "pool": "infer", "node": "n2"},
        ],
        allocations=[
            {"allocation_id": "a1", "gpu_id": "g1", "start": ts(1, 0), "end": ts(1, 12), "owner": "acct_a",
             "workload": "training", "job_id": "j1"},
            {"allocation_id": "a2", "gpu_id": "g2", "start": ts(1, 6), "end": ts(1, 10), "owner": "acct_ghost",
             "job_id": "j2"},
            {"allocation_id": "s1", "gpu_id": "g3", "start": ts(1, 0), "end": ts(2, 0), "owner": "svc",
             "workload": "inference", "model": "llama"},
        ],
        telemetry=[
            {"ts": ts(1, h), "gpu_id": g, "util_pct": 60.0, "power_w": 400.0}
            for h in range(24) for g in ("g1", "g2", "g3", "g4")
        ],
        requests=[
            {"request_id": "r1", "ts": ts(1, 3), "owner": "team-x", "model": "llama", "input_tokens": 1000,
             "cached_input_tokens": 500, "output_tokens": 400},
            {"request_id": "r2", "ts": ts(1, 15), "owner": "team-y", "model": "llama", "input_tokens": 200,
             "output_tokens": 100},
        ],
        costs=[
            {"cost_id": "dep-train", "category": "depreciation", "amount": 480.0, "start": ts(1, 0), "end": ts(2, 0),
             "pool": "train"},
            {"cost_id": "dep-infer", "category": "depreciation", "amount": 240.0, "start": ts(1, 0), "end": ts(2, 0),
             "pool": "infer"},
            {"cost_id": "net", "category": "network", "amount": 48.0, "start": ts(1, 0), "end": ts(2, 0)},
            {"cost_id": "support-a", "category": "support", "amount": 30.0, "start": ts(1, 0), "end": ts(2, 0),
             "owner": "proj-a"},
            {"cost_id": "openai:1", "category": "api_fees", "amount": 12.5, "start": ts(1, 0), "end": ts(2, 0),
             "owner": "proj-x", "source": "openai"},
        ],
        owners=[
            {"tenant": "research", "project": "proj-a"},
            {"tenant": "product", "project": "proj-x"},
            {"tenant": "product", "project": "proj-y"},
            {"tenant": "platform", "project": "proj-svc"},
        ],
        aliases=[
            {"source": "scheduler", "key": "acct_a", "project": "proj-a"},
            {"source": "scheduler", "key": "svc", "project": "proj-svc"},
            {"source": "gateway", "key": "team-x", "project": "proj-x"},
            {"source": "gateway", "key": "team-y", "project": "proj-y"},
        ],
        events=[{"start": ts(1, 20), "end": ts(2, 0), "kind": "maintenance", "node": "n1"}],
        queue=[{"job_id": "q1", "owner": "acct_a", "pool": "infer", "gpus": 1.0, "submit": ts(1, 2),
                "start": ts(1, 4), "reason": "quota"}],
    )


@pytest.fixture(scope="module")
def comp():
    return compute(small_bundle(), make_config(activity={"max_sample_gap_s": 3600}))


def test_mandatory_and_allocation_columns(comp):
    f = focus_frame(comp)
    assert list(f.columns) == list(COLUMNS)
    assert set(MANDATORY) <= set(f.columns)
    assert set(ALLOCATION_COLUMNS) <= set(f.columns)
    assert {"x_IdleCause", "x_EnergyKWh", "x_InputTokens", "x_OutputTokens"} <= set(f.columns)
    assert check(f) == []
    assert f["ServiceCategory"].unique().to_list() == ["AI and Machine Learning"]
    assert f["ChargeCategory"].unique().to_list() == ["Usage"]
    assert (f["BilledCost"] == f["EffectiveCost"]).all() and (f["ListCost"] == f["ContractedCost"]).all()
    assert f["ChargePeriodStart"].dtype == pl.Datetime("us", "UTC")
    assert f["ConsumedUnit"].drop_nulls().unique().sort().to_list() == ["GPU-Hours", "Tokens"]


def test_sums_to_the_report_input_cost(comp):
    f = focus_frame(comp)
    rec = build_report(comp)["reconciliation"]
    assert f["BilledCost"].sum() == pytest.approx(rec["input_cost"], abs=1e-6)
    assert f.filter(pl.col("SubAccountId").is_null())["BilledCost"].sum() == pytest.approx(rec["idle"], abs=1e-6)
    assert f.filter(pl.col("SubAccountId") == "unattributed")["BilledCost"].sum() == \
        pytest.approx(rec["unattributed"], abs=1e-6)
    # One row per (day, tenant, project, model/allocation, category, method): no duplicates.
    keys = ["ChargePeriodStart", "SubAccountId", "x_Project", "ResourceId", "AllocatedResourceId", "x_Category",
            "AllocatedMethodId", "x_IdleCause", "x_UnattributedKey"]
    assert f.select(keys).is_duplicated().sum() == 0


def test_idle_rows_with_their_cause(comp):
    f = focus_frame(comp)
    idle = f.filter(pl.col("x_IdleCause").is_not_null())
    assert idle.height > 0
    assert idle["SubAccountId"].null_count() == idle.height
    assert set(idle["x_IdleCause"].to_list()) == {"no_demand", "maintenance", "quota"}
    assert set(idle["ResourceId"].to_list()) == {"train", "infer"}
    # maintenance on n1 from 20:00: g2 was free then (g1 too), 2 cards x 4 h
    maint = idle.filter((pl.col("x_IdleCause") == "maintenance") & (pl.col("x_Category") == "depreciation"))
    assert maint["PricingQuantity"].sum() == pytest.approx(8.0)
    assert maint["PricingUnit"].to_list() == ["GPU-Hours"]
    idle_report = sum(r["cost"] for r in build_report(comp)["idle"] if r["kind"] == "unallocated")
    assert idle["BilledCost"].sum() == pytest.approx(idle_report, abs=1e-6)


def test_allocation_rows_quantities_and_tags(comp):
    f = focus_frame(comp)
    a1 = f.filter((pl.col("AllocatedResourceId") == "a1") & (pl.col("x_Category") == "depreciation"))
    assert a1.height == 1
    row = a1.row(0, named=True)
    assert (row["ResourceId"], row["ResourceType"], row["SubAccountId"], row["x_Project"]) == \
        ("g1", "GPU", "research", "proj-a")
    assert row["ConsumedQuantity"] == pytest.approx(12.0) and row["ConsumedUnit"] == "GPU-Hours"
    assert row["BilledCost"] == pytest.approx(480.0 / 48 * 12)  # $10 per card-hour of the train pool
    assert row["ListUnitPrice"] == pytest.approx(10.0)
    assert row["AllocatedMethodId"] == "capacity_hours"
    assert row["x_EnergyKWh"] == pytest.approx(12 * 0.4)
    assert json.loads(row["Tags"]) == {"tenant": "research", "project": "proj-a", "model": None, "pool": "train",
                                       "workload": "training"}
    assert json.loads(row["AllocatedTags"])["job_id"] == "j1"
    # the unmapped owner key
    ghost = f.filter(pl.col("AllocatedResourceId") == "a2")
    assert set(ghost["SubAccountId"].to_list()) == {"unattributed"}
    assert set(ghost["x_UnattributedKey"].to_list()) == {"scheduler:acct_ghost"}


def test_recharged_model_rows_carry_tokens(comp):
    f = focus_frame(comp)
    rec = f.filter(pl.col("ServiceName") == "Model Inference")
    assert set(rec["x_Project"].to_list()) == {"proj-x", "proj-y"}
    x = rec.filter(pl.col("x_Project") == "proj-x").row(0, named=True)
    assert (x["x_InputTokens"], x["x_CachedInputTokens"], x["x_OutputTokens"]) == (1000, 500, 400)
    assert x["ConsumedQuantity"] == 1900 and x["ConsumedUnit"] == "Tokens"
    assert x["ResourceId"] == "llama" and x["AllocatedMethodId"].endswith("+recharge_by_tokens")
    assert json.loads(x["Tags"])["model"] == "llama"


def test_direct_and_api_costs(comp):
    f = focus_frame(comp)
    api_row = f.filter(pl.col("x_Category") == "api_fees").row(0, named=True)
    # $12.50 of API fees, summed from its per-day pieces
    assert api_row["BilledCost"] == pytest.approx(12.5)
    assert (api_row["SubAccountId"], api_row["ProviderName"], api_row["ServiceName"]) == \
        ("product", "openai", "Hosted Model APIs")
    assert api_row["AllocatedMethodId"] is None  # a direct cost is not a split allocation
    support = f.filter(pl.col("x_Category") == "support")
    assert support["BilledCost"].sum() == pytest.approx(30.0)


def test_sample_bundle_fleet_week():
    comp = api.run(SAMPLE)
    f = focus_frame(comp)
    rec = build_report(comp)["reconciliation"]
    assert f["BilledCost"].sum() == pytest.approx(rec["input_cost"], abs=1e-6)
    assert check(f) == []
    idle = f.filter(pl.col("x_IdleCause").is_not_null())
    assert idle["BilledCost"].sum() == pytest.approx(rec["idle"], abs=1e-6)
    assert {"no_demand", "maintenance", "degraded_hardware"} <= set(idle["x_IdleCause"].to_list())
    assert f.filter(pl.col("ServiceName") == "Model Inference")["x_OutputTokens"].sum() > 0
    assert f["AllocatedMethodId"].drop_nulls().str.starts_with("mixed").sum() == 0


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_cli_export_focus(tmp_path, suffix):
    bundle_dir = tmp_path / "b"
    bundle_dir.mkdir()
    b = small_bundle()
    for table in b.present:
        from cost_engine.importers import frame_as_text

        frame_as_text(b[table]).write_csv(bundle_dir / f"{table}.csv")
    (bundle_dir / "ailedger.toml").write_text(
        '[period]\nstart = 2026-10-01T00:00:00Z\nend = 2026-10-02T00:00:00Z\n[activity]\nmax_sample_gap_s = 3600\n')
    out = tmp_path / f"focus{suffix}"
    res = CliRunner().invoke(export, ["focus", str(bundle_dir), "--out", str(out)])
    assert res.exit_code == 0, res.output
    back = pl.read_parquet(out) if suffix == ".parquet" else pl.read_csv(out, try_parse_dates=False)
    assert list(back.columns) == list(COLUMNS)
    total = build_report(api.run(bundle_dir))["reconciliation"]["input_cost"]
    assert back["BilledCost"].sum() == pytest.approx(total, abs=1e-6)
    if suffix == ".csv":
        assert back["ChargePeriodStart"][0] == "2026-10-01T00:00:00Z"
    assert f"wrote {out}" in res.output


def test_write_focus_refuses_other_suffixes(comp, tmp_path):
    with pytest.raises(ValueError, match=".csv or .parquet"):
        write_focus(comp, tmp_path / "x.json")
