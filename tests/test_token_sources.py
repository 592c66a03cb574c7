"""Two request sources counting one model's hours are billed once (issue 38, item 3): the
preferred source (validation.token_source_order, else gateways before model servers) is
billed, the other is a reconciliation check with its difference, in the report JSON, the CLI
text and, without a configured choice, the gaps. Figures by hand in each docstring."""

from __future__ import annotations

import polars as pl
import pytest

from cost_engine import store
from cost_engine.cli import render_summary
from cost_engine.config import ConfigError, parse_config
from cost_engine.engine import compute
from cost_engine.ledger import resolve_period
from cost_engine.report import build_report
from cost_engine.token_sources import coverage, merge, plan, rank
from tests.helpers import DAY0, DAY1, make_config, ts
from tests.test_energy_tokens import served_model

# Model m, served by svc on g0 all day ($1/h: $24). LiteLLM logs two calls in hours 1 and 2;
# vLLM counters of the same server give hourly buckets [01, 02), [02, 03) and one at [05, 06),
# when the gateway saw nothing (a call that bypassed it).
REQS = [
    {"request_id": "g1", "ts": ts(1, 1.5), "owner": "A1", "source": "litellm", "model": "m",
     "input_tokens": 1000, "output_tokens": 600},
    {"request_id": "g2", "ts": ts(1, 2.5), "owner": "B1", "source": "litellm", "model": "m",
     "input_tokens": 500, "output_tokens": 400},
    {"request_id": "v1", "ts": ts(1, 1), "end": ts(1, 2), "owner": "svc", "source": "kubernetes", "model": "m",
     "input_tokens": 1100, "output_tokens": 650, "requests": 1},
    {"request_id": "v2", "ts": ts(1, 2), "end": ts(1, 3), "owner": "svc", "source": "kubernetes", "model": "m",
     "input_tokens": 500, "output_tokens": 420, "requests": 1},
    {"request_id": "v3", "ts": ts(1, 5), "end": ts(1, 6), "owner": "svc", "source": "kubernetes", "model": "m",
     "input_tokens": 70, "output_tokens": 30, "requests": 1},
]


def test_gateway_billed_vllm_kept_as_a_check_by_default():
    """Overlap: hours [01, 03), where both count m. Default order: litellm (a gateway) billed.

    litellm there: 1000 + 500 = 1500 in, 600 + 400 = 1000 out: 2500 tokens.
    vllm there (check): v1 + v2 = 1600 in, 1070 out: 2670 tokens, difference 2670 - 2500 = +170.
    Billed output = litellm's 1000 + v3's 30 (no gateway in hour 5) = 1030, not 2100; input
    1500 + 70 = 1570. The $24 splits by token weights (no phase times): input 1.0 x 1570 = 1570,
    output 4.0 x 1030 = 4120, so $/1M output tokens = 24 x 4120 / 5690 / 1030 x 1e6 = 16,871.70
    (counted twice it was 24 x 8400 / 11570 / 2100 x 1e6 = 8,297.32).
    No order configured: the gaps name the overlap.
    """
    rep = build_report(compute(served_model(REQS), make_config()))
    m = {r["model"]: r for r in rep["by_model"]}["m"]
    assert (m["input_tokens"], m["output_tokens"]) == (1570, 1030)
    assert m["cost"] == pytest.approx(24.0)
    assert m["cost_per_million_output_tokens"] == pytest.approx(24 * 4120 / 5690 / 1030 * 1e6)
    got = [(r["source"], r["billed"], r["start"], r["end"], r["input_tokens"], r["output_tokens"], r["tokens"],
            r["difference_tokens"]) for r in rep["token_reconciliation"]]
    assert got == [
        ("litellm", True, "2026-10-01T01:00:00Z", "2026-10-01T03:00:00Z", 1500, 1000, 2500, None),
        ("kubernetes", False, "2026-10-01T01:00:00Z", "2026-10-01T03:00:00Z", 1600, 1070, 2670, 170),
    ]
    gap = [g["detail"] for g in rep["gaps"] if g["what"] == "token sources overlap"]
    assert gap == ["m, 2026-10-01 01:00Z to 2026-10-01 03:00Z: litellm billed (2,500 tokens), kubernetes kept as a "
                   "check (2,670 tokens, difference +170) by the default order; set validation.token_source_order "
                   "to choose"]
    text = render_summary(rep)
    assert "token sources counting the same hours" in text
    assert "kubernetes   check           2,670 tokens (1,070 out)   difference +170" in text


def test_configured_order_bills_the_counters_and_names_no_gap():
    """token_source_order = ["kubernetes"]: vLLM billed where it is present (hours 1, 2 and 5),
    litellm a check in [01, 03): difference 2500 - 2670 = -170.
    Billed output = 650 + 420 + 30 = 1100; input 1100 + 500 + 70 = 1670. No gap: the user chose."""
    rep = build_report(compute(served_model(REQS), make_config(validation={"token_source_order": ["kubernetes"]})))
    m = {r["model"]: r for r in rep["by_model"]}["m"]
    assert (m["input_tokens"], m["output_tokens"]) == (1670, 1100)
    checks = [(r["source"], r["difference_tokens"]) for r in rep["token_reconciliation"] if not r["billed"]]
    assert checks == [("litellm", -170)]
    assert not [g for g in rep["gaps"] if g["what"] == "token sources overlap"]


def test_add_bills_every_source_and_says_so():
    """token_overlap = "add" (two gateways counting different calls): 1000 + 1100 = 2100 output
    tokens billed; the overlap is still named."""
    cfg = make_config(validation={"token_overlap": "add", "token_source_order": ["litellm"]})
    rep = build_report(compute(served_model(REQS), cfg))
    assert {r["model"]: r for r in rep["by_model"]}["m"]["output_tokens"] == 2100
    assert all(r["billed"] for r in rep["token_reconciliation"])
    gap = [g["detail"] for g in rep["gaps"] if g["what"] == "token sources overlap"]
    assert gap == ["m, 2026-10-01 01:00Z to 2026-10-01 03:00Z: kubernetes, litellm all billed (5,170 tokens; "
                   "validation.token_overlap = add)"]


def test_sources_in_adjacent_hours_and_other_models_do_not_overlap():
    """litellm in hour 0 only, vLLM from 01:00: touching, not overlapping; a second model n with
    one source: nothing to reconcile. Output 600 + 650 + 5 = 1255, all billed."""
    reqs = [{**REQS[0], "ts": ts(1, 0.5)}, REQS[2],
            {"request_id": "n1", "ts": ts(1, 1.5), "owner": "A1", "source": "otel", "model": "n",
             "input_tokens": 1, "output_tokens": 5}]
    comp = compute(served_model(reqs), make_config())
    assert comp.token_reconciliation.height == 0
    assert int(comp.request_summary["output_tokens"].sum()) == 1255


def test_a_bucket_partly_in_the_preferred_hours_is_billed_whole_and_named():
    """litellm logs one call at 02:15 (100 output tokens): hour [02, 03) is its. vLLM buckets:
    [01:30, 02:30) with 40 (half in that hour: billed whole, named) and [02:30, 02:45) with 7
    (all in it: a check). Billed output = 100 + 40 = 140; the check's difference is
    7 - 140 = -133; one bucket is counted in partly_shadowed and in the gaps."""
    def row(rid, at, out, source="kubernetes", end=None):
        return {"request_id": rid, "ts": ts(1, at), "owner": "svc", "source": source, "model": "m",
                "input_tokens": 0, "output_tokens": out, **({"end": ts(1, end)} if end else {})}
    reqs = [row("g", 2.25, 100, "litellm"), row("va", 1.5, 40, end=2.5), row("vb", 2.5, 7, end=2.75)]
    rep = build_report(compute(served_model(reqs), make_config()))
    assert {r["model"]: r for r in rep["by_model"]}["m"]["output_tokens"] == 140
    got = [(r["source"], r["billed"], r["start"], r["tokens"], r["difference_tokens"], r["partly_shadowed"])
           for r in rep["token_reconciliation"]]
    assert got == [("kubernetes", True, "2026-10-01T02:00:00Z", 40, None, 1),
                   ("litellm", True, "2026-10-01T02:00:00Z", 100, None, 0),
                   ("kubernetes", False, "2026-10-01T02:00:00Z", 7, -133, 0)]
    assert ("1 usage buckets reach past the hours a preferred source covers: billed whole, so those hours may "
            "count twice") in [g["detail"] for g in rep["gaps"]]


def test_store_finds_the_same_overlap_as_the_bundle(tmp_path):
    """The requests left in a store: the coverage comes from DuckDB (store.request_coverage), the
    reconciliation and billed tokens are those of the bundle (output 1030, difference +170)."""
    db = tmp_path / "s.duckdb"
    store.ingest(db, served_model(REQS))
    cov_store = store.request_coverage(db, DAY0, DAY1).sort("source", "h0")
    b = store.load_bundle(db, held=("requests",))
    cfg = make_config()
    assert cov_store.equals(coverage(served_model(REQS)["requests"], cfg_period(cfg)).sort("source", "h0"))
    rep = build_report(compute(b, cfg))
    assert {r["model"]: r for r in rep["by_model"]}["m"]["output_tokens"] == 1030
    assert [r["difference_tokens"] for r in rep["token_reconciliation"]] == [None, 170]


def cfg_period(cfg):
    return resolve_period(cfg, pl.DataFrame())


def test_the_sweep_merges_and_ranks():
    """Hours [0,2) and [2,3) of one source merge (they touch) to [0,3); [5,6) stays apart.
    Ranks: configured first, then gateway, litellm, openai, otel, others A-Z, vllm, kubernetes."""
    f = pl.DataFrame({"model": ["m"] * 3, "source": ["a"] * 3, "h0": [0, 2, 5], "h1": [2, 3, 6]})
    assert merge(f, ["model", "source"]).select("h0", "h1").rows() == [(0, 3), (5, 6)]
    assert rank(["kubernetes", "zeta", "litellm", "alpha", "vllm"], None) == {
        "litellm": 0, "alpha": 1, "zeta": 2, "vllm": 3, "kubernetes": 4}
    assert rank(["kubernetes", "litellm"], ("kubernetes",)) == {"kubernetes": 0, "litellm": 1}
    # Three sources over [0, 4), [2, 6), [3, 5): two or more active in [2, 5).
    cov = pl.DataFrame({"model": ["m"] * 3, "source": ["litellm", "kubernetes", "otel"], "h0": [0, 2, 3],
                        "h1": [4, 6, 5]})
    p = plan(cov, parse_config({}), cfg_period(make_config()))
    assert p.overlaps.select("h0", "h1").rows() == [(2, 5)]
    # kubernetes (last) is shaded by litellm and otel: [0, 5); otel by litellm: [0, 4).
    assert sorted(p.shadows.select("source", "h0", "h1").rows()) == [("kubernetes", 0, 5), ("otel", 0, 4)]


def test_token_source_order_is_validated():
    with pytest.raises(ConfigError, match="token_source_order: .*listed twice"):
        parse_config({"validation": {"token_source_order": ["litellm", "litellm"]}})
    with pytest.raises(ConfigError, match="token_overlap"):
        parse_config({"validation": {"token_overlap": "sum"}})
