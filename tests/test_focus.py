"""FOCUS export, by hand: each origin charge (a card's day, a model's serving cost, a cost row)
split into rows that keep its price; idle and unmapped money as unallocated portions."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from cost_engine import api
from cost_engine.engine import compute
from cost_engine.bundle import Bundle
from cost_engine.exporters.focus import Location, check, columns, focus_frame, write_focus
from cost_engine.import_cli import export
from cost_engine.report import build_report
from tests.helpers import make_bundle, make_config, ts

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data" / "fleet-week"


def small_bundle():
    """Two pools, a training job, an inference service with token recharge, an unmapped owner,
    a maintenance window and a queued job (idle causes), shared, direct and API costs, and a
    cost with nothing to spread it by.

    Prices by hand (one UTC day, 2 cards per pool = 48 card-hours each):
    - dep-train $480 / 48 h = $10 per card-hour on g1, g2; dep-infer $240 / 48 h = $5 on g3, g4;
    - net $48 by gpu_hours over the allocated hours a1 12 + a2 4 + s1 24 = 40 h: $1.20 per hour;
    - late-sw $6 on pool train 22:00-24:00, when no train card is allocated: unspread.
    Idle: g1 free 12-20 (no demand, 8 h) and 20-24 (maintenance on n1, 4 h); g2 free 0-6 and
    10-20 (no demand, 16 h) and 20-24 (maintenance, 4 h); g4 free all day, 02-04 while q1 waited
    on quota (2 h), the other 22 h no demand.
    Recharge of llama (s1 on g3) by weighted tokens (input 1, cached 0.1, output 4):
    proj-x 1000 + 50 + 1600 = 2650, proj-y 200 + 400 = 600, of 3250."""
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
            {"cost_id": "late-sw", "category": "software", "amount": 6.0, "start": ts(1, 22), "end": ts(2, 0),
             "pool": "train"},
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


CONFIG = {"activity": {"max_sample_gap_s": 3600}}


@pytest.fixture(scope="module")
def comp():
    return compute(small_bundle(), make_config(**CONFIG))


@pytest.fixture(scope="module")
def frame(comp):
    return focus_frame(comp, version="1.3")


def _ratio(details: str) -> float:
    return json.loads(details)["Elements"][0]["AllocatedRatio"]


def _origin(f: pl.DataFrame, resource: str, category: str) -> pl.DataFrame:
    return f.filter((pl.col("ResourceName") == resource) & (pl.col("x_Category") == category))


def test_card_day_split_between_its_allocation_and_idle_causes(frame):
    """g1's depreciation on the day: 24 h x $10 = $240, held by a1 0-12 ($120, ratio 1/2),
    free 12-20 with no demand ($80, 1/3) and under maintenance 20-24 ($40, 1/6)."""
    g1 = _origin(frame, "n1 GPU 0", "depreciation").sort("BilledCost", descending=True)
    assert g1["BilledCost"].to_list() == pytest.approx([120.0, 80.0, 40.0])
    assert [_ratio(d) for d in g1["AllocatedMethodDetails"]] == pytest.approx([1 / 2, 1 / 3, 1 / 6])
    assert g1["PricingQuantity"].to_list() == pytest.approx([12.0, 8.0, 4.0])
    assert g1["ListUnitPrice"].to_list() == pytest.approx([10.0] * 3)
    assert g1["AllocatedResourceId"].to_list() == ["a1", None, None]  # idle: the unallocated portion
    assert g1["AllocatedResourceName"].to_list() == ["j1", None, None]
    assert g1["x_IdleCause"].to_list() == [None, "no_demand", "maintenance"]
    # The origin's dimensions on every split row: the card, its pool, its tags.
    assert g1["ResourceId"].n_unique() == 1 and set(g1["ResourceType"]) == {"GPU"}
    assert set(g1["SubAccountId"]) == {"train"}
    assert json.loads(g1["Tags"][0]) == {"ailedger/pool": "train", "ailedger/node": "n1"}
    assert g1["Tags"].n_unique() == 1
    assert json.loads(g1["AllocatedTags"][0]) == {"ailedger/tenant": "research", "ailedger/project": "proj-a",
                                                  "ailedger/job": "j1", "ailedger/workload": "training"}
    a1 = json.loads(g1["AllocatedMethodDetails"][0])["Elements"][0]
    assert (a1["UsageUnit"], a1["UsageQuantity"]) == ("GPU-Hours", pytest.approx(12.0))
    assert g1["AllocatedMethodId"].to_list() == ["capacity_hours"] * 3


def test_unmapped_owner_keeps_its_allocation_without_a_project(frame):
    """a2 held g2 06-10 (4 h x $10 = $40 of depreciation, 4 h x $1.20 = $4.80 of network) for
    an owner key no alias maps: allocated to a2, no tenant or project tag, the key in x_."""
    a2 = frame.filter(pl.col("AllocatedResourceId") == "a2").sort("x_Category")
    assert a2.filter(pl.col("x_Category") == "depreciation")["BilledCost"].item() == pytest.approx(40.0)
    assert a2.filter(pl.col("x_Category") == "network")["BilledCost"].item() == pytest.approx(4.8)
    assert set(a2["x_UnattributedKey"]) == {"scheduler:acct_ghost"}
    assert set(a2["SubAccountId"]) == {"train"}  # no `unattributed` placeholder
    assert json.loads(a2["AllocatedTags"][0]) == {"ailedger/job": "j2", "ailedger/workload": "other"}


def test_idle_by_cause_and_the_report(comp, frame):
    """Depreciation of idle time by cause: maintenance 4 h on g1 + 4 h on g2 = 8 h x $10 = $80;
    quota 2 h on g4 x $5 = $10; no demand 8 + 16 h x $10 + 22 h x $5 = $350."""
    dep = frame.filter((pl.col("x_Category") == "depreciation") & pl.col("x_IdleCause").is_not_null())
    by = {r["x_IdleCause"]: r for r in dep.group_by("x_IdleCause").agg(
        pl.col("BilledCost").sum(), pl.col("PricingQuantity").sum()).iter_rows(named=True)}
    assert by["maintenance"]["BilledCost"] == pytest.approx(80.0)
    assert by["maintenance"]["PricingQuantity"] == pytest.approx(8.0)
    assert (by["quota"]["BilledCost"], by["quota"]["PricingQuantity"]) == (pytest.approx(10.0), pytest.approx(2.0))
    assert by["no_demand"]["BilledCost"] == pytest.approx(350.0)
    rec = build_report(comp)["reconciliation"]
    idle = frame.filter(pl.col("x_IdleCause").is_not_null())
    assert idle["BilledCost"].sum() == pytest.approx(rec["idle"], abs=1e-9)
    assert idle["AllocatedResourceId"].null_count() == idle.height


def test_model_serving_cost_recharged_to_its_callers(frame):
    """llama's depreciation: s1 held g3 all day, 24 h x $5 = $120, recharged by weighted tokens:
    proj-x 120 x 2650/3250 = $97.846..., proj-y 120 x 600/3250 = $22.153...; the origin's
    24 GPU-hours split the same way, at $5 a GPU-hour on both rows."""
    llama = _origin(frame, "llama", "depreciation").sort("AllocatedResourceId")
    assert llama["AllocatedResourceId"].to_list() == ["proj-x", "proj-y"]
    assert llama["BilledCost"].to_list() == pytest.approx([120 * 2650 / 3250, 120 * 600 / 3250])
    assert llama["PricingQuantity"].to_list() == pytest.approx([24 * 2650 / 3250, 24 * 600 / 3250])
    assert llama["ListUnitPrice"].to_list() == pytest.approx([5.0, 5.0])
    assert set(llama["ServiceName"]) == {"Model Inference"} and set(llama["SubAccountId"]) == {"infer"}
    assert llama["AllocatedMethodId"].to_list() == ["capacity_hours+recharge_by_tokens"] * 2
    x = llama.row(0, named=True)
    assert (x["x_InputTokens"], x["x_CachedInputTokens"], x["x_OutputTokens"]) == (1000, 500, 400)
    assert json.loads(x["AllocatedTags"]) == {"ailedger/tenant": "product", "ailedger/project": "proj-x"}
    assert json.loads(x["Tags"]) == {"ailedger/pool": "infer", "ailedger/model": "llama"}


def test_direct_and_api_costs_are_not_splits(frame):
    """support-a $30 and openai:1 $12.50 belong to one project each: no Allocated* columns,
    priced per hour of their 24 h term: $1.25 and $0.520833 an hour."""
    support = frame.filter(pl.col("ResourceId") == "support-a").row(0, named=True)
    api_row = frame.filter(pl.col("ResourceId") == "openai:1").row(0, named=True)
    for row, cost in ((support, 30.0), (api_row, 12.5)):
        assert row["BilledCost"] == pytest.approx(cost)
        assert (row["PricingQuantity"], row["PricingUnit"]) == (pytest.approx(24.0), "Hours")
        assert row["ListUnitPrice"] == pytest.approx(cost / 24)
        assert all(row[c] is None for c in ("AllocatedMethodId", "AllocatedMethodDetails", "AllocatedResourceId",
                                             "AllocatedTags"))
    assert json.loads(support["Tags"]) == {"ailedger/tenant": "research", "ailedger/project": "proj-a"}
    assert (api_row["ProviderName"], api_row["PublisherName"], api_row["HostProviderName"]) == \
        ("Internal GPU fleet", "openai", "openai")
    assert (api_row["ServiceName"], api_row["ResourceType"]) == ("Hosted Model APIs", "Hosted Model API")
    assert support["HostProviderName"] == "Not Applicable"  # a support contract runs on no infrastructure


def test_cost_with_nothing_to_spread_it_is_the_unallocated_portion(frame):
    """late-sw $6 over 22:00-24:00 found no allocated train card: one row, ratio 1, nothing
    allocated, charged over its own 2 h term at $3 an hour."""
    row = frame.filter(pl.col("ResourceId") == "late-sw").row(0, named=True)
    assert row["BilledCost"] == pytest.approx(6.0)
    assert (row["x_IdleCause"], row["AllocatedMethodId"], row["AllocatedResourceId"]) == ("unspread", "gpu_hours", None)
    assert _ratio(row["AllocatedMethodDetails"]) == 1.0
    assert (row["ChargePeriodStart"].hour, row["ChargePeriodEnd"].hour) == (22, 0)
    assert (row["PricingQuantity"], row["ListUnitPrice"]) == (pytest.approx(2.0), pytest.approx(3.0))


def test_project_driver_even_split():
    """network $48 spread evenly: 4 projects used the fleet (proj-a, proj-svc by card-time,
    proj-x, proj-y by requests) -> $12 each, ratio 1/4, a quarter of the 24 h term at $2 an hour."""
    comp = compute(small_bundle(), make_config(**CONFIG, allocation={"drivers": {"network": "even"}}))
    net = focus_frame(comp, version="1.3").filter(pl.col("ResourceId") == "net").sort("AllocatedResourceId")
    assert net["AllocatedResourceId"].to_list() == ["proj-a", "proj-svc", "proj-x", "proj-y"]
    assert net["BilledCost"].to_list() == pytest.approx([12.0] * 4)
    assert [_ratio(d) for d in net["AllocatedMethodDetails"]] == pytest.approx([0.25] * 4)
    assert net["PricingQuantity"].to_list() == pytest.approx([6.0] * 4)
    assert net["ListUnitPrice"].to_list() == pytest.approx([2.0] * 4)
    assert set(net["AllocatedMethodId"]) == {"even"}


def test_idle_charged_back_to_the_pool():
    """idle = proportional: train's idle depreciation, (12 + 20) h x $10 = $320, charged back by
    allocated GPU-hours (a1 12, a2 4 of 16): a1 $240, a2 $80, at $20 an allocated GPU-hour."""
    comp = compute(small_bundle(), make_config(**CONFIG, allocation={"idle": "proportional"}))
    f = focus_frame(comp, version="1.3")
    pool = f.filter((pl.col("ResourceType") == "GPU Pool") & (pl.col("x_Category") == "depreciation")
                    & (pl.col("ResourceId") == "train")).sort("AllocatedResourceId")
    assert pool["AllocatedResourceId"].to_list() == ["a1", "a2"]
    assert pool["BilledCost"].to_list() == pytest.approx([240.0, 80.0])
    assert pool["PricingQuantity"].to_list() == pytest.approx([12.0, 4.0])
    assert pool["ListUnitPrice"].to_list() == pytest.approx([20.0, 20.0])
    assert set(pool["AllocatedMethodId"]) == {"capacity_hours+idle_chargeback"}
    assert f["BilledCost"].sum() == pytest.approx(build_report(comp)["reconciliation"]["input_cost"], abs=1e-9)
    assert f["x_IdleCause"].drop_nulls().to_list() == []  # no idle line left: all charged back


def test_sums_to_the_report_input_cost(comp, frame):
    rec = build_report(comp)["reconciliation"]
    assert frame["BilledCost"].sum() == pytest.approx(rec["input_cost"], abs=1e-9)
    assert check(frame, "1.3") == [] and check(focus_frame(comp), "1.2") == []


def test_versions_hold_the_same_rows(comp, frame):
    """1.2 keeps the 1.3 allocation columns under x_ and drops the 1.3 provider columns."""
    f12 = focus_frame(comp, version="1.2")
    assert "AllocatedMethodId" not in f12.columns and "ServiceProviderName" not in f12.columns
    assert f12["x_AllocatedMethodDetails"].to_list() == frame["AllocatedMethodDetails"].to_list()
    assert f12["BilledCost"].to_list() == frame["BilledCost"].to_list()
    with pytest.raises(ValueError, match="1.2, 1.3"):
        focus_frame(comp, version="1.4")


def test_location_only_on_infrastructure_rows(comp):
    f = focus_frame(comp, location=Location(region_id="eu-central", availability_zone="fra-1"))
    cards = f.filter(pl.col("ResourceType") == "GPU")
    assert set(cards["RegionId"]) == {"eu-central"} and set(cards["RegionName"]) == {"eu-central"}
    assert set(cards["AvailabilityZone"]) == {"fra-1"}
    direct = f.filter(pl.col("ResourceId") == "support-a")
    assert direct["RegionId"].to_list() == [None] and direct["AvailabilityZone"].to_list() == [None]


def test_sample_bundle_card_names_and_total():
    """The sample fleet: BilledCost 9,767.980897 USD, the report's input cost; every card row
    named by node, index, model and MIG profile, never by its UUID."""
    comp = api.run(SAMPLE)
    f = focus_frame(comp, version="1.3")
    assert round(f["BilledCost"].sum(), 6) == 9767.980897
    assert f["BilledCost"].sum() == pytest.approx(build_report(comp)["reconciliation"]["input_cost"], abs=1e-6)
    cards = f.filter(pl.col("ResourceType").str.starts_with("GPU") & (pl.col("ResourceType") != "GPU Pool"))
    assert (cards["ResourceName"] == cards["ResourceId"]).sum() == 0
    names = set(cards["ResourceName"])
    assert {"h100-node-01 GPU 0 (H100-SXM-80GB)", "a100-mig-node-01 MIG 0 (A100-SXM-80GB MIG 3g.40gb)",
            "a100-mig-node-01 MIG 3 (A100-SXM-80GB MIG 1g.10gb)"} <= names
    assert set(cards.filter(pl.col("ResourceId").str.starts_with("MIG-"))["ResourceType"]) == {"GPU MIG Instance"}
    assert "unattributed" not in set(f["SubAccountId"].drop_nulls())


def _bundle_dir(tmp_path: Path) -> Path:
    from cost_engine.importers import frame_as_text

    bundle_dir = tmp_path / "b"
    bundle_dir.mkdir()
    b = small_bundle()
    for table in b.present:
        frame_as_text(b[table]).write_csv(bundle_dir / f"{table}.csv")
    (bundle_dir / "ailedger.toml").write_text(
        '[period]\nstart = 2026-10-01T00:00:00Z\nend = 2026-10-02T00:00:00Z\n[activity]\nmax_sample_gap_s = 3600\n')
    return bundle_dir


@pytest.mark.parametrize("version", ["1.2", "1.3"])
@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_cli_export_focus(tmp_path, suffix, version):
    bundle_dir = _bundle_dir(tmp_path)
    out = tmp_path / f"focus{suffix}"
    res = CliRunner().invoke(export, ["focus", str(bundle_dir), "--out", str(out), "--focus-version", version,
                                      "--region", "eu-central", "--availability-zone", "fra-1"])
    assert res.exit_code == 0, res.output
    back = pl.read_parquet(out) if suffix == ".parquet" else pl.read_csv(out, infer_schema_length=0)
    assert list(back.columns) == list(columns(version))
    total = build_report(api.run(bundle_dir))["reconciliation"]["input_cost"]
    assert back["BilledCost"].cast(pl.Float64).sum() == pytest.approx(total, abs=1e-6)
    assert "eu-central" in back["RegionId"].to_list()
    if suffix == ".csv":
        assert back["ChargePeriodStart"][0] == "2026-10-01T00:00:00Z"
    assert f"wrote {out}: FOCUS {version}" in res.output


def test_cli_rejects_region_name_alone(tmp_path):
    res = CliRunner().invoke(export, ["focus", str(_bundle_dir(tmp_path)), "--out", str(tmp_path / "f.csv"),
                                      "--region-name", "Frankfurt"])
    assert res.exit_code != 0 and "--region-name needs --region" in res.output


def test_csv_cells_guarded_against_formulas(tmp_path):
    """A project named like a spreadsheet formula is written with the exporters' apostrophe."""
    b = small_bundle()
    owners = b["owners"].with_columns(pl.col("project").replace({"proj-a": "=HYPERLINK(1)"}))
    aliases = b["aliases"].with_columns(pl.col("project").replace({"proj-a": "=HYPERLINK(1)"}))
    b = Bundle.from_frames({**{t: b[t] for t in b.present}, "owners": owners, "aliases": aliases})
    comp = compute(b, make_config(**CONFIG))
    write_focus(comp, tmp_path / "f.csv")
    back = pl.read_csv(tmp_path / "f.csv", infer_schema_length=0)
    assert "'=HYPERLINK(1)" in back["x_Project"].to_list()
    assert not back["x_Project"].drop_nulls().str.starts_with("=").any()


def test_write_focus_refuses_other_suffixes(comp, tmp_path):
    with pytest.raises(ValueError, match=".csv or .parquet"):
        write_focus(comp, tmp_path / "x.json")
