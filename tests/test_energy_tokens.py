"""Energy, tokens and unit economics (issue 3); every figure is computed by hand in the docstring."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from cost_engine.engine import compute
from cost_engine.report import build_report
from cost_engine.tokens import model_trend
from tests.helpers import make_bundle, make_config, ts


def one_card(**tables):
    base = dict(
        inventory=[{"gpu_id": "g0", "pool": "p"}],
        owners=[{"tenant": "A", "project": "A1"}, {"tenant": "B", "project": "B1"}, {"tenant": "S", "project": "svc"}],
    )
    base.update(tables)
    return make_bundle(**base)


def by(rep, table, key):
    return {r[key]: r for r in rep[table]}


def test_counter_reset_mid_allocation_falls_back_to_power():
    """A1 holds g0 00:00-04:00. Hourly samples (gap cap 3600 s), power_w reads 400 W throughout.

    energy_j: 0, 1.8e6, 3.6e6, then a reset to 5e4 at 03:00.
      [0,1) counter delta 1.8e6 J      [1,2) delta 1.8e6 J
      [2,3) delta 5e4 - 3.6e6 < 0: reset -> 400 W x 3600 s = 1.44e6 J
      [3,4) last sample, no next: power x time = 1.44e6 J
    total 6.48e6 J = 1.8 kWh GPU, all on A1.
    """
    b = one_card(
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 4), "owner": "A1"}],
        telemetry=[{"ts": ts(1, h), "gpu_id": "g0", "util_pct": 90.0, "power_w": 400.0, "energy_j": e}
                   for h, e in enumerate([0.0, 1.8e6, 3.6e6, 5e4])],
    )
    rep = build_report(compute(b, make_config(activity={"max_sample_gap_s": 3600})))
    assert by(rep, "by_project", "project")["A1"]["energy_kwh_gpu"] == pytest.approx(1.8)
    assert rep["totals"]["energy_kwh_gpu"] == pytest.approx(1.8)
    assert any(g["what"] == "energy counter reset" and "02:00" in g["detail"] for g in rep["gaps"])


def test_tariff_change_inside_one_allocation():
    """A1 holds g0 00:00-04:00 at a constant 1000 W (server 1.0, PUE 1.0: facility = GPU energy).

    Samples every 45 min (00:00, 00:45, 01:30, 02:15, 03:00, 03:45) and a 0 W sample at 04:00.
    Tariff $0.10/kWh for [00:00, 02:00) and $0.30 for [02:00, 04:00). The sample [01:30, 02:15)
    straddles the change and is split by time. Energy: 2 kWh before 02:00, 2 kWh after.
    Cost = 2 x 0.10 + 2 x 0.30 = $0.80, all on A1; nothing idle (0 W after 04:00).
    """
    samples = [0, 0.75, 1.5, 2.25, 3.0, 3.75]
    tele = [{"ts": ts(1, h), "gpu_id": "g0", "util_pct": 80.0, "power_w": 1000.0} for h in samples]
    tele.append({"ts": ts(1, 4), "gpu_id": "g0", "util_pct": 0.0, "power_w": 0.0})
    b = one_card(
        allocations=[{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 4), "owner": "A1"}],
        telemetry=tele,
        tariffs=[{"start": ts(1, 0), "end": ts(1, 2), "price_per_kwh": 0.10},
                 {"start": ts(1, 2), "end": ts(1, 4), "price_per_kwh": 0.30}],
    )
    cfg = make_config(energy={"server_overhead": 1.0, "pue": 1.0}, activity={"max_sample_gap_s": 3600})
    rep = build_report(compute(b, cfg))
    a1 = by(rep, "by_project", "project")["A1"]
    assert a1["energy_kwh_gpu"] == pytest.approx(4.0)
    assert a1["energy_cost"] == pytest.approx(0.80)
    assert rep["totals"]["energy_cost"] == pytest.approx(0.80)
    assert rep["reconciliation"]["idle"] == pytest.approx(0.0)


def test_pue_server_factor_and_carbon():
    """1 kWh of GPU energy (1000 W for 1 h). Facility = 1 x 1.3 x 1.2 = 1.56 kWh.

    Flat price $0.12 -> $0.1872. A tariff-free bundle has no carbon; with a tariff at $0.12 and
    400 g/kWh: 1.56 x 400 g = 0.624 kg CO2e.
    """
    alloc = [{"allocation_id": "a", "gpu_id": "g0", "start": ts(1, 0), "end": ts(1, 1), "owner": "A1"}]
    tele = [{"ts": ts(1, 0), "gpu_id": "g0", "util_pct": 50.0, "power_w": 1000.0},
            {"ts": ts(1, 1), "gpu_id": "g0", "util_pct": 0.0, "power_w": 0.0}]
    cfg = make_config(activity={"max_sample_gap_s": 3600})
    rep = build_report(compute(one_card(allocations=alloc, telemetry=tele), cfg))
    assert rep["totals"]["energy_kwh_facility"] == pytest.approx(1.56)
    assert rep["totals"]["energy_cost"] == pytest.approx(0.1872)
    assert "PUE 1.2" in rep["methods"]["energy_kwh_facility"]
    tariff = [{"start": ts(1, 0), "end": ts(2, 0), "price_per_kwh": 0.12, "carbon_g_per_kwh": 400.0}]
    rep = build_report(compute(one_card(allocations=alloc, telemetry=tele, tariffs=tariff), cfg))
    assert rep["totals"]["carbon_kg"] == pytest.approx(0.624)
    assert by(rep, "by_project", "project")["A1"]["carbon_kg"] == pytest.approx(0.624)


def served_model(requests, **tables):
    """Model m served by svc on g0 for the whole day at a rate of $1/h -> $24 of model cost."""
    return one_card(
        allocations=[{"allocation_id": "s", "gpu_id": "g0", "start": ts(1, 0), "end": ts(2, 0), "owner": "svc",
                      "workload": "inference", "model": "m"}],
        rates=[{"pool": "p", "price_per_gpu_hour": 1.0}],
        requests=requests,
        **tables,
    )


REQS = [
    {"request_id": "r1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 1000, "output_tokens": 0},
    {"request_id": "r2", "ts": ts(1, 2), "owner": "A1", "model": "m", "input_tokens": 1000, "output_tokens": 0},
    {"request_id": "r3", "ts": ts(1, 3), "owner": "A1", "model": "m", "input_tokens": 1000, "output_tokens": 0},
    {"request_id": "r4", "ts": ts(1, 4), "owner": "B1", "model": "m", "input_tokens": 0, "output_tokens": 1500},
]


def test_recharge_by_tokens():
    """Weighted tokens: A1 3 x 1000 x 1.0 = 3000, B1 1500 x 4.0 = 6000 -> A 24 x 1/3 = 8, B 16."""
    rep = build_report(compute(served_model(REQS), make_config()))
    assert {r["tenant"]: r["cost"] for r in rep["by_tenant"]} == pytest.approx({"A": 8.0, "B": 16.0, "S": 0.0})


def test_recharge_by_requests():
    """Requests: A1 3, B1 1 -> A 24 x 3/4 = 18, B 6."""
    cfg = make_config(allocation={"inference_recharge": "requests"})
    rep = build_report(compute(served_model(REQS), cfg))
    assert {r["tenant"]: r["cost"] for r in rep["by_tenant"]} == pytest.approx({"A": 18.0, "B": 6.0, "S": 0.0})


def test_model_without_requests_keeps_cost_on_service_owner():
    """No request for m: its $24 stays with svc (tenant S)."""
    rep = build_report(compute(served_model([]), make_config()))
    assert {r["tenant"]: r["cost"] for r in rep["by_tenant"]} == pytest.approx({"S": 24.0})


PHASE_REQS = [
    {"request_id": "p1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 3000,
     "cached_input_tokens": 1000, "output_tokens": 200, "prefill_ms": 150.0, "decode_ms": 450.0},
    {"request_id": "p2", "ts": ts(1, 2), "owner": "A1", "model": "m", "input_tokens": 1000,
     "cached_input_tokens": 0, "output_tokens": 300, "prefill_ms": 100.0, "decode_ms": 300.0},
]


def test_phase_time_split():
    """Model cost $24. prefill 250 ms, decode 750 ms -> input share 0.25: input $6, output $18.

    Input tokens 4000 + cached 1000 = 5000 -> $6 / 5000 x 1e6 = $1200 per M input tokens.
    Output 500 -> $18 / 500 x 1e6 = $36000 per M output tokens.
    All tokens 5500 -> $24 / 5500 x 1e6 = $4363.64 per M.
    """
    m = by(build_report(compute(served_model(PHASE_REQS), make_config())), "by_model", "model")["m"]
    assert m["cost_per_million_input_tokens"] == pytest.approx(1200.0)
    assert m["cost_per_million_output_tokens"] == pytest.approx(36000.0)
    assert m["cost_per_million_tokens"] == pytest.approx(24 / 5500 * 1e6)
    # Within the $6 of input: uncached 4000 x 1.0 vs cached 1000 x 0.1 -> $6 x 4000/4100 = $5.8537
    # over 4000 tokens ($1463.41 per M); $6 x 100/4100 = $0.1463 over 1000 cached ($146.34 per M).
    assert m["cost_per_million_uncached_input_tokens"] == pytest.approx(6 * 4000 / 4100 / 4000 * 1e6)
    assert m["cost_per_million_cached_input_tokens"] == pytest.approx(6 * 100 / 4100 / 1000 * 1e6)


def test_weights_split_and_fallback_gap():
    """token_split = weights: input 4000 x 1.0 + cached 1000 x 0.1 = 4100 vs output 500 x 4.0 = 2000.

    Input share 4100 / 6100: input $24 x 4100/6100 = $16.1311 -> / 5000 x 1e6 = $3226.23 per M;
    output $24 x 2000/6100 = $7.8689 -> / 500 x 1e6 = $15737.70 per M.
    With phase_time and one request lacking phase times, the split uses only timed requests and
    says so in gaps; with none timed it falls back to these weights.
    """
    cfg = make_config(allocation={"token_split": "weights"})
    m = by(build_report(compute(served_model(PHASE_REQS), cfg)), "by_model", "model")["m"]
    assert m["cost_per_million_input_tokens"] == pytest.approx(24 * 4100 / 6100 / 5000 * 1e6)
    assert m["cost_per_million_output_tokens"] == pytest.approx(24 * 2000 / 6100 / 500 * 1e6)
    untimed = [{k: v for k, v in r.items() if k not in ("prefill_ms", "decode_ms")} for r in PHASE_REQS]
    rep = build_report(compute(served_model(untimed), make_config()))
    assert by(rep, "by_model", "model")["m"]["cost_per_million_input_tokens"] == pytest.approx(
        24 * 4100 / 6100 / 5000 * 1e6)
    assert any(g["what"] == "phase time missing" for g in rep["gaps"])


def test_retry_share_from_attempts_and_model_energy_cost():
    """Four requests, one a second attempt: retry share 1/4. Without any `attempt` the share is
    unknown (null), not 0. The model's energy cost: 1 kW for the whole day on its card = 24 kWh
    GPU x 1.56 = 37.44 kWh facility x $0.12 = $4.4928."""
    reqs = [dict(r, attempt=2 if r["request_id"] == "r4" else 1) for r in REQS]
    tele = [{"ts": ts(1, 0), "gpu_id": "g0", "util_pct": 90.0, "power_w": 1000.0}]
    cfg = make_config(activity={"max_sample_gap_s": 86400})
    m = by(build_report(compute(served_model(reqs, telemetry=tele), cfg)), "by_model", "model")["m"]
    assert m["retry_share"] == pytest.approx(0.25)
    assert m["energy_cost"] == pytest.approx(24 * 1.56 * 0.12)
    m = by(build_report(compute(served_model(REQS), make_config())), "by_model", "model")["m"]
    assert m["retry_share"] is None


def test_good_tokens_exclude_slo_miss_and_error():
    """Three requests on a $24 model: ok within SLO (100 tokens), ok but ttft 2500 ms > 2000 (200),
    error (300). Good tokens = 100 -> $24 / 100 x 1e6 = $240,000 per M good tokens.
    SLO attainment 1/3, error share 1/3."""
    reqs = [
        {"request_id": "g1", "ts": ts(1, 1), "owner": "A1", "model": "m", "input_tokens": 50, "output_tokens": 50,
         "ttft_ms": 300.0, "latency_ms": 2000.0},
        {"request_id": "g2", "ts": ts(1, 2), "owner": "A1", "model": "m", "input_tokens": 100, "output_tokens": 100,
         "ttft_ms": 2500.0, "latency_ms": 9000.0},
        {"request_id": "g3", "ts": ts(1, 3), "owner": "A1", "model": "m", "input_tokens": 150, "output_tokens": 150,
         "ttft_ms": 100.0, "latency_ms": 1000.0, "status": "error"},
    ]
    rep = build_report(compute(served_model(reqs), make_config()))
    m = by(rep, "by_model", "model")["m"]
    assert m["good_tokens"] == 100
    assert m["cost_per_million_good_tokens"] == pytest.approx(240_000.0)
    assert m["slo_attainment"] == pytest.approx(1 / 3)
    assert m["error_share"] == pytest.approx(1 / 3)
    assert rep["totals"]["good_tokens"] == 100


# seed 003 unitcost.go: occupancy -> (tokens/s, $/M output, GPU W each, tokens/J GPU, tokens/J facility)
# as the Go program prints them (%.2f, and %.0f with round-half-even for watts).
UNITCOST = {
    0.10: (2000, 3.56, 173, 1.45, 0.93),
    0.25: (5000, 1.42, 252, 2.48, 1.59),
    0.50: (10000, 0.71, 385, 3.25, 2.08),
    0.75: (15000, 0.47, 518, 3.62, 2.32),
    0.95: (19000, 0.37, 624, 3.81, 2.44),
}


@pytest.mark.parametrize("occ", sorted(UNITCOST))
def test_seed003_unitcost_table_from_a_generated_bundle(occ):
    """8 cards, $3.20/GPU-hour, 2,500 output tokens/s per card at the SLO, 120 W idle, 650 W peak,
    server 1.3, PUE 1.2; one hour at occupancy `occ`.

    tokens/s = 8 x 2500 x occ; W each = 120 + 530 x occ; cost = 8 x 3.20 = $25.60 per hour.
    $/M output = 25.6 / (tokens/s x 3600) x 1e6, e.g. occ 0.10: 25.6 / 7.2e6 x 1e6 = 3.56.
    tokens/J = tokens/s / (8 x W), e.g. 2000 / (8 x 173) = 1.445 -> 1.45; facility / 1.56 = 0.93.
    The bundle: 8 cards held by the model's service for the hour, an energy counter rising by
    W x 3600 J per card, one usage bucket of output tokens; boundary `rental` (GPU-hours only).
    """
    tps, dollars, watts, tpj, tpj_fac = UNITCOST[occ]
    w = 120 + (650 - 120) * occ
    output = round(8 * 2500 * occ * 3600)
    cards = [f"g{i}" for i in range(8)]
    b = make_bundle(
        inventory=[{"gpu_id": g, "pool": "p"} for g in cards],
        allocations=[{"allocation_id": f"a{i}", "gpu_id": g, "start": ts(1, 0), "end": ts(1, 1), "owner": "svc",
                      "workload": "inference", "model": "m"} for i, g in enumerate(cards)],
        telemetry=[{"ts": ts(1, h), "gpu_id": g, "util_pct": 100 * occ, "power_w": w, "energy_j": w * 3600 * h}
                   for g in cards for h in (0, 1)],
        rates=[{"pool": "p", "price_per_gpu_hour": 3.20}],
        requests=[{"request_id": "bucket", "ts": ts(1, 0), "end": ts(1, 1), "owner": "svc", "model": "m",
                   "input_tokens": 0, "output_tokens": output, "requests": 100}],
    )
    cfg = make_config(period={"start": datetime(2026, 10, 1, tzinfo=timezone.utc),
                              "end": datetime(2026, 10, 1, 1, tzinfo=timezone.utc)},
                      boundary={"name": "rental"}, allocation={"token_split": "weights"},
                      activity={"max_sample_gap_s": 3600})
    m = by(build_report(compute(b, cfg)), "by_model", "model")["m"]
    assert m["cost"] == pytest.approx(25.6)
    assert m["output_tokens"] / 3600 == pytest.approx(tps)
    assert round(m["cost_per_million_output_tokens"], 2) == dollars
    assert m["avg_power_w_per_gpu"] == pytest.approx(w)
    assert round(round(m["avg_power_w_per_gpu"], 6)) == watts  # %.0f and round() both round half to even
    assert round(m["output_tokens_per_joule"], 2) == tpj
    assert round(m["output_tokens_per_joule_facility"], 2) == tpj_fac


def test_daily_model_trend_and_occupancy():
    """Model m held all day ($24 at $1/h); requests in hours 01, 02, 03 and 04 only.

    Occupancy = 4 GPU-hours with tokens / 24 held = 1/6. Output tokens 1500 -> $24 / 1500 x 1e6
    = $16,000 per M output tokens for that day.
    """
    comp = compute(served_model(REQS), make_config())
    t = model_trend(comp.money_before_recharge, comp.seg, comp.request_summary, comp.request_hours).row(0, named=True)
    assert t["occupancy"] == pytest.approx(4 / 24)
    assert t["cost_per_million_output_tokens"] == pytest.approx(16_000.0)
