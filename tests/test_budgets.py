"""Budgets end to end on a hand-made ledger: the budgets table (validation, store), booked,
committed and forecast cost, burn rate, alerts at their thresholds, and scoped users.

The ledger (UTC, 2026-10-01 .. 10-04, three days): pool p1 rents at $10 per GPU-hour, cards g1
and g2 (no telemetry, so no measured energy). proj-a (tenant t-a) holds g1 for the whole three
days: $240 a day. proj-b (tenant t-b) holds g2 from 10-01 to 10-06 and has g1 reserved from
10-04 to 10-06: $240 a day booked, and card-time after the data's end.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import polars as pl
import pytest
from click.testing import CliRunner

from cost_engine import access, alerts, budgets, burn, store, uploads
from cost_engine.bundle import read_bundle
from cost_engine.cli import main
from cost_engine.config import Alerts, load_config, parse_config
from cost_engine.contract import make_frame
from cost_engine.engine import compute
from tests.helpers import make_bundle

END = datetime(2026, 10, 4, tzinfo=timezone.utc)
CONFIG = {"period": {"start": datetime(2026, 10, 1, tzinfo=timezone.utc), "end": END, "timezone": "UTC"}}


def ledger(budget_rows: list[dict], cards: tuple[str, ...] = (), **extra) -> dict[str, list[dict]]:
    """The ledger above; `cards` adds idle cards to p1, `allocations` adds allocations."""
    return dict(
        inventory=[{"gpu_id": g, "pool": "p1"} for g in ("g1", "g2", *cards)],
        allocations=[
            {"allocation_id": "a1", "gpu_id": "g1", "start": "2026-10-01T00:00:00Z", "end": "2026-10-04T00:00:00Z",
             "owner": "proj-a"},
            {"allocation_id": "b1", "gpu_id": "g2", "start": "2026-10-01T00:00:00Z", "end": "2026-10-06T00:00:00Z",
             "owner": "proj-b"},
            {"allocation_id": "b2", "gpu_id": "g1", "start": "2026-10-04T00:00:00Z", "end": "2026-10-06T00:00:00Z",
             "owner": "proj-b"},
            *extra.pop("allocations", []),
        ],
        rates=[{"pool": "p1", "price_per_gpu_hour": 10.0}],
        owners=[{"tenant": "t-a", "project": "proj-a"}, {"tenant": "t-b", "project": "proj-b"}],
        budgets=budget_rows,
        **extra,
    )


def run(budget_rows: list[dict], config: dict | None = None, **extra):
    return compute(make_bundle(**ledger(budget_rows, **extra)), parse_config(config or CONFIG))


def status(comp, **kw) -> dict[str, dict]:
    return {r["budget_id"]: r for r in budgets.evaluate(comp, **kw).status.iter_rows(named=True)}


def test_a_budget_exactly_met():
    """proj-a, custom 10-01 .. 10-04, $720: booked 3 x 240 = 720, nothing left to forecast or commit.
    Projected 720 = the budget: 0 remaining, 100 % of it, within (not over); the booked-at-100 %
    alert fires exactly there, the over-budget alert does not."""
    comp = run([{"budget_id": "exact", "project": "proj-a", "period_kind": "custom", "amount": 720.0,
                 "start": "2026-10-01T00:00:00Z", "end": "2026-10-04T00:00:00Z"}])
    r = status(comp)["exact"]
    assert (r["booked"], r["committed"], r["forecast"], r["projected"]) == (720.0, 0.0, 0.0, 720.0)
    assert (r["lo80"], r["hi95"], r["remaining"], r["projected_share"]) == (720.0, 720.0, 0.0, 1.0)
    assert r["status"] == "within" and r["days_left"] == 0.0
    found = alerts.evaluate(comp, budgets.evaluate(comp), Alerts(booked_over_budget_pct=100))
    states = dict(zip(found["rule"].to_list(), found["state"].to_list()))
    assert states == {"booked_over_budget": "firing", "forecast_over_budget": "ok"}


def test_month_forecast_of_a_constant_series_with_a_floored_interval():
    """proj-a, October, $5,000: booked 3 days x 240 = 720; the other 28 days at the same $240 =
    6,720 (model "mean": 3 days of history); projected 7,440; over. Three identical days no
    longer give a zero-width month (issue 43, item 5): the forecast's 80 % interval is 6,720
    -+ 384.89 (tests/test_forecast.py, test_three_identical_days_do_not_give_a_zero_width_month),
    so the projection's is 720 + 6,335.11 .. 720 + 7,104.89 = 7,055.11 .. 7,824.89; 95 %
    6,561.75 .. 8,318.25."""
    comp = run([{"budget_id": "oct", "project": "proj-a", "period_kind": "month", "amount": 5000.0}])
    r = status(comp)["oct"]
    assert r["booked"] == 720.0 and r["forecast"] == 6720.0 and r["projected"] == 7440.0
    assert (r["lo80"], r["hi80"]) == (pytest.approx(7055.11, abs=0.01), pytest.approx(7824.89, abs=0.01))
    assert (r["lo95"], r["hi95"]) == (pytest.approx(6561.75, abs=0.01), pytest.approx(8318.25, abs=0.01))
    assert r["status"] == "over" and r["model"] == "mean daily cost" and r["history_days"] == 3
    assert r["window_start"] == datetime(2026, 10, 1, tzinfo=timezone.utc)
    assert r["window_end"] == datetime(2026, 11, 1, tzinfo=timezone.utc)
    path = budgets.evaluate(comp).path
    assert path.height == 31 and path["spent"][-1] == 7440.0 and path["remaining"][-1] == 5000.0 - 7440.0
    assert path.filter(pl.col("kind") == "booked").height == 3


def test_committed_allocations_are_a_floor():
    """proj-b, custom 10-01 .. 10-06, $2,000: booked 720; forecast 2 days x 240 = 480; committed:
    g2 running to 10-06 and g1 reserved 10-04 .. 10-06 = 2 cards x 48 h x $10 = 960 (p1's recent
    rate: $1,440 over 144 allocated GPU-hours = $10). Projected 720 + max(480, 960) = 1,680."""
    comp = run([{"budget_id": "b", "project": "proj-b", "period_kind": "custom", "amount": 2000.0,
                 "start": "2026-10-01T00:00:00Z", "end": "2026-10-06T00:00:00Z"}])
    r = status(comp)["b"]
    assert (r["booked"], r["forecast"], r["committed"], r["projected"]) == (720.0, 480.0, 960.0, 1680.0)
    assert r["lo95"] == 1680.0 and r["status"] == "within"
    # Left out (a backtest's replay): the forecast alone.
    assert status(comp, committed=False)["b"]["projected"] == 1200.0


def test_burn_rate_now_from_open_allocations():
    """At the data's end (10-04 00:00) proj-b holds g2 and starts its g1 reservation: 2 cards x
    $10 = $20 an hour for t-b; proj-a's allocation has ended. No telemetry: the recent average."""
    comp = run([])
    rate = burn.burn_rate(comp, END)
    assert rate.select("tenant", "cost_per_hour", "gpus", "basis").rows() == [("t-b", 20.0, 2.0, "recent average")]


def test_burn_rate_takes_the_last_power_reading():
    """g2 reports 500 W at 23:55 and 23:58 on 10-03 (within max_sample_gap_s = 300 s of 10-04 00:00).
    Live: 0.5 kW x 1.3 x 1.2 x $0.12/kWh (flat) = $0.0936/h for g2 (share 1). Measured energy
    books 500 W x (180 s + 120 s) = 150 kJ = 0.041667 kWh x 1.56 x 0.12 = $0.0078 on p1's 144
    allocated GPU-hours: the energy rate g1 (no reading) is priced at. t-b: g2 10 + 0.0936, g1
    10 + 0.0078 / 144."""
    samples = [{"ts": f"2026-10-03T23:{m}:00Z", "gpu_id": "g2", "util_pct": 90.0, "power_w": 500.0}
               for m in (55, 58)]
    comp = run([], telemetry=samples)
    rate = burn.burn_rate(comp, END).row(0, named=True)
    assert rate["tenant"] == "t-b" and rate["basis"] == "live power" and rate["live_cards"] == 1
    assert rate["cost_per_hour"] == pytest.approx(20.0 + 0.5 * 1.3 * 1.2 * 0.12 + 0.0078 / 144, rel=1e-9)


def test_alerts_fire_at_the_threshold_and_not_a_cent_below():
    """An unmapped owner 'ghost' holds a third card g3 on 10-03 from 00:00 to 02:00: 2 h x $10 =
    $20.00 unattributed. At a $20.00 limit the alert fires; at $20.01 it does not."""
    comp = run([], cards=("g3",), allocations=[{"allocation_id": "x1", "gpu_id": "g3", "owner": "ghost",
                                                "start": "2026-10-03T00:00:00Z", "end": "2026-10-03T02:00:00Z"}])
    assert comp.money.filter(pl.col("dest") == "unattributed")["amount"].sum() == pytest.approx(20.0)

    def check(limit):
        f = alerts.evaluate(comp, budgets.evaluate(comp), Alerts(unattributed_cost=limit))
        return f.filter(pl.col("rule") == "unattributed_cost").row(0, named=True)

    fired = check(20.0)
    assert fired["state"] == "firing" and fired["threshold"] == 20.0 and fired["value"] == pytest.approx(20.0)
    assert check(20.01)["state"] == "ok"


def test_booked_alert_a_cent_below_does_not_fire():
    """proj-a's $720 booked against a $720.01 budget at 100 %: 720.00 < 720.01, no alert."""
    comp = run([{"budget_id": "c", "project": "proj-a", "period_kind": "custom", "amount": 720.01,
                 "start": "2026-10-01T00:00:00Z", "end": "2026-10-04T00:00:00Z"}])
    found = alerts.evaluate(comp, budgets.evaluate(comp), Alerts(booked_over_budget_pct=100))
    assert found.filter(pl.col("rule") == "booked_over_budget")["state"].item() == "ok"


def test_burn_rate_jump_compares_the_last_day_with_the_days_before():
    """proj-a takes a third card g3 on 10-03: t-a pays $240 on 10-01 and 10-02 and $480 on 10-03.
    Last 24 h: 480 / 24 = $20/h; the 48 h before: 480 / 48 = $10/h. +100 % puts the threshold at
    $20/h: fires; +100.1 % ($20.01/h) does not. t-b stays at $10/h: no jump."""
    comp = run([], cards=("g3",), allocations=[{"allocation_id": "a2", "gpu_id": "g3", "owner": "proj-a",
                                                "start": "2026-10-03T00:00:00Z", "end": "2026-10-04T00:00:00Z"}])
    rep = budgets.evaluate(comp)

    def jump(pct, tenant="t-a"):
        f = alerts.evaluate(comp, rep, Alerts(burn_rate_jump_pct=pct))
        return f.filter((pl.col("rule") == "burn_rate_jump") & (pl.col("tenant") == tenant)).row(0, named=True)

    hit = jump(100)
    assert hit["value"] == pytest.approx(20.0) and hit["threshold"] == pytest.approx(20.0)
    assert hit["state"] == "firing"
    assert jump(100.1)["state"] == "ok"
    assert jump(0, "t-b")["value"] == pytest.approx(10.0) and jump(1, "t-b")["state"] == "ok"


def test_pool_idle_rate_without_telemetry_is_unknown_between_bounds():
    """Telemetry for g1 only (util 90 every 5 min): 72 active GPU-hours of 144 available; g2's 72
    allocated hours have none. The idle rate lies between 1 - 144/144 = 0 % and 1 - 72/144 = 50 %:
    at 30 % the check cannot tell (unknown), at 60 % it passes, at 0 % it fires."""
    samples = [{"ts": f"2026-10-0{1 + m // 288}T{(m % 288) * 5 // 60:02d}:{(m % 288) * 5 % 60:02d}:00Z",
                "gpu_id": "g1", "util_pct": 90.0} for m in range(3 * 288)]
    comp = run([], telemetry=samples)

    def idle(pct):
        f = alerts.evaluate(comp, budgets.evaluate(comp), Alerts(pool_idle_rate_pct=pct))
        return f.filter(pl.col("rule") == "pool_idle_rate").row(0, named=True)

    unknown = idle(30)
    assert unknown["state"] == "unknown" and unknown["value"] is None
    assert "between 0.0 % and 50.0 %" in unknown["message"]
    assert idle(60)["state"] == "ok" and idle(0)["state"] == "firing"


def test_scoped_users_see_only_their_budgets_and_cannot_write(tmp_path):
    """alice (t-a) sees t-a's tenant budget and proj-a's; never t-b's or proj-b's. Saving budgets
    as alice is refused in the write path itself; the file is left as it was."""
    rows = [
        {"budget_id": "ta", "tenant": "t-a", "period_kind": "month", "amount": 1.0},
        {"budget_id": "pa", "project": "proj-a", "period_kind": "month", "amount": 1.0},
        {"budget_id": "tb", "tenant": "t-b", "period_kind": "month", "amount": 1.0},
        {"budget_id": "pb", "project": "proj-b", "period_kind": "month", "amount": 1.0},
    ]
    comp = run(rows)
    alice = access.Principal("alice", frozenset({"t-a"}))
    mine = access.scope(comp, alice)
    assert sorted(mine.bundle["budgets"]["budget_id"].to_list()) == ["pa", "ta"]
    assert sorted(status(mine)) == ["pa", "ta"]
    assert sorted(status(comp)) == ["pa", "pb", "ta", "tb"]  # an admin sees all four

    folder = tmp_path / "bundle"
    folder.mkdir()
    (folder / "budgets.csv").write_text("budget_id,tenant,period_kind,amount\nta,t-a,month,1\n")
    before = (folder / "budgets.csv").read_bytes()
    edited = make_frame("budgets", [{"budget_id": "tb", "tenant": "t-b", "period_kind": "month", "amount": 9.0}])
    with pytest.raises(access.AccessError, match="administrators only"):
        uploads.save_budgets(folder, edited, principal=alice)
    assert (folder / "budgets.csv").read_bytes() == before
    admin = access.Principal("root", None)
    saved = uploads.save_budgets(folder, edited, principal=admin)
    assert saved.written == 1 and saved.removed == 0
    assert "tb,t-b,,month,9.0" in (folder / "budgets.csv").read_text()


BAD_BUDGETS = """budget_id,tenant,project,period_kind,amount,currency,boundary,categories,start,end
ok-1,t-a,,month,100,,,power ; depreciation,,
both,t-a,proj-a,month,100,,,,,
neither,,,quarter,100,,,,,
kind,t-a,,weekly,100,,,,,
zero,t-a,,month,0,,,,,
custom,t-a,,custom,100,,,,2026-10-01T00:00:00Z,
cats,t-a,,month,100,,,power;gpus,,
bound,t-a,,month,100,,wide,,,
needcats,t-a,,month,100,,custom,,,
money,t-a,,month,100,EUR,,,,
ok-2,,proj-b,custom,50.5,usd,narrow,,2026-10-01T00:00:00Z,2026-10-15T00:00:00Z
"""


def test_budget_rows_are_validated_with_row_and_reason(tmp_path):
    """Each bad row is rejected by number with its reason; the good rows stay (categories tidied)."""
    (tmp_path / "allocations.csv").write_text("allocation_id,gpu_id,start,end,owner\n"
                                              "a1,g1,2026-10-01T00:00:00Z,2026-10-02T00:00:00Z,x\n")
    (tmp_path / "budgets.csv").write_text(BAD_BUDGETS)
    b = read_bundle(tmp_path)
    assert b["budgets"]["budget_id"].to_list() == ["ok-1", "ok-2"]
    assert b["budgets"]["categories"].to_list() == ["power;depreciation", None]
    assert b["budgets"]["currency"].to_list() == ["USD", "USD"]
    reasons = {r["row"]: r["reason"] for r in b.rejected.filter(pl.col("table") == "budgets").iter_rows(named=True)}
    assert set(reasons) == {2, 3, 4, 5, 6, 7, 8, 9, 10}
    # Each reason ends with the budget_id as written, so the row can be listed by name later.
    ids = {2: "both", 3: "neither", 4: "kind", 5: "zero", 6: "custom", 7: "cats", 8: "bound", 9: "needcats",
           10: "money"}
    assert all(reasons[n].endswith(f" (budget_id {i})") for n, i in ids.items())
    reasons = {n: r.removesuffix(f" (budget_id {ids[n]})") for n, r in reasons.items()}
    assert "give one of them" in reasons[2]
    assert reasons[3] == "budget needs a tenant or a project"
    assert "unknown period_kind 'weekly'" in reasons[4]
    assert reasons[5] == "amount 0 must be above 0"
    assert reasons[6] == "period_kind custom needs a start and an end"
    assert "unknown categories 'gpus'" in reasons[7]
    assert "unknown boundary 'wide'" in reasons[8]
    assert reasons[9] == "boundary custom needs a categories list"
    assert reasons[10] == "currency EUR differs from USD and no rate is configured"


def test_budgets_ingest_idempotently_and_read_back(tmp_path):
    """A budgets file goes into the store like any table: twice is once; a changed amount is a
    conflict unless replaced."""
    bundle = make_bundle(**ledger([{"budget_id": "x", "tenant": "t-a", "period_kind": "month", "amount": 10.0}]))
    db = tmp_path / "s.duckdb"
    assert store.ingest(db, bundle).inserted["budgets"] == 1
    assert store.ingest(db, bundle).unchanged["budgets"] == 1
    back = store.load_bundle(db)["budgets"]
    assert back.select("budget_id", "tenant", "amount").rows() == [("x", "t-a", 10.0)]
    changed = make_bundle(budgets=[{"budget_id": "x", "tenant": "t-a", "period_kind": "month", "amount": 12.0}])
    with pytest.raises(store.StoreConflict):
        store.ingest(db, changed)
    assert store.ingest(db, changed, replace=True).replaced["budgets"] == 1


def test_unknown_is_never_zero():
    """A budget counting a category the report's boundary leaves out, one in a currency without
    a rate, and one of a project nobody owns: every figure null, status unknown, reason given."""
    comp = run([
        {"budget_id": "narrow", "tenant": "t-a", "period_kind": "month", "amount": 10.0, "boundary": "narrow"},
        {"budget_id": "nobody", "project": "proj-z", "period_kind": "month", "amount": 10.0},
    ], config={**CONFIG, "boundary": {"name": "rental"}})
    s = status(comp)
    for key in ("narrow", "nobody"):
        assert s[key]["status"] == "unknown" and s[key]["booked"] is None and s[key]["projected"] is None
    assert "leaves out depreciation, power" in s["narrow"]["note"]
    assert "proj-z" in s["nobody"]["note"]
    eur = compute(make_bundle(**ledger([{"budget_id": "eur", "tenant": "t-a", "period_kind": "month",
                                         "amount": 10.0, "currency": "EUR"}])), parse_config(CONFIG))
    assert status(eur)["eur"]["amount"] is None and "EUR" in status(eur)["eur"]["note"]
    rated = compute(eur.bundle, parse_config({**CONFIG, "currency_rates": {"EUR": 1.5}}))
    assert status(rated)["eur"]["amount"] == 15.0


def test_sample_fleet_has_one_owner_over_budget_and_the_cli_says_so(comp):
    """The committed sample (fleet-week) carries five budgets; rlhf's $9,000 month is the one
    projected over. `ailedger alerts` exits 1 and its JSON payload names it."""
    s = status(comp)
    assert sorted(s) == ["bud-llm-pretrain-sprint", "bud-product-quarter", "bud-research-month", "bud-rlhf-month",
                         "bud-search-energy-month"]
    assert [k for k, r in s.items() if r["status"] == "over"] == ["bud-rlhf-month"]
    from tests.dashboard_support import SAMPLE

    res = CliRunner().invoke(main, ["alerts", str(SAMPLE), "--json"])
    assert res.exit_code == 1, res.output
    data = json.loads(res.output)
    assert data["firing"] == 1 and data["as_of"] == "2026-10-12T00:00:00Z" and data["currency"] == "USD"
    assert data["burn_rate_at"] == data["as_of"]  # the clock is past the data: its end
    firing = [a for a in data["alerts"] if a["state"] == "firing"]
    assert firing[0]["rule"] == "forecast_over_budget" and firing[0]["budget_id"] == "bud-rlhf-month"
    assert firing[0]["threshold"] == 9000.0 and firing[0]["value"] > 9000.0
    text = CliRunner().invoke(main, ["alerts", str(SAMPLE)])
    assert text.exit_code == 1 and "FIRING" in text.output and "bud-rlhf-month" in text.output
    quiet = CliRunner().invoke(main, ["budgets", str(SAMPLE), "--as-of", "2026-10-09"])
    assert quiet.exit_code == 0 and "budgets as of 2026-10-08 22:00Z" in quiet.output


def test_alerts_exit_zero_when_nothing_fires(tmp_path):
    """The sample with the forecast check off: nothing fires, exit 0."""
    from tests.dashboard_support import copy_sample

    folder = copy_sample(tmp_path / "fw")
    cfg = folder / "ailedger.toml"
    cfg.write_text(cfg.read_text() + '\n[alerts]\nforecast_over_budget = "off"\n')
    assert load_config(cfg).alerts.forecast_over_budget == "off"
    res = CliRunner().invoke(main, ["alerts", str(folder)])
    assert res.exit_code == 0 and "0 firing" in res.output


def test_unit_cost_jump_of_a_model_fires_at_its_threshold():
    """proj-a's g1 serves model m1 (workload inference) for the three days: $240 a day, as above.
    Requests: 1,500,000 + 500,000 tokens a day on 10-01 and 10-02, 1,000,000 on 10-03 (input +
    output). Last 24 h (10-03): 240 / 1M x 1M = $240 per 1M tokens; the 48 h before: 480 / 4M =
    $120 per 1M. +100 % puts the threshold at exactly $240: fires; +100.1 % ($240.12) does not.
    A model with no tokens in a window cannot be priced: unknown, not zero."""
    served = [{"allocation_id": "a1", "gpu_id": "g1", "start": "2026-10-01T00:00:00Z",
               "end": "2026-10-04T00:00:00Z", "owner": "proj-a", "workload": "inference", "model": "m1"}]
    reqs = [{"request_id": f"r{d}", "ts": f"2026-10-0{d}T12:00:00Z", "owner": "proj-a", "model": "m1",
             "input_tokens": 1_500_000 if d < 3 else 600_000, "output_tokens": 500_000 if d < 3 else 400_000}
            for d in (1, 2, 3)]
    reqs.append({"request_id": "q1", "ts": "2026-10-03T06:00:00Z", "owner": "proj-b", "model": "m2",
                 "input_tokens": 10, "output_tokens": 10})
    bundle = ledger([], requests=reqs)
    bundle["allocations"] = [a for a in bundle["allocations"] if a["allocation_id"] != "a1"] + served
    comp = compute(make_bundle(**bundle), parse_config(CONFIG))
    rep = budgets.evaluate(comp)

    def check(pct):
        f = alerts.evaluate(comp, rep, Alerts(model_cost_per_million_up_pct=pct))
        return {r["model"]: r for r in f.filter(pl.col("rule") == "model_cost_per_million_up").iter_rows(named=True)}

    hit = check(100)
    assert hit["m1"]["value"] == pytest.approx(240.0) and hit["m1"]["threshold"] == pytest.approx(240.0)
    assert hit["m1"]["state"] == "firing" and hit["m1"]["unit"] == "USD/1M tokens"
    assert check(100.1)["m1"]["state"] == "ok"
    assert hit["m2"]["state"] == "unknown" and hit["m2"]["value"] is None  # no tokens before 10-03


def test_burn_rate_reads_the_clock_while_budgets_book_whole_days():
    """A period configured to run to 10-06 with data to 10-04 and the clock at 10-03 15:30: budgets
    count whole days (as_of 10-03 00:00), the burn rate reads 15:30, when proj-a and proj-b each
    hold one card at $10: t-a $10/h, t-b $10/h. An explicit --as-of time wins over the clock."""
    cfg = {"period": {**CONFIG["period"], "end": datetime(2026, 10, 6, tzinfo=timezone.utc)}}
    comp = run([], config=cfg)
    now = datetime(2026, 10, 3, 15, 30, tzinfo=timezone.utc)
    rep = budgets.evaluate(comp, now=now)
    assert rep.as_of == datetime(2026, 10, 3, tzinfo=timezone.utc) and rep.live_at == now
    rate = burn.burn_rate(comp, rep.live_at)
    assert rate.select("tenant", "cost_per_hour").sort("tenant").rows() == [("t-a", 10.0), ("t-b", 10.0)]
    at = datetime(2026, 10, 2, 6, tzinfo=timezone.utc)
    assert budgets.evaluate(comp, as_of=at, now=now).live_at == at
    # The clock past the period: the end of it, as for as_of.
    late = budgets.evaluate(comp, now=datetime(2026, 12, 1, tzinfo=timezone.utc))
    assert late.live_at == late.as_of == datetime(2026, 10, 6, tzinfo=timezone.utc)


def test_admin_saves_budgets_into_a_store(tmp_path):
    """Saving edited budgets into a store ingests the changed rows only (replace): x's amount 10 ->
    12 is one row written, y new is another, z as it was is not rewritten. Times the editor hands
    back without a zone are UTC. A scoped user is refused before anything is read."""
    db = tmp_path / "s.duckdb"
    rows = [{"budget_id": "x", "tenant": "t-a", "period_kind": "month", "amount": 10.0},
            {"budget_id": "z", "project": "proj-b", "period_kind": "month", "amount": 5.0}]
    store.ingest(db, make_bundle(**ledger(rows)))
    current = store.load_bundle(db, tables=["budgets"])["budgets"]
    edited = pl.DataFrame({
        "budget_id": ["x", "z", "y"], "tenant": ["t-a", None, None], "project": [None, "proj-b", "proj-a"],
        "period_kind": ["month", "month", "custom"], "amount": [12.0, 5.0, 300.0],
        "start": [None, None, datetime(2026, 10, 1)], "end": [None, None, datetime(2026, 10, 8)],
    })
    with pytest.raises(access.AccessError):
        uploads.save_budgets(db, edited, current, principal=access.Principal("alice", frozenset({"t-a"})))
    saved = uploads.save_budgets(db, edited, current, principal=access.Principal("root", None))
    assert saved.written == 2
    back = store.load_bundle(db, tables=["budgets"])["budgets"].sort("budget_id")
    assert back.select("budget_id", "amount").rows() == [("x", 12.0), ("y", 300.0), ("z", 5.0)]
    assert back.filter(pl.col("budget_id") == "y")["end"].item() == datetime(2026, 10, 8, tzinfo=timezone.utc)
    bad = edited.with_columns(pl.lit(-1.0).alias("amount"))
    with pytest.raises(uploads.UploadError, match="row 1: amount -1"):
        uploads.save_budgets(db, bad, current, principal=access.Principal("root", None))


def test_the_burn_down_ends_on_the_projected_total_and_its_bounds():
    """proj-b's custom budget above: the path's booked days 240, 480, 720; then committed (960,
    spread 480 a day over the two days ahead) is above the forecast (240 a day): 1,200, 1,680, the
    projected total. Zero-width bands (a constant series) sit on the line."""
    comp = run([{"budget_id": "b", "project": "proj-b", "period_kind": "custom", "amount": 2000.0,
                 "start": "2026-10-01T00:00:00Z", "end": "2026-10-06T00:00:00Z"}])
    path = budgets.evaluate(comp).path
    assert path["spent"].to_list() == [240.0, 480.0, 720.0, 1200.0, 1680.0]
    assert path["kind"].to_list() == ["booked"] * 3 + ["forecast"] * 2
    assert path["spent_hi95"].to_list() == path["spent"].to_list() == path["spent_lo80"].to_list()
    assert path["remaining"][-1] == 2000.0 - 1680.0


def test_one_day_of_history_leaves_the_bands_unknown_not_zero_wide():
    """Data of one day (10-01, $240 for proj-a): October's forecast is 30 x 240 = 7,200 with no
    spread to estimate: the interval bounds are null, the path's bands too; the point stands."""
    cfg = {"period": {**CONFIG["period"], "end": datetime(2026, 10, 2, tzinfo=timezone.utc)}}
    comp = run([{"budget_id": "oct", "project": "proj-a", "period_kind": "month", "amount": 9000.0}], config=cfg)
    rep = budgets.evaluate(comp)
    r = rep.status.row(0, named=True)
    assert r["booked"] == 240.0 and r["forecast"] == 7200.0 and r["projected"] == 7440.0
    assert r["hi80"] is None and r["lo95"] is None and r["status"] == "within"
    assert rep.path["spent"][-1] == 7440.0 and rep.path["spent_hi80"].null_count() == rep.path.height


def test_a_reservation_in_a_pool_without_a_rate_leaves_the_projection_unknown():
    """proj-a reserves g9 in pool p2 from 10-05, a pool nobody used in the last 7 days (no rate):
    what that costs is unknown, so the projected total and status are unknown, not booked +
    forecast; booked (720) and forecast (28 x 240 = 6,720) still show."""
    b = ledger([{"budget_id": "oct", "project": "proj-a", "period_kind": "month", "amount": 9000.0}],
               allocations=[{"allocation_id": "r9", "gpu_id": "g9", "owner": "proj-a",
                             "start": "2026-10-05T00:00:00Z", "end": "2026-10-07T00:00:00Z"}])
    b["inventory"].append({"gpu_id": "g9", "pool": "p2"})
    comp = compute(make_bundle(**b), parse_config(CONFIG))
    r = status(comp)["oct"]
    assert r["booked"] == 720.0 and r["forecast"] == 6720.0 and r["committed"] is None
    assert r["projected"] is None and r["hi95"] is None and r["status"] == "unknown"
    assert "no recent rate" in r["note"]
    assert budgets.evaluate(comp).path.height == 0


def test_burn_down_chart_draws_the_path():
    """The chart of proj-b's budget ($2,000): budget left 1,760, 1,520, 1,280 booked (solid),
    then 800 and 320 forecast (dashed, joined to the last booked day); bands on the line; zero
    marked. An unknown budget draws the empty chart with its reason."""
    from cost_engine import charts

    comp = run([{"budget_id": "b", "project": "proj-b", "period_kind": "custom", "amount": 2000.0,
                 "start": "2026-10-01T00:00:00Z", "end": "2026-10-06T00:00:00Z"}])
    fig = json.loads(charts.budget_burndown(budgets.evaluate(comp).path, 2000.0, "b", "USD", "UTC").to_json())
    traces = {t.get("name"): t for t in fig["data"]}
    assert traces["booked"]["y"] == [1760.0, 1520.0, 1280.0, None, None]
    assert traces["forecast"]["y"] == [None, None, 1280.0, 800.0, 320.0]
    assert traces["80 % interval"]["y"] == [1760.0, 1520.0, 1280.0, 800.0, 320.0]
    assert fig["layout"]["shapes"][0]["y0"] == 0
    empty = json.loads(charts.budget_burndown(budgets.evaluate(comp).path.clear(), None, "x").to_json())
    assert empty["data"] == [] and "see its note" in empty["layout"]["annotations"][0]["text"]


def test_a_folder_given_as_dot_dotdot_or_with_a_slash_reads_like_any_folder(tmp_path, monkeypatch):
    """Issue 43 (6): `report .`, `budgets .`, `alerts .` (no config inside the folder) exited 2 with
    "PosixPath('.') has an empty name". Each spelling of the folder now gives what its name gives:
    one allocation of proj-a, 2026-10-01 00:00 .. 10-02 00:00, no rates, and a month budget of $100."""
    folder = tmp_path / "bundle"
    (folder / "sub").mkdir(parents=True)
    (folder / "allocations.csv").write_text("allocation_id,gpu_id,start,end,owner\n"
                                            "a1,g1,2026-10-01T00:00:00Z,2026-10-02T00:00:00Z,proj-a\n")
    (folder / "budgets.csv").write_text("budget_id,project,period_kind,amount\nm,proj-a,month,100\n")
    runner = CliRunner()

    def same(out: str) -> dict:  # all but the source as given
        return {k: v for k, v in json.loads(out).items() if k != "source"}

    # Every spelling through `budgets`; `report` and `alerts` with "." (the same lookup).
    spellings = {"budgets": (".", "./", "../bundle/"), "report": (".",), "alerts": (".",)}
    for cmd, given in spellings.items():
        named = runner.invoke(main, [cmd, str(folder), "--json"])
        assert named.exit_code == 0, named.output
        monkeypatch.chdir(folder)
        for spelling in given:
            res = runner.invoke(main, [cmd, spelling, "--json"])
            assert res.exit_code == 0, (cmd, spelling, res.output)
            assert same(res.output) == same(named.output)
        monkeypatch.chdir(tmp_path)
    monkeypatch.chdir(folder / "sub")
    res = runner.invoke(main, ["budgets", "..", "--json"])
    assert res.exit_code == 0, res.output
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(main, ["budgets", str(folder)])
    assert "m  project proj-a  month 2026-10-01..2026-10-31" in res.output


REFUSED = {  # budget_id -> what the row did wrong (BAD_BUDGETS, plus a negative amount)
    "both": "give one of them", "neither": "budget needs a tenant or a project", "kind": "unknown period_kind",
    "zero": "amount 0 must be above 0", "custom": "custom needs a start and an end",
    "cats": "unknown categories 'gpus'",
    "bound": "unknown boundary 'wide'", "needcats": "boundary custom needs a categories list",
    "money": "currency EUR differs from USD and no rate is configured", "minus": "amount -5 must be above 0",
}


def refused_folder(tmp_path):
    folder = tmp_path / "refused"
    folder.mkdir()
    (folder / "allocations.csv").write_text("allocation_id,gpu_id,start,end,owner\n"
                                            "a1,g1,2026-10-01T00:00:00Z,2026-10-02T00:00:00Z,t-a\n")
    (folder / "budgets.csv").write_text(BAD_BUDGETS + "minus,t-a,,month,-5,,,,,\n,t-a,,month,7,,,,,\n")
    return folder


def test_every_rejected_budget_row_is_listed_unknown_on_every_surface(tmp_path):
    """Issue 43 (1): the ten refused rows (EUR without a rate, a misspelt category, a negative
    amount, ...) and one without a budget_id used to vanish: `alerts` said "0 firing, 0 unknown".
    Now each is a budget with status unknown and the file, row and reason in its note; each is
    an unknown forecast_over_budget check ("cannot be told"); nothing fires, so `alerts` exits
    0 as documented. 2 valid + 11 refused = 13 budgets; 13 checks, 11 unknown."""
    folder = refused_folder(tmp_path)
    res = CliRunner().invoke(main, ["alerts", str(folder), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert (data["firing"], data["unknown"], data["checked"]) == (0, 11, 13)
    unknown = {a["budget_id"]: a for a in data["alerts"] if a["state"] == "unknown"}
    assert set(unknown) == {*REFUSED, None}
    for bid, why in REFUSED.items():
        assert unknown[bid]["rule"] == "forecast_over_budget" and unknown[bid]["value"] is None
        assert unknown[bid]["message"].startswith("cannot be told: rejected (budgets.csv row ")
        assert why in unknown[bid]["message"] and "(budget_id" not in unknown[bid]["message"]
    assert unknown[None]["message"].endswith("(budgets.csv row 13): missing required budget_id")
    rows = {b["budget_id"]: b for b in data["budgets"]}
    assert rows["money"]["status"] == "unknown" and rows["money"]["amount"] is None
    assert rows["money"]["note"] == ("rejected (budgets.csv row 10): currency EUR differs from USD and no rate "
                                     "is configured")
    assert rows["ok-1"]["status"] == "within"
    text = CliRunner().invoke(main, ["alerts", str(folder)])
    assert text.exit_code == 0 and "0 firing, 11 unknown, 13 checked" in text.output
    assert "UNKNOWN  forecast_over_budget       budget minus (rejected row): cannot be told: rejected " \
           "(budgets.csv row 12): amount -5 must be above 0" in text.output
    shown = CliRunner().invoke(main, ["budgets", str(folder)])
    assert shown.exit_code == 0
    assert "  minus  [unknown (rejected (budgets.csv row 12): amount -5 must be above 0)]" in shown.output
    assert "  (no budget_id)  [unknown (rejected (budgets.csv row 13): missing required budget_id)]" in shown.output
    as_json = json.loads(CliRunner().invoke(main, ["budgets", str(folder), "--json"]).output)
    assert [b["budget_id"] for b in as_json["budgets"]] == [
        "ok-1", "ok-2", "both", "neither", "kind", "zero", "custom", "cats", "bound", "needcats", "money", "minus",
        None]


def test_a_store_lists_its_rejected_budget_rows_until_they_are_fixed(tmp_path):
    """The same rows through a store: its rejected table keeps them, so `budgets` lists the 11
    refused rows as unknown. A later ingest with "money" fixed (a USD amount) makes it a budget
    like any other: listed once, evaluated, no longer unknown."""
    folder = refused_folder(tmp_path)
    db = tmp_path / "s.duckdb"
    assert CliRunner().invoke(main, ["ingest", str(folder), "--db", str(db)]).exit_code == 0
    data = json.loads(CliRunner().invoke(main, ["budgets", str(db), "--json"]).output)
    assert sum(b["status"] == "unknown" for b in data["budgets"]) == 11
    (folder / "budgets.csv").write_text("budget_id,tenant,period_kind,amount\nmoney,t-a,month,100\n")
    assert CliRunner().invoke(main, ["ingest", str(folder), "--db", str(db)]).exit_code == 0
    data = json.loads(CliRunner().invoke(main, ["budgets", str(db), "--json"]).output)
    money = [b for b in data["budgets"] if b["budget_id"] == "money"]
    assert len(money) == 1 and money[0]["status"] == "within" and money[0]["amount"] == 100.0
    assert sum(b["status"] == "unknown" for b in data["budgets"]) == 10


def test_a_budget_whose_categories_the_boundary_leaves_out_is_unknown_not_zero():
    """Issue 43 (2): `categories = power` with an empty boundary under a rental report: power is
    never booked under rental, so the budget's cost cannot be seen; it read booked 0.00,
    projected 0.00, within. Now unknown with the reason; so is a budget listing a category its
    own boundary does not hold (energy_only, depreciation), which counts nothing at all. The
    same power budget under fully_loaded is known: proj-a holds g1 24 h a day at $10 rental,
    no telemetry, so no power: booked 3 x 0 = 0.00, a true zero."""
    rows = [
        {"budget_id": "pw", "project": "proj-a", "period_kind": "month", "amount": 10.0, "categories": "power"},
        {"budget_id": "own", "project": "proj-a", "period_kind": "month", "amount": 10.0, "boundary": "energy_only",
         "categories": "depreciation"},
        {"budget_id": "rent", "project": "proj-a", "period_kind": "month", "amount": 10_000.0,
         "categories": "gpu_rental"},
    ]
    s = status(run(rows, config={**CONFIG, "boundary": {"name": "rental"}}))
    assert s["pw"]["status"] == "unknown" and s["pw"]["booked"] is None and s["pw"]["projected"] is None
    assert "the report's boundary (rental) leaves out power" in s["pw"]["note"]
    assert s["own"]["status"] == "unknown" and s["own"]["booked"] is None
    assert "its boundary (energy_only) does not hold depreciation" in s["own"]["note"]
    # gpu_rental under rental: 3 days x 240 booked, 28 more at 240 = 7,440 projected.
    assert (s["rent"]["status"], s["rent"]["booked"], s["rent"]["projected"]) == ("within", 720.0, 7440.0)
    loaded = status(run(rows, config={**CONFIG, "boundary": {"name": "fully_loaded"}}))
    assert loaded["pw"]["status"] == "within" and loaded["pw"]["booked"] == 0.0
    found = alerts.evaluate(run(rows, config={**CONFIG, "boundary": {"name": "rental"}}),
                            budgets.evaluate(run(rows, config={**CONFIG, "boundary": {"name": "rental"}})))
    states = {r["budget_id"]: r["state"] for r in found.iter_rows(named=True)}
    assert states == {"pw": "unknown", "own": "unknown", "rent": "ok"}


SACCT = """JobID|Account|User|Partition|Submit|Start|End|State|AllocTRES|ReqTRES|NodeList|Reason
2001|acct-a|u|gpu|2026-10-01T00:00:00|2026-10-01T00:00:00|2026-10-01T12:00:00|COMPLETED|gres/gpu=1|gres/gpu=1|gpu001|None
2002|acct-b|u|gpu|2026-10-01T06:00:00|2026-10-01T06:00:00|Unknown|RUNNING|gres/gpu=2|gres/gpu=2|gpu001|None
"""


def test_burn_rate_counts_jobs_the_export_closed_as_running(tmp_path):
    """Issue 43 (5): sacct prints End "Unknown" for a RUNNING job; `import --end-at` ends it at
    the export time (10-01 18:00 UTC), where the data stops. The burn rate read after that (the
    data's end, 10-02 00:00) dropped it. Now the jobs ending where their source's allocations
    stop count as running: acct-b's 2 cards x $10 per GPU-hour = $20/h (p1's rate: $360 over
    12 + 2 x 12 = 36 allocated GPU-hours = $10). acct-a's job finished at 12:00 (not where the
    data stops): not counted. At --as-of 10-01T12:00Z (inside the data) the same 2 cards run."""
    from cost_engine.config import parse_config as cfg_of
    from cost_engine.importers import ImportOptions, import_files, write_bundle

    (tmp_path / "sacct.txt").write_text(SACCT)
    cfg = cfg_of({"period": {"source_timezone": "UTC", "timezone": "UTC"}})
    res = import_files("slurm", [str(tmp_path / "sacct.txt")], cfg,
                       options=ImportOptions(end_at=datetime(2026, 10, 1, 18, tzinfo=timezone.utc)))
    folder = tmp_path / "b"
    write_bundle(res, folder, cfg, replace=False)
    ends = res.frames["allocations"].filter(pl.col("owner") == "acct-b")["end"].to_list()
    assert ends == [datetime(2026, 10, 1, 18, tzinfo=timezone.utc)] * 2  # how the export marks them: its time
    (folder / "inventory.csv").write_text("gpu_id,pool\n" + "".join(f"gpu001:gpu{i},p1\n" for i in range(3)))
    (folder / "rates.csv").write_text("pool,price_per_gpu_hour\np1,10\n")
    (folder / "ailedger.toml").write_text('[period]\ntimezone = "UTC"\n')
    data = json.loads(CliRunner().invoke(main, ["budgets", str(folder), "--json"]).output)
    assert data["burn_rate_at"] == "2026-10-02T00:00:00Z"
    assert [(r["tenant"], r["cost_per_hour"], r["gpus"], r["allocations"]) for r in data["burn_rate"]] == [
        ("acct-b", 20.0, 2.0, 2)]
    past = json.loads(CliRunner().invoke(main, ["budgets", str(folder), "--json", "--as-of",
                                                "2026-10-01T12:00:00Z"]).output)
    assert [(r["tenant"], r["gpus"]) for r in past["burn_rate"]] == [("acct-b", 2.0)]
