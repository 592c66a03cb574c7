"""The two-month sample bundle with planted changes, explained by `ailedger diff` end to end: the
output doubling lands in output tokens per request on rlhf's tenant, the new tenant is its own
line, the dearer electricity raises the power price, the scale-out cards show in the records."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cost_engine import compare, diff  # noqa: E402
from cost_engine.cli import main  # noqa: E402
from sample_data.generate import main as generate_main  # noqa: E402
from sample_data.planted import OUTPUT_FACTOR, TARIFF_FACTOR, generate_two_months  # noqa: E402


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    # Small and coarse (8 cards, 5-minute samples: the default max_sample_gap_s) but every change.
    return generate_two_months(tmp_path_factory.mktemp("two") / "b", gpus=8, seed=7, start="2026-10-14",
                               telemetry_interval_s=300, requests_fmt="parquet")


@pytest.fixture(scope="module")
def comps(bundle):
    from cost_engine.config import load_config

    cfg = load_config(bundle / "ailedger.toml")
    return compare.run_periods(bundle, cfg, *compare.parse_spans(cfg, "2026-10", "2026-11"))


def cli(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def test_planted_manifest_and_tables(bundle):
    """Two UTC calendar months from --start's month; planted.json names each change."""
    m = json.loads((bundle / "planted.json").read_text())
    assert (m["base"], m["period"], m["split"]) == ("2026-10", "2026-11", "2026-11-01T00:00:00Z")
    assert [c["what"] for c in m["changes"]] == ["output_tokens_per_request", "scale_out", "electricity_price",
                                                 "new_tenant"]
    assert 'timezone = "UTC"' in (bundle / "ailedger.toml").read_text()
    assert "end = 2026-12-01T00:00:00Z" in (bundle / "ailedger.toml").read_text()
    tariffs = pl.read_csv(bundle / "tariffs.csv")
    oct_, nov = tariffs["price_per_kwh"][:24].to_list(), tariffs["price_per_kwh"][31 * 24:32 * 24].to_list()
    # The same hourly bands (Thursday 1 October and Sunday 1 November), 40 % dearer.
    assert nov == pytest.approx([round(p * TARIFF_FACTOR, 4) for p in oct_])
    assert m["changes"][2]["tariff_rows"] == 30 * 24
    inv = pl.read_csv(bundle / "inventory.csv")
    burst = inv.filter(pl.col("node") == "a100-infer-burst-01")
    assert burst.height == 2 and burst["in_service_start"].to_list() == ["2026-11-01T00:00:00Z"] * 2


def test_output_doubling_keeps_the_requests(bundle, tmp_path):
    """The same fleet without the planted changes: rlhf's llama rows of November have the same ids
    and request counts, and exactly twice the output tokens."""
    from sample_data.generate import generate_bundle

    plain = generate_bundle(tmp_path / "plain", gpus=8, days=61, seed=7, start="2026-10-01",
                            telemetry_interval_s=300, requests_fmt="parquet")
    hit = (pl.col("owner") == "key-rlhf-gen") & (pl.col("model") == "llama-3.1-70b") & (
        pl.col("ts") >= pl.datetime(2026, 11, 1, time_zone="UTC"))
    a = pl.read_parquet(plain / "requests.parquet").filter(hit).sort("request_id")
    b = pl.read_parquet(bundle / "requests.parquet").filter(hit).sort("request_id")
    assert a.height > 0 and a["request_id"].equals(b["request_id"]) and a["requests"].equals(b["requests"])
    assert (b["output_tokens"] == a["output_tokens"] * OUTPUT_FACTOR).all()
    assert a["input_tokens"].equals(b["input_tokens"])


def test_diff_explains_the_planted_changes(comps):
    a, b = comps
    assert a.rejected.height == 0 and b.rejected.height == 0
    d = compare.compare_periods(a, b, by="tenant")
    assert abs(d.residual) <= 1e-9 * max(d.base_total, d.new_total)
    e = {r["effect"]: r["value"] for r in d.effects.iter_rows(named=True)}
    # Seed 000's story: the largest increase is output tokens per request, carried by research (rlhf).
    assert e["output_per_request"] == max(v for v in e.values() if v is not None) > 0
    research = d.owner("research")
    assert research["output_per_request"] == pytest.approx(e["output_per_request"], rel=1e-3)
    # The new tenant is its own line, with its whole November cost.
    partner = d.owner("partner")
    assert partner["status"] == "new" and partner["base_cost"] == 0
    assert e["new"] == pytest.approx(partner["new_cost"]) and partner["new_cost"] > 0
    assert "partner" in d.effects.filter(pl.col("effect") == "new")["note"][0]
    # Electricity 40 % dearer: the power price per allocated GPU-hour rose.
    power = d.elements.filter((pl.col("chain") == "gpu") & (pl.col("category") == "power"))
    assert float(power["price"].sum()) > 0
    # By project the same output effect sits on rlhf.
    dp = compare.compare_periods(a, b, by="project")
    assert dp.owner("rlhf")["output_per_request"] == pytest.approx(research["output_per_request"], rel=1e-3)


def test_scale_out_cards_are_in_the_records(comps, bundle):
    """llama's serving allocations: the two burst pods are among the period's records, not the base's."""
    a, b = comps
    pb, pn = compare.compare_records(a, b, None, bundle, by="model", key="llama-3.1-70b", table="allocations",
                                     page_size=200)
    assert "alloc-burst-01" in pn.rows["allocation_id"].to_list()
    assert "alloc-burst-01" not in pb.rows["allocation_id"].to_list()


def test_cli_text_json_owner_and_chart(bundle, tmp_path):
    code, out = cli("diff", str(bundle), "--base", "2026-10", "--period", "2026-11", "--json")
    assert code == 0, out
    j = json.loads(out)
    total = sum(r["value"] or 0 for r in j["effects"])
    assert total == pytest.approx(j["change"], abs=1e-9 * j["new_total"])
    assert j["period"]["start"].startswith("2026-11-01T00:00:00")
    code, out = cli("diff", str(bundle), "--base", "2026-10-01..2026-10-31", "--period", "2026-11", "--by", "project",
                    "--owner", "rlhf", "--chart", str(tmp_path / "w.html"))
    assert code == 0, out
    assert "Output tokens per request" in out and "New projects in the period" in out and "partner-pilot" in out
    assert "project rlhf:" in out and "llama-3.1-70b · output tokens" in out
    assert "requests behind it:" in out and "allocations behind it:" in out
    html = (tmp_path / "w.html").read_text()
    assert "waterfall" in html and "Output tokens per request" in html


def test_cli_errors_name_the_option(bundle):
    code, out = cli("diff", str(bundle), "--base", "last month", "--period", "2026-11")
    assert code == 2 and "--base" in out and "last month" in out
    code, out = cli("diff", str(bundle), "--base", "2026-10", "--period", "2026-11-30..2026-11-01")
    assert code == 2 and "--period" in out and "not after the start" in out
    code, out = cli("diff", str(bundle), "--base", "2026-10", "--period", "2026-11", "--owner", "nobody")
    assert code == 2 and "no tenant 'nobody'" in out
    code, out = cli("diff", str(bundle), "--base", "2026-10", "--period", "2026-11", "--chart", "w.txt")
    assert code == 2 and ".html, .png or .svg" in out


def test_generator_option(tmp_path, capsys):
    """`generate.py --two-months` dispatches to the planted bundle (days follow the months)."""
    out = tmp_path / "g"
    assert generate_main(["--out", str(out), "--two-months", "--gpus", "8", "--start", "2026-02-10",
                          "--telemetry-interval", "3600"]) == 0
    m = json.loads((out / "planted.json").read_text())
    assert (m["base"], m["period"]) == ("2026-02", "2026-03")
    assert json.loads((out / "anomalies.json").read_text())["generator"]["days"] == 28 + 31
    assert diff.parse_span(m["period"], "UTC")[0].isoformat() == "2026-03-01T00:00:00+00:00"


def test_effect_scopes_narrow_the_records(comps, bundle):
    """Where an owner's effect sits, and its records only: research's output effect is nearly all
    on llama-3.1-70b (its requests to llama: a part of all its requests, which also go to qwen);
    its volume effect sits on pools, and the allocations narrowed to the largest are on that
    pool's cards. The scopes of an effect add up to the owner's effect."""
    a, b = comps
    d = compare.compare_periods(a, b, by="tenant")
    research = d.owner("research")
    scopes = compare.effect_scopes(d, "research", "output_per_request")
    top = scopes.row(0, named=True)
    assert (top["scope"], top["model"], top["pool"]) == ("model llama-3.1-70b", "llama-3.1-70b", None)
    assert top["value"] == pytest.approx(research["output_per_request"], rel=1e-3)
    assert float(scopes["value"].sum()) == pytest.approx(research["output_per_request"], rel=1e-9)
    _, every = compare.compare_records(a, b, None, bundle, by="tenant", key="research", table="requests",
                                       page_size=1)
    _, llama = compare.compare_records(a, b, None, bundle, by="tenant", key="research", table="requests",
                                       page_size=500, scope=top)
    assert 0 < llama.total < every.total
    assert set(llama.rows["model"].to_list()) == {"llama-3.1-70b"}

    scopes = compare.effect_scopes(d, "research", "volume")
    assert float(scopes["value"].sum()) == pytest.approx(research["volume"], rel=1e-9)
    pool = scopes.row(0, named=True)
    assert pool["scope"] == f"pool {pool['pool']} · {pool['accelerator']}" and pool["model"] is None
    pb, pn = compare.compare_records(a, b, None, bundle, by="tenant", key="research", table="allocations",
                                     page_size=500, scope=pool)
    cards = pl.read_csv(bundle / "inventory.csv").filter(
        (pl.col("pool") == pool["pool"]) & (pl.col("accelerator") == pool["accelerator"]))["gpu_id"].to_list()
    assert pb.total > 0 and pn.total > 0
    assert set(pb.rows["gpu_id"].to_list()) | set(pn.rows["gpu_id"].to_list()) <= set(cards)


def test_cli_owner_within(bundle):
    """--within narrows --owner's records to where an effect sits (fewer requests than all of
    research's, each to llama); a place carrying none of its effects is an error listing them."""
    args = ["diff", str(bundle), "--base", "2026-10", "--period", "2026-11", "--owner", "research", "--json"]
    code, out = cli(*args)
    assert code == 0, out
    every = json.loads(out)["records"]["requests"]["period"]["total"]
    code, out = cli(*args, "--within", "model llama-3.1-70b")
    assert code == 0, out
    j = json.loads(out)
    assert j["within"] == "model llama-3.1-70b" and 0 < j["records"]["requests"]["period"]["total"] < every
    code, out = cli(*args[:-1])
    assert code == 0 and "narrow the records with --within: " in out and "'model llama-3.1-70b'" in out
    code, out = cli(*args[:-1], "--within", "model nope")
    assert code == 2 and "--within 'model nope'" in out and "'model llama-3.1-70b'" in out
    code, out = cli("diff", str(bundle), "--base", "2026-10", "--period", "2026-11", "--within", "model m")
    assert code == 2 and "give --owner too" in out


def test_records_of_the_owner_no_value_names(comps, bundle):
    """By model, `(none)` gathers the allocations that serve no model (training, notebooks...):
    its records are those allocations, each without a model in allocations.csv, and none of the
    serving ones."""
    a, b = comps
    d = compare.compare_periods(a, b, by="model")
    assert d.owner(diff.NONE_KEY)["base_cost"] > 0
    pb, pn = compare.compare_records(a, b, None, bundle, by="model", key=diff.NONE_KEY, table="allocations",
                                     page_size=500)
    allocs = pl.read_csv(bundle / "allocations.csv")
    no_model = set(allocs.filter(pl.col("model").is_null())["allocation_id"].to_list())
    ids = set(pb.rows["allocation_id"].to_list()) | set(pn.rows["allocation_id"].to_list())
    assert pb.total > 0 and pn.total > 0 and ids <= no_model
    _, requests = compare.compare_records(a, b, None, bundle, by="model", key=diff.NONE_KEY, table="requests")
    assert requests.total == 0  # every request names its model
