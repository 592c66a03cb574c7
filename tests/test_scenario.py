"""Scenario planner (issue 7): seed formulas, hand-computed options and break-even, properties, CLI and page."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cost_engine import scenario as S
from cost_engine.scenario_cli import scenario as scenario_cmd

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_data" / "scenario.toml"


# ---------------------------------------------------------------------------
# Seed formulas
# ---------------------------------------------------------------------------


def test_seed002_system_a_and_b():
    """System A: $2 / (2,000 tok/s x 3,600 s) x 1e6 = 2 / 7.2e6 x 1e6 = $0.27777... ~ $0.28 per 1M output tokens.
    System B: $3 / (4,000 x 3,600) x 1e6 = 3 / 14.4e6 x 1e6 = $0.208333... ~ $0.21.
    """
    a = S.cost_per_million_tokens(2.0, 2000)
    b = S.cost_per_million_tokens(3.0, 4000)
    assert a == pytest.approx(0.2777777778, rel=1e-9)
    assert b == pytest.approx(0.2083333333, rel=1e-9)
    assert round(a, 2) == 0.28 and round(b, 2) == 0.21
    assert b < a  # 50 % dearer per GPU-hour, cheaper per token


def test_seed002_utilization_table():
    """$48,000 / (1.2e9 x u) x 1e6:
    30 %: 48,000 / 360e6 x 1e6 = 133.333...;  50 %: 48,000 / 600e6 x 1e6 = 80.00;
    70 %: 48,000 / 840e6 x 1e6 = 57.142857;   85 %: 48,000 / 1.02e9 x 1e6 = 47.058824.
    """
    rows = S.utilization_table(48_000, 1.2e9, (0.30, 0.50, 0.70, 0.85))
    assert [r.useful_tokens for r in rows] == pytest.approx([360e6, 600e6, 840e6, 1.02e9])
    assert [round(r.cost_per_million, 2) for r in rows] == [133.33, 80.00, 57.14, 47.06]
    assert S.fixed_cost_per_million(48_000, 1.2e9, 0.5) == pytest.approx(80.0)


def test_seed003_unitcost_table():
    """unitcost.go: 8 cards, $3.20/GPU-hour, 2,500 tok/s per card, 120 W idle, 650 W peak, server 1.3, PUE 1.2.
    Per hour: tps = 8 x 2,500 x occ = 20,000 occ; cost = 8 x 3.20 / (tps x 3,600) x 1e6 = 25.6 / (3,600 tps) x 1e6;
    watts = 120 + 530 occ; tokens/J (GPU) = tps / (8 x watts); facility = that / (1.3 x 1.2 = 1.56).
      occ 10 %: tps 2,000;  25.6/7.2e6 x 1e6  = 3.5556 -> 3.56; W 173;   2000/1384   = 1.4451 -> 1.45; /1.56 = 0.9263 -> 0.93
      occ 25 %: tps 5,000;  25.6/18e6 x 1e6   = 1.4222 -> 1.42; W 252.5; 5000/2020   = 2.4752 -> 2.48; /1.56 = 1.5867 -> 1.59
      occ 50 %: tps 10,000; 25.6/36e6 x 1e6   = 0.7111 -> 0.71; W 385;   10000/3080  = 3.2468 -> 3.25; /1.56 = 2.0813 -> 2.08
      occ 75 %: tps 15,000; 25.6/54e6 x 1e6   = 0.4741 -> 0.47; W 517.5; 15000/4140  = 3.6232 -> 3.62; /1.56 = 2.3226 -> 2.32
      occ 95 %: tps 19,000; 25.6/68.4e6 x 1e6 = 0.3743 -> 0.37; W 623.5; 19000/4988  = 3.8091 -> 3.81; /1.56 = 2.4418 -> 2.44
    Go's %11.0f rounds half to even: 252.5 -> 252, 517.5 -> 518, 623.5 -> 624.
    """
    rows = S.unitcost_table(8, 3.20, 2500, 120, 650, 1.3, 1.2, (0.10, 0.25, 0.50, 0.75, 0.95))
    expected = [
        (10, 2000, 3.56, 173.0, 1.45, 0.93),
        (25, 5000, 1.42, 252.5, 2.48, 1.59),
        (50, 10000, 0.71, 385.0, 3.25, 2.08),
        (75, 15000, 0.47, 517.5, 3.62, 2.32),
        (95, 19000, 0.37, 623.5, 3.81, 2.44),
    ]
    for r, (occ, tps, cost, watts, tpj, tpj_fac) in zip(rows, expected):
        assert round(r.occupancy * 100) == occ
        assert r.tokens_per_s == pytest.approx(tps)
        assert round(r.cost_per_million_output_tokens, 2) == cost
        assert r.gpu_watts_each == pytest.approx(watts)
        assert round(r.tokens_per_joule_gpu, 2) == tpj
        assert round(r.tokens_per_joule_facility, 2) == tpj_fac
    printed = S.format_unitcost_table(rows).splitlines()
    assert printed[0].startswith("occupancy  tokens/s   $ / M output tokens")
    assert printed[1:] == [
        "      10%      2000                 3.56          173             1.45                 0.93",
        "      25%      5000                 1.42          252             2.48                 1.59",
        "      50%     10000                 0.71          385             3.25                 2.08",
        "      75%     15000                 0.47          518             3.62                 2.32",
        "      95%     19000                 0.37          624             3.81                 2.44",
    ]
    # "Occupancy moved the unit cost almost 10x, and the energy per token by about 2.6x."
    assert rows[0].cost_per_million_output_tokens / rows[-1].cost_per_million_output_tokens == pytest.approx(9.5, abs=0.1)
    assert rows[-1].tokens_per_joule_gpu / rows[0].tokens_per_joule_gpu == pytest.approx(2.64, abs=0.01)


def test_capital_cost_annuity():
    """$12,000, no residual, 12 %/year = 1 %/month over 12 months:
    payment = 12,000 x 0.01 / (1 - 1.01^-12) = 120 / 0.112551 = 1,066.19; depreciation 12,000/12 = 1,000; financing 66.19.
    With a $3,000 residual at 0 %: (12,000 - 3,000) / 12 = 750, financing 0.
    """
    dep, fin = S.capital_cost_per_month(12_000, 0, 0.12, 12)
    assert dep == pytest.approx(1000.0)
    assert dep + fin == pytest.approx(1066.19, abs=0.01)
    assert S.capital_cost_per_month(12_000, 3_000, 0.0, 12) == (750.0, 0.0)


# ---------------------------------------------------------------------------
# A small scenario computed by hand
# ---------------------------------------------------------------------------


def hand_scenario(life_months: int = 36, growth: float = 0.0) -> dict:
    """Workload: 2e9 input + 1e9 output tokens a month (3e9), peak 2x the average, 730 h months.
    API: $0.25/M input, $1.00/M output -> 2e9 x 0.25/1e6 + 1e9 x 1.00/1e6 = 500 + 1,000 = $1,500 a month.
    Owned card: $20,000 + $4,000 BOM = $24,000 capex, residual 25 % = $6,000, 0 % financing, 36 months:
      depreciation (24,000 - 6,000) / 36 = $500/month; staff $300/month.
      avg output 1e9 / (730 x 3,600 = 2,628,000 s) = 380.5 tok/s, peak 761 tok/s -> 0.76 cards; at 50 %
      utilization 380.5 / (1,000 x 0.5) = 0.76 cards -> 1 card.
      GPU energy: idle 100 W x 730 h = 73 kWh; busy (460 - 100) W x 1e9 / (1,000 x 3,600) h = 360 x 277.8 h
      = 100 kWh -> 173 kWh; facility x 1.25 x 1.2 = 1.5 -> 259.5 kWh x $0.20 = $51.90.
      Monthly: 500 + 300 + 51.90 = $851.90.
    """
    return {
        "name": "hand",
        "workload": {
            "input_tokens_per_month": 2e9,
            "output_tokens_per_month": 1e9,
            "peak_to_average": 2.0,
            "growth_per_month": growth,
            "acceptance_rate": 0.8,
            "months": 36,
        },
        "options": [
            {"name": "api", "kind": "hosted_api", "price_per_m_input": 0.25, "price_per_m_output": 1.00},
            {
                "name": "card",
                "kind": "owned",
                "price_per_card": 20_000,
                "other_bom_per_card": 4_000,
                "life_months": life_months,
                "residual_fraction": 0.25,
                "idle_w": 100,
                "peak_w": 460,
                "server_factor": 1.25,
                "pue": 1.2,
                "price_per_kwh": 0.20,
                "staff_monthly": 300,
                "output_tokens_per_s_per_gpu": 1000,
                "utilization": 0.5,
            },
        ],
    }


def test_hand_scenario_figures():
    """API: $1,500; blended 1,500 / 3e9 x 1e6 = $0.50/M; input 500 / 2e9 = $0.25/M; output $1.00/M;
    useful (acceptance 0.8): 1,500 / 2.4e9 x 1e6 = $0.625/M.
    Card: $851.90 (lifecycle 500, facilities 51.90, software_operations 300); blended 851.90 / 3e9 x 1e6 = $0.28397/M.
    Weights split (1, 0.1, 4): input share 2e9 / (2e9 + 4e9) = 1/3 -> input $283.97 / 2e9 = $0.14198/M,
    output $567.93 / 1e9 = $0.56793/M. Utilization 277.8 busy h / 730 paid h = 38.05 %.
    Tokens/J GPU: 1e9 / (173 kWh x 3.6e6) = 1.6057; facility 1e9 / (259.5 x 3.6e6) = 1.0705.
    """
    api, card = S.evaluate(S.parse_scenario(hand_scenario()))
    assert api.monthly_cost == pytest.approx(1500.0)
    assert api.breakdown["compute"] == pytest.approx(1500.0)
    assert api.cost_per_million_tokens == pytest.approx(0.5)
    assert api.cost_per_million_input_tokens == pytest.approx(0.25)
    assert api.cost_per_million_output_tokens == pytest.approx(1.0)
    assert api.cost_per_million_useful_tokens == pytest.approx(0.625)
    assert api.cards is None and api.energy_kwh_gpu is None

    assert card.monthly_cost == pytest.approx(851.90)
    assert card.breakdown == pytest.approx(
        {"compute": 0, "memory_storage": 0, "network": 0, "facilities": 51.90, "software_operations": 300, "lifecycle": 500}
    )
    assert card.cards == 1 and card.cards_for_peak == 1
    assert card.cost_per_million_tokens == pytest.approx(851.90 / 3e3)
    assert card.cost_per_million_input_tokens == pytest.approx(851.90 / 3 / 2e3)
    assert card.cost_per_million_output_tokens == pytest.approx(851.90 * 2 / 3 / 1e3)
    assert card.utilization == pytest.approx((1e9 / 3.6e6) / 730)
    assert card.energy_kwh_gpu == pytest.approx(173.0)
    assert card.energy_kwh_facility == pytest.approx(259.5)
    assert card.output_tokens_per_joule_gpu == pytest.approx(1e9 / (173 * 3.6e6))
    assert card.output_tokens_per_joule_facility == pytest.approx(1e9 / (259.5 * 3.6e6))
    assert card.upfront_capex == 24_000
    for r in (api, card):
        assert sum(r.breakdown.values()) == pytest.approx(r.monthly_cost)
        assert set(r.breakdown) == set(S.CATEGORIES)


def test_break_even_api_vs_owned_card_by_hand():
    """Volume scale k (all tokens and the peak x k; one card up to k = 1/0.761):
      API(k)  = 1,500 k
      card(k) = 500 + 300 + idle power 73 x 1.5 x 0.20 = 21.90 + busy power 100 k x 1.5 x 0.20 = 30 k
              = 821.90 + 30 k
      1,500 k = 821.90 + 30 k  ->  k = 821.90 / 1,470 = 0.559116  ->  0.559116 x 3e9 = 1.67735e9 tokens/month
      (5.59116e8 output), both $838.67 a month.
    Month, no growth: API cumulative 1,500 m; card cumulative cash 24,000 capex + (300 + 21.90 + 30) m
      = 24,000 + 351.90 m. 1,148.10 m >= 24,000 -> m >= 20.9 -> month 21
      (m 20: 30,000 vs 31,038; m 21: 31,500 vs 31,389.90).
    """
    be = S.break_even(S.parse_scenario(hand_scenario()), "api", "card")
    k = 821.90 / 1470
    assert be.volume_scale == pytest.approx(k, rel=1e-9)
    assert be.volume_tokens == pytest.approx(k * 3e9, rel=1e-9)
    assert be.volume_tokens == pytest.approx(1.67735e9, rel=1e-5)
    assert be.volume_output_tokens == pytest.approx(k * 1e9, rel=1e-9)
    assert be.monthly_cost_a == pytest.approx(838.673, abs=1e-3)
    assert be.monthly_cost_b == pytest.approx(be.monthly_cost_a, rel=1e-9)
    assert not be.at_card_step
    assert (be.cheaper_below, be.cheaper_above) == ("api", "card")
    assert be.month == 21
    assert be.cumulative_a == pytest.approx(31_500)
    assert be.cumulative_b == pytest.approx(24_000 + 351.90 * 21)
    assert (be.cheaper_before, be.cheaper_after) == ("api", "card")


def test_break_even_month_none_with_short_life():
    """Life 12 months: depreciation (24,000 - 6,000) / 12 = $1,500/month, card $1,851.90 a month vs API $1,500.
    Cash: 24,000 + 351.90 m, -6,000 residual in month 12, +24,000 replacement in month 13 (and 25, -6,000 in 24, 36):
    month 12: API 18,000 vs 22,222.80; month 36: API 54,000 vs 24,000 x 3 - 6,000 x 3 + 351.90 x 36 = 66,668.40.
    The API stays cheaper. By volume: card(k) = 1,500 + 300 + 21.90 + 30 k = 1,821.90 + 30 k = 1,500 k
    -> k = 1,821.90 / 1,470 = 1.23939 (still one card: 0.761 x 1.239 = 0.94).
    """
    be = S.break_even(S.parse_scenario(hand_scenario(life_months=12)), "api", "card")
    assert be.month is None
    assert "api stays cheaper" in be.month_reason
    assert be.cumulative_a == pytest.approx(54_000)
    assert be.cumulative_b == pytest.approx(66_668.40)
    assert be.volume_scale == pytest.approx(1821.90 / 1470)


def test_horizon_cash_equals_costs_over_one_life():
    """No growth, 36-month life = horizon: capex 24,000 - residual 6,000 = 36 x 500 of depreciation, so
    cash = accrual = 36 x 851.90 = 30,668.40 (with financing the financing part is paid monthly in both)."""
    (_, card) = S.evaluate(S.parse_scenario(hand_scenario()))
    assert card.horizon_cost == pytest.approx(36 * 851.90)
    assert card.horizon_cash == pytest.approx(36 * 851.90)
    d = hand_scenario()
    d["options"][1]["financing_rate"] = 0.08
    (_, fin) = S.evaluate(S.parse_scenario(d))
    assert fin.horizon_cash == pytest.approx(fin.horizon_cost)
    assert fin.breakdown["lifecycle"] > 500


def test_growth_buys_cards_and_compounds():
    """5 %/month: month m volume x 1.05^(m-1). Peak needs 0.761 x 1.05^(m-1) cards -> 2 cards from month 7
    (1.05^6 = 1.34; 0.761 x 1.34 = 1.02). API horizon = 1,500 x (1.05^36 - 1) / 0.05 = 143,726.5."""
    api, card = S.evaluate(S.parse_scenario(hand_scenario(growth=0.05)))
    assert api.horizon_cost == pytest.approx(1500 * (1.05**36 - 1) / 0.05)
    cum = S.cumulative_costs(S.parse_scenario(hand_scenario(growth=0.05)), ["card"])
    cash = cum["cash"].to_list()
    assert cash[6] - cash[5] > 20_000  # the second card is bought in month 7
    assert card.upfront_capex == 24_000


def test_hybrid_share_on_linear_load_curve():
    """Peak 2x average, level = the average: the load falls linearly from 2A to 0 over the month, so the
    part above A is a triangle of height A over half the month: A/4, i.e. 25 % of tokens go to the burst option.
    With the level at 0.75 of the peak (1.5 A): (2A - 1.5A)^2 / (2 x 2A) = A/16 -> 6.25 %."""
    d = hand_scenario()
    d["options"].append({"name": "mix", "kind": "hybrid", "base": "card", "burst": "api"})
    d["options"].append({"name": "mix75", "kind": "hybrid", "base": "card", "burst": "api", "base_level_fraction": 0.75})
    res = {r.name: r for r in S.evaluate(S.parse_scenario(d))}
    assert res["mix"].burst_token_share == pytest.approx(0.25)
    assert res["mix75"].burst_token_share == pytest.approx(0.0625)
    # burst part billed as API tokens: 25 % of $1,500
    assert res["mix"].breakdown["compute"] == pytest.approx(375.0)


def test_on_demand_rental_pays_busy_hours():
    """On demand at $2/h, 2,000 tok/s per card, 50 % utilization: card-hours = 1e9 / (2,000 x 3,600 x 0.5)
    = 277.78 h -> $555.56; per 1M output tokens 2 / (2,000 x 0.5 x 3,600) x 1e6 = $0.5556 = 2 x seed 002 System A."""
    d = hand_scenario()
    d["options"] = [
        {
            "name": "od",
            "kind": "rented",
            "billing": "on_demand",
            "price_per_gpu_hour": 2.0,
            "output_tokens_per_s_per_gpu": 2000,
            "utilization": 0.5,
        }
    ]
    (od,) = S.evaluate(S.parse_scenario(d))
    assert od.monthly_cost == pytest.approx(1e9 / (2000 * 3600 * 0.5) * 2)
    assert od.monthly_cost / 1e9 * 1e6 == pytest.approx(2 * S.cost_per_million_tokens(2.0, 2000))
    assert od.utilization == pytest.approx(0.5)


# ---------------------------------------------------------------------------
# Loading, sweep, calibrate
# ---------------------------------------------------------------------------


def test_sample_scenario_loads_and_evaluates():
    sc = S.load_scenario(SAMPLE)
    kinds = [o.kind for o in sc.options]
    assert {"hosted_api", "rented", "owned", "hybrid"} <= set(kinds)
    assert {o.condition for o in sc.options if o.kind == "owned"} == {"new", "secondary"}
    results = S.evaluate(sc)
    for r in results:
        assert r.monthly_cost > 0
        assert sum(r.breakdown.values()) == pytest.approx(r.monthly_cost)
        assert r.input_cost + r.output_cost == pytest.approx(r.monthly_cost)
    assert S.parse_scenario_text(S.dump_scenario(sc)) == sc
    frame = S.results_frame(results)
    assert frame.height == len(sc.options)


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda d: d["options"][1].update(pricex=1), "options[1].pricex (option 'card'): unknown key"),
        (lambda d: d["options"][1].pop("life_months"), "options[1].life_months (option 'card'): Field required"),
        (lambda d: d["options"][0].update(kind="saas"), "options[0].kind (option 'api'): unknown kind 'saas'"),
        (lambda d: d["workload"].update(acceptance_rate=1.5), "workload.acceptance_rate"),
        (lambda d: d["workload"].update(peak_output_tokens_per_s=10), "give the peak one way only"),
        (lambda d: d["options"].append({"name": "h", "kind": "hybrid", "base": "card", "burst": "nope"}), "options[2].burst: unknown option 'nope'"),
        (lambda d: d["options"][1].update(residual_per_card=100), "options[1] (option 'card'): give residual_fraction or residual_per_card"),
    ],
)
def test_errors_name_the_key(mutate, key):
    d = hand_scenario()
    mutate(d)
    with pytest.raises(S.ScenarioError) as exc:
        S.parse_scenario(d)
    assert key in str(exc.value)


def test_peak_below_average_rejected(tmp_path):
    """Average output 1e9 / 2,628,000 s = 380.5 tok/s; a 100 tok/s peak is impossible."""
    d = hand_scenario()
    del d["workload"]["peak_to_average"]
    d["workload"]["peak_output_tokens_per_s"] = 100
    with pytest.raises(S.ScenarioError, match="workload.peak_output_tokens_per_s"):
        S.parse_scenario(d)
    bad = tmp_path / "bad.toml"
    bad.write_text("name = 'x'\n[workload\n", encoding="utf-8")
    with pytest.raises(S.ScenarioError, match="not valid TOML"):
        S.load_scenario(bad)


def test_sweep_frame():
    sc = S.load_scenario(SAMPLE)
    for p in S.SWEEP_PARAMETERS:
        df = S.sweep(sc, p, S.default_sweep_values(sc, p))
        assert df.height == len(S.default_sweep_values(sc, p)) * len(sc.options)
        assert df.columns[:6] == ["parameter", "value", "option", "kind", "monthly_cost", "cost_per_million_tokens"]
    vol = S.sweep(S.parse_scenario(hand_scenario()), "volume", [0.5, 1.0])
    api = vol.filter(pl.col("option") == "api")["monthly_cost"].to_list()
    assert api == pytest.approx([750.0, 1500.0])
    # io_ratio keeps total tokens: ratio 1 -> 1.5e9 in, 1.5e9 out -> API 375 + 1,500 = 1,875
    io = S.sweep(S.parse_scenario(hand_scenario()), "io_ratio", [1.0])
    assert io.filter(pl.col("option") == "api")["monthly_cost"].item() == pytest.approx(1875.0)
    # power price 0 removes the $51.90 of power
    pw = S.sweep(S.parse_scenario(hand_scenario()), "power_price", [0.0])
    assert pw.filter(pl.col("option") == "card")["monthly_cost"].item() == pytest.approx(800.0)
    # residual 0.5: (24,000 - 12,000) / 36 = 333.33 depreciation
    rv = S.sweep(S.parse_scenario(hand_scenario()), "residual", [0.5])
    assert rv.filter(pl.col("option") == "card")["monthly_cost"].item() == pytest.approx(333.333333 + 351.90)
    with pytest.raises(S.ScenarioError, match="unknown sweep parameter"):
        S.sweep(S.parse_scenario(hand_scenario()), "weather", [1])


def test_calibrate_fills_and_reports_provenance():
    """Measured: 1,250 tok/s per card, 40 % utilization, avg 310 W with idle 100 W -> peak 100 + 210 / 0.4 = 625 W."""
    sc = S.parse_scenario(hand_scenario())
    cal, prov = S.calibrate(
        sc,
        {
            "output_tokens_per_s_per_gpu": 1250,
            "utilization": 0.4,
            "avg_power_w": 310,
            "price_per_kwh": 0.11,
            "cost_per_gpu_hour": 2.5,
            "acceptance_rate": None,
        },
    )
    card = cal.option("card")
    assert card.output_tokens_per_s_per_gpu == 1250
    assert card.utilization == 0.4
    assert card.peak_w == pytest.approx(625.0)
    assert card.price_per_kwh == 0.11
    assert prov["options.card.output_tokens_per_s_per_gpu"] == "output_tokens_per_s_per_gpu"
    assert prov["options.card.utilization"] == "utilization"
    assert prov["options.card.peak_w"].startswith("avg_power_w")
    assert "workload.acceptance_rate" not in prov
    assert not any(k.startswith("options.api") for k in prov)
    with pytest.raises(S.ScenarioError, match="unknown measured keys"):
        S.calibrate(sc, {"tokens_per_bananas": 1})
    same, prov2 = S.calibrate(sc, {"tokens_per_bananas": 1}, strict=False)
    assert same == sc and prov2 == {}


# ---------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------

_money = st.floats(0, 5_000, allow_nan=False)


@st.composite
def self_hosted(draw, kind: str) -> dict:
    tps = draw(st.floats(100, 5_000))
    base = {"name": "x", "output_tokens_per_s_per_gpu": tps, "utilization": 0.5, "staff_monthly": draw(_money)}
    if kind == "owned":
        idle = draw(st.floats(0, 300))
        return base | {
            "kind": "owned",
            "price_per_card": draw(st.floats(1_000, 50_000)),
            "other_bom_per_card": draw(st.floats(0, 20_000)),
            "financing_rate": draw(st.floats(0, 0.2)),
            "life_months": draw(st.integers(6, 72)),
            "residual_fraction": draw(st.floats(0, 0.6)),
            "idle_w": idle,
            "peak_w": idle + draw(st.floats(0, 800)),
            "price_per_kwh": draw(st.floats(0, 0.5)),
        }
    return base | {
        "kind": "rented",
        "billing": kind,
        "price_per_gpu_hour": draw(st.floats(0.2, 10)),
    }


@st.composite
def workloads(draw) -> dict:
    return {
        "input_tokens_per_month": draw(st.floats(0, 5e10)),
        "cached_input_tokens_per_month": draw(st.floats(0, 1e10)),
        "output_tokens_per_month": draw(st.floats(1e6, 2e10)),
        "peak_to_average": draw(st.floats(1, 5)),
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["owned", "committed", "on_demand"]),
    data=st.data(),
    u1=st.floats(0.05, 1.0),
    u2=st.floats(0.05, 1.0),
    whole=st.booleans(),
)
def test_cost_per_million_non_increasing_in_utilization(kind, data, u1, u2, whole):
    opt = data.draw(self_hosted(kind))
    sc = S.parse_scenario({"whole_cards": whole, "workload": data.draw(workloads()), "options": [opt]})
    lo, hi = sorted((u1, u2))
    (r_lo,) = S.evaluate(S.with_parameter(sc, "utilization", lo))
    (r_hi,) = S.evaluate(S.with_parameter(sc, "utilization", hi))
    assert r_hi.cost_per_million_tokens <= r_lo.cost_per_million_tokens * (1 + 1e-9) + 1e-12
    assert r_hi.monthly_cost <= r_lo.monthly_cost * (1 + 1e-9) + 1e-9


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(
    kind=st.sampled_from(["owned", "committed", "on_demand"]),
    data=st.data(),
    p_in=st.floats(0, 5),
    p_out=st.floats(0.5, 40),
    other=_money,
    whole=st.booleans(),
    target=st.sampled_from(["x", "hybrid"]),
    level=st.none() | st.floats(0.1, 1.0),
)
def test_break_even_volume_gives_equal_monthly_costs(kind, data, p_in, p_out, other, whole, target, level):
    """Wherever break_even reports an exact volume, evaluating the scenario scaled to it gives equal costs."""
    opt = data.draw(self_hosted(kind))
    api = {"name": "api", "kind": "hosted_api", "price_per_m_input": p_in, "price_per_m_output": p_out, "other_monthly": other}
    hyb = {"name": "hybrid", "kind": "hybrid", "base": "x", "burst": "api", "base_level_fraction": level}
    sc = S.parse_scenario({"whole_cards": whole, "workload": data.draw(workloads()), "options": [api, opt, hyb]})
    be = S.break_even(sc, "api", target)
    assume(be.volume_scale is not None and not be.at_card_step)
    res = {r.name: r for r in S.evaluate(S.with_parameter(sc, "volume", be.volume_scale))}
    a, b = res["api"], res[target]
    assert a.monthly_cost == pytest.approx(b.monthly_cost, rel=1e-6, abs=1e-6)
    assert be.monthly_cost_a == pytest.approx(a.monthly_cost, rel=1e-6, abs=1e-6)
    assert be.volume_tokens == pytest.approx(a.tokens, rel=1e-9)
    # and the order really changes there
    below = {r.name: r.monthly_cost for r in S.evaluate(S.with_parameter(sc, "volume", be.volume_scale * 0.999))}
    if abs(below["api"] - below[target]) > 1e-9 * below["api"]:
        assert (below["api"] < below[target]) == (be.cheaper_below == "api")


# ---------------------------------------------------------------------------
# CLI and page
# ---------------------------------------------------------------------------


def test_cli_json():
    res = CliRunner().invoke(
        scenario_cmd,
        [str(SAMPLE), "--json", "--sweep", "utilization=0.3,0.6", "--break-even", "cloud-api,owned-new-h200"],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    names = [o["name"] for o in doc["options"]]
    assert names == [o.name for o in S.load_scenario(SAMPLE).options]
    api = doc["options"][0]
    for key in ("monthly_cost", "breakdown", "cost_per_million_tokens", "cost_per_million_useful_tokens", "cards_for_peak"):
        assert key in api
    assert doc["sweeps"][0]["parameter"] == "utilization" and len(doc["sweeps"][0]["rows"]) == 2 * len(names)
    assert doc["break_even"][0]["a"] == "cloud-api" and doc["break_even"][0]["volume_tokens"] > 0
    assert doc["workload"]["peak_to_average"] == pytest.approx(3.0)


def test_cli_text_and_errors(tmp_path):
    runner = CliRunner()
    res = runner.invoke(scenario_cmd, [str(SAMPLE), "--sweep", "volume", "--break-even", "cloud-api,rented-h100"])
    assert res.exit_code == 0, res.output
    assert "Monthly cost by category" in res.output and "Break-even cloud-api vs rented-h100" in res.output
    res = runner.invoke(scenario_cmd, [str(SAMPLE), "--sweep", "weather=1"])
    assert res.exit_code == 2 and "unknown parameter" in res.output
    res = runner.invoke(scenario_cmd, [str(SAMPLE), "--break-even", "cloud-api,nope"])
    assert res.exit_code == 1 and "unknown option 'nope'" in res.output
    bad = tmp_path / "bad.toml"
    bad.write_text(SAMPLE.read_text().replace("life_months = 48", "life_monthz = 48"), encoding="utf-8")
    res = runner.invoke(scenario_cmd, [str(bad)])
    assert res.exit_code == 1 and "life_monthz" in res.output and "unknown key" in res.output


def test_page_renders():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "pages" / "scenario.py"), default_timeout=60)
    at.run()
    assert not at.exception
    assert not at.error
    # Only the open section draws its inputs: workload's 10 (the others are lazy expanders).
    assert len(at.number_input) == 10
    # Open the hosted API's section (its expander's state, as a click sets it): 4 more inputs.
    tag = at.number_input[0].key.split(":")[0]
    at.session_state[f"{tag}:open:options.cloud-api"] = True
    at.run()
    assert len(at.number_input) == 14
    # Edit the API's output price and recalculate: the results table follows.
    before = at.dataframe[0].value
    price = next(n for n in at.number_input if n.key.endswith(":price_per_m_output"))
    price.set_value(24.0)
    at.button[0].click()
    at.run()
    assert not at.exception
    after = at.dataframe[0].value
    assert list(after["monthly_cost"])[0] > list(before["monthly_cost"])[0]
