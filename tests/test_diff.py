"""Why the cost changed: hand-computed two-period cases where one factor moves and the whole change
lands in its effect, seed 000 (same requests, output doubled), new and gone owners, unknown
efficiency, and a hypothesis property that the effects add up to the change.

Base period: 2026-10-01 (UTC day), new period: 2026-10-02. Every bundle prices cards with a
`rates` row (boundary `rental`, $/GPU-hour x in-service hours) unless said otherwise; cards are
in service only while held where a case wants no idle line.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cost_engine import compare, diff
from cost_engine.engine import compute
from tests.helpers import make_bundle, make_config

D1 = datetime(2026, 10, 1, tzinfo=timezone.utc)
D2 = D1 + timedelta(days=1)
D3 = D1 + timedelta(days=2)
BASE, NEW = (D1, D2), (D2, D3)


def run(tables: dict, by: str = "tenant", **sections) -> diff.Diff:
    sections.setdefault("boundary", {"name": "rental"})
    cfg = make_config(**sections)
    bundle = make_bundle(**tables)
    a = compute(bundle, compare.period_config(cfg, BASE))
    b = compute(bundle, compare.period_config(cfg, NEW))
    d = compare.compare_periods(a, b, by=by)
    assert_exact(d)
    return d


def assert_exact(d: diff.Diff) -> None:
    """The effects add up to the change, over the fleet and for every owner line."""
    scale = max(1.0, abs(d.base_total), abs(d.new_total))
    assert abs(d.residual) <= 1e-9 * scale
    assert float(d.effects["value"].fill_null(0).sum()) == pytest.approx(d.change, abs=1e-9 * scale)
    keys = d.effects["effect"].to_list()
    for r in d.owners.iter_rows(named=True):
        assert sum(r[k] or 0.0 for k in keys) == pytest.approx(r["change"], abs=1e-9 * scale)
    assert float(d.owners["change"].sum()) == pytest.approx(d.change, abs=1e-9 * scale)


def effects(d: diff.Diff) -> dict[str, float | None]:
    return {r["effect"]: r["value"] for r in d.effects.iter_rows(named=True)}


def only(d: diff.Diff, effect: str, value: float) -> None:
    """The whole change is `value` and all of it is `effect`; every other effect is 0."""
    assert d.change == pytest.approx(value)
    for k, v in effects(d).items():
        assert (v or 0.0) == pytest.approx(value if k == effect else 0.0, abs=1e-9), k


def telemetry(gpu: str, start: datetime, hours: float, util: float) -> list[dict]:
    """A sample every 5 minutes (the default max_sample_gap_s = 300 s)."""
    return [{"ts": start + timedelta(minutes=5 * i), "gpu_id": gpu, "util_pct": util} for i in range(int(hours * 12))]


def card(gpu: str, start: datetime, end: datetime, pool: str = "p", acc: str = "A100") -> dict:
    return {"gpu_id": gpu, "pool": pool, "accelerator": acc, "in_service_start": start, "in_service_end": end}


def alloc(aid: str, gpu: str, start: datetime, end: datetime, owner: str = "team", **kw) -> dict:
    return {"allocation_id": aid, "gpu_id": gpu, "start": start, "end": end, "owner": owner, **kw}


def rate(price: float, pool: str = "p", start: datetime | None = None, end: datetime | None = None) -> dict:
    return {"pool": pool, "price_per_gpu_hour": price, "start": start, "end": end}


# ------------------------------------------------------------------------------------- GPU time


def test_volume_only():
    """Base: 12 h held at 80 % util on a card in service only then; new: 24 h at 80 %. $2/GPU-h.
    Cost 12 x 2 = $24 -> 24 x 2 = $48: +$24. Efficiency (active / covered) is 1 in both, one
    pool, same price: the whole +$24 is volume."""
    d = run({
        "inventory": [card("g1", D1, D1 + timedelta(hours=12)), card("g2", D2, D3)],
        "allocations": [alloc("a1", "g1", D1, D1 + timedelta(hours=12)), alloc("a2", "g2", D2, D3)],
        "rates": [rate(2.0)],
        "telemetry": telemetry("g1", D1, 12, 80) + telemetry("g2", D2, 24, 80),
    })
    only(d, "volume", 24.0)
    assert d.owner("team")["base_allocated_gpu_hours"] == pytest.approx(12.0)
    assert d.owner("team")["new_allocated_gpu_hours"] == pytest.approx(24.0)


def test_efficiency_only():
    """Base: 12 h held, active all 12 h. New: 24 h held, active the first 12 h, 0 % after.
    Active hours 12 and 12: the work is the same, the hours held per active hour went from 1 to 2.
    Cost $24 -> $48 (rate $2): W = H x eta = 12 x 1 = 24 x 0.5 = 12, so volume 0 and the whole
    +$24 is efficiency."""
    d = run({
        "inventory": [card("g1", D1, D1 + timedelta(hours=12)), card("g2", D2, D3)],
        "allocations": [alloc("a1", "g1", D1, D1 + timedelta(hours=12)), alloc("a2", "g2", D2, D3)],
        "rates": [rate(2.0)],
        "telemetry": telemetry("g1", D1, 12, 80) + telemetry("g2", D2, 12, 80)
        + telemetry("g2", D2 + timedelta(hours=12), 12, 0),
    })
    only(d, "efficiency", 24.0)
    row = d.owner("team")
    assert row["base_active_gpu_hours"] == pytest.approx(12.0)
    assert row["new_active_gpu_hours"] == pytest.approx(12.0)


def test_price_only():
    """The same card held 24 h both days at 80 %; the rate goes from $2 (day 1) to $3 (day 2).
    $48 -> $72: +$24, all price (cost per allocated GPU-hour of gpu_rental in pool p)."""
    d = run({
        "inventory": [card("g1", D1, D3)],
        "allocations": [alloc("a1", "g1", D1, D3)],
        "rates": [rate(2.0, start=D1, end=D2), rate(3.0, start=D2, end=D3)],
        "telemetry": telemetry("g1", D1, 48, 80),
    })
    only(d, "price", 24.0)
    top = diff.top_elements(d, "price", 1).row(0, named=True)
    assert (top["pool"], top["category"], top["price"]) == ("p", "gpu_rental", pytest.approx(24.0))


def test_mix_only():
    """Day 1 on an A100 of pool a ($2/h), day 2 on an H100 of pool b ($4/h), 24 h each, 80 %.
    $48 -> $96. Hours, efficiency and each pool's price are unchanged; pool a's share went 1 -> 0
    (-$48) and pool b's 0 -> 1 (+$96): the whole +$48 is mix."""
    d = run({
        "inventory": [card("g1", D1, D2, pool="a", acc="A100"), card("g2", D2, D3, pool="b", acc="H100")],
        "allocations": [alloc("a1", "g1", D1, D2), alloc("a2", "g2", D2, D3)],
        "rates": [rate(2.0, pool="a"), rate(4.0, pool="b")],
        "telemetry": telemetry("g1", D1, 24, 80) + telemetry("g2", D2, 24, 80),
    })
    only(d, "mix", 48.0)
    by_pool = {r["pool"]: r["mix"] for r in d.elements.filter(pl.col("chain") == "gpu").iter_rows(named=True)}
    assert by_pool == pytest.approx({"a": -48.0, "b": 96.0})


def test_idle_only_separate():
    """The team holds g1 all both days ($48 a day). A second card g2 enters service on day 2 and
    is never held: $48 of unallocated capacity on the idle line (idle = separate). Total $48 ->
    $96: +$48, all idle; the team's own cost does not move."""
    d = run({
        "inventory": [card("g1", D1, D3), card("g2", D2, D3)],
        "allocations": [alloc("a1", "g1", D1, D3)],
        "rates": [rate(2.0)],
        "telemetry": telemetry("g1", D1, 48, 80),
    })
    only(d, "idle", 48.0)
    assert d.owner("team")["change"] == pytest.approx(0.0)
    idle = d.owners.filter(pl.col("kind") == "idle").row(0, named=True)
    assert (idle["base_cost"], idle["new_cost"]) == pytest.approx((0.0, 48.0))


def test_idle_only_proportional():
    """Same fleet under idle = proportional: g2's $48 of day 2 is charged to the pool's only
    holder. The team's cost $48 -> $96; its idle chargeback per allocated hour went 0 -> $2:
    the whole +$48 is idle, on the team's line."""
    d = run({
        "inventory": [card("g1", D1, D3), card("g2", D2, D3)],
        "allocations": [alloc("a1", "g1", D1, D3)],
        "rates": [rate(2.0)],
        "telemetry": telemetry("g1", D1, 48, 80),
    }, allocation={"idle": "proportional"})
    only(d, "idle", 48.0)
    assert d.owner("team")["idle"] == pytest.approx(48.0)


def test_direct_only():
    """A direct cost (category other, owner team) of $10 on day 1 and $30 on day 2; the team's
    card time is the same both days ($48). +$20, all direct."""
    d = run({
        "inventory": [card("g1", D1, D3)],
        "allocations": [alloc("a1", "g1", D1, D3)],
        "rates": [rate(2.0)],
        "costs": [{"cost_id": "c1", "category": "other", "amount": 10.0, "start": D1, "end": D2, "owner": "team",
                   "source": "scheduler"},
                  {"cost_id": "c2", "category": "other", "amount": 30.0, "start": D2, "end": D3, "owner": "team",
                   "source": "scheduler"}],
        "telemetry": telemetry("g1", D1, 48, 80),
    }, boundary={"name": "custom", "categories": ["gpu_rental", "other"]})
    only(d, "direct", 20.0)


# -------------------------------------------------------------------------------------- serving


def serving(base_req: list[tuple[int, int, int]], new_req: list[tuple[int, int, int]], cards: list[dict],
            allocs: list[dict], rates: list[dict], by: str = "tenant", owners: tuple[str, str] = ("chat", "chat"),
            **sections) -> diff.Diff:
    """A model `m` served by `platform`; `chat` (or owners[0] in the base period and owners[1] in
    the new one) sends requests (input, cached, output) each day."""
    req = []
    for day, rows, who in ((D1, base_req, owners[0]), (D2, new_req, owners[1])):
        for i, (inp, cached, out) in enumerate(rows):
            req.append({"request_id": f"r-{day.day}-{i}", "ts": day + timedelta(minutes=10 + i), "owner": who,
                        "model": "m", "input_tokens": inp, "cached_input_tokens": cached, "output_tokens": out})
    return run({"inventory": cards, "allocations": allocs, "rates": rates, "requests": req}, by=by, **sections)


def svc(aid: str, gpu: str, start: datetime, end: datetime) -> dict:
    return alloc(aid, gpu, start, end, owner="platform", workload="inference", model="m")


def test_seed000_output_doubled_requests_equal():
    """Seed 000: the same 10 requests both days, output length doubled (100 -> 200 tokens), input
    200 each, no cache. The service scales with the work: one card all day on day 1 ($48), one
    card all day plus a second for 16 h on day 2 (40 GPU-h, $80). Weighted tokens (1, 0.1, 4):
    10 x (200 + 4 x 100) = 6,000 -> 10 x (200 + 4 x 200) = 10,000; cost per weighted token
    48 / 6,000 = 80 / 10,000 = $0.008 on both days. chat pays the model's cost: $48 -> $80.
    Input part 48 x 2,000/6,000 = $16 -> 80 x 2,000/10,000 = $16 (unchanged); output part $32 -> $64:
    requests, input per request and price per token unchanged, output per request 100 -> 200:
    the whole +$32 is output tokens per request. The service owner keeps nothing (all recharged)."""
    d = serving(
        [(200, 0, 100)] * 10, [(200, 0, 200)] * 10,
        [card("s1", D1, D3), card("s2", D2, D2 + timedelta(hours=16))],
        [svc("v1", "s1", D1, D3), svc("v2", "s2", D2, D2 + timedelta(hours=16))],
        [rate(2.0)],
    )
    only(d, "output_per_request", 32.0)
    chat = d.owner("chat")
    assert (chat["base_cost"], chat["new_cost"]) == pytest.approx((48.0, 80.0))
    assert chat["base_requests"] == chat["new_requests"] == 10
    out = d.elements.filter((pl.col("key") == "chat") & (pl.col("kind") == "output")).row(0, named=True)
    assert (out["base_cost"], out["new_cost"], out["output_per_request"]) == pytest.approx((32.0, 64.0, 32.0))
    assert d.owner("platform")["change"] == pytest.approx(0.0)


@pytest.mark.parametrize("by", ["project", "model", "pool"])
def test_seed000_lands_on_output_per_request_in_every_dimension(by):
    """The seed 000 case split by project (chat), by model (m: its requests and its recharged
    cost) and by pool (p: the pool serving m, set against m's requests): the same +$32
    ($48 -> $80, see above), all output tokens per request."""
    d = serving(
        [(200, 0, 100)] * 10, [(200, 0, 200)] * 10,
        [card("s1", D1, D3), card("s2", D2, D2 + timedelta(hours=16))],
        [svc("v1", "s1", D1, D3), svc("v2", "s2", D2, D2 + timedelta(hours=16))],
        [rate(2.0)], by=by,
    )
    only(d, "output_per_request", 32.0)
    key = {"project": "chat", "model": "m", "pool": "p"}[by]
    row = d.owner(key)
    assert (row["base_cost"], row["new_cost"], row["output_per_request"]) == pytest.approx((48.0, 80.0, 32.0))
    assert row["base_requests"] == row["new_requests"] == 10


def test_seed000_under_requests_recharge_is_cost_per_request():
    """The seed 000 fleet with inference_recharge = "requests": the model's cost follows requests
    only, so chat's $48 -> $80 for the same 10 requests is cost per request $4.80 -> $8.00:
    +$32, all cost per request; tokens per request have no effect under this rule (a note says so)."""
    d = serving(
        [(200, 0, 100)] * 10, [(200, 0, 200)] * 10,
        [card("s1", D1, D3), card("s2", D2, D2 + timedelta(hours=16))],
        [svc("v1", "s1", D1, D3), svc("v2", "s2", D2, D2 + timedelta(hours=16))],
        [rate(2.0)], allocation={"inference_recharge": "requests"},
    )
    only(d, "cost_per_request", 32.0)
    assert "cost_per_token" not in effects(d)
    assert any("recharged by requests" in n for n in d.notes)


def test_serving_owners_new_and_gone():
    """The same 10 requests (200 in, 100 out) and the same service ($48, one card all day) both
    days, but `chat` sends them on day 1 and `bot` on day 2. By project: chat is gone (-$48), bot
    is new (+$48), the change is 0 and no factor moved. By model the two days are the same
    requests to m: every effect is 0."""
    args = ([(200, 0, 100)] * 10, [(200, 0, 100)] * 10, [card("s1", D1, D3)], [svc("v1", "s1", D1, D3)],
            [rate(2.0)])
    d = serving(*args, by="project", owners=("chat", "bot"))
    e = effects(d)
    assert (e["gone"], e["new"], d.change) == pytest.approx((-48.0, 48.0, 0.0))
    assert all((v or 0.0) == pytest.approx(0.0) for k, v in e.items() if k not in ("new", "gone"))
    assert (d.owner("chat")["status"], d.owner("bot")["status"]) == ("gone", "new")
    assert (d.owner("bot")["base_requests"], d.owner("bot")["new_requests"]) == (0, 10)
    only(serving(*args, by="model", owners=("chat", "bot")), "requests", 0.0)


def test_requests_only():
    """10 -> 20 identical requests (200 in, 100 out); the service doubles (1 card -> 2 cards,
    24 h): $48 -> $96 at the same $0.008 per weighted token. +$48, all requests."""
    d = serving([(200, 0, 100)] * 10, [(200, 0, 100)] * 20,
                [card("s1", D1, D3), card("s2", D2, D3)],
                [svc("v1", "s1", D1, D3), svc("v2", "s2", D2, D3)], [rate(2.0)])
    only(d, "requests", 48.0)


def test_input_per_request_only():
    """Input 200 -> 400 tokens per request, output 100, 10 requests. Weighted 6,000 -> 10 x (400 +
    400) = 8,000; the service grows to 32 GPU-h on day 2 ($64 = 8,000 x 0.008). Input part
    $16 -> $32, output part $32 -> $32: +$16, all input tokens per request."""
    d = serving([(200, 0, 100)] * 10, [(400, 0, 100)] * 10,
                [card("s1", D1, D3), card("s2", D2, D2 + timedelta(hours=8))],
                [svc("v1", "s1", D1, D3), svc("v2", "s2", D2, D2 + timedelta(hours=8))], [rate(2.0)])
    only(d, "input_per_request", 16.0)


def test_cache_hit_rate_only():
    """Prompt 200 tokens per request both days; day 2 serves half of it from the cache (100
    uncached + 100 cached; hit rate 0 -> 0.5). Weighted 6,000 -> 10 x (100 + 0.1 x 100 + 400) =
    5,100; the service runs 20.4 GPU-h on day 2 ($40.80 = 5,100 x 0.008). Uncached part $16 -> $8
    (factor 1 - h: 1 -> 0.5), cached part $0 -> $0.80 (factor h: 0 -> 0.5), output $32 -> $32.
    -$7.20, all cache hit rate."""
    end = D2 + timedelta(hours=20, minutes=24)
    d = serving([(200, 0, 100)] * 10, [(100, 100, 100)] * 10,
                [card("s1", D1, end)], [svc("v1", "s1", D1, end)], [rate(2.0)])
    only(d, "cache_hit_rate", -7.2)
    serving_parts = d.elements.filter(pl.col("chain") == "serving")
    parts = {r["kind"]: r["cache_hit_rate"] for r in serving_parts.iter_rows(named=True)}
    assert parts == pytest.approx({"input": -8.0, "cached": 0.8, "output": 0.0})


def test_cost_per_token_only():
    """Same requests and tokens both days, one card all day; the rate goes $2 -> $3: model cost
    $48 -> $72 for the same 6,000 weighted tokens. +$24, all cost per token."""
    d = serving([(200, 0, 100)] * 10, [(200, 0, 100)] * 10, [card("s1", D1, D3)], [svc("v1", "s1", D1, D3)],
                [rate(2.0, start=D1, end=D2), rate(3.0, start=D2, end=D3)])
    only(d, "cost_per_token", 24.0)


# ------------------------------------------------------------------------------ owners in and out


def turnover_tables() -> dict:
    """Tenant T: project X holds g1 on day 1 only, Y holds g2 for 12 h on day 2 only, Z holds g3
    both days (each card in service only while held), $2/GPU-h, 80 % util."""
    h12 = D2 + timedelta(hours=12)
    return {
        "inventory": [card("g1", D1, D2), card("g2", D2, h12), card("g3", D1, D3)],
        "allocations": [alloc("x", "g1", D1, D2, owner="X"), alloc("y", "g2", D2, h12, owner="Y"),
                        alloc("z", "g3", D1, D3, owner="Z")],
        "owners": [{"tenant": "T", "project": p} for p in ("X", "Y", "Z")],
        "rates": [rate(2.0)],
        "telemetry": telemetry("g1", D1, 24, 80) + telemetry("g2", D2, 12, 80) + telemetry("g3", D1, 48, 80),
    }


def test_new_and_gone_owners_are_their_own_lines():
    """By project: base X $48 + Z $48 = $96, new Y $24 + Z $48 = $72: -$24. X is gone (-$48),
    Y is new (+$24), Z did not change. No factor effect at all."""
    d = run(turnover_tables(), by="project")
    e = effects(d)
    assert (e["new"], e["gone"]) == pytest.approx((24.0, -48.0))
    assert all((v or 0.0) == pytest.approx(0.0) for k, v in e.items() if k not in ("new", "gone"))
    status = {r["key"]: r["status"] for r in d.owners.filter(pl.col("kind") == "owner").iter_rows(named=True)}
    assert status == {"X": "gone", "Y": "new", "Z": "both"}
    assert d.owner("Y")["tenant"] == "T"
    notes = {r["effect"]: r["note"] for r in d.effects.iter_rows(named=True)}
    assert "Y" in notes["new"] and "X" in notes["gone"]


def test_by_tenant_the_same_change_is_volume():
    """By tenant the three projects are one owner T: 48 allocated GPU-h -> 36 at the same
    efficiency, pool and price: -$24, all volume."""
    d = run(turnover_tables(), by="tenant")
    only(d, "volume", -24.0)


def test_unknown_efficiency_is_not_zero():
    """The volume case without telemetry: activity is unknown in both periods, so the efficiency
    effect is unknown (null, with a note naming the owner), never 0; the +$24 is all volume."""
    d = run({
        "inventory": [card("g1", D1, D1 + timedelta(hours=12)), card("g2", D2, D3)],
        "allocations": [alloc("a1", "g1", D1, D1 + timedelta(hours=12)), alloc("a2", "g2", D2, D3)],
        "rates": [rate(2.0)],
    })
    e = effects(d)
    assert e["efficiency"] is None
    assert e["volume"] == pytest.approx(24.0)
    assert d.owner("team")["efficiency"] is None and not d.owner("team")["efficiency_known"]
    assert any("efficiency effect unknown" in n and "team" in n for n in d.notes)
    assert d.owner("team")["base_active_gpu_hours"] is None


def test_every_dimension_adds_up_on_the_sample_week(comp):
    """The committed sample week, first three days against the last three: for every dimension the
    effects add up to the change, and each total is the period's reconciled input cost."""
    from cost_engine.report import reconciliation

    cfg = comp.config
    tz = cfg.period.timezone
    a = compute(comp.bundle, compare.period_config(cfg, diff.parse_span("2026-10-05..2026-10-07", tz)))
    b = compute(comp.bundle, compare.period_config(cfg, diff.parse_span("2026-10-09..2026-10-11", tz)))
    for by in diff.BY:
        d = compare.compare_periods(a, b, by=by)
        assert_exact(d)
        assert d.base_total == pytest.approx(reconciliation(a)["input_cost"], rel=1e-9)
        assert d.new_total == pytest.approx(reconciliation(b)["input_cost"], rel=1e-9)


# ----------------------------------------------------------------------------------- periods


def test_parse_span_forms():
    """Dates are whole days in the period's zone, both included; a month is its calendar month;
    timestamps are half-open instants."""
    s, e = diff.parse_span("2026-10-01..2026-10-31", "Europe/Berlin")
    assert s == datetime(2026, 9, 30, 22, tzinfo=timezone.utc)  # CEST, UTC+2
    assert e == datetime(2026, 10, 31, 23, tzinfo=timezone.utc)  # CET from 25 October, UTC+1
    assert diff.parse_span("2026-12", "UTC") == (datetime(2026, 12, 1, tzinfo=timezone.utc),
                                                  datetime(2027, 1, 1, tzinfo=timezone.utc))
    assert diff.parse_span("2026-10-01T06:00:00Z..2026-10-01T18:00:00+02:00", "UTC") == (
        datetime(2026, 10, 1, 6, tzinfo=timezone.utc), datetime(2026, 10, 1, 16, tzinfo=timezone.utc))
    for bad in ("2026-10-05..2026-10-01", "yesterday", "2026-10-01T00:00..2026-10-02", "2026-13"):
        with pytest.raises(ValueError):
            diff.parse_span(bad, "UTC")


# ---------------------------------------------------------------------------------- property


KEYS, POOLS, CATS, MODELS = ["t1", "t2", "t3"], ["pa", "pb"], ["gpu_rental", "power"], ["m1", "m2"]
money = st.one_of(st.just(0.0), st.floats(0.001, 1e6, allow_nan=False, allow_infinity=False))
hours = st.one_of(st.just(0.0), st.floats(0.01, 1e4, allow_nan=False, allow_infinity=False))
count = st.one_of(st.just(0.0), st.integers(1, 10**7).map(float))


@st.composite
def period_facts(draw) -> diff.PeriodFacts:
    gpu = [(k, p, "acc-" + p, c, part, draw(money)) for k in KEYS for p in POOLS for c in CATS
           for part in ("own", "idle") if draw(st.booleans())]
    hrs = []
    for k in KEYS:
        for p in POOLS:
            if draw(st.booleans()):
                alloc_h, cov = draw(hours), draw(st.floats(0, 1))
                hrs.append((k, p, "acc-" + p, alloc_h, alloc_h * cov, alloc_h * cov * draw(st.floats(0, 1))))
    serve = [(k, m, draw(money)) for k in KEYS for m in MODELS if draw(st.booleans())]
    use = [(k, m, draw(count), draw(count), draw(count), draw(count))
           for k in KEYS for m in MODELS if draw(st.booleans())]
    direct = [(k, draw(money)) for k in KEYS if draw(st.booleans())]
    return diff.PeriodFacts(
        gpu_cost=pl.DataFrame(gpu, schema=diff.GPU_COST_SCHEMA, orient="row"),
        gpu_hours=pl.DataFrame(hrs, schema=diff.GPU_HOURS_SCHEMA, orient="row"),
        serving_cost=pl.DataFrame(serve, schema=diff.SERVING_COST_SCHEMA, orient="row"),
        serving_use=pl.DataFrame(use, schema=diff.SERVING_USE_SCHEMA, orient="row"),
        direct=pl.DataFrame(direct, schema=diff.DIRECT_SCHEMA, orient="row"),
        idle=draw(money), unattributed=draw(money),
    )


@settings(max_examples=150, deadline=None)
@given(period_facts(), period_facts(), st.sampled_from(["tokens", "requests", "none"]),
       st.tuples(st.floats(0, 5), st.floats(0, 5), st.floats(0, 5)))
def test_effects_always_add_up_to_the_change(base, new, recharge, weights):
    """Whatever the periods hold (zeros, owners appearing and vanishing, unknown activity, costs no
    factor explains), the effects sum to new - base within 1e-9 of the larger total, per owner too."""
    d = diff.decompose(base, new, recharge=recharge, token_weights=weights)
    assert d.change == new.total - base.total
    total = float(d.effects["value"].fill_null(0.0).sum())
    scale = max(1.0, abs(base.total), abs(new.total))
    assert abs(total - d.change) <= 1e-9 * scale
    assert all(math.isfinite(v) for v in d.effects["value"].drop_nulls().to_list())
    keys = d.effects["effect"].to_list()
    for r in d.owners.iter_rows(named=True):
        assert abs(sum(r[k] or 0.0 for k in keys) - r["change"]) <= 1e-9 * scale


def test_waterfall_chart_from_base_to_new():
    """The unknown-efficiency case drawn: base $24, one relative bar (volume +24), new $48; the
    unknown efficiency is named under the chart, not drawn as a 0 bar."""
    from cost_engine import charts

    d = run({
        "inventory": [card("g1", D1, D1 + timedelta(hours=12)), card("g2", D2, D3)],
        "allocations": [alloc("a1", "g1", D1, D1 + timedelta(hours=12)), alloc("a2", "g2", D2, D3)],
        "rates": [rate(2.0)],
    })
    fig = charts.waterfall(compare.effect_summary(d), d.base_total, d.new_total, "USD", "base", "period")
    w = charts.figure_spec(fig)["data"][0]
    assert w["type"] == "waterfall"
    assert list(w["x"]) == ["base", "Volume", "period"]
    assert list(w["measure"]) == ["absolute", "relative", "total"]
    assert list(w["y"]) == pytest.approx([24.0, 24.0, 48.0])
    notes = [a["text"] for a in charts.figure_spec(fig)["layout"]["annotations"]]
    assert any("unknown, not drawn: Efficiency" in t for t in notes)
